//! The HTML report's timeline section (`html.rs` places it after the flame graph): a
//! capture's timeline → a strip chart of each thread's states over the window, a
//! FlameScope-style heatmap (a column per second, a row per [`ROW_NS`] of it; colour: on-CPU
//! samples, or blocked time), and a script that draws the flame graph of a range chosen on the
//! heatmap (at first, the whole window) from the page's own samples and long waits with their
//! stacks, carried as compact columns (`timeline_data.rs`) packed by `packed.rs`. Nothing is
//! loaded from elsewhere.

use std::fmt::Write as _;

use crate::{
    model::{Profile, StackNames, Timeline},
    render::{packed, timeline_data},
    timeline::{IO, OTHER, RUNNABLE, RUNNING, SLEEP, short_waits, state_bins},
};

/// The heatmap's rows: sub-second buckets.
pub const ROW_NS: u64 = 20_000_000;
/// Columns of each thread's strip.
const STRIP_BINS: usize = 300;
/// Threads with a strip (the busiest first).
const STRIP_THREADS: usize = 40;

/// The strip's state colours, in `state_bins` order (running, runnable, sleep, io, other):
/// the report's (`html.rs`).
const COLOURS: [&str; 5] = [
    "rgb(230,120,40)",
    "rgb(220,60,60)",
    "rgb(70,130,200)",
    "rgb(140,80,200)",
    "rgb(140,140,140)",
];

/// The section, or None for a capture without a timeline.
pub fn section(profile: &Profile, names: &StackNames, timeline: &Timeline) -> String {
    let mut out = String::new();
    let len = profile.window.len_ns().max(1);
    let cols = len.div_ceil(1_000_000_000) as usize;
    let rows = (1_000_000_000 / ROW_NS) as usize;
    let _ = writeln!(out, "<h2 id=\"timeline\">Timeline</h2>");
    strips(profile, timeline, &mut out);
    let (cpu, blocked) = cells(profile, timeline, cols * rows);
    let carried = timeline_data::carried(profile, names, timeline);
    let _ = writeln!(
        out,
        "<p class=\"muted\">Heatmaps: a column per second, a row per {} ms of it (top: its \
         start). Click a cell, then another (or shift-click): the flame graph of that range is \
         drawn below from the page's own samples and waits of {} ms or more.{}</p>",
        ROW_NS / 1_000_000,
        timeline.resolution_ns as f64 / 1e6,
        carried_words(&carried)
    );
    heatmap(
        "tl-cpu",
        "On-CPU (ms of samples)",
        &cpu,
        cols,
        rows,
        COLOURS[RUNNING],
        &mut out,
    );
    heatmap(
        "tl-blocked",
        "Blocked (ms)",
        &blocked,
        cols,
        rows,
        COLOURS[SLEEP],
        &mut out,
    );
    let _ = writeln!(
        out,
        "<p id=\"tl-range\" class=\"muted\">No range chosen.</p><div id=\"tl-flame\" class=\"tl-flame\"></div>"
    );
    // Packing in memory fails only when out of memory; the section then says so.
    match packed::pack(&carried.columns.to_bytes()) {
        Ok(text) => {
            let _ = writeln!(out, "{}", packed::element("tl-data", &text));
        }
        Err(e) => {
            let _ = writeln!(
                out,
                "<p class=\"lost\">The range data could not be packed: {e}</p>"
            );
        }
    }
    let _ = writeln!(out, "<style>{}</style><script>{SCRIPT}</script>", css());
    out
}

/// Per heatmap cell (`col * rows + row`), ms of on-CPU samples and ms blocked in long waits.
fn cells(profile: &Profile, timeline: &Timeline, n: usize) -> (Vec<f64>, Vec<f64>) {
    let start = profile.window.start_ns;
    let mut cpu = vec![0.0f64; n];
    let mut blocked = vec![0.0f64; n];
    let cell = |t_ns: u64| -> usize { (t_ns / ROW_NS) as usize };
    for s in &timeline.samples {
        if let Some(v) = cpu.get_mut(cell(s.ts_ns.saturating_sub(start))) {
            *v += profile.period_ns as f64 / 1e6;
        }
    }
    for line in timeline.threads.values() {
        for w in line.waits.iter().filter(|w| !w.runqueue()) {
            let (mut at, end) = (w.start_ns.saturating_sub(start), w.wake_ns() - start);
            while at < end {
                let c = cell(at);
                let cell_end = ((c as u64 + 1) * ROW_NS).min(end);
                if let Some(v) = blocked.get_mut(c) {
                    *v += (cell_end - at) as f64 / 1e6;
                }
                at = cell_end;
            }
        }
    }
    (cpu, blocked)
}

