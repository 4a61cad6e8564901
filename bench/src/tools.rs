//! The conditions a run is measured under (nothing attached, ours in wall or cpu mode,
//! offcputime, perf) and the tools behind them, attached before the load starts and stopped
//! with SIGINT as soon as it ends (each tool writes its output on SIGINT), so a capture covers
//! the whole load and no time is spent waiting for a timer.
//!
//! A [`ProfiledService`] is a service (nginx's master, PostgreSQL's postmaster, or one process) and
//! the processes that do its work. Ours runs one instance on the service (it follows the
//! children); offcputime and perf take one PID, so they run one instance per process (and
//! `wall-each`, ours as it was run before it followed children, does the same). Profiling
//! every worker measures the overhead of profiling everything that serves the requests;
//! profiling only the busiest would leave about half the traffic unprofiled and flatter every
//! tool alike.

use std::{
    cell::RefCell,
    collections::{HashMap, HashSet},
    fs,
    path::{Path, PathBuf},
    process::{Command, ExitStatus},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use xtask::packages::Package;

use crate::{
    process::{Instance, Ready, bpf_prog_ids, say, tail_of_lines},
    quiet::{ForeignCpu, Quiet},
};

/// After every tool reports it is attached: lets start-up work (symbol loading, the task
/// snapshot) finish so it is not charged to the throughput of the run.
pub const SETTLE: Duration = Duration::from_secs(1);
/// From SIGINT to exit: symbolization and writing the output.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(120);
/// Nominal capture length of a tool stopped by SIGINT; only bounds a run whose stop is lost.
const TOOL_MAX_SECS: u64 = 3600;

/// What the bench runs besides the profiler; the demos run part of it.
pub const PACKAGES: &[Package] = &[
    Package {
        binary: "/usr/sbin/nginx",
        name: "nginx",
        why: "the web server put under load",
    },
    Package {
        binary: "/usr/bin/wrk",
        name: "wrk",
        why: "the HTTP load generator",
    },
    Package {
        binary: "/usr/sbin/offcputime",
        name: "libbpf-tools",
        why: "offcputime, the off-CPU anchor",
    },
    Package {
        binary: "/usr/bin/perf",
        name: "linux-perf",
        why: "perf record, the DWARF-unwinding anchor",
    },
    Package {
        binary: "/usr/sbin/bpftool",
        name: "bpftool",
        why: "reads each BPF program's run_time_ns and run_cnt",
    },
    Package {
        // Debian's versioned server packages install under this directory (pgbench with
        // the server since PostgreSQL 15; the bench finds the version there).
        binary: "/usr/lib/postgresql",
        name: "postgresql",
        why: "the database server and pgbench, its load generator",
    },
    Package {
        binary: "/usr/bin/gcc",
        name: "gcc",
        why: "builds the fsync-heavy workload (profiler/tests/fixtures/workload.c)",
    },
];

/// What runs next to nginx during one wrk run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Condition {
    /// Nothing attached.
    #[value(skip)]
    Baseline,
    Wall,
    /// Ours in wall mode without the timeline (`--no-timeline`): next to `Wall` (which records
    /// it, as its `--report` asks), what the timeline costs. BPF cost phase only.
    WallNoTimeline,
    /// Ours in wall mode without wakers (`--no-wakers`, `--report` as `Wall`): our lowest
    /// cost per context switch, in the same cost table. BPF cost phase only.
    WallNoWakers,
    /// Ours in wall mode, one instance per process of the target (as before it followed
    /// children).
    WallEach,
    Cpu,
    Offcputime,
    Perf,
}

impl Condition {
    pub const ALL: [Condition; 8] = [
        Condition::Baseline,
        Condition::Wall,
        Condition::WallNoTimeline,
        Condition::WallNoWakers,
        Condition::WallEach,
        Condition::Cpu,
        Condition::Offcputime,
        Condition::Perf,
    ];

