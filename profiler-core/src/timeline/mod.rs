//! Timeline: the kernel's timeline records (long waits, samples) and the threads' state at the
//! end → a [`Timeline`] per thread over the window (`build`); a capture cut to a time range
//! (`range`); when each blocking site's time concentrated (`bursts`). Pure.
//!
//! The kernel writes a wait only when it lasted at least the resolution; between two of a
//! thread's long waits the record's CPU counter says how much of the stretch the thread was
//! on the CPU, and the rest went to its shorter waits. Their sites are known over the whole
//! capture only (the aggregates): [`short_waits`] gives each thread's, to be spread over its
//! gaps in proportion to their off-CPU time.

pub mod bursts;
pub mod intervals;
pub mod range;

use std::collections::{BTreeMap, HashMap};

use profiler_common::{Counter, Thread, WaitState, thread_flags};

use crate::model::{
    Entry, GoroutineSlice, Kind, Profile, RawTimeline, Segment, ThreadLine, TimedSample, TimedWait,
    Timeline,
};

/// The timeline of a capture, or None when the programs did not write one.
pub fn build(
    raw: RawTimeline,
    threads: &HashMap<u32, Thread>,
    profile: &Profile,
) -> Option<Timeline> {
    if !raw.enabled {
        return None;
    }
    let window = profile.window;
    let mut lines: BTreeMap<u32, ThreadLine> = BTreeMap::new();
    for r in &raw.waits {
        let Some(state) = WaitState::from_u32(u32::from(r.state)) else {
            continue;
        };
        if r.start_ns < window.start_ns || r.start_ns >= window.stop_ns {
            continue;
        }
        lines.entry(r.tid).or_default().waits.push(TimedWait {
            start_ns: r.start_ns,
            blocked_ns: r.blocked_ns,
            runnable_ns: r.runnable_ns,
            state,
            user_stack: r.user_stack,
            kernel_stack: r.kernel_stack,
            waker_tid: r.waker_tid,
            cpu_before_ns: r.cpu_before_ns,
            waking_ns: r.waking_ns,
            resource: r.resource,
        });
    }
    for (&tid, t) in &profile.threads {
        let line = lines.entry(tid).or_default();
        let kernel = threads.get(&tid);
        let exited = kernel.is_some_and(|k| k.stats.flags & thread_flags::EXITED != 0);
        let to = match kernel {
            Some(k) if exited && k.stats.last_out_ns > window.start_ns => {
                k.stats.last_out_ns.min(window.stop_ns)
            }
            _ => window.stop_ns,
        };
        if let Some(k) = kernel.filter(|_| !exited) {
            line.waits
                .extend(open_wait(k, window.stop_ns, raw.resolution_ns));
        }
        line.waits.sort_by_key(|w| w.start_ns);
        drop_overlaps(&mut line.waits, to);
        // A thread alive throughout adds up to the window; one created during it, to less.
        let lived = if profile.mode.traces_switches() {
            t.total_ns()
        } else {
            u64::MAX
        };
        let first = line.waits.first().map_or(to, |w| w.start_ns);
        line.from_ns = to.saturating_sub(lived).max(window.start_ns).min(first);
        line.to_ns = to;
        line.cpu_ns = t.on_cpu_ns();
    }
    lines.retain(|tid, _| profile.threads.contains_key(tid));
    let mut samples: Vec<TimedSample> = raw
        .samples
        .iter()
        .filter(|s| s.ts_ns >= window.start_ns && s.ts_ns < window.stop_ns)
        .map(|s| TimedSample {
            tid: s.tid,
            ts_ns: s.ts_ns,
            user_stack: s.user_stack,
            kernel_stack: s.kernel_stack,
        })
        .collect();
    samples.sort_by_key(|s| (s.ts_ns, s.tid));
    Some(Timeline {
        resolution_ns: raw.resolution_ns,
        threads: lines,
        samples,
        lost: profile.counters.get(Counter::TimelineRingFull)
            + profile.counters.get(Counter::TimelineDropped),
        goroutines: goroutine_slices(&raw.go_waits, window, raw.resolution_ns),
    })
}

