//! `cargo xtask bench --against OTHER_PROFILER`: the BPF cost per event of this build against
//! another build of the profiler, for changes too small for the throughput rounds to see.
//! `cargo xtask bench --timeline-ab`: the same with this build twice, recording the timeline
//! and not (`--no-timeline`): what the timeline costs in `sched_switch`.
//!
//! Both profilers run on the same nginx worker at once, so they see the same events under the
//! same load, and bpf_stats gives each program's time. The one attached second runs ~25 %
//! cheaper here (the first has already brought the task, its stack and the kernel's data into
//! the cache), so every pair runs in both orders and the result is the geometric mean of the
//! two ratios, in which that advantage cancels.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    thread,
};

use anyhow::{Context, Result, bail};

use crate::{
    nginx::run_wrk,
    process::{Instance, Ready, bpf_prog_ids, say},
    tools::{Bench, BpfStats, EXIT_TIMEOUT, SETTLE, bpf_prog_stats},
};

/// The program compared: the one every context switch on the machine runs.
const PROGRAM: &str = "sched_switch";

/// One profiler of a pair: a binary and how it is run.
pub struct Side {
    /// For messages and the result line.
    pub label: String,
    pub binary: PathBuf,
    /// Record the timeline (with a JSON report, as the cost phase runs ours) or not
    /// (`--no-timeline`); `None`: neither flag, as the binary runs by default with only an SVG.
    pub timeline: Option<bool>,
}

impl Side {
    /// `--against`: a binary as it runs by default (an SVG, no timeline).
    pub fn plain(label: impl Into<String>, binary: &Path) -> Self {
        Side {
            label: label.into(),
            binary: binary.to_path_buf(),
            timeline: None,
        }
    }

    fn command(&self, worker: u32, dir: &Path, i: usize) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.binary);
        cmd.args(["--pid", &worker.to_string(), "--secs", "3600", "-o"])
            .arg(dir.join(format!("against-{i}.svg")));
        if let Some(timeline) = self.timeline {
            cmd.arg("--report")
                .arg(dir.join(format!("against-{i}.json")));
            if !timeline {
                cmd.arg("--no-timeline");
            }
        }
        cmd
    }
}

/// `--timeline-ab`: this build with the timeline against this build without it.
pub fn timeline_sides(binary: &Path) -> (Side, Side) {
    (
        Side {
            label: "the timeline on".to_string(),
            binary: binary.to_path_buf(),
            timeline: Some(true),
        },
        Side {
            label: "off (--no-timeline)".to_string(),
            binary: binary.to_path_buf(),
            timeline: Some(false),
        },
    )
}

/// `pairs` pairs of runs of `this` and `other` at once on one nginx worker, each pair in both
/// attach orders; prints `this`'s sched_switch ns/event ÷ `other`'s.
pub fn run(bench: &Bench, this: &Side, other: &Side, pairs: usize, secs: u64) -> Result<()> {
    for side in [this, other] {
        if !side.binary.is_file() {
            bail!(
                "--against needs a profiler binary; {} is not a file",
                side.binary.display()
            );
        }
    }
    let worker = bench.nginx.processes[0];
    let _stats = BpfStats::enable()?;
    // Per pair, ln(this side's ns/event ÷ the other's) averaged over the two orders.
    let mut log_ratios = Vec::new();
    let mut ns = (Vec::new(), Vec::new());
    for pair in 0..pairs {
        let mut both = 0.0;
        for this_first in [true, false] {
            let (mine, theirs) = measure(bench, this, other, worker, secs, this_first)?;
            bench.log_reset();
            say(&format!(
                "pair {}/{pairs}, {} first: {} {mine:.0} ns/event, {} {theirs:.0} ns/event \
                 ({:.3})",
                pair + 1,
                if this_first {
                    &this.label
                } else {
                    &other.label
                },
                this.label,
                other.label,
                mine / theirs
            ));
            both += (mine / theirs).ln() / 2.0;
            ns.0.push(mine);
            ns.1.push(theirs);
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
    let mean_of = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "{PROGRAM} ns/event, {} ÷ {}: {:.3} (±{:.3}, one standard error over pairs; means \
         {:.0} ns and {:.0} ns), {pairs} pair(s) of {secs} s runs in both attach orders on \
         nginx worker {worker}",
        this.label,
        other.label,
        mean.exp(),
        mean.exp() * error,
        mean_of(&ns.0),
        mean_of(&ns.1),
    );
    Ok(())
}

/// One run with both profilers on `worker`: (this side's, the other's) ns per event.
fn measure(
    bench: &Bench,
    this: &Side,
    other: &Side,
    worker: u32,
    secs: u64,
    this_first: bool,
) -> Result<(f64, f64)> {
    let sides = if this_first {
        [this, other]
    } else {
        [other, this]
    };
    let mut tools = Vec::new();
    for (i, side) in sides.iter().enumerate() {
        let cmd = side.command(worker, &bench.dir, i);
        let mut tool = Instance::spawn(
            format!(
                "{} ({}, on nginx worker {worker})",
                side.binary.display(),
                side.label
            ),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &std::process::Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_timeline_pair_differs_only_by_no_timeline() {
        let (on, off) = timeline_sides(Path::new("/bin/profiler"));
        let dir = Path::new("/tmp/b");
        let (on, off) = (args(&on.command(7, dir, 0)), args(&off.command(7, dir, 0)));
        assert_eq!(
            on,
            [
                "--pid",
                "7",
                "--secs",
                "3600",
                "-o",
                "/tmp/b/against-0.svg",
                "--report",
                "/tmp/b/against-0.json"
            ]
        );
        assert_eq!(off[..on.len()], on[..]);
        assert_eq!(off[on.len()..], ["--no-timeline"]);
        let plain = Side::plain("other", Path::new("/bin/old"));
        assert_eq!(
            args(&plain.command(7, dir, 1))[..],
            on[..6]
                .iter()
                .map(|a| a.replace("-0", "-1"))
                .collect::<Vec<_>>()[..]
        );
    }
}