    /// For the table.
    pub fn label(self) -> &'static str {
        match self {
            Condition::Baseline => "baseline (no profiler)",
            Condition::Wall => "ours `--mode wall`",
            Condition::WallNoTimeline => "ours `--mode wall --no-timeline`",
            Condition::WallNoWakers => "ours `--mode wall --no-wakers`",
            Condition::WallEach => "ours `--mode wall`, one instance per process",
            Condition::Cpu => "ours `--mode cpu`",
            Condition::Offcputime => "offcputime (libbpf-tools)",
            Condition::Perf => "`perf record -F 99 --call-graph dwarf`",
        }
    }

    /// For messages.
    pub fn tool(self) -> &'static str {
        match self {
            Condition::Baseline => "nothing",
            Condition::Wall => "profiler --mode wall",
            Condition::WallNoTimeline => "profiler --mode wall --no-timeline",
            Condition::WallNoWakers => "profiler --mode wall --no-wakers",
            Condition::WallEach => "profiler --mode wall (one per process)",
            Condition::Cpu => "profiler --mode cpu",
            Condition::Offcputime => "offcputime",
            Condition::Perf => "perf record",
        }
    }

    /// Who owns the BPF programs of this condition, for the cost tables.
    pub fn owner(self) -> &'static str {
        match self {
            Condition::Offcputime => "offcputime",
            Condition::WallEach => "ours, one per process,",
            Condition::WallNoTimeline => NO_TIMELINE_OWNER,
            Condition::WallNoWakers => NO_WAKERS_OWNER,
            Condition::Perf => "perf",
            _ => "ours",
        }
    }

    /// Whether the throughput phase runs it. Not the timeline's switch nor the wakers' one:
    /// each costs a few ns of a context switch, far below what a throughput ratio resolves
    /// (~1.5 % per run); bpf_stats measures them.
    pub fn in_throughput(self) -> bool {
        !matches!(self, Condition::WallNoTimeline | Condition::WallNoWakers)
    }

    /// The instances that profile `target`, each with what it profiles: ours one on the
    /// service, the others one per process; none for the baseline.
    fn commands(self, bench: &Bench, target: &ProfiledService) -> Vec<(String, Command)> {
        let max = TOOL_MAX_SECS.to_string();
        let ours = |mode: &str, pid: u32| {
            let mut cmd = Command::new(&bench.binary);
            cmd.args(["--pid", &pid.to_string(), "--secs", &max, "--mode", mode])
                .arg("-o")
                .arg(bench.dir.join(format!("ours-{mode}-{pid}.svg")))
                .arg("--report")
                .arg(bench.dir.join(format!("ours-{mode}-{pid}.json")));
            cmd
        };
        let service = |cmd: Command| vec![(format!("{} {}", target.kind, target.service), cmd)];
        let each = |make: &dyn Fn(u32) -> Command| {
            target
                .processes
                .iter()
                .map(|&pid| (format!("{} {pid}", target.each), make(pid)))
                .collect()
        };
        match self {
            Condition::Baseline => Vec::new(),
            Condition::Wall => service(ours("wall", target.service)),
            Condition::WallNoTimeline => {
                let mut cmd = ours("wall", target.service);
                cmd.arg("--no-timeline");
                service(cmd)
            }
            Condition::WallNoWakers => {
                let mut cmd = ours("wall", target.service);
                cmd.arg("--no-wakers");
                service(cmd)
            }
            Condition::Cpu => service(ours("cpu", target.service)),
            Condition::WallEach => each(&|pid| ours("wall", pid)),
            Condition::Offcputime => each(&|pid| {
                let mut cmd = Command::new("/usr/sbin/offcputime");
                cmd.args(["-p", &pid.to_string(), &max]);
                cmd
            }),
            Condition::Perf => each(&|pid| {
                let mut cmd = Command::new("perf");
                cmd.args(["record", "-F", "99", "--call-graph", "dwarf", "-p"])
                    .arg(pid.to_string())
                    .arg("-o")
                    .arg(bench.dir.join(format!("perf-{pid}.data")))
                    .args(["--", "sleep", &max]);
                cmd
            }),
        }
    }

    fn ready(self) -> Ready {
        match self {
            Condition::Wall
            | Condition::WallNoTimeline
            | Condition::WallNoWakers
            | Condition::WallEach
            | Condition::Cpu => Ready::StderrLine("profiler: capturing"),
            // The baseline starts no tool, so this is never asked.
            Condition::Offcputime | Condition::Baseline => Ready::BpfLink,
            Condition::Perf => Ready::ChildExec("sleep"),
        }
    }

    /// Whether a run we stopped with SIGINT ended well. perf exits with its workload's
    /// status, and its `sleep` dies from the stop, so perf is judged by its final message.
    fn stopped_cleanly(self, status: ExitStatus, stderr: &[String]) -> bool {
        match self {
            Condition::Perf => stderr.iter().any(|l| l.contains("Captured and wrote")),
            _ => status.success(),
        }
    }
}

