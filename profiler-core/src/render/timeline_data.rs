//! The timeline's events as the HTML page carries them for its range flame graphs
//! (`timeline_html.rs` packs them, its script decodes them): a capture's timeline and stack
//! names → columns of integers. Each frame name is written once, each stack is a node of a
//! tree of frames (its parent and its frame), and the events refer to threads, states and
//! stacks by index; times are whole µs from the window's start, each relative to the one
//! before it on the same thread. Packed (gzip, base64), the 232 000 waits and 4 000 samples
//! of `big_capture.rs`'s 100-thread capture take 1.2 MB of the page, where the JSON of 100 000
//! of its waits took 18 MB (every stack spelt out per thread).
//!
//! The format, every number an unsigned LEB128 varint (`z`: zigzag-signed), each column all
//! of its values before the next:
//!
//! ```text
//! version (1), unit_ns (1000), period_ns (a sample's time)
//! strings:  n, n × (byte length, UTF-8)          frames, threads, states, by first use
//! threads:  n, n × string                        a thread's root frame, `name-tid`
//! states:   n, n × string                        a wait's leaf frame, `[off-cpu:sleep]`
//! nodes:    n, n × (i + 1 − parent), n × string  parent 0: none; node i is stack i + 1
//! samples:  per thread its count; then columns   at (z, from the thread's previous sample),
//!                                                stack (0: no frames), weight (samples)
//! waits:    per thread its count; then columns   start (z, from the thread's previous
//!                                                wait's end), blocked, state, stack
//! ```
//!
//! A capture with more than [`MAX_EVENTS`] is summarised: the waits of a thread in one stack
//! and state that begin and end inside one cell of [`SUMMARY_NS`] are one wait as long as
//! all of them, at the first one's start (so its end stays inside the cell), and its samples
//! in one stack and cell one sample of their count. A range of whole heatmap cells (20 ms)
//! gets the same flame graph from it; the coarser steps, tried in turn when one is not
//! enough, say so on the page.

use std::collections::{BTreeMap, HashMap};

use crate::model::{Profile, StackNames, Timeline, stack_frames};

/// The format's version, the decoder's first check.
pub const VERSION: u64 = 1;
/// Times are whole µs: far finer than the 20 ms cells a range is made of.
pub const UNIT_NS: u64 = 1_000;
/// Events the page carries one by one at most (≈ 4 bytes each packed).
pub const MAX_EVENTS: usize = 300_000;
/// The cells events are summed in when there are more than [`MAX_EVENTS`], finest first: the
/// heatmap's row, then coarser.
pub const SUMMARY_NS: [u64; 4] = [20_000_000, 100_000_000, 1_000_000_000, 10_000_000_000];

/// On-CPU samples of a thread in a stack: `weight` of them, the first at `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub thread: u32,
    /// µs from the window's start.
    pub at: u64,
    /// 0: no frames, else node `stack - 1`.
    pub stack: u32,
    pub weight: u64,
}

/// A long wait's blocked part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    pub thread: u32,
    /// µs from the window's start.
    pub start: u64,
    pub blocked: u64,
    pub state: u32,
    pub stack: u32,
}

/// The columns, before they are written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Columns {
    pub period_ns: u64,
    pub strings: Vec<String>,
    /// Per thread, the string of its frame.
    pub threads: Vec<u32>,
    /// Per state, the string of its leaf frame.
    pub states: Vec<u32>,
    /// Per node, its parent's stack number (0: a root frame) and its frame's string.
    pub parents: Vec<u32>,
    pub frames: Vec<u32>,
    /// By thread, then time.
    pub samples: Vec<Sample>,
    pub waits: Vec<Wait>,
}

