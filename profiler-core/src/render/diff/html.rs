//! A diff as one HTML page (`--report x.html`): the two captures, thread time per state, the
//! functions and blocking sites that moved most, and both differential flame graphs, each in
//! a frame of its own. Self-contained like the report's page (render/html.rs, whose head,
//! style and frames it shares): it loads nothing. The figures are the diff report's; this
//! only draws them.

use std::io::{self, Write};

use super::{DiffReport, change_words, share_words, side_words, signed, wait_words};
use crate::{
    diff::Change,
    render::html::{esc, write_frame, write_head},
};

/// What the page shows besides the report.
pub struct DiffHtmlInput<'a> {
    pub report: &'a DiffReport<'a>,
    /// The differential flame graphs, drawn on the after capture and on the before one.
    pub after_svg: &'a str,
    pub before_svg: &'a str,
}

/// Red for what grew, blue for what shrank: the graphs' colours.
const GREW: &str = "rgb(200,40,40)";
const SHRANK: &str = "rgb(40,90,200)";

pub fn write_html(input: &DiffHtmlInput<'_>, out: &mut impl Write) -> io::Result<()> {
    let r = input.report;
    let title = format!("{} → {}: what moved", r.before.target, r.after.target);
    write_head(&title, out)?;
    writeln!(out, "<h1>{}</h1>", esc(&title))?;
    writeln!(
        out,
        "<p class=\"capture\">Mode {}. Every figure is per second of its own capture: ms/s is \
         milliseconds of thread time per second (all threads together), waits/s finished \
         waits per second.</p>",
        esc(r.mode)
    )?;
    captures(r, out)?;
    states(r, out)?;
    functions(r, out)?;
    sites(r, out)?;
    graphs(input, out)?;
    writeln!(
        out,
        "<footer>Percentiles: {}.</footer>",
        esc(r.percentile_method)
    )?;
    writeln!(out, "</body>\n</html>")
}

/// The two captures side by side.
fn captures(r: &DiffReport<'_>, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "<table id=\"captures\"><thead><tr><th></th><th>before</th><th>after</th></tr></thead><tbody>"
    )?;
    let rows = [
        ("capture", side_words(r.before), side_words(r.after)),
        (
            "threads",
            r.before.threads.to_string(),
            r.after.threads.to_string(),
        ),
        (
            "lost",
            r.before.lost_total.to_string(),
            r.after.lost_total.to_string(),
        ),
        ("kernel", r.before.kernel.clone(), r.after.kernel.clone()),
    ];
    for (what, before, after) in rows {
        writeln!(
            out,
            "<tr><th>{what}</th><td>{}</td><td>{}</td></tr>",
            esc(&before),
            esc(&after)
        )?;
    }
    writeln!(out, "</tbody></table>")
}

/// A change in ms/s, coloured as the graphs colour it.
fn change_cell(c: &Change) -> String {
    let colour = if c.change > 0.0 {
        GREW
    } else if c.change < 0.0 {
        SHRANK
    } else {
        "inherit"
    };
    format!(
        "<td class=\"n\" style=\"color:{colour}\">{}</td>",
        signed(c.change)
    )
}

/// Thread time per state, before and after.
fn states(r: &DiffReport<'_>, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "<h2>Thread time <span class=\"muted\">(ms/s)</span></h2>"
    )?;
    writeln!(
        out,
        "<table id=\"states\"><thead><tr><th>state</th><th class=\"n\">before</th><th class=\"n\">after</th><th class=\"n\">change</th></tr></thead><tbody>"
    )?;
    for s in r.states {
        let [before, after, _] = change_words(&s.ms_per_s);
        writeln!(
            out,
            "<tr><td>{}</td><td class=\"n\">{before}</td><td class=\"n\">{after}</td>{}</tr>",
            s.state,
            change_cell(&s.ms_per_s)
        )?;
    }
    writeln!(out, "</tbody></table>")
}

