//! The bench's report, `target/bench/latest.md`: the setup, one table of medians next to
//! the goals per workload, and the facts behind them (means ± standard errors, how busy other
//! work kept the machine).

use std::{fmt::Write as _, fs, path::Path, process::Command, thread, time::Duration};

use clap::ValueEnum as _;
use xtask::output;

use crate::{
    cost::Costs,
    nginx::{Layout, NGINX_WORKERS, WRK_CONNECTIONS, WRK_THREADS},
    post::Post,
    postgres,
    quiet::{FOREIGN_MAX, QUIET_BUSY, Quiet},
    sidebyside::{self, SideBySide},
    startup::{
        BUSY_THREADS, CAPTURE_SECS, GOAL_BUSY_WALL_S, GOAL_IDLE_CPU_S, Run as StartupRun, Startup,
    },
    throughput::Throughput,
    tools::{Condition, NO_TIMELINE_OWNER, NO_WAKERS_OWNER, PACKAGES},
};

/// Goals shown next to the numbers.
const GOAL_WALL_RATIO: f64 = 0.98;
/// Ours ≤ this × offcputime, per sched_switch event and in BPF CPU time per second of load.
const GOAL_COST_FACTOR: f64 = 0.5;
/// Issue 19: each thread's on-CPU and run-queue time within 1 % of the window of the kernel's
/// own (schedstat).
const GOAL_AGREEMENT_PCT: f64 = 1.0;
const GOAL_POST_SECS: f64 = 1.0;
const GOAL_RSS_MB: f64 = 150.0;

/// What was asked for, as the report states it.
pub struct Setup {
    /// As typed.
    pub command: String,
    pub rounds: usize,
    pub secs: u64,
    pub layout: Layout,
}

pub struct Machine {
    kernel: String,
    cpus: usize,
    cpu_model: String,
    memory_gib: f64,
    versions: String,
    revision: String,
}

impl Machine {
    pub fn describe(root: &Path) -> Self {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let versions = PACKAGES
            .iter()
            .map(|p| format!("{} {}", p.name, package_version(p.name)))
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

    /// "2 CPUs, AMD EPYC 7B13, Linux 6.18.44": what the side-by-side ratios hold for.
    pub fn host(&self) -> String {
        format!(
            "{} CPUs, {}, Linux {}",
            self.cpus, self.cpu_model, self.kernel
        )
    }
}

pub struct Report<'a> {
    pub setup: &'a Setup,
    pub machine: Machine,
    /// nginx's and PostgreSQL's throughput phases, where they ran.
    pub nginx: Option<&'a Throughput>,
    pub postgres: Option<&'a Throughput>,
    /// One per workload that ran.
    pub costs: &'a [Costs],
    pub post: Option<&'a Post>,
    pub startup: Option<&'a Startup>,
    /// One per workload the side-by-side phase ran on.
    pub side_by_side: &'a [SideBySide],
    pub quiet: &'a Quiet,
    pub took: Duration,
}

const TABLE_HEAD: &str =
    "| measurement | median | min–max | goal | met |\n|---|---:|---:|---|:-:|\n";

