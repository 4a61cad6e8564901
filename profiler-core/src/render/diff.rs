//! Render a diff: what moved between two captures → terminal text, Markdown (`--report x.md`)
//! or JSON (`--report x.json`, schema: docs/diff.schema.json). The differential flame graphs
//! are `svg::write_differential`.

use std::io::{self, Write};

use serde::Serialize;

use crate::diff::{Change, Diff, FunctionRow, LatencyChange, Side, SiteRow, StateRow};

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
    pub functions: &'a [FunctionRow],
    /// The blocking sites whose blocked time moved most, largest change first.
    pub sites: &'a [SiteRow],
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
        percentile_method: super::report::PERCENTILE_METHOD,
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

/// The end-of-run text on the terminal.
pub fn write_text(r: &DiffReport<'_>, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "profiler: {} mode, per second of capture: before {}; after {}",
        r.mode,
        side_words(r.before),
        side_words(r.after)
    )?;
    writeln!(out, "  thread time (ms/s)     before      after     change")?;
    for s in r.states {
        let c = &s.ms_per_s;
        writeln!(
            out,
            "  {:<18} {:>10} {:>10} {:>10}",
            s.state,
            rate(c.before),
            rate(c.after),
            signed(c.change)
        )?;
    }
    if !r.functions.is_empty() {
        writeln!(
            out,
            "  on-CPU functions that moved most (self ms/s before → after, change; self share of on-CPU time in code)"
        )?;
        for f in r.functions {
            let c = &f.self_ms_per_s;
            writeln!(
                out,
                "    {:<44} {:>8} → {:<8} {:>9}   {:>5.1} % → {:.1} %",
                f.function,
                rate(c.before),
                rate(c.after),
                signed(c.change),
                f.self_pct.before,
                f.self_pct.after
            )?;
        }
    }
    if !r.sites.is_empty() {
        writeln!(
            out,
            "  blocking sites that moved most (ms/s before → after, change; waits/s; p50; p99)"
        )?;
        for s in r.sites {
            let c = &s.ms_per_s;
            writeln!(
                out,
                "    {:<5} {:<38} {:>8} → {:<8} {:>9}   {}   p50 {}   p99 {}",
                s.state,
                s.site,
                rate(c.before),
                rate(c.after),
                signed(c.change),
                waits(&s.waits_per_s),
                latency(&s.p50_ms),
                latency(&s.p99_ms)
            )?;
        }
    }
    Ok(())
}

/// Markdown, ready to paste.
pub fn write_markdown(r: &DiffReport<'_>, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "# {} → {}: what moved\n",
        r.before.target, r.after.target
    )?;
    writeln!(out, "| | before | after |\n|---|---|---|")?;
    writeln!(
        out,
        "| capture | {} | {} |",
        side_words(r.before),
        side_words(r.after)
    )?;
    writeln!(
        out,
        "| threads | {} | {} |",
        r.before.threads, r.after.threads
    )?;
    writeln!(
        out,
        "| lost | {} | {} |",
        r.before.lost_total, r.after.lost_total
    )?;
    writeln!(
        out,
        "\nMode {}. Every figure is per second of its own capture: ms/s is milliseconds of \
         thread time per second (all threads together), waits/s finished waits per second.\n",
        r.mode
    )?;
    writeln!(out, "## Thread time\n")?;
    writeln!(
        out,
        "| state | before (ms/s) | after (ms/s) | change |\n|---|---:|---:|---:|"
    )?;
    for s in r.states {
        let c = &s.ms_per_s;
        writeln!(
            out,
            "| {} | {} | {} | {} |",
            s.state,
            rate(c.before),
            rate(c.after),
            signed(c.change)
        )?;
    }
    md_functions(r, out)?;
    md_sites(r, out)?;
    writeln!(out, "\n_Percentiles: {}._", r.percentile_method)?;
    Ok(())
}

fn md_functions(r: &DiffReport<'_>, out: &mut impl Write) -> io::Result<()> {
    if !r.functions.is_empty() {
        writeln!(out, "\n## On-CPU functions that moved most\n")?;
        writeln!(
            out,
            "| function | self before (ms/s) | self after (ms/s) | change | self share | total (ms/s) | total share |"
        )?;
        writeln!(out, "|---|---:|---:|---:|---:|---:|---:|")?;
        for f in r.functions {
            let (c, t) = (&f.self_ms_per_s, &f.total_ms_per_s);
            writeln!(
                out,
                "| `{}` | {} | {} | {} | {:.1} % → {:.1} % | {} → {} | {:.1} % → {:.1} % |",
                f.function,
                rate(c.before),
                rate(c.after),
                signed(c.change),
                f.self_pct.before,
                f.self_pct.after,
                rate(t.before),
                rate(t.after),
                f.total_pct.before,
                f.total_pct.after
            )?;
        }
        writeln!(
            out,
            "\nShares are of the on-CPU time in code (time charged before a switch-in, the \
             profiler's own programs and time between samples left out); total counts what the \
             function called, kernel frames included."
        )?;
    }
    Ok(())
}

fn md_sites(r: &DiffReport<'_>, out: &mut impl Write) -> io::Result<()> {
    if !r.sites.is_empty() {
        writeln!(out, "\n## Blocking sites that moved most\n")?;
        writeln!(
            out,
            "| state | site | before (ms/s) | after (ms/s) | change | waits/s | p50 | p99 |"
        )?;
        writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|")?;
        for s in r.sites {
            let c = &s.ms_per_s;
            writeln!(
                out,
                "| {} | `{}` | {} | {} | {} | {} | {} | {} |",
                s.state,
                s.site,
                rate(c.before),
                rate(c.after),
                signed(c.change),
                waits(&s.waits_per_s),
                latency(&s.p50_ms),
                latency(&s.p99_ms)
            )?;
        }
    }
    Ok(())
}
