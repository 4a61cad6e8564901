//! Phase 1: throughput, profiled against unprofiled within the same 10 ms.
//!
//! This machine's CPU speed swings by tens of percent from one second to the next (a plain
//! busy loop here varies by up to 60 % between 0.1 s runs; consecutive 3 s wrk runs by
//! ~10 %), so a profiled run and an unprofiled run taken one after the other differ by more
//! than any profiler costs. Here both run at once instead, taking turns:
//!
//! - Two private nginx instances ("sides"), each under its own wrk.
//! - The bench lets one wrk run at a time and swaps them every [`SLICE`] (SIGSTOP/SIGCONT),
//!   so both sides see the same machine, 10 ms apart, for the whole run.
//! - The tool under test profiles one side's workers (one instance per worker, like phases 2
//!   and 3); which side alternates from run to run. Each side's requests come from its access
//!   log (nginx writes one line per request), its time from the slices it ran. The ratio of
//!   the two rates is the tool's throughput factor.
//!
//! Two layouts ([`Layout`]): by default each side is the load of the other phases (two
//! workers, `wrk -t2 -c64`) spread over all CPUs; `--one-cpu` puts one worker per side and
//! its `wrk -t1 -c32` on a single CPU, where the worker is preempted by wrk's wakeups ~50,000
//! times a second: the worst case for a profiler that works at every context switch. (With a
//! worker alone on its CPU it would seldom switch at all, and every tool would look free.)
//! Pinned to one CPU the noise floor is ~0.3 % per run (standard deviation); spread, ~1.5 %.
//!
//! Two things stay uncancelled, both small and both named in the report: the unprofiled
//! side's context switches still enter each tool's programs (which filter them out by PID,
//! as they would for any other process on a profiled host), and, with `--one-cpu`, the
//! tools' user-space processes run on the other CPUs.

