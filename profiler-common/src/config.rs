//! What user space tells the programs: the load-time [`Config`] (one global, with its
//! [`config_flags`]) and the capture window and drain epoch in the one-entry CONTROL map.

/// Load-time configuration of the eBPF programs, one global.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Words of the target bitmap (`MAP_TARGETS`): process ids up to `64 * target_words`.
    pub target_words: u32,
    /// `offsetof(struct task_struct, pid)`, read from the running kernel's BTF: Rust eBPF has
    /// no CO-RE relocations, so user space resolves field offsets and hands them in.
    pub task_pid_offset: u32,
    /// `offsetof(struct task_struct, tgid)`.
    pub task_tgid_offset: u32,
    /// `offsetof(struct task_struct, comm)`.
    pub task_comm_offset: u32,
    /// `offsetof(struct task_struct, __state)`.
    pub task_state_offset: u32,
    /// `offsetof(struct task_struct, se.sum_exec_runtime)`: the thread's CPU time, kept by the
    /// scheduler itself.
    pub task_exec_offset: u32,
    /// `offsetof(struct task_struct, se.cfs_rq)`: the CFS run queue a task is on (this
    /// CPU's, or its task group's on this CPU, for the current task).
    pub task_cfs_rq_offset: u32,
    /// `offsetof(struct cfs_rq, rq)`: the CPU's run queue.
    pub cfs_rq_rq_offset: u32,
    /// Offsets of the per-CPU variables `runqueues` and `__preempt_count` in the per-CPU area
    /// (`.data..percpu` in BTF): `rq - runqueues + __preempt_count` is this CPU's preempt
    /// count, which says whether a wakeup runs in a task or in an interrupt.
    pub percpu_runqueues: u32,
    pub percpu_preempt_count: u32,
    /// `offsetof(struct task_struct, sched_info.run_delay)`: the thread's time waiting on a
    /// run queue, kept by the scheduler itself (CONFIG_SCHED_INFO).
    pub task_run_delay_offset: u32,
    /// `offsetof(struct task_struct, on_cpu)`: whether a runnable task is on a CPU right now.
    pub task_on_cpu_offset: u32,
    /// Bit set of [`config_flags`].
    pub flags: u32,
    /// `offsetof(struct task_struct, start_time)`: when the task was created (CLOCK_MONOTONIC,
    /// `bpf_ktime_get_ns`'s clock).
    pub task_start_time_offset: u32,
    /// Waits shorter than this are not aggregated (the user's shortest wait).
    pub min_block_ns: u64,
    /// Waits longer than this are not aggregated (the user's longest wait); `u64::MAX` = no
    /// limit.
    pub max_block_ns: u64,
    /// With [`config_flags::TIMELINE`]: waits at least this long (blocked and runnable
    /// together) are written to the timeline one by one (its resolution).
    pub timeline_min_ns: u64,
    /// With [`config_flags::RESOURCES`]: where a wait's fd is named.
    pub fd: crate::FdOffsets,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only integer fields, no padding holes.
unsafe impl aya::Pod for Config {}

/// Address ranges of interrupt entry code handed to the waker probe (see
/// [`crate::names::GLOBAL_IRQ_ENTRY`]).
pub const IRQ_ENTRY_RANGES: usize = 4;

pub mod config_flags {
    /// Take user stacks.
    pub const USER_STACKS: u32 = 1 << 0;
    /// Take kernel stacks.
    pub const KERNEL_STACKS: u32 = 1 << 1;
    /// Take the stacks of wakers (the wakeup chains are drawn).
    pub const WAKER_STACKS: u32 = 1 << 2;
    /// Unwind user stacks with the `.eh_frame` rows (frame pointers where there are none).
    pub const DWARF_UNWIND: u32 = 1 << 3;
    /// The preempt-count offsets in [`super::Config`] are valid.
    pub const PREEMPT_COUNT: u32 = 1 << 4;
    /// Context switches are traced (wall-clock and off-CPU modes): thread entries are created by
    /// the switch programs and the start snapshot, which give them their time baseline; the sampler
    /// only names threads it finds there.
    pub const SWITCHES: u32 = 1 << 5;
    /// Unwind every stack even when a memo recognises it, and count disagreements
    /// (for tests).
    pub const VERIFY_MEMOS: u32 = 1 << 6;
    /// A target's new processes join the target set (unless only the named ones are profiled).
    pub const FOLLOW_CHILDREN: u32 = 1 << 7;
    /// Write the timeline: each wait of at least `Config::timeline_min_ns` and each on-CPU
    /// sample, with its time, to [`crate::names::MAP_TIMELINE`] (when an output needs the
    /// timeline and it is not turned off).
    pub const TIMELINE: u32 = 1 << 8;
    /// Wakers are not recorded (turned off by the user): `sched_waking` is neither loaded nor
    /// attached, `sched_switch` credits no waker and `sched_wakeup_new` (still attached: it
    /// starts a new thread's first cycle) names none. `WAKERS` is one entry.
    pub const NO_WAKERS: u32 = 1 << 9;
    /// Name the fd a thread blocks on in a system call ([`crate::Resource`]): the offsets in
    /// [`super::Config::fd`] are valid.
    pub const RESOURCES: u32 = 1 << 10;
}

/// The single entry of [`crate::names::MAP_CONTROL`]. Programs do nothing until `start_ns` is set
/// and nothing after `stop_ns` is set, so every program observes the same window and user space
/// drains maps that no longer change.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Control {
    pub start_ns: u64,
    pub stop_ns: u64,
    /// Drain epoch: the aggregate tables' keys carry its parity (`epoch & 1`). User space
    /// drains the tables while the capture runs: it bumps the epoch, and a tick later, when no
    /// program can still be writing them, reads and deletes the keys of the other parity. So
    /// the tables hold what happens between two drains, not the whole window.
    pub epoch: u64,
}

impl Control {
    /// The parity the programs put in the keys they write now.
    pub const fn parity(&self) -> u32 {
        (self.epoch & 1) as u32
    }
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only u64 fields.
unsafe impl aya::Pod for Control {}
