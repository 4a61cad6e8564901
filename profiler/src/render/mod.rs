//! Render: the folded profile → what users read (SVG flame graph, the end-of-run summary).

pub mod report;
pub mod summary;
pub mod svg;
