//! One JVM attached to ([`Jvm`]): its memory and resolved layout, the interpreter's code, and
//! the inlining its nmethods recorded, read once per nmethod and kept; its code cache
//! (`codecache.rs`) and the names of its methods (`names.rs`) read on request.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use super::{
    codecache::{BlobKind, CodeBlob, CodeCache},
    debuginfo::{DebugInfo, Inlining, PcScopes},
    error::JvmError,
    layout::{Layout, major_version},
    memory::{MAX_CSTR, Memory, TargetMemory},
    names::Names,
    vmstructs::{Libjvm, VmStructs},
};

/// What one `Jvm::read_inlining` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InliningRead {
    /// Nmethods whose debug information was read and decoded now.
    pub decoded: usize,
    /// Of those, nmethods that inlined something.
    pub inlined: usize,
    /// Nmethods read before (cached).
    pub cached: usize,
    /// Nmethods left for a later call: the time budget ran out.
    pub deferred: usize,
    /// Nmethods whose debug information could not be read or did not decode (freed or
    /// being written while read); tried again next call.
    pub failed: usize,
    /// Bytes of debug information read from the target.
    pub bytes: usize,
}

/// A JVM attached to: its memory and its resolved layout.
pub struct Jvm {
    pid: u32,
    mem: Memory,
    layout: Layout,
    interpreter: (u64, u64),
    names: Names,
    code_cache: CodeCache,
    /// Inlining read per nmethod, by (code start, compile id): an installed nmethod's
    /// debug information never changes, so it is read once.
    inlining: HashMap<(u64, i32), ReadInlining>,
    inlining_calls: u64,
}

/// One nmethod's inlining as read (None: it inlined nothing), and the number of the last
/// `read_inlining` call that saw the nmethod (entries of nmethods gone are dropped).
struct ReadInlining {
    seen: u64,
    inlining: Option<Arc<Inlining>>,
}

