//! A capture cut to a time range (`profiler replay --from S --to S`, `diff --from --to`): the
//! same model over `[from, to)` only, so every output is the range's.
//!
//! Per thread, from its timeline:
//! - a long wait's time inside the range goes to its entry (blocked part in its state, the
//!   runnable part after its wakeup to the run queue), exactly; it counts as one wait of the
//!   range when any of it lies inside;
//! - the CPU time of the gaps between long waits (each gap's in proportion to how much of it
//!   lies inside) is apportioned to stacks by the samples taken inside the range; the
//!   profiler's own time and the time charged before a switch-in in proportion;
//! - the time of the waits shorter than the resolution (and of time without a site: steal,
//!   lost waits) is spread over the gaps' off-CPU time: each of the thread's short-wait
//!   entries gets the share of its whole-capture time that the range holds of the gaps'
//!   off-CPU time.
//!
//! Histograms and wakers follow the same rule: the long waits inside exactly, the rest in
//! proportion.

use std::collections::{BTreeMap, HashMap};

use profiler_common::{Counter, SiteKey, WaitHist, hist_bucket, stack_id};
use thiserror::Error;

use super::{EntryKey, ShortWaits, entry_key, gap_times, short_waits, wait_keys};
use crate::model::{
    CaptureNote, CaptureRange, Entry, GoroutineSlice, Kind, Profile, SavedCapture, ThreadLine,
    ThreadTime, TimedWait, Timeline, Window, timeline::overlap,
};

#[derive(Debug, Error, PartialEq)]
pub enum RangeError {
    #[error(
        "this capture has no timeline (saved before timelines were recorded, or with \
         --no-timeline): a range of it cannot be told apart"
    )]
    NoTimeline,
    #[error("the range {from_s}–{to_s} s is empty or outside the capture's 0–{of_s:.3} s")]
    Empty { from_s: f64, to_s: f64, of_s: f64 },
}

/// `saved` over `[from_s, to_s)` seconds from the start of its window (`to_s` beyond the end
/// is the end).
pub fn slice(saved: &SavedCapture, from_s: f64, to_s: f64) -> Result<SavedCapture, RangeError> {
    let timeline = saved.timeline.as_ref().ok_or(RangeError::NoTimeline)?;
    let whole = saved.profile.window;
    let of_s = whole.len_ns() as f64 / 1e9;
    let at = |s: f64| whole.start_ns + (s.max(0.0) * 1e9).round() as u64;
    let window = Window {
        start_ns: at(from_s).min(whole.stop_ns),
        stop_ns: at(to_s).min(whole.stop_ns),
    };
    if window.stop_ns <= window.start_ns || from_s < 0.0 {
        return Err(RangeError::Empty { from_s, to_s, of_s });
    }
    let profile = profile_in(&saved.profile, timeline, window);
    let mut meta = saved.meta.clone();
    let range = CaptureRange {
        from_s: (window.start_ns - whole.start_ns) as f64 / 1e9,
        to_s: (window.stop_ns - whole.start_ns) as f64 / 1e9,
        of_s,
    };
    meta.notes.push(CaptureNote::Text(format!(
        "This is {:.3}–{:.3} s of a {of_s:.3} s capture. Inside it, waits of {} ms and more are \
         placed exactly; the CPU time between them is the thread's own, apportioned to stacks \
         by the samples taken inside; the time of shorter waits is spread over the stretches \
         between the long ones, by each thread's short waits of the whole capture.",
        range.from_s,
        range.to_s,
        timeline.resolution_ns as f64 / 1e6
    )));
    meta.range = Some(range);
    Ok(SavedCapture {
        format: saved.format,
        meta,
        profile,
        names: saved.names.clone(),
        timeline: Some(timeline_in(timeline, window)),
    })
}

/// What one thread's part is read from besides its line.
struct Inside<'a> {
    window: Window,
    short: Option<&'a ShortWaits>,
    /// Its samples inside the range, by stacks.
    samples: Option<&'a BTreeMap<(u64, u64), u64>>,
}

/// What one thread did inside the range, by entry key: time, waits, and the longest and
/// shortest of the long waits.
#[derive(Default)]
struct ThreadPart {
    entries: BTreeMap<EntryKey, Entry>,
    /// Share of the thread's short-wait time and CPU time the range holds.
    off_share: f64,
    cpu_share: f64,
    cpu_ns: u64,
}