/// What the range flame graphs are drawn from, when it is not every event one by one.
fn carried_words(c: &timeline_data::Carried) -> String {
    let mut words = String::new();
    if let Some(cell_ns) = c.summary_ns {
        let _ = write!(
            words,
            " The timeline holds {} samples and waits, more than the page carries one by one \
             ({}): those of a thread in one stack inside one {} ms cell are summed into one",
            c.events,
            timeline_data::MAX_EVENTS,
            cell_ns / 1_000_000
        );
        words.push_str(if cell_ns <= ROW_NS {
            ", which leaves the flame graph of any range of cells as it was."
        } else {
            ", so a range's flame graph is exact to that many ms at its ends."
        });
    }
    if c.left_out > 0 {
        let _ = write!(
            words,
            " The {} shortest were left out of the range flame graphs (the heatmaps and strips \
             have them).",
            c.left_out
        );
    }
    words
}

fn strips(profile: &Profile, timeline: &Timeline, out: &mut String) {
    let start = profile.window.start_ns;
    let bin_ns = profile.window.len_ns().div_ceil(STRIP_BINS as u64).max(1);
    let short = short_waits(profile, timeline);
    let mut threads: Vec<(u32, u64)> = timeline
        .threads
        .keys()
        .filter_map(|tid| Some((*tid, profile.threads.get(tid)?.total_ns())))
        .collect();
    threads.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let _ = writeln!(
        out,
        "<p class=\"muted\">Each thread's state over the window ({} columns of {:.1} ms; a \
         column's colour is its main state, waits shorter than {} ms spread over the stretches \
         around them).</p><table class=\"tl-strips\"><tbody>",
        STRIP_BINS,
        bin_ns as f64 / 1e6,
        timeline.resolution_ns as f64 / 1e6
    );
    for &(tid, _) in threads.iter().take(STRIP_THREADS) {
        let (Some(line), Some(t)) = (timeline.threads.get(&tid), profile.threads.get(&tid)) else {
            continue;
        };
        let bins = state_bins(line, short.get(&tid), start, bin_ns, STRIP_BINS);
        let _ = writeln!(
            out,
            "<tr><td class=\"mono\">{}-{tid}</td><td class=\"tl-strip-cell\">{}</td></tr>",
            esc(&t.name),
            strip(&bins)
        );
    }
    let _ = writeln!(out, "</tbody></table>");
    if threads.len() > STRIP_THREADS {
        let _ = writeln!(
            out,
            "<p class=\"muted\">{} more threads are in the JSON report's timeline.</p>",
            threads.len() - STRIP_THREADS
        );
    }
}

/// One thread's strip: a rectangle per run of columns of the same main state (a thread
/// asleep for the whole window is one), coloured by its class.
fn strip(bins: &[[f64; 5]]) -> String {
    let main = |b: &[f64; 5]| -> Option<usize> {
        (b.iter().sum::<f64>() > 0.0).then(|| {
            [RUNNING, RUNNABLE, SLEEP, IO, OTHER]
                .into_iter()
                .max_by(|&x, &y| b[x].total_cmp(&b[y]).then(y.cmp(&x)))
                .unwrap_or(OTHER)
        })
    };
    let mut svg = format!(
        "<svg class=\"tl-strip\" viewBox=\"0 0 {STRIP_BINS} 1\" preserveAspectRatio=\"none\">"
    );
    let mut i = 0;
    while i < bins.len() {
        let state = main(&bins[i]);
        let run = bins[i..].iter().take_while(|b| main(b) == state).count();
        if let Some(state) = state {
            // A little wider than the run, so that no seam shows between neighbours.
            let _ = write!(
                svg,
                "<rect x=\"{i}\" width=\"{run}.05\" height=\"1\" class=\"tl-s{state}\"/>"
            );
        }
        i += run;
    }
    svg.push_str("</svg>");
    svg
}

