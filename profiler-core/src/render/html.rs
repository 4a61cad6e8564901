//! HTML report (`--report x.html`): the report model and the flame graph SVG → one
//! self-contained page that loads nothing (no network, no file beside it) and prints to PDF.
//! The figures are the report's, as the Markdown and JSON show them; this module only draws:
//! state bars per process and thread, per blocking site its latency histogram (inline SVG, from
//! the in-kernel buckets, p50/p99/max marked) and wakers, the run-queue delay, the losses.
//!
//! The flame graph is inferno's SVG unchanged, in an `<iframe srcdoc>`: its script listens on
//! the whole window (clicks, Ctrl-F) and takes the document's first `<svg>` as the graph, so it
//! gets a document of its own, where its search and zoom work as in the SVG file. The page
//! carries that document packed (`packed.rs`), as it does the timeline's events: a JVM's graph
//! is megabytes of markup that gzip shrinks ten times.

pub(crate) use super::escape::esc;
use std::io::{self, Write};

use super::{
    packed,
    report::{Latency, Report, ShortLivedRow, SiteRow, ThreadRow, ThreadTableRow, WakerRow},
};

/// What the page shows besides the report.
pub struct HtmlInput<'a> {
    pub report: &'a Report,
    /// The flame graph's title and subtitle (capture length, rate, time per state, losses).
    pub title: &'a str,
    pub subtitle: &'a str,
    /// inferno's SVG, as written to the `.svg` file.
    pub flame_graph: &'a str,
    /// The timeline section (`timeline_html::section`), when the capture has a timeline.
    pub timeline: Option<&'a str>,
}

/// Threads drawn with a bar each; the JSON report lists them all.
const SHOWN_THREADS: usize = 200;

/// State colours: the flame graph's (`svg.rs`) for the off-CPU states, a warm one for the CPU.
const STATES: [(&str, &str); 6] = [
    ("running", "rgb(230,120,40)"),
    ("runnable", "rgb(220,60,60)"),
    ("sleep", "rgb(70,130,200)"),
    ("io", "rgb(140,80,200)"),
    ("other", "rgb(140,140,140)"),
    ("profiler", "rgb(40,40,40)"),
];

