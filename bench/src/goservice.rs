//! The Go service (`--workloads go`): what following goroutines costs a Go service under load
//! (issue 45 item 4). `profiler-core/tests/fixtures/gowait`'s `service` (a net/http handler
//! calling a 20 ms upstream with `http.Client.Get`, then about 1 ms of hashing) under
//! `wrk -t2 -c32`, in rounds that rotate three conditions: nothing attached, ours in wall mode
//! (goroutines followed: uprobes on `runtime.gopark` and `runtime.execute`), and ours with
//! `--no-goroutines` (the same capture, its OS threads only). Per run: the service's
//! requests/s, and with bpf_stats on, the run time and count of each of our programs, so the
//! uprobes' ns per run and runs per request are read from the kernel's own figures.

use std::{
    cell::RefCell,
    collections::HashMap,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};

use crate::{
    process::{Instance, Ready, bpf_prog_ids, say},
    quiet::{ForeignCpu, Quiet, undisturbed},
    tools::{BpfStats, bpf_prog_stats},
};

/// wrk's threads and connections on the Go service.
pub const WRK_THREADS: u32 = 2;
pub const WRK_CONNECTIONS: u32 = 32;

/// A condition of the Go service's runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GoCondition {
    Baseline,
    Goroutines,
    NoGoroutines,
}

impl GoCondition {
    pub const ALL: [GoCondition; 3] = [
        GoCondition::Baseline,
        GoCondition::Goroutines,
        GoCondition::NoGoroutines,
    ];

    pub fn label(self) -> &'static str {
        match self {
            GoCondition::Baseline => "nothing attached",
            GoCondition::Goroutines => "ours `--mode wall` (goroutines followed)",
            GoCondition::NoGoroutines => "ours `--mode wall --no-goroutines`",
        }
    }
}

/// One run: the requests/s wrk saw, and our programs' (name → run time ns, runs).
#[derive(Clone, Debug)]
pub struct GoRun {
    pub condition: GoCondition,
    pub rps: f64,
    pub requests: u64,
    pub programs: HashMap<String, (u64, u64)>,
}

#[derive(Default)]
pub struct GoService {
    pub runs: Vec<GoRun>,
    pub go_version: String,
    pub secs: u64,
}

/// A process of the fixture, killed when dropped.
struct Fixture(Child);

