//! The side-by-side phase (issue 25 item 3): ours and the anchors attached to the same
//! process *at once*, on each workload, so both see the same events under the same load;
//! bpf_stats gives each program's time (two `bpftool prog show` snapshots around the window,
//! as in the BPF cost phase). The anchors: libbpf-tools `offcputime` alone (for
//! `sched_switch` ns/event), and `offcputime` + `wakeuptime` attached together as one side
//! (the pair that together does what ours does: for all programs per context switch).
//!
//! Whichever tool attaches second runs 15–30 % cheaper (the first has pulled the task, its
//! stack and the kernel's data into the cache), so every pair runs in both attach orders and
//! the figure is the geometric mean of ours ÷ theirs over the runs, in which that advantage
//! cancels. `bench/scripts/ab_postgres.py` did the same by hand on one PostgreSQL backend;
//! `compare.rs` does it for two builds of ours.
//!
//! Our side is a [`Side`] with its arguments, so another way of running ours (a flag that
//! makes it cheaper) is one more entry in [`ours_sides`]: one more row per workload.

use std::{
    collections::{HashMap, HashSet},
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};

use crate::{
    cost::{FsyncWorkload, Workload},
    nginx::{NGINX_WORKERS, WRK_CONNECTIONS, WRK_THREADS, run_wrk},
    postgres,
    process::{Instance, Ready, bpf_prog_ids, say, tail_of_lines},
    quiet::{ForeignCpu, undisturbed},
    tools::{Bench, BpfStats, EXIT_TIMEOUT, SETTLE, bpf_prog_stats, cleanup_outputs},
};

/// Issue 25: ours ≤ this × the anchor, both ratios.
pub const GOAL: f64 = 0.5;
/// The program every context switch on the machine runs; its run count is the machine's
/// context switches during the window.
const SWITCH: &str = "sched_switch";
const OFFCPUTIME: &str = "/usr/sbin/offcputime";
const WAKEUPTIME: &str = "/usr/sbin/wakeuptime";
/// Nominal capture length of a tool stopped by SIGINT.
const TOOL_MAX_SECS: &str = "3600";

/// The ways ours is compared, one row each per workload.
pub fn ours_sides(binary: &Path) -> Vec<Side> {
    vec![
        Side::ours("`--mode wall`", binary, &["--mode", "wall"]),
        Side::ours(
            "`--mode wall --no-wakers`",
            binary,
            &["--mode", "wall", "--no-wakers"],
        ),
        // What naming each wait's fd costs per switch (issue 41: within 5 % of without).
        Side::ours(
            "`--mode wall --no-resources`",
            binary,
            &["--mode", "wall", "--no-resources"],
        ),
    ]
}

/// One side of a run: the tools attached together, whose programs' times add up.
#[derive(Clone, Debug)]
pub struct Side {
    /// For the table and messages.
    pub label: String,
    tools: Vec<Tool>,
}

#[derive(Clone, Debug)]
enum Tool {
    /// Our profiler: `--pid PID --secs 3600 -o SVG` and these arguments.
    Ours { binary: PathBuf, args: Vec<String> },
    /// A libbpf-tools anchor: `PATH -p PID 3600`.
    Anchor(&'static str),
}

impl Side {
    /// Ours with `args` (besides the target, the length and the SVG's path).
    pub fn ours(label: &str, binary: &Path, args: &[&str]) -> Self {
        Side {
            label: label.to_string(),
            tools: vec![Tool::Ours {
                binary: binary.to_path_buf(),
                args: args.iter().map(|a| a.to_string()).collect(),
            }],
        }
    }

    /// `offcputime` alone: the anchor of `sched_switch` ns/event.
    pub fn offcputime() -> Self {
        Side {
            label: "offcputime".to_string(),
            tools: vec![Tool::Anchor(OFFCPUTIME)],
        }
    }

    /// `offcputime` + `wakeuptime`, attached together: the anchor of all programs.
    pub fn anchor_pair() -> Self {
        Side {
            label: "offcputime + wakeuptime".to_string(),
            tools: vec![Tool::Anchor(OFFCPUTIME), Tool::Anchor(WAKEUPTIME)],
        }
    }
}

impl Tool {
    fn name(&self) -> &str {
        match self {
            Tool::Ours { .. } => "ours",
            Tool::Anchor(path) => path.rsplit('/').next().unwrap_or(path),
        }
    }

