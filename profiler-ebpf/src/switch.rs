//! Off-CPU waits and on-CPU time from `sched_switch` (tp_btf; this kernel has no kprobes).
//!
//! A thread's time is accounted per cycle, from one of its switch-outs to the next (see
//! `profiler_common::split_cycle`). At a switch-out the cycle that ends is split by the
//! scheduler's own counters — `se.sum_exec_runtime` grew by its time on the CPU,
//! `sched_info.run_delay` by its time waiting for one — and the wait that began at the cycle's
//! start is aggregated in `WAITS` under (tid, state, stacks): the part until the thread was
//! made runnable in its own state, the rest as run-queue time; then the new wait is recorded
//! in the thread's `THREADS` entry with its stacks. At `sched_switch` the current task is
//! still `prev`, so `prev`'s stacks are the current task's stacks. A switch-in only records
//! its time.
//!
//! Why the counters and not the tracepoint times: when a wakeup makes the woken thread preempt
//! its CPU's current task (the idle task included), the scheduler skips the clock update of
//! the `schedule()` that follows (`rq_clock_skip_update`), so it charges the woken thread as
//! running from its enqueue — including the time the CPU needs to leave idle — and not as
//! waiting. Tracepoint times called that time run-queue delay: for a thread doing short
//! synchronous I/O, a quarter of its time. The counters are what `/proc/<pid>/task/<tid>/
//! schedstat` shows; the tracepoint's view of the same cycle is kept beside them
//! (`traced_on_ns`), so the difference is reported, not hidden.
//!
//! The kernel does not report every switch: on this machine switches away from some tasks
//! (PID 1's threads) produce no `sched_switch` at all, so a target thread can switch out twice
//! with no switch-in between. The counters place such a cycle's time all the same.

use core::intrinsics::AtomicOrdering;

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_ktime_get_ns},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use aya_log_ebpf::debug;
use profiler_common::{
    BPF_NOEXIST, COMM_LEN, Config, Counter, CycleInput, EEXIST, RunqueueHist, SiteKey, Thread,
    ThreadStats, WaitEntry, WaitKey, WaitStart, WaitState, WaitValue, WakerKey, WakerValue,
    classify_switch, config_flags, hist_bucket, is_exiting, split_cycle, stack_id, task_state,
    thread_flags, wait_flags,
};

use crate::{
    config, kstack,
    maps::{
        NEW_WAIT, RUNQUEUE_HISTS, SCRATCH_HIST, SITE_HISTS, Scratch, Stash, THREADS, WAITS, WAKERS,
        add, add_lost_wait, capture_start, count, insert_thread, new_thread, opaque, parity, stash,
        unstash,
    },
    resource, stack,
    targets::is_target,
    task::{load, read},
    tgid_offset, timeline,
};

/// `TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
///           unsigned int prev_state)` — include/trace/events/sched.h, since Linux 5.18.
const ARG_PREEMPT: usize = 0;
const ARG_PREV: usize = 1;
const ARG_NEXT: usize = 2;
const ARG_PREV_STATE: usize = 3;

