//! Drain: the in-kernel aggregates → plain Rust collections, once, after the capture window
//! has been closed (so nothing changes while we read).

use std::collections::HashMap;

use aya::{
    Pod,
    maps::{HashMap as BpfHashMap, MapData},
};
use profiler_common::{
    SampleKey, SampleValue, Stack, Thread, ThreadStats, WaitKey, WaitStart, WaitValue, WakerKey,
    WakerValue, names,
};

use crate::probes::{Counters, ProbeError, Probes};

/// The capture window on the BPF clock (CLOCK_MONOTONIC, ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start_ns: u64,
    pub stop_ns: u64,
}

impl Window {
    pub fn len_ns(&self) -> u64 {
        self.stop_ns.saturating_sub(self.start_ns)
    }
}

/// Everything the kernel side aggregated.
#[derive(Debug, Default)]
pub struct Drained {
    pub samples: Vec<(SampleKey, SampleValue)>,
    pub waits: Vec<(WaitKey, WaitValue)>,
    /// Who woke each blocking site.
    pub wakers: Vec<(WakerKey, WakerValue)>,
    /// Wait slots of threads still off the CPU when the window closed.
    pub open_waits: Vec<(u32, WaitStart)>,
    pub threads: HashMap<u32, ThreadStats>,
    /// Frames (leaf first) by stack id.
    pub stacks: HashMap<u64, Vec<u64>>,
    pub counters: Counters,
    /// CPU time per live thread (`se.sum_exec_runtime`) read right after the window closed:
    /// places a final switch-in the kernel did not report.
    pub exec_at_stop: HashMap<u32, u64>,
}

pub fn drain(probes: &Probes, pid: u32) -> Result<Drained, ProbeError> {
    let ebpf = probes.ebpf();
    let read = |name: &'static str| ebpf.map(name).ok_or(ProbeError::MissingMap(name));
    let samples = entries::<SampleKey, SampleValue>(read(names::MAP_SAMPLES)?, names::MAP_SAMPLES)?;
    let waits = entries::<WaitKey, WaitValue>(read(names::MAP_WAITS)?, names::MAP_WAITS)?;
    let wakers = entries::<WakerKey, WakerValue>(read(names::MAP_WAKERS)?, names::MAP_WAKERS)?;
    let per_thread = entries::<u32, Thread>(read(names::MAP_THREADS)?, names::MAP_THREADS)?;
    let open_waits: Vec<(u32, WaitStart)> = per_thread
        .iter()
        .filter(|(_, t)| t.wait.ts_ns != 0)
        .map(|(tid, t)| (*tid, t.wait))
        .collect();
    let threads = per_thread
        .into_iter()
        .map(|(tid, t)| (tid, t.stats))
        .collect();
    let stacks = entries::<u64, Stack>(read(names::MAP_STACKS)?, names::MAP_STACKS)?
        .into_iter()
        .map(|(id, stack)| (id, stack.frames().to_vec()))
        .collect();
    Ok(Drained {
        samples,
        waits,
        wakers,
        open_waits,
        threads,
        stacks,
        counters: probes.counters()?,
        exec_at_stop: exec_times(pid),
    })
}

/// `/proc/<pid>/task/<tid>/schedstat` starts with the thread's CPU time in nanoseconds.
fn exec_times(pid: u32) -> HashMap<u32, u64> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return HashMap::new();
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let tid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let text = std::fs::read_to_string(entry.path().join("schedstat")).ok()?;
            let exec: u64 = text.split_whitespace().next()?.parse().ok()?;
            Some((tid, exec))
        })
        .collect()
}

fn entries<K: Pod, V: Pod>(
    map: &aya::maps::Map,
    name: &'static str,
) -> Result<Vec<(K, V)>, ProbeError> {
    let hash: BpfHashMap<&MapData, K, V> =
        BpfHashMap::try_from(map).map_err(|source| ProbeError::Map { name, source })?;
    // An entry that vanishes between "next key" and "lookup" cannot happen once the window is
    // closed; skipping one is still better than losing the whole capture.
    Ok(hash.iter().filter_map(Result::ok).collect())
}
