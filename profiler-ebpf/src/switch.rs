//! Off-CPU waits from `sched_switch` (tp_btf; this kernel has no kprobes).
//!
//! Switch-out of a target thread: account its on-CPU time, remember when and why it left
//! (state) and its stacks in its `THREADS` entry. Switch-in of a target thread: the interval
//! since that switch-out is one wait, added to `WAITS` under (tid, state, stacks) with its
//! duration in a log2 histogram. At `sched_switch` the current task is still `prev`, so
//! `prev`'s stacks are the current task's stacks.
//!
//! The kernel does not report every switch: on this machine switches away from some tasks
//! (PID 1's threads) produce no `sched_switch` at all, so a target thread can switch out twice
//! with no switch-in between. The second switch-out then places the missed switch-in exactly:
//! `now` minus the CPU time the scheduler charged the thread since its previous switch-out
//! (`se.sum_exec_runtime` is brought up to date before the tracepoint fires).

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use aya_log_ebpf::debug;
use profiler_common::{
    COMM_LEN, Config, Counter, Thread, ThreadStats, WaitKey, WaitStart, WaitState, WakerKey,
    WakerValue, classify_switch, config_flags, hist_bucket, stack_id, task_state,
};

use crate::{
    config, kstack,
    maps::{SCRATCH_WAIT, Scratch, THREADS, WAITS, WAKERS, capture_start, count},
    stack,
};

const NOEXIST: u64 = 1;

/// `TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
///           unsigned int prev_state)` — include/trace/events/sched.h, since Linux 5.18.
const ARG_PREEMPT: usize = 0;
const ARG_PREV: usize = 1;
const ARG_NEXT: usize = 2;
const ARG_PREV_STATE: usize = 3;

#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> u32 {
    let cfg = config();
    // `prev` is the current task. Plain loads from both task arguments, no helper call: this
    // runs for every context switch on the machine.
    let prev: *const u8 = ctx.arg(ARG_PREV);
    let next: *const u8 = ctx.arg(ARG_NEXT);
    // SAFETY: both are live task_structs; the offset comes from this kernel's BTF.
    let prev_tgid: u32 = unsafe { load(prev, cfg.task_tgid_offset) };
    let prev_is_target = prev_tgid == cfg.target_tgid;
    // SAFETY: as above.
    let next_tgid: u32 = unsafe { load(next, cfg.task_tgid_offset) };
    let next_is_target = next_tgid == cfg.target_tgid;
    // Every context switch on the machine comes here: foreign ones leave now.
    if !prev_is_target && !next_is_target {
        return 0;
    }
    let Some(start_ns) = capture_start() else {
        return 0;
    };
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };

    if prev_is_target {
        let preempt: u64 = ctx.arg(ARG_PREEMPT);
        let prev_state: u64 = ctx.arg(ARG_PREV_STATE);
        // SAFETY: `prev` is the live current task.
        let (tid, exec_ns): (u32, u64) = unsafe {
            (
                load(prev, cfg.task_pid_offset),
                load(prev, cfg.task_exec_offset),
            )
        };
        let out = SwitchOut {
            tid,
            now,
            start_ns,
            exec_ns,
            preempt: preempt & 1 != 0,
            prev_state: prev_state as u32,
        };
        switch_out(&ctx, &cfg, &out);
    }
    if next_is_target {
        // SAFETY: as above.
        let next_tid: u32 = unsafe { load(next, cfg.task_pid_offset) };
        switch_in(&cfg, next, next_tid, now);
    }
    0
}

/// Reads a field of a task_struct at an offset resolved from BTF.
///
/// # Safety
/// `task` must point at a live task_struct.
#[inline(always)]
pub(crate) unsafe fn read<T>(task: *const u8, offset: u32) -> Result<T, i32> {
    // SAFETY: the caller guarantees `task`; the helper faults safely on a bad address.
    unsafe { bpf_probe_read_kernel(task.add(offset as usize).cast()) }
}

/// Loads a field of a task_struct the tracepoint handed us, without a helper call: the
/// arguments of tp_btf programs are trusted BTF pointers, and the offset is a constant the
/// verifier knows (it reads it from our frozen `.rodata`), so it checks the access against
/// the field's type itself. Only for `u32`/`u64` fields.
///
/// # Safety
/// `task` must be a task_struct argument of the tracepoint and `offset` one of its fields of
/// type `T`.
#[inline(always)]
pub(crate) unsafe fn load<T: Copy>(task: *const u8, offset: u32) -> T {
    // SAFETY: as documented above.
    unsafe { core::ptr::read_volatile(task.add(offset as usize).cast::<T>()) }
}

struct SwitchOut {
    tid: u32,
    now: u64,
    start_ns: u64,
    /// `prev->se.sum_exec_runtime`.
    exec_ns: u64,
    preempt: bool,
    prev_state: u32,
}