#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> u32 {
    // `prev` is the current task. Plain loads from both task arguments, no helper call: this
    // runs for every context switch on the machine.
    let prev: *const u8 = ctx.arg(ARG_PREV);
    let next: *const u8 = ctx.arg(ARG_NEXT);
    let tgid_offset = tgid_offset();
    // SAFETY: both are live task_structs; the offset comes from this kernel's BTF.
    let prev_tgid: u32 = unsafe { load(prev, tgid_offset) };
    let prev_is_target = is_target(prev_tgid);
    // SAFETY: as above.
    let next_tgid: u32 = unsafe { load(next, tgid_offset) };
    let next_is_target = is_target(next_tgid);
    // Every context switch on the machine comes here: foreign ones leave now.
    if !prev_is_target && !next_is_target {
        return 0;
    }
    let cfg = config();
    let Some(start_ns) = capture_start() else {
        return 0;
    };
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };

    if prev_is_target {
        let preempt: u64 = ctx.arg(ARG_PREEMPT);
        let prev_state: u64 = ctx.arg(ARG_PREV_STATE);
        // SAFETY: `prev` is the live current task.
        let (tid, exec_ns, delay_ns, created_ns): (u32, u64, u64, u64) = unsafe {
            (
                load(prev, cfg.task_pid_offset),
                load(prev, cfg.task_exec_offset),
                load(prev, cfg.task_run_delay_offset),
                load(prev, cfg.task_start_time_offset),
            )
        };
        let out = SwitchOut {
            tid,
            tgid: prev_tgid,
            now,
            start_ns,
            exec_ns,
            delay_ns,
            created_ns,
            preempt: (preempt & 1) as u32,
            prev_state: prev_state as u32,
        };
        switch_out(&ctx, cfg, &out);
    }
    if next_is_target {
        // SAFETY: as above.
        let next_tid: u32 = unsafe { load(next, cfg.task_pid_offset) };
        if let Some(thread) = switch_in(cfg, next, next_tid, next_tgid, now) {
            // The scheduler charges `next` from before this tracepoint: all of this program's
            // time is its CPU time, and is reported as the profiler's.
            // SAFETY: the entry `switch_in` returned; only `next`'s own events write its stats.
            unsafe {
                (*thread).stats.overhead_ns += bpf_ktime_get_ns().saturating_sub(now);
            }
        }
    }
    0
}

/// A switch-out, as `switch_account` gets it (a global function's argument: `repr(C)`).
#[repr(C)]
pub struct SwitchOut {
    tid: u32,
    tgid: u32,
    now: u64,
    start_ns: u64,
    /// `prev->se.sum_exec_runtime` and `prev->sched_info.run_delay`.
    exec_ns: u64,
    delay_ns: u64,
    /// `prev->start_time`: when the thread was created.
    created_ns: u64,
    /// `preempt` as 0 or 1 (a `bool` argument would be an unknown byte to the verifier).
    preempt: u32,
    prev_state: u32,
}

/// What [`switch_account`] asks its caller to log (it has no context to log with).
mod note {
    /// A switch-in the kernel did not report (first time on this CPU).
    pub const MISSED_SWITCH_IN: u64 = 1;
    /// The thread table is full (first time on this CPU).
    pub const THREADS_FULL: u64 = 2;
}

#[inline(always)]
fn switch_out(ctx: &BtfTracePointContext, cfg: &Config, out: &SwitchOut) {
    if count(Counter::SwitchesOut) == 0 {
        debug!(
            ctx,
            "first switch-out of the target on this CPU (tid {})", out.tid
        );
    }
    // Exiting: it never switches back in. The stacks are taken before the switch is
    // classified: whether to take them depends on `preempt` and a running state only, and
    // classifying first would have them verified once per state.
    let Some(wait) = NEW_WAIT.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU scratch, this program's alone while it runs (sched_switch runs with
    // interrupts off and does not nest).
    let slot = unsafe { &mut *wait };
    *slot = if is_exiting(out.prev_state) {
        WaitStart::default()
    } else {
        take_stacks(ctx, cfg, out);
        wait_begun(out)
    };
    let notes = core::hint::black_box(switch_account(out, wait));
    if notes & note::MISSED_SWITCH_IN != 0 {
        debug!(
            ctx,
            "tid {}: a switch-in was not reported by the kernel", out.tid
        );
    }
    if notes & note::THREADS_FULL != 0 {
        debug!(ctx, "thread table full: raise --max-threads");
    }
}

