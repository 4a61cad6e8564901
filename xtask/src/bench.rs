//! `cargo xtask bench`: what our profiler costs next to the anchors (libbpf-tools
//! `offcputime`, `perf record --call-graph dwarf`), measured side by side in one run on a
//! private nginx under wrk load.
//!
//! Three measurements, each in its own phase:
//! 1. **Throughput.** A profiled nginx worker against an unprofiled one within the same
//!    10 ms: both under their own wrk on one CPU, taking turns (see `throughput.rs`, which
//!    says why one-after-the-other runs cannot resolve a few percent on this machine). One
//!    run per condition (ours wall, ours cpu, offcputime, perf, and nothing at all as the
//!    noise floor) per round, the order rotating and the profiled side alternating.
//!    bpf_stats stays off here: its two clock reads per program run would tax the BPF tools.
//! 2. **BPF cost per event.** With `kernel.bpf_stats_enabled=1`, ours (wall) and offcputime
//!    run under the same wrk load; `run_time_ns / run_cnt` of each program is taken as the
//!    difference of two `bpftool prog show` snapshots, one just before wrk starts and one
//!    just after it ends, both while the programs are still attached. The counters are
//!    cumulative per program and both move on every run of the program, so the difference
//!    covers exactly every invocation during the load, none missed, none from other phases.
//! 3. **Post-processing and memory.** One 20 s wall capture of one worker under load (wrk
//!    keeps running through the post-processing, as on a loaded server); the time comes from
//!    the profiler's own `-v` log line, the peak RSS from `wait4`'s rusage.
//!
//! Phases 2 and 3 use one nginx with two workers under `wrk -t2 -c64`, unpinned. Both our
//! profiler and offcputime take a single PID, so there **every tool runs one instance per
//! worker**, all attached before wrk starts. That measures the
//! overhead of profiling everything that serves the requests; profiling only the busiest
//! worker would leave about half the traffic unprofiled and flatter every tool alike.
//!
//! Every tool is stopped with SIGINT as soon as wrk ends (each writes its output on SIGINT),
//! so its capture covers the whole wrk run and no time is spent waiting for a timer.
//!
//! Other sessions build and test on these same CPUs. Before each run the bench waits for the
//! machine to be quiet, measures other processes' CPU time during the run, and repeats a run
//! they disturbed; the report says how often that happened.

