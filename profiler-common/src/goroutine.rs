//! Goroutine waits of Go targets: uprobes on the Go runtime's `runtime.gopark` (a goroutine
//! parks) and `runtime.execute` (the scheduler runs a goroutine again) pair each park with the
//! run that ends it, by the goroutine's `g` pointer. A Go service's request blocked on an
//! upstream is a parked goroutine while its OS thread runs others or sleeps in the runtime:
//! the thread-level view calls it idle.

/// A goroutine's last wait, in [`crate::names::MAP_GO_PARKED`] keyed by its `g` pointer:
/// parked (`end_ns` 0) until `runtime.execute` runs it again, then kept until its next park
/// decides whether that park continues it (same stack and reason within
/// [`GO_REPARK_NS`]: a `select` in a loop woken by one case and parked again for the next)
/// or it is done and goes to [`crate::names::MAP_GO_WAITS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoPark {
    /// When it parked (CLOCK_MONOTONIC).
    pub ts_ns: u64,
    /// When the scheduler ran it again; 0 while parked.
    pub end_ns: u64,
    /// Its goroutine stack at `runtime.gopark` (frame pointers and `.debug_frame` rows).
    pub user_stack: u64,
    pub tgid: u32,
    /// The runtime's `waitReason` (an index of the binary's `runtime.waitReasonStrings`).
    pub reason: u32,
}

/// A goroutine parking again at the same place within this long after it ran continues its
/// wait, for the reasons [`GO_MERGED_REASONS`] names: `net/http`'s round trip wakes on the
/// request written, loops, and parks for the response; one request is one wait.
pub const GO_REPARK_NS: u64 = 100_000;

/// The runtime's wait reasons (their names) whose re-park continues a wait: a `select` or a
/// poll in a loop, a mutex's semaphore after a lost race. Not `sleep`, nor channel
/// operations (each item of a pipeline is a wait of its own).
pub const GO_MERGED_REASONS: &[&str] = &[
    "select",
    "IO wait",
    "semacquire",
    "sync.Mutex.Lock",
    "sync.RWMutex.Lock",
    "sync.RWMutex.RLock",
];

/// Key of [`crate::names::MAP_GO_WAITS`]: goroutine waits aggregated per process, park stack
/// and wait reason.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GoWaitKey {
    pub tgid: u32,
    pub reason: u32,
    pub user_stack: u64,
}

/// Value of [`crate::names::MAP_GO_WAITS`]: the waits' total, count, longest and histogram
/// (updated with atomic adds: goroutines of one site park on every CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoWaitValue {
    pub total_ns: u64,
    pub count: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub hist: crate::WaitHist,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only integer fields, no padding holes.
unsafe impl aya::Pod for GoPark {}
#[cfg(feature = "aya")]
// SAFETY: repr(C), only integer fields, no padding holes.
unsafe impl aya::Pod for GoWaitKey {}
#[cfg(feature = "aya")]
// SAFETY: repr(C), only integer fields (the histogram's u32 count is even), no padding.
unsafe impl aya::Pod for GoWaitValue {}
