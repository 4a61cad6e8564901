//! Perfetto: per-thread timelines → a protobuf `Trace` that ui.perfetto.dev opens (what
//! `--timeline PATH` is to write).
//!
//! - One process track per process and one thread track per thread (a `TrackDescriptor` with a
//!   `ThreadDescriptor`), so the UI groups each thread under its process.
//! - Each slice of a thread's timeline is a `TYPE_SLICE_BEGIN` / `TYPE_SLICE_END` pair on its
//!   thread's track (Perfetto has no complete-slice event: track_event.proto), named by its
//!   blocking site or its state, with its state (`running`, `runnable`, `sleep`, `io`,
//!   `other`) as its category.
//! - A wakeup is a flow: it leaves an instant event (`wakes <thread>-<tid>`, category `wakeup`)
//!   on the waker's track and ends on the wakee's first slice from the wakeup on.
//! - On-CPU samples are `PerfSample`s (what Linux perf traces carry), so the UI lists them under
//!   each thread as callstack samples and draws a flame graph of a selected range; functions,
//!   frames and callstacks are interned.
//! - Timestamps are CLOCK_MONOTONIC nanoseconds: the first packet is a `ClockSnapshot` naming
//!   MONOTONIC the trace's clock, and the sequence's defaults put every packet on it.
//!
//! Everything is one packet sequence. Its first packet clears the incremental state; interned
//! entries are sent in the first packet that refers to them, and every packet that refers to
//! one says it needs the incremental state.

use std::{
    collections::HashMap,
    io::{self, Write},
};

/// A capture window's threads, their states over time, their on-CPU samples and wakeups.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    pub processes: Vec<Process>,
    pub threads: Vec<ThreadTrack>,
    pub samples: Vec<Sample>,
    pub wakeups: Vec<Wakeup>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Process {
    pub pid: u32,
    pub name: String,
}

/// One thread's timeline. Slices may come in any order; they are drawn sorted by start, and a
/// slice starting before the previous one ended is cut to start at that end (dropped when
/// nothing is left), because slices on one track have to nest.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadTrack {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    pub slices: Vec<Slice>,
}

/// `[start_ns, end_ns)` on CLOCK_MONOTONIC.
#[derive(Clone, Debug, PartialEq)]
pub struct Slice {
    pub start_ns: u64,
    pub end_ns: u64,
    pub state: State,
    /// The blocking site (`fdatasync ← flush_log`); empty: the state's label.
    pub name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    Running,
    Runnable,
    Sleep,
    Io,
    Other,
}

impl State {
    /// The slice's category, in the report's words.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Runnable => "runnable",
            Self::Sleep => "sleep",
            Self::Io => "io",
            Self::Other => "other",
        }
    }
}

/// An on-CPU sample. A sample of a thread without a `ThreadTrack` is left out (its process is
/// unknown).
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub tid: u32,
    pub ts_ns: u64,
    /// Root first. Kernel frames end in `_[k]`, as in the folded output.
    pub frames: Vec<String>,
}

/// `waker_tid` woke `wakee_tid`. Drawn only when both threads have a `ThreadTrack`.
#[derive(Clone, Debug, PartialEq)]
pub struct Wakeup {
    pub waker_tid: u32,
    pub waker_ts_ns: u64,
    pub wakee_tid: u32,
    pub wakee_ts_ns: u64,
}