    /// Its command on `pid`; `i` (its place in the run) names ours's output.
    fn command(&self, pid: u32, dir: &Path, i: usize) -> Command {
        let pid = pid.to_string();
        match self {
            Tool::Ours { binary, args } => {
                let mut cmd = Command::new(binary);
                cmd.args(["--pid", &pid, "--secs", TOOL_MAX_SECS, "-o"])
                    .arg(dir.join(format!("side-by-side-{i}.svg")))
                    .args(args);
                cmd
            }
            Tool::Anchor(path) => {
                let mut cmd = Command::new(path);
                cmd.args(["-p", &pid, TOOL_MAX_SECS]);
                cmd
            }
        }
    }

    fn ready(&self) -> Ready {
        match self {
            Tool::Ours { .. } => Ready::StderrLine("profiler: capturing"),
            // The anchors print nothing until the end.
            Tool::Anchor(_) => Ready::BpfLink,
        }
    }
}

/// One program's run time and runs during a window.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// "ours", "offcputime", "wakeuptime".
    pub tool: String,
    pub name: String,
    pub time_ns: u64,
    pub runs: u64,
}

/// ns per event of the programs named `name`: their time summed (several tools each run
/// theirs on the event) ÷ the events (the most runs of any of them: each runs once an event).
pub fn ns_per_event(programs: &[Program], name: &str) -> Option<f64> {
    let named = programs.iter().filter(|p| p.name == name);
    let time: u64 = named.clone().map(|p| p.time_ns).sum();
    let events = named.map(|p| p.runs).max().unwrap_or(0);
    (events > 0).then(|| time as f64 / events as f64)
}

/// All programs' time per context switch on the machine (the runs of `sched_switch`): what
/// a side costs, whatever its programs, at the same switch rate.
pub fn ns_per_switch(programs: &[Program]) -> Option<f64> {
    let switches = programs
        .iter()
        .filter(|p| p.name == SWITCH)
        .map(|p| p.runs)
        .max()
        .unwrap_or(0);
    let time: u64 = programs.iter().map(|p| p.time_ns).sum();
    (switches > 0).then(|| time as f64 / switches as f64)
}

/// One figure of ours and the anchor's, run by run: pairs of runs in both attach orders,
/// ours first in the even ones.
#[derive(Clone, Debug, Default)]
pub struct Ratio {
    /// (ours, theirs) per run.
    pub runs: Vec<(f64, f64)>,
}

impl Ratio {
    /// Geometric mean of ours ÷ theirs over the pairs, each pair's the geometric mean of its
    /// two orders (so the second-attached advantage cancels); ± one standard error over the
    /// pairs (NaN below two pairs).
    pub fn geomean(&self) -> Option<(f64, f64)> {
        let pairs: Vec<f64> = self
            .runs
            .chunks(2)
            .map(|pair| pair.iter().map(|(o, t)| (o / t).ln()).sum::<f64>() / pair.len() as f64)
            .collect();
        if pairs.is_empty() {
            return None;
        }
        let n = pairs.len() as f64;
        let mean = pairs.iter().sum::<f64>() / n;
        let se = if pairs.len() > 1 {
            (pairs.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() / n.sqrt()
        } else {
            f64::NAN
        };
        Some((mean.exp(), mean.exp() * se))
    }

    /// The lowest and highest ratio of single runs.
    pub fn range(&self) -> (f64, f64) {
        self.runs
            .iter()
            .map(|(o, t)| o / t)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
                (lo.min(r), hi.max(r))
            })
    }

    /// Mean ns of ours and of theirs.
    pub fn means(&self) -> (f64, f64) {
        let n = self.runs.len().max(1) as f64;
        let (o, t) = self
            .runs
            .iter()
            .fold((0.0, 0.0), |(so, st), (o, t)| (so + o, st + t));
        (o / n, t / n)
    }

    /// What attaching second does to each side, geometric mean over the pairs: (ours
    /// attached second ÷ ours attached first, theirs second ÷ theirs first). Below 1: the
    /// second runs cheaper, as the geometric mean of both orders assumes it may.
    pub fn order_effect(&self) -> Option<(f64, f64)> {
        let pairs: Vec<(f64, f64)> = self
            .runs
            .chunks_exact(2)
            .map(|p| ((p[1].0 / p[0].0).ln(), (p[0].1 / p[1].1).ln()))
            .collect();
        let n = pairs.len() as f64;
        (!pairs.is_empty()).then(|| {
            let (o, t) = pairs
                .iter()
                .fold((0.0, 0.0), |(so, st), (o, t)| (so + o, st + t));
            ((o / n).exp(), (t / n).exp())
        })
    }

    /// A table cell: "**0.57** (0.55–0.60, ± 0.01; 377 ÷ 662 ns) ✅" (the check against
    /// `goal` where there is one).
    pub fn cell(&self, goal: Option<f64>) -> String {
        let Some((mean, se)) = self.geomean() else {
            return "–".to_string();
        };
        let (lo, hi) = self.range();
        let (ours, theirs) = self.means();
        let se = if se.is_nan() {
            String::new()
        } else {
            format!(", ± {se:.3}")
        };
        let met = match goal {
            Some(g) if mean <= g => " ✅",
            Some(_) => " ❌",
            None => "",
        };
        format!("**{mean:.3}** ({lo:.3}–{hi:.3}{se}; {ours:.0} ÷ {theirs:.0} ns){met}")
    }
}