use std::{
    cell::RefCell,
    collections::{HashMap, HashSet},
    ffi::OsString,
    fmt::Write as _,
    fs,
    io::{BufRead as _, BufReader},
    net::{Ipv4Addr, TcpListener, TcpStream},
    os::unix::process::ExitStatusExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, ExitCode, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::packages::{self, Package};

const WRK_THREADS: u32 = 2;
const WRK_CONNECTIONS: u32 = 64;
pub(crate) const NGINX_WORKERS: usize = 2;
/// After every tool reports it is attached: lets start-up work (symbol loading, the task
/// snapshot) finish so it is not charged to the throughput of the run.
const SETTLE: Duration = Duration::from_secs(1);
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// From SIGINT to exit: symbolization and writing the output.
const EXIT_TIMEOUT: Duration = Duration::from_secs(120);
/// Capture length of the post-processing measurement (the README goal is for 20 s).
const POST_SECS: u64 = 20;
/// Busy fraction of all CPUs above which a run waits for the machine to become quiet.
const QUIET_BUSY: f64 = 0.10;
const QUIET_MAX_WAIT: Duration = Duration::from_secs(60);
/// Share of all CPUs other processes may take during a run before it is repeated.
const FOREIGN_MAX: f64 = 0.03;
const MAX_ATTEMPTS: usize = 3;
/// Nominal capture length of a tool stopped by SIGINT; only bounds a run whose stop is lost.
const TOOL_MAX_SECS: u64 = 3600;

/// Goals shown next to the numbers.
const GOAL_WALL_RATIO: f64 = 0.98;
const GOAL_COST_FACTOR: f64 = 0.7;
const GOAL_POST_SECS: f64 = 1.0;
const GOAL_RSS_MB: f64 = 150.0;

mod compare;
mod throughput;

/// `cargo xtask bench [--rounds N] [--secs S] [--quick] [--one-cpu]
/// [--only wall,cpu,offcputime,perf] [--against PROFILER_BINARY]`.
pub fn run(root: &Path, args: &[OsString]) -> Result<ExitCode> {
    let opts = Options::parse(args)?;
    if !crate::is_root() {
        bail!(
            "the bench installs packages, loads eBPF programs and sets sysctls: run it as root \
             (sudo -E cargo xtask bench)"
        );
    }
    let started = Instant::now();
    ensure_packages()?;
    crate::toolchain::ensure()?;
    let binary = crate::build(root, false)?;

    let scratch = Scratch::create()?;
    let nginx = Nginx::start(&scratch.0, NGINX_WORKERS)?;
    let bench = Bench {
        binary,
        dir: scratch.0.clone(),
        port: nginx.port,
        workers: nginx.workers()?,
        quiet: RefCell::default(),
    };
    say(&format!(
        "nginx (master {}, workers {:?}) serves http://127.0.0.1:{}/; {} round(s) of {} s",
        nginx.master.id(),
        bench.workers,
        bench.port,
        opts.rounds,
        opts.secs
    ));
    // Warm-up: first requests fault in nginx's pages and fill the page cache.
    run_wrk(bench.port, if opts.quick { 1 } else { 3 })?;
    if let Some(other) = &opts.against {
        compare::run(&bench, other, opts.rounds, opts.secs)?;
        return Ok(ExitCode::SUCCESS);
    }

    let throughput = {
        let sides = throughput::Sides::start(&scratch.0, opts.layout)?;
        say(&format!("throughput: {}", sides.describe()));
        throughput::rounds(&bench, &sides, &opts)?
    };
    let costs = bpf_costs(&bench, &opts)?;
    let post = post_processing(&bench, &opts)?;
    drop(nginx);

    let report = Report {
        opts: &opts,
        machine: Machine::describe(root),
        throughput: &throughput,
        costs: &costs,
        post: &post,
        quiet: &bench.quiet.borrow(),
        took: started.elapsed(),
    }
    .markdown();
    print!("{report}");
    let out_dir = root.join("target").join("bench");
    fs::create_dir_all(&out_dir).with_context(|| format!("cannot create {}", out_dir.display()))?;
    let out = out_dir.join("latest.md");
    fs::write(&out, &report).with_context(|| format!("cannot write {}", out.display()))?;
    say(&format!("wrote {}", out.display()));

    // The parsers that read files of untrusted processes get a longer fuzz run than CI's.
    let fuzz_secs = if opts.quick { 10 } else { BENCH_FUZZ_SECS };
    say(&format!("fuzzing each target for {fuzz_secs} s"));
    crate::fuzz::run(root, fuzz_secs)?;
    Ok(ExitCode::SUCCESS)
}

/// Seconds per fuzz target at the end of a full bench.
const BENCH_FUZZ_SECS: u64 = 300;

fn say(what: &str) {
    eprintln!("bench: {what}");
}

// ---------------------------------------------------------------------------------------------
// Options

struct Options {
    rounds: usize,
    secs: u64,
    quick: bool,
    /// `--one-cpu`: the throughput phase's worst-case layout.
    layout: throughput::Layout,
    /// `--against BINARY`: only compare BPF cost per event with that profiler build.
    against: Option<PathBuf>,
    /// `--only wall,offcputime`: the conditions run next to the baseline (all when empty).
    /// Fewer conditions per round put each one closer in time to its baseline.
    only: Vec<Condition>,
    /// As typed, for the report.
    command: String,
}

impl Options {
    fn parse(args: &[OsString]) -> Result<Self> {
        let mut opts = Options {
            // Twelve, not the five the issue asks for: the spread layout's noise floor is ~1.5 %
            // per run, and the goal is 2 %; twelve rounds put its standard error near 0.4 %.
            rounds: 12,
            secs: 6,
            quick: false,
            layout: throughput::Layout::Spread,
            against: None,
            only: Vec::new(),
            command: "cargo xtask bench".to_string(),
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let arg = arg.to_str().context("bench options must be UTF-8")?;
            opts.command.push(' ');
            opts.command.push_str(arg);
            let mut value = |name: &str| -> Result<u64> {
                let v = it
                    .next()
                    .and_then(|v| v.to_str())
                    .with_context(|| format!("{name} needs a number"))?;
                opts.command.push(' ');
                opts.command.push_str(v);
                v.parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("{name} needs a positive number, not {v:?}"))
            };
            match arg {
                "--rounds" => opts.rounds = value("--rounds")? as usize,
                "--secs" => opts.secs = value("--secs")?,
                "--quick" => opts.quick = true,
                "--one-cpu" => opts.layout = throughput::Layout::OneCpu,
                "--only" => {
                    let list = it
                        .next()
                        .and_then(|v| v.to_str())
                        .context("--only needs a list such as wall,offcputime")?;
                    opts.command.push(' ');
                    opts.command.push_str(list);
                    for name in list.split(',') {
                        let cond = Condition::ALL
                            .into_iter()
                            .find(|c| c.name() == Some(name))
                            .with_context(|| {
                                format!("--only: {name:?} is none of wall, cpu, offcputime, perf")
                            })?;
                        opts.only.push(cond);
                    }
                }
                "--against" => {
                    let path = it.next().context("--against needs a profiler binary")?;
                    opts.against = Some(PathBuf::from(path));
                }
                other => bail!(
                    "unknown bench option {other:?} (usage: cargo xtask bench [--rounds N] \
                     [--secs S] [--quick] [--one-cpu] [--only wall,cpu,offcputime,perf] \
                     [--against PROFILER_BINARY])"
                ),
            }
        }
        if opts.quick {
            opts.rounds = 1;
            opts.secs = 3;
        }
        Ok(opts)
    }

    /// The conditions measured: the baseline and what `--only` names (all by default).
    fn conditions(&self) -> Vec<Condition> {
        Condition::ALL
            .into_iter()
            .filter(|c| *c == Condition::Baseline || self.only.is_empty() || self.only.contains(c))
            .collect()
    }

    /// The post-processing capture: 20 s as in the goal, shortened with `--quick`.
    fn post_secs(&self) -> u64 {
        if self.quick { self.secs } else { POST_SECS }
    }
}

// ---------------------------------------------------------------------------------------------
// Packages