/// The owner of ours without the timeline in the cost tables (`ours` is ours with it).
pub const NO_TIMELINE_OWNER: &str = "ours, no timeline,";
/// The owner of ours without wakers (`--no-wakers`) in the cost tables.
pub const NO_WAKERS_OWNER: &str = "ours, no wakers,";

/// What a tool profiles: a service and the processes that do its work.
#[derive(Clone, Debug)]
pub struct ProfiledService {
    /// What the service PID is, for messages ("nginx master").
    pub kind: &'static str,
    pub service: u32,
    /// What each process is ("nginx worker").
    pub each: &'static str,
    pub processes: Vec<u32>,
}

/// What the phases share.
pub struct Bench {
    pub binary: PathBuf,
    pub dir: PathBuf,
    pub port: u16,
    /// The nginx of phases 2 and 3: its master and workers.
    pub nginx: ProfiledService,
    pub quiet: RefCell<Quiet>,
}

/// One load run under one condition.
pub struct Run {
    /// Per program name: (run_time_ns, run_cnt) accumulated during the load, summed over
    /// the instances.
    pub bpf: HashMap<String, (u64, u64)>,
    /// How many instances of the tool ran (each runs every program on every event).
    pub instances: usize,
    /// Our instances' in-kernel counters (`capture.counters` of the JSON report), summed.
    pub counters: HashMap<String, u64>,
    /// Our instances' threads against their schedstat.
    pub agreement: Vec<Agreement>,
    pub load_secs: f64,
    /// CPU time other processes took during the load, as a fraction of all CPUs.
    pub foreign: f64,
}

/// Instances of `cond`'s tool on `target` (see [`Condition::commands`]), all attached, then
/// [`SETTLE`]; none for the baseline.
pub fn attach(bench: &Bench, cond: Condition, target: &ProfiledService) -> Result<Vec<Instance>> {
    for attempt in 1.. {
        let mut tools = Vec::new();
        for (what, cmd) in cond.commands(bench, target) {
            tools.push(Instance::spawn(
                format!("{} (on {what})", cond.tool()),
                cmd,
            )?);
        }
        let ready = tools
            .iter_mut()
            .try_for_each(|tool| tool.wait_ready(cond.ready()));
        match ready {
            Ok(()) => {
                if !tools.is_empty() {
                    thread::sleep(SETTLE);
                }
                return Ok(tools);
            }
            // Ours, following children, refuses to start when a descendant it found in /proc
            // exits before it reads that child's maps (PostgreSQL's short-lived backends, psql's
            // included): a race in the profiler's start-up, not a failure of the run.
            Err(e) if attempt < ATTACH_ATTEMPTS && vanished_child(&e, target) => {
                say(&format!(
                    "{e:#}: a child exited during start-up; starting again"
                ));
            }
            Err(e) => return Err(e),
        }
    }
    unreachable!("the loop returns at the last attempt")
}

/// Starts of a tool before a start-up race counts as a failure.
const ATTACH_ATTEMPTS: usize = 3;