impl Report<'_> {
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        self.title(&mut md);
        let costs = |name: &str| self.costs.iter().find(|c| c.workload == name);
        if self.nginx.is_some() || costs("nginx").is_some() {
            md.push_str("\n#### nginx + wrk\n\n");
            md.push_str(TABLE_HEAD);
            if let Some(t) = self.nginx {
                throughput_rows(&mut md, t, "requests/s", true);
            }
            if let Some(c) = costs("nginx") {
                cost_rows(&mut md, c);
            }
            if let Some(p) = self.post {
                post_rows(&mut md, p);
            }
        }
        if self.postgres.is_some() || costs("postgres").is_some() {
            md.push_str("\n#### PostgreSQL + pgbench\n\n");
            md.push_str(TABLE_HEAD);
            if let Some(t) = self.postgres {
                throughput_rows(&mut md, t, "transactions/s", false);
            }
            if let Some(c) = costs("postgres") {
                cost_rows(&mut md, c);
            }
        }
        if let Some(c) = costs("fsync") {
            md.push_str("\n#### fsync-heavy (test workload `mixed`)\n\n");
            md.push_str(TABLE_HEAD);
            cost_rows(&mut md, c);
        }
        sidebyside::section(&mut md, self.side_by_side, &self.machine.host());
        if let Some(s) = self.startup {
            startup_section(&mut md, s);
        }
        self.facts(&mut md);
        md
    }

    /// Whether any phase but the start-up ran.
    fn overhead_ran(&self) -> bool {
        self.phases_ran() || !self.side_by_side.is_empty()
    }

    /// Whether the throughput or BPF cost phases ran, which the full header describes.
    fn phases_ran(&self) -> bool {
        self.nginx.is_some() || self.postgres.is_some() || !self.costs.is_empty()
    }

    /// The full header, or a title for the one phase that ran alone (start-up, side by side).
    fn title(&self, md: &mut String) {
        if self.phases_ran() {
            return self.header(md);
        }
        let what = if self.side_by_side.is_empty() {
            "Start-up"
        } else {
            "Side by side with the anchors"
        };
        let _ = writeln!(
            md,
            "### {what} (`{}`)\n\n{}",
            self.setup.command,
            self.machine_line()
        );
    }

    /// Date, kernel, CPUs and their model, memory, the profiler's revision.
    fn machine_line(&self) -> String {
        let m = &self.machine;
        let date = output(
            Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]),
            "date",
        )
        .unwrap_or_default();
        format!(
            "{} · Linux {} · {} CPUs ({}) · {:.1} GiB RAM · profiler at {}",
            date.trim(),
            m.kernel,
            m.cpus,
            m.cpu_model,
            m.memory_gib,
            m.revision,
        )
    }

    fn header(&self, md: &mut String) {
        let m = &self.machine;
        let o = self.setup;
        let (threads, connections) = o.layout.wrk();
        let _ = writeln!(
            md,
            "### Overhead next to the anchors (`{}`)\n\n\
             {}  \n\
             {}  \n\
             {} round(s) of {} s per condition, the order rotating. Throughput: two sides, \
             each tool profiling one (alternating), their load generators taking turns every \
             10 ms; nginx sides each with {} under its own `wrk -t{threads} -c{connections}`, \
             {}; PostgreSQL sides each a private cluster (scale {}, synchronous_commit on) \
             under its own `pgbench -c {} -j {}`. BPF cost: nginx with {NGINX_WORKERS} workers \
             under `wrk -t{WRK_THREADS} -c{WRK_CONNECTIONS} -d{}s`; one PostgreSQL backend \
             under that pgbench; the test workload's `mixed` mode (write + fsync loop, a 20 ms \
             sleeper, a blocked reader, one spinner more than CPUs). Ours runs one instance on \
             the service (nginx's master, the postmaster; it follows the children), \
             offcputime and perf one per process. The whole bench took {}.",
            o.command,
            self.machine_line(),
            m.versions,
            o.rounds,
            o.secs,
            match o.layout {
                Layout::Spread => format!("{NGINX_WORKERS} workers"),
                Layout::OneCpu => "one worker".to_string(),
            },
            match o.layout {
                Layout::Spread => "all on all CPUs",
                Layout::OneCpu => "all four on one CPU (`--one-cpu`)",
            },
            postgres::SCALE,
            postgres::CLIENTS,
            postgres::THREADS,
            o.secs,
            minutes(self.took),
        );
    }

    /// What the table rests on, one fact a line.
    fn facts(&self, md: &mut String) {
        let (q, o) = (self.quiet, self.setup);
        let mut facts = Vec::new();
        if let Some(p) = self.post {
            facts.push(match p.logged_secs {
                Some(s) => format!(
                    "Post-processing: {s:.3} s logged by the profiler (`-v`), ≤ {:.2} s \
                     measured from outside.",
                    p.measured_secs
                ),
                None => format!(
                    "Post-processing: no `post-processing took` line logged; {:.2} s measured \
                     from outside (exit − capture end).",
                    p.measured_secs
                ),
            });
            if p.foreign > FOREIGN_MAX {
                facts.push(format!(
                    "Other processes took {:.0} % of the CPUs during the post-processing run.",
                    p.foreign * 100.0
                ));
            }
        }
        for (name, t) in [("nginx", self.nginx), ("PostgreSQL", self.postgres)] {
            let Some(t) = t else { continue };
            let means: Vec<String> = Condition::ALL
                .into_iter()
                .filter_map(|cond| {
                    let (mean, se) = mean_se(&t.ratios(cond))?;
                    let name = cond
                        .to_possible_value()
                        .map_or("nothing attached".to_string(), |v| v.get_name().to_string());
                    Some(format!("{name} {mean:.3} ± {se:.3}"))
                })
                .collect();
            if !means.is_empty() {
                facts.push(format!(
                    "{name} throughput ratios, mean ± standard error over the rounds: {}.",
                    means.join(", ")
                ));
            }
        }
        for c in self.costs {
            for (owner, n) in &c.instances {
                if *n > 1 {
                    let per_run: Vec<String> = c
                        .programs
                        .iter()
                        .filter(|(k, _)| k.starts_with(owner.as_str()))
                        .map(|(k, cost)| {
                            format!(
                                "{} {:.0} ns",
                                &k[owner.len() + 1..],
                                median(&cost.ns_per_run)
                            )
                        })
                        .collect();
                    facts.push(format!(
                        "{}: {owner} ran {n} instances, each running its programs on every \
                         event; per event is all instances' run time ÷ the events one \
                         instance saw; per run of one instance's program: {}.",
                        c.workload,
                        per_run.join(", ")
                    ));
                }
            }
        }
        if !q.foreign.is_empty() {
            let (lo, hi) = min_max(&q.foreign);
            let (blo, bhi) = min_max(&q.busy_before);
            facts.push(format!(
                "Load from other work (other sessions' builds and tests): during the runs it \
                 took {:.0} % of the CPUs (median; {:.0}–{:.0} %); just before them, with \
                 nothing of the bench loaded, the CPUs were {:.0} % busy (median; {:.0}–{:.0} %).",
                median(&q.foreign) * 100.0,
                lo * 100.0,
                hi * 100.0,
                median(&q.busy_before) * 100.0,
                blo * 100.0,
                bhi * 100.0
            ));
        }
        if q.under_load {
            facts.push(
                "`--under-load`: no run waited for quiet CPUs and none was repeated.".to_string(),
            );
        }
        if !q.under_load {
            facts.push(format!(
                "Runs that first waited for the CPUs to be < {:.0} % busy: {} of {} ({} in all), \
             {} started while still up to {:.0} % busy.",
                QUIET_BUSY * 100.0,
                q.waited_runs,
                q.runs,
                minutes(q.waited),
                q.busy_runs,
                q.worst_busy * 100.0
            ));
            facts.push(format!(
                "Runs repeated because other processes took > {:.0} % of the CPUs: {}, {} kept at \
             the last attempt; the worst run kept had {:.1} %.",
                FOREIGN_MAX * 100.0,
                q.repeated,
                q.kept_disturbed,
                q.worst_foreign * 100.0
            ));
        }
        if o.rounds < 5 {
            facts.push(if self.overhead_ran() {
                format!(
                    "Only {} round(s) of {} s: a smoke test, not numbers for the README.",
                    o.rounds, o.secs
                )
            } else {
                format!(
                    "Only {} start-up run(s) per case: a smoke test, not numbers for the README.",
                    o.rounds
                )
            });
        }
        md.push('\n');
        for f in facts {
            let _ = writeln!(md, "- {f}");
        }
    }
}

