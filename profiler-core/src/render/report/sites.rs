//! The builder's blocking sites: waits grouped as the user reads them (a state and the user
//! stack: the blocking call and its callers), with their latency from the in-kernel
//! histograms, the run-queue time after their wakeups, and their wakers.
//!
//! Percentiles come from the in-kernel histograms (log2 buckets with 32 linear sub-buckets,
//! each at most 3.1 % wide), interpolated linearly inside the bucket that holds the rank and
//! bounded by the exact minimum and maximum.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use profiler_common::{SiteKey as KernelSite, WaitState, hist_bucket_bounds};

use super::{
    model::{HistBucket, Latency, ResourceRow, SiteRow, WakerRow},
    units::{ms, pct_of, secs, thread_name},
};
use crate::{
    analysis::Analysis,
    model::{Entry, Hist, Kind, Profile, StackNames, stack_frames, waker_frames, waker_identity},
    site::{self, SiteId, distinct_labels},
    waits::{Purpose, WaitKind},
};

const TOP_SITES: usize = 10;
const TOP_WAKERS: usize = 3;

/// A waker: name, tid, pid.
type WakerKey = (String, u32, u32);

/// The report's view of merged waits.
impl Hist {
    pub(super) fn latency(&self) -> Option<Latency> {
        (self.count > 0).then(|| Latency {
            count: self.count,
            mean_ms: ms(self.total_ns as f64 / self.count as f64),
            p50_ms: self.quantile_ns(0.50).map(ms),
            p90_ms: self.quantile_ns(0.90).map(ms),
            p99_ms: self.quantile_ns(0.99).map(ms),
            min_ms: ms(self.min_ns as f64),
            max_ms: ms(self.max_ns as f64),
            histogram: self.histogram(),
        })
    }

    fn histogram(&self) -> Vec<HistBucket> {
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, &count)| {
                let (from_ns, to_ns) = hist_bucket_bounds(i);
                HistBucket {
                    from_ns,
                    to_ns: if to_ns > from_ns {
                        to_ns
                    } else {
                        self.max_ns.max(from_ns)
                    },
                    count,
                }
            })
            .collect()
    }
}

/// One blocking site as the user reads it: a state and a user stack (the blocking call and
/// its callers). Kernel paths that differ below the call (several of one `fsync`) are the
/// same site; sites whose labels would read alike name more callers.
#[derive(Default)]
struct Site {
    hist: Hist,
    time_ns: u64,
    active_ns: u64,
    threads: BTreeSet<u32>,
    /// Each full stack of the site with its time: the largest is shown.
    stacks: HashMap<Vec<String>, u64>,
    runnable_after_ns: u64,
    /// Of `time_ns`, waits whose stacks were cut short, placed here by their thread's.
    attributed_ns: u64,
    /// Wakeups per waker, with a stack of the waker.
    wakers: BTreeMap<WakerKey, (u64, Vec<String>)>,
    /// Time per resource its waits were on.
    resources: BTreeMap<u64, u64>,
}

impl Site {
    /// One entry's wait; `active` when its thread is active and the wait no idle wait.
    fn add(&mut self, e: &Entry, frames: Vec<String>, active: bool) {
        self.hist.add_waits(e.waits, e.time_ns, e.min_ns, e.max_ns);
        self.time_ns += e.time_ns;
        if active {
            self.active_ns += e.time_ns;
        }
        self.threads.insert(e.tid);
        *self.stacks.entry(frames).or_default() += e.time_ns;
        if e.resource != 0 {
            *self.resources.entry(e.resource).or_default() += e.time_ns;
        }
    }
}

/// Stack pair → full frames, and stack pair and state → site, each computed once.
struct FrameCache<'a> {
    names: &'a StackNames,
    frames: HashMap<(u64, u64), Vec<String>>,
    sites: HashMap<(u64, u64, WaitState), SiteId>,
}

impl FrameCache<'_> {
    fn frames(&mut self, user: u64, kernel: u64) -> Vec<String> {
        let names = self.names;
        self.frames
            .entry((user, kernel))
            .or_insert_with(|| stack_frames(user, kernel, names))
            .clone()
    }

    fn site(&mut self, state: WaitState, user: u64, kernel: u64) -> SiteId {
        let names = self.names;
        self.sites
            .entry((user, kernel, state))
            .or_insert_with(|| site::site_id(state, user, kernel, names))
            .clone()
    }
}

