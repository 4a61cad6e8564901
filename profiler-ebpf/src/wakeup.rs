//! Wakeups (tp_btf `sched_wakeup`, `sched_wakeup_new`): the moment a target thread's sleep
//! ends and its wait for a CPU begins, and who ended it. Recorded in the thread's wait slot;
//! `switch` splits the wait and credits the waker when the thread runs again.

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use profiler_common::{COMM_LEN, Counter, WaitStart, WaitState, config_flags};

use crate::{
    config,
    maps::{Scratch, WAIT_START, capture_start, count},
    stack,
    switch::load,
};

const NOEXIST: u64 = 1;

/// `TP_PROTO(struct task_struct *p)` for both tracepoints.
const ARG_TASK: usize = 0;

#[btf_tracepoint(function = "sched_wakeup")]
pub fn sched_wakeup(ctx: BtfTracePointContext) -> u32 {
    on_wakeup(&ctx, false);
    0
}

/// A new thread's first wakeup: from here until it first runs it waits for a CPU.
#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn sched_wakeup_new(ctx: BtfTracePointContext) -> u32 {
    on_wakeup(&ctx, true);
    0
}

#[inline(always)]
fn on_wakeup(ctx: &BtfTracePointContext, new: bool) {
    let cfg = config();
    let task: *const u8 = ctx.arg(ARG_TASK);
    // SAFETY: `task` is a live task_struct; offsets come from this kernel's BTF.
    let tgid: u32 = unsafe { load(task, cfg.task_tgid_offset) };
    // Wakeups of every task on the machine come here: foreign ones leave now.
    if tgid != cfg.target_tgid || capture_start().is_none() {
        return;
    }
    // SAFETY: as above.
    let tid: u32 = unsafe { load(task, cfg.task_pid_offset) };
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    count(Counter::Wakeups);
    let waker = bpf_get_current_pid_tgid();
    let waker_comm = bpf_get_current_comm().unwrap_or([0; COMM_LEN]);
    // The kernel stack always: it tells a timer or an interrupt from a thread that really
    // woke the target (the "current" task then is just whatever the CPU was running).
    let (waker_user_stack, waker_kernel_stack) = stack::waker_stacks(
        ctx,
        Scratch::Wakeup,
        cfg.flags & config_flags::WAKER_STACKS != 0,
    );

    if new {
        let start = WaitStart {
            ts_ns: now,
            state: WaitState::RunqueueWoken as u32,
            wake_ts_ns: now,
            waker_tid: waker as u32,
            waker_tgid: (waker >> 32) as u32,
            waker_comm,
            waker_user_stack,
            waker_kernel_stack,
            ..WaitStart::default()
        };
        let _ = WAIT_START.insert(&tid, &start, NOEXIST);
        return;
    }
    let Some(slot) = WAIT_START.get_ptr_mut(&tid) else {
        return;
    };
    // SAFETY: the wakee is off the CPU; only its wakeup and its next switch-in touch the slot,
    // and the scheduler orders those.
    let slot = unsafe { &mut *slot };
    let sleeping = slot.state == WaitState::Sleep as u32
        || slot.state == WaitState::Io as u32
        || slot.state == WaitState::Other as u32;
    if slot.ts_ns == 0 || slot.wake_ts_ns != 0 || !sleeping {
        return;
    }
    slot.wake_ts_ns = now;
    slot.waker_tid = waker as u32;
    slot.waker_tgid = (waker >> 32) as u32;
    slot.waker_comm = waker_comm;
    slot.waker_user_stack = waker_user_stack;
    slot.waker_kernel_stack = waker_kernel_stack;
}
