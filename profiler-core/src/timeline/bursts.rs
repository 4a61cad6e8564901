//! When a blocking site's time concentrated: its blocked time over the window in bins of
//! [`BIN_NS`], and the bursts where it piled up ("62 % of fdatasync's time in 4.10–4.35 s").
//!
//! A bin is hot when it holds at least [`HOT_OVER_MEAN`] times the site's mean per bin and at
//! least half of its fullest bin; hot bins at most [`MERGE_BINS`] apart are one burst. The
//! site's time *concentrated* when its bursts cover at most half the window and hold at least
//! half its time; otherwise it is spread over the capture. Long waits count where they were;
//! a thread's shorter waits are spread over the stretches between its long ones (see the
//! module above).

use std::collections::HashMap;

use serde::Serialize;

use super::{gap_times, short_waits};
use crate::{
    model::{Kind, Profile, Segment, StackNames, Timeline},
    site::{SiteId, Sites},
};

/// The bins' width: the heatmap's rows.
pub const BIN_NS: u64 = 20_000_000;
/// How far above the mean a hot bin is.
pub const HOT_OVER_MEAN: f64 = 3.0;
/// Hot bins this many bins apart or closer are one burst.
pub const MERGE_BINS: usize = 2;
/// Bursts holding less of the site's time than this are not named.
const MIN_BURST_SHARE: f64 = 0.05;
/// Bursts listed in the summary.
const LISTED: usize = 4;

/// When a site's time concentrated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct When {
    /// One sentence: `62 % of fdatasync's time in 4.10–4.35 s`, or that it was spread.
    pub summary: String,
    /// Its bursts, largest share first (none when spread).
    pub bursts: Vec<Burst>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Burst {
    /// Seconds from the window's start.
    pub from_s: f64,
    pub to_s: f64,
    /// % of the site's time.
    pub share_pct: f64,
}

/// The blocked time of each of `sites` per bin over the window: by `tids`' long waits where
/// they were, and their short waits spread over their gaps.
pub fn series(
    profile: &Profile,
    names: &StackNames,
    timeline: &Timeline,
    resolved: &Sites,
    sites: &[SiteId],
    tids: &dyn Fn(u32) -> bool,
) -> Vec<Vec<f64>> {
    let window = profile.window;
    let bins = (window.len_ns().div_ceil(BIN_NS)).max(1) as usize;
    let mut out = vec![vec![0.0; bins]; sites.len()];
    let index: HashMap<&SiteId, usize> = sites.iter().enumerate().map(|(i, s)| (s, i)).collect();
    let mut of_stacks: HashMap<(u64, u64, Kind), Option<usize>> = HashMap::new();
    let mut site_of = |user: u64, kernel: u64, kind: Kind| -> Option<usize> {
        *of_stacks
            .entry((user, kernel, kind))
            .or_insert_with(|| match kind {
                Kind::Off(state) if !matches!(state.label(), "runqueue") => index
                    .get(&resolved.site(state, user, kernel, names))
                    .copied(),
                _ => None,
            })
    };
    let short = short_waits(profile, timeline);
    let add = |series: &mut Vec<f64>, from: u64, to: u64, weight: f64| {
        add_span(series, window.start_ns, from, to, weight);
    };
    for (&tid, line) in timeline.threads.iter().filter(|(t, _)| tids(**t)) {
        for w in line.waits.iter().filter(|w| !w.runqueue()) {
            if let Some(i) = site_of(w.user_stack, w.kernel_stack, Kind::Off(w.state)) {
                add(&mut out[i], w.start_ns, w.wake_ns(), 1.0);
            }
        }
        let Some(short) = short.get(&tid) else {
            continue;
        };
        let (_, off_all) = gap_times(line, line.from_ns, line.to_ns);
        let parts: Vec<(usize, f64)> = short
            .by_key
            .iter()
            .filter_map(|p| {
                let i = site_of(p.key.0, p.key.1, p.key.2)?;
                Some((i, p.time_ns as f64 / off_all.max(1) as f64))
            })
            .collect();
        for s in line.segments() {
            if let Segment::Gap {
                from_ns,
                to_ns,
                cpu_ns,
            } = s
            {
                let off = (to_ns - from_ns - cpu_ns) as f64 / (to_ns - from_ns).max(1) as f64;
                for &(i, p) in &parts {
                    add(&mut out[i], from_ns, to_ns, off * p.min(1.0));
                }
            }
        }
    }
    out
}