pub(crate) const PACKAGES: &[Package] = &[
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

/// Installs what the bench needs.
pub(crate) fn ensure_packages() -> Result<()> {
    packages::ensure(PACKAGES)
}

fn package_version(name: &str) -> String {
    output(
        Command::new("dpkg-query").args(["-W", "-f", "${Version}", name]),
        "dpkg-query",
    )
    .unwrap_or_else(|_| "?".to_string())
}

// ---------------------------------------------------------------------------------------------
// Scratch directory and nginx

/// A private directory for nginx's config, logs and the tools' outputs; removed at the end.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn create() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("profiler-bench-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("www"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A private nginx in the foreground (`daemon off`), on a free loopback port, with its own
/// config, pid file and logs; the system's nginx config and service are never touched.
/// Dropping it stops it, also when the bench fails half-way.
pub(crate) struct Nginx {
    master: Child,
    pub(crate) port: u16,
    worker_count: usize,
}

impl Nginx {
    pub(crate) fn start(dir: &Path, workers: usize) -> Result<Self> {
        let port = free_port()?;
        fs::write(
            dir.join("www/index.html"),
            "<!DOCTYPE html>\n<html><head><title>bench</title></head>\
             <body><p>A small static page for the profiler bench.</p></body></html>\n",
        )?;
        let conf = dir.join("nginx.conf");
        fs::write(&conf, nginx_config(dir, port, workers))?;
        let error_log = dir.join("error.log");
        let master = Command::new("/usr/sbin/nginx")
            .arg("-p")
            .arg(dir)
            .arg("-e")
            .arg(&error_log)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start nginx")?;
        let nginx = Nginx {
            master,
            port,
            worker_count: workers,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err()
            || children(nginx.master.id()).len() < workers
        {
            if Instant::now() > deadline {
                bail!(
                    "nginx did not start listening on 127.0.0.1:{port} with {workers} \
                     workers within 10 s; its error log ends with: {}",
                    tail_of_file(&error_log)
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(nginx)
    }

    pub(crate) fn workers(&self) -> Result<Vec<u32>> {
        let mut pids: Vec<u32> = children(self.master.id())
            .into_iter()
            .map(|(pid, _)| pid)
            .collect();
        pids.sort_unstable();
        if pids.len() != self.worker_count {
            bail!(
                "nginx has {} workers, expected {}",
                pids.len(),
                self.worker_count
            );
        }
        Ok(pids)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let workers = children(self.master.id());
        signal(self.master.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.master.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        for (pid, _) in workers {
            signal(pid, libc::SIGKILL);
        }
        let _ = self.master.kill();
        let _ = self.master.wait();
    }
}

fn nginx_config(dir: &Path, port: u16, workers: usize) -> String {
    let d = dir.display();
    format!(
        "# Written by cargo xtask bench; private to this run.
worker_processes {workers};
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    default_type text/html;
    server {{
        listen 127.0.0.1:{port};
        root {d}/www;
    }}
}}
"
    )
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("no free loopback port")?;
    Ok(listener.local_addr()?.port())
}

// ---------------------------------------------------------------------------------------------
// wrk

pub(crate) fn wrk_command(port: u16, secs: u64) -> Command {
    let mut cmd = Command::new("wrk");
    cmd.arg(format!("-t{WRK_THREADS}"))
        .arg(format!("-c{WRK_CONNECTIONS}"))
        .arg(format!("-d{secs}s"))
        .arg(format!("http://127.0.0.1:{port}/"));
    cmd
}

/// A load of `secs` (phases 2 and 3, and the warm-up); fails if wrk reports no rate.
fn run_wrk(port: u16, secs: u64) -> Result<()> {
    let out = output(&mut wrk_command(port, secs), "wrk")?;
    if !out.lines().any(|l| l.trim().starts_with("Requests/sec:")) {
        bail!("wrk printed no Requests/sec line: {}", tail(&out, 5));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Conditions and the tools behind them

/// What runs next to nginx during one wrk run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Condition {
    Baseline,
    Wall,
    Cpu,
    Offcputime,
    Perf,
}

/// How to tell that a tool is attached.
#[derive(Clone, Copy)]
enum Ready {
    /// It says so on stderr (ours: `profiler: capturing …`, printed after attach and start).
    StderrLine(&'static str),
    /// It holds a BPF link fd (offcputime prints nothing until the end).
    BpfLink,
    /// Its workload child has exec'd (perf forks `sleep` first and starts it only after the
    /// events are opened and enabled).
    ChildExec(&'static str),
}

impl Condition {
    const ALL: [Condition; 5] = [
        Condition::Baseline,
        Condition::Wall,
        Condition::Cpu,
        Condition::Offcputime,
        Condition::Perf,
    ];

    /// For the table.
    fn label(self) -> &'static str {
        match self {
            Condition::Baseline => "baseline (no profiler)",
            Condition::Wall => "ours `--mode wall`",
            Condition::Cpu => "ours `--mode cpu`",
            Condition::Offcputime => "offcputime (libbpf-tools)",
            Condition::Perf => "`perf record -F 99 --call-graph dwarf`",
        }
    }

    /// For `--only`.
    fn name(self) -> Option<&'static str> {
        match self {
            Condition::Baseline => None,
            Condition::Wall => Some("wall"),
            Condition::Cpu => Some("cpu"),
            Condition::Offcputime => Some("offcputime"),
            Condition::Perf => Some("perf"),
        }
    }

    /// For messages.
    fn tool(self) -> &'static str {
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
struct Bench {
    binary: PathBuf,
    dir: PathBuf,
    port: u16,
    workers: Vec<u32>,
    quiet: RefCell<Quiet>,
}

/// One wrk run under one condition.
struct Run {
    /// Per program name: (run_time_ns, run_cnt) accumulated during the wrk run, summed over
    /// the instances.
    bpf: HashMap<String, (u64, u64)>,
    load_secs: f64,
    /// CPU time other processes took during the wrk run, as a fraction of all CPUs.
    foreign: f64,
}

/// [`run_condition`], repeated while other processes disturbed it (see [`undisturbed`]).
fn run_undisturbed(bench: &Bench, cond: Condition, secs: u64) -> Result<Run> {
    undisturbed(bench, || {
        let run = run_condition(bench, cond, secs)?;
        let foreign = run.foreign;
        Ok((run, foreign))
    })
}

/// `measure` (which returns its result and other processes' share of the CPUs while it ran),
/// repeated up to [`MAX_ATTEMPTS`] times while that share exceeded [`FOREIGN_MAX`]: such a
/// run measures them, not us. Each attempt first waits for a quiet machine.
fn undisturbed<T>(bench: &Bench, mut measure: impl FnMut() -> Result<(T, f64)>) -> Result<T> {
    for attempt in 1.. {
        quiet_gate(bench);
        let (result, foreign) = measure()?;
        let mut quiet = bench.quiet.borrow_mut();
        if foreign <= FOREIGN_MAX || attempt == MAX_ATTEMPTS {
            if foreign > FOREIGN_MAX {
                quiet.kept_disturbed += 1;
            }
            quiet.worst_foreign = quiet.worst_foreign.max(foreign);
            return Ok(result);
        }
        quiet.repeated += 1;
        say(&format!(
            "other processes took {:.0} % of the CPUs during this run: repeating it",
            foreign * 100.0
        ));
    }
    unreachable!("the loop returns at the last attempt")
}

/// One instance of `cond`'s tool per pid, all attached, then [`SETTLE`]; none for the
/// baseline.
fn attach(bench: &Bench, cond: Condition, pids: &[u32]) -> Result<Vec<Instance>> {
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
fn stop(bench: &Bench, cond: Condition, mut tools: Vec<Instance>) -> Result<()> {
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
fn cleanup_outputs(dir: &Path) {
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

// ---------------------------------------------------------------------------------------------
// Other work on the machine (other sessions' builds and tests share these CPUs)

/// What [`quiet_gate`] saw, for the report.
#[derive(Default)]
struct Quiet {
    runs: usize,
    waited_runs: usize,
    waited: Duration,
    /// Runs started although the machine never became quiet.
    busy_runs: usize,
    worst_busy: f64,
    /// Runs repeated because other processes took CPU during the load.
    repeated: usize,
    /// Runs kept although disturbed (the last attempt).
    kept_disturbed: usize,
    worst_foreign: f64,
}

/// CPU time taken by other work during a run: all busy CPU time (/proc/stat) minus that of
/// the bench's own process tree (nginx, wrk, the tools) and of kernel threads (softirq work
/// for the loopback traffic). Counting by subtraction also catches the short-lived
/// compilers of another session's build, which no snapshot of /proc would see.
struct ForeignCpu {
    busy: u64,
    ours: u64,
}

impl ForeignCpu {
    fn start() -> Self {
        ForeignCpu {
            busy: cpu_ticks().0,
            ours: our_ticks(),
        }
    }

    /// Their CPU time since [`ForeignCpu::start`], as a fraction of all CPUs over `secs`.
    fn fraction(&self, secs: f64) -> f64 {
        let busy = cpu_ticks().0.saturating_sub(self.busy);
        let ours = our_ticks().saturating_sub(self.ours);
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let cpus = thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        busy.saturating_sub(ours) as f64 / hz / (secs * cpus)
    }
}

/// (busy, total) clock ticks of all CPUs from /proc/stat; busy is all but idle and iowait.
fn cpu_ticks() -> (u64, u64) {
    let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = fields.iter().sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// utime + stime + cutime + cstime of the bench's process tree and of kernel threads. The
/// children's part makes a process reaped during the run (wrk, a tool) still count: its time
/// moves into its parent's cutime/cstime.
fn our_ticks() -> u64 {
    let me = std::process::id();
    let mut parent = HashMap::new();
    let mut ticks = HashMap::new();
    for (pid, stat) in proc_stats() {
        // Fields after "(comm)": state ppid … flags(7th) … utime(12th) stime cutime cstime.
        let f: Vec<&str> = stat.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        parent.insert(pid, num(1) as u32);
        ticks.insert(
            pid,
            (
                num(6) & PF_KTHREAD != 0,
                num(11) + num(12) + num(13) + num(14),
            ),
        );
    }
    let in_tree = |mut pid: u32| {
        for _ in 0..64 {
            if pid == me {
                return true;
            }
            match parent.get(&pid) {
                Some(&ppid) if ppid != 0 => pid = ppid,
                _ => return false,
            }
        }
        false
    };
    ticks
        .iter()
        .filter(|(pid, (kthread, _))| *kthread || in_tree(**pid))
        .map(|(_, (_, t))| t)
        .sum()
}

/// `PF_KTHREAD` in /proc/<pid>/stat's flags: kernel threads are not "other work".
const PF_KTHREAD: u64 = 0x0020_0000;

/// Other work on the machine (builds and tests of other sessions, say) skews a run. Before
/// each run, with nginx idle and no tool running, wait until the CPUs are less than
/// [`QUIET_BUSY`] busy over half a second, for at most [`QUIET_MAX_WAIT`].
fn quiet_gate(bench: &Bench) {
    let started = Instant::now();
    let mut busy = cpu_busy(Duration::from_millis(500));
    let mut quiet = bench.quiet.borrow_mut();
    quiet.runs += 1;
    if busy >= QUIET_BUSY {
        quiet.waited_runs += 1;
        say(&format!(
            "the CPUs are {:.0} % busy without load: waiting for other work to finish",
            busy * 100.0
        ));
        while busy >= QUIET_BUSY && started.elapsed() < QUIET_MAX_WAIT {
            busy = cpu_busy(Duration::from_millis(500));
        }
        quiet.waited += started.elapsed();
        if busy >= QUIET_BUSY {
            quiet.busy_runs += 1;
            quiet.worst_busy = quiet.worst_busy.max(busy);
            say(&format!(
                "still {:.0} % busy after {} s; running anyway",
                busy * 100.0,
                QUIET_MAX_WAIT.as_secs()
            ));
        }
    }
}

/// Fraction of all CPUs' time spent busy over `interval`.
fn cpu_busy(interval: Duration) -> f64 {
    let (busy0, total0) = cpu_ticks();
    thread::sleep(interval);
    let (busy1, total1) = cpu_ticks();
    let total = total1.saturating_sub(total0);
    if total == 0 {
        return 0.0;
    }
    busy1.saturating_sub(busy0) as f64 / total as f64
}

/// The access log grows by about 100 bytes a request; nginx appends (O_APPEND), so
/// truncating it between runs keeps the disk use small without a reload.
fn nginx_log_reset(bench: &Bench) {
    let _ = fs::File::create(bench.dir.join("access.log"));
}

// ---------------------------------------------------------------------------------------------
// Phase 2: BPF cost per event

/// ns/event and events/s of one program, one value per run.
#[derive(Default)]
struct Cost {
    ns_per_event: Vec<f64>,
    events_per_sec: Vec<f64>,
}

#[derive(Default)]
struct Costs {
    /// Keyed by "<tool> <program name>", e.g. "ours sched_switch"; ours first, then by rank.
    programs: Vec<(String, Cost)>,
    /// Per tool: BPF run time of all its programs together, in ms per second of load (what
    /// the tool takes from the machine in the kernel, whatever the number of programs).
    busy_ms_per_sec: Vec<(String, Vec<f64>)>,
}

fn bpf_costs(bench: &Bench, opts: &Options) -> Result<Costs> {
    let _stats = BpfStats::enable()?;
    let mut costs = Costs::default();
    for round in 0..opts.rounds {
        let mut order: Vec<Condition> = [Condition::Wall, Condition::Offcputime]
            .into_iter()
            .filter(|c| opts.conditions().contains(c))
            .collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for cond in order {
            let run = run_undisturbed(bench, cond, opts.secs)?;
            nginx_log_reset(bench);
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
                    opts.rounds
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

/// `kernel.bpf_stats_enabled=1` while alive; the previous value is restored on drop, also
/// when the bench fails.
struct BpfStats {
    previous: String,
}

const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn enable() -> Result<Self> {
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

/// The programs a process holds: every bpf-prog and bpf_link fd's fdinfo names a `prog_id`.
/// (This is what `bpftool prog show` would print as "pids", which Debian's bpftool lacks.)
fn bpf_prog_ids(pid: u32) -> HashSet<u32> {
    fdinfos(pid)
        .iter()
        .flat_map(|info| info.lines())
        .filter_map(|l| l.strip_prefix("prog_id:"))
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

fn holds_bpf_link(pid: u32) -> bool {
    fdinfos(pid).iter().any(|info| info.contains("link_id:"))
}

fn fdinfos(pid: u32) -> Vec<String> {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| fs::read_to_string(e.path()).ok())
        .collect()
}

/// `bpftool -j prog show`: id → (name, run_time_ns, run_cnt) for the given ids.
fn bpf_prog_stats(ids: &HashSet<u32>) -> Result<HashMap<u32, (String, u64, u64)>> {
    let json = output(
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

// ---------------------------------------------------------------------------------------------
// Phase 3: post-processing time and peak RSS

struct Post {
    capture_secs: u64,
    /// From the profiler's `post-processing took X s` log line.
    logged_secs: Option<f64>,
    /// From outside: exit − (capturing line + capture length); an upper bound.
    measured_secs: f64,
    peak_rss_kib: u64,
    /// Other processes' share of the CPUs during the capture.
    foreign: f64,
}

fn post_processing(bench: &Bench, opts: &Options) -> Result<Post> {
    let capture_secs = opts.post_secs();
    let worker = bench.workers[0];
    quiet_gate(bench);
    // wrk starts first and outlives the capture: the profiler attaches, captures and
    // post-processes on a loaded machine, as it would in use.
    let mut wrk = Instance::spawn(
        "wrk".to_string(),
        wrk_command(bench.port, capture_secs + EXIT_TIMEOUT.as_secs() + 30),
    )?;
    thread::sleep(SETTLE);
    let svg = bench.dir.join("post.svg");
    let mut cmd = Command::new(&bench.binary);
    cmd.args([
        "--pid",
        &worker.to_string(),
        "--secs",
        &capture_secs.to_string(),
    ])
    .args(["--mode", "wall", "-v", "-o"])
    .arg(&svg);
    let mut ours = Instance::spawn(
        format!("profiler --mode wall -v (on nginx worker {worker})"),
        cmd,
    )?;
    say(&format!(
        "post-processing: a {capture_secs} s wall capture of worker {worker} under load"
    ));
    ours.wait_ready(Ready::StderrLine("profiler: capturing"))?;
    let capturing_at = ours
        .line_time("profiler: capturing")
        .unwrap_or_else(Instant::now);
    let others = ForeignCpu::start();
    let (status, usage) = ours.reap(Duration::from_secs(capture_secs) + EXIT_TIMEOUT)?;
    let exited_at = Instant::now();
    let foreign = others.fraction(exited_at.duration_since(capturing_at).as_secs_f64());
    wrk.interrupt();
    let _ = wrk.reap(Duration::from_secs(10));
    nginx_log_reset(bench);

    let lines = ours.lines();
    if !status.success() {
        bail!(
            "{} failed ({status}); its stderr ends with: {}",
            ours.what,
            tail_of_lines(&lines)
        );
    }
    if fs::metadata(&svg).map_or(true, |m| m.len() == 0) {
        bail!("{} wrote no SVG to {}", ours.what, svg.display());
    }
    let logged_secs = lines.iter().find_map(|l| {
        let rest = &l[l.find("post-processing took ")? + "post-processing took ".len()..];
        rest.split_whitespace().next()?.parse::<f64>().ok()
    });
    let measured_secs = exited_at
        .saturating_duration_since(capturing_at)
        .as_secs_f64()
        - capture_secs as f64;
    cleanup_outputs(&bench.dir);
    Ok(Post {
        capture_secs,
        logged_secs,
        measured_secs: measured_secs.max(0.0),
        peak_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
        foreign,
    })
}

// ---------------------------------------------------------------------------------------------
// A running tool

/// A child process whose stderr is collected line by line, with the time each line arrived.
/// It is reaped with `wait4` (for its rusage); dropping a still-running one kills it.
struct Instance {
    what: String,
    child: Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    reader: Option<thread::JoinHandle<()>>,
    exit: Option<(ExitStatus, libc::rusage)>,
}

impl Instance {
    fn spawn(what: String, mut cmd: Command) -> Result<Self> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        let stderr = child.stderr.take().context("no stderr pipe")?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let reader = thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((Instant::now(), line));
            }
        });
        Ok(Instance {
            what,
            child,
            lines,
            reader: Some(reader),
            exit: None,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, l)| l.clone())
            .collect()
    }

    fn line_time(&self, prefix: &str) -> Option<Instant> {
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(_, l)| l.starts_with(prefix))
            .map(|(t, _)| *t)
    }

    fn wait_ready(&mut self, ready: Ready) -> Result<()> {
        let started = Instant::now();
        loop {
            if self.poll_exit() {
                self.join_reader();
                let status = self.exit.map(|(s, _)| s.to_string()).unwrap_or_default();
                bail!(
                    "{} exited before it was attached ({status}); its stderr ends with: {}",
                    self.what,
                    tail_of_lines(&self.lines())
                );
            }
            let ready_now = match ready {
                Ready::StderrLine(prefix) => self.line_time(prefix).is_some(),
                Ready::BpfLink => holds_bpf_link(self.pid()),
                Ready::ChildExec(comm) => children(self.pid()).iter().any(|(_, c)| c == comm),
            };
            if ready_now {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!(
                    "{} was not attached within {} s; its stderr ends with: {}",
                    self.what,
                    READY_TIMEOUT.as_secs(),
                    tail_of_lines(&self.lines())
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGINT: every tool here ends its capture and writes its output on it.
    fn interrupt(&self) {
        if self.exit.is_none() {
            signal(self.pid(), libc::SIGINT);
        }
    }

    /// Non-blocking `wait4`; true once the child has exited.
    fn poll_exit(&mut self) -> bool {
        if self.exit.is_some() {
            return true;
        }
        let mut status = 0;
        // SAFETY: rusage is plain data; wait4 fills it in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, with valid out-pointers.
        let r = unsafe {
            libc::wait4(
                self.pid() as libc::pid_t,
                &mut status,
                libc::WNOHANG,
                &mut usage,
            )
        };
        if r == self.pid() as libc::pid_t {
            self.exit = Some((ExitStatus::from_raw(status), usage));
        }
        self.exit.is_some()
    }

    /// Waits for the exit (killing the child after `timeout`), then for the last stderr lines.
    fn reap(&mut self, timeout: Duration) -> Result<(ExitStatus, libc::rusage)> {
        let started = Instant::now();
        while !self.poll_exit() {
            if started.elapsed() > timeout {
                signal(self.pid(), libc::SIGKILL);
                while !self.poll_exit() {
                    thread::sleep(Duration::from_millis(20));
                }
                self.join_reader();
                bail!(
                    "{} did not exit within {} s of being stopped; its stderr ends with: {}",
                    self.what,
                    timeout.as_secs(),
                    tail_of_lines(&self.lines())
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.join_reader();
        Ok(self.exit.expect("poll_exit returned true"))
    }

    fn join_reader(&mut self) {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if self.exit.is_none() {
            signal(self.pid(), libc::SIGKILL);
            while !self.poll_exit() {
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

pub(crate) fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory effects; the pid is one of our children.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Direct children of `pid` as (pid, comm).
fn children(pid: u32) -> Vec<(u32, String)> {
    proc_stats()
        .into_iter()
        .filter(|(_, stat)| {
            stat.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u32>().ok())
                == Some(pid)
        })
        .map(|(child, _)| (child, proc_comm(child)))
        .collect()
}

/// Every process as (pid, the part of /proc/<pid>/stat after "(comm) ": state ppid …).
fn proc_stats() -> Vec<(u32, String)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // comm may hold spaces and parentheses: the fields start after the last ')'.
            let rest = stat.get(stat.rfind(')')? + 1..)?.trim_start().to_string();
            Some((pid, rest))
        })
        .collect()
}

fn proc_comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The report

struct Machine {
    kernel: String,
    cpus: usize,
    cpu_model: String,
    memory_gib: f64,
    versions: String,
    revision: String,
}

impl Machine {
    fn describe(root: &Path) -> Self {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let versions = ["nginx", "wrk", "libbpf-tools", "linux-perf", "bpftool"]
            .iter()
            .map(|p| format!("{p} {}", package_version(p)))
            .collect::<Vec<_>>()
            .join(", ");
        let git = |args: &[&str]| {
            output(Command::new("git").current_dir(root).args(args), "git").unwrap_or_default()
        };
        let dirty = !git(&["status", "--porcelain"]).trim().is_empty();
        Machine {
            kernel: output(Command::new("uname").arg("-r"), "uname")
                .unwrap_or_default()
                .trim()
                .to_string(),
            cpus: thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
                .unwrap_or_else(|| "unknown CPU".to_string()),
            memory_gib: mem_kib / (1024.0 * 1024.0),
            versions,
            revision: format!(
                "{}{}",
                git(&["rev-parse", "--short", "HEAD"]).trim(),
                if dirty { " + uncommitted changes" } else { "" }
            ),
        }
    }
}

struct Report<'a> {
    opts: &'a Options,
    machine: Machine,
    throughput: &'a throughput::Throughput,
    costs: &'a Costs,
    post: &'a Post,
    quiet: &'a Quiet,
    took: Duration,
}

impl Report<'_> {
    fn markdown(&self) -> String {
        let mut md = String::new();
        self.header(&mut md);
        md.push_str("\n| measurement | median | min–max | goal | met |\n");
        md.push_str("|---|---:|---:|---|:-:|\n");
        self.throughput_rows(&mut md);
        self.cost_rows(&mut md);
        self.post_rows(&mut md);
        self.notes(&mut md);
        md
    }

    fn header(&self, md: &mut String) {
        let m = &self.machine;
        let o = self.opts;
        let date = output(
            Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]),
            "date",
        )
        .unwrap_or_default();
        let _ = writeln!(
            md,
            "### Overhead next to the anchors (`{}`)\n\n\
             {} · Linux {} · {} CPUs ({}) · {:.1} GiB RAM · profiler at {}  \n\
             {}  \n\
             Throughput: two nginx instances, {}, the wrks taking turns every 10 ms; each \
             tool profiles one side (alternating) and its figure is that side's requests/s ÷ \
             the other side's, {} round(s) of {} s with the order of conditions rotating. BPF \
             cost, post-processing: one nginx with {NGINX_WORKERS} workers under \
             `wrk -t{WRK_THREADS} -c{WRK_CONNECTIONS} -d{}s`, one profiler instance per \
             worker, attached before wrk starts and stopped when it ends. The whole bench \
             took {}.",
            o.command,
            date.trim(),
            m.kernel,
            m.cpus,
            m.cpu_model,
            m.memory_gib,
            m.revision,
            m.versions,
            match o.layout {
                throughput::Layout::Spread => format!(
                    "each with {NGINX_WORKERS} workers under its own `wrk -t{WRK_THREADS} \
                     -c{WRK_CONNECTIONS}`, all on all CPUs"
                ),
                throughput::Layout::OneCpu => format!(
                    "each with one worker under its own `wrk -t{} -c{}`, all four on one CPU \
                     (`--one-cpu`: the worker is preempted at every request)",
                    o.layout.wrk().0,
                    o.layout.wrk().1
                ),
            },
            o.rounds,
            o.secs,
            o.secs,
            minutes(self.took),
        );
    }

    fn throughput_rows(&self, md: &mut String) {
        let t = self.throughput;
        let base = t.unprofiled();
        let (lo, hi) = min_max(&base);
        let _ = writeln!(
            md,
            "| requests/s of one side, nothing attached (per second of its turns) | {:.0} | \
             {lo:.0}–{hi:.0} | | |",
            median(&base)
        );
        let floor = t.ratios(Condition::Baseline);
        let (lo, hi) = min_max(&floor);
        let _ = writeln!(
            md,
            "| throughput, one side ÷ the other, nothing attached (the noise floor) | {:.3} | \
             {lo:.3}–{hi:.3} | | |",
            median(&floor)
        );
        for cond in [
            Condition::Wall,
            Condition::Cpu,
            Condition::Offcputime,
            Condition::Perf,
        ] {
            let ratios = t.ratios(cond);
            if ratios.is_empty() {
                continue;
            }
            let (lo, hi) = min_max(&ratios);
            let mid = median(&ratios);
            let (goal, met) = if cond == Condition::Wall {
                (
                    format!("≥ {GOAL_WALL_RATIO}"),
                    check(mid >= GOAL_WALL_RATIO),
                )
            } else {
                (String::new(), "")
            };
            let _ = writeln!(
                md,
                "| throughput, profiled ÷ unprofiled side, {} | {mid:.3} | {lo:.3}–{hi:.3} | \
                 {goal} | {met} |",
                cond.label()
            );
        }
        let paired = t.paired(Condition::Wall, Condition::Offcputime);
        if paired.is_empty() {
            return;
        }
        let (lo, hi) = min_max(&paired);
        let _ = writeln!(
            md,
            "| throughput, ours `--mode wall` ÷ offcputime, same round | {:.3} | {lo:.3}–{hi:.3} \
             | ≥ 1 (no worse than offcputime) | {} |",
            median(&paired),
            versus(&paired)
        );
    }

    fn cost_rows(&self, md: &mut String) {
        let programs = &self.costs.programs;
        let theirs = programs
            .iter()
            .find(|(k, _)| k == "offcputime sched_switch")
            .map(|(_, c)| median(&c.ns_per_event));
        for (key, cost) in programs {
            let mid = median(&cost.ns_per_event);
            let (lo, hi) = min_max(&cost.ns_per_event);
            let (goal, met) = match (key.as_str(), theirs) {
                ("ours sched_switch", Some(theirs)) => (
                    format!(
                        "≤ {GOAL_COST_FACTOR} × offcputime's ({:.0} ns)",
                        GOAL_COST_FACTOR * theirs
                    ),
                    check(mid <= GOAL_COST_FACTOR * theirs),
                ),
                _ => (String::new(), ""),
            };
            let _ = writeln!(
                md,
                "| BPF ns/event, {key} ({}) | {mid:.0} ns | {lo:.0}–{hi:.0} ns | {goal} | {met} |",
                rate(median(&cost.events_per_sec))
            );
        }
        for (owner, values) in &self.costs.busy_ms_per_sec {
            let (lo, hi) = min_max(values);
            let _ = writeln!(
                md,
                "| BPF CPU time, {owner}, all programs (ms per s of load) | {:.1} ms | \
                 {lo:.1}–{hi:.1} ms | | |",
                median(values)
            );
        }
    }

    fn post_rows(&self, md: &mut String) {
        let p = self.post;
        let secs = p.logged_secs.unwrap_or(p.measured_secs);
        let _ = writeln!(
            md,
            "| post-processing after a {} s wall capture (end of window → SVG written) \
             | {secs:.2} s | | ≤ {GOAL_POST_SECS} s | {} |",
            p.capture_secs,
            check(secs <= GOAL_POST_SECS)
        );
        let mb = p.peak_rss_kib as f64 * 1024.0 / 1e6;
        let _ = writeln!(
            md,
            "| peak RSS of that run | {mb:.0} MB | | ≤ {GOAL_RSS_MB} MB | {} |",
            check(mb <= GOAL_RSS_MB)
        );
    }

    fn notes(&self, md: &mut String) {
        let p = self.post;
        let mut notes = vec![
            "Throughput runs have bpf_stats off. BPF ns/event is `run_time_ns / run_cnt` from \
             bpf_stats, the difference of two `bpftool prog show` snapshots taken just before \
             and just after the wrk run while the programs were attached, summed over both \
             instances; it counts every invocation system-wide (each program filters by PID \
             itself), in separate runs with `kernel.bpf_stats_enabled=1`."
                .to_string(),
            format!(
                "Post-processing: one instance on one worker with `-v`, wrk running throughout; \
                 {}; peak RSS is the child's `ru_maxrss`.",
                match p.logged_secs {
                    Some(s) => format!(
                        "the profiler logged {s:.3} s (measured from outside: ≤ {:.2} s)",
                        p.measured_secs
                    ),
                    None => format!(
                        "the profiler logged no `post-processing took` line, so this is \
                         measured from outside (exit − capture end) as {:.2} s",
                        p.measured_secs
                    ),
                }
            ),
        ];
        if p.foreign > FOREIGN_MAX {
            notes.push(format!(
                "Other processes took {:.0} % of the CPUs during the post-processing run.",
                p.foreign * 100.0
            ));
        }
        if self.opts.rounds < 5 {
            notes.push(format!(
                "Only {} round(s) of {} s: a smoke test, not numbers for the README.",
                self.opts.rounds, self.opts.secs
            ));
        }
        let q = self.quiet;
        if q.waited_runs > 0 {
            notes.push(format!(
                "Each run first waits for the CPUs to be < {:.0} % busy: {} of {} runs waited \
                 ({} in all) for other work on the machine{}.",
                QUIET_BUSY * 100.0,
                q.waited_runs,
                q.runs,
                minutes(q.waited),
                if q.busy_runs > 0 {
                    format!(
                        "; {} started while it was still up to {:.0} % busy",
                        q.busy_runs,
                        q.worst_busy * 100.0
                    )
                } else {
                    String::new()
                }
            ));
        }
        let means: Vec<String> = Condition::ALL
            .into_iter()
            .filter_map(|cond| {
                let (mean, se) = mean_se(&self.throughput.ratios(cond))?;
                Some(format!(
                    "{} {mean:.3} ± {se:.3}",
                    cond.name().unwrap_or("nothing attached")
                ))
            })
            .collect();
        if !means.is_empty() {
            notes.push(format!(
                "Throughput ratios as mean ± standard error over the rounds: {}. The unprofiled \
                 side's context switches still run each tool's programs up to its PID filter, \
                 and {}: neither is charged to the profiled side.",
                means.join(", "),
                match self.opts.layout {
                    throughput::Layout::OneCpu => "the tools' user space runs on the other CPUs",
                    throughput::Layout::Spread =>
                        "each tool's user-space process runs during both sides' turns (only \
                         perf's does much: it writes its samples as they come)",
                }
            ));
        }
        if q.repeated > 0 || q.worst_foreign > 0.005 {
            notes.push(format!(
                "Other processes' CPU time is measured during every run (from /proc); {} run(s) \
                 were repeated because it exceeded {:.0} % of the CPUs, {} kept at the last \
                 attempt; the worst run kept had {:.1} %.",
                q.repeated,
                FOREIGN_MAX * 100.0,
                q.kept_disturbed,
                q.worst_foreign * 100.0
            ));
        }
        md.push('\n');
        for n in notes {
            let _ = writeln!(md, "- {n}");
        }
    }
}

/// "412 events/s", "45.3 k events/s".
fn rate(per_sec: f64) -> String {
    if per_sec < 1000.0 {
        format!("{per_sec:.0} events/s")
    } else {
        format!("{:.1} k events/s", per_sec / 1000.0)
    }
}

fn check(met: bool) -> &'static str {
    if met { "✅" } else { "❌" }
}

/// Verdict on "ratio ≥ 1" from paired rounds. ✅ when the median is ≥ 1; ❌ only when ours
/// lost in so many rounds that chance explains it with p < 0.05 (one-sided sign test);
/// otherwise the rounds disagree and the difference is below what this machine resolves.
fn versus(paired: &[f64]) -> &'static str {
    if paired.is_empty() {
        return "";
    }
    if median(paired) >= 1.0 {
        return "✅";
    }
    let wins = paired.iter().filter(|r| **r >= 1.0).count();
    if sign_test_p(wins, paired.len()) < 0.05 {
        "❌"
    } else {
        "≈ (noise)"
    }
}

/// P(X ≤ wins) for X ~ Binomial(n, ½): how likely this few wins are if both were equal.
fn sign_test_p(wins: usize, n: usize) -> f64 {
    let mut p = 0.0;
    let mut choose = 1.0; // C(n, k)
    for k in 0..=wins.min(n) {
        if k > 0 {
            choose = choose * (n + 1 - k) as f64 / k as f64;
        }
        p += choose;
    }
    p / 2f64.powi(n as i32)
}

fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    format!("{} min {:02} s", s / 60, s % 60)
}

/// Mean and its standard error (sample standard deviation ÷ √n); None below two values.
fn mean_se(values: &[f64]) -> Option<(f64, f64)> {
    if values.len() < 2 {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some((mean, (var / n).sqrt()))
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        })
}

// ---------------------------------------------------------------------------------------------
// Running commands

/// Runs to completion; stdout on success, else one sentence with the stderr tail.
pub(crate) fn output(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start {what}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        bail!(
            "{what} failed ({}); its stderr ends with: {}",
            out.status,
            tail(
                if stderr.trim().is_empty() {
                    &stdout
                } else {
                    &stderr
                },
                5
            )
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    tail_of_lines_n(&lines, n)
}

fn tail_of_lines(lines: &[String]) -> String {
    tail_of_lines_n(lines, 5)
}

fn tail_of_lines_n(lines: &[String], n: usize) -> String {
    let kept: Vec<&str> = lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    if kept.is_empty() {
        return "(nothing)".to_string();
    }
    kept[kept.len().saturating_sub(n)..].join(" | ")
}

fn tail_of_file(path: &Path) -> String {
    tail(&fs::read_to_string(path).unwrap_or_default(), 5)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn options_defaults_quick_and_errors() {
        let o = Options::parse(&[]).unwrap();
        assert_eq!((o.rounds, o.secs, o.quick), (12, 6, false));
        assert_eq!(o.layout, throughput::Layout::Spread);
        let o = Options::parse(&args(&["--one-cpu"])).unwrap();
        assert_eq!(o.layout, throughput::Layout::OneCpu);
        assert_eq!(o.post_secs(), POST_SECS);
        let o = Options::parse(&args(&["--rounds", "7", "--secs", "20"])).unwrap();
        assert_eq!((o.rounds, o.secs), (7, 20));
        assert_eq!(o.command, "cargo xtask bench --rounds 7 --secs 20");
        let o = Options::parse(&args(&["--quick"])).unwrap();
        assert_eq!((o.rounds, o.secs, o.post_secs()), (1, 3, 3));
        assert!(Options::parse(&args(&["--rounds"])).is_err());
        assert!(Options::parse(&args(&["--rounds", "0"])).is_err());
        assert!(Options::parse(&args(&["--frobnicate"])).is_err());
    }

    #[test]
    fn median_and_range() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(min_max(&[0.99, 1.01, 0.97]), (0.97, 1.01));
        let (mean, se) = mean_se(&[1.0, 3.0]).unwrap();
        assert_eq!((mean, se), (2.0, 1.0));
        assert!(mean_se(&[1.0]).is_none());
    }

    #[test]
    fn paired_verdict_needs_a_significant_loss() {
        assert!((sign_test_p(0, 5) - 1.0 / 32.0).abs() < 1e-12);
        assert!((sign_test_p(1, 5) - 6.0 / 32.0).abs() < 1e-12);
        assert!((sign_test_p(5, 5) - 1.0).abs() < 1e-12);
        assert_eq!(versus(&[1.01, 0.99, 1.0]), "✅");
        assert_eq!(versus(&[0.98, 0.97, 0.99, 0.96, 0.95]), "❌");
        assert_eq!(versus(&[0.98, 1.02, 0.99, 0.96, 1.05]), "≈ (noise)");
        assert_eq!(versus(&[]), "");
    }

    #[test]
    fn stderr_tail_is_one_line() {
        let lines: Vec<String> = ["a", "", "b", "c"].iter().map(|s| s.to_string()).collect();
        assert_eq!(tail_of_lines_n(&lines, 2), "b | c");
        assert_eq!(tail_of_lines(&[]), "(nothing)");
    }

    #[test]
    fn nginx_config_stays_in_its_directory() {
        let conf = nginx_config(Path::new("/tmp/x"), 8080, 2);
        assert!(conf.contains("listen 127.0.0.1:8080;"));
        assert!(conf.contains("pid /tmp/x/nginx.pid;"));
        assert!(conf.contains("daemon off;"));
        assert!(!conf.contains("/var/"));
    }

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

    #[test]
    fn a_tool_that_dies_early_is_named_with_its_stderr() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo starting >&2; echo 'cannot attach: EPERM' >&2; exit 3",
        ]);
        let mut tool = Instance::spawn("profiler --mode wall (on nginx worker 1)".into(), cmd)
            .expect("sh starts");
        let err = tool
            .wait_ready(Ready::StderrLine("profiler: capturing"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "profiler --mode wall (on nginx worker 1) exited before it was attached \
             (exit status: 3); its stderr ends with: starting | cannot attach: EPERM"
        );
    }
}