/// Rows of one throughput phase: the unprofiled rate, the noise floor, each condition's ratio
/// (the ≥ 0.98 goal on ours in wall mode where `goal`), and ours ÷ offcputime round by round.
fn throughput_rows(md: &mut String, t: &Throughput, unit: &str, goal: bool) {
    let base = t.unprofiled();
    let (lo, hi) = min_max(&base);
    let _ = writeln!(
        md,
        "| {unit} of one side, nothing attached (per second of its turns) | {:.0} | \
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
        Condition::WallEach,
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
        let (goal, met) = if cond == Condition::Wall && goal {
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

/// Rows of one workload's BPF cost: per program ns/event (per event on the machine), events/s
/// and ms/s; all programs per tool in ms per second of load; our memo hit rates.
fn cost_rows(md: &mut String, costs: &Costs) {
    let programs = &costs.programs;
    let ns = |key: &str| {
        programs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, c)| median(&c.ns_per_event))
    };
    let theirs = ns("offcputime sched_switch");
    let one = ns("ours sched_switch");
    for (key, cost) in programs {
        let mid = median(&cost.ns_per_event);
        let (lo, hi) = min_max(&cost.ns_per_event);
        let (goal, met) = match (key.as_str(), theirs, one) {
            ("ours sched_switch", Some(theirs), _) => (
                format!(
                    "≤ {GOAL_COST_FACTOR} × offcputime's ({:.0} ns)",
                    GOAL_COST_FACTOR * theirs
                ),
                check(mid <= GOAL_COST_FACTOR * theirs),
            ),
            ("ours, one per process, sched_switch", _, Some(one)) => {
                (format!("≥ one instance's ({one:.0} ns)"), check(one <= mid))
            }
            // Without wakers: our lowest cost, its ratio said beside it, no goal of its own.
            (k, Some(theirs), _) if k == format!("{NO_WAKERS_OWNER} sched_switch") => {
                (format!("{:.2} × offcputime's", mid / theirs), "")
            }
            _ => (String::new(), ""),
        };
        let _ = writeln!(
            md,
            "| BPF ns/event, {key} ({}, {:.1} ms/s) | {mid:.0} ns | {lo:.0}–{hi:.0} ns | {goal} \
             | {met} |",
            rate(median(&cost.events_per_sec)),
            median(&cost.ms_per_sec)
        );
    }
    for (owner, values) in &costs.busy_ms_per_sec {
        let (lo, hi) = min_max(values);
        let _ = writeln!(
            md,
            "| BPF CPU time, {owner} all programs (ms per s of load) | {:.1} ms | \
             {lo:.1}–{hi:.1} ms | | |",
            median(values)
        );
    }
    let per_switch = |owner: &str| {
        costs
            .busy_ns_per_switch
            .iter()
            .find(|(o, _)| o == owner)
            .map(|(_, v)| median(v))
    };
    let theirs = per_switch("offcputime");
    for (owner, values) in &costs.busy_ns_per_switch {
        let (lo, hi) = min_max(values);
        let mid = median(values);
        let (goal, met) = match (owner.as_str(), theirs) {
            ("ours", Some(theirs)) => (
                format!(
                    "≤ {GOAL_COST_FACTOR} × offcputime's ({:.0} ns)",
                    GOAL_COST_FACTOR * theirs
                ),
                check(mid <= GOAL_COST_FACTOR * theirs),
            ),
            (NO_WAKERS_OWNER, Some(theirs)) => (format!("{:.2} × offcputime's", mid / theirs), ""),
            _ => (String::new(), ""),
        };
        let _ = writeln!(
            md,
            "| BPF CPU time, {owner} all programs, per context switch on the machine (its ms/s \
             at the same switch rate) | {mid:.0} ns | {lo:.0}–{hi:.0} ns | {goal} | {met} |"
        );
    }
    timeline_rows(md, costs);
    for (owner, counters) in &costs.counters {
        for (what, prefix) in [("user", "unwind_memo"), ("kernel", "kernel_memo")] {
            let get = |k: &str| counters.get(&format!("{prefix}_{k}")).copied().unwrap_or(0);
            let (hits, misses) = (get("hits"), get("misses"));
            if hits + misses == 0 {
                continue;
            }
            let _ = writeln!(
                md,
                "| memo hit rate, {what} stacks, {owner} ({hits} hits, {misses} misses over all \
                 runs) | {:.1} % | | | |",
                hits as f64 * 100.0 / (hits + misses) as f64
            );
        }
    }
    agreement_rows(md, costs);
}

/// The timeline's cost: ours with it (`--report` turns it on) against ours with
/// `--no-timeline`, run next to each other in every round. Per program the ratio of their
/// ns/event round by round (each round's pair saw about the same load), and for all programs
/// together the difference per context switch on the machine.
fn timeline_rows(md: &mut String, costs: &Costs) {
    let program = |key: &str| {
        costs
            .programs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, c)| c)
    };
    for name in ["sched_switch", "on_cpu_sample", "sched_waking"] {
        let (Some(on), Some(off)) = (
            program(&format!("ours {name}")),
            program(&format!("{NO_TIMELINE_OWNER} {name}")),
        ) else {
            continue;
        };
        let ratios = paired_ratios(&on.ns_per_event, &off.ns_per_event);
        if ratios.is_empty() {
            continue;
        }
        let (lo, hi) = min_max(&ratios);
        let (on, off) = (median(&on.ns_per_event), median(&off.ns_per_event));
        let _ = writeln!(
            md,
            "| timeline's cost, {name}: ns/event with it ÷ without (`--no-timeline`), same \
             round (medians {on:.0} ns ÷ {off:.0} ns, {:+.0} ns) | {:.3} | {lo:.3}–{hi:.3} | | |",
            on - off,
            median(&ratios)
        );
    }
    let per_switch = |owner: &str| {
        costs
            .busy_ns_per_switch
            .iter()
            .find(|(o, _)| o == owner)
            .map(|(_, v)| v)
    };
    if let (Some(on), Some(off)) = (per_switch("ours"), per_switch(NO_TIMELINE_OWNER)) {
        let deltas: Vec<f64> = on.iter().zip(off).map(|(a, b)| a - b).collect();
        if !deltas.is_empty() {
            let (lo, hi) = min_max(&deltas);
            let _ = writeln!(
                md,
                "| timeline's cost, all programs per context switch on the machine: with it − \
                 without, same round (medians {:.0} ns − {:.0} ns) | {:+.0} ns | \
                 {lo:+.0}–{hi:+.0} ns | | |",
                median(on),
                median(off),
                median(&deltas)
            );
        }
    }
}

