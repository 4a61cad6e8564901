//! The timeline as the JSON report lists it: each thread's waits of at least the resolution,
//! with their state and site, in seconds from the window's start.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    model::{Profile, StackNames, Timeline},
    site::Sites,
};

/// Intervals the JSON report lists at most; beyond, the shortest are left out.
pub const MAX_INTERVALS: usize = 20_000;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Intervals {
    /// The window's start on CLOCK_MONOTONIC (what `start_s` counts from).
    pub window_start_ns: u64,
    /// Waits shorter than this are not listed (nor drawn one by one anywhere).
    pub resolution_ms: f64,
    /// Timeline records lost (ring full, or beyond `--timeline-max-records`).
    pub records_lost: u64,
    /// More than `MAX_INTERVALS` waits: the shortest are left out.
    pub truncated: bool,
    pub threads: Vec<ThreadIntervals>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadIntervals {
    pub tid: u32,
    pub pid: u32,
    pub name: String,
    pub waits: Vec<Interval>,
}

/// One wait: from `start_s` to `end_s`, blocked in `state` for `blocked_s`, then runnable.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Interval {
    pub start_s: f64,
    pub end_s: f64,
    pub blocked_s: f64,
    /// `sleep`, `io`, `other`, or `runnable` for a wait for a CPU from its start.
    pub state: &'static str,
    /// Its site, as the report names it (empty for a wait for a CPU).
    pub site: String,
    /// Who made it runnable (`name-tid`; empty when an interrupt or not seen).
    pub woken_by: String,
}

pub fn intervals(
    profile: &Profile,
    names: &StackNames,
    timeline: &Timeline,
    sites: &Sites,
) -> Intervals {
    let start = profile.window.start_ns;
    let secs = |ns: u64| ((ns.saturating_sub(start)) as f64 / 1e3).round() / 1e6;
    let mut all: Vec<(u32, u64, Interval)> = Vec::new();
    let thread_name = |tid: u32| -> String {
        profile
            .threads
            .get(&tid)
            .map(|t| format!("{}-{tid}", t.name))
            .unwrap_or_default()
    };
    for (&tid, line) in &timeline.threads {
        for w in &line.waits {
            let (state, site) = if w.runqueue() {
                ("runnable", String::new())
            } else {
                let id = sites.site(w.state, w.user_stack, w.kernel_stack, names);
                (w.state.label(), sites.label(&id).to_string())
            };
            let length = w.end_ns() - w.start_ns;
            all.push((
                tid,
                length,
                Interval {
                    start_s: secs(w.start_ns),
                    end_s: secs(w.end_ns()),
                    blocked_s: (w.blocked_ns as f64 / 1e3).round() / 1e6,
                    state,
                    site,
                    woken_by: if w.waker_tid == 0 {
                        String::new()
                    } else {
                        thread_name(w.waker_tid)
                    },
                },
            ));
        }
    }
    let truncated = all.len() > MAX_INTERVALS;
    if truncated {
        all.sort_by_key(|w| std::cmp::Reverse(w.1));
        all.truncate(MAX_INTERVALS);
    }
    let mut by_thread: BTreeMap<u32, Vec<Interval>> = BTreeMap::new();
    for (tid, _, i) in all {
        by_thread.entry(tid).or_default().push(i);
    }
    Intervals {
        window_start_ns: start,
        resolution_ms: timeline.resolution_ns as f64 / 1e6,
        records_lost: timeline.lost,
        truncated,
        threads: by_thread
            .into_iter()
            .map(|(tid, mut waits)| {
                waits.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
                ThreadIntervals {
                    tid,
                    pid: profile.threads.get(&tid).map_or(0, |t| t.pid),
                    name: profile
                        .threads
                        .get(&tid)
                        .map(|t| t.name.clone())
                        .unwrap_or_default(),
                    waits,
                }
            })
            .collect(),
    }
}
