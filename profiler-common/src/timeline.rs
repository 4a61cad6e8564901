//! The timeline's records in the TIMELINE ring: a wait at least the resolution long, an
//! on-CPU sample, each with its time.

/// What a timeline record is: the first field of every record in
/// [`crate::names::MAP_TIMELINE`].
pub mod timeline_kind {
    /// A [`super::TimelineWait`].
    pub const WAIT: u32 = 1;
    /// A [`super::TimelineSample`].
    pub const SAMPLE: u32 = 2;
    /// A [`super::TimelineGoWait`].
    pub const GO_WAIT: u32 = 3;
}

/// A timeline record: one wait of a target thread at least `Config::timeline_min_ns` long,
/// written by `sched_switch` at the switch-out that closes its cycle. The wait is blocked
/// (in `state`) for `blocked_ns` from `start_ns`, then runnable for `runnable_ns` (a wait for
/// a CPU from the start, `state` a run-queue state, is all `runnable_ns`): the same split
/// the aggregates have, from the scheduler's own counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelineWait {
    /// [`timeline_kind::WAIT`].
    pub kind: u32,
    pub tid: u32,
    /// The switch-out that began the wait (CLOCK_MONOTONIC; the window start for a wait the
    /// start snapshot seeded).
    pub start_ns: u64,
    pub blocked_ns: u64,
    pub runnable_ns: u64,
    pub user_stack: u64,
    pub kernel_stack: u64,
    /// The thread's CPU time in the window before the wait began (`ThreadStats::on_cpu_ns`
    /// then): between two records of a thread, the difference is its CPU time, the rest its
    /// shorter waits.
    pub cpu_before_ns: u64,
    /// A [`crate::WaitState`].
    pub state: u16,
    /// Bit set of [`crate::wait_flags`].
    pub flags: u16,
    /// Who made it runnable (0: an interrupt, or not seen).
    pub waker_tid: u32,
    /// When the waker made it runnable (`sched_waking`; 0: not seen). It can come well before
    /// `start_ns + blocked_ns`, which is when the scheduler queued the thread: a wakee on
    /// another CPU is queued by that CPU's IPI handler, hundreds of µs later when the CPU is
    /// an idle vCPU.
    pub waking_ns: u64,
    /// What it waited on: `WaitKey::resource`'s class id (0: no fd, or not recorded).
    pub resource: u64,
}

/// A timeline record: one on-CPU sample of a target thread, with its time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelineSample {
    /// [`timeline_kind::SAMPLE`].
    pub kind: u32,
    pub tid: u32,
    pub ts_ns: u64,
    pub user_stack: u64,
    pub kernel_stack: u64,
}

/// A timeline record: one goroutine wait of a Go target at least `Config::timeline_min_ns`
/// long, written by `go_park` when the goroutine's next park closes it (`GoPark`); the waits
/// still open when the window closes are added by user space from `GO_PARKED`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelineGoWait {
    /// [`timeline_kind::GO_WAIT`].
    pub kind: u32,
    pub tgid: u32,
    /// The goroutine's `g` pointer: one goroutine's waits do not overlap.
    pub g: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub user_stack: u64,
    /// The runtime's `waitReason`.
    pub reason: u32,
    pub _pad: u32,
}
