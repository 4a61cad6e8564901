//! Phase 2, BPF cost per event, on each workload ([`Workload`]). With
//! `kernel.bpf_stats_enabled=1`, ours and offcputime run under the same load, one after the
//! other; `run_time_ns / run_cnt` of each program is taken as the difference of two
//! `bpftool prog show` snapshots, one just before the load window and one just after it,
//! both while the programs are still attached. The counters are cumulative per program and
//! both move on every run of the program, so the difference covers exactly every invocation
//! during the window, none missed, none from other phases.
//!
//! A tool run as several instances (offcputime on each nginx worker) runs each tracepoint
//! program once per instance on every event; its ns/event is per event on the machine: all
//! instances' run time ÷ the events one instance saw. (Each instance's sampler has perf events
//! of its own, so the sampler's ns/event stays per run.)

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};

use crate::{
    nginx::run_wrk,
    postgres::Cluster,
    process::say,
    quiet::undisturbed,
    tools::{Agreement, Bench, BpfStats, Condition, ProfiledService, Run, run_condition},
};

/// What is profiled while bpf_stats counts.
pub enum Workload<'a> {
    /// The bench's nginx (two workers) under `wrk -t2 -c64`: ours on the master, the others
    /// on each worker.
    Nginx,
    /// One backend of a private PostgreSQL under `pgbench -c 4 -j 2` (scale 10,
    /// synchronous_commit on).
    Postgres(&'a Cluster),
    /// The test workload's `mixed` mode (this binary): a thread looping on write + fsync next
    /// to a 20 ms sleeper, a thread blocked on a pipe and one spinner more than there are
    /// CPUs.
    Fsync(&'a Path),
}

impl Workload<'_> {
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Nginx => "nginx",
            Workload::Postgres(_) => "postgres",
            Workload::Fsync(_) => "fsync",
        }
    }

    /// The conditions measured on it: one instance per process only differs from ours on
    /// the service where there are several processes. Ours without the timeline runs right
    /// after (or, in odd rounds, before) ours with it, so the two see about the same load;
    /// ours without wakers next, our lowest cost beside them.
    fn conditions(&self) -> &'static [Condition] {
        match self {
            Workload::Nginx => &[
                Condition::Wall,
                Condition::WallNoTimeline,
                Condition::WallNoWakers,
                Condition::WallEach,
                Condition::Offcputime,
            ],
            _ => &[
                Condition::Wall,
                Condition::WallNoTimeline,
                Condition::WallNoWakers,
                Condition::Offcputime,
            ],
        }
    }

    /// One run of `cond` with a load window of `secs`.
    fn run(&self, bench: &Bench, cond: Condition, secs: u64) -> Result<Run> {
        let window = || {
            thread::sleep(Duration::from_secs(secs));
            Ok(())
        };
        match self {
            Workload::Nginx => {
                let run = run_condition(bench, cond, &bench.nginx, || run_wrk(bench.port, secs));
                bench.log_reset();
                run
            }
            Workload::Postgres(cluster) => {
                let _load = cluster.load(3600)?;
                let backend = cluster.pgbench_backends()?[0];
                let target = ProfiledService {
                    kind: "PostgreSQL backend",
                    service: backend,
                    each: "PostgreSQL backend",
                    processes: vec![backend],
                };
                run_condition(bench, cond, &target, window)
            }
            Workload::Fsync(binary) => {
                let workload = FsyncWorkload::start(binary, &bench.dir)?;
                let target = ProfiledService {
                    kind: "fsync workload",
                    service: workload.pid(),
                    each: "fsync workload",
                    processes: vec![workload.pid()],
                };
                run_condition(bench, cond, &target, window)
            }
        }
    }
}

/// ns/event and events/s of one program, one value per run.
#[derive(Default)]
pub struct Cost {
    /// Per event on the machine (all instances' time ÷ one instance's count).
    pub ns_per_event: Vec<f64>,
    /// Per run of one instance's program (all instances' time ÷ all their counts).
    pub ns_per_run: Vec<f64>,
    pub events_per_sec: Vec<f64>,
    /// All instances' run time of this program, ms per second of load.
    pub ms_per_sec: Vec<f64>,
}

#[derive(Default)]
pub struct Costs {
    pub workload: &'static str,
    /// Keyed by "<owner> <program name>", e.g. "ours sched_switch"; ours first, then by rank.
    pub programs: Vec<(String, Cost)>,
    /// Per owner: BPF run time of all its programs together, in ms per second of load (what
    /// the tool takes from the machine in the kernel, whatever the number of programs).
    pub busy_ms_per_sec: Vec<(String, Vec<f64>)>,
    /// Per owner: BPF run time of all its programs together per context switch on the machine
    /// (what the ms/s would be at the same switch rate: other work changes the machine's rate
    /// from run to run).
    pub busy_ns_per_switch: Vec<(String, Vec<f64>)>,
    /// Per owner: instances per run.
    pub instances: Vec<(String, usize)>,
    /// Per owner (ours only): the in-kernel counters of every run, summed.
    pub counters: Vec<(String, HashMap<String, u64>)>,
    /// Per owner (ours only): every thread of every run against its schedstat.
    pub agreement: Vec<(String, Vec<Agreement>)>,
    /// Other processes' share of the CPUs, one value per run.
    pub foreign: Vec<f64>,
}

