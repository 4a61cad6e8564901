//! Wakeups (tp_btf `sched_waking`, `sched_wakeup_new`): the moment a target thread's sleep
//! ends and its wait for a CPU begins, and who ended it. Recorded in the thread's wait slot;
//! `switch` splits the wait and credits the waker when the thread runs again.
//!
//! With `--no-wakers` (`config_flags::NO_WAKERS`) `sched_waking` is not loaded at all and
//! `sched_wakeup_new` only starts the new thread's first cycle.
//!
//! `sched_waking`, not `sched_wakeup`: it fires in `try_to_wake_up` on the waker's CPU, in the
//! waker's context. `sched_wakeup` fires where the wakee is enqueued, which for a wakee on an
//! idle CPU is that CPU's IPI handler or idle loop, long after the waker has gone.

use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns,
        bpf_probe_read_kernel,
    },
    macros::{btf_tracepoint, map},
    maps::PerCpuArray,
    programs::BtfTracePointContext,
};
use profiler_common::{
    COMM_LEN, Config, Counter, Thread, ThreadStats, WaitStart, WaitState, config_flags, stack_id,
    thread_flags, waker_context,
};

use crate::{
    config,
    maps::{Scratch, THREADS, capture_start, count, insert_thread},
    stack,
    targets::is_target,
    task::load,
    tgid_offset,
};

/// `TP_PROTO(struct task_struct *p)` for both tracepoints.
const ARG_TASK: usize = 0;

#[btf_tracepoint(function = "sched_waking")]
pub fn sched_waking(ctx: BtfTracePointContext) -> u32 {
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
    let task: *const u8 = ctx.arg(ARG_TASK);
    // SAFETY: `task` is a live task_struct; offsets come from this kernel's BTF.
    let tgid: u32 = unsafe { load(task, tgid_offset()) };
    // Wakeups of every task on the machine come here: foreign ones leave now.
    if !is_target(tgid) || capture_start().is_none() {
        return;
    }
    let cfg = config();
    // SAFETY: as above.
    let tid: u32 = unsafe { load(task, cfg.task_pid_offset) };
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    count(Counter::Wakeups);

    if new {
        // `--no-wakers`: only the new thread's first cycle is recorded (a load-time constant:
        // the verifier walks one side of this branch).
        let no_wakers = cfg.flags & config_flags::NO_WAKERS != 0;
        let waker = if no_wakers {
            Waker::NONE
        } else {
            waker(ctx, &cfg)
        };
        let start = WaitStart {
            ts_ns: now,
            state: WaitState::RunqueueWoken as u32,
            wake_ts_ns: now,
            ..WaitStart::default()
        };
        // Its first cycle begins now, from the scheduler's counters as they are (a new task
        // starts them at zero, and is already queued).
        // SAFETY: `task` is a live task_struct; offsets come from this kernel's BTF.
        let (exec_ns, delay_ns): (u64, u64) = unsafe {
            (
                load(task, cfg.task_exec_offset),
                load(task, cfg.task_run_delay_offset),
            )
        };
        let wait = waker.recorded_in(start);
        match THREADS.get_ptr_mut(&tid) {
            // A reused tid: the thread that had it exited; its time stays, and this one's
            // adds to it from here.
            // SAFETY: a new thread has no other events yet, and the old one is gone.
            Some(thread) => unsafe {
                let stats = &mut (*thread).stats;
                stats.last_out_ns = now;
                stats.last_exec_ns = exec_ns;
                stats.last_delay_ns = delay_ns;
                stats.flags = thread_flags::BASELINE;
                stats.tgid = tgid;
                (*thread).wait = wait;
            },
            None => {
                // Its name is read at its first switch-in.
                let thread = Thread {
                    stats: ThreadStats {
                        last_out_ns: now,
                        last_exec_ns: exec_ns,
                        last_delay_ns: delay_ns,
                        flags: thread_flags::BASELINE,
                        tgid,
                        ..ThreadStats::default()
                    },
                    wait,
                };
                insert_thread(tid, &thread);
            }
        }
        if !no_wakers {
            charge_waker(&waker, now);
        }
        return;
    }
    let Some(thread) = THREADS.get_ptr_mut(&tid) else {
        return;
    };
    // SAFETY: only the wakee's switch events and its wakeups touch the slot. `sched_waking`
    // can run while the wakee is still switching out on another CPU (try_to_wake_up waits
    // for that switch to finish only after the tracepoint); then the slot is not open yet, or
    // the switch-out rewrites it: the waker is lost, never a wrong one credited (the
    // split of the wait into blocked and runnable time comes from the scheduler's counters,
    // not from this time).
    let thread = unsafe { &mut *thread };
    let slot = &mut thread.wait;
    let sleeping = slot.state == WaitState::Sleep as u32
        || slot.state == WaitState::Io as u32
        || slot.state == WaitState::Other as u32;
    // A wait stays in the slot until the next switch-out; once the thread has switched in,
    // a wakeup belongs to a wait that has not begun yet.
    let running_again = thread.stats.last_in_ns > slot.ts_ns;
    if slot.ts_ns == 0 || slot.wake_ts_ns != 0 || !sleeping || running_again {
        return;
    }
    let waker = waker(ctx, &cfg);
    *slot = waker.recorded_in(WaitStart {
        wake_ts_ns: now,
        ..*slot
    });
    charge_waker(&waker, now);
}

/// A target thread waking another runs this program on its own CPU time: that time is
/// reported as the profiler's, not as the thread's work.
#[inline(always)]
fn charge_waker(waker: &Waker, started: u64) {
    if !is_target((waker.pid_tgid >> 32) as u32) {
        return;
    }
    if let Some(thread) = THREADS.get_ptr_mut(&(waker.pid_tgid as u32)) {
        // SAFETY: the waker is the current task: no other program writes its stats now.
        unsafe {
            (*thread).stats.overhead_ns += bpf_ktime_get_ns().saturating_sub(started);
        }
    }
}

