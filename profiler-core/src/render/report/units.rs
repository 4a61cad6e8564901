//! The report's units: seconds, milliseconds and shares as its figures round them, and a
//! thread as its rows name it. Below the builder and its sites, which both use them.

use crate::model::Profile;

pub(super) fn ms(ns: f64) -> f64 {
    round3(ns / 1e6)
}

pub(super) fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

pub(super) fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

pub(super) fn secs(ns: u64) -> f64 {
    round3(ns as f64 / 1e9)
}

/// `ns` of `of` in %, to a tenth.
pub(super) fn pct_of(ns: u64, of: u64) -> f64 {
    round1(100.0 * ns as f64 / of.max(1) as f64)
}

/// `name-tid`.
pub(super) fn thread_name(profile: &Profile, tid: u32) -> String {
    let name = profile.threads.get(&tid).map_or("?", |t| t.name.as_str());
    format!("{name}-{tid}")
}