/// What the page carries, and how it was cut to fit.
#[derive(Debug)]
pub struct Carried {
    pub columns: Columns,
    /// The timeline's samples and waits (its run-queue waits left out).
    pub events: usize,
    /// The cell events were summed in (`SUMMARY_NS`), None when each is carried alone.
    pub summary_ns: Option<u64>,
    /// Events left out after the coarsest summary (the shortest waits, the rarest samples).
    pub left_out: usize,
}

/// Interns strings, stacks, states and threads: the columns before the events.
#[derive(Default)]
struct Interner {
    strings: Vec<String>,
    string_index: HashMap<String, u32>,
    parents: Vec<u32>,
    frames: Vec<u32>,
    node_index: HashMap<(u32, u32), u32>,
    stack_index: HashMap<(u64, u64), u32>,
    states: Vec<u32>,
    state_index: HashMap<&'static str, u32>,
    threads: Vec<u32>,
}

impl Interner {
    fn string(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.string_index.get(s) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(s.to_string());
        self.string_index.insert(s.to_string(), i);
        i
    }

    /// The stack number of a pair of stack ids (its frames, user then kernel).
    fn stack(&mut self, user: u64, kernel: u64, names: &StackNames) -> u32 {
        if let Some(&s) = self.stack_index.get(&(user, kernel)) {
            return s;
        }
        let mut at = 0;
        for frame in stack_frames(user, kernel, names) {
            let frame = self.string(&frame);
            at = match self.node_index.get(&(at, frame)) {
                Some(&n) => n,
                None => {
                    self.parents.push(at);
                    self.frames.push(frame);
                    let n = self.frames.len() as u32;
                    self.node_index.insert((at, frame), n);
                    n
                }
            };
        }
        self.stack_index.insert((user, kernel), at);
        at
    }

    fn state(&mut self, label: &'static str) -> u32 {
        if let Some(&i) = self.state_index.get(label) {
            return i;
        }
        let s = self.string(&format!("[off-cpu:{label}]"));
        self.states.push(s);
        let i = self.states.len() as u32 - 1;
        self.state_index.insert(label, i);
        i
    }

    fn thread(&mut self, frame: &str) -> u32 {
        let s = self.string(frame);
        self.threads.push(s);
        self.threads.len() as u32 - 1
    }

    fn into_columns(self, period_ns: u64, samples: Vec<Sample>, waits: Vec<Wait>) -> Columns {
        Columns {
            period_ns,
            strings: self.strings,
            threads: self.threads,
            states: self.states,
            parents: self.parents,
            frames: self.frames,
            samples,
            waits,
        }
    }
}

/// The events of `timeline` as the page carries them: each alone when they fit, else summed.
pub fn carried(profile: &Profile, names: &StackNames, timeline: &Timeline) -> Carried {
    let mut intern = Interner::default();
    let (mut samples, mut waits) = events(profile, names, timeline, &mut intern);
    let events = samples.len() + waits.len();
    let (mut summary_ns, mut left_out) = (None, 0);
    for cell_ns in SUMMARY_NS {
        if samples.len() + waits.len() <= MAX_EVENTS {
            break;
        }
        samples = summed_samples(samples, cell_ns / UNIT_NS);
        waits = summed_waits(waits, cell_ns / UNIT_NS);
        summary_ns = Some(cell_ns);
    }
    if samples.len() + waits.len() > MAX_EVENTS {
        left_out = keep_heaviest(&mut samples, &mut waits, profile.period_ns / UNIT_NS);
    }
    Carried {
        columns: intern.into_columns(profile.period_ns, samples, waits),
        events,
        summary_ns,
        left_out,
    }
}

