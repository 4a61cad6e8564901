//! pprof: the time model with named stacks → a gzipped `profile.proto` (`--pprof PATH`), the
//! format `go tool pprof`, Pyroscope, Parca and Grafana read.
//!
//! - `--mode cpu`: two values per sample, `samples/count` and `cpu/nanoseconds` (samples ×
//!   period); `off` and `wall`: one, `wall/nanoseconds`, the time the fold counts in µs.
//! - One sample per thread, stack pair and state, labelled `thread` (name), `tid`, `pid` and
//!   `state` (`on-cpu`, `sleep`, `io`, `runqueue`, `other`: the `[off-cpu:<state>]` word), so
//!   `-tagfocus=state=io` keeps the I/O waits; a wait in a system call on an fd also has
//!   `resource` (`TCP → 127.0.0.1:5432 (postgres, PID 812)`, a file's path and file system),
//!   so `-tagfocus=resource=…` keeps the waits on one.
//! - Goroutine waits of Go targets (wall and off modes): one sample per process, goroutine
//!   stack and wait reason, `state` `goroutine`, `thread` `goroutines`, `go_reason` the
//!   runtime's reason.
//! - A sample's frames are the folded line's without the process root (it is the `pid`
//!   label and the first mapping): user then kernel frames, and an off-CPU stack's
//!   `[off-cpu:<state>]` leaf. Kernel frames keep their `_[k]` suffix and lie in a mapping of
//!   their own, `[kernel.kallsyms]`; user frames lie in one mapping per file they came from
//!   (its path and GNU build ID; the function's file name too), JIT code and anonymous memory
//!   in the first mapping, named after the process (so do all user frames of captures saved
//!   before files were recorded). There are no addresses. Frames that stand for no code (`[off-cpu:sleep]`, `[profiler overhead]`,
//!   `[user stack unavailable]`, …) have no mapping. Every mapping says its functions are
//!   already named, so pprof does not try to symbolize them again.
//! - One location per function (there are no addresses), one function per name.

use std::{
    collections::{BTreeMap, HashMap},
    io::{self, Write},
};

use profiler_common::stack_id;

use crate::{
    model::{FrameFile, Kind, Mode, NO_FILE, Profile, SavedCapture, StackNames, stack_frames},
    symbolize::INLINED_SUFFIX,
};

/// The subset of `profile.proto` (github.com/google/pprof, proto/profile.proto) this
/// profiler writes, with the field numbers of that file.
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// `string_table[0]` is always "".
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        /// Nanoseconds since the Unix epoch.
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    /// Every `i64` naming something is an index into `string_table`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        /// One per `sample_type`.
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    /// A string (`str`) or numeric (`num`) label.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// 0: no mapping.
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

/// Name of the kernel's mapping (its symbols come from kallsyms, as perf names it).
pub const KERNEL_MAPPING: &str = "[kernel.kallsyms]";

/// The `state` label of a kind of time.
pub fn state_label(kind: Kind) -> &'static str {
    match kind {
        Kind::OnCpu => "on-cpu",
        Kind::Off(state) => state.label(),
    }
}

/// Writes the capture as gzipped pprof.
pub fn write_pprof(saved: &SavedCapture, out: &mut dyn Write) -> io::Result<()> {
    let bytes = prost::Message::encode_to_vec(&build(saved));
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&bytes)?;
    gz.finish()?.flush()
}

impl Builder {
    /// A sample's labels: its thread's name, tid and process, and its state.
    fn labels(
        &mut self,
        keys: &LabelKeys,
        thread: &str,
        tid: u32,
        pid: u32,
        state: &str,
    ) -> Vec<proto::Label> {
        vec![
            proto::Label {
                key: keys.thread,
                str: self.string(thread),
                num: 0,
            },
            proto::Label {
                key: keys.tid,
                str: 0,
                num: i64::from(tid),
            },
            proto::Label {
                key: keys.pid,
                str: 0,
                num: i64::from(pid),
            },
            proto::Label {
                key: keys.state,
                str: self.string(state),
                num: 0,
            },
        ]
    }
}

