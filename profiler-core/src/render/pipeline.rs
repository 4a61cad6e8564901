//! The render stage in order: a saved capture → analysis (idle threads, groups) → folded
//! stacks → flame graph → wakeup chains and their graph (when asked) → the report model →
//! its texts (summary, Markdown, JSON, HTML) on demand; and the same for a diff of two
//! captures. Pure and in memory: the caller decides what goes to which file, so `profiler
//! replay` and the golden tests render a capture the same way.

use std::{collections::HashMap, io};

use thiserror::Error;

use super::{
    diff as diff_render, html, perfetto,
    report::{self, Report},
    summary, svg, timeline_html, trace,
};
use crate::{
    analysis::{self, Analysis},
    diff::{self, Diff, DiffError},
    fold::{self, FoldOptions, Folded},
    model::{Mode, SavedCapture, Timeline},
};

/// How to render a capture.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// A frame per process under the root (`--per-process`). Default is false.
    pub per_process: bool,
    /// A frame per thread under its process (`--per-thread`). Default is false.
    pub per_thread: bool,
    /// Idle threads' sleep left out of the graphs (`--hide-idle`). Default is false.
    pub hide_idle: bool,
    /// Idle threads' sleep drawn with its stacks in the flame graph (`--show-idle`); by
    /// default it is one frame per process and wait (`[idle: 4 threads in …]`). The folded
    /// stacks and the report keep the stacks either way. Default is false.
    pub show_idle: bool,
    /// The wakeup chains folded and drawn too (`--wakers`; off-CPU modes only). Default is
    /// false.
    pub wakers: bool,
    /// The timeline as a Perfetto trace too (`--timeline`; captures with a timeline only).
    /// Default is false.
    pub trace: bool,
    /// The HTML report's timeline section too (`--report x.html`; captures with a timeline
    /// only). Default is false.
    pub timeline_html: bool,
    /// What each wait was on as a frame above its blocking call (`--resources`). Default
    /// is false.
    pub resources: bool,
}

/// A capture rendered: every output's content.
pub struct Rendered {
    pub analysis: Analysis,
    pub folded: Folded,
    /// The flame graph's title and subtitle, also the HTML page's.
    pub title: String,
    pub subtitle: String,
    /// The flame graph, inferno's SVG.
    pub svg: String,
    /// The wakeup chains and their graph, when asked for and recorded.
    pub wakers: Option<Wakers>,
    pub report: Report,
    /// The Perfetto trace (`RenderOptions::trace`).
    pub trace: Option<Vec<u8>>,
    /// The HTML page's timeline section (`RenderOptions::timeline_html`).
    pub timeline_section: Option<String>,
}

/// The report's file formats (`--report x.md|x.json|x.html`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    Markdown,
    Json,
    Html,
}

/// A report in each of its file formats: a capture's or a diff's.
pub trait ReportTexts {
    fn markdown(&self) -> io::Result<String>;
    fn json(&self) -> io::Result<String>;
    fn html(&self) -> io::Result<String>;

    /// The report in `format`.
    fn report(&self, format: ReportFormat) -> io::Result<String> {
        match format {
            ReportFormat::Markdown => self.markdown(),
            ReportFormat::Json => self.json(),
            ReportFormat::Html => self.html(),
        }
    }
}

/// Blocked stacks with the stacks of the threads that woke them.
pub struct Wakers {
    pub folded: Folded,
    pub svg: String,
}

/// The flame graph's frame for each idle thread's sleep: one per process and wait, `[idle: 4
/// threads in LinkedBlockingQueue.take ← ThreadPoolExecutor.getTask]`, by tid.
fn idle_frames(analysis: &Analysis, report: &Report) -> HashMap<u32, String> {
    let mut frames = HashMap::new();
    // The report's idle rows are the analysis's idle sets, in order.
    for (set, row) in analysis.idle.iter().zip(&report.idle_threads) {
        let n = set.tids.len();
        let threads = if n == 1 { "thread" } else { "threads" };
        let frame = match &row.site {
            Some(site) => format!("[idle: {n} {threads} in {site}]"),
            None => format!("[idle: {n} {threads}]"),
        };
        frames.extend(set.tids.iter().map(|&tid| (tid, frame.clone())));
    }
    frames
}

/// The folding of `opts`: idle threads' sleep left out with `--hide-idle`.
fn fold_options(target: &str, opts: &RenderOptions, analysis: &analysis::Analysis) -> FoldOptions {
    FoldOptions {
        process: target.to_string(),
        per_process: opts.per_process,
        per_thread: opts.per_thread,
        hide_sleep_of: if opts.hide_idle {
            analysis
                .threads
                .iter()
                .filter(|(_, c)| c.idle)
                .map(|(&tid, _)| tid)
                .collect()
        } else {
            Default::default()
        },
        collapse_sleep_of: Default::default(),
        resources: opts.resources,
        idle_goroutines: if opts.hide_idle {
            fold::IdleGoroutines::Hide
        } else {
            fold::IdleGoroutines::Stacks
        },
    }
}

