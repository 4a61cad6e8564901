//! Phase 2, BPF cost per event. With `kernel.bpf_stats_enabled=1`, ours (wall) and
//! offcputime run under the same wrk load; `run_time_ns / run_cnt` of each program is taken as
//! the difference of two `bpftool prog show` snapshots, one just before wrk starts and one
//! just after it ends, both while the programs are still attached. The counters are
//! cumulative per program and both move on every run of the program, so the difference
//! covers exactly every invocation during the load, none missed, none from other phases.

use anyhow::Result;

use crate::{
    process::say,
    tools::{Bench, BpfStats, Condition, run_undisturbed},
};

/// ns/event and events/s of one program, one value per run.
#[derive(Default)]
pub struct Cost {
    pub ns_per_event: Vec<f64>,
    pub events_per_sec: Vec<f64>,
}

#[derive(Default)]
pub struct Costs {
    /// Keyed by "<tool> <program name>", e.g. "ours sched_switch"; ours first, then by rank.
    pub programs: Vec<(String, Cost)>,
    /// Per tool: BPF run time of all its programs together, in ms per second of load (what
    /// the tool takes from the machine in the kernel, whatever the number of programs).
    pub busy_ms_per_sec: Vec<(String, Vec<f64>)>,
}

/// `rounds` runs of `secs` each of ours (wall) and offcputime, as far as `conditions` hold
/// them, the order alternating.
pub fn bpf_costs(
    bench: &Bench,
    conditions: &[Condition],
    rounds: usize,
    secs: u64,
) -> Result<Costs> {
    let _stats = BpfStats::enable()?;
    let mut costs = Costs::default();
    for round in 0..rounds {
        let mut order: Vec<Condition> = [Condition::Wall, Condition::Offcputime]
            .into_iter()
            .filter(|c| conditions.contains(c))
            .collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for cond in order {
            let run = run_undisturbed(bench, cond, secs)?;
            bench.log_reset();
            let owner = if cond == Condition::Offcputime {
                "offcputime"
            } else {
                "ours"
            };
            let mut busy_ns = 0;
            for (name, (time, cnt)) in &run.bpf {
                busy_ns += time;
                if *cnt == 0 {
                    continue;
                }
                let key = format!("{owner} {name}");
                let ns = *time as f64 / *cnt as f64;
                say(&format!(
                    "bpf_stats {}/{}: {key:<26} {ns:>7.0} ns/event, {cnt} events",
                    round + 1,
                    rounds
                ));
                let cost = slot(&mut costs.programs, &key);
                cost.ns_per_event.push(ns);
                cost.events_per_sec.push(*cnt as f64 / run.load_secs);
            }
            slot(&mut costs.busy_ms_per_sec, owner).push(busy_ns as f64 / 1e6 / run.load_secs);
        }
    }
    costs
        .programs
        .sort_by_key(|(key, _)| (!key.starts_with("ours"), program_rank(key), key.clone()));
    Ok(costs)
}

/// The programs the goals speak of come first.
fn program_rank(key: &str) -> u8 {
    if key.ends_with(" sched_switch") {
        0
    } else if key.ends_with(" on_cpu_sample") {
        1
    } else {
        2
    }
}

fn slot<'a, T: Default>(entries: &'a mut Vec<(String, T)>, key: &str) -> &'a mut T {
    let i = match entries.iter().position(|(k, _)| k == key) {
        Some(i) => i,
        None => {
            entries.push((key.to_string(), T::default()));
            entries.len() - 1
        }
    };
    &mut entries[i].1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goal_programs_come_first() {
        let mut keys = vec![
            "ours sched_waking",
            "ours on_cpu_sample",
            "ours sched_switch",
        ];
        keys.sort_by_key(|k| program_rank(k));
        assert_eq!(
            keys,
            [
                "ours sched_switch",
                "ours on_cpu_sample",
                "ours sched_waking"
            ]
        );
    }
}