/// `a[i] ÷ b[i]` for the rounds both have (one value per round, in run order); empty when a
/// program went unseen in some round of one and not the other, as the rounds no longer pair.
fn paired_ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    if a.len() != b.len() {
        return Vec::new();
    }
    a.iter()
        .zip(b)
        .filter(|(_, b)| **b > 0.0)
        .map(|(a, b)| a / b)
        .collect()
}

/// Per thread of every run of ours: |ours − schedstat| as a share of the window, on-CPU and
/// runnable (median and range over threads), against the 1 % goal.
fn agreement_rows(md: &mut String, costs: &Costs) {
    for (owner, threads) in &costs.agreement {
        let on_cpu: Vec<f64> = threads.iter().map(|a| a.on_cpu_pct).collect();
        let runnable: Vec<f64> = threads.iter().map(|a| a.runnable_pct).collect();
        for (what, values) in [("on-CPU", on_cpu), ("runnable", runnable)] {
            let (lo, hi) = min_max(&values);
            let _ = writeln!(
                md,
                "| per thread, {owner}: {what} time − the kernel's (schedstat over the window), \
                 % of the window ({} threads over all runs) | {:.2} % | {lo:.2}–{hi:.2} % | every \
                 thread ≤ {GOAL_AGREEMENT_PCT} % | {} |",
                values.len(),
                median(&values),
                check(hi <= GOAL_AGREEMENT_PCT)
            );
        }
    }
}