/// The cycle that ends at a switch-out accounted, and the wait it begins (`wait`, its stacks
/// taken) recorded. A global function: the verifier checks it once, with its arguments
/// unknown, instead of once for each way `sched_switch` reaches it (exiting or not, each
/// stack path) — it was most of `sched_switch`'s verification, the largest part of the
/// start-up's CPU time. Returns [`note`] bits.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn switch_account(out: *const SwitchOut, wait: *const WaitStart) -> u64 {
    // SAFETY: null or the caller's live values.
    let (Some(out), Some(wait)) = (unsafe { out.as_ref() }, unsafe { wait.as_ref() }) else {
        return 0;
    };
    account(config(), out, wait)
}

#[inline(always)]
fn account(cfg: &Config, out: &SwitchOut, wait: &WaitStart) -> u64 {
    let exiting = is_exiting(out.prev_state);
    let mut notes = 0;
    let Some(thread) = THREADS.get_ptr_mut(&out.tid) else {
        // Not seen yet (the start snapshot raced with it, or its entry went missing: a tid
        // reused moments after its thread exited can have the new thread's entry swept with
        // the old one's): on the CPU since the capture began, or since it was created if
        // later, so that a short-lived thread is never charged the window.
        let on = out.now.saturating_sub(out.start_ns.max(out.created_ns));
        let Some(thread) = new_thread(Scratch::Switch) else {
            return 0;
        };
        thread.wait = *wait;
        let stats = &mut thread.stats;
        stats.comm = bpf_get_current_comm().unwrap_or([0; COMM_LEN]);
        stats.on_cpu_ns = on;
        stats.traced_on_ns = on;
        stats.last_out_ns = out.now;
        stats.switches = 1;
        stats.last_exec_ns = out.exec_ns;
        stats.last_delay_ns = out.delay_ns;
        stats.flags = thread_flags::BASELINE;
        stats.tgid = out.tgid;
        if insert_thread(out.tid, thread) == Some(0) {
            notes |= note::THREADS_FULL;
        }
        return notes;
    };
    // SAFETY: only this thread's events write its stats, one at a time; its wait is shared
    // with its wakeups only (see `wakeup`).
    let thread = unsafe { &mut *thread };
    let stats = &mut thread.stats;
    let from = cycle_start(stats, out.start_ns);
    let waiting = thread.wait.ts_ns != 0;
    let switched_in = stats.last_in_ns > from;
    if waiting && !switched_in && stats.last_out_ns != 0 && count(Counter::MissedSwitchIns) == 0 {
        notes |= note::MISSED_SWITCH_IN;
    }
    let baseline = stats.flags & thread_flags::BASELINE != 0;
    let runqueue_wait = thread.wait.state == WaitState::RunqueuePreempted as u32
        || thread.wait.state == WaitState::RunqueueWoken as u32;
    let cycle = split_cycle(&CycleInput {
        from_ns: from,
        to_ns: out.now,
        in_ns: if switched_in { stats.last_in_ns } else { 0 },
        wake_ns: thread.wait.wake_ts_ns,
        waiting,
        runqueue_wait,
        exec_delta: out.exec_ns.saturating_sub(stats.last_exec_ns),
        exec_known: baseline,
        delay_delta: out.delay_ns.saturating_sub(stats.last_delay_ns),
        delay_known: baseline,
    });
    // The split took one of a dozen branches; what follows need not be verified per branch.
    // Scalars, not a struct: the program's stack is near its 512 bytes.
    let on_ns = opaque(cycle.on_ns);
    let runnable_ns = opaque(cycle.runnable_ns);
    let blocked_ns = opaque(cycle.blocked_ns);
    stats.on_cpu_ns += on_ns;
    stats.traced_on_ns += opaque(cycle.traced_on_ns);
    stats.uncharged_ns += opaque(cycle.uncharged_ns);
    stats.last_out_ns = out.now;
    // The scheduler's counters run on the run queue's clock, which a switch may read a few µs
    // off the tracepoint's (its update is skipped after a wakeup preemption), so a short cycle
    // can be owed more CPU or run-queue time than it lasted, or a preemption's CPU share can
    // run ahead of the counter. The baselines advance by what the cycle used: what it could
    // not take is left for the next one, what it took ahead is repaid by the next, and the
    // thread's figures add up to its schedstat instead of losing the difference to a sleep.
    if waiting && baseline {
        stats.last_exec_ns += on_ns;
        stats.last_delay_ns += runnable_ns;
    } else {
        stats.last_exec_ns = out.exec_ns;
        stats.last_delay_ns = out.delay_ns;
    }
    stats.flags |= thread_flags::BASELINE;
    stats.switches += 1;
    if exiting {
        stats.flags |= thread_flags::EXITED;
        // The baseline is not needed again: it becomes what the thread's cycles counted
        // ahead of `sum_exec_runtime` (a wait for a CPU is split by the tracepoint clock,
        // and a thread that lives on repays the difference; a thread of a few ms does not),
        // so user space can give that time back to the run queue.
        stats.last_exec_ns = stats.last_exec_ns.wrapping_sub(out.exec_ns);
    }
    if exiting || stats.switches % COMM_REFRESH_SWITCHES == 0 {
        stats.comm = bpf_get_current_comm().unwrap_or(stats.comm);
    }
    if waiting {
        aggregate_wait(
            cfg,
            out.tid,
            &thread.wait,
            runqueue_wait,
            runnable_ns,
            blocked_ns,
        );
        // The timeline's record of a long wait: out of line, and reached by one branch, so
        // the verifier walks what follows twice at most.
        if cfg.flags & config_flags::TIMELINE != 0
            && runnable_ns + blocked_ns >= cfg.timeline_min_ns
        {
            timeline::record_wait(
                out.tid,
                &thread.wait,
                blocked_ns,
                runnable_ns,
                stats.on_cpu_ns - on_ns,
            );
        }
    }
    // In place: no allocation or free per switch.
    thread.wait = *wait;
    notes
}

