//! A diff as Markdown (`--report x.md`), ready to paste.

use std::io::{self, Write};

use super::{DiffReport, change_words, share_words, side_words, wait_words};

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
        let [before, after, change] = change_words(&s.ms_per_s);
        writeln!(out, "| {} | {before} | {after} | {change} |", s.state)?;
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
            let [before, after, change] = change_words(&f.self_ms_per_s);
            let [self_share, total, total_share] = share_words(f);
            writeln!(
                out,
                "| `{}` | {before} | {after} | {change} | {self_share} | {total} | {total_share} |",
                f.function,
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
            let [before, after, change] = change_words(&s.ms_per_s);
            let [waits, p50, p99] = wait_words(s);
            writeln!(
                out,
                "| {} | `{}` | {before} | {after} | {change} | {waits} | {p50} | {p99} |",
                s.state, s.site,
            )?;
        }
    }
    Ok(())
}