/// Ours run one way against the anchors on one workload.
#[derive(Clone, Debug)]
pub struct Row {
    /// Our side's label.
    pub ours: String,
    /// Against offcputime: `sched_switch` ns/event.
    pub sched_switch: Ratio,
    /// Against offcputime + wakeuptime: all programs per context switch.
    pub per_switch: Ratio,
    /// Against offcputime alone: all programs per context switch.
    pub per_switch_offcputime: Ratio,
}

/// The phase's result on one workload.
#[derive(Clone, Debug)]
pub struct SideBySide {
    /// What ran and which process was profiled, for the table.
    pub workload: String,
    pub pairs: usize,
    pub secs: u64,
    pub rows: Vec<Row>,
}

/// What the table says about the workload's load and the process profiled.
fn describe(workload: &Workload) -> String {
    match workload {
        Workload::Nginx => format!(
            "nginx + wrk: one of {NGINX_WORKERS} workers, `wrk -t{WRK_THREADS} \
             -c{WRK_CONNECTIONS}`"
        ),
        Workload::Postgres(_) => format!(
            "PostgreSQL + pgbench: one backend, `pgbench -c {} -j {}`",
            postgres::CLIENTS,
            postgres::THREADS
        ),
        Workload::Fsync(_) => "fsync-heavy: the test workload `mixed`".to_string(),
    }
}

/// `pairs` pairs of runs of `secs` per side of ours in `sides`, each pair in both attach
/// orders, against offcputime and against offcputime + wakeuptime.
pub fn run(
    bench: &Bench,
    workload: &Workload,
    sides: &[Side],
    pairs: usize,
    secs: u64,
) -> Result<SideBySide> {
    let _stats = BpfStats::enable()?;
    let mut done = SideBySide {
        workload: describe(workload),
        pairs,
        secs,
        rows: Vec::new(),
    };
    let (alone, both) = (Side::offcputime(), Side::anchor_pair());
    for ours in sides {
        let mut row = Row {
            ours: ours.label.clone(),
            sched_switch: Ratio::default(),
            per_switch: Ratio::default(),
            per_switch_offcputime: Ratio::default(),
        };
        for pair in 1..=pairs {
            for ours_first in [true, false] {
                let what = format!(
                    "side by side {} {pair}/{pairs}, {} first",
                    workload.name(),
                    if ours_first { "ours" } else { "the anchors" }
                );
                let w = window(bench, workload, ours, &alone, ours_first, secs)?;
                let switch = figure(&w, |p| ns_per_event(p, SWITCH))?;
                let total = figure(&w, ns_per_switch)?;
                say(&format!(
                    "{what}: sched_switch {:.0} ns ÷ {} {:.0} ns = {:.3}; all programs per \
                     switch {:.0} ns ÷ {:.0} ns",
                    switch.0,
                    alone.label,
                    switch.1,
                    switch.0 / switch.1,
                    total.0,
                    total.1
                ));
                row.sched_switch.runs.push(switch);
                row.per_switch_offcputime.runs.push(total);
                let w = window(bench, workload, ours, &both, ours_first, secs)?;
                let total = figure(&w, ns_per_switch)?;
                say(&format!(
                    "{what}: all programs per switch {:.0} ns ÷ {} {:.0} ns = {:.3}",
                    total.0,
                    both.label,
                    total.1,
                    total.0 / total.1
                ));
                row.per_switch.runs.push(total);
            }
        }
        done.rows.push(row);
    }
    Ok(done)
}