/// The wait a switch-out begins, with the stacks [`take_stacks`] parked.
#[inline(always)]
fn wait_begun(out: &SwitchOut) -> WaitStart {
    // Not exiting (the caller checked): always Some.
    let state = classify_switch(out.prev_state).unwrap_or(WaitState::Other);
    let flags = if out.preempt != 0 && state as u32 != WaitState::RunqueuePreempted as u32 {
        wait_flags::PREEMPTED_ASLEEP
    } else {
        0
    };
    // State and flags are constants on each of the paths that classified the switch: made
    // unknown to the verifier (packed, one stash), everything after is verified once rather
    // than once per (state, preempt) pair.
    let packed = opaque(state as u64 | (flags as u64) << 32);
    WaitStart {
        ts_ns: out.now,
        user_stack: unstash(Stash::UserStack),
        kernel_stack: unstash(Stash::KernelStack),
        state: packed as u32,
        flags: (packed >> 32) as u32,
        resource: unstash(Stash::Resource),
        ..WaitStart::default()
    }
}

/// Where the thread's current cycle began: its last switch-out, else its first switch-in
/// (a thread blocked since before the capture that the start snapshot missed: its time before
/// that is unknown), else the window start.
#[inline(always)]
fn cycle_start(stats: &ThreadStats, start_ns: u64) -> u64 {
    if stats.last_out_ns != 0 {
        stats.last_out_ns
    } else if stats.last_in_ns != 0 {
        stats.last_in_ns
    } else {
        start_ns
    }
}