/// Who is waking a target thread.
struct Waker {
    pid_tgid: u64,
    comm: [u8; COMM_LEN],
    user_stack: u64,
    kernel_stack: u64,
    context: u32,
}

impl Waker {
    /// No waker named (`--no-wakers`).
    const NONE: Waker = Waker {
        pid_tgid: 0,
        comm: [0; COMM_LEN],
        user_stack: stack_id::EMPTY,
        kernel_stack: stack_id::EMPTY,
        context: waker_context::UNKNOWN,
    };

    #[inline(always)]
    fn recorded_in(&self, slot: WaitStart) -> WaitStart {
        WaitStart {
            waker_tid: self.pid_tgid as u32,
            waker_tgid: (self.pid_tgid >> 32) as u32,
            waker_comm: self.comm,
            waker_user_stack: self.user_stack,
            waker_kernel_stack: self.kernel_stack,
            waker_context: self.context,
            ..slot
        }
    }
}

#[inline(always)]
fn waker(ctx: &BtfTracePointContext, cfg: &Config) -> Waker {
    let context = context(cfg);
    let in_task = context == waker_context::TASK || context == waker_context::UNKNOWN;
    // An interrupt runs on whatever task the CPU was running: that task woke no one.
    let (pid_tgid, comm) = if in_task {
        (
            bpf_get_current_pid_tgid(),
            bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
        )
    } else {
        (0, [0; COMM_LEN])
    };
    let (user_stack, kernel_stack) = waker_stacks(ctx, cfg, context);
    Waker {
        pid_tgid,
        comm,
        user_stack,
        kernel_stack,
        context,
    }
}

/// The waker's stacks. With `--wakers`, whole (the user stack only for a thread). Without,
/// only what names the waker: nothing for a thread or a softirq, and for a hard interrupt the
/// few frames that show whether a timer expired. The preempt count makes this cheap: telling
/// an interrupt by its kernel stack meant unwinding to the interrupt entry, 22–26 frames at
/// ~0.3 µs each for a packet waking a socket reader.
#[inline(always)]
fn waker_stacks(ctx: &BtfTracePointContext, cfg: &Config, context: u32) -> (u64, u64) {
    let in_task = context == waker_context::TASK || context == waker_context::UNKNOWN;
    if cfg.flags & config_flags::WAKER_STACKS != 0 {
        return stack::waker_stacks(ctx, Scratch::Wakeup, in_task);
    }
    match context {
        waker_context::HARDIRQ => (
            stack_id::EMPTY,
            stack::kernel_stack_frames(ctx, Scratch::Wakeup, stack::TIMER_WAKEUP_FRAMES),
        ),
        // Unknown: the kernel stack tells (and user space reads it as before).
        waker_context::UNKNOWN => stack::waker_stacks(ctx, Scratch::Wakeup, false),
        _ => (stack_id::EMPTY, stack_id::EMPTY),
    }
}

/// This CPU's `__preempt_count` address (0 until this CPU's first wakeup of a target finds it).
/// It is fixed per CPU, so it is found once: finding it is two dependent reads through the
/// current task, which were two thirds of what telling a thread from an interrupt cost on
/// every wakeup of a target.
#[map]
static PREEMPT_COUNT_ADDR: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Where this wakeup runs, from this CPU's preempt count. There is no helper for it and this
/// loader has no typed ksyms, so it is found through a per-CPU variable whose address the
/// current task leads to: `current->se.cfs_rq->rq` is this CPU's `runqueues`, and the per-CPU
/// area's layout (BTF `.data..percpu`) puts `__preempt_count` at a known distance from it.
#[inline(always)]
fn context(cfg: &Config) -> u32 {
    if cfg.flags & config_flags::PREEMPT_COUNT == 0 {
        return waker_context::UNKNOWN;
    }
    let Some(slot) = PREEMPT_COUNT_ADDR.get_ptr_mut(0) else {
        return waker_context::UNKNOWN;
    };
    // SAFETY: this CPU's slot; a program interrupting this one on the CPU could only write
    // the same address.
    let mut count = unsafe { *slot };
    if count == 0 {
        let Some(found) = preempt_count_addr(cfg) else {
            return waker_context::UNKNOWN;
        };
        count = found;
        // SAFETY: as above.
        unsafe { *slot = found };
    }
    // SAFETY: the helper faults safely on a bad address.
    match unsafe { bpf_probe_read_kernel(count as *const u32) } {
        Ok(count) => waker_context::from_preempt_count(count),
        Err(_) => waker_context::UNKNOWN,
    }
}

/// This CPU's `__preempt_count` address, through the current task's run queue (which is this
/// CPU's: the current task runs here).
#[inline(always)]
fn preempt_count_addr(cfg: &Config) -> Option<u64> {
    // SAFETY: the current task; the helper faults safely on a bad address.
    let task = unsafe { bpf_get_current_task() };
    let read = |addr: u64| -> Option<u64> {
        // SAFETY: as above.
        unsafe { bpf_probe_read_kernel(addr as *const u64) }.ok()
    };
    let cfs_rq = read(task.wrapping_add(u64::from(cfg.task_cfs_rq_offset)))?;
    let rq = read(cfs_rq.wrapping_add(u64::from(cfg.cfs_rq_rq_offset)))?;
    Some(
        rq.wrapping_sub(u64::from(cfg.percpu_runqueues))
            .wrapping_add(u64::from(cfg.percpu_preempt_count)),
    )
}