/// One heatmap: cell `(col, row)` is `values[col * rows + row]`; each `<rect>` carries its
/// start (`data-t`, seconds) and value (`data-v`, ms), its shade the value's share of the
/// largest (the colour is the `<svg>`'s, inherited).
fn heatmap(
    id: &str,
    title: &str,
    values: &[f64],
    cols: usize,
    rows: usize,
    colour: &str,
    out: &mut String,
) {
    let max = values.iter().copied().fold(0.0, f64::max).max(1e-9);
    let (w, h) = (14, 6);
    let _ = writeln!(
        out,
        "<figure class=\"tl-heat\"><figcaption>{}</figcaption><svg id=\"{id}\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" fill=\"{colour}\">",
        esc(title),
        cols * w,
        rows * h,
        cols * w,
        rows * h
    );
    for c in 0..cols {
        for r in 0..rows {
            let v = values[c * rows + r];
            let t = (c as u64 * 1_000_000_000 + r as u64 * ROW_NS) as f64 / 1e9;
            let alpha = if v > 0.0 { 0.08 + 0.92 * v / max } else { 0.0 };
            let _ = write!(
                out,
                "<rect x=\"{}\" y=\"{}\" width=\"{w}\" height=\"{h}\" data-t=\"{t:.2}\" data-v=\"{v:.1}\" fill-opacity=\"{alpha:.2}\"/>",
                c * w,
                r * h,
            );
        }
    }
    let _ = writeln!(out, "</svg></figure>");
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The section's style: the strips' state classes from [`COLOURS`].
fn css() -> String {
    let mut css = String::from(CSS);
    for (i, colour) in COLOURS.iter().enumerate() {
        let _ = writeln!(css, "svg.tl-strip .tl-s{i} {{ fill: {colour}; }}");
    }
    css
}

const CSS: &str = "
table.tl-strips td { padding: 1px .4em; }
.tl-strip-cell { width: 100%; }
svg.tl-strip { display: block; width: 100%; height: 12px; background: #f3f3f5; }
figure.tl-heat { display: inline-block; margin: .5em 1.5em .5em 0; vertical-align: top; }
figure.tl-heat svg { background: #f6f6f8; cursor: crosshair; }
figure.tl-heat rect.sel { stroke: #000; stroke-width: 1; }
.tl-flame { font: 11px ui-monospace, monospace; }
.tl-flame div { overflow: hidden; white-space: nowrap; height: 16px; line-height: 16px; border: 1px solid #fff; box-sizing: border-box; padding-left: 2px; }
";

/// The range flame graph, from the page's packed columns (`timeline_data.rs`, read here in
/// its order): every sample in the range adds its period (times its weight) to its stack,
/// every long wait its blocked time inside the range; drawn as nested rows, root on top,
/// widths in proportion. `unpack` and `reportParts` are the page's (`packed.rs`).
const SCRIPT: &str = r#"(function () {
  function decode(b) {
    var i = 0;
    function u() {
      var v = 0, m = 1, c;
      do {
        if (i >= b.length) throw new Error('the timeline data is cut short');
        c = b[i++]; v += (c & 127) * m; m *= 128;
      } while (c & 128);
      return v;
    }
    function z() { var v = u(); return v % 2 ? -(v + 1) / 2 : v / 2; }
    function col(n, f) { var a = new Array(n); for (var k = 0; k < n; k++) a[k] = f(); return a; }
    function perThread(n) {
      var t = [];
      col(n, u).forEach(function (c, k) { for (; c > 0; c--) t.push(k); });
      return t;
    }
    if (u() !== 1) throw new Error('the timeline data is of another version');
    var d = { unit: u() / 1e9, period: u() / 1e9 }, text = new TextDecoder();
    d.strings = col(u(), function () { var n = u(), s = text.decode(b.subarray(i, i + n)); i += n; return s; });
    d.threads = col(u(), u); d.states = col(u(), u);
    var n = u();
    d.parents = col(n, u).map(function (p, k) { return k + 1 - p; });
    d.frames = col(n, u);
    var s = { thread: perThread(d.threads.length) }, prev = -1, at = 0;
    s.at = s.thread.map(function (t) { at = (t === prev ? at : 0) + z(); prev = t; return at; });
    s.stack = col(s.thread.length, u); s.weight = col(s.thread.length, u);
    var w = { thread: perThread(d.threads.length) }, end = 0;
    var gaps = col(w.thread.length, z);
    w.blocked = col(w.thread.length, u);
    prev = -1;
    w.start = w.thread.map(function (t, k) {
      var start = (t === prev ? end : 0) + gaps[k];
      prev = t; end = start + w.blocked[k];
      return start;
    });
    w.state = col(w.thread.length, u); w.stack = col(w.thread.length, u);
    if (i !== b.length) throw new Error('the timeline data runs on past its end');
    d.samples = s; d.waits = w;
    return d;
  }
  function setUp(d) {
    var paths = [];
    // A stack's frames, root first, built once.
    function frames(stack) {
      if (stack === 0) return [];
      if (!paths[stack]) paths[stack] = frames(d.parents[stack - 1]).concat([d.strings[d.frames[stack - 1]]]);
      return paths[stack];
    }
    function step(node, name, v) {
      var c = node.k[name] || (node.k[name] = { n: name, v: 0, k: {} });
      c.v += v;
      return c;
    }
    function range(a, b) {
      var from = Math.min(a, b), to = Math.max(a, b) + 0.02;
      var f = from / d.unit, t = to / d.unit;
      var root = { n: 'all', v: 0, k: {} };
      function add(thread, stack, leaf, v) {
        if (v <= 0) return;
        root.v += v;
        var node = step(root, d.strings[d.threads[thread]], v);
        frames(stack).forEach(function (name) { node = step(node, name, v); });
        if (leaf !== null) step(node, leaf, v);
      }
      var s = d.samples, w = d.waits, k;
      for (k = 0; k < s.at.length; k++) {
        if (s.at[k] >= f && s.at[k] < t) add(s.thread[k], s.stack[k], null, s.weight[k] * d.period);
      }
      for (k = 0; k < w.start.length; k++) {
        var v = (Math.min(w.start[k] + w.blocked[k], t) - Math.max(w.start[k], f)) * d.unit;
        add(w.thread[k], w.stack[k], d.strings[d.states[w.state[k]]], v);
      }
      document.querySelectorAll('figure.tl-heat rect').forEach(function (r) {
        var t = parseFloat(r.getAttribute('data-t'));
        r.classList.toggle('sel', t >= from - 1e-9 && t < to - 1e-9);
      });
      document.getElementById('tl-range').textContent = from.toFixed(2) + '–' + to.toFixed(2) +
        ' s: ' + (root.v * 1000).toFixed(1) + ' ms of thread time (samples and waits of the timeline)';
      var box = document.getElementById('tl-flame');
      box.textContent = '';
      var deepest = -1;
      function draw(node, left, width, depth) {
        if (width < 0.1) return;
        var div = document.createElement('div');
        div.style.position = 'absolute';
        div.style.left = left + '%'; div.style.width = width + '%'; div.style.top = (depth * 16) + 'px';
        var off = node.n.indexOf('[off-cpu') === 0;
        div.style.background = off ? 'rgb(120,160,220)' : 'hsl(' + (20 + (node.n.length * 7) % 30) + ',80%,60%)';
        div.textContent = node.n; div.title = node.n + ' ' + (node.v * 1000).toFixed(1) + ' ms';
        box.appendChild(div);
        deepest = Math.max(deepest, depth);
        var x = left;
        Object.keys(node.k).sort().forEach(function (key) {
          var c = node.k[key], cw = width * c.v / node.v;
          draw(c, x, cw, depth + 1); x += cw;
        });
      }
      box.style.position = 'relative';
      if (root.v > 0) draw(root, 0, 100, 0);
      box.style.height = (16 * (deepest + 1)) + 'px';
      box.setAttribute('data-from', from.toFixed(2));
      box.setAttribute('data-to', to.toFixed(2));
    }
    // A click starts a range, the next click (or a shift-click) ends it.
    var anchor = null, open = false;
    document.querySelectorAll('figure.tl-heat svg').forEach(function (svg) {
      svg.addEventListener('click', function (e) {
        var t = e.target.getAttribute && e.target.getAttribute('data-t');
        if (t === null || t === undefined) return;
        t = parseFloat(t);
        if (anchor !== null && (open || e.shiftKey)) { range(anchor, t); open = false; return; }
        anchor = t; open = true; range(t, t);
      });
    });
    window.timelineRange = range;
    // At first, the whole window.
    var last = 0;
    document.querySelectorAll('#tl-cpu rect').forEach(function (r) {
      last = Math.max(last, parseFloat(r.getAttribute('data-t')));
    });
    range(0, last);
  }
  window.reportParts.push(window.unpack('tl-data').then(decode).then(setUp).catch(function (e) {
    document.getElementById('tl-range').textContent = 'The range flame graph cannot be drawn: ' + e.message;
    throw e;
  }));
})();"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Mode, ThreadLine, TimedSample, TimedWait, Window};
    use profiler_common::WaitState;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_strip_is_a_rectangle_per_run_of_one_state() {
        let mut bins = vec![[0.0; 5]; STRIP_BINS];
        for b in &mut bins[..100] {
            b[SLEEP] = 9.0;
            b[RUNNING] = 1.0;
        }
        for b in &mut bins[150..] {
            b[RUNNING] = 1.0;
        }
        let svg = strip(&bins);
        assert_eq!(svg.matches("<rect").count(), 2, "{svg}");
        assert!(svg.contains("<rect x=\"0\" width=\"100.05\" height=\"1\" class=\"tl-s2\"/>"));
        assert!(svg.contains("<rect x=\"150\" width=\"150.05\" height=\"1\" class=\"tl-s0\"/>"));
        assert!(css().contains(".tl-s2 { fill: rgb(70,130,200); }"));
    }

    #[test]
    fn a_summarised_timeline_says_so() {
        let mut c = timeline_data::Carried {
            columns: timeline_data::Columns::default(),
            events: 1_234_567,
            summary_ns: None,
            left_out: 0,
        };
        assert_eq!(carried_words(&c), "");
        c.summary_ns = Some(ROW_NS);
        let words = carried_words(&c);
        assert!(words.contains("1234567 samples and waits") && words.contains("20 ms cell"));
        assert!(words.contains("as it was"), "{words}");
        c.summary_ns = Some(1_000_000_000);
        c.left_out = 5;
        let words = carried_words(&c);
        assert!(words.contains("1000 ms cell") && words.contains("exact to that many ms"));
        assert!(words.contains("The 5 shortest were left out"), "{words}");
    }

    #[test]
    fn the_heatmap_puts_a_stall_in_its_cells() {
        let mut profile = Profile::empty(
            Mode::Wall,
            Window {
                start_ns: 1_000 * MS,
                stop_ns: 4_000 * MS,
            },
            10 * MS,
        );
        profile.threads.insert(
            1,
            crate::model::ThreadTime {
                name: "app".into(),
                time: crate::model::StateTimes {
                    running: 2_700 * MS,
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        let mut timeline = Timeline {
            resolution_ns: MS,
            ..Timeline::default()
        };
        timeline.threads.insert(
            1,
            ThreadLine {
                from_ns: 1_000 * MS,
                to_ns: 4_000 * MS,
                cpu_ns: 2_700 * MS,
                // 300 ms asleep from 2.1 s into the window.
                waits: vec![TimedWait {
                    start_ns: 3_100 * MS,
                    blocked_ns: 300 * MS,
                    runnable_ns: 0,
                    state: WaitState::Sleep,
                    user_stack: 1,
                    kernel_stack: 0,
                    waker_tid: 0,
                    cpu_before_ns: 2_100 * MS,
                    waking_ns: 0,
                    resource: 0,
                }],
            },
        );
        timeline.samples.push(TimedSample {
            tid: 1,
            ts_ns: 1_005 * MS,
            user_stack: 2,
            kernel_stack: 0,
        });
        let html = section(&profile, &StackNames::default(), &timeline);
        let blocked = &html[html.find("id=\"tl-blocked\"").unwrap()..];
        let blocked = &blocked[..blocked.find("</svg>").unwrap()];
        let full: Vec<&str> = blocked
            .split("<rect ")
            .filter(|r| r.contains("data-v=\"20.0\""))
            .map(|r| {
                let at = r.find("data-t=\"").unwrap() + 8;
                &r[at..at + 4]
            })
            .collect();
        // 2.10 s to 2.40 s: 15 cells of 20 ms in the third column.
        let want: Vec<String> = (0..15)
            .map(|i| format!("{:.2}", 2.1 + 0.02 * i as f64))
            .collect();
        assert_eq!(full, want);
        let cpu = &html[html.find("id=\"tl-cpu\"").unwrap()..];
        assert!(cpu.contains("data-t=\"0.00\" data-v=\"10.0\""));
        let data = crate::render::timeline_data::tests::from_bytes(
            &crate::render::packed::tests::unpack(&html, "tl-data"),
        );
        let (samples, waits) = data.named();
        assert_eq!(samples, [("app-1", 5_000, vec!["[user stack missing]"], 1)]);
        assert_eq!(waits.len(), 1);
        assert_eq!(
            (waits[0].0, waits[0].1, waits[0].2),
            ("app-1", 2_100_000, 300_000)
        );
        assert_eq!(waits[0].3.last(), Some(&"[off-cpu:sleep]"));
        assert!(!html.contains("http://") && !html.contains("https://"));
    }
}
