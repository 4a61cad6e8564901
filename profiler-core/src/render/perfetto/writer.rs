//! A [`TrackPlan`] → the `Trace` message, one `TracePacket` after another: the descriptors,
//! then each event with the interned entries it is the first to use.

use std::{
    collections::HashMap,
    io::{self, Write},
};

use super::{
    plan::{Item, PlannedTrack, TrackPlan, process_uuid, thread_uuid},
    proto::{
        self, Callstack, Clock, ClockSnapshot, CpuMode, Data, DebugAnnotation, EventCategory,
        EventName, Frame, InternedData, InternedString, Mapping, PerfSample, ProcessDescriptor,
        ThreadDescriptor, TracePacket, TracePacketDefaults, TrackDescriptor, TrackEvent, Type,
    },
    tracks::{Sample, Tracks},
};

/// The one packet sequence of the file.
pub const SEQUENCE_ID: u32 = 1;
/// Category of the waker's instant event.
pub const WAKEUP_CATEGORY: &str = "wakeup";
/// Mapping of frames ending in `_[k]`, as pprof.rs names it.
const KERNEL_MAPPING: &str = "[kernel.kallsyms]";
const USER_MAPPING: &str = "[user]";

/// Writes `timeline` as a Perfetto trace (a `Trace` message: one `TracePacket` after another,
/// each written as soon as it is encoded).
pub fn write(timeline: &Tracks, out: &mut impl Write) -> io::Result<()> {
    let plan = TrackPlan::new(timeline);
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

    fn event(
        &mut self,
        timeline: &Tracks,
        plan: &TrackPlan<'_>,
        ts: u64,
        item: &Item,
    ) -> TracePacket {
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
                    debug_annotations: s
                        .slice
                        .args
                        .iter()
                        .map(|(name, value)| DebugAnnotation {
                            name: Some(name.to_string()),
                            string_value: Some(value.clone()),
                        })
                        .collect(),
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
                    debug_annotations: Vec::new(),
                })
            }
            Item::Sample { sample, track } => {
                self.sample(&timeline.samples[sample], &plan.tracks[track], &mut new)
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

    /// An on-CPU sample on its thread's track.
    fn sample(&mut self, sample: &Sample, t: &PlannedTrack<'_>, new: &mut InternedData) -> Data {
        let frames = &sample.frames;
        let cpu_mode = match frames.last() {
            Some(leaf) if is_kernel(leaf) => CpuMode::Kernel,
            Some(_) => CpuMode::User,
            None => CpuMode::Unknown,
        };
        Data::PerfSample(PerfSample {
            pid: Some(t.pid),
            tid: Some(t.tid),
            callstack_iid: (!frames.is_empty()).then(|| self.callstack(frames, new)),
            cpu_mode: Some(cpu_mode as i32),
        })
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