/// Adds `weight` ns per ns of `[from, to)` to the bins it covers.
fn add_span(series: &mut [f64], start: u64, from: u64, to: u64, weight: f64) {
    let mut at = from.max(start);
    while at < to {
        let bin = ((at - start) / BIN_NS) as usize;
        let Some(slot) = series.get_mut(bin) else {
            return;
        };
        let bin_end = start + (bin as u64 + 1) * BIN_NS;
        let end = to.min(bin_end);
        *slot += (end - at) as f64 * weight;
        at = end;
    }
}

/// When `series` (one site's time per bin) concentrated; `name` is what the sentence calls
/// the site (its blocking call). None for a site with no time.
pub fn when(series: &[f64], name: &str) -> Option<When> {
    let total: f64 = series.iter().sum();
    if total <= 0.0 {
        return None;
    }
    let mean = total / series.len() as f64;
    let max = series.iter().copied().fold(0.0, f64::max);
    let hot: Vec<bool> = series
        .iter()
        .map(|&v| v > 0.0 && v >= HOT_OVER_MEAN * mean && v >= 0.5 * max)
        .collect();
    let mut bursts: Vec<(usize, usize)> = Vec::new();
    for (i, _) in hot.iter().enumerate().filter(|(_, h)| **h) {
        match bursts.last_mut() {
            Some(last) if i - last.1 <= MERGE_BINS + 1 => last.1 = i,
            _ => bursts.push((i, i)),
        }
    }
    let secs = |bin: usize| (bin as u64 * BIN_NS) as f64 / 1e9;
    let mut found: Vec<Burst> = bursts
        .iter()
        .map(|&(a, b)| Burst {
            from_s: secs(a),
            to_s: secs(b + 1),
            share_pct: round1(100.0 * series[a..=b].iter().sum::<f64>() / total),
        })
        .filter(|b| b.share_pct >= 100.0 * MIN_BURST_SHARE)
        .collect();
    found.sort_by(|a, b| b.share_pct.total_cmp(&a.share_pct));
    let covered: usize = bursts.iter().map(|(a, b)| b - a + 1).sum();
    let held: f64 = found.iter().map(|b| b.share_pct).sum();
    if found.is_empty() || 2 * covered > series.len() || held < 50.0 {
        return Some(When {
            summary: format!("{name}'s time is spread over the capture, in no burst"),
            bursts: Vec::new(),
        });
    }
    let first = &found[0];
    let mut summary = format!(
        "{:.0} % of {name}'s time in {:.2}–{:.2} s",
        first.share_pct, first.from_s, first.to_s
    );
    if found.len() > 1 {
        let mut listed: Vec<&Burst> = found.iter().take(LISTED).collect();
        listed.sort_by(|a, b| a.from_s.total_cmp(&b.from_s));
        let spans: Vec<String> = listed
            .iter()
            .map(|b| format!("{:.2}–{:.2} s", b.from_s, b.to_s))
            .collect();
        summary.push_str(&format!(
            "; {:.0} % in {} bursts ({}{})",
            held,
            found.len(),
            spans.join(", "),
            if found.len() > LISTED { ", …" } else { "" }
        ));
    }
    Some(When {
        summary,
        bursts: found,
    })
}

/// The blocking call a site label names first: `fdatasync` of `fdatasync ← flush_log`.
pub fn call_of(label: &str) -> &str {
    label.split(" ← ").next().unwrap_or(label)
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}
