//! The rows of the post-processing phase: its time and its peak RSS.

use std::fmt::Write as _;

use super::cells::check;
use crate::post::Post;

/// Goals shown next to the numbers.
const GOAL_POST_SECS: f64 = 1.0;

const GOAL_RSS_MB: f64 = 150.0;

pub(super) fn post_rows(md: &mut String, p: &Post) {
    let secs = p.logged_secs.unwrap_or(p.measured_secs);
    let _ = writeln!(
        md,
        "| post-processing after a {} s wall capture (end of window → SVG written) \
         | {secs:.2} s | | ≤ {GOAL_POST_SECS} s | {} |",
        p.capture_secs,
        check(secs <= GOAL_POST_SECS)
    );
    let mb = p.peak_rss_kib as f64 * 1024.0 / 1e6;
    let _ = writeln!(
        md,
        "| peak RSS of that run | {mb:.0} MB | | ≤ {GOAL_RSS_MB} MB | {} |",
        check(mb <= GOAL_RSS_MB)
    );
}