/// The stacks of the wait a thread enters at this switch-out, parked in [`Stash`] until the
/// wait is recorded: carried through the accounting in between, each way they were taken
/// would be verified separately.
#[inline(always)]
fn take_stacks(ctx: &BtfTracePointContext, cfg: &Config, out: &SwitchOut) {
    // A switch-out with the task still runnable and not preempted inside the kernel is the
    // scheduler running on the way back to user mode (or a yield): its kernel stack is always
    // that same return path, and taking it costs more than everything else here together.
    let returning_to_user = out.preempt == 0 && out.prev_state == task_state::RUNNING;
    let kernel_stack = if cfg.flags & config_flags::KERNEL_STACKS == 0 || returning_to_user {
        stack_id::EMPTY
    } else {
        // Going to sleep (again and again at the same few places), or preempted inside the
        // kernel (at the `cond_resched` points of its long loops).
        switch_kernel_stack(ctx, out.tid, out.preempt != 0)
    };
    stash(Stash::KernelStack, kernel_stack);
    let user_stack = if cfg.flags & config_flags::USER_STACKS != 0 {
        // Threads of a service stop at a handful of places (the syscalls of their loop, and
        // preemption on the way back from them): each place's last unwind is remembered.
        switch_user_stack(ctx, out.tid)
    } else {
        stack_id::EMPTY
    };
    stash(Stash::UserStack, user_stack);
    // Asleep in a system call (not preempted, not on the way back to user mode): what on.
    let resource =
        if cfg.flags & config_flags::RESOURCES == 0 || out.preempt != 0 || returning_to_user {
            0
        } else {
            resource::wait_resource(out.tgid)
        };
    stash(Stash::Resource, resource);
}

/// Out of line (a BPF subprogram): its locals live in its own frame, gone when it returns,
/// so the verifier meets the same state after it whichever of its paths was taken, and
/// verifies what follows once, not once per path.
#[inline(never)]
fn switch_kernel_stack(ctx: &BtfTracePointContext, tid: u32, preempt: bool) -> u64 {
    opaque(kstack::switch_stack(ctx, tid, preempt))
}

/// Out of line, as [`switch_kernel_stack`].
#[inline(never)]
fn switch_user_stack(ctx: &BtfTracePointContext, tid: u32) -> u64 {
    opaque(stack::user_stack(ctx, Scratch::Switch, None, Some(tid)))
}

/// Switch-outs between refreshes of a thread's name: threads rarely rename themselves after
/// their first moments, on-CPU samples refresh it too, and its last switch-out (exit) always
/// does.
const COMM_REFRESH_SWITCHES: u64 = 32;

/// Records a switch-in; returns the thread's entry.
#[inline(always)]
fn switch_in(cfg: &Config, next: *const u8, tid: u32, tgid: u32, now: u64) -> Option<*mut Thread> {
    let Some(thread) = THREADS.get_ptr_mut(&tid) else {
        // First sight of this thread (blocked since before the capture and not found by the
        // start snapshot): its time counts from here.
        let thread = new_thread(Scratch::Switch)?;
        thread.stats.comm = comm_of(cfg, next);
        thread.stats.last_in_ns = now;
        thread.stats.tgid = tgid;
        insert_thread(tid, thread);
        return None;
    };
    // SAFETY: as in `switch_out`.
    let t = unsafe { &mut *thread };
    t.stats.last_in_ns = now;
    if t.stats.comm[0] == 0 {
        // Created during the capture, or seeded by the start snapshot: named on first run.
        t.stats.comm = comm_of(cfg, next);
    }
    Some(thread)
}

/// The name of a task that is not the current one.
#[inline(always)]
fn comm_of(cfg: &Config, task: *const u8) -> [u8; COMM_LEN] {
    // SAFETY: `comm` is a TASK_COMM_LEN array inside the live task_struct.
    unsafe { read::<[u8; COMM_LEN]>(task, cfg.task_comm_offset) }.unwrap_or([0; COMM_LEN])
}

