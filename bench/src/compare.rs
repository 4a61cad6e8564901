//! `cargo xtask bench --against OTHER_PROFILER`: the BPF cost per event of this build against
//! another build of the profiler, for changes too small for the throughput rounds to see.
//!
//! Both profilers run on the same nginx worker at once, so they see the same events under the
//! same load, and bpf_stats gives each program's time. The one attached second runs ~25 %
//! cheaper here (the first has already brought the task, its stack and the kernel's data into
//! the cache), so every pair runs in both orders and the result is the geometric mean of the
//! two ratios, in which that advantage cancels.

use std::{collections::HashSet, path::Path, thread};

use anyhow::{Context, Result, bail};

use crate::{
    nginx::run_wrk,
    process::{Instance, Ready, bpf_prog_ids, say},
    tools::{Bench, BpfStats, EXIT_TIMEOUT, SETTLE, bpf_prog_stats},
};

/// The program compared: the one every context switch on the machine runs.
const PROGRAM: &str = "sched_switch";

pub fn run(bench: &Bench, other: &Path, pairs: usize, secs: u64) -> Result<()> {
    if !other.is_file() {
        bail!(
            "--against needs a profiler binary; {} is not a file",
            other.display()
        );
    }
    let worker = bench.nginx.processes[0];
    let _stats = BpfStats::enable()?;
    // Per pair, ln(this build's ns/event ÷ the other's) averaged over the two orders.
    let mut log_ratios = Vec::new();
    for pair in 0..pairs {
        let mut both = 0.0;
        for this_first in [true, false] {
            let (this, theirs) = measure(bench, other, worker, secs, this_first)?;
            bench.log_reset();
            say(&format!(
                "pair {}/{pairs}, {} first: this build {this:.0} ns/event, the other {theirs:.0} \
                 ns/event ({:.3})",
                pair + 1,
                if this_first {
                    "this build"
                } else {
                    "the other"
                },
                this / theirs
            ));
            both += (this / theirs).ln() / 2.0;
        }
        log_ratios.push(both);
    }
    let n = log_ratios.len() as f64;
    let mean = log_ratios.iter().sum::<f64>() / n;
    let error = if log_ratios.len() > 1 {
        (log_ratios.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() / n.sqrt()
    } else {
        f64::NAN
    };
    println!(
        "{PROGRAM} ns/event, this build ÷ {}: {:.3} (±{:.3}, one standard error over pairs), \
         {pairs} pair(s) of {secs} s runs in both attach orders on nginx worker {worker}",
        other.display(),
        mean.exp(),
        mean.exp() * error,
    );
    Ok(())
}

/// One run with both profilers on `worker`: (this build's, the other's) ns per event.
fn measure(
    bench: &Bench,
    other: &Path,
    worker: u32,
    secs: u64,
    this_first: bool,
) -> Result<(f64, f64)> {
    let binaries = if this_first {
        [bench.binary.as_path(), other]
    } else {
        [other, bench.binary.as_path()]
    };
    let mut tools = Vec::new();
    for (i, binary) in binaries.iter().enumerate() {
        let mut cmd = std::process::Command::new(binary);
        cmd.args(["--pid", &worker.to_string(), "--secs", "3600", "-o"])
            .arg(bench.dir.join(format!("against-{i}.svg")));
        let mut tool = Instance::spawn(
            format!("{} (on nginx worker {worker})", binary.display()),
            cmd,
        )?;
        tool.wait_ready(Ready::StderrLine("profiler: capturing"))?;
        tools.push(tool);
    }
    thread::sleep(SETTLE);
    let ids: Vec<HashSet<u32>> = tools.iter().map(|t| bpf_prog_ids(t.pid())).collect();
    let all: HashSet<u32> = ids.iter().flatten().copied().collect();
    let before = bpf_prog_stats(&all)?;
    run_wrk(bench.port, secs)?;
    let after = bpf_prog_stats(&all)?;
    for tool in &tools {
        tool.interrupt();
    }
    for tool in &mut tools {
        let (status, _) = tool.reap(EXIT_TIMEOUT)?;
        if !status.success() {
            bail!("{} failed ({status})", tool.what);
        }
    }
    let cost = |ids: &HashSet<u32>| -> Result<f64> {
        let (mut time, mut cnt) = (0u64, 0u64);
        for id in ids {
            let (Some((name, t1, c1)), Some((_, t0, c0))) = (after.get(id), before.get(id)) else {
                continue;
            };
            if name == PROGRAM {
                time += t1.saturating_sub(*t0);
                cnt += c1.saturating_sub(*c0);
            }
        }
        (cnt > 0)
            .then(|| time as f64 / cnt as f64)
            .context("no sched_switch events were counted")
    };
    let this = cost(&ids[if this_first { 0 } else { 1 }])?;
    let theirs = cost(&ids[if this_first { 1 } else { 0 }])?;
    Ok((this, theirs))
}
