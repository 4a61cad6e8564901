//! Threads already blocked when the capture starts: they produce no switch-out event, so the
//! task iterator reports their state, saved user registers and kernel stack; this module walks
//! their user stack and seeds their wait slot with the window start, so the wait counts from
//! there with its real stacks.

use std::{collections::HashMap, fs::File, os::unix::fs::FileExt as _};

use profiler_common::{
    MAX_STACK_DEPTH, TaskSnapshot, WaitStart, classify_switch, stack_id, task_state, wait_flags,
};

use crate::{
    probes::{ProbeError, Probes},
    profile::{Seeds, comm_to_string},
};

/// Runs the iterator and seeds a wait for every target thread that is off the CPU.
pub fn seed_blocked_threads(
    probes: &mut Probes,
    pid: u32,
    start_ns: u64,
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
        let user = mem
            .as_ref()
            .map(|mem| walk_frame_pointers(snap, |addr| read_u64(mem, addr)))
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
        if probes.seed_wait(snap.tid, &seed)? {
            seeds.blocked += 1;
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

/// The frame-pointer walk the kernel does for user stacks (`perf_callchain_user`), done from
/// the registers saved when the thread entered the kernel: the instruction pointer, then the
/// return address stored above each saved frame pointer. Leaf first.
pub fn walk_frame_pointers(snap: &TaskSnapshot, read: impl Fn(u64) -> Option<u64>) -> Vec<u64> {
    let mut frames = Vec::new();
    if snap.user_ip == 0 {
        return frames;
    }
    frames.push(snap.user_ip);
    let mut bp = snap.user_bp;
    while frames.len() < MAX_STACK_DEPTH && bp != 0 && bp.is_multiple_of(8) {
        let (Some(next_bp), Some(ret)) = (read(bp), read(bp + 8)) else {
            break;
        };
        if ret == 0 {
            break;
        }
        frames.push(ret);
        // Frames live at increasing addresses towards the stack base; anything else is not a
        // frame chain (a register reused by code built without frame pointers).
        if next_bp <= bp {
            break;
        }
        bp = next_bp;
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(ip: u64, bp: u64) -> TaskSnapshot {
        TaskSnapshot {
            tid: 1,
            state: 1,
            comm: [0; 16],
            user_ip: ip,
            user_sp: 0,
            user_bp: bp,
            kernel_len: 0,
            kernel_frames: [0; MAX_STACK_DEPTH],
        }
    }

    #[test]
    fn walks_a_frame_chain_and_stops_at_its_end() {
        // bp 0x1000 → (next 0x1100, ret 0xa1); 0x1100 → (next 0, ret 0xa2).
        let mem: HashMap<u64, u64> = [
            (0x1000, 0x1100),
            (0x1008, 0xa1),
            (0x1100, 0),
            (0x1108, 0xa2),
        ]
        .into();
        let frames = walk_frame_pointers(&snap(0xa0, 0x1000), |a| mem.get(&a).copied());
        assert_eq!(frames, vec![0xa0, 0xa1, 0xa2]);
    }

    #[test]
    fn a_chain_that_goes_backwards_or_is_unreadable_ends_the_walk() {
        let mem: HashMap<u64, u64> = [(0x1000, 0x800), (0x1008, 0xa1)].into();
        assert_eq!(
            walk_frame_pointers(&snap(0xa0, 0x1000), |a| mem.get(&a).copied()),
            vec![0xa0, 0xa1]
        );
        assert_eq!(
            walk_frame_pointers(&snap(0xa0, 0x2000), |_| None),
            vec![0xa0]
        );
        assert!(walk_frame_pointers(&snap(0, 0x1000), |_| None).is_empty());
    }

    #[test]
    fn a_self_referencing_chain_terminates() {
        let mem: HashMap<u64, u64> = [(0x1000, 0x1000), (0x1008, 0xa1)].into();
        let frames = walk_frame_pointers(&snap(0xa0, 0x1000), |a| mem.get(&a).copied());
        assert!(frames.len() <= MAX_STACK_DEPTH);
    }
}
