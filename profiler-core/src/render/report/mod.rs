//! Report: the time model with named stacks → what a performance write-up needs: where each
//! thread's time went, the top on-CPU functions, the top blocking sites with their latency
//! distribution and wakers, the run-queue delay, and the verdict naming the dominant state
//! and site.
//!
//! - [`model`]: the report's data, every figure as the writers show it.
//! - `build`, `sites`, `notes`, `goroutines`: the one builder ([`build`]) that computes them; it calls
//!   [`verdict`] last, which reads the model only.
//! - `text`, `markdown`, [`write_json`]: the writers (terminal, `--report x.md`,
//!   `--report x.json`, schema docs/report.schema.json); the HTML page is render/html.rs,
//!   the end-of-run summary render/summary.rs. They only format the model; `words` holds
//!   the words they share.

mod build;
mod goroutines;
mod markdown;
pub mod model;
mod notes;
mod sites;
mod text;
mod units;
pub mod verdict;
mod when;
pub(crate) mod words;

use std::io::{self, Write};

pub use build::{PERCENTILE_METHOD, ReportInput, build};
pub use markdown::write_markdown;
pub use model::*;
pub use text::write_text;
pub use words::{IdleRuleWords, idle_rule, machine_text, resources_text};

pub fn write_json(report: &Report, out: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report).map_err(io::Error::other)?;
    writeln!(out)
}
