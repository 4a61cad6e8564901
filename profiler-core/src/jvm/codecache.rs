//! The code cache: its blobs (where each one's code and frame lie, what it is), as a walk of
//! the JVM's code heaps finds them, a segment map and the block headers at a time.

use std::sync::Arc;

use super::{
    debuginfo::{DebugInfoAt, Inlining},
    error::JvmError,
    layout::{CodeRange, Layout, NmethodTest},
    memory::{MAX_PARTS, Memory, le},
    names::Names,
};

/// What a code blob is, as far as unwinding cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobKind {
    /// The template interpreter's code: frames are rbp-based and hold their `Method*`.
    Interpreter,
    /// A compiled Java method.
    Nmethod { method: u64 },
    /// Anything else: stubs, adapters, runtime blobs.
    Stub,
}

/// One blob of the code cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeBlob {
    /// First instruction.
    pub start: u64,
    /// End of the instructions (exclusive).
    pub end: u64,
    /// First instruction at which the frame is complete (`_frame_complete_offset` counts
    /// from the code's start). Blobs whose frame is never complete get `end`.
    pub frame_complete: u64,
    /// Size of the blob's frame in 8-byte words, the return address included; 0 where the
    /// JVM records none (the interpreter, C1's frameless stubs).
    pub frame_size_words: u32,
    pub kind: BlobKind,
    /// The blob's name; for nmethods the Java method's (`JitWork.leaf`) when it could be read.
    pub name: String,
    /// For an nmethod: where its debug information lies, from its header.
    pub(super) debug: Option<DebugInfoAt>,
    /// For an nmethod that inlined methods: their chains by pc, once `Jvm::read_inlining`
    /// has read them.
    pub inlining: Option<Arc<Inlining>>,
}

impl CodeBlob {
    /// The nmethod's compile id (with its start, it names one compilation); None for other
    /// blobs, or when the JVM's tables do not say where it lies.
    pub fn compile_id(&self) -> Option<i32> {
        self.debug.map(|d| d.compile_id)
    }

    /// The inlined methods at `addr`, an address inside an instruction of this blob (a
    /// sampled pc, or a return address minus one: what the symbolizer looks up), as
    /// `Method*`s from the nmethod's own method (first) to the innermost inlined one
    /// (last); None outside the blob, in an nmethod that inlined nothing, before
    /// `Jvm::read_inlining` read it, or where no scope is recorded. See `Inlining::at`.
    pub fn inlined_at(&self, addr: u64) -> Option<&[u64]> {
        if !(self.start..self.end).contains(&addr) {
            return None;
        }
        self.inlining.as_ref()?.at(addr - self.start)
    }
}

/// Segment-map value of a segment outside any block (`CodeHeap::free_sentinel`).
const FREE_SENTINEL: u8 = 0xFF;
/// Reads of the code heap are done in pieces of this size.
const READ_CHUNK: usize = 1 << 20;
/// A code heap's committed size above this is not believed.
const MAX_HEAP: u64 = 4 << 30;

/// Where the blocks of one CodeHeap lie.
struct HeapSpan {
    /// The heap's first byte in the target.
    low: u64,
    /// log2 of its segment size.
    log2: i64,
    /// Bytes from `low` to the end of the last used segment.
    used: usize,
    /// The last segment not free.
    last: usize,
    /// The segments up to `last` where a block may start.
    starts: Vec<usize>,
}

/// What walks of the code cache keep between them: their buffers (the segment map; the block
/// headers or the heap's used span) and where the code heaps lay at the last walk.
#[derive(Default)]
pub(super) struct CodeCache {
    segmap: Vec<u8>,
    heap: Vec<u8>,
    /// The lowest and highest committed addresses of the code heaps at the last walk.
    heaps: (u64, u64),
}

impl CodeCache {
    /// Every blob in the code cache now, read from `mem` with the offsets of `layout`
    /// (`interpreter`: the interpreter's code, `names`: the names read so far).
    pub(super) fn blobs(
        &mut self,
        mem: &Memory,
        layout: &Layout,
        interpreter: (u64, u64),
        names: &mut Names,
    ) -> Result<Vec<CodeBlob>, JvmError> {
        Walk {
            mem,
            layout,
            interpreter,
            names,
            cache: self,
        }
        .blobs()
    }