/// Every blocking site, by its identity (ranked and cut by [`ranked`]).
pub(super) fn site_rows(
    profile: &Profile,
    names: &StackNames,
    analysis: &Analysis,
    all_thread_ns: u64,
) -> BTreeMap<SiteId, SiteRow> {
    let mut frames = FrameCache {
        names,
        frames: HashMap::new(),
        sites: HashMap::new(),
    };
    let mut sites = blocked_sites(profile, analysis, &mut frames);
    add_wakers(&mut sites, profile, &mut frames);
    let active_ns: u64 = profile
        .threads
        .iter()
        .filter(|(tid, _)| !analysis.is_idle(**tid))
        .map(|(_, t)| t.total_ns())
        .sum();
    // The labels the whole capture's sites got (the timeline's and the trace's too); a site
    // only this range has is labelled among these.
    let fallback = distinct_labels(sites.keys());
    sites
        .into_iter()
        .zip(fallback)
        .map(|((id, site), fallback)| {
            let label = analysis
                .sites
                .labels()
                .get(&id)
                .cloned()
                .unwrap_or(fallback);
            let mut row = site_row(profile, id.state, label, site, all_thread_ns, active_ns);
            row.event_wait = id.is_event_wait();
            row.kind = id.kind;
            row.purpose = id.purpose;
            row.in_event_loop = id.event_loop;
            row.holders = analysis.holders.get(&id).map(|h| h.row());
            (id, row)
        })
        .collect()
}

/// The waits of every entry at its site, with the kernel's histograms and the run-queue
/// time that followed their wakeups.
fn blocked_sites(
    profile: &Profile,
    analysis: &Analysis,
    frames: &mut FrameCache<'_>,
) -> BTreeMap<SiteId, Site> {
    let mut sites: BTreeMap<SiteId, Site> = BTreeMap::new();
    let mut hists_added: BTreeSet<KernelSite> = BTreeSet::new();
    let mut runnable_after: Vec<(u64, u64, u64)> = Vec::new();
    for e in &profile.entries {
        let Kind::Off(state) = e.kind else { continue };
        // The run-queue part after a wakeup belongs to the blocking site it followed.
        if state == WaitState::RunqueueWoken {
            runnable_after.push((e.user_stack, e.kernel_stack, e.time_ns));
            continue;
        }
        let Some(state) = e.blocked_state() else {
            continue;
        };
        let placed = analysis.placed(e, state).cloned();
        let was_cut = placed.is_some();
        let key = placed.unwrap_or_else(|| {
            analysis.canonical(frames.site(state, e.user_stack, e.kernel_stack))
        });
        let active = !analysis.is_idle(e.tid) && !key.is_idle_wait();
        let full = frames.frames(e.user_stack, e.kernel_stack);
        let site = sites.entry(key).or_default();
        if was_cut {
            site.attributed_ns += e.time_ns;
        }
        site.add(e, full, active);
        if let Some(h) = profile.site_hist_once(e, state, &mut hists_added) {
            site.hist.add_buckets(h);
        }
    }
    for (user, kernel, ns) in runnable_after {
        // Which state the wait was in is not in the run-queue key: the one the stack has.
        let key = [WaitState::Sleep, WaitState::Io, WaitState::Other]
            .into_iter()
            .map(|st| frames.site(st, user, kernel))
            .find(|key| sites.contains_key(key));
        if let Some(site) = key.and_then(|key| sites.get_mut(&key)) {
            site.runnable_after_ns += ns;
        }
    }
    sites
}

/// Who woke each site, with a stack of each waker.
fn add_wakers(sites: &mut BTreeMap<SiteId, Site>, profile: &Profile, frames: &mut FrameCache<'_>) {
    for w in &profile.wakers {
        let key = frames.site(w.state, w.user_stack, w.kernel_stack);
        let Some(site) = sites.get_mut(&key) else {
            continue;
        };
        let who = waker_identity(w, frames.names);
        let stack = waker_frames(w, &who, frames.names);
        let entry = site
            .wakers
            .entry((who.name, who.tid, who.pid))
            .or_insert((0, Vec::new()));
        entry.0 += w.count;
        if entry.1.is_empty() {
            entry.1 = stack;
        }
    }
}

