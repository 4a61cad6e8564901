//! A synthetic capture with known times: thread 1 works on the CPU (user stack 1) and sleeps
//! 0.5 s twice, at 2–2.5 s and 6–6.5 s (user stack 2, kernel stack 9), in a 10 s window;
//! samples every 10 ms while it works.

use std::collections::{BTreeMap, HashMap};

use profiler_common::{TimelineSample, TimelineWait, WaitState, timeline_kind};

use super::{build, bursts, range::slice, state_bins};
use crate::model::{
    Entry, Kind, Mode, Profile, RawTimeline, SavedCapture, StackNames, StateTimes, ThreadTime,
    Window,
};

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const WORK: (u64, u64) = (1, 0);
const SLEEP: (u64, u64) = (2, 9);

fn sleeps() -> [(u64, u64); 2] {
    [(2 * S, 2 * S + 500 * MS), (6 * S, 6 * S + 500 * MS)]
}

fn profile() -> Profile {
    let mut p = Profile::empty(
        Mode::Wall,
        Window {
            start_ns: 0,
            stop_ns: 10 * S,
        },
        10 * MS,
    );
    let mut cpu = Entry::new(1, 1, WORK.0, WORK.1, Kind::OnCpu);
    cpu.time_ns = 9 * S;
    cpu.samples = 900;
    let mut sleep = Entry::new(1, 1, SLEEP.0, SLEEP.1, Kind::Off(WaitState::Sleep));
    sleep.time_ns = S;
    sleep.finished(500 * MS);
    sleep.finished(500 * MS);
    p.entries = vec![cpu, sleep];
    let t = ThreadTime {
        pid: 1,
        name: "app".into(),
        samples: 900,
        time: StateTimes {
            running: 9 * S,
            sleep: S,
            ..StateTimes::default()
        },
        on_cpu_exact: true,
        ..ThreadTime::default()
    };
    p.threads.insert(1, t);
    p
}

fn raw() -> RawTimeline {
    let mut cpu_before = 0;
    let mut at = 0;
    let mut waits = Vec::new();
    for (from, to) in sleeps() {
        cpu_before += from - at;
        waits.push(TimelineWait {
            kind: timeline_kind::WAIT,
            tid: 1,
            start_ns: from,
            blocked_ns: to - from,
            runnable_ns: 0,
            user_stack: SLEEP.0,
            kernel_stack: SLEEP.1,
            cpu_before_ns: cpu_before,
            state: WaitState::Sleep as u16,
            flags: 0,
            waker_tid: 0,
            waking_ns: 0,
            resource: 0,
        });
        at = to;
    }
    // Outside the window: left out.
    waits.push(TimelineWait {
        start_ns: 11 * S,
        ..waits[0]
    });
    let samples = (0..1000)
        .map(|i| i * 10 * MS + 5 * MS)
        .filter(|&ts| !sleeps().iter().any(|&(a, b)| ts >= a && ts < b))
        .map(|ts| TimelineSample {
            kind: timeline_kind::SAMPLE,
            tid: 1,
            ts_ns: ts,
            user_stack: WORK.0,
            kernel_stack: WORK.1,
        })
        .collect();
    RawTimeline {
        enabled: true,
        resolution_ns: MS,
        waits,
        samples,
        go_waits: Vec::new(),
    }
}