impl Jvm {
    /// Reads the JVM's tables from `memory` (process `pid`'s, where `lib`'s symbols point)
    /// and resolves the offsets used.
    pub fn attach(pid: u32, memory: Box<dyn TargetMemory>, lib: &Libjvm) -> Result<Jvm, JvmError> {
        let mem = Memory {
            pid,
            source: memory,
        };
        let vm = VmStructs::read(&mem, lib)?;
        let layout = Layout::resolve(pid, &vm, major_version(&mem, &vm))?;
        let mut jvm = Jvm {
            pid,
            mem,
            layout,
            interpreter: (0, 0),
            names: Names::default(),
            code_cache: CodeCache::default(),
            inlining: HashMap::new(),
            inlining_calls: 0,
        };
        // A JVM still starting has no interpreter yet: `code_blobs` tries again.
        jvm.interpreter = jvm.read_interpreter().unwrap_or((0, 0));
        Ok(jvm)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The VM's release string ("17.0.15+6-Debian-1deb12u1"), if the JVM exports it.
    pub fn version(&self) -> Option<String> {
        let var = self.layout.vm_release?;
        let s = self.mem.u64(var).ok()?;
        (s != 0).then(|| self.mem.cstr(s, MAX_CSTR).ok())?
    }

    /// The template interpreter's code `[start, end)`; `(0, 0)` until the JVM generated it.
    pub fn interpreter(&self) -> (u64, u64) {
        self.interpreter
    }

    /// Where an interpreted frame keeps its `Method*`: this many words from its rbp (-3 on
    /// x86_64).
    pub fn interpreter_method_offset_words(&self) -> i32 {
        self.layout.interpreter_method_offset
    }

    /// Where an interpreted frame keeps its caller's stack pointer (the "sender sp", which an
    /// adapter between compiled code and the interpreter may have moved below rbp + 16), in
    /// words from its rbp; 0 when the JVM does not export it.
    pub fn interpreter_sender_sp_offset_words(&self) -> i32 {
        self.layout.interpreter_sender_sp_offset
    }

    fn read_interpreter(&self) -> Result<(u64, u64), JvmError> {
        let l = &self.layout;
        let queue = self.mem.u64(l.interpreter_code)?;
        if queue == 0 {
            return Err(self
                .mem
                .invalid("the interpreter is not generated yet".into()));
        }
        let mut buf = [0u8; 64];
        let need = l.queue_buffer.end().max(l.queue_limit.end()) as usize;
        let buf = buf
            .get_mut(..need)
            .ok_or_else(|| self.mem.invalid("StubQueue layout".into()))?;
        self.mem.read(queue, buf)?;
        let start = l.queue_buffer.get(buf, 0).unwrap_or(0) as u64;
        let limit = l.queue_limit.get(buf, 0).unwrap_or(0);
        let end = start
            .checked_add(limit as u64)
            .filter(|_| start != 0 && limit > 0);
        let Some(end) = end else {
            return Err(self
                .mem
                .invalid(format!("implausible interpreter StubQueue at {queue:#x}")));
        };
        Ok((start, end))
    }

    /// Every blob in the code cache now. The JVM changes the cache while it is read: blobs
    /// that do not look whole are left out rather than failing the walk.
    pub fn code_blobs(&mut self) -> Result<Vec<CodeBlob>, JvmError> {
        if self.interpreter == (0, 0) {
            self.interpreter = self.read_interpreter().unwrap_or((0, 0));
        }
        self.code_cache
            .blobs(&self.mem, &self.layout, self.interpreter, &mut self.names)
    }

    /// Where the code heaps lay at the last `code_blobs` (their lowest and highest committed
    /// addresses): all the space the JIT can put code in until the next walk. `(0, 0)`
    /// before a walk found any.
    pub fn code_heaps(&self) -> (u64, u64) {
        self.code_cache.heaps()
    }

    /// `Class.method` of a `Method*` ("JitWork.leaf", "java.lang.Thread.sleep"), checked to
    /// be a plausible name, cached per `Method*`.
    pub fn method_name(&mut self, method: u64) -> Result<String, JvmError> {
        self.names.method_name(&self.mem, &self.layout, method)
    }

    /// Sets `inlining` of the nmethods among `blobs` (all the blobs of one `code_blobs`
    /// call: entries for nmethods not among them are dropped). An nmethod's debug
    /// information is read once (keyed by its code start and compile id) and reused; new
    /// nmethods are read a batch at a time until `budget` is spent, the rest on the next
    /// call.
    pub fn read_inlining(&mut self, blobs: &mut [CodeBlob], budget: Duration) -> InliningRead {
        let started = Instant::now();
        self.inlining_calls += 1;
        let call = self.inlining_calls;
        let mut read = InliningRead::default();
        let pending = self.reuse_inlining(blobs, call, &mut read);
        let mut buf = Vec::new();
        let mut rest = &pending[..];
        while !rest.is_empty() {
            // The first batch is read whatever the budget, so every call makes progress.
            if rest.len() < pending.len() && started.elapsed() >= budget {
                read.deferred = rest.len();
                break;
            }
            let parts = Self::next_inlining_batch(blobs, rest);
            let (batch, tail) = rest.split_at(parts.len());
            rest = tail;
            let ranges: Vec<(u64, usize)> = parts.iter().flatten().flatten().copied().collect();
            let ok = self.mem.read_ranges(&ranges, &mut buf);
            for (&i, bytes) in batch.iter().zip(Self::cut_parts(&parts, &buf, &ok)) {
                match bytes {
                    Some(bytes) => self.decode_inlining(&mut blobs[i], bytes, call, &mut read),
                    None => read.failed += 1,
                }
            }
        }
        self.inlining.retain(|_, r| r.seen == call);
        read
    }

    /// Gives the blobs whose nmethod was read on an earlier call their inlining again
    /// (marking the entry seen by `call`, so it is kept); returns the indices in `blobs` of
    /// the nmethods still to read.
    fn reuse_inlining(
        &mut self,
        blobs: &mut [CodeBlob],
        call: u64,
        read: &mut InliningRead,
    ) -> Vec<usize> {
        let mut pending = Vec::new();
        for (i, b) in blobs.iter_mut().enumerate() {
            let Some(at) = b.debug else { continue };
            match self.inlining.get_mut(&(b.start, at.compile_id)) {
                Some(known) => {
                    known.seen = call;
                    b.inlining = known.inlining.clone();
                    read.cached += 1;
                }
                None => pending.push(i),
            }
        }
        pending
    }

    /// The parts (PcDescs, scopes, metadata) of the next batch of `rest` (indices in
    /// `blobs`): as many nmethods as one `read_parts` and one look at the clock are
    /// for, the first one whatever its size. None for an nmethod whose parts are not known.
    fn next_inlining_batch(blobs: &[CodeBlob], rest: &[usize]) -> Vec<Option<[(u64, usize); 3]>> {
        // Nmethods read per `read_parts` (three parts each), and between two looks at
        // the clock; and the bytes a batch may hold beyond its first nmethod's.
        const BATCH: usize = 64;
        const BATCH_BYTES: usize = 4 << 20;
        let mut parts: Vec<Option<[(u64, usize); 3]>> = Vec::with_capacity(BATCH);
        let mut batch_bytes = 0;
        for &i in rest.iter().take(BATCH) {
            let p = blobs[i].debug.and_then(|d| d.parts());
            let len: usize = p.iter().flatten().map(|r| r.1).sum();
            if !parts.is_empty() && batch_bytes + len > BATCH_BYTES {
                break;
            }
            batch_bytes += len;
            parts.push(p);
        }
        parts
    }

    /// Each nmethod's three parts cut out of `buf`, which holds the ranges of `parts` one
    /// after the other as `read_ranges` left them (`ok`: which were read). None for an
    /// nmethod whose parts were not known or not all read: its information is not whole.
    fn cut_parts<'a>(
        parts: &[Option<[(u64, usize); 3]>],
        buf: &'a [u8],
        ok: &[bool],
    ) -> Vec<Option<[&'a [u8]; 3]>> {
        let mut next = 0;
        let mut part = 0;
        parts
            .iter()
            .map(|parts| {
                // Not known: no ranges were asked for, so `next` and `part` stay.
                let parts = parts.as_ref()?;
                let mut bytes: [&[u8]; 3] = [&[]; 3];
                let mut whole = true;
                for (k, &(_, len)) in parts.iter().enumerate() {
                    bytes[k] = &buf[next..next + len];
                    whole &= ok[part];
                    next += len;
                    part += 1;
                }
                whole.then_some(bytes)
            })
            .collect()
    }

