//! Phase 0, start-up (issue 25 item 2): how long the profiler takes from the command to the
//! opening of its capture window, on an idle machine and on a saturated one.
//!
//! Each run is `profiler --pid <sleep> --secs 1 -v -o <svg>` on an idle `sleep 1000`, in
//! wall mode (the default, which loads the most programs). Two figures come from the
//! profiler's own `-v` line, logged just after the window opened:
//!
//! ```text
//! [INFO  profiler::run::app] load 0.236 s, attach 0.003 s, start snapshot 0.001 s; CPU before the window: 0.258 s (user 0.043 s, system 0.215 s)
//! ```
//!
//! (load: maps created and programs verified; the CPU is the process's `getrusage` taken after
//! the start snapshot, so it also holds that snapshot's few ms). The wall time is measured
//! from outside: from just before the spawn to the arrival of the `profiler: capturing …`
//! line on stderr, which the profiler prints the moment the window opens. `wait4`'s rusage
//! adds the CPU of the whole 1 s run (start-up, window, post-processing), what `/usr/bin/time`
//! would print.
//!
//! The saturated case runs the same with [`BUSY_THREADS`] threads spinning in this process:
//! the profiler's parent, so they share its session (autogroup) and cgroup and the scheduler
//! gives the profiler no more than its share of one task among nine. They stop when the run
//! ends, also when it fails or panics, and die with the bench if it is killed.

use std::{
    cell::RefCell,
    fs,
    path::Path,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{
    process::{Instance, Ready, say, tail_of_lines},
    quiet::{ForeignCpu, Quiet, undisturbed},
    tools::EXIT_TIMEOUT,
};

/// Busy threads of the saturated case (issue 25: "8 busy threads on 2 CPUs").
pub const BUSY_THREADS: usize = 8;
/// Capture length of each run.
pub const CAPTURE_SECS: u64 = 1;
/// Goals: CPU to the window on an idle machine, wall time to it with the busy threads.
pub const GOAL_IDLE_CPU_S: f64 = 0.4;
pub const GOAL_BUSY_WALL_S: f64 = 1.5;
/// What the profiler prints on stderr the moment the window opens.
const CAPTURING: &str = "profiler: capturing";
/// Time for the busy threads to be running on every CPU before the profiler starts.
const SPIN_UP: Duration = Duration::from_millis(200);

/// The profiler's start-up line (`-v`), in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Logged {
    pub load: f64,
    pub attach: f64,
    pub snapshot: f64,
    /// User + system CPU of the process up to the line.
    pub cpu: f64,
    pub user: f64,
    pub system: f64,
}

/// The figures of the start-up line, wherever it is in `line` (the logger's prefix may
/// change); None when `line` is not that line or a figure is missing.
pub fn parse_logged(line: &str) -> Option<Logged> {
    let after = |key: &str| -> Option<f64> {
        let value = &line[line.find(key)? + key.len()..];
        let end = value
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(value.len());
        value[..end].parse().ok()
    };
    Some(Logged {
        load: after("load ")?,
        attach: after(", attach ")?,
        snapshot: after(", start snapshot ")?,
        cpu: after("; CPU before the window: ")?,
        user: after("(user ")?,
        system: after(", system ")?,
    })
}

/// One run of the profiler.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub logged: Logged,
    /// From just before the spawn to the `profiler: capturing` line.
    pub wall_to_window: f64,
    /// User + system CPU of the whole run (`wait4`).
    pub cpu_in_all: f64,
    /// Other work's share of the CPUs during the run (`quiet.rs`).
    pub foreign: f64,
}

/// Every run of both cases, in the order they ran (idle and saturated alternating).
#[derive(Default)]
pub struct Startup {
    pub idle: Vec<Run>,
    pub busy: Vec<Run>,
    /// The bench's nice value, which the profiler and the busy threads inherit.
    pub nice: i32,
}

/// `runs` runs of each case, alternating, each after the quiet gate and repeated when other
/// work disturbed it (see `quiet.rs`; not with `--under-load`).
pub fn measure(binary: &Path, dir: &Path, quiet: &RefCell<Quiet>, runs: usize) -> Result<Startup> {
    let mut sleeper = Command::new("sleep");
    sleeper.arg("1000");
    // Killed when dropped, also when a run fails.
    let sleeper = Instance::spawn("sleep 1000".to_string(), sleeper)?;
    let target = sleeper.pid();
    say(&format!(
        "start-up: {runs} run(s) of a {CAPTURE_SECS} s capture of an idle sleep (PID {target}), \
         idle and with {BUSY_THREADS} busy threads"
    ));
    let mut startup = Startup {
        nice: nice(),
        ..Startup::default()
    };
    for i in 0..runs {
        for busy in [false, true] {
            let run = undisturbed(quiet, || {
                let spinners = busy.then(|| Spinners::start(BUSY_THREADS));
                let others = ForeignCpu::start();
                let started = Instant::now();
                let run = one_run(binary, dir, target);
                let foreign = others.fraction(started.elapsed().as_secs_f64());
                drop(spinners);
                Ok((Run { foreign, ..run? }, foreign))
            })?;
            say(&format!(
                "start-up {}/{runs}, {}: CPU to the window {:.3} s (load {:.3} s), wall to the \
                 window {:.3} s; other work took {:.0} % of the CPUs",
                i + 1,
                if busy {
                    format!("{BUSY_THREADS} busy threads")
                } else {
                    "idle machine".to_string()
                },
                run.logged.cpu,
                run.logged.load,
                run.wall_to_window,
                run.foreign * 100.0
            ));
            if busy {
                startup.busy.push(run);
            } else {
                startup.idle.push(run);
            }
        }
    }
    Ok(startup)
}

