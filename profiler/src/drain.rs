//! Drain: the in-kernel aggregates → plain Rust collections, once, after the capture window
//! has been closed (so nothing changes while we read).

use std::collections::HashMap;

use aya::{
    Pod,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray},
};
use profiler_common::{
    ProcEvent, RunqueueHist, SampleKey, SampleValue, SiteKey, Stack, Thread, WAIT_HIST_BUCKETS,
    WaitHist, WaitKey, WaitValue, WakerKey, WakerValue, names, unwind::ProcMappings,
};

use crate::{
    model::{Drained, SchedStat},
    probes::{ProbeError, Probes},
};

pub fn drain(probes: &Probes, pids: &[u32]) -> Result<Drained, ProbeError> {
    let ebpf = probes.ebpf();
    let read = |name: &'static str| ebpf.map(name).ok_or(ProbeError::MissingMap(name));
    let samples = entries::<SampleKey, SampleValue>(read(names::MAP_SAMPLES)?, names::MAP_SAMPLES)?;
    let waits = entries::<WaitKey, WaitValue>(read(names::MAP_WAITS)?, names::MAP_WAITS)?;
    let wakers = entries::<WakerKey, WakerValue>(read(names::MAP_WAKERS)?, names::MAP_WAKERS)?;
    let threads = entries::<u32, Thread>(read(names::MAP_THREADS)?, names::MAP_THREADS)?
        .into_iter()
        .collect();
    let all_stacks = entries::<u64, Stack>(read(names::MAP_STACKS)?, names::MAP_STACKS)?;
    let stack_generations = all_stacks
        .iter()
        .filter(|(_, s)| s.generation() != 0)
        .map(|(id, s)| (*id, s.generation()))
        .collect();
    let stacks = all_stacks
        .into_iter()
        .map(|(id, stack)| (id, stack.frames().to_vec()))
        .collect();
    let site_hists =
        entries::<SiteKey, WaitHist>(read(names::MAP_SITE_HISTS)?, names::MAP_SITE_HISTS)?
            .into_iter()
            .collect();
    let runqueue_hists = runqueue_hists(read(names::MAP_RUNQUEUE_HISTS)?)?;
    Ok(Drained {
        samples,
        waits,
        wakers,
        threads,
        stacks,
        stack_generations,
        counters: probes.counters()?,
        site_hists,
        runqueue_hists,
        sched_at_start: HashMap::new(),
        sched_at_stop: sched_stats(pids),
        tables_at_end: [
            (
                names::MAP_PROCS,
                count::<ProcEvent>(read(names::MAP_PROCS)?),
            ),
            (
                names::MAP_PROC_MAPPINGS,
                count::<ProcMappings>(read(names::MAP_PROC_MAPPINGS)?),
            ),
            (
                names::MAP_THREADS,
                count::<Thread>(read(names::MAP_THREADS)?),
            ),
        ]
        .into_iter()
        .collect(),
    })
}

/// Entries of a hash map keyed by pid or tid.
fn count<V: Pod>(map: &aya::maps::Map) -> u64 {
    BpfHashMap::<&MapData, u32, V>::try_from(map)
        .map_or(0, |h| h.keys().filter(Result::is_ok).count() as u64)
}

fn runqueue_hists(
    map: &aya::maps::Map,
) -> Result<[WaitHist; RunqueueHist::COUNT as usize], ProbeError> {
    let name = names::MAP_RUNQUEUE_HISTS;
    let array: PerCpuArray<&MapData, WaitHist> =
        PerCpuArray::try_from(map).map_err(|source| ProbeError::Map { name, source })?;
    let mut out = [WaitHist::default(); RunqueueHist::COUNT as usize];
    for (i, hist) in out.iter_mut().enumerate() {
        let per_cpu = array
            .get(&(i as u32), 0)
            .map_err(|source| ProbeError::Map { name, source })?;
        for cpu in per_cpu.iter() {
            for b in 0..WAIT_HIST_BUCKETS {
                hist.buckets[b] = hist.buckets[b].saturating_add(cpu.buckets[b]);
            }
        }
    }
    Ok(out)
}

/// Every live thread's `/proc/<pid>/task/<tid>/schedstat`, for each process.
pub fn sched_stats(pids: &[u32]) -> HashMap<u32, SchedStat> {
    let mut all = HashMap::new();
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        all.extend(tasks.filter_map(Result::ok).filter_map(|entry| {
            let tid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let text = std::fs::read_to_string(entry.path().join("schedstat")).ok()?;
            Some((tid, parse_schedstat(&text)?))
        }));
    }
    all
}

/// `<on-cpu ns> <run-queue ns> <timeslices>`.
fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    Some(SchedStat {
        exec_ns: fields.next()?.ok()?,
        delay_ns: fields.next()?.ok()?,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_lines_parse() {
        assert_eq!(
            parse_schedstat("38362476452 770639017 1873083\n"),
            Some(SchedStat {
                exec_ns: 38_362_476_452,
                delay_ns: 770_639_017
            })
        );
        assert_eq!(parse_schedstat("0 0 0"), Some(SchedStat::default()));
        assert_eq!(parse_schedstat("12"), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }
}
