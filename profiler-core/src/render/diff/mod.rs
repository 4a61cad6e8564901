//! Render a diff: what moved between two captures → its report (this module: the model the
//! writers format, the JSON writer and the figures' words) written as terminal text
//! (`text.rs`), Markdown (`--report x.md`, `markdown.rs`), JSON (`--report x.json`, schema:
//! docs/diff.schema.json) or one HTML page with both differential flame graphs (`--report
//! x.html`, `html.rs`). The graphs are `svg::write_differential`.

mod html;
mod markdown;
mod text;

pub use html::{DiffHtmlInput, write_html};
pub use markdown::write_markdown;
pub use text::write_text;

use std::io::{self, Write};

use serde::Serialize;

use crate::diff::{Change, Diff, FunctionDelta, LatencyChange, Side, SiteDelta, StateRow};

/// Version of the JSON layout (docs/diff.schema.json).
pub const DIFF_SCHEMA_VERSION: u32 = 1;

/// What the graphs count.
pub const GRAPH_UNIT: &str = "µs/s";

#[derive(Debug, Serialize)]
pub struct DiffReport<'a> {
    pub schema_version: u32,
    pub mode: &'static str,
    /// What every `ms_per_s` figure is.
    pub unit: &'static str,
    pub before: &'a Side,
    pub after: &'a Side,
    pub states: &'a [StateRow],
    /// The on-CPU functions whose self time moved most, largest change first.
    pub functions: &'a [FunctionDelta],
    /// The blocking sites whose blocked time moved most, largest change first.
    pub sites: &'a [SiteDelta],
    pub percentile_method: &'static str,
}

/// The report of a diff, its tables cut to the `top` rows that moved most.
pub fn report(diff: &Diff, top: usize) -> DiffReport<'_> {
    DiffReport {
        schema_version: DIFF_SCHEMA_VERSION,
        mode: diff.mode.name(),
        unit: "milliseconds of thread time per second of capture (all threads together)",
        before: &diff.before,
        after: &diff.after,
        states: &diff.states,
        functions: &diff.functions[..diff.functions.len().min(top)],
        sites: &diff.sites[..diff.sites.len().min(top)],
        percentile_method: crate::render::report::PERCENTILE_METHOD,
    }
}

pub fn write_json(r: &DiffReport<'_>, out: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, r).map_err(io::Error::other)?;
    writeln!(out)
}

/// `workload (PID 12), 10.00 s`
fn side_words(s: &Side) -> String {
    let what = if s.selection.is_empty() {
        format!("{} (PID {})", s.target, s.pid)
    } else {
        s.selection.clone()
    };
    format!("{what}, {:.2} s", s.duration_s)
}

/// A rate in ms/s with as many decimals as it needs.
fn rate(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn signed(v: f64) -> String {
    let r = rate(v);
    if v > 0.0 { format!("+{r}") } else { r }
}

fn latency(l: &LatencyChange) -> String {
    let p = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    format!("{} → {} ms", p(l.before), p(l.after))
}

fn waits(c: &Change) -> String {
    format!("{} → {}/s", rate(c.before), rate(c.after))
}

/// A change in ms/s in words, as every table shows it: before, after, the signed change.
fn change_words(c: &Change) -> [String; 3] {
    [rate(c.before), rate(c.after), signed(c.change)]
}

/// A site's waits in words, as every table shows them: waits/s, p50 and p99 before → after.
fn wait_words(s: &SiteDelta) -> [String; 3] {
    [
        waits(&s.waits_per_s),
        latency(&s.p50_ms),
        latency(&s.p99_ms),
    ]
}

/// A function's shares of on-CPU time in code and its total time, before → after.
fn share_words(f: &FunctionDelta) -> [String; 3] {
    let t = &f.total_ms_per_s;
    [
        format!("{:.1} % → {:.1} %", f.self_pct.before, f.self_pct.after),
        format!("{} → {}", rate(t.before), rate(t.after)),
        format!("{:.1} % → {:.1} %", f.total_pct.before, f.total_pct.after),
    ]
}