/// What both sides' programs did during one window.
struct Window {
    ours: Vec<Program>,
    theirs: Vec<Program>,
}

/// `f` of ours and of theirs; a side without a `sched_switch` run saw nothing.
fn figure(w: &Window, f: impl Fn(&[Program]) -> Option<f64>) -> Result<(f64, f64)> {
    match (f(&w.ours), f(&w.theirs)) {
        (Some(ours), Some(theirs)) if theirs > 0.0 => Ok((ours, theirs)),
        _ => bail!("no sched_switch runs were counted in a side-by-side window"),
    }
}

/// The load of one run, held from before the tools attach (a backend exists only once
/// pgbench connects) until they stop, and the process profiled.
struct Held {
    target: u32,
    /// nginx: wrk runs during the window; the others run all along.
    wrk: bool,
    _pgbench: Option<postgres::Load>,
    _fsync: Option<FsyncWorkload>,
}

/// Starts the workload's load.
fn hold(bench: &Bench, workload: &Workload) -> Result<Held> {
    let mut held = Held {
        target: 0,
        wrk: false,
        _pgbench: None,
        _fsync: None,
    };
    match workload {
        Workload::Nginx => {
            held.target = bench.nginx.processes[0];
            held.wrk = true;
        }
        Workload::Postgres(cluster) => {
            held._pgbench = Some(cluster.load(3600)?);
            held.target = cluster.pgbench_backends()?[0];
        }
        Workload::Fsync(binary) => {
            let load = FsyncWorkload::start(binary, &bench.dir)?;
            held.target = load.pid();
            held._fsync = Some(load);
        }
    }
    Ok(held)
}

/// One run, as the quiet gate asks (wait for quiet CPUs, repeat when other work disturbed it;
/// neither under `--under-load`).
fn window(
    bench: &Bench,
    workload: &Workload,
    ours: &Side,
    theirs: &Side,
    ours_first: bool,
    secs: u64,
) -> Result<Window> {
    undisturbed(&bench.quiet, || {
        let held = hold(bench, workload)?;
        let measured = measure(bench, held.target, [ours, theirs], ours_first, || {
            if held.wrk {
                run_wrk(bench.port, secs)
            } else {
                thread::sleep(Duration::from_secs(secs));
                Ok(())
            }
        });
        drop(held);
        bench.log_reset();
        cleanup_outputs(&bench.dir);
        measured
    })
}

/// Attaches both sides' tools to `target` (ours first or last), then [`SETTLE`], runs
/// `load` between two bpf_stats snapshots, stops them. Returns the window and other
/// processes' share of the CPUs during it.
fn measure(
    bench: &Bench,
    target: u32,
    [ours, theirs]: [&Side; 2],
    ours_first: bool,
    load: impl FnOnce() -> Result<()>,
) -> Result<(Window, f64)> {
    let order = if ours_first {
        [(true, ours), (false, theirs)]
    } else {
        [(false, theirs), (true, ours)]
    };
    let mut tools = Vec::new();
    for (is_ours, side) in order {
        for tool in &side.tools {
            let cmd = tool.command(target, &bench.dir, tools.len());
            let what = format!("{} ({}, on PID {target})", tool.name(), side.label);
            let mut instance = Instance::spawn(what, cmd)?;
            instance.wait_ready(tool.ready())?;
            tools.push((is_ours, tool.name().to_string(), instance));
        }
    }
    thread::sleep(SETTLE);
    let ids: Vec<HashSet<u32>> = tools
        .iter()
        .map(|(_, _, t)| bpf_prog_ids(t.pid()))
        .collect();
    let all: HashSet<u32> = ids.iter().flatten().copied().collect();
    let before = bpf_prog_stats(&all)?;
    let others = ForeignCpu::start();
    let started = Instant::now();
    load()?;
    let foreign = others.fraction(started.elapsed().as_secs_f64());
    let after = bpf_prog_stats(&all)?;
    for (_, _, tool) in &tools {
        tool.interrupt();
    }
    let mut w = Window {
        ours: Vec::new(),
        theirs: Vec::new(),
    };
    for ((is_ours, name, tool), ids) in tools.iter_mut().zip(&ids) {
        let (status, _) = tool.reap(EXIT_TIMEOUT)?;
        if !status.success() {
            bail!(
                "{} failed ({status}); its stderr ends with: {}",
                tool.what,
                tail_of_lines(&tool.lines())
            );
        }
        let side = if *is_ours { &mut w.ours } else { &mut w.theirs };
        side.extend(deltas(name, ids, &before, &after));
    }
    Ok((w, foreign))
}