/// Whether ours refused to start over a process other than the one it was pointed at.
fn vanished_child(e: &anyhow::Error, target: &ProfiledService) -> bool {
    let text = format!("{e:#}");
    text.split("there is no process with PID ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|pid| pid.parse::<u32>().ok())
        .is_some_and(|pid| pid != target.service)
}

/// What our instances' JSON reports said about a run.
#[derive(Default)]
pub struct Reports {
    /// `capture.counters`, summed by name.
    pub counters: HashMap<String, u64>,
    /// One per thread that lived through the window (its schedstat read at both ends).
    pub agreement: Vec<Agreement>,
}

/// How far a thread's figures are from the kernel's own accounting of it
/// (`/proc/<pid>/task/<tid>/schedstat` at the window's start and end, which the report
/// carries), each as a share of the window: what issue 19 holds to 1 %.
#[derive(Clone, Copy, Debug)]
pub struct Agreement {
    /// |running + profiler overhead − schedstat on-CPU| ÷ window, in %.
    pub on_cpu_pct: f64,
    /// |runnable − schedstat run-queue wait| ÷ window, in %.
    pub runnable_pct: f64,
}

/// SIGINT to every instance, then each must exit cleanly. Returns what our instances' JSON
/// reports said; the outputs are removed.
pub fn stop(bench: &Bench, cond: Condition, mut tools: Vec<Instance>) -> Result<Reports> {
    for tool in &tools {
        tool.interrupt();
    }
    for tool in &mut tools {
        let (status, _) = tool.reap(EXIT_TIMEOUT)?;
        let lines = tool.lines();
        if !cond.stopped_cleanly(status, &lines) {
            bail!(
                "{} failed ({status}); its stderr ends with: {}",
                tool.what,
                tail_of_lines(&lines)
            );
        }
    }
    let reports = read_reports(&bench.dir)?;
    cleanup_outputs(&bench.dir);
    Ok(reports)
}

/// Every JSON report in `dir`: counters summed by name, and each thread's agreement with its
/// schedstat.
fn read_reports(dir: &Path) -> Result<Reports> {
    let mut reports = Reports::default();
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(reports);
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text =
            fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let report: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        let Some(counters) = report["capture"]["counters"].as_object() else {
            bail!("{} has no capture.counters", path.display());
        };
        for (name, value) in counters {
            *reports.counters.entry(name.clone()).or_default() += value.as_u64().unwrap_or(0);
        }
        reports.agreement.extend(agreement(&report));
    }
    Ok(reports)
}

/// Each thread of a report with a schedstat over the window (`--mode wall` and `off` only:
/// `cpu` has no run-queue figure).
fn agreement(report: &serde_json::Value) -> Vec<Agreement> {
    let (Some(window), Some(threads)) = (
        report["capture"]["duration_s"].as_f64(),
        report["threads"].as_array(),
    ) else {
        return Vec::new();
    };
    if window <= 0.0 || report["capture"]["mode"] == "cpu" {
        return Vec::new();
    }
    threads
        .iter()
        .filter_map(|t| {
            let pct = |k: &str| t[k].as_f64();
            let kernel_cpu = t["schedstat_on_cpu_s"].as_f64()?;
            let kernel_rq = t["schedstat_runnable_s"].as_f64()?;
            let cpu = (pct("running_pct")? + pct("profiler_pct")?) / 100.0 * window;
            let rq = pct("runnable_pct")? / 100.0 * window;
            Some(Agreement {
                on_cpu_pct: 100.0 * (cpu - kernel_cpu).abs() / window,
                runnable_pct: 100.0 * (rq - kernel_rq).abs() / window,
            })
        })
        .collect()
}