/// Goroutine waits: ended ones as written, an open one (`end_ns` 0) up to the window's end,
/// one shorter than the resolution left out, one starting before the window cut at it.
#[test]
fn goroutine_waits_are_slices_in_the_window() {
    use profiler_common::{TimelineGoWait, timeline_kind};
    let window = crate::model::Window {
        start_ns: 1_000 * MS,
        stop_ns: 2_000 * MS,
    };
    let wait = |g, start_ns, end_ns| TimelineGoWait {
        kind: timeline_kind::GO_WAIT,
        tgid: 7,
        g,
        start_ns,
        end_ns,
        user_stack: 3,
        reason: 9,
        _pad: 0,
    };
    let slices = super::goroutine_slices(
        &[
            wait(0xc0, 1_500 * MS, 0),
            wait(0xc0, 1_100 * MS, 1_120 * MS),
            wait(0xd0, 1_200 * MS, 1_200 * MS + MS / 2),
            wait(0xd0, 900 * MS, 1_050 * MS),
        ],
        window,
        MS,
    );
    let spans: Vec<(u64, u64, u64)> = slices
        .iter()
        .map(|s| (s.g, s.start_ns / MS, s.end_ns / MS))
        .collect();
    assert_eq!(
        spans,
        [
            (0xc0, 1_100, 1_120),
            (0xc0, 1_500, 2_000),
            (0xd0, 1_000, 1_050)
        ]
    );
    assert!(slices.iter().all(|s| s.pid == 7 && s.reason == 9));
}

fn saved() -> SavedCapture {
    let profile = profile();
    let timeline = build(raw(), &HashMap::new(), &profile);
    let mut names = StackNames::default();
    names
        .user
        .insert(WORK.0, vec!["main".into(), "work".into()]);
    names
        .user
        .insert(SLEEP.0, vec!["main".into(), "nap".into()]);
    names
        .kernel
        .insert(SLEEP.1, vec!["do_nanosleep_[k]".into()]);
    SavedCapture::of_app(profile, names, timeline)
}

#[test]
fn a_disabled_timeline_builds_nothing() {
    assert_eq!(
        build(RawTimeline::default(), &HashMap::new(), &profile()),
        None
    );
}

#[test]
fn the_line_holds_the_long_waits_inside_the_window() {
    let saved = saved();
    let t = saved.timeline.as_ref().unwrap();
    let line = &t.threads[&1];
    assert_eq!((line.from_ns, line.to_ns, line.cpu_ns), (0, 10 * S, 9 * S));
    let waits: Vec<(u64, u64)> = line
        .waits
        .iter()
        .map(|w| (w.start_ns, w.end_ns()))
        .collect();
    assert_eq!(waits, sleeps());
    assert_eq!(t.samples.len(), 900);
}

#[test]
fn a_range_inside_a_sleep_holds_only_the_sleep() {
    let saved = saved();
    let part = slice(&saved, 2.1, 2.4).unwrap();
    let p = &part.profile;
    assert_eq!(p.window.len_ns(), 300 * MS);
    let times: BTreeMap<Kind, u64> = p.entries.iter().map(|e| (e.kind, e.time_ns)).collect();
    assert_eq!(
        times,
        [(Kind::Off(WaitState::Sleep), 300 * MS)]
            .into_iter()
            .collect()
    );
    assert_eq!(p.threads[&1].on_cpu_ns(), 0);
    let range = part.meta.range.unwrap();
    assert_eq!((range.from_s, range.to_s, range.of_s), (2.1, 2.4, 10.0));
    // Its own timeline is cut to it.
    let line = &part.timeline.as_ref().unwrap().threads[&1];
    assert_eq!((line.from_ns, line.to_ns), (2_100 * MS, 2_400 * MS));
    assert_eq!(line.waits[0].blocked_ns, 300 * MS);
}

#[test]
fn a_range_of_work_holds_its_samples_stacks_and_cpu_time() {
    let saved = saved();
    let part = slice(&saved, 0.0, 2.0).unwrap();
    let p = &part.profile;
    assert_eq!(p.entries.len(), 1, "{:?}", p.entries);
    let e = &p.entries[0];
    assert_eq!(
        (e.kind, e.user_stack, e.time_ns, e.samples),
        (Kind::OnCpu, WORK.0, 2 * S, 200)
    );
    // Across a sleep's edge: the sleep's part inside, and the work's.
    let part = slice(&saved, 1.5, 2.5).unwrap();
    let times: BTreeMap<Kind, u64> = part
        .profile
        .entries
        .iter()
        .map(|e| (e.kind, e.time_ns))
        .collect();
    assert_eq!(times[&Kind::OnCpu], 500 * MS);
    assert_eq!(times[&Kind::Off(WaitState::Sleep)], 500 * MS);
}