#[inline(always)]
fn switch_out(ctx: &BtfTracePointContext, cfg: &Config, out: &SwitchOut) {
    if count(Counter::SwitchesOut) == 0 {
        debug!(
            ctx,
            "first switch-out of the target on this CPU (tid {})", out.tid
        );
    }
    // None: exiting, it never switches back in.
    let state = classify_switch(out.preempt, out.prev_state);
    let wait = match state {
        Some(state) => wait_start(ctx, cfg, out, state),
        None => WaitStart::default(),
    };
    let Some(thread) = THREADS.get_ptr_mut(&out.tid) else {
        // Not seen yet: on the CPU since the capture began.
        let thread = Thread {
            stats: ThreadStats {
                comm: bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
                on_cpu_ns: out.now.saturating_sub(out.start_ns),
                last_in_ns: 0,
                last_out_ns: out.now,
                switches: 1,
                last_exec_ns: out.exec_ns,
            },
            wait,
        };
        if THREADS.insert(&out.tid, &thread, NOEXIST).is_err() && count(Counter::ThreadsFull) == 0 {
            debug!(ctx, "thread table full: raise --max-threads");
        }
        return;
    };
    // SAFETY: only this thread's events write its stats, one at a time; its wait is shared
    // with its wakeups only (see `wakeup`).
    let thread = unsafe { &mut *thread };
    if let Some(missed_in) = account_on_cpu(&mut thread.stats, out, state.is_none()) {
        // The wait that began at the previous switch-out ended at the unreported switch-in.
        close_wait(cfg, out.tid, &mut thread.wait, missed_in);
        if count(Counter::MissedSwitchIns) == 0 {
            debug!(
                ctx,
                "tid {}: a switch-in was not reported by the kernel; recovered", out.tid
            );
        }
    }
    // In place: no allocation or free per switch.
    thread.wait = wait;
}

/// The wait a thread enters at this switch-out: when, why, and its stacks.
#[inline(always)]
fn wait_start(
    ctx: &BtfTracePointContext,
    cfg: &Config,
    out: &SwitchOut,
    state: WaitState,
) -> WaitStart {
    // A switch-out with the task still runnable and not preempted inside the kernel is the
    // scheduler running on the way back to user mode (or a yield): its kernel stack is always
    // that same return path, and taking it costs more than everything else here together.
    let returning_to_user = !out.preempt && out.prev_state == task_state::RUNNING;
    let kernel_stack = if cfg.flags & config_flags::KERNEL_STACKS == 0 || returning_to_user {
        stack_id::EMPTY
    } else if out.preempt {
        // Preempted anywhere in the kernel: rare, and seldom twice at the same place.
        stack::kernel_stack(ctx, Scratch::Switch)
    } else {
        // Going to sleep: again and again at the same few places.
        kstack::sleep_stack(ctx, out.tid)
    };
    let user_stack = if cfg.flags & config_flags::USER_STACKS != 0 {
        // Threads of a service stop at a handful of places (the syscalls of their loop, and
        // preemption on the way back from them): each place's last unwind is remembered.
        stack::user_stack(ctx, Scratch::Switch, None, Some(out.tid))
    } else {
        stack_id::EMPTY
    };
    WaitStart {
        ts_ns: out.now,
        user_stack,
        kernel_stack,
        state: state as u32,
        ..WaitStart::default()
    }
}

/// Switch-outs between refreshes of a thread's name: threads rarely rename themselves after
/// their first moments, on-CPU samples refresh it too, and its last switch-out (exit) always
/// does.
const COMM_REFRESH_SWITCHES: u64 = 32;

/// Adds the time since this thread's switch-in (or since the capture began) to its on-CPU
/// total. Returns when the thread really switched in if the kernel did not report that
/// switch-in.
#[inline(always)]
fn account_on_cpu(stats: &mut ThreadStats, out: &SwitchOut, exiting: bool) -> Option<u64> {
    let missed_in = stats.last_out_ns != 0 && stats.last_out_ns >= stats.last_in_ns;
    let since = if missed_in && stats.last_exec_ns != 0 && out.exec_ns >= stats.last_exec_ns {
        let ran = out.exec_ns - stats.last_exec_ns;
        let since = out.now.saturating_sub(ran);
        if since > stats.last_out_ns {
            since
        } else {
            stats.last_out_ns
        }
    } else if stats.last_in_ns > out.start_ns {
        stats.last_in_ns
    } else {
        out.start_ns
    };
    stats.on_cpu_ns += out.now.saturating_sub(since);
    stats.last_out_ns = out.now;
    stats.last_exec_ns = out.exec_ns;
    stats.switches += 1;
    if exiting || stats.switches % COMM_REFRESH_SWITCHES == 0 {
        stats.comm = bpf_get_current_comm().unwrap_or(stats.comm);
    }
    missed_in.then_some(since)
}

