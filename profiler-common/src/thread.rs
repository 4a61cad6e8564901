//! Per thread: its THREADS entry (its time bookkeeping and the wait it is in) and the record
//! the task iterator writes for it when the capture starts.

use crate::{kernel::COMM_LEN, stack::MAX_STACK_DEPTH};

/// Value of [`crate::names::MAP_THREADS`]: everything kept per thread, in one entry so that each
/// side of a context switch looks a thread up once.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Thread {
    pub stats: ThreadStats,
    /// Open while `wait.ts_ns != 0`.
    pub wait: WaitStart,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C) of two Pod structs whose sizes are multiples of 8: no padding.
unsafe impl aya::Pod for Thread {}

/// A thread's name and time bookkeeping ([`Thread::stats`]).
///
/// Time is accounted per *cycle*: from one switch-out of the thread to the next (the first
/// cycle starts at the window start, or when the thread was created). See [`crate::split_cycle`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadStats {
    pub comm: [u8; COMM_LEN],
    /// On-CPU time inside the window as the scheduler charges it (`se.sum_exec_runtime`),
    /// over the cycles closed so far.
    pub on_cpu_ns: u64,
    /// Of those cycles, the time between each switch-in and the following switch-out as the
    /// tracepoint saw them: what samples can see. The kernel also charges a woken thread for
    /// the time its CPU takes to switch to it (see ARCHITECTURE.md, "Time rules").
    pub traced_on_ns: u64,
    /// Time of the profiler's own programs that the kernel charged to this thread.
    pub overhead_ns: u64,
    /// Time the thread held its CPU that the scheduler charged neither as its CPU time nor
    /// as its run-queue wait: the hypervisor running another guest on that CPU (steal), or
    /// interrupts where the kernel accounts their time apart. See [`crate::Cycle::uncharged_ns`].
    pub uncharged_ns: u64,
    /// Last switch-in (0: none seen).
    pub last_in_ns: u64,
    /// Last switch-out, or where the current cycle began (window start, thread creation);
    /// 0: no cycle begun.
    pub last_out_ns: u64,
    /// Context switches out of the CPU.
    pub switches: u64,
    /// `se.sum_exec_runtime` and `sched_info.run_delay` as far as the closed cycles used them
    /// (valid with [`thread_flags::BASELINE`]): the counters at `last_out_ns`, less what the
    /// last cycles could not take (left for the next), or more by what a preemption's CPU
    /// share took ahead of the counter (repaid by the next). Once the thread exited
    /// ([`thread_flags::EXITED`]), `last_exec_ns` is instead what its cycles counted ahead of
    /// `sum_exec_runtime` at its end, as an `i64` (never repaid: see [`exit_overcount_ns`]).
    pub last_exec_ns: u64,
    pub last_delay_ns: u64,
    /// Bit set of [`thread_flags`].
    pub flags: u32,
    /// The thread's process.
    pub tgid: u32,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), byte array of 16, u64 fields, two u32: no padding.
unsafe impl aya::Pod for ThreadStats {}

/// CPU time an exited thread's cycles counted beyond what the scheduler charged it (its
/// `last_exec_ns` at exit, read as signed; 0 when they counted less or it has not exited).
pub const fn exit_overcount_ns(stats: &ThreadStats) -> u64 {
    if stats.flags & thread_flags::EXITED == 0 {
        return 0;
    }
    let over = stats.last_exec_ns as i64;
    if over > 0 { over as u64 } else { 0 }
}

pub mod thread_flags {
    /// `last_exec_ns`/`last_delay_ns` are the scheduler's counters at `last_out_ns`: the
    /// cycle now running is split by the kernel's own accounting.
    pub const BASELINE: u32 = 1 << 0;
    /// The thread exited (its last switch-out had it dead): nothing after `last_out_ns`.
    pub const EXITED: u32 = 1 << 1;
}

/// The wait a thread is in right now ([`Thread::wait`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitStart {
    /// `bpf_ktime_get_ns()` at switch-out (CLOCK_MONOTONIC).
    pub ts_ns: u64,
    pub user_stack: u64,
    pub kernel_stack: u64,
    /// A [`crate::WaitState`].
    pub state: u32,
    /// Bit set of [`wait_flags`].
    pub flags: u32,
    /// When `sched_waking` began to make the thread runnable again (0 = not seen: preempted,
    /// or the wakeup was missed); from here until switch-in it waits for a CPU.
    pub wake_ts_ns: u64,
    /// Which thread woke it (0: an interrupt).
    pub waker_tid: u32,
    pub waker_tgid: u32,
    pub waker_comm: [u8; COMM_LEN],
    /// The waker's stacks (with [`crate::config_flags::WAKER_STACKS`]; otherwise `stack_id::EMPTY`,
    /// but for a short kernel stack of a hard interrupt, which tells a timer).
    pub waker_user_stack: u64,
    pub waker_kernel_stack: u64,
    /// A [`crate::waker_context`] value.
    pub waker_context: u32,
    pub _pad: u32,
    /// What it waits on ([`crate::Resource`]'s id; 0: no fd, or not recorded).
    pub resource: u64,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only integer fields, explicit padding.
unsafe impl aya::Pod for WaitStart {}

pub mod wait_flags {
    /// Inserted by user space from the start-of-capture snapshot.
    pub const SNAPSHOT: u32 = 1 << 0;
    /// Begun by a preemption of a task already in a sleep state (see
    /// [`classify_switch`](crate::classify_switch)): its time counts in its state, but it is
    /// no wait of its own — not in the site's count, minimum, maximum or histogram.
    pub const PREEMPTED_ASLEEP: u32 = 1 << 1;
}

/// One record written by the task iterator ([`crate::names::PROG_SNAPSHOT`]) for every thread of
/// the target when the capture starts.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TaskSnapshot {
    pub tid: u32,
    /// `task_struct::__state`.
    pub state: u32,
    pub comm: [u8; COMM_LEN],
    /// `se.sum_exec_runtime` and `sched_info.run_delay`: where the thread's first cycle
    /// starts counting.
    pub exec_ns: u64,
    pub run_delay_ns: u64,
    /// `task_struct::on_cpu`: running right now (else, if runnable, waiting on a run queue).
    pub on_cpu: u32,
    /// Its process.
    pub tgid: u32,
    /// User registers saved at kernel entry (`task_pt_regs`): where user code stopped.
    pub user_ip: u64,
    pub user_sp: u64,
    pub user_bp: u64,
    /// Number of valid kernel frames.
    pub kernel_len: u64,
    pub kernel_frames: [u64; MAX_STACK_DEPTH],
}