    /// Decodes the inlining of the nmethod `b` from its parts, read whole, and keeps it for
    /// the next calls (a failure is not kept: the nmethod is read again next time).
    fn decode_inlining(
        &mut self,
        b: &mut CodeBlob,
        bytes: [&[u8]; 3],
        call: u64,
        read: &mut InliningRead,
    ) {
        read.bytes += bytes.iter().map(|b| b.len()).sum::<usize>();
        let BlobKind::Nmethod { method } = b.kind else {
            return;
        };
        let Ok(layout) = &self.layout.debug else {
            return;
        };
        let info = DebugInfo {
            pcs: bytes[0],
            scopes: bytes[1],
            metadata: bytes[2],
            stream: layout.stream,
            method,
        };
        match info.inlining(layout) {
            Ok(inlining) => {
                let inlining = inlining.map(Arc::new);
                read.decoded += 1;
                read.inlined += usize::from(inlining.is_some());
                if let Some(at) = b.debug {
                    self.inlining.insert(
                        (b.start, at.compile_id),
                        ReadInlining {
                            seen: call,
                            inlining: inlining.clone(),
                        },
                    );
                }
                b.inlining = inlining;
            }
            Err(e) => {
                log::debug!(
                    "process {}: the debug information of {} at {:#x} did not decode: {e}",
                    self.pid,
                    b.name,
                    b.start
                );
                read.failed += 1;
            }
        }
    }

    /// Every PcDesc of an nmethod with its whole chain of scopes (bcis included), read now.
    pub fn pc_scopes(&self, blob: &CodeBlob) -> Result<Vec<PcScopes>, JvmError> {
        let layout = self
            .layout
            .debug
            .as_ref()
            .map_err(|what| JvmError::Unsupported {
                pid: self.pid,
                what: what.clone(),
            })?;
        let bad = |what: String| {
            self.mem
                .invalid(format!("nmethod at {:#x}: {what}", blob.start))
        };
        let BlobKind::Nmethod { method } = blob.kind else {
            return Err(bad("not an nmethod".into()));
        };
        let parts = blob
            .debug
            .and_then(|d| d.parts())
            .ok_or_else(|| bad("its debug information cannot be located".into()))?;
        let mut bytes: [Vec<u8>; 3] = Default::default();
        for (b, &(addr, len)) in bytes.iter_mut().zip(&parts) {
            b.resize(len, 0);
            self.mem.read(addr, b)?;
        }
        DebugInfo {
            pcs: &bytes[0],
            scopes: &bytes[1],
            metadata: &bytes[2],
            stream: layout.stream,
            method,
        }
        .pc_scopes(layout)
        .map_err(bad)
    }
}
