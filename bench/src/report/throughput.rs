//! The rows of a throughput phase (nginx + wrk, PostgreSQL + pgbench).

use std::fmt::Write as _;

use super::{
    cells::check,
    stats::{median, min_max, versus},
};
use crate::{throughput::Throughput, tools::Condition};

/// Goals shown next to the numbers.
const GOAL_WALL_RATIO: f64 = 0.98;

/// Rows of one throughput phase: the unprofiled rate, the noise floor, each condition's ratio
/// (the ≥ 0.98 goal on ours in wall mode where `goal`), and ours ÷ offcputime round by round.
pub(super) fn throughput_rows(md: &mut String, t: &Throughput, unit: &str, goal: bool) {
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
