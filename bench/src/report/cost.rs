//! The rows of a workload's BPF cost phase: per program, all programs, the timeline's
//! cost, the memo hit rates, and each thread against schedstat.

use std::fmt::Write as _;

use super::{
    cells::{check, rate},
    stats::{median, min_max, paired_ratios},
};
use crate::{
    cost::Costs,
    tools::{NO_TIMELINE_OWNER, NO_WAKERS_OWNER},
};

/// Ours ≤ this × offcputime, per sched_switch event and in BPF CPU time per second of load.
const GOAL_COST_FACTOR: f64 = 0.5;

/// Issue 19: each thread's on-CPU and run-queue time within 1 % of the window of the kernel's
/// own (schedstat).
const GOAL_AGREEMENT_PCT: f64 = 1.0;

/// Rows of one workload's BPF cost: per program ns/event (per event on the machine), events/s
/// and ms/s; all programs per tool in ms per second of load; our memo hit rates.
pub(super) fn cost_rows(md: &mut String, costs: &Costs) {
    program_rows(md, costs);
    busy_rows(md, costs);
    timeline_rows(md, costs);
    memo_rows(md, costs);
    agreement_rows(md, costs);
}

/// Per program: ns/event (its goal beside ours), events/s and ms/s.
fn program_rows(md: &mut String, costs: &Costs) {
    let programs = &costs.programs;
    let ns = |key: &str| {
        programs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, c)| median(&c.ns_per_event))
    };
    let theirs = ns("offcputime sched_switch");
    let one = ns("ours sched_switch");
    for (key, cost) in programs {
        let mid = median(&cost.ns_per_event);
        let (lo, hi) = min_max(&cost.ns_per_event);
        let (goal, met) = match (key.as_str(), theirs, one) {
            ("ours sched_switch", Some(theirs), _) => (
                format!(
                    "≤ {GOAL_COST_FACTOR} × offcputime's ({:.0} ns)",
                    GOAL_COST_FACTOR * theirs
                ),
                check(mid <= GOAL_COST_FACTOR * theirs),
            ),
            ("ours, one per process, sched_switch", _, Some(one)) => {
                (format!("≥ one instance's ({one:.0} ns)"), check(one <= mid))
            }
            // Without wakers: our lowest cost, its ratio said beside it, no goal of its own.
            (k, Some(theirs), _) if k == format!("{NO_WAKERS_OWNER} sched_switch") => {
                (format!("{:.2} × offcputime's", mid / theirs), "")
            }
            _ => (String::new(), ""),
        };
        let _ = writeln!(
            md,
            "| BPF ns/event, {key} ({}, {:.1} ms/s) | {mid:.0} ns | {lo:.0}–{hi:.0} ns | {goal} \
             | {met} |",
            rate(median(&cost.events_per_sec)),
            median(&cost.ms_per_sec)
        );
    }
}

/// All programs per tool: ms per second of load, and per context switch on the machine.
fn busy_rows(md: &mut String, costs: &Costs) {
    for (owner, values) in &costs.busy_ms_per_sec {
        let (lo, hi) = min_max(values);
        let _ = writeln!(
            md,
            "| BPF CPU time, {owner} all programs (ms per s of load) | {:.1} ms | \
             {lo:.1}–{hi:.1} ms | | |",
            median(values)
        );
    }
    let per_switch = |owner: &str| {
        costs
            .busy_ns_per_switch
            .iter()
            .find(|(o, _)| o == owner)
            .map(|(_, v)| median(v))
    };
    let theirs = per_switch("offcputime");
    for (owner, values) in &costs.busy_ns_per_switch {
        let (lo, hi) = min_max(values);
        let mid = median(values);
        let (goal, met) = match (owner.as_str(), theirs) {
            ("ours", Some(theirs)) => (
                format!(
                    "≤ {GOAL_COST_FACTOR} × offcputime's ({:.0} ns)",
                    GOAL_COST_FACTOR * theirs
                ),
                check(mid <= GOAL_COST_FACTOR * theirs),
            ),
            (NO_WAKERS_OWNER, Some(theirs)) => (format!("{:.2} × offcputime's", mid / theirs), ""),
            _ => (String::new(), ""),
        };
        let _ = writeln!(
            md,
            "| BPF CPU time, {owner} all programs, per context switch on the machine (its ms/s \
             at the same switch rate) | {mid:.0} ns | {lo:.0}–{hi:.0} ns | {goal} | {met} |"
        );
    }
}

/// Our memo hit rates, user and kernel stacks.
fn memo_rows(md: &mut String, costs: &Costs) {
    for (owner, counters) in &costs.counters {
        for (what, prefix) in [("user", "unwind_memo"), ("kernel", "kernel_memo")] {
            let get = |k: &str| counters.get(&format!("{prefix}_{k}")).copied().unwrap_or(0);
            let (hits, misses) = (get("hits"), get("misses"));
            if hits + misses == 0 {
                continue;
            }
            let _ = writeln!(
                md,
                "| memo hit rate, {what} stacks, {owner} ({hits} hits, {misses} misses over all \
                 runs) | {:.1} % | | | |",
                hits as f64 * 100.0 / (hits + misses) as f64
            );
        }
    }
}