const CSS: &str = r#"
:root { --fg: #1d1d1f; --muted: #5f6368; --line: #d9d9de; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       margin: 0 auto; padding: 1.5em 2em 3em; max-width: 1280px; }
h1 { font-size: 1.5em; margin: 0 0 .2em; }
h2 { font-size: 1.2em; margin: 1.8em 0 .5em; border-bottom: 1px solid var(--line); padding-bottom: .2em; }
h3 { font-size: 1.05em; margin: 0 0 .3em; }
code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: .92em; }
.capture { color: var(--muted); margin: 0 0 1em; }
.verdict { background: #fff7e0; border-left: 4px solid rgb(230,120,40); padding: .6em 1em; font-size: 1.08em; }
table { border-collapse: collapse; margin: .4em 0; }
th, td { padding: .2em .6em; text-align: left; vertical-align: top; }
thead th { border-bottom: 1px solid var(--line); font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: #f6f6f8; }
.bar { width: 320px; min-width: 160px; }
.bar svg { display: block; width: 100%; height: 14px; }
.legend span { display: inline-block; margin-right: 1.2em; }
.legend i { display: inline-block; width: .9em; height: .9em; margin-right: .3em; vertical-align: -.1em; }
.state { display: inline-block; padding: 0 .4em; border-radius: 3px; color: #fff; font-size: .85em; }
.site { border: 1px solid var(--line); border-radius: 6px; padding: .8em 1em; margin: .8em 0; }
.site p { margin: .3em 0; }
.chart { display: block; width: 100%; max-width: 760px; height: auto; }
.chart text { font: 11px system-ui, sans-serif; fill: var(--muted); }
.chart .mark text { fill: var(--fg); }
.muted { color: var(--muted); }
.lost { color: #b00020; font-weight: 600; }
iframe.flamegraph { width: 100%; border: 1px solid var(--line); display: block; }
ol.stack { margin: .3em 0; padding-left: 2.2em; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .85em; }
details { margin: .3em 0; }
summary { cursor: pointer; color: var(--muted); }
footer { margin-top: 2em; color: var(--muted); font-size: .9em; }
* { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
@media print {
  body { padding: 0; max-width: none; font-size: 11px; }
  h2 { break-after: avoid; }
  .site, tr, .chart, iframe.flamegraph { break-inside: avoid; }
  summary { display: none; }
  a { color: inherit; text-decoration: none; }
}
"#;

/// Opens every `<details>` before printing, so stacks are on paper too.
const PRINT_SCRIPT: &str = "window.addEventListener('beforeprint', function () {\n  \
     document.querySelectorAll('details').forEach(function (d) { d.open = true; });\n});";

/// Inside the flame graph's frame, before inferno's script. The graph keeps its search and
/// zoom in its page's URL (`history.replaceState`); a srcdoc frame's URL (`about:srcdoc`) may
/// not be changed so, and the refusal, thrown, would stop the search before it shows what it
/// matched: here search and zoom work without being kept in a URL.
const FRAME_SCRIPT: &str = "(function () {\n  var replace = history.replaceState.bind(history);\n  \
     history.replaceState = function (s, t, u) { try { replace(s, t, u); } catch (e) {} };\n})();";

/// The page up to its body: the style, the print script, the title. Elements are closed
/// XML-style (`<meta …/>`), which HTML reads alike, so the diff's page (which shares this)
/// can be checked by an XML parser.
pub(crate) fn write_head(title: &str, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>")?;
    writeln!(out, "<meta charset=\"utf-8\"/>")?;
    writeln!(
        out,
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>"
    )?;
    writeln!(out, "<title>{}</title>", esc(title))?;
    writeln!(out, "<style>{CSS}</style>")?;
    writeln!(out, "<script>{PRINT_SCRIPT}</script>")?;
    writeln!(out, "</head>\n<body>")
}

pub fn write_html(input: &HtmlInput<'_>, out: &mut impl Write) -> io::Result<()> {
    let r = input.report;
    write_head(input.title, out)?;
    writeln!(out, "<script>{}</script>", packed::UNPACK_SCRIPT)?;
    writeln!(out, "<h1>{}</h1>", esc(input.title))?;
    writeln!(out, "<p class=\"capture\">{}</p>", esc(input.subtitle))?;
    writeln!(
        out,
        "<p class=\"verdict\" id=\"verdict\">{}</p>",
        esc(&r.verdict)
    )?;
    capture_table(r, out)?;
    losses(r, out)?;

    processes(r, out)?;
    threads(r, out)?;
    for n in &r.notes {
        writeln!(out, "<p class=\"muted\">Note: {}</p>", esc(&n.to_string()))?;
    }

    flame_graph(input, out)?;
    if let Some(section) = input.timeline {
        out.write_all(section.as_bytes())?;
    }

    if !r.top_blocking_sites.is_empty() {
        writeln!(out, "<h2>Top blocking sites</h2>")?;
        for s in &r.top_blocking_sites {
            site(s, r.capture.wakers_recorded, out)?;
        }
    }
    if let Some(graph) = super::waitgraph::wait_graph(&r.chains) {
        writeln!(out, "<h2>Wait chains across processes</h2>")?;
        writeln!(out, "<div class=\"waitgraph\">{graph}</div>")?;
        for c in &r.chains {
            writeln!(out, "<p>{}.</p>", esc(&c.sentence()))?;
        }
    }
    goroutines(r, out)?;
    functions(r, out)?;
    run_queue(r, out)?;
    writeln!(
        out,
        "<footer>Percentiles: {}. Histogram bars: each is one in-kernel bucket, its area \
         proportional to the waits in it (duration on a log scale).</footer>",
        esc(r.percentile_method)
    )?;
    writeln!(out, "<script>{}</script>", packed::READY_SCRIPT)?;
    writeln!(out, "</body>\n</html>")
}

/// Per process, its state bar, when there are several.
fn processes(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if r.processes.len() > 1 {
        writeln!(
            out,
            "<h2>Where each process's time went <span class=\"muted\">(% of its threads' time)</span></h2>"
        )?;
        legend(out)?;
        writeln!(
            out,
            "<table id=\"processes\"><thead><tr><th>process</th><th>threads</th><th></th>{}</tr></thead><tbody>",
            state_headers()
        )?;
        for p in &r.processes {
            let shares = p.shares.columns();
            writeln!(
                out,
                "<tr><td>{} <span class=\"muted\">(PID {})</span></td><td class=\"n\">{}</td><td class=\"bar\">{}</td>{}</tr>",
                esc(&p.name),
                p.pid,
                p.threads,
                state_bar(&shares),
                state_cells(&shares)
            )?;
        }
        writeln!(out, "</tbody></table>")?;
    }

    Ok(())
}

/// Per thread, its state bar and run-queue waits.
fn threads(r: &Report, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "<h2>Where each thread's time went <span class=\"muted\">(% of the capture)</span></h2>"
    )?;
    legend(out)?;
    let many = r.processes.len() > 1;
    writeln!(
        out,
        "<table id=\"threads\"><thead><tr><th>thread</th>{}<th></th>{}<th class=\"n\">run-queue waits: mean / max</th></tr></thead><tbody>",
        if many { "<th>process</th>" } else { "" },
        state_headers()
    )?;
    for row in r.thread_table.iter().take(SHOWN_THREADS) {
        match *row {
            ThreadTableRow::Thread(i) => thread_row(&r.threads[i], many, out)?,
            ThreadTableRow::ShortLived(i) => short_lived_row(&r.short_lived[i], many, out)?,
        }
    }
    writeln!(out, "</tbody></table>")?;
    if r.thread_table.len() > SHOWN_THREADS {
        writeln!(
            out,
            "<p class=\"muted\">… and {} more rows (every thread is in the JSON report).</p>",
            r.thread_table.len() - SHOWN_THREADS
        )?;
    }
    writeln!(
        out,
        "<p class=\"muted\">Running is CPU time as the scheduler charges it (the thread's \
         schedstat), the profiler's own programs left out (<i>profiler</i>).</p>"
    )?;
    Ok(())
}

/// One row of the thread table.
fn thread_row(t: &ThreadRow, many: bool, out: &mut impl Write) -> io::Result<()> {
    let rq = t.run_queue_delay.as_ref().map_or("-".into(), |l| {
        format!("{} × {:.3} / {:.2} ms", l.count, l.mean_ms, l.max_ms)
    });
    let name = format!("{}-{}", esc(&t.name), t.tid);
    threads_row(&name, many.then_some(t.pid), &t.shares.columns(), &rq, out)
}

/// One row for a group's short-lived threads, summed.
fn short_lived_row(g: &ShortLivedRow, many: bool, out: &mut impl Write) -> io::Result<()> {
    let name = format!("{}: {}", esc(&g.group), g.lives());
    threads_row(&name, many.then_some(g.pid), &g.shares.columns(), "-", out)
}

/// A row of the thread table: its name (escaped), its process where the table has the
/// column, its states as a bar and as shares, its run-queue waits.
fn threads_row(
    name: &str,
    pid: Option<u32>,
    shares: &[f64; 6],
    run_queue: &str,
    out: &mut impl Write,
) -> io::Result<()> {
    let process = pid.map_or(String::new(), |pid| format!("<td class=\"n\">{pid}</td>"));
    writeln!(
        out,
        "<tr><td class=\"mono\">{name}</td>{process}<td class=\"bar\">{}</td>{}<td class=\"n\">{run_queue}</td></tr>",
        state_bar(shares),
        state_cells(shares)
    )
}

/// Goroutine groups of Go processes, a table of sites each.
fn goroutines(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if r.goroutines.is_empty() {
        return Ok(());
    }
    writeln!(out, "<h2>Goroutines</h2>")?;
    for g in &r.goroutines {
        writeln!(
            out,
            "<h3 class=\"mono\">{} <small>(PID {}{})</small></h3><p>On the CPU {:.3} s ({:.0} % \
             of their time with work); waits with work {:.3} s; idle waits {:.3} s.</p>",
            esc(&g.subject),
            g.pid,
            if g.idle { ", idle" } else { "" },
            g.on_cpu_s,
            g.on_cpu_pct,
            g.wait_s,
            g.idle_wait_s
        )?;
        writeln!(
            out,
            "<table class=\"goroutines\"><thead><tr><th>wait</th><th>for</th><th class=\"n\">share</th><th class=\"n\">time s</th><th class=\"n\">waits</th><th class=\"n\">p50</th><th class=\"n\">p99</th></tr></thead><tbody>"
        )?;
        for s in &g.sites {
            let [p50, _, p99, _] = super::report::words::latency_cells(&s.latency);
            writeln!(
                out,
                "<tr><td class=\"mono\" title=\"{}\">{}{}</td><td>{}</td><td class=\"n\">{:.1} %</td><td class=\"n\">{:.3}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                esc(&s.stack.join(" → ")),
                esc(&s.label),
                if s.idle { " (idle)" } else { "" },
                esc(s.waiting_for),
                s.share_pct,
                s.time_s,
                s.waits,
                esc(&p50),
                esc(&p99)
            )?;
        }
        writeln!(out, "</tbody></table>")?;
    }
    Ok(())
}

fn functions(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if !r.top_on_cpu_functions.is_empty() {
        writeln!(out, "<h2>Top on-CPU functions</h2>")?;
        writeln!(
            out,
            "<table id=\"functions\"><thead><tr><th>function</th><th class=\"n\">self</th><th class=\"n\">total</th><th class=\"n\">self s</th><th class=\"n\">total s</th></tr></thead><tbody>"
        )?;
        for f in &r.top_on_cpu_functions {
            writeln!(
                out,
                "<tr><td class=\"mono\">{}</td><td class=\"n\">{:.1} %</td><td class=\"n\">{:.1} %</td><td class=\"n\">{:.3}</td><td class=\"n\">{:.3}</td></tr>",
                esc(&f.function),
                f.self_pct,
                f.total_pct,
                f.self_s,
                f.total_s
            )?;
        }
        writeln!(out, "</tbody></table>")?;
    }
    Ok(())
}

fn capture_table(r: &Report, out: &mut impl Write) -> io::Result<()> {
    let c = &r.capture;
    writeln!(out, "<table id=\"capture\"><tbody>")?;
    let row = |out: &mut dyn Write, k: &str, v: String| -> io::Result<()> {
        writeln!(out, "<tr><th>{k}</th><td>{v}</td></tr>")
    };
    row(
        out,
        "target",
        format!(
            "{} (PID {}), {} threads{}",
            esc(&c.target),
            c.pid,
            c.threads,
            if r.processes.len() > 1 {
                format!(" in {} processes", r.processes.len())
            } else {
                String::new()
            }
        ),
    )?;
    row(out, "mode", esc(c.mode))?;
    row(
        out,
        "duration",
        format!(
            "{:.2} s{}",
            c.duration_s,
            c.ended_early
                .as_ref()
                .map_or(String::new(), |e| format!(" ({})", esc(e)))
        ),
    )?;
    if let Some(hz) = c.frequency_hz {
        row(out, "sampling", format!("{hz} Hz, {} samples", c.samples))?;
    }
    row(out, "kernel", esc(&c.kernel))?;
    if let Some(mib) = c.kernel_memory_mib() {
        row(out, "kernel memory", format!("{mib:.1} MiB of BPF maps"))?;
    }
    if let Some(m) = &r.machine {
        row(out, "machine", esc(&super::report::machine_text(m)))?;
    }
    if c.mode != "cpu" {
        row(
            out,
            "waits",
            format!(
                "{} finished, {} still open at the end, {} blocked since before the start",
                c.waits,
                c.open_waits_at_end,
                super::count(c.blocked_at_start, "thread")
            ),
        )?;
    }
    writeln!(out, "</tbody></table>")
}

fn losses(r: &Report, out: &mut impl Write) -> io::Result<()> {
    let c = &r.capture;
    writeln!(out, "<h2>Losses</h2>")?;
    if c.lost_total == 0 {
        writeln!(
            out,
            "<p id=\"losses\">Nothing was lost: every loss counter is 0.</p>"
        )?;
    } else {
        writeln!(
            out,
            "<p id=\"losses\" class=\"lost\">{} events lost; the figures above them are short by \
             as much.</p>",
            c.lost_total
        )?;
        writeln!(
            out,
            "<table><thead><tr><th>what</th><th class=\"n\">count</th><th>raise with</th></tr></thead><tbody>"
        )?;
        for l in &c.lost {
            writeln!(
                out,
                "<tr><td>{}</td><td class=\"n\">{}</td><td><code>{}</code></td></tr>",
                esc(l.what),
                l.count,
                l.raise_with.unwrap_or("")
            )?;
        }
        writeln!(out, "</tbody></table>")?;
    }
    writeln!(
        out,
        "<details><summary>every in-kernel counter</summary><table><tbody>"
    )?;
    for (name, v) in &c.counters {
        writeln!(
            out,
            "<tr><td class=\"mono\">{name}</td><td class=\"n\">{v}</td></tr>"
        )?;
    }
    writeln!(out, "</tbody></table></details>")
}

fn legend(out: &mut impl Write) -> io::Result<()> {
    write!(out, "<p class=\"legend\">")?;
    for (name, colour) in STATES {
        write!(
            out,
            "<span><i style=\"background:{colour}\"></i>{name}</span>"
        )?;
    }
    writeln!(out, "</p>")
}

fn state_headers() -> String {
    STATES
        .iter()
        .map(|(name, _)| format!("<th class=\"n\">{name}</th>"))
        .collect()
}

fn state_cells(shares: &[f64; 6]) -> String {
    shares
        .iter()
        .map(|v| format!("<td class=\"n\">{v:.1} %</td>"))
        .collect()
}

/// A stacked bar of the six shares (percent) as an inline SVG, each part titled.
fn state_bar(shares: &[f64; 6]) -> String {
    let mut svg = String::from(
        "<svg viewBox=\"0 0 100 10\" preserveAspectRatio=\"none\" role=\"img\"><rect width=\"100\" height=\"10\" fill=\"#eee\"/>",
    );
    let mut x = 0.0;
    for ((name, colour), &v) in STATES.iter().zip(shares) {
        if v <= 0.0 {
            continue;
        }
        let w = v.min(100.0 - x).max(0.0);
        svg.push_str(&format!(
            "<rect x=\"{x:.2}\" width=\"{w:.2}\" height=\"10\" fill=\"{colour}\"><title>{name} {v:.1} %</title></rect>"
        ));
        x += w;
    }
    svg.push_str("</svg>");
    svg
}

fn flame_graph(input: &HtmlInput<'_>, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "<h2>Flame graph</h2>")?;
    writeln!(
        out,
        "<p class=\"muted\">Click a frame to zoom, <i>Search</i> (top right) or Ctrl-F inside \
         the graph to highlight functions by regular expression.</p>"
    )?;
    write_packed_frame("flamegraph", "flame graph", input.flame_graph, out)
}

/// The document a flame graph's frame shows, and the frame's height: the SVG inside an HTML
/// document, from its root element on (no XML declaration or DTD), as wide as the frame
/// (inline, an SVG without a width would be 300 px wide).
fn frame_doc(svg: &str) -> (String, u32) {
    let svg = svg.find("<svg").map_or(svg, |i| &svg[i..]);
    let height = svg_height(svg).unwrap_or(600);
    let doc = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>html, body {{ margin: 0; overflow: hidden; }} svg {{ display: block; width: 100%; }}</style><script>{FRAME_SCRIPT}</script></head><body>{svg}</body></html>"
    );
    (doc, height + 2)
}

/// A flame graph SVG in a frame of its own (`<iframe srcdoc>`), where its script's search
/// and zoom work as in the SVG file and leave the page alone.
pub(crate) fn write_frame(
    id: &str,
    title: &str,
    svg: &str,
    out: &mut impl Write,
) -> io::Result<()> {
    let (doc, height) = frame_doc(svg);
    writeln!(
        out,
        "<iframe class=\"flamegraph\" id=\"{id}\" title=\"{title}\" style=\"height:{height}px\" srcdoc=\"{}\"></iframe>",
        esc(&doc)
    )
}

/// As [`write_frame`], the frame's document packed: the page's script unpacks it into the
/// frame's `srcdoc`, and the frame's load settles its part of `reportReady`.
fn write_packed_frame(id: &str, title: &str, svg: &str, out: &mut impl Write) -> io::Result<()> {
    let (doc, height) = frame_doc(svg);
    writeln!(
        out,
        "<iframe class=\"flamegraph\" id=\"{id}\" title=\"{title}\" style=\"height:{height}px\"></iframe>"
    )?;
    writeln!(
        out,
        "{}",
        packed::element(&format!("{id}-doc"), &packed::pack(doc.as_bytes())?)
    )?;
    writeln!(
        out,
        "<script>{}</script>",
        PACKED_FRAME_SCRIPT.replace("FRAME_ID", id)
    )
}

/// Fills a frame from its packed document (`FRAME_ID`: the frame's id). Where the browser
/// cannot unpack it, the frame says why.
const PACKED_FRAME_SCRIPT: &str = r#"(function () {
  var frame = document.getElementById('FRAME_ID');
  window.reportParts.push(window.unpack('FRAME_ID-doc').then(function (bytes) {
    return new Promise(function (loaded) {
      frame.addEventListener('load', function () { loaded(); }, { once: true });
      frame.srcdoc = new TextDecoder().decode(bytes);
    });
  }).catch(function (e) {
    frame.srcdoc = '<p style="font: 14px sans-serif">The flame graph cannot be shown: ' +
      String(e.message).replace(/&/g, '&amp;').replace(/</g, '&lt;') + '</p>';
    throw e;
  }));
})();"#;

/// The `height` of the root `<svg>` element.
fn svg_height(svg: &str) -> Option<u32> {
    let tag = &svg[..svg.find('>')?];
    let at = tag.find(" height=\"")? + " height=\"".len();
    let end = tag[at..].find('"')? + at;
    tag[at..end].parse().ok()
}

fn state_colour(state: &str) -> &'static str {
    STATES
        .iter()
        .find(|(n, _)| *n == state)
        .map_or("rgb(140,140,140)", |(_, c)| c)
}