/// Goroutine waits in the window, at least `resolution_ns` long, by goroutine and start; an
/// open one (`end_ns` 0) up to the window's end.
fn goroutine_slices(
    records: &[profiler_common::TimelineGoWait],
    window: crate::model::Window,
    resolution_ns: u64,
) -> Vec<GoroutineSlice> {
    let mut out: Vec<GoroutineSlice> = records
        .iter()
        .filter_map(|r| {
            let end = if r.end_ns == 0 {
                window.stop_ns
            } else {
                r.end_ns.min(window.stop_ns)
            };
            let start = r.start_ns.max(window.start_ns);
            (end >= start + resolution_ns).then_some(GoroutineSlice {
                pid: r.tgid,
                g: r.g,
                start_ns: start,
                end_ns: end,
                user_stack: r.user_stack,
                reason: r.reason,
            })
        })
        .collect();
    out.sort_by_key(|s| (s.pid, s.g, s.start_ns));
    // A goroutine's waits do not overlap; a `g` reused after its goroutine exited starts
    // after the last one ended. Whatever the records say, keep them apart.
    out.dedup_by(|later, earlier| {
        later.pid == earlier.pid && later.g == earlier.g && later.start_ns < earlier.end_ns
    });
    out
}

/// The wait a thread was in when the window closed, or had just left without a switch-out
/// closing its cycle: the kernel wrote no record of it. Split by the tracepoint times (the
/// wakeup, the switch-in).
fn open_wait(k: &Thread, stop_ns: u64, resolution_ns: u64) -> Option<TimedWait> {
    let slot = &k.wait;
    let state = WaitState::from_u32(slot.state)?;
    if slot.ts_ns == 0 || slot.ts_ns >= stop_ns {
        return None;
    }
    let end = if k.stats.last_in_ns > slot.ts_ns {
        k.stats.last_in_ns.min(stop_ns)
    } else {
        stop_ns
    };
    if end - slot.ts_ns < resolution_ns {
        return None;
    }
    let runqueue = matches!(
        state,
        WaitState::RunqueuePreempted | WaitState::RunqueueWoken
    );
    let wake = if runqueue {
        slot.ts_ns
    } else if slot.wake_ts_ns >= slot.ts_ns && slot.wake_ts_ns < end {
        slot.wake_ts_ns
    } else {
        end
    };
    Some(TimedWait {
        start_ns: slot.ts_ns,
        blocked_ns: wake - slot.ts_ns,
        runnable_ns: end - wake,
        state,
        user_stack: slot.user_stack,
        kernel_stack: slot.kernel_stack,
        waker_tid: slot.waker_tid,
        cpu_before_ns: k.stats.on_cpu_ns,
        waking_ns: slot.wake_ts_ns,
        resource: slot.resource,
    })
}

/// Waits sorted by start: one that begins before the previous ended (a tid the kernel gave
/// to a new thread) is dropped, and none runs past `to_ns`.
fn drop_overlaps(waits: &mut Vec<TimedWait>, to_ns: u64) {
    let mut end = 0;
    waits.retain_mut(|w| {
        if w.start_ns < end || w.start_ns >= to_ns {
            return false;
        }
        let over = w.end_ns().saturating_sub(to_ns);
        let runnable_cut = over.min(w.runnable_ns);
        w.runnable_ns -= runnable_cut;
        w.blocked_ns -= (over - runnable_cut).min(w.blocked_ns);
        end = w.end_ns();
        true
    });
}

/// An entry's identity inside a thread: stacks and kind.
pub type EntryKey = (u64, u64, Kind);

pub fn entry_key(e: &Entry) -> EntryKey {
    (e.user_stack, e.kernel_stack, e.kind)
}

/// The entry keys a wait's time goes to: its blocked part, then its runnable part.
pub fn wait_keys(w: &TimedWait) -> (EntryKey, EntryKey) {
    let own = (w.user_stack, w.kernel_stack, Kind::Off(w.state));
    if w.runqueue() {
        (own, own)
    } else {
        (
            own,
            (
                w.user_stack,
                w.kernel_stack,
                Kind::Off(WaitState::RunqueueWoken),
            ),
        )
    }
}

/// Off-CPU time and wait count of one thread's entries that its long waits do not account
/// for: its waits shorter than the resolution, and time with no site (steal, lost waits).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShortWaits {
    /// Largest first.
    pub by_key: Vec<ShortPart>,
    pub total_ns: u64,
}

/// One entry's short waits over the whole capture.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShortPart {
    pub key: EntryKey,
    pub time_ns: u64,
    pub waits: u64,
    /// Bounds of those waits: the entry's shortest, and its longest below the resolution
    /// when it has long waits too.
    pub min_ns: u64,
    pub max_ns: u64,
}

