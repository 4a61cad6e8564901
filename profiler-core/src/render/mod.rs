//! Render: the folded profile → what users read (SVG flame graph, the end-of-run summary, the
//! report as text, Markdown, JSON or one HTML page), the capture as pprof for other tools, and
//! per-thread timelines as a Perfetto trace. [`render`] runs the stage in order for one
//! capture, [`render_diff`] for two; the caller only writes what they return.

#[cfg(test)]
mod big_capture;
pub mod diff;
mod escape;
pub mod html;
mod packed;
pub mod perfetto;
mod pipeline;
pub mod pprof;
pub mod report;
pub mod summary;
pub mod svg;
mod timeline_data;
pub mod timeline_html;
pub mod trace;
mod waitgraph;

pub use pipeline::{
    DiffOptions, RenderDiffError, RenderOptions, Rendered, RenderedDiff, ReportFormat, ReportTexts,
    Wakers, render, render_diff,
};

/// `1 thread`, `3 threads`.
pub(crate) fn count(n: impl Into<u64>, word: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}