/// The start-up table: per case, the figures of the profiler's `-v` line and the wall time to
/// the window, median and range over the runs, next to issue 25's goals.
fn startup_section(md: &mut String, s: &Startup) {
    let _ = writeln!(
        md,
        "\n#### Start-up\n\n\
         `profiler --pid <sleep> --secs {CAPTURE_SECS} -v -o <svg>` on an idle `sleep 1000`, {} \
         run(s) per case, alternating: on an idle machine, and with {BUSY_THREADS} threads \
         spinning in the bench's own process (the profiler's session and cgroup). CPU and load \
         from the profiler's `-v` line (its getrusage just after the window opened and the \
         start snapshot was taken); wall time from the spawn to its `profiler: capturing` \
         line on stderr. The bench ran at nice {} (the profiler and the busy threads inherit \
         it); other work took {} of the CPUs during the idle runs and {} during the busy ones \
         (median; range).\n",
        s.idle.len().max(s.busy.len()),
        s.nice,
        foreign_share(&s.idle),
        foreign_share(&s.busy),
    );
    md.push_str(TABLE_HEAD);
    type Figure = fn(&StartupRun) -> f64;
    /// The runs, their figure, what it is, the case, the goal.
    type Row<'a> = (&'a [StartupRun], Figure, &'a str, &'a str, Option<f64>);
    let cpu: Figure = |r| r.logged.cpu;
    let load: Figure = |r| r.logged.load;
    let wall: Figure = |r| r.wall_to_window;
    let in_all: Figure = |r| r.cpu_in_all;
    let (to_cpu, to_wall) = (
        "CPU from the command to the window (user + system)",
        "wall time from the command to the window",
    );
    let (load_what, all_what) = (
        "load (maps created, programs verified)",
        &format!("CPU of the whole {CAPTURE_SECS} s run (wait4: start-up, window, output)"),
    );
    let busy = &format!("{BUSY_THREADS} busy threads");
    let rows: [Row; 10] = [
        (&s.idle, cpu, to_cpu, "idle machine", Some(GOAL_IDLE_CPU_S)),
        (
            &s.idle,
            |r| r.logged.system,
            "… of it in the kernel (system)",
            "idle machine",
            None,
        ),
        (&s.idle, load, load_what, "idle machine", None),
        (&s.idle, |r| r.logged.attach, "attach", "idle machine", None),
        (&s.idle, wall, to_wall, "idle machine", None),
        (&s.idle, in_all, all_what, "idle machine", None),
        (&s.busy, wall, to_wall, busy, Some(GOAL_BUSY_WALL_S)),
        (&s.busy, cpu, to_cpu, busy, None),
        (&s.busy, load, load_what, busy, None),
        (&s.busy, in_all, all_what, busy, None),
    ];
    for (runs, figure, what, case, goal) in rows {
        startup_row(md, runs, figure, what, case, goal);
    }
    calm_rows(md, s, cpu, to_cpu, wall, to_wall);
}

