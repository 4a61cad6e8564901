//! The builder's goroutine groups (`crate::goroutines`): per Go process, goroutines by the
//! function they were started with, their time on the CPU and their waits by site with
//! latencies; Go processes whose goroutines were not followed, with why.

use super::{
    model::{GoGroupRow, GoProcessRow, GoSiteRow},
    units::{pct_of, secs},
};
use crate::{
    goroutines::{self, GoGroup},
    model::{Profile, StackNames},
};

/// Sites listed per group.
const TOP_SITES: usize = 5;
/// Groups listed (busiest first; idle ones after).
const TOP_GROUPS: usize = 8;

pub(super) fn rows(profile: &Profile, names: &StackNames) -> (Vec<GoProcessRow>, Vec<GoGroupRow>) {
    let processes = profile
        .goroutines
        .processes
        .iter()
        .map(|p| GoProcessRow {
            pid: p.pid,
            name: profile
                .processes
                .get(&p.pid)
                .map(|i| i.name.clone())
                .unwrap_or_default(),
            version: p.version.clone(),
            unfollowed: p.unfollowed.clone(),
        })
        .collect();
    let groups = goroutines::groups(profile, names)
        .iter()
        .take(TOP_GROUPS)
        .map(|g| group_row(profile, g))
        .collect();
    (processes, groups)
}

fn group_row(profile: &Profile, g: &GoGroup) -> GoGroupRow {
    let work = g.work_ns();
    GoGroupRow {
        pid: g.pid,
        process: profile
            .processes
            .get(&g.pid)
            .map(|i| i.name.clone())
            .unwrap_or_default(),
        subject: g.subject(),
        entry: g.entry.clone(),
        app: g.app.clone(),
        idle: work == 0,
        on_cpu_s: secs(g.on_cpu_ns),
        on_cpu_pct: pct_of(g.on_cpu_ns, work),
        wait_s: secs(g.wait_ns),
        idle_wait_s: secs(g.idle_ns),
        sites: g
            .sites
            .iter()
            .take(TOP_SITES)
            .map(|s| GoSiteRow {
                label: s.label.clone(),
                reason: s.reason.clone(),
                waiting_for: s.meaning,
                idle: s.idle,
                time_s: secs(s.time_ns),
                // Of the group's time with work; an idle site's share is of its idle time.
                share_pct: if s.idle {
                    pct_of(s.time_ns, g.idle_ns)
                } else {
                    pct_of(s.time_ns, work)
                },
                waits: s.hist.count,
                still_parked: s.open,
                latency: s.hist.latency(),
                stack: s.stack.clone(),
            })
            .collect(),
    }
}