#[test]
fn ranges_outside_the_capture_or_without_a_timeline_are_refused() {
    let mut saved = saved();
    assert!(slice(&saved, 10.0, 12.0).is_err());
    assert!(slice(&saved, 3.0, 3.0).is_err());
    saved.timeline = None;
    assert_eq!(
        slice(&saved, 0.0, 1.0).unwrap_err(),
        super::range::RangeError::NoTimeline
    );
}

#[test]
fn the_sleep_site_concentrated_in_the_two_sleeps() {
    let saved = saved();
    let t = saved.timeline.as_ref().unwrap();
    let sites = crate::site::Sites::of(&saved.profile, &saved.names);
    let site = crate::site::site_id(WaitState::Sleep, SLEEP.0, SLEEP.1, &saved.names);
    let series = bursts::series(&saved.profile, &saved.names, t, &sites, &[site], &|_| true);
    let when = bursts::when(&series[0], "nanosleep").unwrap();
    let spans: Vec<(f64, f64, f64)> = when
        .bursts
        .iter()
        .map(|b| (b.from_s, b.to_s, b.share_pct))
        .collect();
    assert_eq!(
        spans,
        [(2.0, 2.5, 50.0), (6.0, 6.5, 50.0)],
        "{}",
        when.summary
    );
    assert_eq!(
        when.summary,
        "50 % of nanosleep's time in 2.00–2.50 s; 100 % in 2 bursts (2.00–2.50 s, 6.00–6.50 s)"
    );
}

#[test]
fn time_spread_evenly_is_said_to_be_spread() {
    let when = bursts::when(&[1.0; 50], "read").unwrap();
    assert!(when.bursts.is_empty());
    assert_eq!(
        when.summary,
        "read's time is spread over the capture, in no burst"
    );
    assert_eq!(bursts::when(&[0.0; 5], "read"), None);
}

#[test]
fn state_bins_put_each_state_where_it_was() {
    let saved = saved();
    let line = &saved.timeline.as_ref().unwrap().threads[&1];
    let bin = 500 * MS;
    let bins = state_bins(line, None, 0, bin, 20);
    for (i, b) in bins.iter().enumerate() {
        let at = i as u64 * bin;
        let asleep = sleeps().iter().any(|&(a, z)| at >= a && at < z);
        let (running, sleep) = (b[super::RUNNING], b[super::SLEEP]);
        assert_eq!(
            (running, sleep),
            if asleep {
                (0.0, bin as f64)
            } else {
                (bin as f64, 0.0)
            },
            "bin {i}"
        );
    }
}

#[test]
fn the_trace_has_each_sleep_as_a_slice_named_by_its_site() {
    use crate::render::{perfetto::State, trace};
    let saved = saved();
    let t = saved.timeline.as_ref().unwrap();
    let sites = crate::site::Sites::of(&saved.profile, &saved.names);
    let tracks = trace::tracks(&trace::TraceInput {
        profile: &saved.profile,
        names: &saved.names,
        timeline: t,
        sites: &sites,
        ranked: &Default::default(),
    });
    assert_eq!(tracks.threads.len(), 1);
    let slices: Vec<(u64, u64, State)> = tracks.threads[0]
        .slices
        .iter()
        .map(|s| (s.start_ns, s.end_ns, s.state))
        .collect();
    let [(a, b), (c, d)] = sleeps();
    assert_eq!(
        slices,
        [
            (0, a, State::Running),
            (a, b, State::Sleep),
            (b, c, State::Running),
            (c, d, State::Sleep),
            (d, 10 * S, State::Running),
        ]
    );
    assert!(tracks.threads[0].slices[1].name.contains("nap"));
    assert_eq!(tracks.samples.len(), 900);
}
