//! The start-up table (issue 25): per case, the profiler's own figures and the wall time to
//! the window.

use std::fmt::Write as _;

use super::{
    cells::TABLE_HEAD,
    stats::{median, min_max},
};
use crate::{
    quiet::FOREIGN_MAX,
    startup::{
        BUSY_THREADS, CAPTURE_SECS, GOAL_BUSY_WALL_S, GOAL_IDLE_CPU_S, Run as StartupRun, Startup,
    },
};

/// The start-up table: per case, the figures of the profiler's `-v` line and the wall time to
/// the window, median and range over the runs, next to issue 25's goals.
pub(super) fn startup_section(md: &mut String, s: &Startup) {
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
pub(super) fn startup_row(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