/// Attaches `cond`'s tool to `target`, runs `load` between two bpf_stats snapshots, stops
/// the tool.
pub fn run_condition(
    bench: &Bench,
    cond: Condition,
    target: &ProfiledService,
    load: impl FnOnce() -> Result<()>,
) -> Result<Run> {
    let tools = attach(bench, cond, target)?;
    let instances = tools.len();
    let prog_ids: HashSet<u32> = tools.iter().flat_map(|t| bpf_prog_ids(t.pid())).collect();
    let before = bpf_prog_stats(&prog_ids)?;
    let others = ForeignCpu::start();
    let load_started = Instant::now();
    load()?;
    let load_secs = load_started.elapsed().as_secs_f64();
    let foreign = others.fraction(load_secs);
    let after = bpf_prog_stats(&prog_ids)?;
    let reports = stop(bench, cond, tools)?;

    let mut bpf: HashMap<String, (u64, u64)> = HashMap::new();
    for (id, (name, time_after, cnt_after)) in &after {
        let (time_before, cnt_before) = before.get(id).map_or((0, 0), |(_, t, c)| (*t, *c));
        let entry = bpf.entry(name.clone()).or_default();
        entry.0 += time_after.saturating_sub(time_before);
        entry.1 += cnt_after.saturating_sub(cnt_before);
    }
    Ok(Run {
        bpf,
        instances,
        counters: reports.counters,
        agreement: reports.agreement,
        load_secs,
        foreign,
    })
}

/// The tools' outputs are not looked at; perf's are ~10 MB a run.
pub fn cleanup_outputs(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".svg") || name.ends_with(".json") || name.contains(".data") {
            let _ = fs::remove_file(entry.path());
        }
    }
}

impl Bench {
    /// The access log grows by about 100 bytes a request; nginx appends (O_APPEND), so
    /// truncating it between runs keeps the disk use small without a reload.
    pub fn log_reset(&self) {
        let _ = fs::File::create(self.dir.join("access.log"));
    }
}

/// `kernel.bpf_stats_enabled=1` while alive; the previous value is restored on drop, also
/// when the bench fails.
pub struct BpfStats {
    previous: String,
}

const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    pub fn enable() -> Result<Self> {
        let previous = fs::read_to_string(BPF_STATS_SYSCTL)
            .with_context(|| format!("cannot read {BPF_STATS_SYSCTL}"))?
            .trim()
            .to_string();
        fs::write(BPF_STATS_SYSCTL, "1")
            .with_context(|| format!("cannot enable bpf_stats ({BPF_STATS_SYSCTL})"))?;
        say("kernel.bpf_stats_enabled=1 for the BPF cost runs (restored afterwards)");
        Ok(BpfStats { previous })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = fs::write(BPF_STATS_SYSCTL, &self.previous);
    }
}

/// `bpftool -j prog show`: id → (name, run_time_ns, run_cnt) for the given ids.
pub fn bpf_prog_stats(ids: &HashSet<u32>) -> Result<HashMap<u32, (String, u64, u64)>> {
    let json = xtask::output(
        Command::new("bpftool").args(["-j", "prog", "show"]),
        "bpftool",
    )?;
    let progs: serde_json::Value =
        serde_json::from_str(&json).context("bpftool printed no JSON")?;
    let mut stats = HashMap::new();
    for prog in progs
        .as_array()
        .context("bpftool printed no program list")?
    {
        let Some(id) = prog["id"].as_u64().map(|id| id as u32) else {
            continue;
        };
        if !ids.contains(&id) {
            continue;
        }
        let name = prog["name"].as_str().unwrap_or("?").to_string();
        let (Some(time), Some(cnt)) = (prog["run_time_ns"].as_u64(), prog["run_cnt"].as_u64())
        else {
            // bpftool omits both while stats are off; a program that never ran has neither.
            stats.insert(id, (name, 0, 0));
            continue;
        };
        stats.insert(id, (name, time, cnt));
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_vanished_child_is_a_start_up_race() {
        let target = ProfiledService {
            kind: "PostgreSQL postmaster",
            service: 100,
            each: "PostgreSQL backend",
            processes: vec![101],
        };
        let said = |pid: u32| {
            anyhow::anyhow!(
                "profiler exited before it was attached; its stderr ends with: profiler: there \
                 is no process with PID {pid}"
            )
        };
        assert!(vanished_child(&said(18224), &target));
        assert!(!vanished_child(&said(100), &target));
        assert!(!vanished_child(&anyhow::anyhow!("EPERM"), &target));
    }
}
