//! The builder's timeline parts, for a capture that has one: the waits as intervals (the
//! JSON's `timeline`), and for each top blocking site when its time concentrated (`when`).

use super::model::SiteRow;
use crate::{
    analysis::Analysis,
    model::{Profile, StackNames, Timeline},
    site::SiteId,
    timeline::{
        bursts::{self, call_of},
        intervals::{Intervals, intervals},
    },
};

/// The waits as intervals.
pub(super) fn waits(
    profile: &Profile,
    names: &StackNames,
    analysis: &Analysis,
    timeline: &Timeline,
) -> Intervals {
    intervals(profile, names, timeline, &analysis.sites)
}

/// Each ranked site's `when`: `rows` and `ids` in the same order.
pub(super) fn when(
    rows: &mut [SiteRow],
    ids: &[SiteId],
    profile: &Profile,
    names: &StackNames,
    analysis: &Analysis,
    timeline: &Timeline,
) {
    // Sites ranked by active threads' time are followed over active threads, the others
    // (idle threads' only) over all.
    for active in [true, false] {
        let picked: Vec<usize> = (0..rows.len())
            .filter(|&i| (rows[i].active_s > 0.0) == active)
            .collect();
        let sites: Vec<SiteId> = picked.iter().map(|&i| ids[i].clone()).collect();
        let keep = |tid: u32| !active || !analysis.is_idle(tid);
        let series = bursts::series(profile, names, timeline, &analysis.sites, &sites, &keep);
        for (&i, s) in picked.iter().zip(&series) {
            rows[i].when = bursts::when(s, call_of(&rows[i].site));
        }
    }
}
