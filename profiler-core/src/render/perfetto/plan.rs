//! The trace's layout, decided before anything is written: its processes, one track per
//! thread with its slices cut to nest, each wakeup a flow, and every event in the order it
//! is written.

use std::collections::HashMap;

use super::tracks::{Slice, Tracks};

/// Track uuids: processes and threads are numbered from these, by their order in the
/// `Tracks`, so no two tracks share one however pids and tids repeat.
const PROCESS_UUID_BASE: u64 = 1 << 40;
const THREAD_UUID_BASE: u64 = 2 << 40;

pub(super) fn process_uuid(i: usize) -> u64 {
    PROCESS_UUID_BASE + i as u64
}

pub(super) fn thread_uuid(i: usize) -> u64 {
    THREAD_UUID_BASE + i as u64
}

pub(super) struct PlannedProcess<'a> {
    pub(super) pid: u32,
    pub(super) name: &'a str,
}

/// A thread's track: its slices after sorting and cutting overlaps.
pub(super) struct PlannedTrack<'a> {
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) name: &'a str,
    /// Index into `TrackPlan::processes`.
    pub(super) process: usize,
    pub(super) slices: Vec<PlannedSlice<'a>>,
}

pub(super) struct PlannedSlice<'a> {
    pub(super) start_ns: u64,
    pub(super) end_ns: u64,
    pub(super) slice: &'a Slice,
    /// Wakeups that end here.
    pub(super) flows_in: Vec<u64>,
}

/// What one packet after the descriptors carries.
pub(super) enum Item {
    Begin {
        track: usize,
        slice: usize,
    },
    End {
        track: usize,
    },
    /// A wakeup's instant event: on the waker's track (`out`, the flow's start), or on the
    /// wakee's when no slice of its follows the wakeup (the flow's end). `other` is the track
    /// at the other end.
    Wake {
        track: usize,
        other: usize,
        flow: u64,
        out: bool,
    },
    Sample {
        sample: usize,
        track: usize,
    },
}

/// The trace's layout, decided before anything is written: processes, tracks, and every
/// event in the order it is written.
pub(super) struct TrackPlan<'a> {
    pub(super) processes: Vec<PlannedProcess<'a>>,
    pub(super) tracks: Vec<PlannedTrack<'a>>,
    /// By timestamp; events of one track stay in the order that nests them.
    pub(super) items: Vec<(u64, Item)>,
    pub(super) first_ts: u64,
}

/// A wakeup's instant event on one track, before it is placed among the track's slices.
struct Wake {
    ts: u64,
    other: usize,
    flow: u64,
    out: bool,
}

impl<'a> TrackPlan<'a> {
    pub(super) fn new(timeline: &'a Tracks) -> Self {
        let (processes, mut tracks, track_of_tid) = tracks(timeline);
        let wakes = place_wakeups(timeline, &mut tracks, &track_of_tid);
        let mut items: Vec<(u64, Item)> = Vec::new();
        // Per item: whether it comes after its track's last flow start of its timestamp.
        let mut after_flow_start: Vec<bool> = Vec::new();
        for (t, (track, wakes)) in tracks.iter().zip(wakes).enumerate() {
            let first = items.len();
            track_items(t, track, wakes, &mut items);
            after_flow_start.extend(after_flow_start_marks(&items[first..]));
        }
        for (i, s) in timeline.samples.iter().enumerate() {
            if let Some(&track) = track_of_tid.get(&s.tid) {
                items.push((s.ts_ns, Item::Sample { sample: i, track }));
                after_flow_start.push(false);
            }
        }
        // The trace processor reads events by timestamp, equal ones in file order, and drops
        // a flow's end read before its start. A wakee's slice often starts at the very
        // nanosecond of its wakeup, so at each timestamp every track's events up to its last
        // flow start come first, then the rest. The sort is stable and `after_flow_start`
        // never goes from true to false within a track's timestamp, so each track keeps the
        // order that nests its events. (A track whose events at one timestamp end a flow
        // before starting one still comes early as a whole: were that flow's start on a later
        // track at the same timestamp, it would be lost. It takes a slice after a gap, woken
        // and waking within one nanosecond.)
        let mut keyed: Vec<(bool, (u64, Item))> = after_flow_start.into_iter().zip(items).collect();
        keyed.sort_by_key(|(after, (ts, _))| (*ts, *after));
        let items: Vec<(u64, Item)> = keyed.into_iter().map(|(_, item)| item).collect();
        let first_ts = items.first().map_or(0, |(ts, _)| *ts);
        TrackPlan {
            processes,
            tracks,
            items,
            first_ts,
        }
    }
}