/// The subset of Perfetto's trace protos written here, with their field numbers (from
/// github.com/google/perfetto, protos/perfetto/…, each message's file named above it). The
/// protos are proto2: optional fields are `Option`s, so a zero that is set is written, and
/// repeated numbers are not packed (`packed = "false"`), as Perfetto's decoder expects for
/// fields not declared `[packed = true]`.
pub mod proto {
    /// trace/trace.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Trace {
        #[prost(message, repeated, tag = "1")]
        pub packet: Vec<TracePacket>,
    }

    /// trace/trace_packet.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TracePacket {
        #[prost(uint64, optional, tag = "8")]
        pub timestamp: Option<u64>,
        #[prost(uint32, optional, tag = "10")]
        pub trusted_packet_sequence_id: Option<u32>,
        #[prost(message, optional, tag = "12")]
        pub interned_data: Option<InternedData>,
        /// `SEQ_INCREMENTAL_STATE_CLEARED` | `SEQ_NEEDS_INCREMENTAL_STATE`.
        #[prost(uint32, optional, tag = "13")]
        pub sequence_flags: Option<u32>,
        #[prost(message, optional, tag = "59")]
        pub trace_packet_defaults: Option<TracePacketDefaults>,
        #[prost(bool, optional, tag = "87")]
        pub first_packet_on_sequence: Option<bool>,
        #[prost(oneof = "Data", tags = "6, 11, 60, 66")]
        pub data: Option<Data>,
    }

    /// trace/trace_packet.proto, `TracePacket.SequenceFlags`.
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
    pub const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

    /// trace/trace_packet.proto, the `data` oneof.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Data {
        #[prost(message, tag = "6")]
        ClockSnapshot(ClockSnapshot),
        #[prost(message, tag = "11")]
        TrackEvent(TrackEvent),
        #[prost(message, tag = "60")]
        TrackDescriptor(TrackDescriptor),
        #[prost(message, tag = "66")]
        PerfSample(PerfSample),
    }

    /// common/builtin_clock.proto, `BUILTIN_CLOCK_MONOTONIC`.
    pub const BUILTIN_CLOCK_MONOTONIC: u32 = 3;

    /// trace/clock_snapshot.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ClockSnapshot {
        #[prost(message, repeated, tag = "1")]
        pub clocks: Vec<Clock>,
        /// A `BuiltinClock`.
        #[prost(uint32, optional, tag = "2")]
        pub primary_trace_clock: Option<u32>,
    }

    /// trace/clock_snapshot.proto, `ClockSnapshot.Clock`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Clock {
        #[prost(uint32, optional, tag = "1")]
        pub clock_id: Option<u32>,
        #[prost(uint64, optional, tag = "2")]
        pub timestamp: Option<u64>,
    }

    /// trace/trace_packet_defaults.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TracePacketDefaults {
        #[prost(uint32, optional, tag = "58")]
        pub timestamp_clock_id: Option<u32>,
    }

    /// trace/track_event/track_descriptor.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackDescriptor {
        #[prost(uint64, optional, tag = "1")]
        pub uuid: Option<u64>,
        #[prost(string, optional, tag = "2")]
        pub name: Option<String>,
        #[prost(message, optional, tag = "3")]
        pub process: Option<ProcessDescriptor>,
        #[prost(message, optional, tag = "4")]
        pub thread: Option<ThreadDescriptor>,
        #[prost(uint64, optional, tag = "5")]
        pub parent_uuid: Option<u64>,
    }

    /// trace/track_event/process_descriptor.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProcessDescriptor {
        #[prost(int32, optional, tag = "1")]
        pub pid: Option<i32>,
        #[prost(string, optional, tag = "6")]
        pub process_name: Option<String>,
    }

    /// trace/track_event/thread_descriptor.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ThreadDescriptor {
        #[prost(int32, optional, tag = "1")]
        pub pid: Option<i32>,
        #[prost(int64, optional, tag = "2")]
        pub tid: Option<i64>,
        #[prost(string, optional, tag = "5")]
        pub thread_name: Option<String>,
    }

    /// trace/track_event/track_event.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackEvent {
        /// `EventCategory` iids.
        #[prost(uint64, repeated, packed = "false", tag = "3")]
        pub category_iids: Vec<u64>,
        #[prost(enumeration = "Type", optional, tag = "9")]
        pub r#type: Option<i32>,
        /// An `EventName` iid.
        #[prost(uint64, optional, tag = "10")]
        pub name_iid: Option<u64>,
        #[prost(uint64, optional, tag = "11")]
        pub track_uuid: Option<u64>,
        #[prost(fixed64, repeated, packed = "false", tag = "47")]
        pub flow_ids: Vec<u64>,
        #[prost(fixed64, repeated, packed = "false", tag = "48")]
        pub terminating_flow_ids: Vec<u64>,
    }

    /// trace/track_event/track_event.proto, `TrackEvent.Type`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum Type {
        Unspecified = 0,
        SliceBegin = 1,
        SliceEnd = 2,
        Instant = 3,
    }

    /// trace/track_event/track_event.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct EventCategory {
        #[prost(uint64, optional, tag = "1")]
        pub iid: Option<u64>,
        #[prost(string, optional, tag = "2")]
        pub name: Option<String>,
    }

    /// trace/track_event/track_event.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct EventName {
        #[prost(uint64, optional, tag = "1")]
        pub iid: Option<u64>,
        #[prost(string, optional, tag = "2")]
        pub name: Option<String>,
    }

    /// trace/interned_data/interned_data.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InternedData {
        #[prost(message, repeated, tag = "1")]
        pub event_categories: Vec<EventCategory>,
        #[prost(message, repeated, tag = "2")]
        pub event_names: Vec<EventName>,
        #[prost(message, repeated, tag = "5")]
        pub function_names: Vec<InternedString>,
        #[prost(message, repeated, tag = "6")]
        pub frames: Vec<Frame>,
        #[prost(message, repeated, tag = "7")]
        pub callstacks: Vec<Callstack>,
        #[prost(message, repeated, tag = "17")]
        pub mapping_paths: Vec<InternedString>,
        #[prost(message, repeated, tag = "19")]
        pub mappings: Vec<Mapping>,
    }

    /// trace/profiling/profile_common.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InternedString {
        #[prost(uint64, optional, tag = "1")]
        pub iid: Option<u64>,
        #[prost(bytes = "vec", optional, tag = "2")]
        pub str: Option<Vec<u8>>,
    }

    /// trace/profiling/profile_common.proto. No build ID and an empty range: a mapping that
    /// only names where its frames come from.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, optional, tag = "1")]
        pub iid: Option<u64>,
        #[prost(uint64, optional, tag = "4")]
        pub start: Option<u64>,
        #[prost(uint64, optional, tag = "5")]
        pub end: Option<u64>,
        /// `mapping_paths` iids, the path's components.
        #[prost(uint64, repeated, packed = "false", tag = "7")]
        pub path_string_ids: Vec<u64>,
    }

    /// trace/profiling/profile_common.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Frame {
        #[prost(uint64, optional, tag = "1")]
        pub iid: Option<u64>,
        /// A `function_names` iid.
        #[prost(uint64, optional, tag = "2")]
        pub function_name_id: Option<u64>,
        #[prost(uint64, optional, tag = "3")]
        pub mapping_id: Option<u64>,
        #[prost(uint64, optional, tag = "4")]
        pub rel_pc: Option<u64>,
    }

    /// trace/profiling/profile_common.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Callstack {
        #[prost(uint64, optional, tag = "1")]
        pub iid: Option<u64>,
        /// Root first.
        #[prost(uint64, repeated, packed = "false", tag = "2")]
        pub frame_ids: Vec<u64>,
    }

    /// trace/profiling/profile_packet.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PerfSample {
        #[prost(uint32, optional, tag = "2")]
        pub pid: Option<u32>,
        #[prost(uint32, optional, tag = "3")]
        pub tid: Option<u32>,
        #[prost(uint64, optional, tag = "4")]
        pub callstack_iid: Option<u64>,
        #[prost(enumeration = "CpuMode", optional, tag = "5")]
        pub cpu_mode: Option<i32>,
    }

    /// trace/profiling/profile_packet.proto, `Profiling.CpuMode`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum CpuMode {
        Unknown = 0,
        Kernel = 1,
        User = 2,
    }
}

use proto::{
    Callstack, Clock, ClockSnapshot, CpuMode, Data, EventCategory, EventName, Frame, InternedData,
    InternedString, Mapping, PerfSample, ProcessDescriptor, ThreadDescriptor, TracePacket,
    TracePacketDefaults, TrackDescriptor, TrackEvent, Type,
};

/// The one packet sequence of the file.
pub const SEQUENCE_ID: u32 = 1;
/// Track uuids: processes and threads are numbered from these, by their order in the
/// `Timeline`, so no two tracks share one however pids and tids repeat.
const PROCESS_UUID_BASE: u64 = 1 << 40;
const THREAD_UUID_BASE: u64 = 2 << 40;
/// Category of the waker's instant event.
pub const WAKEUP_CATEGORY: &str = "wakeup";
/// Mapping of frames ending in `_[k]`, as pprof.rs names it.
const KERNEL_MAPPING: &str = "[kernel.kallsyms]";
const USER_MAPPING: &str = "[user]";

