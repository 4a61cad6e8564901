//! The conditions a run is measured under (nothing attached, ours in wall or cpu mode,
//! offcputime, perf) and the tools behind them: one instance per nginx worker, attached
//! before wrk starts and stopped with SIGINT as soon as it ends (each tool writes its output
//! on SIGINT), so a capture covers the whole load and no time is spent waiting for a timer.
//! Both our profiler and offcputime take a single PID, so profiling every worker measures
//! the overhead of profiling everything that serves the requests; profiling only the busiest
//! would leave about half the traffic unprofiled and flatter every tool alike.

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
    nginx::run_wrk,
    process::{Instance, Ready, bpf_prog_ids, say, tail_of_lines},
    quiet::{ForeignCpu, Quiet, undisturbed},
};

/// After every tool reports it is attached: lets start-up work (symbol loading, the task
/// snapshot) finish so it is not charged to the throughput of the run.
pub const SETTLE: Duration = Duration::from_secs(1);
/// From SIGINT to exit: symbolization and writing the output.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(120);
/// Nominal capture length of a tool stopped by SIGINT; only bounds a run whose stop is lost.
const TOOL_MAX_SECS: u64 = 3600;

/// What the bench runs besides the profiler; the nginx demo runs the same.
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
];

/// What runs next to nginx during one wrk run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Condition {
    /// Nothing attached.
    #[value(skip)]
    Baseline,
    Wall,
    Cpu,
    Offcputime,
    Perf,
}

impl Condition {
    pub const ALL: [Condition; 5] = [
        Condition::Baseline,
        Condition::Wall,
        Condition::Cpu,
        Condition::Offcputime,
        Condition::Perf,
    ];

    /// For the table.
    pub fn label(self) -> &'static str {
        match self {
            Condition::Baseline => "baseline (no profiler)",
            Condition::Wall => "ours `--mode wall`",
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
            Condition::Cpu => "profiler --mode cpu",
            Condition::Offcputime => "offcputime",
            Condition::Perf => "perf record",
        }
    }

    /// The command that profiles one worker; None for the baseline.
    fn command(self, bench: &Bench, pid: u32) -> Option<Command> {
        let max = TOOL_MAX_SECS.to_string();
        let ours = |mode: &str| {
            let mut cmd = Command::new(&bench.binary);
            cmd.args(["--pid", &pid.to_string(), "--secs", &max, "--mode", mode])
                .arg("-o")
                .arg(bench.dir.join(format!("ours-{mode}-{pid}.svg")));
            cmd
        };
        match self {
            Condition::Baseline => None,
            Condition::Wall => Some(ours("wall")),
            Condition::Cpu => Some(ours("cpu")),
            Condition::Offcputime => {
                let mut cmd = Command::new("/usr/sbin/offcputime");
                cmd.args(["-p", &pid.to_string(), &max]);
                Some(cmd)
            }
            Condition::Perf => {
                let mut cmd = Command::new("perf");
                cmd.args(["record", "-F", "99", "--call-graph", "dwarf", "-p"])
                    .arg(pid.to_string())
                    .arg("-o")
                    .arg(bench.dir.join(format!("perf-{pid}.data")))
                    .args(["--", "sleep", &max]);
                Some(cmd)
            }
        }
    }

    fn ready(self) -> Ready {
        match self {
            Condition::Wall | Condition::Cpu => Ready::StderrLine("profiler: capturing"),
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

/// What the phases share.
pub struct Bench {
    pub binary: PathBuf,
    pub dir: PathBuf,
    pub port: u16,
    pub workers: Vec<u32>,
    pub quiet: RefCell<Quiet>,
}

/// One wrk run under one condition.
pub struct Run {
    /// Per program name: (run_time_ns, run_cnt) accumulated during the wrk run, summed over
    /// the instances.
    pub bpf: HashMap<String, (u64, u64)>,
    pub load_secs: f64,
    /// CPU time other processes took during the wrk run, as a fraction of all CPUs.
    pub foreign: f64,
}

/// [`run_condition`], repeated while other processes disturbed it (see [`undisturbed`]).
pub fn run_undisturbed(bench: &Bench, cond: Condition, secs: u64) -> Result<Run> {
    undisturbed(&bench.quiet, || {
        let run = run_condition(bench, cond, secs)?;
        let foreign = run.foreign;
        Ok((run, foreign))
    })
}

/// One instance of `cond`'s tool per pid, all attached, then [`SETTLE`]; none for the
/// baseline.
pub fn attach(bench: &Bench, cond: Condition, pids: &[u32]) -> Result<Vec<Instance>> {
    let mut tools = Vec::new();
    for &pid in pids {
        if let Some(cmd) = cond.command(bench, pid) {
            tools.push(Instance::spawn(
                format!("{} (on nginx worker {pid})", cond.tool()),
                cmd,
            )?);
        }
    }
    for tool in &mut tools {
        tool.wait_ready(cond.ready())?;
    }
    if !tools.is_empty() {
        thread::sleep(SETTLE);
    }
    Ok(tools)
}

/// SIGINT to every instance, then each must exit cleanly; the outputs are removed.
pub fn stop(bench: &Bench, cond: Condition, mut tools: Vec<Instance>) -> Result<()> {
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
    cleanup_outputs(&bench.dir);
    Ok(())
}

/// Starts one instance per worker, waits until all are attached, runs wrk between two
/// bpf_stats snapshots, stops them.
fn run_condition(bench: &Bench, cond: Condition, secs: u64) -> Result<Run> {
    let tools = attach(bench, cond, &bench.workers)?;
    let prog_ids: HashSet<u32> = tools.iter().flat_map(|t| bpf_prog_ids(t.pid())).collect();
    let before = bpf_prog_stats(&prog_ids)?;
    let others = ForeignCpu::start();
    let load_started = Instant::now();
    run_wrk(bench.port, secs)?;
    let load_secs = load_started.elapsed().as_secs_f64();
    let foreign = others.fraction(load_secs);
    let after = bpf_prog_stats(&prog_ids)?;
    stop(bench, cond, tools)?;

    let mut bpf: HashMap<String, (u64, u64)> = HashMap::new();
    for (id, (name, time_after, cnt_after)) in &after {
        let (time_before, cnt_before) = before.get(id).map_or((0, 0), |(_, t, c)| (*t, *c));
        let entry = bpf.entry(name.clone()).or_default();
        entry.0 += time_after.saturating_sub(time_before);
        entry.1 += cnt_after.saturating_sub(cnt_before);
    }
    Ok(Run {
        bpf,
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
        if name.ends_with(".svg") || name.contains(".data") {
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