fn site_row(
    profile: &Profile,
    state: &'static str,
    label: String,
    site: Site,
    all_thread_ns: u64,
    active_ns: u64,
) -> SiteRow {
    let total_wakeups: u64 = site.wakers.values().map(|v| v.0).sum();
    let mut wakers: Vec<WakerRow> = site
        .wakers
        .into_iter()
        .map(|((name, tid, pid), (count, stack))| WakerRow {
            name: if name.is_empty() { "?".into() } else { name },
            tid,
            pid,
            wakeups: count,
            wakeups_pct: pct_of(count, total_wakeups),
            stack,
        })
        .collect();
    wakers.sort_by(|a, b| b.wakeups.cmp(&a.wakeups).then(a.tid.cmp(&b.tid)));
    wakers.truncate(TOP_WAKERS);
    let resources = resource_rows(profile, &site.resources, site.time_ns);
    let paths = site.stacks.len();
    let stack = site
        .stacks
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(frames, _)| frames)
        .unwrap_or_default();
    SiteRow {
        rank: 0,
        state,
        site: label,
        stack,
        stacks: paths,
        runnable_after_wakeup_s: secs(site.runnable_after_ns),
        attributed_s: secs(site.attributed_ns),
        threads: site
            .threads
            .iter()
            .take(5)
            .map(|tid| thread_name(profile, *tid))
            .collect(),
        thread_count: site.threads.len(),
        total_s: secs(site.time_ns),
        share_pct: pct_of(site.time_ns, all_thread_ns),
        active_s: secs(site.active_ns),
        active_pct: pct_of(site.active_ns, active_ns),
        idle_s: secs(site.time_ns - site.active_ns),
        event_wait: false,
        kind: WaitKind::Io,
        purpose: Purpose::Unknown,
        in_event_loop: false,
        holders: None,
        waits: site.hist.count,
        latency: site.hist.latency(),
        wakers,
        resources,
        when: None,
    }
}

/// The named resources of a site, most time first (ids the capture could not name left
/// out: their time stays the site's).
fn resource_rows(profile: &Profile, by_id: &BTreeMap<u64, u64>, site_ns: u64) -> Vec<ResourceRow> {
    // Ids that read alike are one row (a pool's connections to a service on a port the
    // kernel side could not tell from a client's: one id each, one text).
    let mut by_text: BTreeMap<&str, (&crate::model::NamedResource, u64)> = BTreeMap::new();
    for (id, &ns) in by_id {
        if let Some(r) = profile.resources.get(id) {
            by_text.entry(&r.text).or_insert((r, 0)).1 += ns;
        }
    }
    let mut rows: Vec<ResourceRow> = by_text
        .into_values()
        .map(|(r, ns)| ResourceRow {
            resource: r.clone(),
            time_s: secs(ns),
            site_pct: pct_of(ns, site_ns),
        })
        .collect();
    rows.sort_by(|a, b| {
        b.time_s
            .total_cmp(&a.time_s)
            .then(a.resource.text.cmp(&b.resource.text))
    });
    rows
}

/// The top sites: active time first, event waits after the blocking ones, sites with only
/// idle time last; ranked from 1.
pub(super) fn ranked(sites: BTreeMap<SiteId, SiteRow>) -> (Vec<SiteRow>, Vec<SiteId>) {
    let mut sites: Vec<(SiteId, SiteRow)> = sites.into_iter().collect();
    sites.sort_by(|(_, a), (_, b)| {
        (a.active_s == 0.0)
            .cmp(&(b.active_s == 0.0))
            .then(a.event_wait.cmp(&b.event_wait))
            .then(b.active_s.total_cmp(&a.active_s))
            .then(b.total_s.total_cmp(&a.total_s))
            .then(a.site.cmp(&b.site))
    });
    sites.truncate(TOP_SITES);
    let (ids, mut rows): (Vec<SiteId>, Vec<SiteRow>) = sites.into_iter().unzip();
    for (i, s) in rows.iter_mut().enumerate() {
        s.rank = i + 1;
    }
    (rows, ids)
}

#[cfg(test)]
mod tests {
    use crate::model::{Hist, hist::tests::hist_of};

    #[test]
    fn a_sites_latency_is_its_exact_figures_and_percentiles() {
        let l = hist_of(&[20_100_000; 250]).latency().unwrap();
        assert_eq!((l.p50_ms, l.max_ms, l.min_ms), (Some(20.1), 20.1, 20.1));
        assert_eq!((l.count, l.mean_ms), (250, 20.1));
    }

    #[test]
    fn without_a_histogram_there_are_no_percentiles() {
        let mut h = Hist::default();
        h.add_waits(3, 30_000_000, 9_000_000, 11_000_000);
        let l = h.latency().unwrap();
        assert_eq!((l.p50_ms, l.mean_ms, l.max_ms), (None, 10.0, 11.0));
    }
}