/// Writes `timeline` as a Perfetto trace (a `Trace` message: one `TracePacket` after another,
/// each written as soon as it is encoded).
pub fn write(timeline: &Timeline, out: &mut impl Write) -> io::Result<()> {
    let plan = Plan::new(timeline);
    let mut w = Writer {
        out,
        buf: Vec::new(),
        interned: Interned::default(),
    };

    w.packet(&TracePacket {
        trusted_packet_sequence_id: Some(SEQUENCE_ID),
        sequence_flags: Some(proto::SEQ_INCREMENTAL_STATE_CLEARED),
        first_packet_on_sequence: Some(true),
        trace_packet_defaults: Some(TracePacketDefaults {
            timestamp_clock_id: Some(proto::BUILTIN_CLOCK_MONOTONIC),
        }),
        // A snapshot naming MONOTONIC the trace's clock: without one, trace processors (v50
        // at least) take BOOTTIME for it and drop every MONOTONIC packet, no snapshot
        // relating the two.
        data: Some(Data::ClockSnapshot(ClockSnapshot {
            clocks: vec![Clock {
                clock_id: Some(proto::BUILTIN_CLOCK_MONOTONIC),
                timestamp: Some(plan.first_ts),
            }],
            primary_trace_clock: Some(proto::BUILTIN_CLOCK_MONOTONIC),
        })),
        ..Default::default()
    })?;

    for (i, p) in plan.processes.iter().enumerate() {
        w.packet(&descriptor(TrackDescriptor {
            uuid: Some(process_uuid(i)),
            name: Some(p.name.to_string()),
            process: Some(ProcessDescriptor {
                pid: Some(p.pid as i32),
                process_name: Some(p.name.to_string()),
            }),
            ..Default::default()
        }))?;
    }
    for (i, t) in plan.tracks.iter().enumerate() {
        w.packet(&descriptor(TrackDescriptor {
            uuid: Some(thread_uuid(i)),
            name: Some(t.name.to_string()),
            // Ignored next to `thread` by today's trace processor, which groups by pid; kept
            // for readers that follow the parent.
            parent_uuid: Some(process_uuid(t.process)),
            thread: Some(ThreadDescriptor {
                pid: Some(t.pid as i32),
                tid: Some(i64::from(t.tid)),
                thread_name: Some(t.name.to_string()),
            }),
            ..Default::default()
        }))?;
    }

    for (ts, item) in &plan.items {
        let packet = w.event(timeline, &plan, *ts, item);
        w.packet(&packet)?;
    }
    Ok(())
}

fn descriptor(d: TrackDescriptor) -> TracePacket {
    TracePacket {
        trusted_packet_sequence_id: Some(SEQUENCE_ID),
        data: Some(Data::TrackDescriptor(d)),
        ..Default::default()
    }
}

fn process_uuid(i: usize) -> u64 {
    PROCESS_UUID_BASE + i as u64
}

fn thread_uuid(i: usize) -> u64 {
    THREAD_UUID_BASE + i as u64
}

struct PlannedProcess<'a> {
    pid: u32,
    name: &'a str,
}

/// A thread's track: its slices after sorting and cutting overlaps.
struct Track<'a> {
    pid: u32,
    tid: u32,
    name: &'a str,
    /// Index into `Plan::processes`.
    process: usize,
    slices: Vec<PlannedSlice<'a>>,
}

struct PlannedSlice<'a> {
    start_ns: u64,
    end_ns: u64,
    slice: &'a Slice,
    /// Wakeups that end here.
    flows_in: Vec<u64>,
}

/// What one packet after the descriptors carries.
enum Item {
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
struct Plan<'a> {
    processes: Vec<PlannedProcess<'a>>,
    tracks: Vec<Track<'a>>,
    /// By timestamp; events of one track stay in the order that nests them.
    items: Vec<(u64, Item)>,
    first_ts: u64,
}

/// A wakeup's instant event on one track, before it is placed among the track's slices.
struct Wake {
    ts: u64,
    other: usize,
    flow: u64,
    out: bool,
}

impl<'a> Plan<'a> {
    fn new(timeline: &'a Timeline) -> Self {
        let (processes, mut tracks, track_of_tid) = tracks(timeline);
        let wakes = place_wakeups(timeline, &mut tracks, &track_of_tid);
        let mut items: Vec<(u64, Item)> = Vec::new();
        // Per item: whether it comes after its track's last flow start of its timestamp.
        let mut late: Vec<bool> = Vec::new();
        for (t, (track, wakes)) in tracks.iter().zip(wakes).enumerate() {
            let first = items.len();
            track_items(t, track, wakes, &mut items);
            late.extend(late_marks(&items[first..]));
        }
        for (i, s) in timeline.samples.iter().enumerate() {
            if let Some(&track) = track_of_tid.get(&s.tid) {
                items.push((s.ts_ns, Item::Sample { sample: i, track }));
                late.push(false);
            }
        }
        // The trace processor reads events by timestamp, equal ones in file order, and drops
        // a flow's end read before its start. A wakee's slice often starts at the very
        // nanosecond of its wakeup, so at each timestamp every track's events up to its last
        // flow start come first, then the rest. The sort is stable and `late` never goes from
        // true to false within a track's timestamp, so each track keeps the order that nests
        // its events. (A track whose events at one timestamp end a flow before starting one
        // still comes early as a whole: were that flow's start on a later track at the same
        // timestamp, it would be lost. It takes a slice after a gap, woken and waking within
        // one nanosecond.)
        let mut keyed: Vec<(bool, (u64, Item))> = late.into_iter().zip(items).collect();
        keyed.sort_by_key(|(late, (ts, _))| (*ts, *late));
        let items: Vec<(u64, Item)> = keyed.into_iter().map(|(_, item)| item).collect();
        let first_ts = items.first().map_or(0, |(ts, _)| *ts);
        Plan {
            processes,
            tracks,
            items,
            first_ts,
        }
    }
}