/// On a shared machine other work inflates both goals' figures: the same two rows from only
/// the runs it left alone (≤ [`FOREIGN_MAX`] of the CPUs), where some runs were not.
fn calm_rows(
    md: &mut String,
    s: &Startup,
    cpu: fn(&StartupRun) -> f64,
    to_cpu: &str,
    wall: fn(&StartupRun) -> f64,
    to_wall: &str,
) {
    let busy = format!("{BUSY_THREADS} busy threads");
    for (runs, figure, what, case, goal) in [
        (&s.idle, cpu, to_cpu, "idle machine", GOAL_IDLE_CPU_S),
        (&s.busy, wall, to_wall, busy.as_str(), GOAL_BUSY_WALL_S),
    ] {
        let calm: Vec<StartupRun> = runs
            .iter()
            .filter(|r| r.foreign <= FOREIGN_MAX)
            .copied()
            .collect();
        if calm.len() == runs.len() {
            continue;
        }
        let case = format!(
            "{case}, only the {} of {} runs other work took ≤ {:.0} % of the CPUs in",
            calm.len(),
            runs.len(),
            FOREIGN_MAX * 100.0
        );
        if calm.is_empty() {
            let _ = writeln!(md, "| start-up, {case}: {what} | – | | ≤ {goal} s | |");
        }
        startup_row(md, &calm, figure, what, &case, Some(goal));
    }
}

/// "3 % (1–9 %)": other work's share of the CPUs over `runs`.
fn foreign_share(runs: &[StartupRun]) -> String {
    if runs.is_empty() {
        return "nothing (no run)".to_string();
    }
    let shares: Vec<f64> = runs.iter().map(|r| r.foreign * 100.0).collect();
    let (lo, hi) = min_max(&shares);
    format!("{:.0} % ({lo:.0}–{hi:.0} %)", median(&shares))
}

/// One row of the start-up table; a goal is met when every run met it.
fn startup_row(
    md: &mut String,
    runs: &[StartupRun],
    figure: impl Fn(&StartupRun) -> f64,
    what: &str,
    case: &str,
    goal: Option<f64>,
) {
    if runs.is_empty() {
        return;
    }
    let values: Vec<f64> = runs.iter().map(figure).collect();
    let (lo, hi) = min_max(&values);
    let mid = median(&values);
    let (goal, met) = match goal {
        Some(g) => (
            format!("≤ {g} s, every run"),
            match (mid <= g, hi <= g) {
                (_, true) => "✅",
                (true, false) => "median ✅, max ❌",
                (false, false) => "❌",
            },
        ),
        None => (String::new(), ""),
    };
    let _ = writeln!(
        md,
        "| start-up, {case}: {what} | {mid:.3} s | {lo:.3}–{hi:.3} s | {goal} | {met} |"
    );
}

