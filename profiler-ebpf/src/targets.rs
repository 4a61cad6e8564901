//! The target set: which processes are profiled. One bit per process id in `TARGETS`, set by
//! user space for the processes it was given (PIDs, a cgroup's members, a launched command)
//! and here for their new processes (`sched_process_fork`, unless `--no-children`), so every
//! probe's filter is one array load and a mask. Execs and exits of targets are noted in
//! `PROCS` for user space, which reloads a process's mappings after an exec and forgets it
//! once it is gone.

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::{btf_tracepoint, map},
    maps::{Array, HashMap},
    programs::BtfTracePointContext,
};
use profiler_common::{BPF_NOEXIST, Counter, ProcEvent, config_flags, target_bit, thread_flags};

use crate::{
    config,
    maps::{THREADS, count},
    task::load,
    unwind::PROC_MAPPINGS,
};

/// Sized by the loader to cover `pid_max`.
#[map]
static TARGETS: Array<u64> = Array::with_max_entries(1, 0);

/// Sized by the loader (`--max-processes`).
#[map]
static PROCS: HashMap<u32, ProcEvent> = HashMap::with_max_entries(1024, 0);

/// Whether process `tgid` is a target: every probe's first test, one array load.
#[inline(always)]
pub fn is_target(tgid: u32) -> bool {
    let (word, bit) = target_bit(tgid);
    TARGETS.get(word).is_some_and(|w| *w & bit != 0)
}

#[inline(always)]
fn add_target(tgid: u32) {
    let (word, bit) = target_bit(tgid);
    if let Some(w) = TARGETS.get_ptr_mut(word) {
        // SAFETY: a word of the array map; a racing update of another bit of the same word
        // (two forks at once on two CPUs) is repaired by user space, which rescans new
        // processes' parents on its next tick.
        unsafe { *w |= bit };
    }
}

/// `TP_PROTO(struct task_struct *parent, struct task_struct *child)`.
#[btf_tracepoint(function = "sched_process_fork")]
pub fn sched_process_fork(ctx: BtfTracePointContext) -> u32 {
    let cfg = config();
    let parent: *const u8 = ctx.arg(0);
    let child: *const u8 = ctx.arg(1);
    // SAFETY: live task_structs; offsets from this kernel's BTF.
    let (parent_tgid, child_tgid): (u32, u32) = unsafe {
        (
            load(parent, cfg.task_tgid_offset),
            load(child, cfg.task_tgid_offset),
        )
    };
    // Forks of every process on the machine come here; a new thread is not a new process.
    if parent_tgid == child_tgid || !is_target(parent_tgid) {
        return 0;
    }
    if cfg.flags & config_flags::FOLLOW_CHILDREN == 0 {
        return 0;
    }
    add_target(child_tgid);
    // Until it execs, a child has its parent's layout: its stacks unwind with the parent's
    // table from its first instruction, not only once user space has caught up.
    // SAFETY: a map value, copied into a new entry by the helper.
    if let Some(table) = unsafe { PROC_MAPPINGS.get(&parent_tgid) } {
        let _ = PROC_MAPPINGS.insert(&child_tgid, table, 0);
    }
    let event = ProcEvent {
        parent: parent_tgid,
        // SAFETY: no preconditions.
        forked_ns: unsafe { bpf_ktime_get_ns() },
        ..ProcEvent::default()
    };
    if PROCS.insert(&child_tgid, &event, 0).is_err() {
        count(Counter::ProcsFull);
    }
    0
}

/// `TP_PROTO(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)`.
#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(ctx: BtfTracePointContext) -> u32 {
    let cfg = config();
    let task: *const u8 = ctx.arg(0);
    // SAFETY: as above.
    let tgid: u32 = unsafe { load(task, cfg.task_tgid_offset) };
    if !is_target(tgid) {
        return 0;
    }
    match PROCS.get_ptr_mut(&tgid) {
        // SAFETY: the exec'ing process's own entry; one exec at a time per process.
        Some(event) => unsafe { (*event).execs += 1 },
        None => {
            let event = ProcEvent {
                execs: 1,
                ..ProcEvent::default()
            };
            if PROCS.insert(&tgid, &event, BPF_NOEXIST).is_err() {
                count(Counter::ProcsFull);
            }
        }
    }
    // The old table describes the old program: until user space uploads the new one, frame
    // pointers are a better guess than rows for code that is no longer there. Removed after
    // the exec is counted: user space uploads a table, then reads the count, and a count it
    // finds unchanged means any exec still to come removes that table (`Uploads::publish`).
    let _ = PROC_MAPPINGS.remove(&tgid);
    0
}

/// `TP_PROTO(struct task_struct *p, bool group_dead)` (Linux 6.x). The process stays in the
/// target set: its last thread still switches out once, and that switch closes its time.
#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(ctx: BtfTracePointContext) -> u32 {
    let cfg = config();
    let task: *const u8 = ctx.arg(0);
    let group_dead: u64 = ctx.arg(1);
    // SAFETY: as above.
    let tgid: u32 = unsafe { load(task, cfg.task_tgid_offset) };
    if !is_target(tgid) {
        return 0;
    }
    if cfg.flags & config_flags::SWITCHES == 0 {
        // Without switch tracing no last switch-out marks a thread's end: marked here, so
        // the drainer takes its entry out of the thread table (every thread exits here).
        // SAFETY: as above.
        let tid: u32 = unsafe { load(task, cfg.task_pid_offset) };
        if let Some(thread) = THREADS.get_ptr_mut(&tid) {
            // SAFETY: the exiting thread's own entry; its samples only add to other fields.
            unsafe { (*thread).stats.flags |= thread_flags::EXITED };
        }
    }
    if group_dead & 1 == 0 {
        return 0;
    }
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    match PROCS.get_ptr_mut(&tgid) {
        // SAFETY: the exiting process's own entry.
        Some(event) => unsafe { (*event).exited_ns = now },
        None => {
            let event = ProcEvent {
                exited_ns: now,
                ..ProcEvent::default()
            };
            if PROCS.insert(&tgid, &event, BPF_NOEXIST).is_err() {
                count(Counter::ProcsFull);
            }
        }
    }
    0
}