/// Every sample and long wait (its blocked part; run-queue waits are not on the graph), by
/// thread (by tid) and time.
fn events(
    profile: &Profile,
    names: &StackNames,
    timeline: &Timeline,
    intern: &mut Interner,
) -> (Vec<Sample>, Vec<Wait>) {
    let start = profile.window.start_ns;
    let us = |ns: u64| ns.saturating_sub(start) / UNIT_NS;
    let mut by_tid: BTreeMap<u32, (Vec<Sample>, Vec<Wait>)> = BTreeMap::new();
    for s in &timeline.samples {
        let stack = intern.stack(s.user_stack, s.kernel_stack, names);
        by_tid.entry(s.tid).or_default().0.push(Sample {
            thread: 0,
            at: us(s.ts_ns),
            stack,
            weight: 1,
        });
    }
    for (&tid, line) in &timeline.threads {
        for w in line.waits.iter().filter(|w| !w.runqueue()) {
            let (from, to) = (us(w.start_ns), us(w.wake_ns()));
            let state = intern.state(w.state.label());
            let stack = intern.stack(w.user_stack, w.kernel_stack, names);
            by_tid.entry(tid).or_default().1.push(Wait {
                thread: 0,
                start: from,
                blocked: to - from,
                state,
                stack,
            });
        }
    }
    let (mut samples, mut waits) = (Vec::new(), Vec::new());
    for (tid, (mut s, mut w)) in by_tid {
        let thread = intern.thread(&thread_frame(profile, tid));
        s.sort_by_key(|s| s.at);
        w.sort_by_key(|w| w.start);
        samples.extend(s.into_iter().map(|s| Sample { thread, ..s }));
        waits.extend(w.into_iter().map(|w| Wait { thread, ..w }));
    }
    (samples, waits)
}

/// A thread's root frame in the range flame graph, as the folded stacks name it.
fn thread_frame(profile: &Profile, tid: u32) -> String {
    profile
        .threads
        .get(&tid)
        .map_or_else(|| tid.to_string(), |t| format!("{}-{tid}", t.name))
}

/// The samples of a thread in one stack and cell of `cell` µs as one, of their weight, in
/// the first one's place (so the order holds).
fn summed_samples(samples: Vec<Sample>, cell: u64) -> Vec<Sample> {
    let mut out: Vec<Sample> = Vec::new();
    let mut first: HashMap<(u32, u32, u64), usize> = HashMap::new();
    for s in samples {
        let key = (s.thread, s.stack, s.at / cell);
        match first.get(&key) {
            Some(&i) => out[i].weight += s.weight,
            None => {
                first.insert(key, out.len());
                out.push(s);
            }
        }
    }
    out
}

/// The waits of a thread in one stack and state that lie inside one cell of `cell` µs as
/// one, as long as all of them, at the first one's start: they do not overlap, so it ends
/// inside the cell too. Waits across a cell's edge stay alone.
fn summed_waits(waits: Vec<Wait>, cell: u64) -> Vec<Wait> {
    let mut out: Vec<Wait> = Vec::new();
    let mut first: HashMap<(u32, u32, u32, u64), usize> = HashMap::new();
    for w in waits {
        let (from, to) = (w.start / cell, (w.start + w.blocked.max(1) - 1) / cell);
        if from != to {
            out.push(w);
            continue;
        }
        let key = (w.thread, w.stack, w.state, from);
        match first.get(&key) {
            Some(&i) => out[i].blocked += w.blocked,
            None => {
                first.insert(key, out.len());
                out.push(w);
            }
        }
    }
    out
}

/// Keeps the [`MAX_EVENTS`] events of the most time (a sample's: its weight in periods of
/// `period` µs), in their order; returns how many were left out.
fn keep_heaviest(samples: &mut Vec<Sample>, waits: &mut Vec<Wait>, period: u64) -> usize {
    let total = samples.len() + waits.len();
    let mut times: Vec<u64> = (samples.iter().map(|s| s.weight * period))
        .chain(waits.iter().map(|w| w.blocked))
        .collect();
    times.sort_unstable_by(|a, b| b.cmp(a));
    let floor = times[MAX_EVENTS - 1];
    // Events at the floor are kept, in order, while the budget lasts.
    let mut at_floor = MAX_EVENTS - times.iter().take_while(|&&t| t > floor).count();
    let mut keep = |t: u64| {
        if t == floor && at_floor > 0 {
            at_floor -= 1;
            return true;
        }
        t > floor
    };
    samples.retain(|s| keep(s.weight * period));
    waits.retain(|w| keep(w.blocked));
    total - samples.len() - waits.len()
}

