//! The Go service's section: requests/s per condition and each one's ratio to the run with
//! nothing attached in the same round, and the goroutine uprobes' cost from bpf_stats.

use std::fmt::Write as _;

use super::stats::{median, min_max};
use crate::goservice::{GoCondition, GoService, WRK_CONNECTIONS, WRK_THREADS};

pub(super) fn go_section(md: &mut String, g: &GoService, command: &str, host: &str) {
    let rounds = g.runs.len() / GoCondition::ALL.len().max(1);
    let _ = writeln!(
        md,
        "\n### Go service: goroutines followed (`{command}`)\n\n{host}. {}; \
         profiler-core/tests/fixtures/gowait `service` (a net/http handler calling a 20 ms \
         upstream with `http.Client.Get`, then about 1 ms of hashing) under `wrk -t{WRK_THREADS} \
         -c{WRK_CONNECTIONS}`; {rounds} round(s) of {} s, the three conditions rotating in \
         each. The ratio is each run's requests/s ÷ the run with nothing attached in its round; \
         ns per run and runs per request are the kernel's bpf_stats over the run.\n",
        g.go_version, g.secs
    );
    md.push_str(
        "| condition | requests/s (median) | min–max | ÷ nothing attached (median) | min–max | \
         `go_park` ns/run | `go_execute` ns/run | parks per request | `sched_switch` ns/run |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for cond in GoCondition::ALL {
        let runs: Vec<_> = g.runs.iter().filter(|r| r.condition == cond).collect();
        let rps: Vec<f64> = runs.iter().map(|r| r.rps).collect();
        let ratios: Vec<f64> = runs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let base = g
                    .runs
                    .iter()
                    .filter(|b| b.condition == GoCondition::Baseline)
                    .nth(i)?;
                Some(r.rps / base.rps)
            })
            .collect();
        let per_run = |name: &str| -> String {
            let (t, c) = runs
                .iter()
                .filter_map(|r| r.programs.get(name))
                .fold((0, 0), |(t, c), (rt, rc)| (t + rt, c + rc));
            if c == 0 {
                String::new()
            } else {
                format!("{:.0}", t as f64 / c as f64)
            }
        };
        let parks: u64 = runs
            .iter()
            .filter_map(|r| r.programs.get("go_park").map(|p| p.1))
            .sum();
        let requests: u64 = runs.iter().map(|r| r.requests).sum();
        let (lo, hi) = min_max(&rps);
        let (rlo, rhi) = min_max(&ratios);
        let _ = writeln!(
            md,
            "| {} | {:.0} | {lo:.0}–{hi:.0} | {:.3} | {rlo:.3}–{rhi:.3} | {} | {} | {} | {} |",
            cond.label(),
            median(&rps),
            median(&ratios),
            per_run("go_park"),
            per_run("go_execute"),
            if parks == 0 || requests == 0 {
                String::new()
            } else {
                format!("{:.1}", parks as f64 / requests as f64)
            },
            per_run("sched_switch"),
        );
    }
}
