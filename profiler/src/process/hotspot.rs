//! A JVM target's code cache, followed through the capture: rows for the in-kernel unwinder
//! (`unwind::jit`) and names for the symbolizer, both from the JVM's own structures (`jvm`:
//! vmStructs, attached by `jvm_attach`), so a stock JVM needs no flags, no agent and no
//! restart.
//!
//! The cache is read when the JVM is found and then every tick, or less often when a read is
//! costly (at most 2 % of a CPU, at least every 2 s); each read replaces the process's JIT rows and adds the names of the code it found to what
//! was seen before, so code compiled, recompiled or freed during the capture stays named.
//! What one read cannot see: code compiled and freed between two reads (its frames stay
//! unnamed and are counted), and memory that held one method and then another (the later
//! name wins; counted, the report says names could be stale).

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use profiler_common::unwind::{UnwindRow, java_method_of};

use profiler_core::{
    jvm::{BlobKind, CodeBlob, Inlining, Jvm},
    perfmap::PerfMap,
    unwind::jit::{JitCode, JitFrame, jit_rows},
};

use crate::process::jvm_attach;

/// Code the JIT just compiled unwinds by frame pointers until the next read (a compiled
/// frame then hides its caller), so the cache is read often — every tick (0.2 s) for a small
/// JVM — but a read costs at most 2 % of a CPU: a cache that takes 20 ms to read (8 000
/// blobs) is read once a second, and never less often than every `READ_AT_LEAST`.
const READ_COST_SHARE: u32 = 50;
const READ_AT_LEAST: Duration = Duration::from_secs(2);

/// While the kernel meets frames in code compiled since the last read (`JIT_GAP` rows), the
/// cache is read at up to 10 % of a CPU (a 20 ms read every 0.2 s tick): each such frame hides
/// its caller, and a warm service's JIT still recompiles its hot path (C1 to C2) during a
/// capture. A read they asked for that finds nothing new stops the chase until a read finds a
/// change: the frames were something else.
const CHASE_COST_SHARE: u32 = 10;

/// What one read of the code cache may spend reading new nmethods' inlined methods; the
/// rest waits for the next reads. Reading them all costs ~6 µs of CPU per nmethod, once
/// (7 063 nmethods of javac under -Xcomp: 42 ms, next to 17 ms per walk of its cache); the
/// reads' cadence keeps the total within `READ_COST_SHARE`, so a larger budget finishes a
/// cold cache sooner at the same share, a smaller one keeps each read short.
const INLINING_BUDGET: Duration = Duration::from_millis(20);

/// Blobs whose code keeps the return address at rsp (`vtableStubs.cpp`, `sharedRuntime.cpp`).
const FRAMELESS: [&str; 2] = ["vtable chunks", "I2C/C2I adapters"];

/// What a read of the cache found, hashed: an equal hash, an unchanged cache.
fn fingerprint(blobs: &[CodeBlob]) -> u64 {
    blobs.iter().fold(profiler_common::HASH_SEED, |h, b| {
        let method = match b.kind {
            BlobKind::Nmethod { method } => method,
            _ => 0,
        };
        // The compile id tells a recompilation at the same place apart (its inlining
        // may differ).
        let compile_id = b.compile_id().unwrap_or(0) as u32;
        [
            b.start,
            b.end,
            u64::from(b.frame_size_words),
            method,
            u64::from(compile_id),
        ]
        .into_iter()
        .fold(h, profiler_common::hash_step)
    })
}

/// How a blob's frames unwind; None for the interpreter's blob, which is covered by the
/// interpreter's own range (the blob holds more than the templates).
fn jit_frame(b: &CodeBlob) -> Option<JitFrame> {
    Some(match b.kind {
        BlobKind::Interpreter => return None,
        // C1's runtime stubs open an rbp frame first (`StubFrame`: `enter()`), then
        // save as many registers as the variant needs: rbp is exact, a size is not.
        _ if b.name.ends_with("Runtime1 stub") => JitFrame::FramePointer,
        // Runtime stubs are "never safe" to walk while they build their frame (reported
        // as complete at their end), yet their body, where they call into the VM and
        // where a stack passes through them, runs with the frame built.
        _ if b.frame_size_words > 0 => JitFrame::Fixed {
            complete: if b.frame_complete < b.end {
                b.frame_complete
            } else {
                b.start
            },
            size_words: b.frame_size_words,
        },
        _ if FRAMELESS.contains(&b.name.as_str()) => JitFrame::Frameless,
        _ => JitFrame::FramePointer,
    })
}