/// Aggregates the wait that began at the cycle's start: blocked in its own state until it was
/// made runnable (the waker is credited with that part), then waiting for a CPU. A preemption
/// is all run-queue time. Time the wait table has no room for goes to `LOST_WAITS`.
#[inline(always)]
fn aggregate_wait(
    cfg: &Config,
    tid: u32,
    slot: &WaitStart,
    runqueue_wait: bool,
    runnable_ns: u64,
    blocked_ns: u64,
) {
    let total = runnable_ns + blocked_ns;
    if total < cfg.min_block_ns || total > cfg.max_block_ns {
        count(Counter::WaitsFiltered);
        return;
    }
    let key = WaitKey {
        tid,
        state: slot.state as u16,
        epoch: parity() as u16,
        user_stack: slot.user_stack,
        kernel_stack: slot.kernel_stack,
        resource: slot.resource,
    };
    if runqueue_wait {
        add_wait(&key, total, 1, 0);
        let which = if slot.state == WaitState::RunqueuePreempted as u32 {
            RunqueueHist::Preempted
        } else {
            RunqueueHist::Woken
        };
        add_runqueue_hist(which, total);
        return;
    }
    // A preemption on the way to a sleep is that sleep's time, but no wait of its own.
    // Arithmetic, not a comparison: BPF has no set-on-condition, and a branch here would
    // have everything below verified once per value.
    let counted =
        (1 - ((slot.flags / wait_flags::PREEMPTED_ASLEEP) & 1) as u64) * nonzero(blocked_ns);
    // Both parts in one entry: the run-queue part is read back as the site's RunqueueWoken
    // wait (`WaitEntry::split`).
    add_wait(&key, blocked_ns, counted, runnable_ns);
    if blocked_ns > 0 {
        if counted != 0 {
            add_site_hist(&key, blocked_ns);
        }
        // `--no-wakers`: one test of a load-time constant (`CONFIG` is frozen read-only
        // data, so the verifier knows its value and does not even walk `add_waker`). Without
        // `sched_waking` no slot carries a wakeup, but the flag says so for the verifier and
        // for the reader, and keeps the hash-map lookup off the hot path either way.
        if cfg.flags & config_flags::NO_WAKERS == 0 && slot.wake_ts_ns >= slot.ts_ns {
            add_waker(&key, slot, blocked_ns);
        }
    }
    if runnable_ns > 0 {
        add_runqueue_hist(RunqueueHist::Woken, runnable_ns);
    }
}

/// 1 if `v` is not 0, else 0, without a branch.
#[inline(always)]
fn nonzero(v: u64) -> u64 {
    (v | v.wrapping_neg()) >> 63
}

#[inline(always)]
fn add_waker(site: &WaitKey, slot: &WaitStart, blocked: u64) {
    let key = WakerKey {
        tid: site.tid,
        state: site.state as u32,
        user_stack: site.user_stack,
        kernel_stack: site.kernel_stack,
        waker_tid: slot.waker_tid,
        waker_tgid: slot.waker_tgid,
        waker_user_stack: slot.waker_user_stack,
        waker_kernel_stack: slot.waker_kernel_stack,
        waker_context: slot.waker_context,
        epoch: site.epoch as u32,
    };
    match WAKERS.get_ptr_mut(&key) {
        // SAFETY: keyed by the wakee's tid, whose switch-outs run on one CPU at a time.
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
            if WAKERS.insert(&key, &value, BPF_NOEXIST).is_err() {
                count(Counter::WakersMapFull);
            }
        }
    }
}