/// The processes, and one track per tid with its slices cut (`cut_overlaps`), and each tid's
/// track.
fn tracks(timeline: &Timeline) -> (Vec<PlannedProcess<'_>>, Vec<Track<'_>>, HashMap<u32, usize>) {
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
    let mut tracks: Vec<Track<'_>> = Vec::new();
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
            tracks.push(Track {
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
fn cut_overlaps<'a>(track: &mut Track<'a>, mut slices: Vec<&'a Slice>) {
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
    timeline: &Timeline,
    tracks: &mut [Track<'_>],
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
fn track_items(t: usize, track: &Track<'_>, mut wakes: Vec<Wake>, items: &mut Vec<(u64, Item)>) {
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
fn late_marks(items: &[(u64, Item)]) -> Vec<bool> {
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

/// Interning tables of the sequence: key → iid (iids start at 1; 0 means unset).
#[derive(Default)]
struct Interned {
    categories: HashMap<&'static str, u64>,
    names: HashMap<String, u64>,
    /// A function's name iid is also its frame's iid (one frame per name: there are no
    /// addresses).
    functions: HashMap<String, u64>,
    callstacks: HashMap<Vec<u64>, u64>,
    /// By "is the kernel's".
    mappings: HashMap<bool, u64>,
    mapping_paths: HashMap<&'static str, u64>,
}

fn intern<K: std::hash::Hash + Eq>(table: &mut HashMap<K, u64>, key: K) -> (u64, bool) {
    let next = table.len() as u64 + 1;
    let mut new = false;
    let iid = *table.entry(key).or_insert_with(|| {
        new = true;
        next
    });
    (iid, new)
}

struct Writer<'o, W: Write> {
    out: &'o mut W,
    buf: Vec<u8>,
    interned: Interned,
}

impl<W: Write> Writer<'_, W> {
    /// One `Trace.packet` (field 1, length-delimited).
    fn packet(&mut self, packet: &TracePacket) -> io::Result<()> {
        self.buf.clear();
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut self.buf);
        prost::Message::encode_length_delimited(packet, &mut self.buf)
            .expect("a Vec grows as needed");
        self.out.write_all(&self.buf)
    }

    fn event(&mut self, timeline: &Timeline, plan: &Plan<'_>, ts: u64, item: &Item) -> TracePacket {
        let mut new = InternedData::default();
        let data = match *item {
            Item::Begin { track, slice } => {
                let s = &plan.tracks[track].slices[slice];
                let state = s.slice.state.label();
                let name = if s.slice.name.is_empty() {
                    state
                } else {
                    &s.slice.name
                };
                Data::TrackEvent(TrackEvent {
                    r#type: Some(Type::SliceBegin as i32),
                    track_uuid: Some(thread_uuid(track)),
                    name_iid: Some(self.name(name, &mut new)),
                    category_iids: vec![self.category(state, &mut new)],
                    terminating_flow_ids: s.flows_in.clone(),
                    ..Default::default()
                })
            }
            Item::End { track } => Data::TrackEvent(TrackEvent {
                r#type: Some(Type::SliceEnd as i32),
                track_uuid: Some(thread_uuid(track)),
                ..Default::default()
            }),
            Item::Wake {
                track,
                other,
                flow,
                out,
            } => {
                let o = &plan.tracks[other];
                let name = if out {
                    format!("wakes {}-{}", o.name, o.tid)
                } else {
                    format!("woken by {}-{}", o.name, o.tid)
                };
                let (flow_ids, terminating_flow_ids) = if out {
                    (vec![flow], Vec::new())
                } else {
                    (Vec::new(), vec![flow])
                };
                Data::TrackEvent(TrackEvent {
                    r#type: Some(Type::Instant as i32),
                    track_uuid: Some(thread_uuid(track)),
                    name_iid: Some(self.name(&name, &mut new)),
                    category_iids: vec![self.category(WAKEUP_CATEGORY, &mut new)],
                    flow_ids,
                    terminating_flow_ids,
                })
            }
            Item::Sample { sample, track } => {
                let frames = &timeline.samples[sample].frames;
                let t = &plan.tracks[track];
                let cpu_mode = match frames.last() {
                    Some(leaf) if is_kernel(leaf) => CpuMode::Kernel,
                    Some(_) => CpuMode::User,
                    None => CpuMode::Unknown,
                };
                Data::PerfSample(PerfSample {
                    pid: Some(t.pid),
                    tid: Some(t.tid),
                    callstack_iid: (!frames.is_empty()).then(|| self.callstack(frames, &mut new)),
                    cpu_mode: Some(cpu_mode as i32),
                })
            }
        };
        TracePacket {
            timestamp: Some(ts),
            trusted_packet_sequence_id: Some(SEQUENCE_ID),
            sequence_flags: Some(proto::SEQ_NEEDS_INCREMENTAL_STATE),
            interned_data: (new != InternedData::default()).then_some(new),
            data: Some(data),
            ..Default::default()
        }
    }

    fn callstack(&mut self, frames: &[String], new: &mut InternedData) -> u64 {
        let ids: Vec<u64> = frames.iter().map(|f| self.frame(f, new)).collect();
        if let Some(&iid) = self.interned.callstacks.get(&ids) {
            return iid;
        }
        let (iid, _) = intern(&mut self.interned.callstacks, ids.clone());
        new.callstacks.push(Callstack {
            iid: Some(iid),
            frame_ids: ids,
        });
        iid
    }

    fn frame(&mut self, function: &str, new: &mut InternedData) -> u64 {
        if let Some(&iid) = self.interned.functions.get(function) {
            return iid;
        }
        let mapping_id = self.mapping(is_kernel(function), new);
        let (iid, _) = intern(&mut self.interned.functions, function.to_string());
        new.function_names.push(InternedString {
            iid: Some(iid),
            str: Some(function.as_bytes().to_vec()),
        });
        new.frames.push(Frame {
            iid: Some(iid),
            function_name_id: Some(iid),
            // Trace processors before v53 (October 2025) refuse a frame without a mapping.
            mapping_id: Some(mapping_id),
            rel_pc: Some(0),
        });
        iid
    }

    fn mapping(&mut self, kernel: bool, new: &mut InternedData) -> u64 {
        let (iid, fresh) = intern(&mut self.interned.mappings, kernel);
        if fresh {
            let path = if kernel { KERNEL_MAPPING } else { USER_MAPPING };
            let (path_iid, _) = intern(&mut self.interned.mapping_paths, path);
            new.mapping_paths.push(InternedString {
                iid: Some(path_iid),
                str: Some(path.as_bytes().to_vec()),
            });
            new.mappings.push(Mapping {
                iid: Some(iid),
                start: Some(0),
                end: Some(0),
                path_string_ids: vec![path_iid],
            });
        }
        iid
    }

    fn name(&mut self, name: &str, new: &mut InternedData) -> u64 {
        if let Some(&iid) = self.interned.names.get(name) {
            return iid;
        }
        let (iid, _) = intern(&mut self.interned.names, name.to_string());
        new.event_names.push(EventName {
            iid: Some(iid),
            name: Some(name.to_string()),
        });
        iid
    }

    fn category(&mut self, category: &'static str, new: &mut InternedData) -> u64 {
        let (iid, fresh) = intern(&mut self.interned.categories, category);
        if fresh {
            new.event_categories.push(EventCategory {
                iid: Some(iid),
                name: Some(category.to_string()),
            });
        }
        iid
    }
}

fn is_kernel(frame: &str) -> bool {
    frame.ends_with("_[k]")
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet};

    use prost::Message;

    use super::{proto::*, *};

    fn slice(start_ns: u64, end_ns: u64, state: State, name: &str) -> Slice {
        Slice {
            start_ns,
            end_ns,
            state,
            name: name.to_string(),
        }
    }

    /// A writer thread that flushes and wakes a logger; the logger sleeps until woken; a
    /// flusher, listed after the writer, wakes it from its fdatasync at the nanosecond its
    /// next slice starts.
    fn timeline() -> Timeline {
        use State::*;
        Timeline {
            processes: vec![Process {
                pid: 100,
                name: "db".to_string(),
            }],
            threads: vec![
                ThreadTrack {
                    pid: 100,
                    tid: 100,
                    name: "db".to_string(),
                    slices: vec![
                        slice(1_000, 5_000, Running, ""),
                        slice(5_000, 9_000, Io, "fdatasync ← flush_log"),
                        slice(9_000, 9_500, Runnable, ""),
                        slice(9_500, 12_000, Running, ""),
                    ],
                },
                ThreadTrack {
                    pid: 100,
                    tid: 101,
                    name: "logger".to_string(),
                    slices: vec![
                        slice(1_000, 10_000, Sleep, "futex_wait ← wait_for_work"),
                        slice(10_000, 10_250, Runnable, ""),
                        slice(10_250, 12_000, Running, ""),
                    ],
                },
                ThreadTrack {
                    pid: 100,
                    tid: 102,
                    name: "flusher".to_string(),
                    slices: vec![
                        slice(1_000, 9_000, Running, ""),
                        slice(9_000, 12_000, Sleep, "epoll_wait ← poll_loop"),
                    ],
                },
            ],
            samples: vec![
                Sample {
                    tid: 100,
                    ts_ns: 2_000,
                    frames: vec!["main".into(), "write_row".into(), "memcpy".into()],
                },
                Sample {
                    tid: 100,
                    ts_ns: 3_000,
                    frames: vec!["main".into(), "write_row".into(), "memcpy".into()],
                },
                Sample {
                    tid: 101,
                    ts_ns: 11_000,
                    frames: vec!["main".into(), "log".into(), "sys_write_[k]".into()],
                },
            ],
            wakeups: vec![
                Wakeup {
                    waker_tid: 100,
                    waker_ts_ns: 10_000,
                    wakee_tid: 101,
                    wakee_ts_ns: 10_000,
                },
                Wakeup {
                    waker_tid: 102,
                    waker_ts_ns: 9_000,
                    wakee_tid: 100,
                    wakee_ts_ns: 9_000,
                },
            ],
        }
    }

    fn encode(timeline: &Timeline) -> Vec<u8> {
        let mut bytes = Vec::new();
        write(timeline, &mut bytes).unwrap();
        bytes
    }

    /// What a reader makes of the trace, checked as it is read: one sequence, its state
    /// cleared first, every iid defined once and before its use, and every track's events
    /// properly nested.
    #[derive(Default, Debug)]
    struct Decoded {
        /// tid → (pid, name).
        threads: BTreeMap<u32, (u32, String)>,
        processes: BTreeMap<u32, String>,
        /// tid → (start, end, name, category) of its slices.
        slices: BTreeMap<u32, Vec<(u64, u64, String, String)>>,
        /// tid → (ts, name, the enclosing slice's category) of its instant events.
        instants: BTreeMap<u32, Vec<(u64, String, Option<String>)>>,
        /// flow id → (tid, ts) of its start, and of its end.
        flows_out: BTreeMap<u64, (u32, u64)>,
        flows_in: BTreeMap<u64, (u32, u64)>,
        /// (tid, ts, frames root first, cpu mode).
        samples: Vec<(u32, u64, Vec<String>, i32)>,
        packets: usize,
    }

    fn decode(bytes: &[u8]) -> Decoded {
        let trace = Trace::decode(bytes).expect("a Trace");
        let first = &trace.packet[0];
        assert_eq!(first.sequence_flags, Some(SEQ_INCREMENTAL_STATE_CLEARED));
        assert_eq!(
            first
                .trace_packet_defaults
                .as_ref()
                .unwrap()
                .timestamp_clock_id,
            Some(BUILTIN_CLOCK_MONOTONIC)
        );
        let Some(Data::ClockSnapshot(clock)) = &first.data else {
            panic!("the first packet is the clock snapshot");
        };
        assert_eq!(clock.primary_trace_clock, Some(BUILTIN_CLOCK_MONOTONIC));
        let mut r = Reader::default();
        r.d.packets = trace.packet.len();
        for (n, p) in trace.packet.iter().enumerate() {
            assert_eq!(p.trusted_packet_sequence_id, Some(SEQUENCE_ID));
            if n > 0 {
                assert_ne!(p.sequence_flags, Some(SEQ_INCREMENTAL_STATE_CLEARED));
            }
            if let Some(i) = &p.interned_data {
                assert_eq!(p.sequence_flags, Some(SEQ_NEEDS_INCREMENTAL_STATE));
                r.intern(i);
            }
            match p.data.as_ref().expect("every packet carries something") {
                Data::ClockSnapshot(_) => assert_eq!(n, 0),
                Data::TrackDescriptor(t) => r.descriptor(t),
                Data::TrackEvent(e) => r.event(p.timestamp.expect("events have timestamps"), e),
                Data::PerfSample(s) => {
                    let tid = s.tid.unwrap();
                    assert_eq!(r.d.threads[&tid].0, s.pid.unwrap());
                    let frames = s
                        .callstack_iid
                        .map(|c| r.callstacks[&c].clone())
                        .unwrap_or_default();
                    r.d.samples
                        .push((tid, p.timestamp.unwrap(), frames, s.cpu_mode.unwrap()));
                }
            }
        }
        assert!(r.open.values().all(Vec::is_empty), "every slice ends");
        r.d
    }

    /// The sequence's state as a reader keeps it while decoding.
    #[derive(Default)]
    struct Reader {
        d: Decoded,
        names: HashMap<u64, String>,
        categories: HashMap<u64, String>,
        functions: HashMap<u64, String>,
        frames: HashMap<u64, String>,
        callstacks: HashMap<u64, Vec<String>>,
        mappings: HashSet<u64>,
        paths: HashSet<u64>,
        tid_of_track: HashMap<u64, u32>,
        /// Per track, its open slices: (start, name, category).
        open: HashMap<u64, Vec<(u64, String, String)>>,
        last_ts: HashMap<u64, u64>,
    }

    fn define<V: std::fmt::Debug>(table: &mut HashMap<u64, V>, iid: Option<u64>, v: V) {
        let iid = iid.expect("an iid");
        assert_ne!(iid, 0, "iids start at 1");
        assert!(table.insert(iid, v).is_none(), "iid {iid} defined twice");
    }

    impl Reader {
        fn intern(&mut self, i: &InternedData) {
            for e in &i.event_names {
                define(&mut self.names, e.iid, e.name.clone().unwrap());
            }
            for e in &i.event_categories {
                define(&mut self.categories, e.iid, e.name.clone().unwrap());
            }
            for e in &i.function_names {
                let name = String::from_utf8(e.str.clone().unwrap()).unwrap();
                define(&mut self.functions, e.iid, name);
            }
            for e in &i.mapping_paths {
                assert!(self.paths.insert(e.iid.unwrap()));
            }
            for e in &i.mappings {
                assert!(e.path_string_ids.iter().all(|p| self.paths.contains(p)));
                assert!(self.mappings.insert(e.iid.unwrap()));
            }
            for e in &i.frames {
                assert!(self.mappings.contains(&e.mapping_id.unwrap()));
                let f = self.functions[&e.function_name_id.unwrap()].clone();
                define(&mut self.frames, e.iid, f);
            }
            for e in &i.callstacks {
                let fs: Vec<String> = e.frame_ids.iter().map(|f| self.frames[f].clone()).collect();
                define(&mut self.callstacks, e.iid, fs);
            }
        }

        fn descriptor(&mut self, t: &TrackDescriptor) {
            if let Some(pd) = &t.process {
                self.d
                    .processes
                    .insert(pd.pid.unwrap() as u32, pd.process_name.clone().unwrap());
            }
            if let Some(td) = &t.thread {
                let tid = td.tid.unwrap() as u32;
                self.d.threads.insert(
                    tid,
                    (td.pid.unwrap() as u32, td.thread_name.clone().unwrap()),
                );
                self.tid_of_track.insert(t.uuid.unwrap(), tid);
            }
        }

        fn event(&mut self, ts: u64, e: &TrackEvent) {
            let track = e.track_uuid.unwrap();
            let tid = self.tid_of_track[&track];
            let last = self.last_ts.insert(track, ts).unwrap_or(0);
            assert!(ts >= last, "events of one track in time order");
            let name = self.names.get(&e.name_iid.unwrap_or(0)).cloned();
            let category = e
                .category_iids
                .first()
                .and_then(|c| self.categories.get(c).cloned());
            for &f in &e.flow_ids {
                assert!(self.d.flows_out.insert(f, (tid, ts)).is_none());
            }
            for &f in &e.terminating_flow_ids {
                // The trace processor ignores the end of a flow it has not seen start.
                assert!(
                    self.d.flows_out.contains_key(&f),
                    "flow {f} ends before it starts"
                );
                assert!(self.d.flows_in.insert(f, (tid, ts)).is_none());
            }
            let stack = self.open.entry(track).or_default();
            match Type::try_from(e.r#type.unwrap()).unwrap() {
                Type::SliceBegin => {
                    assert!(stack.is_empty(), "thread states do not nest");
                    stack.push((ts, name.unwrap(), category.unwrap()));
                }
                Type::SliceEnd => {
                    let (start, name, category) = stack.pop().expect("an open slice");
                    let slices = self.d.slices.entry(tid).or_default();
                    slices.push((start, ts, name, category));
                }
                Type::Instant => {
                    assert_eq!(category.as_deref(), Some(WAKEUP_CATEGORY));
                    let within = stack.last().map(|(_, _, c)| c.clone());
                    let instants = self.d.instants.entry(tid).or_default();
                    instants.push((ts, name.unwrap(), within));
                }
                Type::Unspecified => panic!("an event without a type"),
            }
        }
    }

    fn expected_slices(t: &ThreadTrack) -> Vec<(u64, u64, String, String)> {
        t.slices
            .iter()
            .map(|s| {
                let name = if s.name.is_empty() {
                    s.state.label()
                } else {
                    &s.name
                };
                (
                    s.start_ns,
                    s.end_ns,
                    name.to_string(),
                    s.state.label().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn round_trip() {
        let t = timeline();
        let d = decode(&encode(&t));
        // Clock snapshot, 1 process, 3 threads, 9 slices × 2, 2 wakeup instants, 3 samples.
        assert_eq!(d.packets, 1 + 1 + 3 + 18 + 2 + 3);
        assert_eq!(d.processes, BTreeMap::from([(100, "db".to_string())]));
        assert_eq!(
            d.threads,
            BTreeMap::from([
                (100, (100, "db".to_string())),
                (101, (100, "logger".to_string())),
                (102, (100, "flusher".to_string())),
            ])
        );
        for thread in &t.threads {
            assert_eq!(d.slices[&thread.tid], expected_slices(thread));
        }
        // Each wakeup: from an instant on the waker inside its running slice, to the wakee's
        // runnable slice; the flusher's flow ends on a track written before its own.
        let running = Some("running".to_string());
        assert_eq!(
            d.instants[&100],
            vec![(10_000, "wakes logger-101".to_string(), running.clone())]
        );
        assert_eq!(
            d.instants[&102],
            vec![(9_000, "wakes db-100".to_string(), running)]
        );
        assert_eq!(
            d.flows_out,
            BTreeMap::from([(1, (100, 10_000)), (2, (102, 9_000))])
        );
        assert_eq!(
            d.flows_in,
            BTreeMap::from([(1, (101, 10_000)), (2, (100, 9_000))])
        );
        assert_eq!(d.slices[&100][2].3, "runnable");
        let samples: Vec<_> = t
            .samples
            .iter()
            .map(|s| {
                let mode = if s.frames.last().unwrap().ends_with("_[k]") {
                    CpuMode::Kernel
                } else {
                    CpuMode::User
                };
                (s.tid, s.ts_ns, s.frames.clone(), mode as i32)
            })
            .collect();
        assert_eq!(d.samples, samples);
    }

    #[test]
    fn interned_once_and_sent_once() {
        let trace = Trace::decode(encode(&timeline()).as_slice()).unwrap();
        let interned: Vec<&InternedData> = trace
            .packet
            .iter()
            .filter_map(|p| p.interned_data.as_ref())
            .collect();
        let count = |f: fn(&InternedData) -> usize| interned.iter().map(|i| f(i)).sum::<usize>();
        // running, io, runnable, sleep, wakeup.
        assert_eq!(count(|i| i.event_categories.len()), 5);
        // running, fdatasync ← flush_log, runnable, futex_wait ← wait_for_work,
        // epoll_wait ← poll_loop, wakes logger-101, wakes db-100.
        assert_eq!(count(|i| i.event_names.len()), 7);
        // main, write_row, memcpy, log, sys_write_[k]: both samples of one stack share it.
        assert_eq!(count(|i| i.function_names.len()), 5);
        assert_eq!(count(|i| i.frames.len()), 5);
        assert_eq!(count(|i| i.callstacks.len()), 2);
        // The user and the kernel mapping.
        assert_eq!(count(|i| i.mappings.len()), 2);
        // The second sample of a stack sends nothing new.
        let samples: Vec<&TracePacket> = trace
            .packet
            .iter()
            .filter(|p| matches!(p.data, Some(Data::PerfSample(_))))
            .collect();
        assert!(samples[0].interned_data.is_some());
        assert!(samples[1].interned_data.is_none());
    }

    #[test]
    fn overlapping_slices_are_cut_to_nest() {
        use State::*;
        let t = Timeline {
            threads: vec![ThreadTrack {
                pid: 1,
                tid: 2,
                name: "t".to_string(),
                slices: vec![
                    slice(50, 80, Sleep, ""),
                    slice(0, 60, Running, ""),
                    // Inside the first: nothing left once cut.
                    slice(10, 40, Io, ""),
                    // Inverted.
                    slice(90, 85, Other, ""),
                    slice(80, 80, Runnable, ""),
                ],
            }],
            ..Default::default()
        };
        let d = decode(&encode(&t));
        let got: Vec<(u64, u64, String)> = d.slices[&2]
            .iter()
            .map(|(s, e, _, c)| (*s, *e, c.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 60, "running".to_string()),
                (60, 80, "sleep".to_string()),
                (80, 80, "runnable".to_string()),
            ]
        );
        // The process is not listed: it gets an unnamed track all the same.
        assert_eq!(d.processes, BTreeMap::from([(1, String::new())]));
    }

    #[test]
    fn wakeups_without_a_later_slice_or_a_known_thread() {
        let mut t = timeline();
        t.wakeups = vec![
            // After the wakee's last slice: the flow ends on an instant of its own.
            Wakeup {
                waker_tid: 100,
                waker_ts_ns: 11_500,
                wakee_tid: 101,
                wakee_ts_ns: 12_500,
            },
            // The waker is no thread of the timeline: nothing is drawn.
            Wakeup {
                waker_tid: 7,
                waker_ts_ns: 3_000,
                wakee_tid: 101,
                wakee_ts_ns: 3_000,
            },
        ];
        t.samples.push(Sample {
            tid: 7,
            ts_ns: 3_000,
            frames: vec!["x".into()],
        });
        let d = decode(&encode(&t));
        assert_eq!(d.flows_out, BTreeMap::from([(1, (100, 11_500))]));
        assert_eq!(d.flows_in, BTreeMap::from([(1, (101, 12_500))]));
        assert_eq!(
            d.instants[&101],
            vec![(12_500, "woken by db-100".to_string(), None)]
        );
        assert_eq!(d.samples.len(), 3);
    }

    #[test]
    fn repeated_numbers_are_not_packed() {
        // Perfetto's decoder reads a proto2 `repeated` number declared without
        // `[packed = true]` one field per value; a packed run would read as garbage.
        let key = |field: u32, wire: u8| {
            let mut k = Vec::new();
            prost::encoding::encode_varint(u64::from(field << 3 | u32::from(wire)), &mut k);
            k
        };
        let contains = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
        let event = TrackEvent {
            category_iids: vec![1, 2],
            flow_ids: vec![3, 4],
            terminating_flow_ids: vec![5, 6],
            ..Default::default()
        }
        .encode_to_vec();
        for (field, wire) in [(3, 0), (47, 1), (48, 1)] {
            assert!(
                contains(&event, &key(field, wire)),
                "field {field} unpacked"
            );
            assert!(
                !contains(&event, &key(field, 2)),
                "field {field} not packed"
            );
        }
        let callstack = Callstack {
            iid: Some(1),
            frame_ids: vec![1, 2, 3],
        }
        .encode_to_vec();
        assert_eq!(callstack, [0x08, 1, 0x10, 1, 0x10, 2, 0x10, 3]);
    }

    /// The Python with the `perfetto` package (PERFETTO_PYTHON, else python3); None, saying
    /// why, where there is none and PERFETTO_DECODE_REQUIRED is unset.
    fn perfetto_python() -> Option<std::ffi::OsString> {
        let python = std::env::var_os("PERFETTO_PYTHON").unwrap_or_else(|| "python3".into());
        let import = "import perfetto.protos.perfetto.trace.perfetto_trace_pb2";
        let missing = match std::process::Command::new(&python)
            .args(["-c", import])
            .output()
        {
            Err(e) => Some(format!("{} cannot run ({e})", python.display())),
            Ok(o) if !o.status.success() => Some(format!(
                "the `perfetto` Python package is missing (`pip install perfetto`): {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            )),
            Ok(_) => None,
        };
        if let Some(why) = missing {
            assert!(
                std::env::var_os("PERFETTO_DECODE_REQUIRED").is_none(),
                "PERFETTO_DECODE_REQUIRED is set but {why}"
            );
            eprintln!("skipped: {why}");
            return None;
        }
        Some(python)
    }

    /// tests/perfetto_decode.py's summary of `t`'s trace, as the official protos read it.
    fn official_summary(python: &std::ffi::OsStr, t: &Timeline) -> serde_json::Value {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/perfetto_decode.py");
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut w = std::io::BufWriter::new(file.as_file());
        write(t, &mut w).unwrap();
        w.flush().unwrap();
        let out = std::process::Command::new(python)
            .arg(script)
            .arg(file.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("{}", String::from_utf8_lossy(&out.stdout));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// A thread's slices in the decoder's summary: (start, end, name, state), none nested.
    fn official_slices(thread: &serde_json::Value) -> Vec<(u64, u64, String, String)> {
        thread["slices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                assert_eq!(s["depth"], 0);
                let start = s["start"].as_u64().unwrap();
                (
                    start,
                    start + s["dur"].as_u64().unwrap(),
                    s["name"].as_str().unwrap().to_string(),
                    s["state"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// Perfetto's own protos (PyPI `perfetto`) read the trace back through
    /// tests/perfetto_decode.py: the slices are the timeline's, to the nanosecond. The
    /// interpreter is `PERFETTO_PYTHON` (a virtualenv's, where the system Python takes no pip
    /// packages) or `python3`; without the package the test says why and passes, unless
    /// `PERFETTO_DECODE_REQUIRED` is set.
    #[test]
    fn official_protos_decode_the_trace() {
        let Some(python) = perfetto_python() else {
            return;
        };
        let t = timeline();
        let summary = official_summary(&python, &t);
        assert_eq!(summary["errors"], serde_json::json!([]));
        assert_eq!(summary["skipped_without_incremental_state"], 0);
        assert_eq!(
            summary["clock"]["primary_trace_clock"],
            BUILTIN_CLOCK_MONOTONIC
        );
        assert_eq!(
            summary["clock"]["sequence_clock_id"],
            BUILTIN_CLOCK_MONOTONIC
        );
        assert_eq!(
            summary["processes"],
            serde_json::json!([{"pid": 100, "name": "db"}])
        );
        let threads = summary["threads"].as_array().unwrap();
        assert_eq!(threads.len(), t.threads.len());
        for (got, want) in threads.iter().zip(&t.threads) {
            assert_eq!(got["pid"], want.pid);
            assert_eq!(got["tid"], want.tid);
            assert_eq!(got["name"], want.name.as_str());
            assert_eq!(official_slices(got), expected_slices(want));
        }
        // The waker's instant sits inside its running slice.
        assert_eq!(
            threads[0]["instants"],
            serde_json::json!([{"ts": 10_000, "name": "wakes logger-101", "state": "wakeup", "depth": 1}])
        );
        assert_eq!(
            threads[2]["instants"],
            serde_json::json!([{"ts": 9_000, "name": "wakes db-100", "state": "wakeup", "depth": 1}])
        );
        assert_eq!(summary["flows"], 2);
        assert_eq!(
            summary["flow_list"],
            serde_json::json!([
                {"id": 1, "from": {"tid": 100, "ts": 10_000}, "to": {"tid": 101, "ts": 10_000}},
                {"id": 2, "from": {"tid": 102, "ts": 9_000}, "to": {"tid": 100, "ts": 9_000}},
            ])
        );
        assert_eq!(summary["samples"], 3);
        let leaves: Vec<(u64, &str, &str)> = summary["sample_list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["tid"].as_u64().unwrap(),
                    s["leaf"].as_str().unwrap(),
                    s["cpu_mode"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            leaves,
            [
                (100, "memcpy", "MODE_USER"),
                (100, "memcpy", "MODE_USER"),
                (101, "sys_write_[k]", "MODE_KERNEL")
            ]
        );
    }

    #[test]
    fn a_wakeup_at_a_slice_boundary_belongs_to_the_earlier_slice() {
        use State::*;
        let thread = |tid: u32, slices| ThreadTrack {
            pid: 1,
            tid,
            name: format!("t{tid}"),
            slices,
        };
        let t = Timeline {
            threads: vec![
                thread(2, vec![slice(0, 10, Running, ""), slice(10, 20, Sleep, "")]),
                thread(
                    3,
                    vec![slice(0, 10, Sleep, ""), slice(10, 20, Runnable, "")],
                ),
            ],
            wakeups: vec![Wakeup {
                waker_tid: 2,
                waker_ts_ns: 10,
                wakee_tid: 3,
                wakee_ts_ns: 10,
            }],
            ..Default::default()
        };
        let d = decode(&encode(&t));
        assert_eq!(
            d.instants[&2],
            vec![(10, "wakes t3-3".to_string(), Some("running".to_string()))]
        );
        assert_eq!(d.flows_in, BTreeMap::from([(1, (3, 10))]));
        assert_eq!(d.slices[&3][1].3, "runnable");
    }

    #[test]
    fn empty_timeline() {
        let d = decode(&encode(&Timeline::default()));
        assert_eq!(d.packets, 1);
    }
}