pub struct HotSpot {
    jvm: Jvm,
    /// Named code seen during the capture: start → (end, name).
    code: BTreeMap<u64, (u64, String)>,
    /// Starts whose code was seen under two different names.
    pub reused: usize,
    /// What the last read found, to tell whether the cache changed.
    last: u64,
    last_read: Option<Instant>,
    /// How long the last read took.
    last_cost: Duration,
    pub reads: u32,
    pub read_secs: f64,
    /// The last read's failure, if any.
    pub error: Option<String>,
    /// `Method*` → name, resolved once.
    methods: HashMap<u64, String>,
    /// The code cache's extent as last read (every blob, the interpreter included).
    range: (u64, u64),
    /// Methods inlined into the compiled code seen during the capture: code start → (end,
    /// chains by pc); like `code`, what is seen later at a start wins.
    inlined: BTreeMap<u64, (u64, Arc<Inlining>)>,
    /// Whether the last read left nmethods' inlining unread (its budget ran out).
    inlining_pending: bool,
    /// Whether frames in code compiled since the last read make the next read come sooner
    /// (`CHASE_COST_SHARE`).
    chase_gaps: bool,
    /// Reads made sooner for such frames.
    pub chased: u32,
}

impl std::fmt::Debug for HotSpot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotSpot")
            .field("code", &self.code.len())
            .field("reads", &self.reads)
            .field("error", &self.error)
            .finish()
    }
}

/// New rows for the process: relative to `base`, covering `[base, end)`.
pub struct JitUpdate {
    pub base: u64,
    pub end: u64,
    pub rows: Vec<UnwindRow>,
}

impl HotSpot {
    /// Whether `pid` runs a HotSpot JVM (maps `libjvm.so`); `None` also when its structures
    /// cannot be read (said in the log: its Java frames then unwind as before, by frame
    /// pointers).
    pub fn attach(pid: u32) -> Option<Self> {
        match jvm_attach::attach(pid) {
            Ok(Some(jvm)) => Some(Self {
                jvm,
                code: BTreeMap::new(),
                reused: 0,
                last: 0,
                last_read: None,
                last_cost: Duration::ZERO,
                reads: 0,
                read_secs: 0.0,
                error: None,
                methods: HashMap::new(),
                range: (0, 0),
                inlined: BTreeMap::new(),
                inlining_pending: false,
                chase_gaps: true,
                chased: 0,
            }),
            Ok(None) => None,
            Err(e) => {
                log::warn!("process {pid} maps libjvm.so but its structures are unreadable: {e}");
                None
            }
        }
    }

    /// Reads the code cache if it is time to (sooner when the kernel met frames in code
    /// compiled since the last read: `gaps_met`); the rows when they changed.
    pub fn refresh(&mut self, gaps_met: bool) -> Option<JitUpdate> {
        let chase = gaps_met && self.chase_gaps;
        let share = if chase {
            CHASE_COST_SHARE
        } else {
            READ_COST_SHARE
        };
        let every = (self.last_cost * share).min(READ_AT_LEAST);
        if self.last_read.is_some_and(|at| at.elapsed() < every) {
            return None;
        }
        let update = self.read();
        if update.is_some() {
            self.chase_gaps = true;
        } else if chase {
            self.chase_gaps = false;
        }
        if chase {
            self.chased += 1;
        }
        update
    }

    /// Reads the code cache; the rows when they changed.
    fn read(&mut self) -> Option<JitUpdate> {
        let started = Instant::now();
        self.last_read = Some(started);
        let mut blobs = match self.jvm.code_blobs() {
            Ok(b) => b,
            Err(e) => {
                self.error = Some(e.to_string());
                return None;
            }
        };
        self.reads += 1;
        // An unchanged cache (the usual case once warm) costs the read and this hash only.
        let fingerprint = fingerprint(&blobs);
        // An unchanged cache holds no new nmethod: nothing to read unless some were left.
        if fingerprint != self.last || self.inlining_pending {
            self.keep_inlining(&mut blobs, fingerprint != self.last);
        }
        if fingerprint == self.last {
            self.last_cost = started.elapsed();
            self.read_secs += self.last_cost.as_secs_f64();
            return None;
        }
        self.last = fingerprint;
        let code = self.jit_code(&blobs);
        if let (Some(lo), Some(hi)) = (
            blobs.iter().map(|b| b.start).min(),
            blobs.iter().map(|b| b.end).max(),
        ) {
            self.range = (lo, hi);
        }
        let (base, end, rows) = jit_rows(&code, self.jvm.code_heaps());
        self.last_cost = started.elapsed();
        self.read_secs += self.last_cost.as_secs_f64();
        Some(JitUpdate { base, end, rows })
    }

    /// The code to make rows for: the interpreter's range and every blob but the
    /// interpreter's, each with its frame rule. Keeps the blobs' names.
    fn jit_code(&mut self, blobs: &[CodeBlob]) -> Vec<JitCode> {
        let (interp_start, interp_end) = self.jvm.interpreter();
        let mut code = Vec::with_capacity(blobs.len() + 1);
        if interp_end > interp_start {
            code.push(JitCode {
                start: interp_start,
                end: interp_end,
                frame: JitFrame::Interpreter {
                    method_offset: self.jvm.interpreter_method_offset_words() * 8,
                    sender_sp_offset: (self.jvm.interpreter_sender_sp_offset_words() * 8) as i16,
                },
            });
        }
        for b in blobs {
            // The interpreter too: a frame whose Method* cannot be read keeps its pc.
            if !b.name.is_empty() {
                match self.code.insert(b.start, (b.end, b.name.clone())) {
                    Some((_, old)) if old != b.name => self.reused += 1,
                    _ => {}
                }
            }
            if let Some(frame) = jit_frame(b) {
                code.push(JitCode {
                    start: b.start,
                    end: b.end,
                    frame,
                });
            }
        }
        code
    }