/// Per thread, [`ShortWaits`] over the whole capture.
pub fn short_waits(profile: &Profile, timeline: &Timeline) -> HashMap<u32, ShortWaits> {
    let mut long: HashMap<(u32, EntryKey), (u64, u64)> = HashMap::new();
    for (&tid, line) in &timeline.threads {
        for w in &line.waits {
            let (blocked, runnable) = wait_keys(w);
            if w.runqueue() {
                let e = long.entry((tid, blocked)).or_default();
                e.0 += w.blocked_ns + w.runnable_ns;
                e.1 += 1;
                continue;
            }
            let e = long.entry((tid, blocked)).or_default();
            e.0 += w.blocked_ns;
            e.1 += 1;
            if w.runnable_ns > 0 {
                let e = long.entry((tid, runnable)).or_default();
                e.0 += w.runnable_ns;
                e.1 += 1;
            }
        }
    }
    let mut out: HashMap<u32, ShortWaits> = HashMap::new();
    for e in profile.entries.iter().filter(|e| e.kind != Kind::OnCpu) {
        let key = entry_key(e);
        let (ns, count) = long.get(&(e.tid, key)).copied().unwrap_or_default();
        let short = e.time_ns.saturating_sub(ns);
        if short == 0 {
            continue;
        }
        let s = out.entry(e.tid).or_default();
        s.by_key.push(ShortPart {
            key,
            time_ns: short,
            waits: e.waits.saturating_sub(count),
            min_ns: e.min_ns,
            max_ns: if count > 0 {
                e.max_ns.min(timeline.resolution_ns)
            } else {
                e.max_ns
            },
        });
        s.total_ns += short;
    }
    for s in out.values_mut() {
        s.by_key
            .sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then(a.key.cmp(&b.key)));
    }
    out
}

/// A thread's CPU time and short-wait time inside `[from, to)`: each gap's, in proportion to
/// how much of the gap lies inside.
pub fn gap_times(line: &ThreadLine, from_ns: u64, to_ns: u64) -> (u64, u64) {
    let (mut cpu, mut off) = (0u128, 0u128);
    for s in line.segments() {
        if let Segment::Gap {
            from_ns: a,
            to_ns: b,
            cpu_ns,
        } = s
        {
            let inside = crate::model::timeline::overlap(a, b, from_ns, to_ns) as u128;
            let len = (b - a).max(1) as u128;
            cpu += cpu_ns as u128 * inside / len;
            off += (b - a - cpu_ns) as u128 * inside / len;
        }
    }
    (cpu as u64, off as u64)
}

/// Indexes of [`state_bins`]' figures.
pub const RUNNING: usize = 0;
pub const RUNNABLE: usize = 1;
pub const SLEEP: usize = 2;
pub const IO: usize = 3;
pub const OTHER: usize = 4;

/// The slot of a kind's time in [`state_bins`].
pub fn state_slot(kind: Kind) -> usize {
    match kind {
        Kind::OnCpu => RUNNING,
        Kind::Off(WaitState::Sleep) => SLEEP,
        Kind::Off(WaitState::Io) => IO,
        Kind::Off(WaitState::RunqueuePreempted | WaitState::RunqueueWoken) => RUNNABLE,
        Kind::Off(WaitState::Other) => OTHER,
    }
}

/// A thread's time per state (running, runnable, sleep, io, other) in each of `bins` bins of
/// `bin_ns` from `start_ns`: long waits where they were, each gap's CPU time and short waits
/// (by the states of the thread's short waits over the capture) spread evenly over it.
pub fn state_bins(
    line: &ThreadLine,
    short: Option<&ShortWaits>,
    start_ns: u64,
    bin_ns: u64,
    bins: usize,
) -> Vec<[f64; 5]> {
    let mut out = vec![[0.0; 5]; bins];
    let mut shares = [0.0; 5];
    if let Some(s) = short.filter(|s| s.total_ns > 0) {
        for p in &s.by_key {
            shares[state_slot(p.key.2)] += p.time_ns as f64 / s.total_ns as f64;
        }
    } else {
        shares[OTHER] = 1.0;
    }
    let mut add = |from: u64, to: u64, weights: [f64; 5]| {
        let mut at = from.max(start_ns);
        while at < to {
            let bin = ((at - start_ns) / bin_ns) as usize;
            let Some(slot) = out.get_mut(bin) else { return };
            let end = to.min(start_ns + (bin as u64 + 1) * bin_ns);
            for (v, w) in slot.iter_mut().zip(weights) {
                *v += (end - at) as f64 * w;
            }
            at = end;
        }
    };
    for s in line.segments() {
        match s {
            Segment::Wait(w) => {
                let mut only = [0.0; 5];
                only[state_slot(Kind::Off(w.state))] = 1.0;
                add(w.start_ns, w.wake_ns(), only);
                let mut runnable = [0.0; 5];
                runnable[RUNNABLE] = 1.0;
                add(w.wake_ns(), w.end_ns(), runnable);
            }
            Segment::Gap {
                from_ns,
                to_ns,
                cpu_ns,
            } => {
                let cpu = cpu_ns as f64 / (to_ns - from_ns).max(1) as f64;
                let mut w = shares.map(|s| s * (1.0 - cpu));
                w[RUNNING] += cpu;
                add(from_ns, to_ns, w);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