use std::{
    collections::HashMap,
    fs,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{
    nginx::{Layout, Nginx},
    postgres::{self, Cluster},
    process::{say, signal},
    quiet::{ForeignCpu, undisturbed},
    tools::{Bench, Condition, ProfiledService, attach, stop},
};

/// How long one side's wrk runs before the other's. Short enough that the machine's speed
/// does not change much within two slices, long enough that a slice holds hundreds of
/// requests and signal latency (microseconds) is noise.
const SLICE: Duration = Duration::from_millis(10);
/// Taking turns before the counting starts: connections opened, caches warm.
const WARMUP: Duration = Duration::from_millis(500);
/// After both wrk stop: nginx answers what it already received and logs it.
const DRAIN: Duration = Duration::from_millis(50);

/// One private nginx, its workers pinned to the load CPU if there is one.
struct Side {
    nginx: Nginx,
    dir: PathBuf,
    workers: Vec<u32>,
}

impl Side {
    fn start(parent: &Path, name: &str, layout: Layout, cpu: Option<usize>) -> Result<Self> {
        let dir = parent.join(name);
        fs::create_dir_all(dir.join("www"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let nginx = Nginx::start(&dir, layout.workers())?;
        let workers = nginx.workers()?;
        if let Some(cpu) = cpu {
            for &worker in &workers {
                pin_pid(worker, cpu)
                    .with_context(|| format!("cannot pin nginx worker {worker} to CPU {cpu}"))?;
            }
        }
        Ok(Side {
            nginx,
            dir,
            workers,
        })
    }

    fn access_log(&self) -> PathBuf {
        self.dir.join("access.log")
    }

    fn target(&self) -> Result<ProfiledService> {
        self.nginx.target()
    }
}

/// Both sides, and the CPU they share in [`Layout::OneCpu`]; while it lives, the bench's own
/// thread stays off that CPU (see [`Sides::start`]).
pub struct Sides {
    sides: [Side; 2],
    layout: Layout,
    cpu: Option<usize>,
    /// The bench's affinity before, restored on drop for the phases after this one.
    previous: libc::cpu_set_t,
}

impl Sides {
    pub fn start(dir: &Path, layout: Layout) -> Result<Self> {
        let previous = cpu_set(allowed_cpus()?);
        let cpu = match layout {
            Layout::Spread => None,
            Layout::OneCpu => Some(load_cpu()?),
        };
        let sides = [
            Side::start(dir, "side-a", layout, cpu)?,
            Side::start(dir, "side-b", layout, cpu)?,
        ];
        let Some(cpu) = cpu else {
            return Ok(Sides {
                sides,
                layout,
                cpu,
                previous,
            });
        };
        // The bench itself (the slice timer, reading logs) stays off the load CPU, where it
        // would wait behind nginx and wrk and stretch the slices; the tools it starts inherit
        // that, so their user-space work is not split between the two sides either.
        let rest = allowed_cpus()?.into_iter().filter(|c| *c != cpu);
        set_affinity(0, &cpu_set(rest)).context("cannot move the bench off the load CPU")?;
        Ok(Sides {
            sides,
            layout,
            cpu: Some(cpu),
            previous,
        })
    }

    pub fn describe(&self) -> String {
        let placed = match self.cpu {
            Some(cpu) => format!(", all on CPU {cpu}"),
            None => String::new(),
        };
        format!(
            "side a: nginx workers {:?}, side b: {:?}, each under its own wrk{placed}",
            self.sides[0].workers, self.sides[1].workers
        )
    }
}

impl Drop for Sides {
    fn drop(&mut self) {
        let _ = set_affinity(0, &self.previous);
    }
}

/// Per round, per condition: (the profiled side's requests/s, the other side's), each per
/// second that side's wrk ran.
pub struct Throughput {
    pub rounds: Vec<HashMap<Condition, (f64, f64)>>,
}

impl Throughput {
    /// Profiled ÷ unprofiled, one value per round. For the baseline (nothing attached) this is
    /// one side ÷ the other: the noise floor of the method.
    pub fn ratios(&self, cond: Condition) -> Vec<f64> {
        self.rounds
            .iter()
            .filter_map(|r| r.get(&cond).map(|(p, u)| p / u))
            .collect()
    }

    /// `a`'s ratio ÷ `b`'s, round by round.
    pub fn paired(&self, a: Condition, b: Condition) -> Vec<f64> {
        self.rounds
            .iter()
            .filter_map(|r| {
                let (ap, au) = r.get(&a)?;
                let (bp, bu) = r.get(&b)?;
                Some((ap / au) / (bp / bu))
            })
            .collect()
    }

    /// Requests/s of a side with nothing attached, both sides of every baseline run.
    pub fn unprofiled(&self) -> Vec<f64> {
        self.rounds
            .iter()
            .filter_map(|r| r.get(&Condition::Baseline))
            .flat_map(|(a, b)| [*a, *b])
            .collect()
    }
}

/// `rounds` rounds of one run per condition. `run(cond, side)` attaches the condition's tool
/// to that side, runs the interleaved load and returns (that side's rate, the other's);
/// `unit` names the rate in messages ("requests/s").
pub fn rounds(
    bench: &Bench,
    conditions: &[Condition],
    rounds: usize,
    unit: &str,
    mut run: impl FnMut(Condition, usize) -> Result<(f64, f64)>,
) -> Result<Throughput> {
    let mut result = Throughput { rounds: Vec::new() };
    for round in 0..rounds {
        // Rotate the order so that no condition always runs first or after the same one.
        let order = (0..conditions.len()).map(|i| (i, conditions[(i + round) % conditions.len()]));
        let mut rates = HashMap::new();
        for (i, cond) in order {
            // Alternate the profiled side, so neither side's small advantages (which nginx
            // got the warmer pages, which wrk the first slice) favour a condition.
            let side = (round + i) % 2;
            // Repeated while other processes disturbed it (see `undisturbed`).
            let (profiled, other) = undisturbed(&bench.quiet, || {
                let others = ForeignCpu::start();
                let started = Instant::now();
                let rates = run(cond, side)?;
                Ok((rates, others.fraction(started.elapsed().as_secs_f64())))
            })?;
            say(&format!(
                "round {}/{}: {:<38} side {} {:>7.0} {unit}, other side {:>7.0} ({:.3})",
                round + 1,
                rounds,
                cond.tool(),
                ["a", "b"][side],
                profiled,
                other,
                profiled / other
            ));
            rates.insert(cond, (profiled, other));
        }
        result.rounds.push(rates);
    }
    Ok(result)
}

/// One nginx run: attaches the condition's tool to `side` (ours on its master, the others
/// on each worker), runs the interleaved load, stops the tool. Returns (that side's
/// requests/s, the other side's).
pub fn nginx_run(
    bench: &Bench,
    sides: &Sides,
    cond: Condition,
    side: usize,
    secs: u64,
) -> Result<(f64, f64)> {
    let tools = attach(bench, cond, &sides.sides[side].target()?)?;
    let rates = interleaved_load(sides, Duration::from_secs(secs));
    stop(bench, cond, tools)?;
    let rates = rates?;
    Ok((rates[side], rates[1 - side]))
}

/// Two private PostgreSQL clusters with pgbench's tables, one per side.
pub struct PgSides {
    clusters: [Cluster; 2],
}

impl PgSides {
    pub fn start(dir: &Path) -> Result<Self> {
        let clusters = [
            Cluster::start(&dir.join("pg-a"))?,
            Cluster::start(&dir.join("pg-b"))?,
        ];
        for cluster in &clusters {
            cluster.init_tables()?;
        }
        Ok(PgSides { clusters })
    }

    /// The cluster the BPF-cost phase loads (side a).
    pub fn first(&self) -> &Cluster {
        &self.clusters[0]
    }
}

/// One PostgreSQL run: both sides' `pgbench -c 4 -j 2` connect, are held, the condition's
/// tool attaches to `side` (ours on the postmaster, which it follows to every backend; the
/// others on each of pgbench's backends), the two pgbench take turns (see [`take_turns`]),
/// the tool stops. Each side's work is its transactions (rows of pgbench_history). Returns
/// (that side's transactions/s, the other side's).
pub fn postgres_run(
    bench: &Bench,
    sides: &PgSides,
    cond: Condition,
    side: usize,
    secs: u64,
) -> Result<(f64, f64)> {
    let [a, b] = &sides.clusters;
    let loads = [a.load(3600)?, b.load(3600)?];
    let backends = [a.pgbench_backends()?, b.pgbench_backends()?];
    for load in &loads {
        load.pause();
    }
    let cluster = &sides.clusters[side];
    let target = ProfiledService {
        kind: "PostgreSQL postmaster",
        service: cluster.postmaster()?,
        each: "PostgreSQL backend",
        processes: backends[side].clone(),
    };
    let tools = attach(bench, cond, &target)?;
    let rates = take_turns([&loads[0], &loads[1]], Duration::from_secs(secs), |s| {
        sides.clusters[s].transactions()
    });
    stop(bench, cond, tools)?;
    drop(loads);
    let rates = rates?;
    Ok((rates[side], rates[1 - side]))
}

impl Pausable for postgres::Load {
    fn pause(&self) {
        postgres::Load::pause(self);
    }

    fn resume(&self) {
        postgres::Load::resume(self);
    }
}

/// A load generator that can be held and let go: wrk or pgbench.
pub trait Pausable {
    fn pause(&self);
    fn resume(&self);
}

/// Lets the two sides' load generators take turns every [`SLICE`] for `length` after a
/// warm-up; `count(side)` is the work that side has done so far (read while both are held).
/// Returns each side's work per second of its own turns; both are held at the end.
pub fn take_turns(
    loads: [&dyn Pausable; 2],
    length: Duration,
    mut count: impl FnMut(usize) -> Result<u64>,
) -> Result<[f64; 2]> {
    for load in loads {
        load.pause();
    }
    let mut ran = [Duration::ZERO; 2];
    let mut counted = [0u64; 2];
    let mut turn = 0;
    for (phase, length) in [WARMUP, length].into_iter().enumerate() {
        ran = [Duration::ZERO; 2];
        let end = Instant::now() + length;
        while Instant::now() < end {
            let began = Instant::now();
            loads[turn].resume();
            thread::sleep(SLICE);
            loads[turn].pause();
            ran[turn] += began.elapsed();
            turn = 1 - turn;
        }
        if phase == 0 {
            thread::sleep(DRAIN);
            for (side, start) in counted.iter_mut().enumerate() {
                *start = count(side)?;
            }
        }
    }
    thread::sleep(DRAIN);
    let mut rates = [0.0; 2];
    for (side, start) in counted.iter().enumerate() {
        let done = count(side)?.saturating_sub(*start);
        if done == 0 {
            bail!(
                "side {} did no work in {:?} of turns",
                ["a", "b"][side],
                ran[side]
            );
        }
        rates[side] = done as f64 / ran[side].as_secs_f64();
    }
    Ok(rates)
}

/// Both sides' wrk, taking turns (see [`take_turns`]); each side's work is the lines of its
/// access log. Returns each side's requests per second of its own turns.
fn interleaved_load(sides: &Sides, length: Duration) -> Result<[f64; 2]> {
    for side in &sides.sides {
        // Truncated, not removed: nginx keeps appending to its open file.
        fs::File::create(side.access_log())
            .with_context(|| format!("cannot truncate {}", side.access_log().display()))?;
    }
    let mut wrk = [
        Wrk::start(sides.sides[0].nginx.port, sides.layout, sides.cpu)?,
        Wrk::start(sides.sides[1].nginx.port, sides.layout, sides.cpu)?,
    ];
    let rates = take_turns([&wrk[0], &wrk[1]], length, |side| {
        lines_in(&sides.sides[side].access_log())
    });
    if rates.is_err() {
        for (side, w) in sides.sides.iter().zip(&mut wrk) {
            say(&format!(
                "nginx (workers {:?}): {}",
                side.workers,
                w.stderr_tail()
            ));
        }
    }
    for w in &mut wrk {
        w.stop();
    }
    rates
}

/// One side's wrk. It runs for far longer than the bench needs it and is killed at the end:
/// only nginx's log counts, so wrk's own end-of-run summary is never needed.
struct Wrk {
    child: Child,
}

impl Wrk {
    fn start(port: u16, layout: Layout, cpu: Option<usize>) -> Result<Self> {
        let (threads, connections) = layout.wrk();
        let mut cmd = Command::new("wrk");
        cmd.args([
            &format!("-t{threads}"),
            &format!("-c{connections}"),
            "-d3600s",
        ])
        .arg(format!("http://127.0.0.1:{port}/"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        if let Some(cpu) = cpu {
            pin_command(&mut cmd, cpu);
        }
        let child = cmd.spawn().context("cannot start wrk")?;
        Ok(Wrk { child })
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What a wrk that failed said (it exits at once on a bad URL or a refused connection).
    fn stderr_tail(&mut self) -> String {
        use std::io::Read as _;
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            return "(wrk is still running)".to_string();
        }
        let mut text = String::new();
        if let Some(stderr) = &mut self.child.stderr {
            let _ = stderr.read_to_string(&mut text);
        }
        format!("wrk said: {}", xtask::tail(&text, 3))
    }
}

impl Pausable for Wrk {
    fn pause(&self) {
        signal(self.child.id(), libc::SIGSTOP);
    }

    fn resume(&self) {
        signal(self.child.id(), libc::SIGCONT);
    }
}

impl Drop for Wrk {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Lines in nginx's access log: one per request (each written with one write(2) on an
/// O_APPEND file, so a read between requests ends at a line boundary).
fn lines_in(path: &Path) -> Result<u64> {
    let text = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(count_lines(&text))
}

fn count_lines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|b| **b == b'\n').count() as u64
}

/// The CPU the load runs on: the last one this process may use, so that CPU 0 (where
/// interrupts and housekeeping tend to land) stays with the bench and the tools.
fn load_cpu() -> Result<usize> {
    let allowed = allowed_cpus()?;
    match allowed.as_slice() {
        [] | [_] => bail!(
            "the throughput runs need two CPUs (one for nginx and wrk, one for the bench and \
             the tools' user space); this process may use {}",
            allowed.len()
        ),
        [.., last] => Ok(*last),
    }
}

fn allowed_cpus() -> Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it in.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the size is that of `set`.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if r != 0 {
        bail!(
            "cannot read this process's CPU affinity: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE.
        .filter(|cpu| unsafe { libc::CPU_ISSET(*cpu, &set) })
        .collect())
}

fn cpu_set(cpus: impl IntoIterator<Item = usize>) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in cpus {
        // SAFETY: only CPUs below CPU_SETSIZE reach here (they come from the kernel's mask).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    set
}

fn set_affinity(pid: libc::pid_t, set: &libc::cpu_set_t) -> std::io::Result<()> {
    // SAFETY: `set` is a valid cpu_set_t of the size given.
    if unsafe { libc::sched_setaffinity(pid, std::mem::size_of_val(set), set) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn pin_pid(pid: u32, cpu: usize) -> std::io::Result<()> {
    set_affinity(pid as libc::pid_t, &cpu_set([cpu]))
}

/// The child is on `cpu` from its first instruction, and so are the threads it starts.
fn pin_command(cmd: &mut Command, cpu: usize) {
    let set = cpu_set([cpu]);
    // SAFETY: sched_setaffinity is async-signal-safe, and `set` is a copy owned by the closure.
    unsafe {
        cmd.pre_exec(move || set_affinity(0, &set));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_whole_lines_after_the_offset() {
        let log = b"GET 1\nGET 2\nGET 3\n";
        assert_eq!(count_lines(log), 3);
        assert_eq!(count_lines(&log[..8]), 1);
        assert_eq!(count_lines(b""), 0);
    }

    #[test]
    fn ratios_pair_conditions_round_by_round() {
        let round = |wall: (f64, f64), off: (f64, f64)| {
            HashMap::from([
                (Condition::Baseline, (100.0, 100.0)),
                (Condition::Wall, wall),
                (Condition::Offcputime, off),
            ])
        };
        let t = Throughput {
            rounds: vec![
                round((98.0, 100.0), (95.0, 100.0)),
                round((49.0, 50.0), (51.0, 50.0)),
            ],
        };
        assert_eq!(t.ratios(Condition::Wall), [0.98, 0.98]);
        let paired = t.paired(Condition::Wall, Condition::Offcputime);
        assert!((paired[0] - 0.98 / 0.95).abs() < 1e-12);
        assert!((paired[1] - 0.98 / 1.02).abs() < 1e-12);
        assert_eq!(t.unprofiled(), [100.0, 100.0, 100.0, 100.0]);
        assert!(t.ratios(Condition::Perf).is_empty());
    }
}