/// Analyse, fold, draw, build the report.
pub fn render(saved: &SavedCapture, opts: &RenderOptions) -> io::Result<Rendered> {
    let SavedCapture {
        meta,
        profile,
        names,
        ..
    } = saved;
    let analysis = analysis::analyze(profile, names, &meta.target);
    let fold_opts = fold_options(&meta.target, opts, &analysis);
    let folded = fold::fold(profile, names, &fold_opts);
    let report = report::build(&report::ReportInput {
        profile,
        names,
        meta,
        analysis: &analysis,
        timeline: saved.timeline.as_ref(),
    });
    let (trace, timeline_section) = match &saved.timeline {
        Some(timeline) => timeline_parts(saved, timeline, &analysis, &report, opts)?,
        None => (None, None),
    };
    let mode_words = match profile.mode {
        Mode::Cpu => "on-CPU",
        Mode::Off => "off-CPU",
        Mode::Wall => "wall clock: on-CPU + off-CPU",
    };
    let title = format!("{} (PID {}) — {mode_words}", meta.target, meta.pid);
    let mut subtitle = summary::subtitle(&report, &folded);
    let collapse = idle_frames(&analysis, &report);
    let idle_goroutines = !report.goroutines.is_empty();
    let svg = if opts.show_idle || opts.hide_idle || (collapse.is_empty() && !idle_goroutines) {
        draw(&folded, title.clone(), subtitle.clone(), false)?
    } else {
        subtitle.push_str(
            " · idle threads' sleep: one frame per process and wait (--show-idle: their stacks)",
        );
        let graph_opts = FoldOptions {
            collapse_sleep_of: collapse,
            idle_goroutines: fold::IdleGoroutines::Collapse,
            ..fold_opts.clone()
        };
        let graph = fold::fold(profile, names, &graph_opts);
        draw(&graph, title.clone(), subtitle.clone(), false)?
    };
    let wakers = if opts.wakers && profile.mode.traces_switches() {
        let folded = fold::fold_wakers(profile, names, &fold_opts);
        let subtitle = format!(
            "blocked stack above --, waker's stack below it · {} · unit: µs of blocked time each waker ended",
            summary::secs(profile.window.len_ns())
        );
        let svg = draw(&folded, format!("{title} — wakeups"), subtitle, true)?;
        Some(Wakers { folded, svg })
    } else {
        None
    };
    Ok(Rendered {
        analysis,
        folded,
        title,
        subtitle,
        svg,
        wakers,
        report,
        trace,
        timeline_section,
    })
}

/// What the timeline adds: each top site's `when` and the waits in the report, and the
/// Perfetto trace and the HTML section when asked for.
fn timeline_parts(
    saved: &SavedCapture,
    timeline: &Timeline,
    analysis: &Analysis,
    report: &Report,
    opts: &RenderOptions,
) -> io::Result<(Option<Vec<u8>>, Option<String>)> {
    let SavedCapture { profile, names, .. } = saved;
    let trace = if opts.trace {
        let tracks = trace::tracks(&trace::TraceInput {
            profile,
            names,
            timeline,
            sites: &analysis.sites,
            ranked: &report.ranked_sites.iter().cloned().collect(),
        });
        let mut bytes = Vec::new();
        perfetto::write(&tracks, &mut bytes)?;
        Some(bytes)
    } else {
        None
    };
    let section = opts
        .timeline_html
        .then(|| timeline_html::section(profile, names, timeline));
    Ok((trace, section))
}

/// The flame graph of `folded`, as SVG text.
fn draw(
    folded: &Folded,
    title: String,
    subtitle: String,
    wakeup_palette: bool,
) -> io::Result<String> {
    let opts = svg::SvgOptions {
        title,
        subtitle,
        wakeup_palette,
    };
    let mut bytes = Vec::new();
    svg::write_svg(folded, &opts, &mut bytes)?;
    String::from_utf8(bytes).map_err(io::Error::other)
}

