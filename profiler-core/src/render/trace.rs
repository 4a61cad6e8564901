//! `--timeline PATH`: a capture's timeline → the Perfetto writer's `Tracks` (`perfetto/`).
//!
//! Per thread, in order: each long wait's blocked part, a slice in its state (`sleep`, `io`,
//! `other`) named by its blocking site as the report labels it; its part after the wakeup, a
//! `runnable` slice; a wait for a CPU from its start, one `runnable` slice; the stretches
//! between long waits, `running` slices (named with the share of waits shorter than the
//! resolution when they took 10 % or more of it). Wakeups of the sites the report ranks, by a
//! thread of the capture, are flows from the waker to the woken thread; every on-CPU sample
//! is a sample with its stack. A wait on a file, socket or pipe carries it as the slice's
//! argument `on`. A Go target's goroutine waits are tracks of their own under its process,
//! one per goroutine, each wait a `sleep` slice named by its site (`goroutines.rs`).

use std::collections::{BTreeMap, HashSet};

use super::perfetto::{Process, Sample, Slice, State, ThreadTrack, Tracks, Wakeup};
use crate::{
    model::{Profile, Segment, StackNames, TimedWait, Timeline, stack_frames},
    site::{SiteId, Sites},
};
use profiler_common::WaitState;

/// A stretch between long waits is named with its short waits' share from this on.
const SHORT_WAITS_NAMED: f64 = 0.10;

/// What the trace is drawn from.
pub struct TraceInput<'a> {
    pub profile: &'a Profile,
    pub names: &'a StackNames,
    pub timeline: &'a Timeline,
    /// Every blocking site and its label, resolved for the capture.
    pub sites: &'a Sites,
    /// The sites whose wakers the report names: their wakeups are drawn.
    pub ranked: &'a HashSet<SiteId>,
}

pub fn tracks(input: &TraceInput<'_>) -> Tracks {
    let profile = input.profile;
    let mut processes: BTreeMap<u32, String> = BTreeMap::new();
    let mut threads = Vec::new();
    let mut wakeups = Vec::new();
    for (&tid, line) in &input.timeline.threads {
        let Some(t) = profile.threads.get(&tid) else {
            continue;
        };
        let process = profile
            .processes
            .get(&t.pid)
            .map(|p| p.name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| t.name.clone());
        processes.entry(t.pid).or_insert(process);
        let mut slices = Vec::new();
        for s in line.segments() {
            match s {
                Segment::Gap {
                    from_ns,
                    to_ns,
                    cpu_ns,
                } => slices.push(gap_slice(from_ns, to_ns, cpu_ns, input.timeline)),
                Segment::Wait(w) => {
                    let (slices_of, site) = wait_slices(w, input);
                    slices.extend(slices_of);
                    if w.waker_tid != 0 && site.is_some_and(|s| input.ranked.contains(&s)) {
                        wakeups.push(Wakeup {
                            waker_tid: w.waker_tid,
                            waker_ts_ns: w.waker_ns(),
                            wakee_tid: tid,
                            wakee_ts_ns: w.wake_ns(),
                        });
                    }
                }
            }
        }
        threads.push(ThreadTrack {
            pid: t.pid,
            tid,
            name: t.name.clone(),
            slices,
        });
    }
    threads.extend(goroutine_tracks(input, &mut processes));
    let samples = input
        .timeline
        .samples
        .iter()
        .map(|s| Sample {
            tid: s.tid,
            ts_ns: s.ts_ns,
            frames: stack_frames(s.user_stack, s.kernel_stack, input.names),
        })
        .collect();
    Tracks {
        processes: processes
            .into_iter()
            .map(|(pid, name)| Process { pid, name })
            .collect(),
        threads,
        samples,
        wakeups,
    }
}

/// Tracks of a goroutine's first tid: far above any pid_max (2^22), so never a thread's.
const GOROUTINE_TID_BASE: u32 = 0x4000_0000;

/// One track per goroutine (per `g`: a goroutine that exited leaves its `g` to a later one,
/// which follows on the same track) under its process, each wait a `sleep` slice named by
/// its site, with its reason as an argument.
fn goroutine_tracks(
    input: &TraceInput<'_>,
    processes: &mut BTreeMap<u32, String>,
) -> Vec<ThreadTrack> {
    let mut tracks: BTreeMap<(u32, u64), ThreadTrack> = BTreeMap::new();
    let mut labels: std::collections::HashMap<(u32, u64, u32), String> = Default::default();
    let mut next = GOROUTINE_TID_BASE;
    for g in &input.timeline.goroutines {
        processes.entry(g.pid).or_insert_with(|| {
            input
                .profile
                .processes
                .get(&g.pid)
                .map(|p| p.name.clone())
                .unwrap_or_default()
        });
        let track = tracks.entry((g.pid, g.g)).or_insert_with(|| {
            next += 1;
            ThreadTrack {
                pid: g.pid,
                tid: next,
                name: format!("goroutine {:#x}", g.g),
                slices: Vec::new(),
            }
        });
        let name = labels
            .entry((g.pid, g.user_stack, g.reason))
            .or_insert_with(|| {
                crate::goroutines::wait_label(
                    input.profile,
                    input.names,
                    g.pid,
                    g.user_stack,
                    g.reason,
                )
            })
            .clone();
        track.slices.push(Slice {
            start_ns: g.start_ns,
            end_ns: g.end_ns,
            state: State::Sleep,
            name,
            args: vec![("goroutine", format!("{:#x}", g.g))],
        });
    }
    tracks.into_values().collect()
}

fn gap_slice(from_ns: u64, to_ns: u64, cpu_ns: u64, timeline: &Timeline) -> Slice {
    let len = (to_ns - from_ns).max(1);
    let short = 1.0 - cpu_ns as f64 / len as f64;
    Slice {
        start_ns: from_ns,
        end_ns: to_ns,
        state: State::Running,
        name: if short >= SHORT_WAITS_NAMED {
            format!(
                "running, {:.0} % in waits < {} ms",
                100.0 * short,
                timeline.resolution_ns as f64 / 1e6
            )
        } else {
            String::new()
        },
        args: Vec::new(),
    }
}

/// A long wait's slices, and its site when it blocked somewhere.
fn wait_slices(w: &TimedWait, input: &TraceInput<'_>) -> (Vec<Slice>, Option<SiteId>) {
    if w.runqueue() {
        let slice = Slice {
            start_ns: w.start_ns,
            end_ns: w.end_ns(),
            state: State::Runnable,
            name: String::new(),
            args: Vec::new(),
        };
        return (vec![slice], None);
    }
    let site = input
        .sites
        .site(w.state, w.user_stack, w.kernel_stack, input.names);
    let mut out = vec![Slice {
        start_ns: w.start_ns,
        end_ns: w.wake_ns(),
        state: match w.state {
            WaitState::Sleep => State::Sleep,
            WaitState::Io => State::Io,
            _ => State::Other,
        },
        name: input.sites.label(&site).to_string(),
        args: input
            .profile
            .resources
            .get(&w.resource)
            .map(|r| vec![("on", r.text.clone())])
            .unwrap_or_default(),
    }];
    if w.runnable_ns > 0 {
        out.push(Slice {
            start_ns: w.wake_ns(),
            end_ns: w.end_ns(),
            state: State::Runnable,
            name: String::new(),
            args: Vec::new(),
        });
    }
    out.retain(|s| s.end_ns > s.start_ns);
    (out, Some(site))
}