/// `rounds` runs of `secs` each of ours and offcputime on `workload`, as far as `conditions`
/// hold them, the order alternating.
pub fn bpf_costs(
    bench: &Bench,
    workload: &Workload,
    conditions: &[Condition],
    rounds: usize,
    secs: u64,
) -> Result<Costs> {
    let _stats = BpfStats::enable()?;
    let mut costs = Costs {
        workload: workload.name(),
        ..Costs::default()
    };
    for round in 0..rounds {
        let mut order: Vec<Condition> = workload
            .conditions()
            .iter()
            .copied()
            .filter(|c| conditions.contains(c))
            .collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for cond in order {
            let run = undisturbed(&bench.quiet, || {
                let run = workload.run(bench, cond, secs)?;
                let foreign = run.foreign;
                Ok((run, foreign))
            })?;
            costs.foreign.push(run.foreign);
            let owner = cond.owner();
            let instances = run.instances.max(1);
            *slot(&mut costs.instances, owner) = instances;
            let mut busy_ns = 0;
            for (name, (time, cnt)) in &run.bpf {
                busy_ns += time;
                if *cnt == 0 {
                    continue;
                }
                let key = format!("{owner} {name}");
                let shared = name != SAMPLER;
                let events = *cnt as f64 / if shared { instances as f64 } else { 1.0 };
                let ns = *time as f64 / events;
                say(&format!(
                    "bpf_stats {} {}/{}: {key:<34} {ns:>7.0} ns/event, {events:.0} events",
                    workload.name(),
                    round + 1,
                    rounds
                ));
                let cost = slot(&mut costs.programs, &key);
                cost.ns_per_event.push(ns);
                cost.ns_per_run.push(*time as f64 / *cnt as f64);
                cost.events_per_sec.push(events / run.load_secs);
                cost.ms_per_sec.push(*time as f64 / 1e6 / run.load_secs);
            }
            slot(&mut costs.busy_ms_per_sec, owner).push(busy_ns as f64 / 1e6 / run.load_secs);
            // The machine's context switches: one instance's sched_switch count.
            if let Some((_, cnt)) = run.bpf.get("sched_switch").filter(|(_, c)| *c > 0) {
                let switches = *cnt as f64 / instances as f64;
                slot(&mut costs.busy_ns_per_switch, owner).push(busy_ns as f64 / switches);
            }
            if !run.agreement.is_empty() {
                slot(&mut costs.agreement, owner).extend_from_slice(&run.agreement);
            }
            if !run.counters.is_empty() {
                let sums = slot(&mut costs.counters, owner);
                for (name, value) in &run.counters {
                    *sums.entry(name.clone()).or_default() += value;
                }
            }
        }
    }
    costs
        .programs
        .sort_by_key(|(key, _)| (!key.starts_with("ours"), program_rank(key), key.clone()));
    Ok(costs)
}

/// The test workload in `mixed` mode, killed when dropped.
pub struct FsyncWorkload {
    child: Child,
}

impl FsyncWorkload {
    pub fn start(binary: &Path, dir: &Path) -> Result<Self> {
        let mut child = Command::new(binary)
            .arg("mixed")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let workload = FsyncWorkload { child };
        if line.trim() != "ready" {
            bail!("the workload printed {line:?} instead of \"ready\"");
        }
        Ok(workload)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for FsyncWorkload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Builds the test workload (`profiler/tests/fixtures/workload.c`) as distributions build C:
/// `-O2` without frame pointers, with the tests' flags, into `dir`.
pub fn build_workload(root: &Path, dir: &Path) -> Result<PathBuf> {
    let source = root.join("profiler/tests/fixtures/workload.c");
    // The binary's name is the process name the profiler reports: keep it `workload`.
    let out = dir.join("workload");
    xtask::output(
        Command::new("gcc")
            .args([
                "-O2",
                "-g",
                "-fomit-frame-pointer",
                "-fno-optimize-sibling-calls",
                "-pthread",
                "-ldl",
                "-Wall",
                "-o",
            ])
            .arg(&out)
            .arg(&source),
        "gcc (building the fsync workload)",
    )?;
    Ok(out)
}

/// Our sampler's program: a perf event per CPU and instance, not shared between instances.
const SAMPLER: &str = "on_cpu_sample";

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