/// The format's writer: varints.
#[derive(Default)]
struct Out(Vec<u8>);

impl Out {
    fn u(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn z(&mut self, v: i64) {
        self.u(((v << 1) ^ (v >> 63)) as u64);
    }

    fn all(&mut self, values: impl IntoIterator<Item = u64>) {
        values.into_iter().for_each(|v| self.u(v));
    }

    /// Per thread, how many of `items` are its (items are by thread).
    fn counts<T>(&mut self, threads: usize, items: &[T], thread: impl Fn(&T) -> u32) {
        let mut counts = vec![0u64; threads];
        for it in items {
            if let Some(c) = counts.get_mut(thread(it) as usize) {
                *c += 1;
            }
        }
        self.all(counts);
    }
}

impl Columns {
    /// The bytes of the format above.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Out::default();
        out.all([VERSION, UNIT_NS, self.period_ns, self.strings.len() as u64]);
        for s in &self.strings {
            out.u(s.len() as u64);
            out.0.extend_from_slice(s.as_bytes());
        }
        for list in [&self.threads, &self.states] {
            out.u(list.len() as u64);
            out.all(list.iter().map(|&v| u64::from(v)));
        }
        out.u(self.frames.len() as u64);
        let parents = self.parents.iter().enumerate();
        out.all(parents.map(|(i, &p)| i as u64 + 1 - u64::from(p)));
        out.all(self.frames.iter().map(|&v| u64::from(v)));
        self.samples_to(&mut out);
        self.waits_to(&mut out);
        out.0
    }

    fn samples_to(&self, out: &mut Out) {
        out.counts(self.threads.len(), &self.samples, |s| s.thread);
        let mut prev = (u32::MAX, 0);
        for s in &self.samples {
            let before = if prev.0 == s.thread { prev.1 } else { 0 };
            out.z(s.at as i64 - before as i64);
            prev = (s.thread, s.at);
        }
        out.all(self.samples.iter().map(|s| u64::from(s.stack)));
        out.all(self.samples.iter().map(|s| s.weight));
    }

    fn waits_to(&self, out: &mut Out) {
        out.counts(self.threads.len(), &self.waits, |w| w.thread);
        let mut prev = (u32::MAX, 0);
        for w in &self.waits {
            let end = if prev.0 == w.thread { prev.1 } else { 0 };
            out.z(w.start as i64 - end as i64);
            prev = (w.thread, w.start + w.blocked);
        }
        out.all(self.waits.iter().map(|w| w.blocked));
        out.all(self.waits.iter().map(|w| u64::from(w.state)));
        out.all(self.waits.iter().map(|w| u64::from(w.stack)));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use profiler_common::WaitState;

    use super::*;
    use crate::model::{Mode, ThreadLine, ThreadTime, TimedSample, TimedWait, Window};

    const MS: u64 = 1_000_000;

    /// The format's reader, as the page's script reads it.
    struct In<'a>(&'a [u8], usize);

    impl In<'_> {
        fn u(&mut self) -> u64 {
            let (mut v, mut shift) = (0u64, 0);
            loop {
                let c = self.0[self.1];
                self.1 += 1;
                v |= u64::from(c & 0x7f) << shift;
                shift += 7;
                if c & 0x80 == 0 {
                    return v;
                }
            }
        }

        fn z(&mut self) -> i64 {
            let v = self.u();
            (v >> 1) as i64 ^ -((v & 1) as i64)
        }

        fn col(&mut self, n: usize) -> Vec<u64> {
            (0..n).map(|_| self.u()).collect()
        }