fn site(s: &SiteRow, wakers_recorded: bool, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "<section class=\"site\" id=\"site-{}\">", s.rank)?;
    writeln!(
        out,
        "<h3>{}. <span class=\"state\" style=\"background:{}\">{}</span> <code>{}</code>{}</h3>",
        s.rank,
        state_colour(s.state),
        s.state,
        esc(&s.site),
        if s.stacks > 1 {
            format!(" <span class=\"muted\">({} stacks)</span>", s.stacks)
        } else {
            String::new()
        }
    )?;
    writeln!(
        out,
        "<p>{:.2} s, {:.1} % of all thread time, {} waits; then {:.3} s runnable after the \
         wakeups. Threads ({}): {}{}</p>",
        s.total_s,
        s.share_pct,
        s.waits,
        s.runnable_after_wakeup_s,
        s.thread_count,
        esc(&s.threads.join(", ")),
        if s.thread_count > s.threads.len() {
            ", …"
        } else {
            ""
        }
    )?;
    if !s.resources.is_empty() {
        writeln!(
            out,
            "<p class=\"resources\">On: {}</p>",
            esc(&super::report::resources_text(&s.resources))
        )?;
    }
    if let Some(l) = &s.latency {
        latency_table(l, out)?;
        if let Some(chart) = latency_chart(l) {
            writeln!(out, "{chart}")?;
        }
    }
    // Without wakers (`--no-wakers`) the report's note says so once, not every site.
    if wakers_recorded {
        wakers(&s.wakers, out)?;
    }
    if let Some(w) = &s.when {
        writeln!(out, "<p class=\"when\">When: {}</p>", esc(&w.summary))?;
    }
    writeln!(
        out,
        "<details><summary>stack (root → leaf)</summary><ol class=\"stack\">"
    )?;
    for f in &s.stack {
        writeln!(out, "<li>{}</li>", esc(f))?;
    }
    writeln!(out, "</ol></details>\n</section>")
}