/// Adds one wait to the table — `delta` of its own (`counted`: 0 for time that is no wait of
/// its own), then `runqueue` ns runnable — when it has no room, its time to the thread's lost
/// time.
#[inline(always)]
fn add_wait(key: &WaitKey, delta: u64, counted: u64, runqueue: u64) {
    // Branch-free, so the paths above need not be verified twice: an uncounted delta leaves
    // the maximum (0) and the minimum (u64::MAX) as they are.
    let for_max = delta * counted;
    let for_min = delta | counted.wrapping_sub(1);
    let rq_counted = nonzero(runqueue);
    let rq_min = runqueue | rq_counted.wrapping_sub(1);
    let parts = nonzero(delta) + rq_counted;
    add(Counter::Waits, parts);
    match WAITS.get_ptr_mut(key) {
        // SAFETY: the key holds the tid, and one thread switches out on one CPU at a time.
        Some(entry) => unsafe {
            let value = &mut (*entry).wait;
            value.total_ns += delta;
            value.count += counted;
            if for_max > value.max_ns {
                value.max_ns = for_max;
            }
            if for_min < value.min_ns {
                value.min_ns = for_min;
            }
            let value = &mut (*entry).runqueue;
            value.total_ns += runqueue;
            value.count += rq_counted;
            if runqueue > value.max_ns {
                value.max_ns = runqueue;
            }
            if rq_min < value.min_ns {
                value.min_ns = rq_min;
            }
        },
        None => {
            let entry = WaitEntry {
                wait: WaitValue {
                    total_ns: delta,
                    count: counted,
                    max_ns: for_max,
                    min_ns: for_min,
                },
                runqueue: WaitValue {
                    total_ns: runqueue,
                    count: rq_counted,
                    max_ns: runqueue,
                    min_ns: rq_min,
                },
            };
            if WAITS.insert(key, &entry, BPF_NOEXIST).is_err() {
                add(Counter::WaitsMapFull, parts);
                add_lost_wait(key.tid, delta + runqueue);
            }
        }
    }
}

/// One more wait of `delta` in its site's histogram. A site is shared by all the threads that
/// block there, on any CPU: buckets are bumped with atomic adds.
#[inline(always)]
fn add_site_hist(key: &WaitKey, delta: u64) {
    let site = SiteKey {
        state: key.state as u32,
        epoch: key.epoch as u32,
        user_stack: key.user_stack,
        kernel_stack: key.kernel_stack,
    };
    let bucket = opaque(hist_bucket(delta) as u64) as usize;
    if bump_site_bucket(&site, bucket) {
        return;
    }
    let Some(scratch) = SCRATCH_HIST.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU scratch, owned by this program while it runs.
    let scratch = unsafe { &mut *scratch };
    // The scratch is all zeros between uses (a fresh map value, and the one bucket set here is
    // cleared again below): no 3.3 KiB memset, which BPF would run as a loop the verifier must
    // walk.
    let Some(b) = scratch.buckets.get_mut(bucket) else {
        return;
    };
    *b = 1;
    let inserted = SITE_HISTS.insert(&site, &*scratch, BPF_NOEXIST);
    if let Some(b) = scratch.buckets.get_mut(bucket) {
        *b = 0;
    }
    match inserted {
        Ok(()) => {}
        // Another CPU created the site in between: add to theirs.
        Err(e) if e == -EEXIST => {
            bump_site_bucket(&site, bucket);
        }
        Err(_) => {
            count(Counter::SiteHistsFull);
        }
    }
}

#[inline(always)]
fn bump_site_bucket(site: &SiteKey, bucket: usize) -> bool {
    let Some(hist) = SITE_HISTS.get_ptr_mut(site) else {
        return false;
    };
    // SAFETY: a live map value; `get_mut` bounds the index.
    if let Some(b) = unsafe { (*hist).buckets.get_mut(bucket) } {
        // The BPF target exposes no atomic types with read-modify-write; the intrinsic with
        // its result unused is BPF's atomic add (`lock *(u32 *)(r + off) += r`).
        // SAFETY: a valid, aligned u32 of a map value.
        unsafe {
            core::intrinsics::atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(b, 1);
        }
    }
    true
}

#[inline(always)]
fn add_runqueue_hist(which: RunqueueHist, delta: u64) {
    let Some(hist) = RUNQUEUE_HISTS.get_ptr_mut(which as u32) else {
        return;
    };
    // SAFETY: per-CPU value; the programs that write it cannot interleave on one CPU (they run
    // with interrupts off).
    let bucket = opaque(hist_bucket(delta) as u64) as usize;
    if let Some(b) = unsafe { (*hist).buckets.get_mut(bucket) } {
        *b += 1;
    }
}