/// The processes, and one track per tid with its slices cut (`cut_overlaps`), and each tid's
/// track.
fn tracks(
    timeline: &Tracks,
) -> (
    Vec<PlannedProcess<'_>>,
    Vec<PlannedTrack<'_>>,
    HashMap<u32, usize>,
) {
    let mut processes: Vec<PlannedProcess<'_>> = Vec::new();
    let mut process_of_pid: HashMap<u32, usize> = HashMap::new();
    for p in &timeline.processes {
        process_of_pid.entry(p.pid).or_insert_with(|| {
            processes.push(PlannedProcess {
                pid: p.pid,
                name: &p.name,
            });
            processes.len() - 1
        });
    }
    // One track per tid: a thread listed twice is one thread with both lists of slices
    // (two thread tracks with one tid would read as tid reuse).
    let mut tracks: Vec<PlannedTrack<'_>> = Vec::new();
    let mut track_of_tid: HashMap<u32, usize> = HashMap::new();
    let mut slices_of: Vec<Vec<&Slice>> = Vec::new();
    for t in &timeline.threads {
        let i = *track_of_tid.entry(t.tid).or_insert_with(|| {
            let process = *process_of_pid.entry(t.pid).or_insert_with(|| {
                // A process the timeline does not list: its track, unnamed.
                processes.push(PlannedProcess {
                    pid: t.pid,
                    name: "",
                });
                processes.len() - 1
            });
            tracks.push(PlannedTrack {
                pid: t.pid,
                tid: t.tid,
                name: &t.name,
                process,
                slices: Vec::new(),
            });
            slices_of.push(Vec::new());
            tracks.len() - 1
        });
        slices_of[i].extend(&t.slices);
    }
    for (track, slices) in tracks.iter_mut().zip(slices_of) {
        cut_overlaps(track, slices);
    }
    (processes, tracks, track_of_tid)
}

/// A track's slices by start, each starting where the one before ended at the earliest; a
/// slice that ends before that is left out.
fn cut_overlaps<'a>(track: &mut PlannedTrack<'a>, mut slices: Vec<&'a Slice>) {
    slices.sort_by_key(|s| (s.start_ns, s.end_ns));
    let mut covered_to = 0;
    for s in slices {
        let start_ns = s.start_ns.max(covered_to);
        let overlapped = s.start_ns < covered_to;
        if s.end_ns < start_ns || (overlapped && s.end_ns <= covered_to) {
            continue;
        }
        covered_to = s.end_ns;
        track.slices.push(PlannedSlice {
            start_ns,
            end_ns: s.end_ns,
            slice: s,
            flows_in: Vec::new(),
        });
    }
}

/// Each wakeup as a flow: its start an instant event on the waker's track, its end the
/// wakee's next slice (or an instant event on the wakee's track when none follows). The
/// instant events per track.
fn place_wakeups(
    timeline: &Tracks,
    tracks: &mut [PlannedTrack<'_>],
    track_of_tid: &HashMap<u32, usize>,
) -> Vec<Vec<Wake>> {
    let mut wakes: Vec<Vec<Wake>> = tracks.iter().map(|_| Vec::new()).collect();
    for (n, w) in timeline.wakeups.iter().enumerate() {
        let (Some(&waker), Some(&wakee)) = (
            track_of_tid.get(&w.waker_tid),
            track_of_tid.get(&w.wakee_tid),
        ) else {
            continue;
        };
        let flow = n as u64 + 1;
        wakes[waker].push(Wake {
            ts: w.waker_ts_ns,
            other: wakee,
            flow,
            out: true,
        });
        // Not before the waker's side: a flow runs from its earliest event on.
        let from = w.wakee_ts_ns.max(w.waker_ts_ns);
        let slices = &mut tracks[wakee].slices;
        let next = slices.partition_point(|s| s.start_ns < from);
        match slices.get_mut(next) {
            Some(s) => s.flows_in.push(flow),
            None => wakes[wakee].push(Wake {
                ts: from,
                other: waker,
                flow,
                out: false,
            }),
        }
    }
    wakes
}

/// Track `t`'s events in the order that nests them: its slices' begins and ends, its instant
/// events in their place among them.
fn track_items(
    t: usize,
    track: &PlannedTrack<'_>,
    mut wakes: Vec<Wake>,
    items: &mut Vec<(u64, Item)>,
) {
    wakes.sort_by_key(|w| w.ts);
    let mut wakes = wakes.into_iter().peekable();
    // Instant events up to `until` (inclusive or not), in their place among the slices.
    let mut wakes_until = |items: &mut Vec<(u64, Item)>, until: u64, inclusive: bool| {
        while let Some(w) = wakes.next_if(|w| w.ts < until || (inclusive && w.ts == until)) {
            let item = Item::Wake {
                track: t,
                other: w.other,
                flow: w.flow,
                out: w.out,
            };
            items.push((w.ts, item));
        }
    };
    for (i, s) in track.slices.iter().enumerate() {
        wakes_until(items, s.start_ns, false);
        items.push((s.start_ns, Item::Begin { track: t, slice: i }));
        // A wakeup at a slice's end happened in that slice, not in the next.
        wakes_until(items, s.end_ns, true);
        items.push((s.end_ns, Item::End { track: t }));
    }
    wakes_until(items, u64::MAX, true);
}

/// Per event of one track: whether it comes after the track's last flow start of its
/// timestamp.
fn after_flow_start_marks(items: &[(u64, Item)]) -> Vec<bool> {
    let mut marks = vec![false; items.len()];
    let (mut run_ts, mut start_ahead) = (None, false);
    for (mark, (ts, item)) in marks.iter_mut().zip(items).rev() {
        if run_ts != Some(*ts) {
            (run_ts, start_ahead) = (Some(*ts), false);
        }
        start_ahead |= matches!(item, Item::Wake { out: true, .. });
        *mark = !start_ahead;
    }
    marks
}