/// The timeline's cost: ours with it (`--report` turns it on) against ours with
/// `--no-timeline`, run next to each other in every round. Per program the ratio of their
/// ns/event round by round (each round's pair saw about the same load), and for all programs
/// together the difference per context switch on the machine.
fn timeline_rows(md: &mut String, costs: &Costs) {
    let program = |key: &str| {
        costs
            .programs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, c)| c)
    };
    for name in ["sched_switch", "on_cpu_sample", "sched_waking"] {
        let (Some(on), Some(off)) = (
            program(&format!("ours {name}")),
            program(&format!("{NO_TIMELINE_OWNER} {name}")),
        ) else {
            continue;
        };
        let ratios = paired_ratios(&on.ns_per_event, &off.ns_per_event);
        if ratios.is_empty() {
            continue;
        }
        let (lo, hi) = min_max(&ratios);
        let (on, off) = (median(&on.ns_per_event), median(&off.ns_per_event));
        let _ = writeln!(
            md,
            "| timeline's cost, {name}: ns/event with it ÷ without (`--no-timeline`), same \
             round (medians {on:.0} ns ÷ {off:.0} ns, {:+.0} ns) | {:.3} | {lo:.3}–{hi:.3} | | |",
            on - off,
            median(&ratios)
        );
    }
    let per_switch = |owner: &str| {
        costs
            .busy_ns_per_switch
            .iter()
            .find(|(o, _)| o == owner)
            .map(|(_, v)| v)
    };
    if let (Some(on), Some(off)) = (per_switch("ours"), per_switch(NO_TIMELINE_OWNER)) {
        let deltas: Vec<f64> = on.iter().zip(off).map(|(a, b)| a - b).collect();
        if !deltas.is_empty() {
            let (lo, hi) = min_max(&deltas);
            let _ = writeln!(
                md,
                "| timeline's cost, all programs per context switch on the machine: with it − \
                 without, same round (medians {:.0} ns − {:.0} ns) | {:+.0} ns | \
                 {lo:+.0}–{hi:+.0} ns | | |",
                median(on),
                median(off),
                median(&deltas)
            );
        }
    }
}

/// Per thread of every run of ours: |ours − schedstat| as a share of the window, on-CPU and
/// runnable (median and range over threads), against the 1 % goal.
fn agreement_rows(md: &mut String, costs: &Costs) {
    for (owner, threads) in &costs.agreement {
        let on_cpu: Vec<f64> = threads.iter().map(|a| a.on_cpu_pct).collect();
        let runnable: Vec<f64> = threads.iter().map(|a| a.runnable_pct).collect();
        for (what, values) in [("on-CPU", on_cpu), ("runnable", runnable)] {
            let (lo, hi) = min_max(&values);
            let _ = writeln!(
                md,
                "| per thread, {owner}: {what} time − the kernel's (schedstat over the window), \
                 % of the window ({} threads over all runs) | {:.2} % | {lo:.2}–{hi:.2} % | every \
                 thread ≤ {GOAL_AGREEMENT_PCT} % | {} |",
                values.len(),
                median(&values),
                check(hi <= GOAL_AGREEMENT_PCT)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeline_rows_pair_rounds() {
        use crate::cost::Cost;
        let cost = |ns: &[f64]| Cost {
            ns_per_event: ns.to_vec(),
            ns_per_run: ns.to_vec(),
            events_per_sec: vec![1000.0; ns.len()],
            ms_per_sec: vec![1.0; ns.len()],
        };
        let costs = Costs {
            workload: "fsync",
            programs: vec![
                ("ours sched_switch".to_string(), cost(&[110.0, 220.0])),
                (
                    format!("{NO_TIMELINE_OWNER} sched_switch"),
                    cost(&[100.0, 200.0]),
                ),
                ("ours on_cpu_sample".to_string(), cost(&[1.0])),
                (
                    format!("{NO_TIMELINE_OWNER} on_cpu_sample"),
                    cost(&[1.0, 2.0]),
                ),
            ],
            busy_ns_per_switch: vec![
                ("ours".to_string(), vec![300.0, 310.0]),
                (NO_TIMELINE_OWNER.to_string(), vec![290.0, 290.0]),
            ],
            ..Costs::default()
        };
        let mut md = String::new();
        timeline_rows(&mut md, &costs);
        let rows: Vec<&str> = md.lines().collect();
        assert_eq!(rows.len(), 2, "{md}");
        assert!(
            rows[0].starts_with("| timeline's cost, sched_switch:")
                && rows[0].contains("(medians 165 ns ÷ 150 ns, +15 ns) | 1.100 | 1.100–1.100 |"),
            "{md}"
        );
        assert!(rows[1].contains("| +15 ns | +10–+20 ns |"), "{md}");
    }
}