/// What a writer wrote, as text.
fn text(write: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> io::Result<String> {
    let mut bytes = Vec::new();
    write(&mut bytes)?;
    String::from_utf8(bytes).map_err(io::Error::other)
}

impl Rendered {
    /// The folded stacks (`--folded`).
    pub fn folded_text(&self) -> io::Result<String> {
        text(|w| self.folded.write_to(w))
    }

    /// The end-of-run text: the summary, then the report's terminal part.
    pub fn terminal(&self) -> io::Result<String> {
        text(|w| {
            summary::write_summary(w, &self.report)?;
            report::write_text(&self.report, w)
        })
    }
}

impl ReportTexts for Rendered {
    fn markdown(&self) -> io::Result<String> {
        text(|w| report::write_markdown(&self.report, w))
    }

    fn json(&self) -> io::Result<String> {
        text(|w| report::write_json(&self.report, w))
    }

    /// The report as one page, with the flame graph.
    fn html(&self) -> io::Result<String> {
        text(|w| {
            html::write_html(
                &html::HtmlInput {
                    report: &self.report,
                    title: &self.title,
                    subtitle: &self.subtitle,
                    flame_graph: &self.svg,
                    timeline: self.timeline_section.as_deref(),
                },
                w,
            )
        })
    }
}

/// How to render a diff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiffOptions {
    /// Rows of each table (`--top`). Default is [`DiffOptions::DEFAULT_TOP`].
    pub top: usize,
}

impl DiffOptions {
    pub const DEFAULT_TOP: usize = 10;
}

impl Default for DiffOptions {
    fn default() -> Self {
        Self {
            top: Self::DEFAULT_TOP,
        }
    }
}

/// Two captures compared: the differential flame graphs and the report's texts.
pub struct RenderedDiff {
    pub diff: Diff,
    pub top: usize,
    /// Drawn on the after capture (widths of after), and on the before capture.
    pub after_svg: String,
    pub before_svg: String,
}

/// Why a diff could not be rendered.
#[derive(Debug, Error)]
pub enum RenderDiffError {
    #[error(transparent)]
    Diff(#[from] DiffError),
    #[error("cannot draw the differential flame graph: {0}")]
    Draw(#[from] io::Error),
}

/// Compare, then draw the differential flame graph on each capture.
pub fn render_diff(
    before: &SavedCapture,
    after: &SavedCapture,
    opts: &DiffOptions,
) -> Result<RenderedDiff, RenderDiffError> {
    let diff = diff::diff(before, after)?;
    let after_svg = diff_graph(&diff, svg::DiffShape::After)?;
    let before_svg = diff_graph(&diff, svg::DiffShape::Before)?;
    Ok(RenderedDiff {
        diff,
        top: opts.top,
        after_svg,
        before_svg,
    })
}

/// The differential flame graph drawn on one capture's shape.
fn diff_graph(diff: &Diff, shape: svg::DiffShape) -> io::Result<String> {
    let words = |s: &diff::Side| format!("{} {:.2} s", s.target, s.duration_s);
    let title = format!(
        "{} → {} — {}",
        words(&diff.before),
        words(&diff.after),
        match diff.mode {
            Mode::Cpu => "on-CPU",
            Mode::Off => "off-CPU",
            Mode::Wall => "wall clock",
        }
    );
    let what = match shape {
        svg::DiffShape::After => {
            "widths: after · red grew, blue shrank · the before-shaped graph shows what disappeared"
        }
        svg::DiffShape::Before => {
            "widths: before (what shrank or disappeared) · red grew, blue shrank"
        }
    };
    let opts = svg::SvgOptions {
        title,
        subtitle: format!(
            "{what} · {} of thread time per second of capture",
            diff_render::GRAPH_UNIT
        ),
        wakeup_palette: false,
    };
    let mut bytes = Vec::new();
    svg::write_differential(
        &diff.stacks,
        shape,
        &opts,
        diff_render::GRAPH_UNIT,
        &mut bytes,
    )?;
    String::from_utf8(bytes).map_err(io::Error::other)
}

impl RenderedDiff {
    /// The report's tables, cut to `top` rows.
    pub fn tables(&self) -> diff_render::DiffReport<'_> {
        diff_render::report(&self.diff, self.top)
    }

    /// Both captures' stacks with their counts (`--folded`): `stack before after`, µs/s.
    pub fn folded_text(&self) -> String {
        let mut text = String::new();
        for (stack, (b, a)) in &self.diff.stacks {
            text.push_str(&format!("{stack} {b} {a}\n"));
        }
        text
    }

    pub fn terminal(&self) -> io::Result<String> {
        text(|w| diff_render::write_text(&self.tables(), w))
    }
}

impl ReportTexts for RenderedDiff {
    fn markdown(&self) -> io::Result<String> {
        text(|w| diff_render::write_markdown(&self.tables(), w))
    }

    fn json(&self) -> io::Result<String> {
        text(|w| diff_render::write_json(&self.tables(), w))
    }

    /// The report as one page, with both differential flame graphs.
    fn html(&self) -> io::Result<String> {
        let report = self.tables();
        text(|w| {
            diff_render::write_html(
                &diff_render::DiffHtmlInput {
                    report: &report,
                    after_svg: &self.after_svg,
                    before_svg: &self.before_svg,
                },
                w,
            )
        })
    }
}
