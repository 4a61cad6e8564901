//! How the tables look: their head, a goal's check mark, a rate, a duration.

use std::time::Duration;

pub(super) const TABLE_HEAD: &str =
    "| measurement | median | min–max | goal | met |\n|---|---:|---:|---|:-:|\n";

pub(super) fn check(met: bool) -> &'static str {
    if met { "✅" } else { "❌" }
}

/// "412 events/s", "45.3 k events/s".
pub(super) fn rate(per_sec: f64) -> String {
    if per_sec < 1000.0 {
        format!("{per_sec:.0} events/s")
    } else {
        format!("{:.1} k events/s", per_sec / 1000.0)
    }
}

pub(super) fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    format!("{} min {:02} s", s / 60, s % 60)
}
