//! The bench's report, `target/bench/latest.md`: the setup, one table of medians next to
//! the goals, and the facts behind them (means ± standard errors, how often other work
//! disturbed a run).

use std::{fmt::Write as _, fs, path::Path, process::Command, thread, time::Duration};

use clap::ValueEnum as _;
use xtask::output;

use crate::{
    cost::Costs,
    nginx::{Layout, NGINX_WORKERS, WRK_CONNECTIONS, WRK_THREADS},
    post::Post,
    quiet::{FOREIGN_MAX, QUIET_BUSY, Quiet},
    throughput::Throughput,
    tools::{Condition, PACKAGES},
};

/// Goals shown next to the numbers.
const GOAL_WALL_RATIO: f64 = 0.98;
const GOAL_COST_FACTOR: f64 = 0.7;
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
}

pub struct Report<'a> {
    pub setup: &'a Setup,
    pub machine: Machine,
    pub throughput: &'a Throughput,
    pub costs: &'a Costs,
    pub post: &'a Post,
    pub quiet: &'a Quiet,
    pub took: Duration,
}

impl Report<'_> {
    pub fn markdown(&self) -> String {
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
        let o = self.setup;
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
                Layout::Spread => format!(
                    "each with {NGINX_WORKERS} workers under its own `wrk -t{WRK_THREADS} \
                     -c{WRK_CONNECTIONS}`, all on all CPUs"
                ),
                Layout::OneCpu => format!(
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
        if self.setup.rounds < 5 {
            notes.push(format!(
                "Only {} round(s) of {} s: a smoke test, not numbers for the README.",
                self.setup.rounds, self.setup.secs
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
                let name = cond
                    .to_possible_value()
                    .map_or("nothing attached".to_string(), |v| v.get_name().to_string());
                Some(format!("{name} {mean:.3} ± {se:.3}"))
            })
            .collect();
        if !means.is_empty() {
            notes.push(format!(
                "Throughput ratios as mean ± standard error over the rounds: {}. The unprofiled \
                 side's context switches still run each tool's programs up to its PID filter, \
                 and {}: neither is charged to the profiled side.",
                means.join(", "),
                match self.setup.layout {
                    Layout::OneCpu => "the tools' user space runs on the other CPUs",
                    Layout::Spread =>
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