fn wakers(wakers: &[WakerRow], out: &mut impl Write) -> io::Result<()> {
    if wakers.is_empty() {
        return writeln!(
            out,
            "<p class=\"muted\">No wakeup was seen for this site.</p>"
        );
    }
    writeln!(out, "<p>Woken by:</p><ul class=\"wakers\">")?;
    for w in wakers {
        let who = if w.tid == 0 {
            esc(&w.name)
        } else {
            format!(
                "{}-{} <span class=\"muted\">(PID {})</span>",
                esc(&w.name),
                w.tid,
                w.pid
            )
        };
        write!(
            out,
            "<li>{who}: {} wakeups ({:.0} %)",
            w.wakeups, w.wakeups_pct
        )?;
        if !w.stack.is_empty() {
            write!(
                out,
                "<details><summary>waker's stack (root → leaf)</summary><ol class=\"stack\">"
            )?;
            for f in &w.stack {
                write!(out, "<li>{}</li>", esc(f))?;
            }
            write!(out, "</ol></details>")?;
        }
        writeln!(out, "</li>")?;
    }
    writeln!(out, "</ul>")
}

fn ms_text(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3} ms"))
}

fn latency_table(l: &Latency, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "<table class=\"latency\"><thead><tr><th class=\"n\">waits</th><th class=\"n\">min</th><th class=\"n\">mean</th><th class=\"n\">p50</th><th class=\"n\">p90</th><th class=\"n\">p99</th><th class=\"n\">max</th></tr></thead><tbody><tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr></tbody></table>",
        l.count,
        ms_text(Some(l.min_ms)),
        ms_text(Some(l.mean_ms)),
        ms_text(l.p50_ms),
        ms_text(l.p90_ms),
        ms_text(l.p99_ms),
        ms_text(Some(l.max_ms)),
    )
}