fn post_rows(md: &mut String, p: &Post) {
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

fn package_version(name: &str) -> String {
    output(
        Command::new("dpkg-query").args(["-W", "-f", "${Version}", name]),
        "dpkg-query",
    )
    .unwrap_or_else(|_| "?".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_timeline_rows_pair_rounds() {
        use crate::cost::Cost;
        let cost = |ns: &[f64]| Cost {
            ns_per_event: ns.to_vec(),
            ns_per_run: ns.to_vec(),
            events_per_sec: vec![1000.0; ns.len()],
            ms_per_sec: vec![1.0; ns.len()],
        };
        let costs = Costs {
            workload: "fsync",
            programs: vec![
                ("ours sched_switch".to_string(), cost(&[110.0, 220.0])),
                (
                    format!("{NO_TIMELINE_OWNER} sched_switch"),
                    cost(&[100.0, 200.0]),
                ),
                ("ours on_cpu_sample".to_string(), cost(&[1.0])),
                (
                    format!("{NO_TIMELINE_OWNER} on_cpu_sample"),
                    cost(&[1.0, 2.0]),
                ),
            ],
            busy_ns_per_switch: vec![
                ("ours".to_string(), vec![300.0, 310.0]),
                (NO_TIMELINE_OWNER.to_string(), vec![290.0, 290.0]),
            ],
            ..Costs::default()
        };
        let mut md = String::new();
        timeline_rows(&mut md, &costs);
        let rows: Vec<&str> = md.lines().collect();
        assert_eq!(rows.len(), 2, "{md}");
        assert!(
            rows[0].starts_with("| timeline's cost, sched_switch:")
                && rows[0].contains("(medians 165 ns ÷ 150 ns, +15 ns) | 1.100 | 1.100–1.100 |"),
            "{md}"
        );
        assert!(rows[1].contains("| +15 ns | +10–+20 ns |"), "{md}");
    }

    #[test]
    fn a_start_up_goal_is_met_when_every_run_met_it() {
        use crate::startup::Logged;
        let runs = |cpus: &[f64]| -> Vec<StartupRun> {
            cpus.iter()
                .map(|&cpu| StartupRun {
                    logged: Logged {
                        load: cpu - 0.05,
                        attach: 0.004,
                        snapshot: 0.001,
                        cpu,
                        user: 0.04,
                        system: cpu - 0.04,
                    },
                    wall_to_window: cpu + 0.02,
                    cpu_in_all: cpu + 0.2,
                    foreign: cpu / 10.0,
                })
                .collect()
        };
        let row = |cpus: &[f64]| {
            let mut md = String::new();
            startup_row(
                &mut md,
                &runs(cpus),
                |r| r.logged.cpu,
                "CPU",
                "idle",
                Some(0.4),
            );
            md
        };
        assert_eq!(
            row(&[0.3, 0.25, 0.4]),
            "| start-up, idle: CPU | 0.300 s | 0.250–0.400 s | ≤ 0.4 s, every run | ✅ |\n"
        );
        assert!(row(&[0.3, 0.25, 0.41]).ends_with("| median ✅, max ❌ |\n"));
        assert!(row(&[0.5, 0.25, 0.41]).ends_with("| ❌ |\n"));
        assert_eq!(row(&[]), "");
        let mut md = String::new();
        startup_section(
            &mut md,
            &Startup {
                idle: runs(&[0.3, 0.32]),
                busy: runs(&[1.1, 1.2]),
                nice: 10,
            },
        );
        assert!(
            md.contains(
                "at nice 10 (the profiler and the busy threads inherit it); other work took 3 % \
                 (3–3 %) of the CPUs during the idle runs and 12 % (11–12 %) during the busy ones"
            ),
            "{md}"
        );
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| start-up")).collect();
        assert_eq!(rows.len(), 12, "{md}");
        assert!(
            rows[0].starts_with("| start-up, idle machine: CPU from the command"),
            "{md}"
        );
        assert!(
            rows[6].starts_with("| start-up, 8 busy threads: wall time")
                && rows[6].contains("| 1.170 s | 1.120–1.220 s | ≤ 1.5 s, every run | ✅ |"),
            "{md}"
        );
        // Other work took 3 and 3.2 % of the CPUs in the idle runs, 11 and 12 % in the busy.
        assert_eq!(
            rows[10],
            "| start-up, idle machine, only the 1 of 2 runs other work took ≤ 3 % of the CPUs \
             in: CPU from the command to the window (user + system) | 0.300 s | 0.300–0.300 s | \
             ≤ 0.4 s, every run | ✅ |",
            "{md}"
        );
        assert!(
            rows[11].starts_with("| start-up, 8 busy threads, only the 0 of 2 runs")
                && rows[11]
                    .ends_with("wall time from the command to the window | – | | ≤ 1.5 s | |"),
            "{md}"
        );
    }

    #[test]
    fn the_start_up_alone_has_its_own_title_and_beside_the_overhead_its_own_table() {
        use crate::startup::Logged;
        let run = StartupRun {
            logged: Logged {
                load: 0.3,
                attach: 0.004,
                snapshot: 0.001,
                cpu: 0.35,
                user: 0.05,
                system: 0.3,
            },
            wall_to_window: 0.36,
            cpu_in_all: 0.5,
            foreign: 0.0,
        };
        let startup = Startup {
            idle: vec![run],
            busy: vec![run],
            nice: 0,
        };
        let setup = Setup {
            command: "cargo xtask bench --workloads startup".to_string(),
            rounds: 1,
            secs: 6,
            layout: Layout::Spread,
        };
        let machine = || Machine {
            kernel: "6.18".to_string(),
            cpus: 2,
            cpu_model: "AMD EPYC".to_string(),
            memory_gib: 23.5,
            versions: "nginx 1".to_string(),
            revision: "abc1234".to_string(),
        };
        let quiet = Quiet::default();
        let costs = [Costs {
            workload: "fsync",
            ..Costs::default()
        }];
        let report = |costs: &[Costs]| {
            Report {
                setup: &setup,
                machine: machine(),
                nginx: None,
                postgres: None,
                costs,
                post: None,
                startup: Some(&startup),
                side_by_side: &[],
                quiet: &quiet,
                took: Duration::from_secs(61),
            }
            .markdown()
        };
        let alone = report(&[]);
        assert!(
            alone.starts_with("### Start-up (`cargo xtask bench --workloads startup`)\n\n")
                && alone.contains(
                    " · Linux 6.18 · 2 CPUs (AMD EPYC) · 23.5 GiB RAM · profiler at abc1234\n"
                )
                && !alone.contains("Overhead")
                && alone.contains("\n#### Start-up\n")
                && alone.contains("- Only 1 start-up run(s) per case: a smoke test"),
            "{alone}"
        );
        let both = report(&costs);
        assert!(
            both.starts_with("### Overhead next to the anchors")
                && both.contains("2 CPUs (AMD EPYC)")
                && both.contains("\n#### fsync-heavy")
                && both.contains("\n#### Start-up\n")
                && both.contains("- Only 1 round(s) of 6 s: a smoke test"),
            "{both}"
        );
    }

    #[test]
    fn the_side_by_side_phase_alone_has_its_own_title_and_the_host_beside_its_table() {
        let setup = Setup {
            command: "cargo xtask bench --side-by-side".to_string(),
            rounds: 1,
            secs: 6,
            layout: Layout::Spread,
        };
        let machine = Machine {
            kernel: "6.18".to_string(),
            cpus: 2,
            cpu_model: "AMD EPYC".to_string(),
            memory_gib: 23.5,
            versions: "nginx 1".to_string(),
            revision: "abc1234".to_string(),
        };
        let quiet = Quiet::default();
        let sbs = [crate::sidebyside::SideBySide {
            workload: "fsync-heavy".to_string(),
            pairs: 1,
            secs: 3,
            rows: Vec::new(),
        }];
        let side_by_side = Report {
            setup: &setup,
            machine,
            nginx: None,
            postgres: None,
            costs: &[],
            post: None,
            startup: None,
            side_by_side: &sbs,
            quiet: &quiet,
            took: Duration::from_secs(61),
        }
        .markdown();
        assert!(
            side_by_side.starts_with(
                "### Side by side with the anchors (`cargo xtask bench --side-by-side`)"
            ) && side_by_side.contains("Host: **2 CPUs, AMD EPYC, Linux 6.18**")
                && side_by_side.contains("- Only 1 round(s) of 6 s: a smoke test"),
            "{side_by_side}"
        );
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
}