/// The capture as a pprof profile.
pub fn build(saved: &SavedCapture) -> proto::Profile {
    let SavedCapture { meta, profile, .. } = saved;
    let mut b = Builder::default();
    let cpu = profile.mode == Mode::Cpu;
    let (sample_type, period_type, period) = if cpu {
        let cpu_ns = b.value_type("cpu", "nanoseconds");
        (
            vec![b.value_type("samples", "count"), cpu_ns.clone()],
            cpu_ns,
            profile.period_ns,
        )
    } else {
        // Time measured, not sampled: every nanosecond counts.
        let wall = b.value_type("wall", "nanoseconds");
        (vec![wall.clone()], wall, 1)
    };
    let default_sample_type = b.string(if cpu { "cpu" } else { "wall" });
    // mapping[0] is the main binary by convention: the process.
    b.mappings.push(proto::Mapping {
        id: USER_MAPPING,
        filename: b.strings.get(&meta.target),
        build_id: 0,
        has_functions: true,
    });

    let samples = samples(&mut b, saved, cpu);
    let comment = comments(saved)
        .iter()
        .map(|c| b.string(c))
        .collect::<Vec<_>>();
    proto::Profile {
        sample_type,
        sample: samples,
        mapping: b.mappings,
        location: b.locations,
        function: b.functions,
        string_table: b.strings.table,
        time_nanos: meta.started_unix_ns.map_or(0, to_i64),
        duration_nanos: to_i64(profile.window.len_ns()),
        period_type: Some(period_type),
        period: to_i64(period),
        comment,
        default_sample_type,
    }
}