/// A duration for an axis or a marker: `10 µs`, `2.5 ms`, `1 s`.
fn duration_label(ns: f64) -> String {
    let (v, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    let text = if v >= 100.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    format!("{text} {unit}")
}

/// The latency chart's size and margins.
const CHART_W: f64 = 760.0;
const CHART_H: f64 = 190.0;
const CHART_LEFT: f64 = 12.0;
const CHART_RIGHT: f64 = 12.0;
const CHART_TOP: f64 = 52.0;
const CHART_BOTTOM: f64 = 24.0;

/// A bucket's start on a log axis: bucket 0 starts at 0 ns, drawn from an octave below its
/// end.
fn bucket_start(from: u64, to: u64) -> f64 {
    if from == 0 {
        to as f64 / 2.0
    } else {
        from as f64
    }
}

/// Waits per decade of a bucket: a bar's height, so the buckets' unequal widths do not
/// shape the curve.
fn bucket_density(from: u64, to: u64, count: u64) -> f64 {
    let from = bucket_start(from, to);
    count as f64 / ((to as f64).max(from * 1.01) / from).log10()
}

/// The chart's duration axis: log10 of ns from `lo` to `hi`.
struct LogAxis {
    lo: f64,
    hi: f64,
}

impl LogAxis {
    /// At least two decades, the data in the middle.
    fn around(data_lo: f64, data_hi: f64) -> Self {
        let (mut lo, mut hi) = (data_lo.log10() - 0.3, data_hi.log10() + 0.3);
        if hi - lo < 2.0 {
            let grow = (2.0 - (hi - lo)) / 2.0;
            lo -= grow;
            hi += grow;
        }
        Self { lo, hi }
    }

    fn x(&self, ns: f64) -> f64 {
        let plot_w = CHART_W - CHART_LEFT - CHART_RIGHT;
        CHART_LEFT + (ns.max(1.0).log10() - self.lo) / (self.hi - self.lo) * plot_w
    }
}

/// The latency histogram as an inline SVG: one bar per in-kernel bucket on a log duration
/// axis, its area proportional to its waits (height = waits ÷ the bucket's log width), p50,
/// p99 and max as vertical lines. None without a histogram.
fn latency_chart(l: &Latency) -> Option<String> {
    let (first, last) = (l.histogram.first()?, l.histogram.last()?);
    let axis = LogAxis::around(
        bucket_start(first.from_ns, first.to_ns),
        (last.to_ns as f64).max(bucket_start(last.from_ns, last.to_ns) * 1.01),
    );
    let (w, h, left, right, bottom) = (CHART_W, CHART_H, CHART_LEFT, CHART_RIGHT, CHART_BOTTOM);
    let mut svg = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"latency histogram\">"
    );
    svg.push_str(&format!(
        "<line x1=\"{left}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#999\"/>",
        w - right,
        h - bottom,
        h - bottom
    ));
    chart_ticks(&axis, &mut svg);
    chart_bars(l, &axis, &mut svg);
    chart_marks(l, &axis, &mut svg);
    svg.push_str("</svg>");
    Some(svg)
}