#[inline(always)]
fn switch_in(cfg: &Config, next: *const u8, tid: u32, now: u64) {
    let Some(thread) = THREADS.get_ptr_mut(&tid) else {
        // First sight of this thread (blocked since before the capture and not found by the
        // start snapshot).
        let thread = Thread {
            stats: ThreadStats {
                comm: comm_of(cfg, next),
                last_in_ns: now,
                ..ThreadStats::default()
            },
            ..Thread::default()
        };
        if THREADS.insert(&tid, &thread, NOEXIST).is_err() {
            count(Counter::ThreadsFull);
        }
        return;
    };
    // SAFETY: as in `switch_out`.
    let thread = unsafe { &mut *thread };
    thread.stats.last_in_ns = now;
    if thread.stats.comm[0] == 0 {
        // Created during the capture, or seeded by the start snapshot: named on first run.
        thread.stats.comm = comm_of(cfg, next);
    }
    close_wait(cfg, tid, &mut thread.wait, now);
}

/// The name of a task that is not the current one.
#[inline(always)]
fn comm_of(cfg: &Config, task: *const u8) -> [u8; COMM_LEN] {
    // SAFETY: `comm` is a TASK_COMM_LEN array inside the live task_struct.
    unsafe { read::<[u8; COMM_LEN]>(task, cfg.task_comm_offset) }.unwrap_or([0; COMM_LEN])
}

/// Ends the wait in `slot` at `end`, if one is open, and aggregates it. A wait that a wakeup
/// ended splits in two: blocked until the wakeup (its own state), then runnable until `end`
/// (`RunqueueWoken`), both under the blocking stacks; the waker is credited with the first.
#[inline(always)]
fn close_wait(cfg: &Config, tid: u32, slot: &mut WaitStart, end: u64) {
    if slot.ts_ns == 0 {
        return;
    }
    let began = slot.ts_ns;
    let total = end.saturating_sub(began);
    let wake = slot.wake_ts_ns;
    slot.ts_ns = 0;
    slot.wake_ts_ns = 0;
    if total < cfg.min_block_ns || total > cfg.max_block_ns {
        count(Counter::WaitsFiltered);
        return;
    }
    let mut key = WaitKey {
        tid,
        state: slot.state,
        user_stack: slot.user_stack,
        kernel_stack: slot.kernel_stack,
    };
    if wake == 0 || wake < began || wake > end {
        add_wait(&key, total);
        return;
    }
    let blocked = total - (end - wake);
    if blocked > 0 {
        add_wait(&key, blocked);
        add_waker(&key, slot, blocked);
    }
    key.state = WaitState::RunqueueWoken as u32;
    add_wait(&key, end - wake);
}

#[inline(always)]
fn add_waker(site: &WaitKey, slot: &WaitStart, blocked: u64) {
    let key = WakerKey {
        tid: site.tid,
        state: site.state,
        user_stack: site.user_stack,
        kernel_stack: site.kernel_stack,
        waker_tid: slot.waker_tid,
        waker_tgid: slot.waker_tgid,
        waker_user_stack: slot.waker_user_stack,
        waker_kernel_stack: slot.waker_kernel_stack,
        waker_context: slot.waker_context,
        _pad: 0,
    };
    match WAKERS.get_ptr_mut(&key) {
        // SAFETY: keyed by the wakee's tid, which switches in on one CPU at a time.
        Some(value) => unsafe {
            (*value).count += 1;
            (*value).total_ns += blocked;
        },
        None => {
            let value = WakerValue {
                count: 1,
                total_ns: blocked,
                waker_comm: slot.waker_comm,
            };
            if WAKERS.insert(&key, &value, NOEXIST).is_err() {
                count(Counter::WakersMapFull);
            }
        }
    }
}

#[inline(always)]
fn add_wait(key: &WaitKey, delta: u64) {
    count(Counter::Waits);
    let bucket = hist_bucket(delta);
    match WAITS.get_ptr_mut(key) {
        // SAFETY: the key holds the tid, and one thread switches in on one CPU at a time.
        Some(value) => unsafe {
            (*value).total_ns += delta;
            (*value).count += 1;
            if delta > (*value).max_ns {
                (*value).max_ns = delta;
            }
            if let Some(b) = (*value).hist.get_mut(bucket) {
                *b += 1;
            }
        },
        None => {
            let Some(value) = SCRATCH_WAIT.get_ptr_mut(0) else {
                return;
            };
            // SAFETY: per-CPU scratch, owned by this program while it runs.
            let value = unsafe { &mut *value };
            value.total_ns = delta;
            value.count = 1;
            value.max_ns = delta;
            // The scratch histogram is all zeros between uses (a fresh map value, and the one
            // bucket set here is cleared again below): no 488-byte memset, which BPF would run
            // as a byte loop the verifier must walk.
            if let Some(b) = value.hist.get_mut(bucket) {
                *b = 1;
            }
            if WAITS.insert(key, &*value, NOEXIST).is_err() {
                count(Counter::WaitsMapFull);
            }
            if let Some(b) = value.hist.get_mut(bucket) {
                *b = 0;
            }
        }
    }
}