impl Fixture {
    /// Starts `gowait ARGS` and returns it with the port it printed (`ready PORT`).
    fn start(binary: &Path, args: &[&str]) -> Result<(Fixture, String)> {
        let mut child = Command::new(binary)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("no stdout pipe")?)
            .read_line(&mut line)
            .context("gowait said nothing")?;
        let port = line
            .strip_prefix("ready ")
            .map(|p| p.trim().to_string())
            .with_context(|| format!("gowait said {line:?}"))?;
        Ok((Fixture(child), port))
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Builds the fixture with the machine's Go (offline: the standard library only).
fn build(root: &Path, dir: &Path) -> Result<PathBuf> {
    let out = dir.join("gowait");
    let cache = dir.join("go");
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(root.join("profiler-core/tests/fixtures/gowait"))
        .env("GOCACHE", cache.join("cache"))
        .env("GOPATH", cache.join("gopath"))
        .env("GOPROXY", "off")
        .env("GOFLAGS", "")
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .status()
        .context("cannot run go build")?;
    if !status.success() {
        bail!("go build of the gowait fixture failed");
    }
    Ok(out)
}

pub fn measure(
    root: &Path,
    profiler: &Path,
    dir: &Path,
    quiet: &RefCell<Quiet>,
    rounds: usize,
    secs: u64,
) -> Result<GoService> {
    let gowait = build(root, dir)?;
    let go_version = xtask::output(Command::new("go").arg("version"), "go")?
        .trim()
        .to_string();
    let (_upstream, up_port) = Fixture::start(&gowait, &["upstream"])?;
    let (service, port) = Fixture::start(
        &gowait,
        &["service", &format!("http://127.0.0.1:{up_port}/")],
    )?;
    let pid = service.0.id();
    let url = format!("http://127.0.0.1:{port}/");
    say(&format!(
        "go: {rounds} round(s) of {secs} s on a Go net/http service (PID {pid}) calling a 20 ms \
         upstream, under wrk -t{WRK_THREADS} -c{WRK_CONNECTIONS}"
    ));
    // Warm: connections to the upstream made, the runtime's heap grown.
    wrk(&url, 2)?;
    let _stats = BpfStats::enable()?;
    let mut out = GoService {
        go_version,
        secs,
        ..GoService::default()
    };
    for round in 0..rounds {
        // The order rotates, so no condition always runs first in a round.
        for k in 0..GoCondition::ALL.len() {
            let condition = GoCondition::ALL[(round + k) % GoCondition::ALL.len()];
            let run = undisturbed(quiet, || {
                let others = ForeignCpu::start();
                let run = one_run(profiler, dir, pid, &url, secs, condition)?;
                let foreign = others.fraction(secs as f64);
                Ok((run, foreign))
            })?;
            say(&format!(
                "go {}/{rounds}, {}: {:.0} requests/s",
                round + 1,
                condition.label(),
                run.rps
            ));
            out.runs.push(run);
        }
    }
    Ok(out)
}

fn one_run(
    profiler: &Path,
    dir: &Path,
    pid: u32,
    url: &str,
    secs: u64,
    condition: GoCondition,
) -> Result<GoRun> {
    let mut tool = None;
    if condition != GoCondition::Baseline {
        let mut cmd = Command::new(profiler);
        cmd.arg("--pid")
            .arg(pid.to_string())
            .arg("--secs")
            .arg((secs + 30).to_string())
            .arg("-o")
            .arg(dir.join("go.svg"));
        if condition == GoCondition::NoGoroutines {
            cmd.arg("--no-goroutines");
        }
        let mut instance = Instance::spawn(format!("profiler ({})", condition.label()), cmd)?;
        instance.wait_ready(Ready::StderrLine("profiler: capturing"))?;
        tool = Some(instance);
    }
    let ids = tool
        .as_ref()
        .map(|t| bpf_prog_ids(t.pid()))
        .unwrap_or_default();
    let before = bpf_prog_stats(&ids)?;
    let (rps, requests) = wrk(url, secs)?;
    let after = bpf_prog_stats(&ids)?;
    let mut programs = HashMap::new();
    for (id, (name, time, cnt)) in after {
        let (t0, c0) = before.get(&id).map_or((0, 0), |(_, t, c)| (*t, *c));
        let e = programs.entry(name).or_insert((0, 0));
        e.0 += time.saturating_sub(t0);
        e.1 += cnt.saturating_sub(c0);
    }
    if let Some(mut t) = tool {
        t.interrupt();
        t.reap(Duration::from_secs(120))?;
    }
    // The service settles (its goroutines' connections) before the next run.
    thread::sleep(Duration::from_millis(300));
    Ok(GoRun {
        condition,
        rps,
        requests,
        programs,
    })
}

/// wrk for `secs`: (requests/s, requests).
fn wrk(url: &str, secs: u64) -> Result<(f64, u64)> {
    let out = xtask::output(
        Command::new("wrk")
            .arg(format!("-t{WRK_THREADS}"))
            .arg(format!("-c{WRK_CONNECTIONS}"))
            .arg(format!("-d{secs}s"))
            .arg(url),
        "wrk",
    )?;
    let rps = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .with_context(|| format!("wrk printed no Requests/sec: {}", xtask::tail(&out, 5)))?;
    let requests = out
        .lines()
        .find_map(|l| {
            let l = l.trim();
            let (n, rest) = l.split_once(' ')?;
            rest.starts_with("requests in").then(|| n.parse().ok())?
        })
        .unwrap_or(0);
    Ok((rps, requests))
}