/// A tick and a label at each decade of the axis.
fn chart_ticks(axis: &LogAxis, svg: &mut String) {
    let mut decade = axis.lo.ceil() as i32;
    while f64::from(decade) <= axis.hi {
        let ns = 10f64.powi(decade);
        let tx = axis.x(ns);
        svg.push_str(&format!(
            "<line x1=\"{tx:.1}\" x2=\"{tx:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            CHART_TOP - 4.0,
            CHART_H - CHART_BOTTOM + 4.0,
            CHART_H - 8.0,
            duration_label(ns)
        ));
        decade += 1;
    }
}

/// One bar per bucket, the densest as tall as the plot.
fn chart_bars(l: &Latency, axis: &LogAxis, svg: &mut String) {
    let plot_h = CHART_H - CHART_TOP - CHART_BOTTOM;
    let top = l
        .histogram
        .iter()
        .map(|b| bucket_density(b.from_ns, b.to_ns, b.count))
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    for b in &l.histogram {
        let (x0, x1) = (
            axis.x(bucket_start(b.from_ns, b.to_ns)),
            axis.x(b.to_ns as f64),
        );
        let h = (bucket_density(b.from_ns, b.to_ns, b.count) / top * plot_h).max(1.0);
        svg.push_str(&format!(
            "<rect x=\"{x0:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{h:.2}\" fill=\"rgb(70,130,200)\"><title>{} – {}: {} waits</title></rect>",
            CHART_H - CHART_BOTTOM - h,
            (x1 - x0).max(1.0),
            duration_label(b.from_ns as f64),
            duration_label(b.to_ns as f64),
            b.count
        ));
    }
}

