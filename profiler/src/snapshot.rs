//! Threads already blocked when the capture starts: they produce no switch-out event, so the
//! task iterator reports their state, saved user registers and kernel stack; this module walks
//! their user stack and seeds their wait slot with the window start, so the wait counts from
//! there with its real stacks.

use std::{collections::HashMap, fs::File, os::unix::fs::FileExt as _};

use profiler_common::{
    MAX_STACK_DEPTH, WaitStart, classify_switch, stack_id, task_state, unwind::ProcMappings,
    wait_flags,
};

use crate::{
    probes::{ProbeError, Probes, SeedOutcome},
    profile::{Seeds, comm_to_string},
    unwind::{
        tables::UnwindTables,
        walk::{Regs, walk},
    },
};

/// Runs the iterator and seeds a wait for every target thread that is off the CPU. User
/// stacks are walked like the kernel side walks them: with the unwind tables when given.
pub fn seed_blocked_threads(
    probes: &mut Probes,
    pid: u32,
    start_ns: u64,
    tables: Option<(&UnwindTables, &ProcMappings)>,
) -> Result<Seeds, ProbeError> {
    let snapshots = probes.snapshot_tasks()?;
    let mem = File::open(format!("/proc/{pid}/mem")).ok();
    let mut seeds = Seeds::default();
    let mut next_id = 0u64;
    let mut new_id = || {
        next_id += 1;
        stack_id::SNAPSHOT | next_id
    };
    for snap in &snapshots {
        seeds.names.insert(snap.tid, comm_to_string(&snap.comm));
        if snap.state == task_state::RUNNING {
            // On a CPU or runnable: the sampler and the next switch see it.
            continue;
        }
        let Some(state) = classify_switch(false, snap.state) else {
            continue;
        };
        let regs = Regs {
            ip: snap.user_ip,
            sp: snap.user_sp,
            bp: snap.user_bp,
        };
        let user = mem
            .as_ref()
            .map(|mem| walk(regs, tables, |addr| read_u64(mem, addr)))
            .unwrap_or_default();
        let kernel: Vec<u64> = snap
            .kernel_frames
            .iter()
            .take((snap.kernel_len as usize).min(MAX_STACK_DEPTH))
            .copied()
            .collect();
        let user_stack = store(&mut seeds.stacks, user, &mut new_id);
        let kernel_stack = store(&mut seeds.stacks, kernel, &mut new_id);
        let seed = WaitStart {
            ts_ns: start_ns,
            user_stack,
            kernel_stack,
            state: state as u32,
            flags: wait_flags::SNAPSHOT,
            ..WaitStart::default()
        };
        match probes.seed_wait(snap.tid, snap.comm, &seed)? {
            SeedOutcome::Seeded => seeds.blocked += 1,
            SeedOutcome::AlreadyRecorded => {}
            SeedOutcome::TableFull => seeds.lost += 1,
        }
    }
    Ok(seeds)
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