fn profile_in(whole: &Profile, timeline: &Timeline, window: Window) -> Profile {
    let short = short_waits(whole, timeline);
    let samples = sample_counts(timeline, window);
    let mut out = Profile::empty(whole.mode, window, whole.period_ns);
    let mut long_hists: HashMap<SiteKey, WaitHist> = HashMap::new();
    let mut shares: HashMap<u32, f64> = HashMap::new();
    for (&tid, t) in &whole.threads {
        let Some(line) = timeline.threads.get(&tid) else {
            continue;
        };
        let inside = Inside {
            window,
            short: short.get(&tid),
            samples: samples.get(&tid),
        };
        let part = thread_part(whole, tid, t, line, &inside, &mut long_hists);
        let entries: Vec<Entry> = part
            .entries
            .into_values()
            .filter(|e| e.time_ns > 0)
            .collect();
        if entries.is_empty() {
            continue;
        }
        let time = thread_time(t, &entries, part.cpu_ns, whole.mode.traces_switches());
        shares.insert(tid, part.off_share);
        out.threads.insert(tid, time);
        out.entries.extend(entries);
    }
    out.entries
        .sort_by_key(|e| (e.tid, e.kind, e.user_stack, e.kernel_stack));
    out.processes = whole.processes.clone();
    out.site_hists = site_hists(whole, timeline, &short, &shares, long_hists);
    out.runqueue_hists = scaled_runqueue(whole, &out);
    out.wakers = wakers_in(whole, &out);
    out.counters = whole.counters;
    let samples: u64 = out.threads.values().map(|t| t.samples).sum();
    out.counters.set(Counter::Samples, samples);
    out.counters
        .set(Counter::Waits, out.entries.iter().map(|e| e.waits).sum());
    out.open_waits = if window.stop_ns == whole.window.stop_ns {
        whole.open_waits
    } else {
        0
    };
    out.blocked_at_start = if window.start_ns == whole.window.start_ns {
        whole.blocked_at_start
    } else {
        0
    };
    out.lost_seeds = whole.lost_seeds;
    out.tables_at_end = whole.tables_at_end.clone();
    out
}

/// One thread's entries inside the range.
fn thread_part(
    whole: &Profile,
    tid: u32,
    t: &ThreadTime,
    line: &ThreadLine,
    inside: &Inside<'_>,
    long_hists: &mut HashMap<SiteKey, WaitHist>,
) -> ThreadPart {
    let (from, to) = (inside.window.start_ns, inside.window.stop_ns);
    let (cpu_in, off_in) = gap_times(line, from, to);
    let (cpu_all, off_all) = gap_times(line, line.from_ns, line.to_ns);
    let mut part = ThreadPart {
        off_share: ratio(off_in, off_all),
        cpu_share: ratio(cpu_in, cpu_all),
        cpu_ns: cpu_in,
        ..ThreadPart::default()
    };
    let pid = t.pid;
    for w in line
        .waits
        .iter()
        .filter(|w| overlap(w.start_ns, w.end_ns(), from, to) > 0)
    {
        let (blocked, runnable) = wait_keys(w);
        if w.runqueue() {
            let e = entry_at(&mut part.entries, pid, tid, blocked);
            e.time_ns += overlap(w.start_ns, w.end_ns(), from, to);
            e.finished(w.runnable_ns);
            continue;
        }
        let inside_blocked = overlap(w.start_ns, w.wake_ns(), from, to);
        if w.blocked_ns > 0 {
            let e = entry_at(&mut part.entries, pid, tid, blocked);
            e.time_ns += inside_blocked;
            e.finished(w.blocked_ns);
            add_long_hist(long_hists, w);
        }
        let inside_runnable = overlap(w.wake_ns(), w.end_ns(), from, to);
        if inside_runnable > 0 {
            let e = entry_at(&mut part.entries, pid, tid, runnable);
            e.time_ns += inside_runnable;
            e.finished(w.runnable_ns);
        }
    }
    for s in inside.short.map_or(&[][..], |s| &s.by_key[..]) {
        let e = entry_at(&mut part.entries, pid, tid, s.key);
        e.time_ns += scale(s.time_ns, part.off_share);
        let n = scale(s.waits, part.off_share);
        if n > 0 {
            e.min_ns = if e.waits == 0 {
                s.min_ns
            } else {
                e.min_ns.min(s.min_ns)
            };
            e.max_ns = e.max_ns.max(s.max_ns);
            e.waits += n;
        }
    }
    on_cpu(&mut part, whole, tid, pid, inside.samples);
    part
}

fn entry_at(
    entries: &mut BTreeMap<EntryKey, Entry>,
    pid: u32,
    tid: u32,
    key: EntryKey,
) -> &mut Entry {
    entries
        .entry(key)
        .or_insert_with(|| Entry::new(pid, tid, key.0, key.1, key.2))
}

