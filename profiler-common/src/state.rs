//! Why a thread is off the CPU: the [`WaitState`] a switch-out's task state means, and where
//! a wakeup ran ([`waker_context`]).

use crate::kernel::task_state;

/// Why a thread is off the CPU. Stored as `u32` in the wire types.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum WaitState {
    /// Interruptible sleep: sockets, futexes, epoll, nanosleep.
    Sleep = 1,
    /// Uninterruptible sleep: disk I/O, fsync, page faults, some kernel locks.
    Io = 2,
    /// Switched out while still runnable: preempted or yielded; waiting for a CPU.
    RunqueuePreempted = 3,
    /// Woken from a sleep and waiting for a CPU (filled in by the wakeup slot).
    RunqueueWoken = 4,
    /// Stopped, traced, parked, frozen.
    Other = 5,
}

impl WaitState {
    pub const ALL: [WaitState; 5] = [
        WaitState::Sleep,
        WaitState::Io,
        WaitState::RunqueuePreempted,
        WaitState::RunqueueWoken,
        WaitState::Other,
    ];

    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Sleep),
            2 => Some(Self::Io),
            3 => Some(Self::RunqueuePreempted),
            4 => Some(Self::RunqueueWoken),
            5 => Some(Self::Other),
            _ => None,
        }
    }

    /// The word used in `[off-cpu:<word>]` frames; both run-queue kinds fold together.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Sleep => "sleep",
            Self::Io => "io",
            Self::RunqueuePreempted | Self::RunqueueWoken => "runqueue",
            Self::Other => "other",
        }
    }
}

/// A switch-out of a task that is exiting: it never switches back in.
#[inline(always)]
pub const fn is_exiting(prev_state: u32) -> bool {
    use task_state::*;
    prev_state & (DEAD | EXIT_DEAD | EXIT_ZOMBIE) != 0
}

/// Classifies a switch-out from `sched_switch`'s `prev_state` argument.
/// `None`: the task is exiting and will never switch back in.
///
/// Only a task still in TASK_RUNNING waits for a CPU. A task preempted between set_current_state()
/// and schedule() stays on the run queue, but it was on its way to the sleep its state word names,
/// and the kernel counts that time as neither CPU nor run-queue time (`sched_info_depart` starts a
/// run-queue wait only for a running task): it is that sleep's time, as
/// `/proc/<pid>/task/<tid>/schedstat` has it. [`crate::wait_flags::PREEMPTED_ASLEEP`] marks such a
/// wait: not a wait of its own (the real one follows, or its wakeup came first).
#[inline(always)]
pub const fn classify_switch(prev_state: u32) -> Option<WaitState> {
    use task_state::*;
    if is_exiting(prev_state) {
        return None;
    }
    if prev_state == RUNNING {
        return Some(WaitState::RunqueuePreempted);
    }
    // TASK_IDLE (UNINTERRUPTIBLE | NOLOAD) is an idle wait that the kernel itself keeps out of
    // the load average: a sleep, not I/O.
    if prev_state & UNINTERRUPTIBLE != 0 && prev_state & NOLOAD == 0 {
        return Some(WaitState::Io);
    }
    if prev_state & (INTERRUPTIBLE | UNINTERRUPTIBLE | RTLOCK_WAIT) != 0 {
        return Some(WaitState::Sleep);
    }
    Some(WaitState::Other)
}

/// Where a wakeup ran (`WaitStart::waker_context`, `WakerKey::waker_context`).
pub mod waker_context {
    /// Not known (the preempt count could not be read): the waker's kernel stack decides.
    pub const UNKNOWN: u32 = 0;
    /// A thread woke the sleeper.
    pub const TASK: u32 = 1;
    /// Softirq processing (packets, timer wheel, block completions) on whatever task the CPU
    /// was running: that task did not wake anyone.
    pub const SOFTIRQ: u32 = 2;
    /// A hard interrupt or NMI (hrtimers expire here: nanosleep, epoll timeouts).
    pub const HARDIRQ: u32 = 3;

    /// `include/linux/preempt.h`: bits 8–15 count softirqs (bit 8: one is being served, the
    /// rest: bottom halves disabled), 16–19 hard interrupts, 20–23 NMIs. x86 keeps an inverted
    /// need-resched flag in bit 31, ignored here.
    const SOFTIRQ_OFFSET: u32 = 1 << 8;
    const HARDIRQ_MASK: u32 = 0xf << 16;
    const NMI_MASK: u32 = 0xf << 20;

    /// The context a preempt count stands for.
    #[inline(always)]
    pub const fn from_preempt_count(count: u32) -> u32 {
        if count & (HARDIRQ_MASK | NMI_MASK) != 0 {
            HARDIRQ
        } else if count & SOFTIRQ_OFFSET != 0 {
            SOFTIRQ
        } else {
            TASK
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preempt_count_tells_task_softirq_and_hardirq() {
        use waker_context::*;
        // Preemption or bottom halves disabled in a task, need-resched clear (bit 31 set).
        assert_eq!(from_preempt_count(0), TASK);
        assert_eq!(from_preempt_count(0x8000_0002), TASK);
        assert_eq!(from_preempt_count(0x200), TASK);
        // Serving a softirq (bit 8), possibly with more disable levels on top.
        assert_eq!(from_preempt_count(0x100), SOFTIRQ);
        assert_eq!(from_preempt_count(0x8000_0301), SOFTIRQ);
        // A hard interrupt, or an NMI, over anything.
        assert_eq!(from_preempt_count(0x1_0000), HARDIRQ);
        assert_eq!(from_preempt_count(0x1_0101), HARDIRQ);
        assert_eq!(from_preempt_count(0x10_0000), HARDIRQ);
    }

    #[test]
    fn classify_covers_the_states_seen_at_sched_switch() {
        use task_state::*;
        assert_eq!(classify_switch(INTERRUPTIBLE), Some(WaitState::Sleep));
        assert_eq!(classify_switch(UNINTERRUPTIBLE), Some(WaitState::Io));
        // TASK_KILLABLE = WAKEKILL | UNINTERRUPTIBLE: still an uninterruptible wait.
        assert_eq!(
            classify_switch(0x100 | UNINTERRUPTIBLE),
            Some(WaitState::Io)
        );
        // TASK_IDLE
        assert_eq!(
            classify_switch(UNINTERRUPTIBLE | NOLOAD),
            Some(WaitState::Sleep)
        );
        assert_eq!(classify_switch(RUNNING), Some(WaitState::RunqueuePreempted));
        assert_eq!(classify_switch(0x4), Some(WaitState::Other));
        assert_eq!(classify_switch(DEAD), None);
    }
}
