//! Render: the folded profile → what users read (SVG flame graph, the end-of-run summary), and
//! the capture as pprof for other tools.

pub mod pprof;
pub mod report;
pub mod summary;
pub mod svg;
pub mod verdict;