/// bpf_stats snapshots: id → (name, run_time_ns, run_cnt).
type Snapshot = HashMap<u32, (String, u64, u64)>;

/// The growth of each of `tool`'s programs (`ids`) between two snapshots.
fn deltas(tool: &str, ids: &HashSet<u32>, before: &Snapshot, after: &Snapshot) -> Vec<Program> {
    let mut programs: Vec<Program> = ids
        .iter()
        .filter_map(|id| {
            let ((name, t1, c1), (_, t0, c0)) = (after.get(id)?, before.get(id)?);
            Some(Program {
                tool: tool.to_string(),
                name: name.clone(),
                time_ns: t1.saturating_sub(*t0),
                runs: c1.saturating_sub(*c0),
            })
        })
        .collect();
    programs.sort_by(|a, b| a.name.cmp(&b.name));
    programs
}

/// The report's section: the host's CPU beside one table, a row per workload and way of
/// running ours.
pub fn section(md: &mut String, results: &[SideBySide], host: &str) {
    let Some(first) = results.first() else {
        return;
    };
    let _ = writeln!(
        md,
        "\n#### Side by side: ours and the anchors attached to one process at once\n\n\
         Host: **{host}** (the ratios hold for this host; compare hosts by ratio, not ns). \
         Each run attaches ours and the anchor side (libbpf-tools `offcputime`; or \
         `offcputime` and `wakeuptime` together) to the same process, takes bpf_stats around \
         a {} s window and stops both; {} pair(s) of runs per comparison, each pair in both \
         attach orders. A cell: the geometric mean of ours ÷ theirs (each pair's two orders, \
         then the pairs), the range over single runs, ± one standard error over pairs, and \
         the mean ns of each side. Per context switch: all of a side's programs' time ÷ the \
         machine's context switches (`sched_switch` runs).\n",
        first.secs, first.pairs,
    );
    md.push_str(
        "| workload (process profiled) | ours | `sched_switch` ns/event, ours ÷ offcputime \
         (goal ≤ 0.5) | all programs per context switch, ours ÷ (offcputime + wakeuptime) \
         (goal ≤ 0.5) | all programs per context switch, ours ÷ offcputime |\n\
         |---|---|---:|---:|---:|\n",
    );
    for result in results {
        for row in &result.rows {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} |",
                result.workload,
                row.ours,
                row.sched_switch.cell(Some(GOAL)),
                row.per_switch.cell(Some(GOAL)),
                row.per_switch_offcputime.cell(None)
            );
        }
    }
    md.push('\n');
    for result in results {
        for row in &result.rows {
            let Some((ours, theirs)) = row.sched_switch.order_effect() else {
                continue;
            };
            let _ = writeln!(
                md,
                "- Attach order, {}, ours {}: `sched_switch` ns/event attached second ÷ \
                 attached first, ours {ours:.3}, offcputime {theirs:.3} (the geometric mean \
                 of both orders cancels such a difference).",
                result.workload, row.ours
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(tool: &str, name: &str, time_ns: u64, runs: u64) -> Program {
        Program {
            tool: tool.to_string(),
            name: name.to_string(),
            time_ns,
            runs,
        }
    }

    #[test]
    fn a_side_of_two_anchors_adds_their_times_per_event_and_per_switch() {
        let pair = [
            program("offcputime", "sched_switch", 90_000, 100),
            program("wakeuptime", "sched_switch", 30_000, 100),
            program("wakeuptime", "sched_wakeup", 20_000, 50),
        ];
        assert_eq!(ns_per_event(&pair, "sched_switch"), Some(1200.0));
        assert_eq!(ns_per_event(&pair, "sched_wakeup"), Some(400.0));
        assert_eq!(ns_per_switch(&pair), Some(1400.0));
        let ours = [
            program("ours", "sched_switch", 40_000, 100),
            program("ours", "sched_waking", 10_000, 80),
            program("ours", "on_cpu_sample", 5_000, 2),
        ];
        assert_eq!(ns_per_event(&ours, "sched_switch"), Some(400.0));
        assert_eq!(ns_per_switch(&ours), Some(550.0));
        let idle = [program("ours", "sched_switch", 0, 0)];
        assert_eq!(
            (ns_per_event(&idle, "sched_switch"), ns_per_switch(&idle)),
            (None, None)
        );
        assert_eq!(ns_per_event(&ours, "sched_wakeup"), None);
    }

    /// Ours 0.5 × theirs, in two pairs; whoever attaches second runs 20 % cheaper.
    fn half_with_order_effect() -> Ratio {
        Ratio {
            runs: vec![
                (500.0, 800.0),
                (400.0, 1000.0),
                (500.0, 800.0),
                (400.0, 1000.0),
            ],
        }
    }

    #[test]
    fn the_second_attached_advantage_cancels_in_the_geometric_mean() {
        let ratio = half_with_order_effect();
        let (mean, se) = ratio.geomean().unwrap();
        assert!((mean - 0.5).abs() < 1e-12, "{mean}");
        assert!(se.abs() < 1e-12, "{se}");
        assert_eq!(ratio.range(), (0.4, 0.625));
        // Ours: 400 second ÷ 500 first; theirs: 800 second ÷ 1000 first.
        let (ours, theirs) = ratio.order_effect().unwrap();
        assert!((ours - 0.8).abs() < 1e-12 && (theirs - 0.8).abs() < 1e-12);
        assert!(Ratio::default().order_effect().is_none());
        assert_eq!(ratio.means(), (450.0, 900.0));
        let one_pair = Ratio {
            runs: vec![(600.0, 1000.0), (300.0, 1200.0)],
        };
        let (mean, se) = one_pair.geomean().unwrap();
        assert!((mean - (0.6f64 * 0.25).sqrt()).abs() < 1e-12 && se.is_nan());
        assert!(Ratio::default().geomean().is_none());
        // Two pairs 0.4 and 0.6 (in logs): the standard error over pairs.
        let spread = Ratio {
            runs: vec![(40.0, 100.0), (40.0, 100.0), (60.0, 100.0), (60.0, 100.0)],
        };
        let (mean, se) = spread.geomean().unwrap();
        let expect = (0.24f64).sqrt();
        assert!((mean - expect).abs() < 1e-12);
        assert!((se - expect * (1.5f64).ln() / 2.0).abs() < 1e-12, "{se}");
    }

    #[test]
    fn cells_say_the_mean_the_range_the_error_the_ns_and_the_goal() {
        let ratio = half_with_order_effect();
        assert_eq!(
            ratio.cell(Some(GOAL)),
            "**0.500** (0.400–0.625, ± 0.000; 450 ÷ 900 ns) ✅"
        );
        assert_eq!(
            ratio.cell(None),
            "**0.500** (0.400–0.625, ± 0.000; 450 ÷ 900 ns)"
        );
        let one_pair = Ratio {
            runs: vec![(600.0, 1000.0), (600.0, 1000.0)],
        };
        assert_eq!(
            one_pair.cell(Some(GOAL)),
            "**0.600** (0.600–0.600; 600 ÷ 1000 ns) ❌"
        );
        assert_eq!(Ratio::default().cell(Some(GOAL)), "–");
    }

    #[test]
    fn the_section_puts_the_host_beside_a_row_per_workload_and_side() {
        let ratio = |o: f64| Ratio {
            runs: vec![(o, 1000.0), (o, 1000.0)],
        };
        let row = |label: &str, o: f64| Row {
            ours: label.to_string(),
            sched_switch: ratio(o),
            per_switch: ratio(o + 100.0),
            per_switch_offcputime: Ratio::default(),
        };
        let results = [
            SideBySide {
                workload: "nginx + wrk: one of 2 workers".to_string(),
                pairs: 1,
                secs: 3,
                rows: vec![row("`--mode wall`", 400.0), row("`--no-wakers`", 300.0)],
            },
            SideBySide {
                workload: "fsync-heavy".to_string(),
                pairs: 1,
                secs: 3,
                rows: vec![row("`--mode wall`", 600.0)],
            },
        ];
        let mut md = String::new();
        section(&mut md, &results, "2 CPUs, AMD EPYC 7B13, Linux 6.18");
        assert!(
            md.starts_with("\n#### Side by side")
                && md.contains("Host: **2 CPUs, AMD EPYC 7B13, Linux 6.18**")
                && md.contains("a 3 s window and stops both; 1 pair(s) of runs"),
            "{md}"
        );
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(rows.len(), 4, "{md}");
        assert_eq!(
            rows[1],
            "| nginx + wrk: one of 2 workers | `--mode wall` | **0.400** (0.400–0.400; 400 ÷ \
             1000 ns) ✅ | **0.500** (0.500–0.500; 500 ÷ 1000 ns) ✅ | – |"
        );
        assert!(rows[2].contains("| `--no-wakers` | **0.300**"), "{md}");
        assert!(
            rows[3].starts_with("| fsync-heavy | `--mode wall` | **0.600**")
                && rows[3].contains("❌"),
            "{md}"
        );
        let notes: Vec<&str> = md.lines().filter(|l| l.starts_with("- ")).collect();
        assert_eq!(notes.len(), 3, "{md}");
        assert!(
            notes[0]
                .starts_with("- Attach order, nginx + wrk: one of 2 workers, ours `--mode wall`: ")
                && notes[0].contains("ours 1.000, offcputime 1.000"),
            "{md}"
        );
        let mut empty = String::new();
        section(&mut empty, &[], "host");
        assert!(empty.is_empty());
    }

    #[test]
    fn our_side_takes_its_arguments_and_the_anchors_their_pid() {
        let dir = Path::new("/tmp/b");
        let args = |cmd: Command| -> Vec<String> {
            std::iter::once(cmd.get_program())
                .chain(cmd.get_args())
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let ours = Side::ours(
            "x",
            Path::new("/bin/profiler"),
            &["--mode", "wall", "--no-x"],
        );
        assert_eq!(
            args(ours.tools[0].command(7, dir, 1)),
            [
                "/bin/profiler",
                "--pid",
                "7",
                "--secs",
                "3600",
                "-o",
                "/tmp/b/side-by-side-1.svg",
                "--mode",
                "wall",
                "--no-x"
            ]
        );
        let pair = Side::anchor_pair();
        let names: Vec<&str> = pair.tools.iter().map(Tool::name).collect();
        assert_eq!(names, ["offcputime", "wakeuptime"]);
        assert_eq!(
            args(pair.tools[1].command(7, dir, 0)),
            ["/usr/sbin/wakeuptime", "-p", "7", "3600"]
        );
        assert_eq!(Side::offcputime().tools.len(), 1);
        assert_eq!(ours_sides(Path::new("/bin/profiler"))[0].tools.len(), 1);
    }

    #[test]
    fn deltas_are_per_program_of_the_tool() {
        let snap = |t: u64, c: u64| -> Snapshot {
            HashMap::from([
                (1, ("sched_switch".to_string(), t, c)),
                (2, ("sched_wakeup".to_string(), t / 2, c / 2)),
                (3, ("other_tool".to_string(), 5, 5)),
            ])
        };
        let ids = HashSet::from([1, 2]);
        let d = deltas("wakeuptime", &ids, &snap(1000, 10), &snap(3000, 30));
        assert_eq!(
            d,
            [
                program("wakeuptime", "sched_switch", 2000, 20),
                program("wakeuptime", "sched_wakeup", 1000, 10)
            ]
        );
    }
}