/// The thread's CPU time inside the range by stack: the samples inside apportion its own
/// work, the profiler's time and the time charged before switch-ins go in proportion.
fn on_cpu(
    part: &mut ThreadPart,
    whole: &Profile,
    tid: u32,
    pid: u32,
    counts: Option<&BTreeMap<(u64, u64), u64>>,
) {
    let empty = BTreeMap::new();
    let counts = counts.unwrap_or(&empty);
    let n: u64 = counts.values().sum();
    let mut put = |user: u64, kernel: u64, samples: u64, ns: u64| {
        let mut e = Entry::new(pid, tid, user, kernel, Kind::OnCpu);
        e.samples = samples;
        e.time_ns = ns;
        part.entries.insert(entry_key(&e), e);
    };
    if !whole.mode.traces_switches() {
        for (&(user, kernel), &c) in counts {
            put(user, kernel, c, c * whole.period_ns);
        }
        part.cpu_ns = n * whole.period_ns;
        return;
    }
    if !whole.mode.samples_on_cpu() {
        return;
    }
    let mut special = 0;
    for e in whole.entries.iter().filter(|e| {
        e.tid == tid
            && e.kind == Kind::OnCpu
            && e.samples == 0
            && e.user_stack != stack_id::UNSAMPLED
    }) {
        let ns = scale(e.time_ns, part.cpu_share).min(part.cpu_ns - special);
        special += ns;
        put(e.user_stack, e.kernel_stack, 0, ns);
    }
    let work = part.cpu_ns - special;
    if n == 0 {
        put(stack_id::UNSAMPLED, stack_id::EMPTY, 0, work);
        return;
    }
    for (&(user, kernel), &c) in counts {
        put(
            user,
            kernel,
            c,
            (work as u128 * c as u128 / n as u128) as u64,
        );
    }
}

/// Per thread, its samples inside `window` by stacks.
fn sample_counts(timeline: &Timeline, window: Window) -> HashMap<u32, BTreeMap<(u64, u64), u64>> {
    let first = timeline
        .samples
        .partition_point(|s| s.ts_ns < window.start_ns);
    let mut out: HashMap<u32, BTreeMap<(u64, u64), u64>> = HashMap::new();
    for s in timeline.samples[first..]
        .iter()
        .take_while(|s| s.ts_ns < window.stop_ns)
    {
        *out.entry(s.tid)
            .or_default()
            .entry((s.user_stack, s.kernel_stack))
            .or_default() += 1;
    }
    out
}

/// A thread's figures from its entries inside the range.
fn thread_time(whole: &ThreadTime, entries: &[Entry], cpu_ns: u64, exact: bool) -> ThreadTime {
    let mut t = ThreadTime {
        pid: whole.pid,
        name: whole.name.clone(),
        on_cpu_exact: whole.on_cpu_exact,
        ..ThreadTime::default()
    };
    let (mut on_cpu, mut profiler) = (0, 0);
    for e in entries {
        match e.kind {
            Kind::OnCpu => {
                t.samples += e.samples;
                match e.user_stack {
                    stack_id::PROFILER => profiler += e.time_ns,
                    stack_id::SWITCHING_IN => t.switching_in_ns += e.time_ns,
                    _ => {}
                }
                on_cpu += e.time_ns;
            }
            Kind::Off(state) => {
                t.time.add_wait(state, e.time_ns);
                match e.user_stack {
                    stack_id::UNCHARGED => t.uncharged_ns += e.time_ns,
                    stack_id::LOST_WAITS => t.lost_ns += e.time_ns,
                    _ => {}
                }
            }
        }
    }
    let on_cpu = if exact { cpu_ns } else { on_cpu };
    t.time.profiler = profiler.min(on_cpu);
    t.time.running = on_cpu - t.time.profiler;
    t
}

/// One long wait in its site's histogram.
fn add_long_hist(hists: &mut HashMap<SiteKey, WaitHist>, w: &TimedWait) {
    let site = SiteKey {
        state: w.state as u32,
        epoch: 0,
        user_stack: w.user_stack,
        kernel_stack: w.kernel_stack,
    };
    let b = &mut hists.entry(site).or_default().buckets[hist_bucket(w.blocked_ns)];
    *b = b.saturating_add(1);
}