/// p50, p99 and max as vertical lines, each label on its own line so that close ones stay
/// readable.
fn chart_marks(l: &Latency, axis: &LogAxis, svg: &mut String) {
    let marks = [
        ("p50", l.p50_ms, "rgb(30,30,30)", "4 3"),
        ("p99", l.p99_ms, "rgb(200,40,40)", "4 3"),
        ("max", Some(l.max_ms), "rgb(200,40,40)", "none"),
    ];
    for (row, (name, v, colour, dash)) in marks.into_iter().enumerate() {
        let Some(v) = v else { continue };
        let mx = axis.x(v * 1e6);
        let ty = 14.0 + 13.0 * row as f64;
        let anchor = if mx > CHART_W * 0.75 { "end" } else { "start" };
        let tx = if anchor == "end" { mx - 3.0 } else { mx + 3.0 };
        svg.push_str(&format!(
            "<g class=\"mark\"><line x1=\"{mx:.1}\" x2=\"{mx:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-dasharray=\"{dash}\"/><text x=\"{tx:.1}\" y=\"{ty:.1}\" text-anchor=\"{anchor}\">{name} {}</text></g>",
            ty - 10.0,
            CHART_H - CHART_BOTTOM,
            duration_label(v * 1e6)
        ));
    }
}

fn run_queue(r: &Report, out: &mut impl Write) -> io::Result<()> {
    let q = &r.run_queue;
    if q.preempted.is_none() && q.after_wakeup.is_none() {
        return Ok(());
    }
    writeln!(
        out,
        "<h2>Run-queue delay <span class=\"muted\">(runnable, waiting for a CPU)</span></h2>"
    )?;
    for (what, total, l) in [
        ("After preemption", q.preempted_s, &q.preempted),
        ("After wakeup", q.after_wakeup_s, &q.after_wakeup),
    ] {
        writeln!(out, "<section class=\"site\">")?;
        writeln!(out, "<h3>{what}: {total:.3} s</h3>")?;
        match l {
            Some(l) => {
                latency_table(l, out)?;
                if let Some(chart) = latency_chart(l) {
                    writeln!(out, "{chart}")?;
                }
            }
            None => writeln!(out, "<p class=\"muted\">None.</p>")?,
        }
        writeln!(out, "</section>")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::report::HistBucket;

    fn latency() -> Latency {
        Latency {
            count: 30,
            mean_ms: 1.2,
            p50_ms: Some(1.0),
            p90_ms: Some(2.0),
            p99_ms: Some(3.9),
            min_ms: 0.5,
            max_ms: 4.0,
            histogram: vec![
                HistBucket {
                    from_ns: 524_288,
                    to_ns: 540_672,
                    count: 10,
                },
                HistBucket {
                    from_ns: 3_932_160,
                    to_ns: 4_063_232,
                    count: 20,
                },
            ],
        }
    }

    #[test]
    fn a_chart_has_a_bar_per_bucket_and_the_three_marks() {
        let svg = latency_chart(&latency()).unwrap();
        assert_eq!(svg.matches("<rect").count(), 2, "{svg}");
        for mark in ["p50 1 ms", "p99 3.90 ms", "max 4 ms"] {
            assert!(svg.contains(mark), "{mark} missing: {svg}");
        }
        assert!(svg.contains("10 waits") && svg.contains("20 waits"));
        // Decade ticks around the data.
        assert!(svg.contains(">1 ms<"), "{svg}");
        let mut none = latency();
        none.histogram.clear();
        assert!(latency_chart(&none).is_none());
    }

    #[test]
    fn text_is_escaped_and_the_svg_height_read() {
        assert_eq!(esc("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(
            svg_height("<svg version=\"1.1\" width=\"1200\" height=\"446\" onload=\"init(evt)\">"),
            Some(446)
        );
        assert_eq!(duration_label(1e6), "1 ms");
        assert_eq!(duration_label(20_090_000.0), "20.1 ms");
        assert_eq!(duration_label(1000.0), "1 µs");
    }

    #[test]
    fn bars_add_up_to_their_shares() {
        let bar = state_bar(&[50.0, 25.0, 25.0, 0.0, 0.0, 0.0]);
        assert_eq!(bar.matches("<rect").count(), 4, "background + three parts");
        assert!(bar.contains("x=\"75.00\" width=\"25.00\""), "{bar}");
    }
}