/// Per thread, stack pair and state label: the samples and time (both run-queue kinds are
/// one state).
type Merged = BTreeMap<(u32, u64, u64, &'static str, u64), (u64, u64)>;

fn merged(profile: &Profile) -> Merged {
    let mut merged = Merged::new();
    for e in &profile.entries {
        if e.samples == 0 && e.time_ns == 0 {
            continue;
        }
        let key = (
            e.tid,
            e.user_stack,
            e.kernel_stack,
            state_label(e.kind),
            e.resource,
        );
        let v = merged.entry(key).or_default();
        v.0 += e.samples;
        v.1 += e.time_ns;
    }
    merged
}

/// One pprof sample per thread, stack pair and state: samples and CPU time (`cpu`), or wall
/// time, with the thread's labels.
fn samples(b: &mut Builder, saved: &SavedCapture, cpu: bool) -> Vec<proto::Sample> {
    let SavedCapture {
        meta,
        profile,
        names,
        ..
    } = saved;
    let merged = merged(profile);
    let keys = LabelKeys {
        thread: b.string("thread"),
        tid: b.string("tid"),
        pid: b.string("pid"),
        state: b.string("state"),
    };
    let mut samples = Vec::with_capacity(merged.len());
    // Interned at its first use: a capture without resources keeps its string table.
    let mut resource_key: Option<i64> = None;
    for ((tid, user, kernel, state, resource), (count, ns)) in merged {
        let value = if cpu {
            vec![to_i64(count), to_i64(ns)]
        } else {
            vec![to_i64(ns)]
        };
        let (thread, pid) = profile.threads.get(&tid).map_or(("?", meta.pid), |t| {
            // Captures saved before processes were recorded have pid 0.
            (t.name.as_str(), if t.pid == 0 { meta.pid } else { t.pid })
        });
        let mut label = b.labels(&keys, thread, tid, pid, state);
        if let Some(r) = profile.resources.get(&resource) {
            let key = *resource_key.get_or_insert_with(|| b.string("resource"));
            label.push(proto::Label {
                key,
                str: b.string(&r.text),
                num: 0,
            });
        }
        let location_id = b.stack(user, kernel, state, names);
        samples.push(proto::Sample {
            location_id,
            value,
            label,
        });
    }
    if !cpu {
        goroutine_samples(b, &keys, profile, names, &mut samples);
    }
    samples
}

/// Goroutine waits: one sample per process, goroutine stack and wait reason, labelled
/// `thread` `goroutines`, `state` `goroutine` and `go_reason` (`select`, `IO wait` …), the
/// stack ending in `[off-cpu:goroutine]`; `-tagfocus=state=goroutine` keeps them,
/// `-tagignore=state=goroutine` shows the OS threads alone.
fn goroutine_samples(
    b: &mut Builder,
    keys: &LabelKeys,
    profile: &Profile,
    names: &StackNames,
    samples: &mut Vec<proto::Sample>,
) {
    if profile.goroutines.waits.is_empty() {
        return;
    }
    let reason_key = b.string("go_reason");
    for w in &profile.goroutines.waits {
        if w.total_ns == 0 {
            continue;
        }
        let mut label = b.labels(keys, "goroutines", 0, w.pid, GOROUTINE_STATE);
        label.push(proto::Label {
            key: reason_key,
            str: b.string(&w.reason),
            num: 0,
        });
        let location_id = b.stack(w.user_stack, stack_id::EMPTY, GOROUTINE_STATE, names);
        samples.push(proto::Sample {
            location_id,
            value: vec![to_i64(w.total_ns)],
            label,
        });
    }
}

/// The `state` label of goroutine waits.
const GOROUTINE_STATE: &str = "goroutine";

/// What `go tool pprof -comments` prints: the capture, its unit, its losses.
fn comments(saved: &SavedCapture) -> Vec<String> {
    let SavedCapture { meta, profile, .. } = saved;
    let mut c = vec![format!(
        "{} (PID {}), {} mode, {:.3} s, kernel {}",
        meta.target,
        meta.pid,
        profile.mode.name(),
        profile.window.len_ns() as f64 / 1e9,
        meta.kernel
    )];
    let hz = 1e9 / profile.period_ns.max(1) as f64;
    c.push(match profile.mode {
        Mode::Cpu => format!(
            "samples/count: cpu-clock samples at {hz:.0} Hz per CPU; cpu/nanoseconds: samples × period"
        ),
        Mode::Wall => format!(
            "wall/nanoseconds: each thread's time on the CPU (measured at context switches, \
             spread over stacks by {hz:.0} Hz samples) and off it (measured per wait)"
        ),
        Mode::Off => {
            "wall/nanoseconds: each thread's time off the CPU (measured per wait)".to_string()
        }
    });
    c.push(
        "label state: on-cpu, sleep (interruptible), io (uninterruptible), runqueue \
         (runnable, waiting for a CPU), other"
            .to_string(),
    );
    if let Some(why) = &meta.ended_early {
        c.push(format!("ended early: {why}"));
    }
    let lost = profile.total_lost();
    if lost > 0 {
        c.push(format!(
            "lost {lost} (see the report: `profiler replay CAPTURE` of a saved capture)"
        ));
    }
    c
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

const USER_MAPPING: u64 = 1;

struct LabelKeys {
    thread: i64,
    tid: i64,
    pid: i64,
    state: i64,
}

/// The string table, "" first, each string once.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Default for Strings {
    fn default() -> Self {
        Self {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }
}

impl Strings {
    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// Which mapping a frame lies in.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Side {
    /// A user frame, in the file of that index in `StackNames::files` (`NO_FILE`: in the
    /// process's own mapping, as for JIT code).
    User(u32),
    Kernel,
    /// A frame that stands for no code.
    None,
}

#[derive(Default)]
struct Builder {
    strings: Strings,
    mappings: Vec<proto::Mapping>,
    kernel_mapping: Option<u64>,
    /// Mapping ids of the files user frames lie in, by index in `StackNames::files`.
    file_mappings: HashMap<u32, u64>,
    locations: Vec<proto::Location>,
    functions: Vec<proto::Function>,
    /// (side, frame name and the methods inlined into it) → location id; one function per
    /// line of a location.
    location_of: HashMap<(Side, Vec<String>), u64>,
    /// Location ids (leaf first) by stack pair and state, as samples repeat them.
    stacks: HashMap<(u64, u64, &'static str), Vec<u64>>,
}

impl Builder {
    fn string(&mut self, s: &str) -> i64 {
        self.strings.get(s)
    }

    fn value_type(&mut self, r#type: &str, unit: &str) -> proto::ValueType {
        proto::ValueType {
            r#type: self.string(r#type),
            unit: self.string(unit),
        }
    }

    /// Location ids, leaf first, of a stack pair in a state.
    fn stack(
        &mut self,
        user: u64,
        kernel: u64,
        state: &'static str,
        names: &StackNames,
    ) -> Vec<u64> {
        if let Some(ids) = self.stacks.get(&(user, kernel, state)) {
            return ids.clone();
        }
        let mut frames: Vec<(Side, String)> = Vec::new();
        user_frames(&mut frames, user, names);
        side_frames(&mut frames, kernel, &names.kernel, Side::Kernel, names);
        if state != "on-cpu" {
            frames.push((Side::None, format!("[off-cpu:{state}]")));
        }
        // A compiled frame and the methods it inlined (`_[i]`, after it) are one location,
        // one line each.
        let mut located: Vec<(Side, Vec<String>)> = Vec::new();
        for (side, name) in frames {
            match (name.strip_suffix(INLINED_SUFFIX), located.last_mut()) {
                (Some(inlined), Some(caller)) if caller.0 == side => {
                    caller.1.push(inlined.to_string());
                }
                _ => located.push((side, vec![name])),
            }
        }
        let ids: Vec<u64> = located
            .into_iter()
            .rev()
            .map(|(side, chain)| self.location(side, chain, names))
            .collect();
        self.stacks.insert((user, kernel, state), ids.clone());
        ids
    }

    /// The location of a frame and the methods inlined into it (`chain`, caller first): one
    /// line per function, the innermost first as profile.proto orders them.
    fn location(&mut self, side: Side, chain: Vec<String>, names: &StackNames) -> u64 {
        let key = (side, chain);
        if let Some(&id) = self.location_of.get(&key) {
            return id;
        }
        let (mapping_id, filename) = match side {
            Side::User(file) => match names.files.get(file as usize) {
                Some(f) => (self.file_mapping(file, f), self.string(&f.path)),
                None => (USER_MAPPING, 0),
            },
            Side::Kernel => (self.kernel_mapping(), 0),
            Side::None => (0, 0),
        };
        let mut line = Vec::with_capacity(key.1.len());
        for function in key.1.iter().rev() {
            let name = self.string(function);
            let function_id = self.functions.len() as u64 + 1;
            self.functions.push(proto::Function {
                id: function_id,
                name,
                system_name: name,
                filename,
            });
            line.push(proto::Line { function_id });
        }
        let id = self.locations.len() as u64 + 1;
        self.locations.push(proto::Location {
            id,
            mapping_id,
            line,
        });
        self.location_of.insert(key, id);
        id
    }

    fn file_mapping(&mut self, index: u32, file: &FrameFile) -> u64 {
        if let Some(&id) = self.file_mappings.get(&index) {
            return id;
        }
        let id = self.mappings.len() as u64 + 1;
        let filename = self.string(&file.path);
        let build_id = self.string(&file.build_id);
        self.mappings.push(proto::Mapping {
            id,
            filename,
            build_id,
            has_functions: true,
        });
        self.file_mappings.insert(index, id);
        id
    }

    fn kernel_mapping(&mut self) -> u64 {
        if let Some(id) = self.kernel_mapping {
            return id;
        }
        let id = self.mappings.len() as u64 + 1;
        let filename = self.string(KERNEL_MAPPING);
        self.mappings.push(proto::Mapping {
            id,
            filename,
            build_id: 0,
            has_functions: true,
        });
        self.kernel_mapping = Some(id);
        id
    }
}

/// A user stack's frames root→leaf, each in its file (captures saved before files were
/// recorded: all in the process's mapping).
fn user_frames(frames: &mut Vec<(Side, String)>, id: u64, names: &StackNames) {
    match (names.user.get(&id), names.user_files.get(&id)) {
        (Some(named), Some(files)) if files.len() == named.len() => frames.extend(
            named
                .iter()
                .zip(files)
                .map(|(n, &file)| (Side::User(file), n.to_string())),
        ),
        _ => side_frames(frames, id, &names.user, Side::User(NO_FILE), names),
    }
}

/// One side's frames root→leaf: named frames in that side's mapping, or the frame
/// `stack_frames` puts for a stack that has no names (lost, unsampled, …), in none.
fn side_frames(
    frames: &mut Vec<(Side, String)>,
    id: u64,
    side_names: &HashMap<u64, Vec<crate::model::Name>>,
    side: Side,
    names: &StackNames,
) {
    if let Some(named) = side_names.get(&id) {
        frames.extend(named.iter().map(|n| (side, n.to_string())));
        return;
    }
    let (user, kernel) = match side {
        Side::Kernel => (stack_id::EMPTY, id),
        _ => (id, stack_id::EMPTY),
    };
    frames.extend(
        stack_frames(user, kernel, names)
            .into_iter()
            .map(|f| (Side::None, f)),
    );
}

#[cfg(test)]
mod tests {
    use std::{
        collections::{BTreeMap, HashMap},
        io::Read as _,
        sync::Arc,
    };

    use profiler_common::WaitState;
    use prost::Message as _;

    use super::*;
    use crate::model::{CaptureMeta, Entry, Name, Profile, ThreadTime, Window};

    fn entry(tid: u32, user: u64, kernel: u64, kind: Kind, samples: u64, time_ns: u64) -> Entry {
        Entry {
            samples,
            time_ns,
            ..Entry::new(0, tid, user, kernel, kind)
        }
    }

    fn capture(mode: Mode, entries: Vec<Entry>) -> SavedCapture {
        let mut threads = BTreeMap::new();
        for (tid, name) in [(11, "worker"), (12, "syncer")] {
            threads.insert(
                tid,
                ThreadTime {
                    name: name.into(),
                    ..ThreadTime::default()
                },
            );
        }
        let n = |v: &[&str]| v.iter().map(|s| Arc::from(*s)).collect::<Vec<Name>>();
        let mut names = StackNames::default();
        names.user.insert(1, n(&["main", "work", "spin"]));
        names.user.insert(2, n(&["main", "nap", "clock_nanosleep"]));
        names.user.insert(3, n(&["main", "work", "fsync"]));
        names
            .kernel
            .insert(9, n(&["entry_SYSCALL_64_[k]", "do_nanosleep_[k]"]));
        names
            .kernel
            .insert(8, n(&["entry_SYSCALL_64_[k]", "do_fsync_[k]"]));
        SavedCapture {
            format: crate::model::saved::SAVED_FORMAT,
            meta: CaptureMeta {
                selection: String::new(),
                target: "app".into(),
                pid: 10,
                kernel: "6.18".into(),
                ended_early: None,
                started_unix_ns: Some(1_700_000_000_000_000_000),
                notes: Vec::new(),
                machine: None,
                range: None,
            },
            profile: Profile {
                entries,
                threads,
                ..Profile::empty(
                    mode,
                    Window {
                        start_ns: 5_000_000_000,
                        stop_ns: 7_000_000_000,
                    },
                    10_101_010,
                )
            },
            names,
            timeline: None,
        }
    }

    /// A sample as a reader sees it: frames root→leaf with their mapping's file name, and
    /// its labels as `key=value`.
    struct Read {
        frames: Vec<(String, String)>,
        labels: Vec<String>,
        value: Vec<i64>,
    }

    fn read(p: &proto::Profile) -> Vec<Read> {
        let s = |i: i64| p.string_table[i as usize].clone();
        let function: HashMap<u64, &proto::Function> =
            p.function.iter().map(|f| (f.id, f)).collect();
        let location: HashMap<u64, &proto::Location> =
            p.location.iter().map(|l| (l.id, l)).collect();
        let mapping: HashMap<u64, &proto::Mapping> = p.mapping.iter().map(|m| (m.id, m)).collect();
        p.sample
            .iter()
            .map(|sample| Read {
                frames: sample
                    .location_id
                    .iter()
                    .rev()
                    .map(|id| {
                        let l = location[id];
                        assert_eq!(l.line.len(), 1);
                        let file = mapping
                            .get(&l.mapping_id)
                            .map_or(String::new(), |m| s(m.filename));
                        (s(function[&l.line[0].function_id].name), file)
                    })
                    .collect(),
                labels: sample
                    .label
                    .iter()
                    .map(|l| {
                        if l.str != 0 {
                            format!("{}={}", s(l.key), s(l.str))
                        } else {
                            format!("{}={}", s(l.key), l.num)
                        }
                    })
                    .collect(),
                value: sample.value.clone(),
            })
            .collect()
    }

    /// The rules every reader relies on (profile.proto's comments, and what `go tool pprof`
    /// checks when it parses).
    fn well_formed(p: &proto::Profile) {
        assert_eq!(p.string_table[0], "");
        let unique = |ids: Vec<u64>, what: &str| {
            let n = ids.len();
            let set: std::collections::BTreeSet<u64> = ids.into_iter().collect();
            assert_eq!(set.len(), n, "{what} ids repeat");
            assert!(!set.contains(&0), "{what} id 0");
            set
        };
        let mappings = unique(p.mapping.iter().map(|m| m.id).collect(), "mapping");
        let functions = unique(p.function.iter().map(|f| f.id).collect(), "function");
        let locations = unique(p.location.iter().map(|l| l.id).collect(), "location");
        for l in &p.location {
            assert!(l.mapping_id == 0 || mappings.contains(&l.mapping_id));
            assert!(
                l.line
                    .iter()
                    .all(|line| functions.contains(&line.function_id))
            );
        }
        for s in &p.sample {
            assert_eq!(s.value.len(), p.sample_type.len());
            assert!(s.location_id.iter().all(|id| locations.contains(id)));
        }
        let strings = p.string_table.len() as i64;
        for f in &p.function {
            assert!(f.name < strings && f.filename < strings);
        }
        let names: std::collections::BTreeSet<&String> = p.string_table.iter().collect();
        assert_eq!(names.len(), p.string_table.len(), "strings repeat");
    }

    #[test]
    fn a_compiled_frame_and_what_it_inlined_are_one_location_with_a_line_each() {
        let mut saved = capture(
            Mode::Wall,
            vec![entry(11, 4, 0, Kind::Off(WaitState::Sleep), 0, 1_000)],
        );
        let n = |v: &[&str]| v.iter().map(|s| Arc::from(*s)).collect::<Vec<Name>>();
        saved.names.user.insert(
            4,
            n(&[
                "Chain.doFilter",
                "Journal.record_[i]",
                "Journal.write_[i]",
                "fsync",
            ]),
        );
        let p = build(&saved);
        well_formed(&p);
        let s = |i: i64| p.string_table[i as usize].as_str();
        let function: HashMap<u64, &proto::Function> =
            p.function.iter().map(|f| (f.id, f)).collect();
        let location: HashMap<u64, &proto::Location> =
            p.location.iter().map(|l| (l.id, l)).collect();
        let frames: Vec<Vec<&str>> = p.sample[0]
            .location_id
            .iter()
            .map(|id| {
                location[id]
                    .line
                    .iter()
                    .map(|l| s(function[&l.function_id].name))
                    .collect()
            })
            .collect();
        assert_eq!(
            frames,
            [
                vec!["[off-cpu:sleep]"],
                vec!["fsync"],
                vec!["Journal.write", "Journal.record", "Chain.doFilter"],
            ]
        );
    }

    #[test]
    fn wall_samples_carry_thread_state_and_nanoseconds() {
        let saved = capture(
            Mode::Wall,
            vec![
                entry(11, 1, 0, Kind::OnCpu, 3, 30_000_000),
                entry(11, 2, 9, Kind::Off(WaitState::Sleep), 0, 1_500_000_000),
                entry(11, 2, 9, Kind::Off(WaitState::RunqueueWoken), 0, 1_000),
                entry(11, 2, 9, Kind::Off(WaitState::RunqueuePreempted), 0, 500),
                entry(12, 3, 8, Kind::Off(WaitState::Io), 0, 400_000_000),
                entry(12, stack_id::UNSAMPLED, 0, Kind::OnCpu, 0, 7_000),
            ],
        );
        let p = build(&saved);
        well_formed(&p);
        let st = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(p.sample_type.len(), 1);
        assert_eq!(
            (st(p.sample_type[0].r#type), st(p.sample_type[0].unit)),
            ("wall", "nanoseconds")
        );
        assert_eq!(st(p.default_sample_type), "wall");
        assert_eq!(p.duration_nanos, 2_000_000_000);
        assert_eq!(p.time_nanos, 1_700_000_000_000_000_000);
        let period_type = p.period_type.as_ref().unwrap();
        assert_eq!(st(period_type.r#type), "wall");
        assert_eq!(p.mapping.len(), 2);
        assert_eq!(st(p.mapping[0].filename), "app");
        assert_eq!(st(p.mapping[1].filename), KERNEL_MAPPING);
        assert!(p.mapping.iter().all(|m| m.has_functions));

        let samples = read(&p);
        let total: i64 = samples.iter().map(|s| s.value[0]).sum();
        assert_eq!(total, 1_930_008_500, "every nanosecond, once");
        // Both run-queue kinds are one state: one sample.
        let runqueue: Vec<&Read> = samples
            .iter()
            .filter(|s| s.labels.contains(&"state=runqueue".to_string()))
            .collect();
        assert_eq!(runqueue.len(), 1);
        assert_eq!(runqueue[0].value, vec![1_500]);
        assert_eq!(
            runqueue[0].labels,
            ["thread=worker", "tid=11", "pid=10", "state=runqueue"]
        );
        let io = samples
            .iter()
            .find(|s| s.labels.contains(&"state=io".to_string()))
            .expect("an io sample");
        assert_eq!(
            io.frames,
            [
                ("main", "app"),
                ("work", "app"),
                ("fsync", "app"),
                ("entry_SYSCALL_64_[k]", KERNEL_MAPPING),
                ("do_fsync_[k]", KERNEL_MAPPING),
                ("[off-cpu:io]", ""),
            ]
            .map(|(f, m)| (f.to_string(), m.to_string()))
        );
        assert_eq!(io.labels, ["thread=syncer", "tid=12", "pid=10", "state=io"]);
        let on_cpu: Vec<&Read> = samples
            .iter()
            .filter(|s| s.labels.contains(&"state=on-cpu".to_string()))
            .collect();
        assert_eq!(on_cpu.len(), 2);
        let frames = |s: &Read| s.frames.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
        assert_eq!(frames(on_cpu[0]), ["main", "work", "spin"]);
        // A stack without names is the frame the folded output shows, in no mapping.
        assert_eq!(
            on_cpu[1].frames,
            [("[on-cpu: between samples]".to_string(), String::new())]
        );
        // `main` and `work` appear in three stacks, once each in the tables.
        let named = |name: &str| p.function.iter().filter(|f| st(f.name) == name).count();
        assert_eq!((named("main"), named("work")), (1, 1));
        assert_eq!(p.location.len(), p.function.len());
    }

    #[test]
    fn goroutine_waits_are_samples_of_their_own_state() {
        let mut c = capture(
            Mode::Wall,
            vec![entry(11, 1, 0, Kind::OnCpu, 3, 30_000_000)],
        );
        c.profile
            .goroutines
            .waits
            .push(crate::model::GoroutineWait {
                pid: 10,
                user_stack: 2,
                reason: "select".into(),
                total_ns: 4_000_000_000,
                ended_ns: 4_000_000_000,
                count: 200,
                open: 0,
                min_ns: 19_000_000,
                max_ns: 22_000_000,
                hist: Default::default(),
            });
        let p = build(&c);
        well_formed(&p);
        let samples = read(&p);
        let go = samples
            .iter()
            .find(|s| s.labels.contains(&"state=goroutine".to_string()))
            .expect("a goroutine sample");
        assert_eq!(go.value, [4_000_000_000]);
        assert!(go.labels.contains(&"go_reason=select".to_string()));
        assert!(go.labels.contains(&"thread=goroutines".to_string()));
        assert!(go.labels.contains(&"pid=10".to_string()));
        let frames: Vec<&str> = go.frames.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            frames,
            ["main", "nap", "clock_nanosleep", "[off-cpu:goroutine]"]
        );
        // In --mode cpu there are none: samples are CPU time only.
        let mut cpu = capture(Mode::Cpu, vec![entry(11, 1, 0, Kind::OnCpu, 3, 30_000_000)]);
        cpu.profile.goroutines = c.profile.goroutines.clone();
        assert!(
            read(&build(&cpu))
                .iter()
                .all(|s| !s.labels.contains(&"state=goroutine".to_string()))
        );
    }

    #[test]
    fn cpu_samples_count_samples_and_cpu_time() {
        let saved = capture(
            Mode::Cpu,
            vec![
                entry(11, 1, 0, Kind::OnCpu, 3, 30_303_030),
                entry(12, 3, 8, Kind::OnCpu, 1, 10_101_010),
            ],
        );
        let p = build(&saved);
        well_formed(&p);
        let st = |i: i64| p.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (st(t.r#type), st(t.unit)))
            .collect();
        assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
        assert_eq!(st(p.default_sample_type), "cpu");
        assert_eq!(p.period, 10_101_010);
        assert_eq!(st(p.period_type.as_ref().unwrap().r#type), "cpu");
        let samples = read(&p);
        assert_eq!(samples[0].value, vec![3, 30_303_030]);
        assert_eq!(samples[1].value, vec![1, 10_101_010]);
        assert!(samples.iter().all(|s| s.labels[3] == "state=on-cpu"));
        assert!(
            samples
                .iter()
                .all(|s| s.frames.iter().all(|f| !f.0.starts_with("[off-cpu")))
        );
    }

    #[test]
    fn lost_stacks_keep_their_time_under_the_frame_that_says_so() {
        let saved = capture(
            Mode::Off,
            vec![
                entry(
                    11,
                    stack_id::LOST_TABLE_FULL,
                    stack_id::LOST_FETCH,
                    Kind::Off(WaitState::Other),
                    0,
                    5,
                ),
                entry(11, 77, 0, Kind::Off(WaitState::Sleep), 0, 0),
            ],
        );
        let p = build(&saved);
        well_formed(&p);
        let samples = read(&p);
        assert_eq!(samples.len(), 1, "a sample of 0 ns is left out");
        let frames: Vec<&str> = samples[0].frames.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(
            frames,
            [
                "[user stack lost: stack table full]",
                "[kernel stack unavailable]",
                "[off-cpu:other]"
            ]
        );
        assert!(samples[0].frames.iter().all(|f| f.1.is_empty()));
        // No kernel frame, no kernel mapping.
        assert_eq!(p.mapping.len(), 1);
    }

    #[test]
    fn the_file_is_gzipped_protobuf_that_decodes_to_the_same_profile() {
        let saved = capture(
            Mode::Wall,
            vec![entry(11, 2, 9, Kind::Off(WaitState::Sleep), 0, 1_000)],
        );
        let mut file = Vec::new();
        write_pprof(&saved, &mut file).unwrap();
        assert_eq!(&file[..2], &[0x1f, 0x8b], "gzip magic");
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(&file[..])
            .read_to_end(&mut bytes)
            .unwrap();
        let decoded = proto::Profile::decode(&bytes[..]).unwrap();
        assert_eq!(decoded, build(&saved));
        let comments: Vec<&str> = decoded
            .comment
            .iter()
            .map(|&i| decoded.string_table[i as usize].as_str())
            .collect();
        assert_eq!(comments[0], "app (PID 10), wall mode, 2.000 s, kernel 6.18");
    }

    #[test]
    fn a_capture_saved_without_its_start_time_has_none() {
        let mut saved = capture(Mode::Off, Vec::new());
        saved.meta.started_unix_ns = None;
        let p = build(&saved);
        well_formed(&p);
        assert_eq!(p.time_nanos, 0);
        assert!(p.sample.is_empty());
    }

    #[test]
    fn user_frames_lie_in_their_files_mappings_with_build_ids() {
        let mut saved = capture(
            Mode::Wall,
            vec![
                entry(11, 1, 0, Kind::OnCpu, 3, 30_000_000),
                entry(12, 3, 8, Kind::Off(WaitState::Io), 0, 400_000_000),
            ],
        );
        // Thread 12 of another process of the service.
        saved.profile.threads.get_mut(&12).unwrap().pid = 20;
        let names = &mut saved.names;
        names.files = vec![
            FrameFile {
                path: "/usr/bin/app".into(),
                build_id: "0a1b2c".into(),
            },
            FrameFile {
                path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
                build_id: String::new(),
            },
        ];
        // main and work in the binary, spin JIT code; fsync in libc.
        names.user_files.insert(1, vec![0, 0, NO_FILE]);
        names.user_files.insert(3, vec![0, 0, 1]);
        let p = build(&saved);
        well_formed(&p);
        let st = |i: i64| p.string_table[i as usize].as_str();
        let mappings: std::collections::BTreeSet<(&str, &str)> = p
            .mapping
            .iter()
            .map(|m| (st(m.filename), st(m.build_id)))
            .collect();
        assert_eq!(st(p.mapping[0].filename), "app", "the process first");
        assert_eq!(
            mappings,
            [
                ("app", ""),
                ("/usr/bin/app", "0a1b2c"),
                ("/usr/lib/x86_64-linux-gnu/libc.so.6", ""),
                (KERNEL_MAPPING, ""),
            ]
            .into()
        );
        let samples = read(&p);
        let on_cpu = samples
            .iter()
            .find(|s| s.labels.contains(&"state=on-cpu".to_string()))
            .expect("an on-CPU sample");
        assert_eq!(
            on_cpu.frames,
            [
                ("main", "/usr/bin/app"),
                ("work", "/usr/bin/app"),
                ("spin", "app")
            ]
            .map(|(f, m)| (f.to_string(), m.to_string()))
        );
        let io = samples
            .iter()
            .find(|s| s.labels.contains(&"state=io".to_string()))
            .expect("an io sample");
        assert_eq!(
            io.frames[2],
            ("fsync".into(), "/usr/lib/x86_64-linux-gnu/libc.so.6".into())
        );
        assert_eq!(io.labels, ["thread=syncer", "tid=12", "pid=20", "state=io"]);
        let fsync = p
            .function
            .iter()
            .find(|f| st(f.name) == "fsync")
            .expect("fsync");
        assert_eq!(st(fsync.filename), "/usr/lib/x86_64-linux-gnu/libc.so.6");
    }
}