        /// Per-thread counts → each item's thread.
        fn threads(&mut self, threads: usize) -> Vec<u32> {
            let counts = self.col(threads);
            let each = counts.iter().enumerate();
            each.flat_map(|(t, &n)| std::iter::repeat_n(t as u32, n as usize))
                .collect()
        }
    }

    /// The columns of the format's bytes: the page's decoder, in Rust.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Columns {
        let mut r = In(bytes, 0);
        assert_eq!((r.u(), r.u()), (VERSION, UNIT_NS));
        let period_ns = r.u();
        let strings = (0..r.u())
            .map(|_| {
                let len = r.u() as usize;
                let s = String::from_utf8(r.0[r.1..r.1 + len].to_vec()).unwrap();
                r.1 += len;
                s
            })
            .collect();
        let small = |r: &mut In| -> Vec<u32> {
            let n = r.u() as usize;
            r.col(n).into_iter().map(|v| v as u32).collect()
        };
        let (threads, states) = (small(&mut r), small(&mut r));
        let n = r.u() as usize;
        let parents = (r.col(n).into_iter().enumerate())
            .map(|(i, d)| (i as u64 + 1 - d) as u32)
            .collect();
        let frames = r.col(n).into_iter().map(|v| v as u32).collect();
        let samples = read_samples(&mut r, threads.len());
        let waits = read_waits(&mut r, threads.len());
        assert_eq!(r.1, bytes.len(), "bytes left after the waits");
        Columns {
            period_ns,
            strings,
            threads,
            states,
            parents,
            frames,
            samples,
            waits,
        }
    }

    fn read_samples(r: &mut In, threads: usize) -> Vec<Sample> {
        let thread = r.threads(threads);
        let mut prev = (u32::MAX, 0i64);
        let at: Vec<u64> = (thread.iter())
            .map(|&t| {
                let before = if prev.0 == t { prev.1 } else { 0 };
                prev = (t, before + r.z());
                prev.1 as u64
            })
            .collect();
        let (stack, weight) = (r.col(thread.len()), r.col(thread.len()));
        (0..thread.len())
            .map(|i| Sample {
                thread: thread[i],
                at: at[i],
                stack: stack[i] as u32,
                weight: weight[i],
            })
            .collect()
    }

    fn read_waits(r: &mut In, threads: usize) -> Vec<Wait> {
        let thread = r.threads(threads);
        let gaps: Vec<i64> = thread.iter().map(|_| r.z()).collect();
        let blocked = r.col(thread.len());
        let (state, stack) = (r.col(thread.len()), r.col(thread.len()));
        let mut prev = (u32::MAX, 0i64);
        (0..thread.len())
            .map(|i| {
                let end = if prev.0 == thread[i] { prev.1 } else { 0 };
                let start = end + gaps[i];
                prev = (thread[i], start + blocked[i] as i64);
                Wait {
                    thread: thread[i],
                    start: start as u64,
                    blocked: blocked[i],
                    state: state[i] as u32,
                    stack: stack[i] as u32,
                }
            })
            .collect()
    }

    impl Columns {
        /// A stack's frames, root first.
        pub(crate) fn stack_frames(&self, mut stack: u32) -> Vec<&str> {
            let mut frames = Vec::new();
            while stack > 0 {
                let i = stack as usize - 1;
                frames.push(self.strings[self.frames[i] as usize].as_str());
                stack = self.parents[i];
            }
            frames.reverse();
            frames
        }

        /// Each sample as (thread frame, µs, frames, weight) and each wait as (thread frame,
        /// start µs, blocked µs, frames with the state's last), by thread and time.
        pub(crate) fn named(&self) -> (NamedSamples<'_>, NamedWaits<'_>) {
            let thread = |t: u32| self.strings[self.threads[t as usize] as usize].as_str();
            let samples = (self.samples.iter())
                .map(|s| (thread(s.thread), s.at, self.stack_frames(s.stack), s.weight))
                .collect();
            let waits = (self.waits.iter())
                .map(|w| {
                    let mut frames = self.stack_frames(w.stack);
                    frames.push(&self.strings[self.states[w.state as usize] as usize]);
                    (thread(w.thread), w.start, w.blocked, frames)
                })
                .collect();
            (samples, waits)
        }
    }

    pub(crate) type NamedSamples<'a> = Vec<(&'a str, u64, Vec<&'a str>, u64)>;
    pub(crate) type NamedWaits<'a> = Vec<(&'a str, u64, u64, Vec<&'a str>)>;

    /// A sample as the model has it: (tid, µs from the window's start, stack ids).
    type ModelSample = (u32, u64, (u64, u64));
    /// A long wait: (tid, start µs, blocked µs, stack ids, state's leaf frame).
    type ModelWait = (u32, u64, u64, (u64, u64), String);

    /// What the page should carry for `timeline`, from the model: by thread and time.
    fn expected(profile: &Profile, timeline: &Timeline) -> (Vec<ModelSample>, Vec<ModelWait>) {
        let start = profile.window.start_ns;
        let us = |ns: u64| ns.saturating_sub(start) / UNIT_NS;
        let mut samples: Vec<ModelSample> = (timeline.samples.iter())
            .map(|s| (s.tid, us(s.ts_ns), (s.user_stack, s.kernel_stack)))
            .collect();
        samples.sort_by_key(|s| (s.0, s.1));
        let mut waits: Vec<ModelWait> = Vec::new();
        for (&tid, line) in &timeline.threads {
            for w in line.waits.iter().filter(|w| !w.runqueue()) {
                let (from, to) = (us(w.start_ns), us(w.wake_ns()));
                let stacks = (w.user_stack, w.kernel_stack);
                let leaf = format!("[off-cpu:{}]", w.state.label());
                waits.push((tid, from, to - from, stacks, leaf));
            }
        }
        waits.sort_by_key(|w| (w.0, w.1));
        (samples, waits)
    }

    /// The decoded columns hold the same events as the model, one by one: same thread, same
    /// times in µs, and a stack whose frames are the stack ids' (checked once per stack).
    pub(crate) fn assert_same_events(
        columns: &Columns,
        profile: &Profile,
        names: &StackNames,
        timeline: &Timeline,
    ) {
        let (want_samples, want_waits) = expected(profile, timeline);
        let thread = |t: u32| columns.strings[columns.threads[t as usize] as usize].as_str();
        let mut stacks: HashMap<(u64, u64), u32> = HashMap::new();
        let mut same_stack = |ids: (u64, u64), stack: u32| {
            let first = *stacks.entry(ids).or_insert_with(|| {
                let frames = stack_frames(ids.0, ids.1, names);
                assert!(columns.stack_frames(stack).iter().eq(frames.iter()));
                stack
            });
            assert_eq!(first, stack, "stack ids {ids:?} carried as two stacks");
        };
        assert_eq!(columns.samples.len(), want_samples.len());
        for (got, want) in columns.samples.iter().zip(&want_samples) {
            let tid = thread_frame(profile, want.0);
            assert_eq!(
                (thread(got.thread), got.at, got.weight),
                (tid.as_str(), want.1, 1)
            );
            same_stack(want.2, got.stack);
        }
        assert_eq!(columns.waits.len(), want_waits.len());
        for (got, want) in columns.waits.iter().zip(&want_waits) {
            let tid = thread_frame(profile, want.0);
            let state = columns.strings[columns.states[got.state as usize] as usize].as_str();
            assert_eq!(
                (thread(got.thread), got.start, got.blocked, state),
                (tid.as_str(), want.1, want.2, want.4.as_str())
            );
            same_stack(want.3, got.stack);
        }
    }

    /// Two threads: `app` samples in two stacks and sleeps twice (one wait from before the
    /// window), `io` waits on the disk; names with `;`, `<` and non-ASCII.
    pub(crate) fn small() -> (Profile, StackNames, Timeline) {
        let mut profile = Profile::empty(
            Mode::Wall,
            Window {
                start_ns: 1_000 * MS,
                stop_ns: 3_000 * MS,
            },
            10 * MS,
        );
        for (tid, name) in [(1, "app"), (2, "io<é>")] {
            let t = ThreadTime {
                name: name.into(),
                ..ThreadTime::default()
            };
            profile.threads.insert(tid, t);
        }
        let mut names = StackNames::default();
        names.user.insert(1, vec!["main".into(), "work".into()]);
        names.user.insert(2, vec!["main".into(), "a;b<c>".into()]);
        names.kernel.insert(9, vec!["schedule_[k]".into()]);
        let wait = |start_ns, blocked_ns, state, user_stack| TimedWait {
            start_ns,
            blocked_ns,
            runnable_ns: 50_000,
            state,
            user_stack,
            kernel_stack: 9,
            waker_tid: 0,
            cpu_before_ns: 0,
            waking_ns: 0,
            resource: 0,
        };
        let mut timeline = Timeline {
            resolution_ns: MS,
            ..Timeline::default()
        };
        let line = |waits| ThreadLine {
            from_ns: 1_000 * MS,
            to_ns: 3_000 * MS,
            cpu_ns: 0,
            waits,
        };
        timeline.threads.insert(
            1,
            line(vec![
                wait(990 * MS, 20 * MS, WaitState::Sleep, 2),
                wait(1_500 * MS + 1_234, 300 * MS, WaitState::Sleep, 2),
                wait(2_000 * MS, 5 * MS, WaitState::RunqueuePreempted, 1),
            ]),
        );
        timeline
            .threads
            .insert(2, line(vec![wait(2_100 * MS, 7 * MS, WaitState::Io, 0)]));
        for (i, stack) in [1, 2, 1, 1].into_iter().enumerate() {
            timeline.samples.push(TimedSample {
                tid: 1,
                ts_ns: 1_000 * MS + i as u64 * 10 * MS + 999,
                user_stack: stack,
                kernel_stack: 0,
            });
        }
        (profile, names, timeline)
    }

    #[test]
    fn the_columns_decode_back_to_the_timelines_events() {
        let (profile, names, timeline) = small();
        let carried = carried(&profile, &names, &timeline);
        assert_eq!((carried.events, carried.summary_ns), (7, None));
        let decoded = from_bytes(&carried.columns.to_bytes());
        assert_eq!(decoded, carried.columns);
        assert_same_events(&decoded, &profile, &names, &timeline);
        // Each frame name once, each stack's shared root once.
        let main = decoded.strings.iter().filter(|s| *s == "main").count();
        assert_eq!(main, 1, "{:?}", decoded.strings);
        // main, work, a:b<c>, schedule_[k] under it, and alone (the io thread's wait).
        assert_eq!(decoded.frames.len(), 5, "{decoded:?}");
        // The wait from before the window starts at its start.
        assert_eq!(
            (decoded.waits[0].start, decoded.waits[0].blocked),
            (0, 10_000)
        );
    }

    /// What each cell of `cell` µs gets from the columns: per (thread, stack frames, cell),
    /// samples and blocked µs, as a range of whole cells adds them up.
    fn per_cell(c: &Columns, cell: u64) -> BTreeMap<(u32, u32, u32, u64), u64> {
        let mut out = BTreeMap::new();
        for s in &c.samples {
            *out.entry((s.thread, s.stack, u32::MAX, s.at / cell))
                .or_default() += s.weight;
        }
        for w in &c.waits {
            let mut at = w.start;
            while at < w.start + w.blocked {
                let end = ((at / cell + 1) * cell).min(w.start + w.blocked);
                *out.entry((w.thread, w.stack, w.state, at / cell))
                    .or_default() += end - at;
                at = end;
            }
        }
        out
    }

    #[test]
    fn a_summary_keeps_every_cells_time_per_thread_and_stack() {
        let (profile, names, mut timeline) = small();
        // Many short naps, some across a cell's edge, and samples in a burst.
        let line = timeline.threads.get_mut(&2).unwrap();
        for i in 0..400u64 {
            line.waits.push(TimedWait {
                start_ns: 2_200 * MS + i * 1_700_000,
                blocked_ns: 1_100_000 + i % 3 * 100_000,
                state: if i % 5 == 0 {
                    WaitState::Io
                } else {
                    WaitState::Sleep
                },
                user_stack: i % 2 + 1,
                ..line.waits[0]
            });
        }
        for i in 0..300u64 {
            timeline.samples.push(TimedSample {
                tid: 2,
                ts_ns: 1_100 * MS + i * 300_000,
                user_stack: 1,
                kernel_stack: 0,
            });
        }
        let whole = carried(&profile, &names, &timeline).columns;
        let cell = SUMMARY_NS[0] / UNIT_NS;
        let mut summed = whole.clone();
        summed.samples = summed_samples(summed.samples, cell);
        summed.waits = summed_waits(summed.waits, cell);
        assert!(
            summed.waits.len() < whole.waits.len() / 2,
            "{}",
            summed.waits.len()
        );
        assert!(summed.samples.len() < whole.samples.len() / 5);
        assert_eq!(per_cell(&summed, cell), per_cell(&whole, cell));
        let decoded = from_bytes(&summed.to_bytes());
        assert_eq!(decoded, summed);
    }

    #[test]
    fn a_timeline_beyond_the_budget_is_summed_per_cell_and_says_so() {
        let (mut profile, names, mut timeline) = small();
        profile.window.stop_ns = 30_000 * MS;
        let line = timeline.threads.get_mut(&2).unwrap();
        let nap = line.waits[0];
        line.waits = (0..MAX_EVENTS as u64 + 50_000)
            .map(|i| TimedWait {
                start_ns: 1_000 * MS + i * 80_000,
                blocked_ns: 20_000 + i % 7 * 1_000,
                user_stack: i % 3,
                ..nap
            })
            .collect();
        let whole = {
            let mut intern = Interner::default();
            let (samples, waits) = events(&profile, &names, &timeline, &mut intern);
            intern.into_columns(profile.period_ns, samples, waits)
        };
        let c = carried(&profile, &names, &timeline);
        assert_eq!(c.events, whole.samples.len() + whole.waits.len());
        assert_eq!((c.summary_ns, c.left_out), (Some(SUMMARY_NS[0]), 0));
        assert!(c.columns.samples.len() + c.columns.waits.len() <= MAX_EVENTS);
        let cell = SUMMARY_NS[0] / UNIT_NS;
        assert_eq!(per_cell(&c.columns, cell), per_cell(&whole, cell));
        assert_eq!(from_bytes(&c.columns.to_bytes()), c.columns);
    }

    #[test]
    fn beyond_the_coarsest_summary_the_longest_events_stay() {
        let mut samples = vec![
            Sample {
                thread: 0,
                at: 0,
                stack: 1,
                weight: 1,
            };
            MAX_EVENTS
        ];
        samples[7].weight = 3;
        let mut waits: Vec<Wait> = (0..10u64)
            .map(|i| Wait {
                thread: 0,
                start: i * 100_000,
                blocked: 5_000 + i * 3_000,
                state: 0,
                stack: 1,
            })
            .collect();
        // 10 000 µs a sample: the waits of 5 000 and 8 000 µs go, as do the last 8 samples.
        let left_out = keep_heaviest(&mut samples, &mut waits, 10_000);
        assert_eq!(left_out, 10);
        assert_eq!(samples.len() + waits.len(), MAX_EVENTS);
        assert_eq!(waits[0].blocked, 11_000);
        assert_eq!(samples[7].weight, 3);
    }
}
