//! Other work on the machine: other sessions build and test on these same CPUs. Before each
//! run the bench waits for the machine to be quiet ([`gate`]), measures other processes' CPU
//! time during the run ([`ForeignCpu`]), and repeats a run they disturbed ([`undisturbed`]);
//! [`Quiet`] keeps the counts for the report.

use std::{
    cell::RefCell,
    collections::HashMap,
    fs,
    sync::Mutex,
    thread,
    time::{Duration, Instant},
};

use anyhow::Result;

use crate::process::{proc_stats, say};

/// Busy fraction of all CPUs above which a run waits for the machine to become quiet.
pub const QUIET_BUSY: f64 = 0.10;
const QUIET_MAX_WAIT: Duration = Duration::from_secs(60);
/// Share of all CPUs other processes may take during a run before it is repeated.
pub const FOREIGN_MAX: f64 = 0.03;
const MAX_ATTEMPTS: usize = 3;

/// What [`gate`] saw, for the report.
#[derive(Default)]
pub struct Quiet {
    /// `--under-load`: never wait for a quiet machine nor repeat a disturbed run; only
    /// measure how busy other work kept the CPUs.
    pub under_load: bool,
    /// Other processes' share of the CPUs during every run kept.
    pub foreign: Vec<f64>,
    /// How busy the CPUs were just before each run (nothing of ours loaded).
    pub busy_before: Vec<f64>,
    pub runs: usize,
    pub waited_runs: usize,
    pub waited: Duration,
    /// Runs started although the machine never became quiet.
    pub busy_runs: usize,
    pub worst_busy: f64,
    /// Runs repeated because other processes took CPU during the load.
    pub repeated: usize,
    /// Runs kept although disturbed (the last attempt).
    pub kept_disturbed: usize,
    pub worst_foreign: f64,
}

/// CPU time taken by other work during a run: all busy CPU time (/proc/stat) minus that of
/// the bench's own process tree (nginx, wrk, the tools, the PostgreSQL clusters) and of kernel
/// threads (softirq work for the loopback traffic). Counting by subtraction also catches the
/// short-lived compilers of another session's build, which no snapshot of /proc would see.
pub struct ForeignCpu {
    busy: u64,
    ours: u64,
}

impl ForeignCpu {
    pub fn start() -> Self {
        ForeignCpu {
            busy: cpu_ticks().0,
            ours: our_ticks(),
        }
    }

    /// Their CPU time since [`ForeignCpu::start`], as a fraction of all CPUs over `secs`.
    pub fn fraction(&self, secs: f64) -> f64 {
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

/// Processes the bench started that left its process tree: PostgreSQL's postmaster is
/// daemonized by `pg_ctl` (its parent becomes init), yet it and its backends are the load.
static ADOPTED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Counts `pid` and its descendants as the bench's own from now on.
pub fn adopt(pid: u32) {
    if let Ok(mut adopted) = ADOPTED.lock() {
        adopted.push(pid);
    }
}

/// utime + stime + cutime + cstime of the bench's process tree (with [`adopt`]ed processes
/// and theirs) and of kernel threads. The
/// children's part makes a process reaped during the run (wrk, a tool) still count: its time
/// moves into its parent's cutime/cstime.
fn our_ticks() -> u64 {
    let me = std::process::id();
    let adopted = ADOPTED.lock().map(|a| a.clone()).unwrap_or_default();
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
            if pid == me || adopted.contains(&pid) {
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
pub fn gate(quiet: &RefCell<Quiet>) {
    let started = Instant::now();
    let mut busy = cpu_busy(Duration::from_millis(500));
    let mut quiet = quiet.borrow_mut();
    quiet.runs += 1;
    quiet.busy_before.push(busy);
    if busy >= QUIET_BUSY && !quiet.under_load {
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

/// `measure` (which returns its result and other processes' share of the CPUs while it ran),
/// repeated up to [`MAX_ATTEMPTS`] times while that share exceeded [`FOREIGN_MAX`]: such a
/// run measures them, not us. Each attempt first waits for a quiet machine.
pub fn undisturbed<T>(
    quiet: &RefCell<Quiet>,
    mut measure: impl FnMut() -> Result<(T, f64)>,
) -> Result<T> {
    for attempt in 1.. {
        gate(quiet);
        let (result, foreign) = measure()?;
        let mut quiet = quiet.borrow_mut();
        if foreign <= FOREIGN_MAX || attempt == MAX_ATTEMPTS || quiet.under_load {
            if foreign > FOREIGN_MAX {
                quiet.kept_disturbed += 1;
            }
            quiet.foreign.push(foreign);
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
