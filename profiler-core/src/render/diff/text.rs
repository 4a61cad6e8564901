//! A diff on the terminal: thread time per state, the functions and sites that moved most.

use std::io::{self, Write};

use super::{DiffReport, change_words, side_words, wait_words};

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
        let [before, after, change] = change_words(&s.ms_per_s);
        writeln!(
            out,
            "  {:<18} {before:>10} {after:>10} {change:>10}",
            s.state
        )?;
    }
    if !r.functions.is_empty() {
        writeln!(
            out,
            "  on-CPU functions that moved most (self ms/s before → after, change; self share of on-CPU time in code)"
        )?;
        for f in r.functions {
            let [before, after, change] = change_words(&f.self_ms_per_s);
            writeln!(
                out,
                "    {:<44} {before:>8} → {after:<8} {change:>9}   {:>5.1} % → {:.1} %",
                f.function, f.self_pct.before, f.self_pct.after
            )?;
        }
    }
    if !r.sites.is_empty() {
        writeln!(
            out,
            "  blocking sites that moved most (ms/s before → after, change; waits/s; p50; p99)"
        )?;
        for s in r.sites {
            let [before, after, change] = change_words(&s.ms_per_s);
            let [waits, p50, p99] = wait_words(s);
            writeln!(
                out,
                "    {:<5} {:<38} {before:>8} → {after:<8} {change:>9}   {waits}   p50 {p50}   p99 {p99}",
                s.state, s.site,
            )?;
        }
    }
    Ok(())
}