/// One `--secs 1 -v` capture of `target`, to its exit.
fn one_run(binary: &Path, dir: &Path, target: u32) -> Result<Run> {
    let svg = dir.join("startup.svg");
    let mut cmd = Command::new(binary);
    cmd.args([
        "--pid",
        &target.to_string(),
        "--secs",
        &CAPTURE_SECS.to_string(),
        "-v",
        "-o",
    ])
    .arg(&svg);
    let spawned = Instant::now();
    let mut ours = Instance::spawn(format!("profiler -v (on sleep {target})"), cmd)?;
    ours.wait_ready(Ready::StderrLine(CAPTURING))?;
    let (status, usage) = ours.reap(Duration::from_secs(CAPTURE_SECS) + EXIT_TIMEOUT)?;
    let _ = fs::remove_file(&svg);
    let lines = ours.lines();
    if !status.success() {
        bail!(
            "{} failed ({status}); its stderr ends with: {}",
            ours.what,
            tail_of_lines(&lines)
        );
    }
    let logged = lines
        .iter()
        .find_map(|l| parse_logged(l))
        .with_context(|| {
            format!(
                "{} logged no start-up line (load …, CPU before the window …); its stderr ends \
                 with: {}",
                ours.what,
                tail_of_lines(&lines)
            )
        })?;
    let opened = ours
        .line_time(CAPTURING)
        .context("the capturing line went missing")?;
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Run {
        logged,
        wall_to_window: opened.saturating_duration_since(spawned).as_secs_f64(),
        cpu_in_all: secs(usage.ru_utime) + secs(usage.ru_stime),
        foreign: 0.0,
    })
}

/// This process's nice value.
fn nice() -> i32 {
    // SAFETY: getpriority has no memory effects. -1 is also a valid value, so errno tells.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        if nice == -1 && *libc::__errno_location() != 0 {
            return 0;
        }
        nice
    }
}

/// Threads spinning until dropped.
struct Spinners {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Spinners {
    fn start(n: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = Arc::clone(&stop);
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        thread::sleep(SPIN_UP);
        Spinners { stop, threads }
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_up_line_is_read_with_its_log_prefix_or_without() {
        let line = "[INFO  profiler::run::app] load 0.236 s, attach 0.003 s, start snapshot 0.001 s; \
                    CPU before the window: 0.258 s (user 0.043 s, system 0.215 s)";
        let logged = Logged {
            load: 0.236,
            attach: 0.003,
            snapshot: 0.001,
            cpu: 0.258,
            user: 0.043,
            system: 0.215,
        };
        assert_eq!(parse_logged(line), Some(logged));
        let bare = line.strip_prefix("[INFO  profiler::run::app] ").unwrap();
        assert_eq!(parse_logged(bare), Some(logged));
        let slow = "[INFO  profiler::run::app] load 12.5 s, attach 0.25 s, start snapshot 1 s; CPU \
                    before the window: 14 s (user 2 s, system 12 s)";
        assert_eq!(
            parse_logged(slow),
            Some(Logged {
                load: 12.5,
                attach: 0.25,
                snapshot: 1.0,
                cpu: 14.0,
                user: 2.0,
                system: 12.0,
            })
        );
    }

    #[test]
    fn other_lines_are_not_the_start_up_line() {
        for line in [
            "profiler: capturing sleep (PID 5) with descendants for 1 s in wall mode",
            "[INFO  profiler::run::app] kernel memory: 12.1 MiB in 29 maps",
            "[INFO  profiler::run::app] post-processing took 0.102 s",
            // Cut short: no CPU figure.
            "[INFO  profiler::run::app] load 0.236 s, attach 0.003 s, start snapshot 0.001 s",
            "[INFO  profiler::run::app] load x s, attach 0.003 s, start snapshot 0.001 s; CPU before \
             the window: 0.258 s (user 0.043 s, system 0.215 s)",
            "",
        ] {
            assert_eq!(parse_logged(line), None, "{line}");
        }
    }

    #[test]
    fn spinners_stop_when_dropped_even_in_a_panic() {
        let stop = std::panic::catch_unwind(|| {
            let spinners = Spinners::start(2);
            let stop = Arc::clone(&spinners.stop);
            assert_eq!(spinners.threads.len(), 2);
            std::panic::panic_any(stop);
        })
        .unwrap_err()
        .downcast::<Arc<AtomicBool>>()
        .unwrap();
        assert!(stop.load(Ordering::Relaxed));
    }
}