/// The on-CPU functions whose self time moved most.
fn functions(r: &DiffReport<'_>, out: &mut impl Write) -> io::Result<()> {
    if r.functions.is_empty() {
        return Ok(());
    }
    writeln!(out, "<h2>On-CPU functions that moved most</h2>")?;
    writeln!(
        out,
        "<table id=\"functions\"><thead><tr><th>function</th><th class=\"n\">self before (ms/s)</th><th class=\"n\">self after (ms/s)</th><th class=\"n\">change</th><th class=\"n\">self share</th><th class=\"n\">total (ms/s)</th><th class=\"n\">total share</th></tr></thead><tbody>"
    )?;
    for f in r.functions {
        let [before, after, _] = change_words(&f.self_ms_per_s);
        let [self_share, total, total_share] = share_words(f);
        writeln!(
            out,
            "<tr><td class=\"mono\">{}</td><td class=\"n\">{before}</td><td class=\"n\">{after}</td>{}<td class=\"n\">{self_share}</td><td class=\"n\">{total}</td><td class=\"n\">{total_share}</td></tr>",
            esc(&f.function),
            change_cell(&f.self_ms_per_s),
        )?;
    }
    writeln!(out, "</tbody></table>")?;
    writeln!(
        out,
        "<p class=\"muted\">Shares are of the on-CPU time in code (time charged before a \
         switch-in, the profiler's own programs and time between samples left out); total \
         counts what the function called, kernel frames included.</p>"
    )
}

/// The blocking sites whose blocked time moved most, each with its stack on a click.
fn sites(r: &DiffReport<'_>, out: &mut impl Write) -> io::Result<()> {
    if r.sites.is_empty() {
        return Ok(());
    }
    writeln!(out, "<h2>Blocking sites that moved most</h2>")?;
    writeln!(
        out,
        "<table id=\"sites\"><thead><tr><th>state</th><th>site</th><th class=\"n\">before (ms/s)</th><th class=\"n\">after (ms/s)</th><th class=\"n\">change</th><th class=\"n\">waits/s</th><th class=\"n\">p50</th><th class=\"n\">p99</th></tr></thead><tbody>"
    )?;
    for s in r.sites {
        let c = &s.ms_per_s;
        let stack: String = s
            .stack
            .iter()
            .map(|f| format!("<li>{}</li>", esc(f)))
            .collect();
        let [before, after, _] = change_words(c);
        let [waits, p50, p99] = wait_words(s);
        writeln!(
            out,
            "<tr><td>{}</td><td><code>{}</code><details><summary>stack (root → leaf)</summary><ol class=\"stack\">{stack}</ol></details></td><td class=\"n\">{before}</td><td class=\"n\">{after}</td>{}<td class=\"n\">{waits}</td><td class=\"n\">{p50}</td><td class=\"n\">{p99}</td></tr>",
            s.state,
            esc(&s.site),
            change_cell(c),
        )?;
    }
    writeln!(out, "</tbody></table>")
}

/// Both differential flame graphs.
fn graphs(input: &DiffHtmlInput<'_>, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "<h2>Differential flame graph, drawn on the after capture</h2>"
    )?;
    writeln!(
        out,
        "<p class=\"muted\">Widths are the after capture's; red grew, blue shrank, the deeper \
         the colour the larger the change. Click a frame to zoom, <i>Search</i> (top right) \
         or Ctrl-F inside the graph to highlight functions.</p>"
    )?;
    write_frame(
        "diff-after",
        "differential flame graph, after",
        input.after_svg,
        out,
    )?;
    writeln!(out, "<h2>Drawn on the before capture</h2>")?;
    writeln!(
        out,
        "<p class=\"muted\">Widths are the before capture's: what shrank or disappeared \
         stays wide enough to see.</p>"
    )?;
    write_frame(
        "diff-before",
        "differential flame graph, before",
        input.before_svg,
        out,
    )
}