    /// The code heaps' lowest and highest committed addresses at the last walk; `(0, 0)`
    /// before a walk found any.
    pub(super) fn heaps(&self) -> (u64, u64) {
        if self.heaps.1 > self.heaps.0 {
            self.heaps
        } else {
            (0, 0)
        }
    }
}

/// One walk of the code cache: what it reads with, and the buffers it reuses.
struct Walk<'a> {
    mem: &'a Memory,
    layout: &'a Layout,
    interpreter: (u64, u64),
    names: &'a mut Names,
    cache: &'a mut CodeCache,
}

impl Walk<'_> {
    /// Every blob of every code heap.
    fn blobs(&mut self) -> Result<Vec<CodeBlob>, JvmError> {
        let l = self.layout;
        let array = self.mem.u64(l.heaps)?;
        if array == 0 {
            // The code cache is not initialised yet.
            return Ok(Vec::new());
        }
        let mut buf = [0u8; 32];
        let need = l.array_len.end().max(l.array_data.end()) as usize;
        let buf = buf
            .get_mut(..need)
            .ok_or_else(|| self.mem.invalid("GrowableArray layout".into()))?;
        self.mem.read(array, buf)?;
        let len = l.array_len.get(buf, 0).unwrap_or(0);
        let data = l.array_data.get(buf, 0).unwrap_or(0) as u64;
        if !(0..=64).contains(&len) || (len > 0 && data == 0) {
            return Err(self
                .mem
                .invalid(format!("implausible CodeCache::_heaps ({len} heaps)")));
        }
        let mut heaps = vec![0u8; len as usize * 8];
        self.mem.read(data, &mut heaps)?;
        self.cache.heaps = (u64::MAX, 0);
        let mut blobs = Vec::new();
        for heap in heaps.chunks_exact(8) {
            let heap = le(heap, 0, 8).unwrap_or(0);
            if heap != 0 {
                self.heap_blobs(heap, &mut blobs)?;
            }
        }
        Ok(blobs)
    }

    /// The used blocks of one CodeHeap. Its segment map (a byte per segment) says where
    /// blocks may start; the headers there are gathered with a few `read_parts` calls
    /// (a thousand headers each), or, if that fails, read with the whole used span of the
    /// heap. Each header's length then says where the next block starts.
    fn heap_blobs(&mut self, heap: u64, blobs: &mut Vec<CodeBlob>) -> Result<(), JvmError> {
        let Some(span) = self.heap_span(heap)? else {
            return Ok(());
        };
        let l = self.layout;
        // Bytes read per block: the block header, the blob header, an nmethod's `_method`
        // and the fields that locate its debug information.
        let debug_end = l.debug.as_ref().map_or(0, |d| d.header_end);
        let header = (l.block_size + l.blob_header.max(l.nmethod_method.end()).max(debug_end))
            .next_multiple_of(8) as usize;
        let mut buf = std::mem::take(&mut self.cache.heap);
        let gathered = self.gather(&span, header, &mut buf);
        if !gathered {
            buf.resize(span.used, 0);
            for (i, chunk) in buf.chunks_mut(READ_CHUNK).enumerate() {
                if let Err(e) = self.mem.read(span.low + (i * READ_CHUNK) as u64, chunk) {
                    self.cache.heap = buf;
                    return Err(e);
                }
            }
        }
        self.decode_blocks(&span, &buf, gathered.then_some(header), blobs);
        self.cache.heap = buf;
        Ok(())
    }

    /// Where the blocks of the CodeHeap at `heap` lie, from its header and its segment map
    /// (read into `self.cache.segmap`); None when no block is in use.
    fn heap_span(&mut self, heap: u64) -> Result<Option<HeapSpan>, JvmError> {
        let l = self.layout;
        let mut h = vec![0u8; l.heap_size as usize];
        self.mem.read(heap, &mut h)?;
        let space = |at: u64| -> Option<(u64, u64)> {
            let at = at as usize;
            Some((
                l.space_low_boundary.get(&h, at)? as u64,
                l.space_high.get(&h, at)? as u64,
            ))
        };
        let bad = |what: &str| self.mem.invalid(format!("CodeHeap at {heap:#x}: {what}"));
        let (low, high) = space(l.heap_memory).ok_or_else(|| bad("layout"))?;
        let (map_low, map_high) = space(l.heap_segmap).ok_or_else(|| bad("layout"))?;
        let log2 = l
            .heap_log2_segment
            .get(&h, 0)
            .ok_or_else(|| bad("layout"))?;
        if !(4..=16).contains(&log2) || high < low || high - low > MAX_HEAP || map_high < map_low {
            return Err(bad("implausible bounds"));
        }
        self.cache.heaps = (self.cache.heaps.0.min(low), self.cache.heaps.1.max(high));
        let segments = ((high - low) >> log2).min(map_high - map_low) as usize;
        self.cache.segmap.resize(segments, 0);
        self.mem.read(map_low, &mut self.cache.segmap)?;
        // Segments past the last block are free: read no further.
        let Some(last) = self.cache.segmap.iter().rposition(|&s| s != FREE_SENTINEL) else {
            return Ok(None);
        };
        Ok(Some(HeapSpan {
            low,
            log2,
            used: ((last as u64 + 1) << log2) as usize,
            last,
            // A block starts where the map holds 0 (a large block may hold more zeros
            // inside: its header's length skips them).
            starts: (0..=last).filter(|&s| self.cache.segmap[s] == 0).collect(),
        }))
    }

    /// The blobs of the used blocks of `span`, from `buf`: the used span of the heap as it
    /// lies, or, when `gathered` is the size of the pieces, each block start's piece one
    /// after the other.
    fn decode_blocks(
        &mut self,
        span: &HeapSpan,
        buf: &[u8],
        gathered: Option<usize>,
        blobs: &mut Vec<CodeBlob>,
    ) {
        let l = self.layout;
        let (block_length, block_used, block_size) = (l.block_length, l.block_used, l.block_size);
        let mut next = 0usize;
        for (k, &seg) in span.starts.iter().enumerate() {
            if seg < next {
                // Inside the previous block.
                continue;
            }
            let at = seg << span.log2;
            let block = match gathered {
                Some(header) => &buf[k * header..(k + 1) * header],
                None => &buf[at..span.used],
            };
            let length = block_length.get(block, 0).unwrap_or(0) as usize;
            let in_use = block_used.get(block, 0).unwrap_or(0) != 0;
            if length == 0 || length > span.last + 1 - seg {
                // Torn by the JVM changing the heap: look at the next start.
                continue;
            }
            next = seg + length;
            if in_use
                && let Some(addr) = span.low.checked_add(at as u64 + block_size)
                && let Some(room) = (length << span.log2).checked_sub(block_size as usize)
                && let Some(b) = block.get(block_size as usize..)
                && let Some(blob) = self.decode_blob(addr, b, room)
            {
                blobs.push(blob);
            }
        }
    }

    /// Reads `header` bytes at each block start (a segment index) into `buf`, one after the
    /// other, with `read_parts` (up to `MAX_PARTS` pieces a call). False if a call fails or
    /// reads short: the caller falls back to reading the whole span.
    fn gather(&self, span: &HeapSpan, header: usize, buf: &mut Vec<u8>) -> bool {
        let HeapSpan {
            low,
            log2,
            used,
            ref starts,
            ..
        } = *span;
        buf.clear();
        buf.resize(starts.len() * header, 0);
        for (batch, chunk) in starts
            .chunks(MAX_PARTS)
            .zip(buf.chunks_mut(MAX_PARTS * header))
        {
            let mut parts = Vec::with_capacity(batch.len());
            let mut want = 0;
            for (&seg, piece) in batch.iter().zip(chunk.chunks_mut(header)) {
                let at = seg << log2;
                // The last block may end closer than `header`: never read past the span.
                let len = header.min(used - at);
                parts.push((low + at as u64, &mut piece[..len]));
                want += len;
            }
            if self.mem.read_parts(&mut parts).ok() != Some(want) {
                return false;
            }
        }
        true
    }

    /// The blob at `addr`, its header at the start of `buf`, `room` bytes left in its block;
    /// None if it does not fit its block.
    fn decode_blob(&mut self, addr: u64, buf: &[u8], room: usize) -> Option<CodeBlob> {
        let l = self.layout;
        if l.blob_header as usize > room {
            return None;
        }
        let size = l.blob_size.get(buf, 0)?;
        if size <= 0 || size as usize > room {
            return None;
        }
        let (start, end) = match l.blob_code {
            CodeRange::Pointers { begin, end } => {
                (begin.get(buf, 0)? as u64, end.get(buf, 0)? as u64)
            }
            CodeRange::Offsets { code, data } => (
                addr.checked_add(code.get(buf, 0)? as u64)?,
                addr.checked_add(data.get(buf, 0)? as u64)?,
            ),
        };
        if start < addr || end < start || end > addr.checked_add(size as u64)? {
            return None;
        }
        let complete = l.blob_frame_complete.get(buf, 0)?;
        let frame_complete = if complete >= 0 {
            start.saturating_add(complete as u64).min(end)
        } else {
            end
        };
        // C1's frameless runtime stubs record -1.
        let frame_size_words = u32::try_from(l.blob_frame_size.get(buf, 0)?).unwrap_or(0);
        let name_ptr = l.blob_name.get(buf, 0)? as u64;
        let is_nmethod_kind = match l.nmethod_test {
            NmethodTest::Kind { kind, nmethod } => Some(kind.get(buf, 0)? == nmethod),
            NmethodTest::Name => None,
        };
        let method_field = l.nmethod_method;
        let blob_name = self.names.blob_name(self.mem, name_ptr);
        // JDK 17 names compiled Java methods "nmethod" and native method wrappers
        // "native nmethod"; both are nmethods with a Method*.
        let is_nmethod = is_nmethod_kind
            .unwrap_or_else(|| blob_name == "nmethod" || blob_name == "native nmethod");
        // Only nmethods have the field, beyond the header every blob has.
        let method = match method_field.get(buf, 0) {
            Some(m) if is_nmethod && method_field.end() as usize <= room => m as u64,
            _ => 0,
        };
        let (kind, name) = if is_nmethod && method != 0 {
            // A method whose name cannot be read (being unloaded) keeps the blob's name.
            let name = self
                .names
                .method_name(self.mem, self.layout, method)
                .unwrap_or(blob_name);
            (BlobKind::Nmethod { method }, name)
        } else if start >= self.interpreter.0 && end <= self.interpreter.1 && start < end
            || blob_name == "Interpreter"
        {
            (BlobKind::Interpreter, blob_name)
        } else {
            (BlobKind::Stub, blob_name)
        };
        let debug = match (&kind, &self.layout.debug) {
            (BlobKind::Nmethod { .. }, Ok(d)) => d.locate(addr, buf, size as u64, room),
            _ => None,
        };
        Some(CodeBlob {
            start,
            end,
            frame_complete,
            frame_size_words,
            kind,
            name,
            debug,
            inlining: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{
        super::{
            debuginfo::tests::{INNER, OUTER, info, pc_layout, recorded},
            unsigned5::Unsigned5,
        },
        *,
    };

    #[test]
    fn a_blob_names_the_methods_inlined_at_an_address_inside_it() {
        let f = Unsigned5::UP_TO_JDK19;
        let (r, _) = recorded(f);
        let inlining = info(&r, f).inlining(&pc_layout(f)).expect("decode");
        let blob = CodeBlob {
            start: 0x1000,
            end: 0x1100,
            frame_complete: 0x1010,
            frame_size_words: 4,
            kind: BlobKind::Nmethod { method: OUTER },
            name: "Outer.outer".into(),
            debug: None,
            inlining: inlining.map(Arc::new),
        };
        assert_eq!(blob.inlined_at(0x1000 + 29), Some(&[OUTER, INNER][..]));
        assert_eq!(blob.inlined_at(0xfff), None);
        assert_eq!(blob.inlined_at(0x1100), None);
    }
}