/// Each site's histogram inside the range: its long waits there, and its other waits in
/// proportion (the whole capture's histogram less its long waits, times the share of the
/// site's short-wait time the range holds).
fn site_hists(
    whole: &Profile,
    timeline: &Timeline,
    short: &HashMap<u32, ShortWaits>,
    shares: &HashMap<u32, f64>,
    inside: HashMap<SiteKey, WaitHist>,
) -> HashMap<SiteKey, WaitHist> {
    let mut all_long: HashMap<SiteKey, WaitHist> = HashMap::new();
    for line in timeline.threads.values() {
        for w in line
            .waits
            .iter()
            .filter(|w| !w.runqueue() && w.blocked_ns > 0)
        {
            add_long_hist(&mut all_long, w);
        }
    }
    // Per site: (short time inside, short time in all).
    let mut short_share: HashMap<SiteKey, (f64, f64)> = HashMap::new();
    for (tid, s) in short {
        let share = shares.get(tid).copied().unwrap_or(0.0);
        for p in &s.by_key {
            let (user, kernel, kind) = p.key;
            let ns = p.time_ns;
            let Kind::Off(state) = kind else { continue };
            let site = SiteKey {
                state: state as u32,
                epoch: 0,
                user_stack: user,
                kernel_stack: kernel,
            };
            let e = short_share.entry(site).or_default();
            e.0 += ns as f64 * share;
            e.1 += ns as f64;
        }
    }
    let mut out = inside;
    for (site, hist) in &whole.site_hists {
        let (inside_ns, all_ns) = short_share.get(site).copied().unwrap_or_default();
        let share = if all_ns > 0.0 {
            inside_ns / all_ns
        } else {
            0.0
        };
        let long = all_long.get(site);
        let h = out.entry(*site).or_default();
        for (i, b) in h.buckets.iter_mut().enumerate() {
            let shorter = hist.buckets[i].saturating_sub(long.map_or(0, |l| l.buckets[i]));
            *b = b.saturating_add((f64::from(shorter) * share).round() as u32);
        }
    }
    out.retain(|_, h| h.buckets.iter().any(|&b| b > 0));
    out
}

/// The run-queue histograms in proportion to the range's run-queue time.
fn scaled_runqueue(whole: &Profile, inside: &Profile) -> [WaitHist; 2] {
    let runnable = |p: &Profile| -> u64 { p.threads.values().map(|t| t.time.runnable).sum() };
    let share = ratio(runnable(inside), runnable(whole));
    whole.runqueue_hists.map(|h| WaitHist {
        buckets: h.buckets.map(|b| (f64::from(b) * share).round() as u32),
    })
}

/// Each site's wakers in proportion to the site's time inside the range.
fn wakers_in(whole: &Profile, inside: &Profile) -> Vec<crate::model::Waker> {
    let time = |p: &Profile| -> HashMap<(u32, EntryKey), u64> {
        p.entries
            .iter()
            .map(|e| ((e.tid, entry_key(e)), e.time_ns))
            .collect()
    };
    let (all, part) = (time(whole), time(inside));
    whole
        .wakers
        .iter()
        .filter_map(|w| {
            let key = (w.tid, (w.user_stack, w.kernel_stack, Kind::Off(w.state)));
            let share = ratio(part.get(&key).copied()?, all.get(&key).copied()?);
            let count = scale(w.count, share);
            (count > 0).then(|| crate::model::Waker {
                count,
                time_ns: scale(w.time_ns, share),
                ..w.clone()
            })
        })
        .collect()
}

/// The timeline inside `window`: waits cut at its ends, the CPU counter restarted at its
/// start, the samples inside.
fn timeline_in(timeline: &Timeline, window: Window) -> Timeline {
    let (from, to) = (window.start_ns, window.stop_ns);
    let mut threads = BTreeMap::new();
    for (&tid, line) in &timeline.threads {
        let (a, b) = (line.from_ns.max(from), line.to_ns.min(to));
        if a >= b {
            continue;
        }
        let cpu_at_a = gap_times(line, line.from_ns, a).0;
        let mut waits = Vec::new();
        for w in line
            .waits
            .iter()
            .filter(|w| overlap(w.start_ns, w.end_ns(), a, b) > 0)
        {
            let blocked = overlap(w.start_ns, w.wake_ns(), a, b);
            let runnable = overlap(w.wake_ns(), w.end_ns(), a, b);
            waits.push(TimedWait {
                start_ns: w.start_ns.max(a),
                blocked_ns: blocked,
                runnable_ns: runnable,
                cpu_before_ns: w.cpu_before_ns.saturating_sub(cpu_at_a),
                ..*w
            });
        }
        threads.insert(
            tid,
            ThreadLine {
                from_ns: a,
                to_ns: b,
                cpu_ns: gap_times(line, a, b).0,
                waits,
            },
        );
    }
    let first = timeline.samples.partition_point(|s| s.ts_ns < from);
    let samples = timeline.samples[first..]
        .iter()
        .take_while(|s| s.ts_ns < to)
        .copied()
        .collect();
    let goroutines = timeline
        .goroutines
        .iter()
        .filter(|g| overlap(g.start_ns, g.end_ns, from, to) > 0)
        .map(|g| GoroutineSlice {
            start_ns: g.start_ns.max(from),
            end_ns: g.end_ns.min(to),
            ..*g
        })
        .collect();
    Timeline {
        resolution_ns: timeline.resolution_ns,
        threads,
        samples,
        lost: timeline.lost,
        goroutines,
    }
}

fn ratio(part: u64, all: u64) -> f64 {
    if all == 0 {
        0.0
    } else {
        (part as f64 / all as f64).min(1.0)
    }
}

fn scale(v: u64, share: f64) -> u64 {
    (v as f64 * share).round() as u64
}