    /// Reads the inlining of nmethods new since the last read (and of those a spent budget
    /// left), and keeps it by code start. An nmethod's data is read once; the blobs are
    /// walked again only when the cache `changed` or something new was read.
    fn keep_inlining(&mut self, blobs: &mut [CodeBlob], changed: bool) {
        let read = self.jvm.read_inlining(blobs, INLINING_BUDGET);
        // Nmethods that failed (freed, or being written, while read) are tried again with
        // the next change.
        self.inlining_pending = read.deferred > 0;
        if read.decoded == 0 && !changed {
            return;
        }
        for b in blobs.iter() {
            match &b.inlining {
                Some(new) => {
                    if !matches!(self.inlined.get(&b.start), Some((_, old)) if Arc::ptr_eq(old, new))
                    {
                        self.inlined.insert(b.start, (b.end, new.clone()));
                    }
                }
                // Code that inlined nothing (or is not read yet), or a stub, now at a start
                // whose earlier code had inlining.
                None => {
                    self.inlined.remove(&b.start);
                }
            }
        }
    }

    /// The methods inlined at `addr` in compiled code seen during the capture (a sampled pc,
    /// or a return address minus one), as `Method*`s from the nmethod's own (first) to the
    /// innermost (last); None where nothing was inlined or nothing is known.
    pub fn inlined_at(&self, addr: u64) -> Option<&[u64]> {
        let (&start, (end, inlining)) = self.inlined.range(..=addr).next_back()?;
        // Code seen later over part of that range wins, as its name does.
        let named = self.code.range(..=addr).next_back().map(|(&s, _)| s);
        if addr >= *end || named != Some(start) {
            return None;
        }
        inlining.at(addr - start)
    }

    /// The code cache's extent as last read (every blob, the interpreter included): a stack
    /// that ends in it stopped inside Java code (profiler-core `post`).
    pub fn code_cache(&self) -> std::ops::Range<u64> {
        self.range.0..self.range.1
    }

    /// One more read after the window, for the names of code compiled since the last one.
    pub fn last_look(&mut self) {
        let _ = self.read();
    }

    /// Names for the symbolizer: the code seen, the interpreted methods of `frames` (the
    /// process's user frames as looked up: `symbolize::lookup_addresses`; others are
    /// ignored), and the methods inlined at those in compiled code. Unresolvable methods are
    /// left out.
    pub fn names(&mut self, frames: impl IntoIterator<Item = u64>) -> PerfMap {
        let mut entries: Vec<(u64, u64, String)> = self
            .code
            .iter()
            .map(|(&start, (end, name))| (start, *end, name.clone()))
            .collect();
        let mut inlined: HashMap<u64, Vec<String>> = HashMap::new();
        for frame in frames {
            if let Some(method) = java_method_of(frame) {
                if let Some(name) = self.method_name(method) {
                    entries.push((frame, frame + 1, name));
                }
                continue;
            }
            let Some(chain) = self.inlined_at(frame).map(<[u64]>::to_vec) else {
                continue;
            };
            // The first is the compiled method itself, named by its code.
            let names: Vec<String> = chain
                .iter()
                .skip(1)
                .map(|&m| self.method_name(m).unwrap_or_else(|| "[unknown]".into()))
                .collect();
            if !names.is_empty() {
                inlined.insert(frame, names);
            }
        }
        PerfMap::from_entries(entries).with_inlined(inlined)
    }

    /// Names, now, the methods `frames` (as [`Self::names`] takes them) show: interpreted ones
    /// and those inlined into compiled code. Kept for `names`, which runs after the window,
    /// when a JVM that exited inside it can no longer be read.
    pub fn name_methods(&mut self, frames: impl IntoIterator<Item = u64>) {
        for frame in frames {
            if let Some(method) = java_method_of(frame) {
                let _ = self.method_name(method);
            } else if let Some(chain) = self.inlined_at(frame).map(<[u64]>::to_vec) {
                for &method in chain.iter().skip(1) {
                    let _ = self.method_name(method);
                }
            }
        }
    }

    /// A `Method*`'s name, resolved once.
    fn method_name(&mut self, method: u64) -> Option<String> {
        if !self.methods.contains_key(&method) {
            match self.jvm.method_name(method) {
                Ok(name) => {
                    self.methods.insert(method, name);
                }
                Err(e) => {
                    log::debug!("method {method:#x} not named: {e}");
                    return None;
                }
            }
        }
        self.methods.get(&method).cloned()
    }
}
