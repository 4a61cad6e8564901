//! The start snapshot: every target thread as the capture begins. Its scheduler counters
//! (`sum_exec_runtime`, `run_delay`) are where the thread's first cycle starts counting, so its
//! figures add up to the kernel's own; and a thread already blocked, or waiting for a CPU,
//! produces no switch-out event, so the task iterator reports its state, saved user registers
//! and kernel stack, this module walks its user stack, and its wait is seeded with the window
//! start as its beginning.

use std::{collections::HashMap, fs::File, os::unix::fs::FileExt as _};

use profiler_common::{
    MAX_STACK_DEPTH, TaskSnapshot, Thread, ThreadStats, WaitStart, WaitState, classify_switch,
    stack_id, task_state, thread_flags, unwind::ProcMappings, wait_flags,
};

use crate::{
    kernel::probes::{ProbeError, Probes, SeedOutcome},
    process::targets::TargetSet,
};
use profiler_core::{
    model::{Seeds, comm_name},
    unwind::walk::{Regs, walk},
};

/// Per process: its memory, and its mapping table.
type Processes = HashMap<u32, (Option<File>, Option<Box<ProcMappings>>)>;

/// Runs the iterator and seeds every target thread's entry. User stacks are walked like the
/// kernel side walks them: with each process's mapping table when there are unwind tables.
pub fn seed_threads(
    probes: &mut Probes,
    targets: &mut TargetSet,
    start_ns: u64,
) -> Result<Seeds, ProbeError> {
    let snapshots = probes.snapshot_tasks()?;
    let mut processes = Processes::new();
    let mut seeds = Seeds::default();
    let mut next_id = 0u64;
    let mut new_id = || {
        next_id += 1;
        stack_id::SNAPSHOT | next_id
    };
    for snap in &snapshots {
        seeds.names.insert(snap.tid, comm_name(&snap.comm));
        seeds.pids.insert(snap.tid, snap.tgid);
        let Some(wait) = wait_at_start(snap) else {
            // Exiting.
            continue;
        };
        let mut thread = first_cycle(snap, start_ns);
        match wait {
            // On a CPU: its first cycle is on the CPU from the window start.
            None => thread.stats.last_in_ns = start_ns,
            Some(state) => {
                let user = user_stack(snap, targets, &mut processes);
                targets.seeded_stack(snap.tgid, &user);
                let kernel: Vec<u64> = snap
                    .kernel_frames
                    .iter()
                    .take((snap.kernel_len as usize).min(MAX_STACK_DEPTH))
                    .copied()
                    .collect();
                thread.wait = WaitStart {
                    ts_ns: start_ns,
                    user_stack: store(&mut seeds.stacks, user, &mut new_id),
                    kernel_stack: store(&mut seeds.stacks, kernel, &mut new_id),
                    state: state as u32,
                    flags: wait_flags::SNAPSHOT,
                    ..WaitStart::default()
                };
            }
        }
        match probes.seed_thread(snap.tid, &thread)? {
            SeedOutcome::Seeded if wait.is_some_and(|s| s != WaitState::RunqueuePreempted) => {
                seeds.blocked += 1;
            }
            SeedOutcome::Seeded | SeedOutcome::AlreadyRecorded => {}
            SeedOutcome::TableFull => seeds.lost += 1,
        }
    }
    Ok(seeds)
}

/// A thread's entry with its first cycle starting at the window start, from the scheduler's
/// counters as the iterator read them; no wait yet.
fn first_cycle(snap: &TaskSnapshot, start_ns: u64) -> Thread {
    Thread {
        stats: ThreadStats {
            comm: snap.comm,
            tgid: snap.tgid,
            last_out_ns: start_ns,
            last_exec_ns: snap.exec_ns,
            last_delay_ns: snap.run_delay_ns,
            flags: thread_flags::BASELINE,
            ..ThreadStats::default()
        },
        wait: WaitStart::default(),
    }
}

/// A waiting thread's user stack, walked from its saved registers through its process's
/// memory (opened, with the mapping table, once per process).
fn user_stack(snap: &TaskSnapshot, targets: &mut TargetSet, processes: &mut Processes) -> Vec<u64> {
    let regs = Regs {
        ip: snap.user_ip,
        sp: snap.user_sp,
        bp: snap.user_bp,
    };
    let (mem, table) = processes.entry(snap.tgid).or_insert_with(|| {
        let mem = File::open(format!("/proc/{}/mem", snap.tgid)).ok();
        let table = match targets.processes.get(&snap.tgid) {
            Some(t) => targets.uploads.table_of(&t.maps),
            None => None,
        };
        (mem, table)
    });
    let with_tables = targets.uploads.tables().zip(table.as_deref());
    mem.as_ref()
        .map(|mem| walk(regs, with_tables, |addr| read_u64(mem, addr)))
        .unwrap_or_default()
}

/// What a thread is doing as the window opens: `Some(None)` on a CPU, `Some(Some(state))`
/// waiting (for a CPU, or blocked), `None` exiting.
fn wait_at_start(snap: &TaskSnapshot) -> Option<Option<WaitState>> {
    if snap.state == task_state::RUNNING {
        return Some((snap.on_cpu == 0).then_some(WaitState::RunqueuePreempted));
    }
    classify_switch(snap.state).map(Some)
}

fn store(
    stacks: &mut HashMap<u64, Vec<u64>>,
    frames: Vec<u64>,
    new_id: &mut impl FnMut() -> u64,
) -> u64 {
    if frames.is_empty() {
        return stack_id::EMPTY;
    }
    let id = new_id();
    stacks.insert(id, frames);
    id
}

fn read_u64(mem: &File, addr: u64) -> Option<u64> {
    let mut buf = [0u8; 8];
    mem.read_exact_at(&mut buf, addr).ok()?;
    Some(u64::from_ne_bytes(buf))
}
