//! The report's timeline parts, for a capture that has one: the waits as intervals (the JSON's
//! `timeline`), and for each top blocking site when its time concentrated (`when`).

use std::collections::{BTreeMap, HashSet};

use super::report::Report;
use crate::{
    analysis::{Analysis, SiteId},
    model::{Profile, StackNames, Timeline},
    timeline::{
        bursts::{self, call_of},
        intervals::intervals,
    },
};

pub struct WhenInput<'a> {
    pub profile: &'a Profile,
    pub names: &'a StackNames,
    pub analysis: &'a Analysis,
    pub timeline: &'a Timeline,
    /// Every blocking site's label (`analysis::site_labels`).
    pub labels: &'a BTreeMap<SiteId, String>,
}

/// Fills `report.timeline` and each top site's `when`.
pub fn annotate(report: &mut Report, input: &WhenInput<'_>) {
    report.timeline = Some(intervals(
        input.profile,
        input.names,
        input.timeline,
        input.labels,
    ));
    let by_label = by_label(input.labels);
    // Sites ranked by active threads' time are followed over active threads, the others
    // (idle threads' only) over all.
    for active in [true, false] {
        let rows: Vec<usize> = report
            .top_blocking_sites
            .iter()
            .enumerate()
            .filter(|(_, s)| (s.active_s > 0.0) == active)
            .map(|(i, _)| i)
            .collect();
        let ids: Vec<SiteId> = rows
            .iter()
            .filter_map(|&i| {
                let s = &report.top_blocking_sites[i];
                by_label
                    .get(&(s.state, s.site.as_str()))
                    .map(|id| (*id).clone())
            })
            .collect();
        if ids.len() != rows.len() {
            // A label that names no site (cannot happen: both come from the same entries).
            continue;
        }
        let analysis = input.analysis;
        let keep = |tid: u32| !active || !analysis.is_idle(tid);
        let series = bursts::series(input.profile, input.names, input.timeline, &ids, &keep);
        for (&i, s) in rows.iter().zip(&series) {
            let row = &mut report.top_blocking_sites[i];
            row.when = bursts::when(s, call_of(&row.site));
        }
    }
}

/// Each site by its state and label, as the report's rows name it.
fn by_label(labels: &BTreeMap<SiteId, String>) -> BTreeMap<(&str, &str), &SiteId> {
    labels
        .iter()
        .map(|(id, label)| ((id.state, label.as_str()), id))
        .collect()
}

/// The sites the report ranks (its top blocking sites): their wakeups are worth drawing.
pub fn ranked_sites(report: &Report, labels: &BTreeMap<SiteId, String>) -> HashSet<SiteId> {
    let by_label = by_label(labels);
    report
        .top_blocking_sites
        .iter()
        .filter_map(|s| {
            by_label
                .get(&(s.state, s.site.as_str()))
                .map(|id| (*id).clone())
        })
        .collect()
}
