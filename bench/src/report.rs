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
        self.facts(&mut md);
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
        let (threads, connections) = o.layout.wrk();
        let _ = writeln!(
            md,
            "### Overhead next to the anchors (`{}`)\n\n\
             {} · Linux {} · {} CPUs ({}) · {:.1} GiB RAM · profiler at {}  \n\
             {}  \n\
             Throughput: {} round(s) of {} s, the order of conditions rotating; two nginx \
             sides, each with {} under its own `wrk -t{threads} -c{connections}`, {}, the wrks \
             taking turns every 10 ms; each tool profiles one side (alternating). BPF cost, \
             post-processing: one nginx with {NGINX_WORKERS} workers under \
             `wrk -t{WRK_THREADS} -c{WRK_CONNECTIONS} -d{}s`, one tool instance per worker. \
             The whole bench took {}.",
            o.command,
            date.trim(),
            m.kernel,
            m.cpus,
            m.cpu_model,
            m.memory_gib,
            m.revision,
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

    /// What the table rests on, one fact a line.
    fn facts(&self, md: &mut String) {
        let (p, q, o) = (self.post, self.quiet, self.setup);
        let mut facts = vec![match p.logged_secs {
            Some(s) => format!(
                "Post-processing: {s:.3} s logged by the profiler (`-v`), ≤ {:.2} s measured \
                 from outside.",
                p.measured_secs
            ),
            None => format!(
                "Post-processing: no `post-processing took` line logged; {:.2} s measured from \
                 outside (exit − capture end).",
                p.measured_secs
            ),
        }];
        if p.foreign > FOREIGN_MAX {
            facts.push(format!(
                "Other processes took {:.0} % of the CPUs during the post-processing run.",
                p.foreign * 100.0
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
            facts.push(format!(
                "Throughput ratios, mean ± standard error over the rounds: {}.",
                means.join(", ")
            ));
        }
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
        if o.rounds < 5 {
            facts.push(format!(
                "Only {} round(s) of {} s: a smoke test, not numbers for the README.",
                o.rounds, o.secs
            ));
        }
        md.push('\n');
        for f in facts {
            let _ = writeln!(md, "- {f}");
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
