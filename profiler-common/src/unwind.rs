//! Wire types of the in-kernel `.eh_frame` unwinder (x86_64).
//!
//! User space turns each executable file's `.eh_frame` into sorted [`UnwindRow`]s: from a row's
//! `pc` until the next row's `pc`, how to find the canonical frame address (CFA) and the
//! caller's `rbp`; the return address is always at CFA − 8 on x86_64. A file's rows are
//! contiguous in a global row array stored in chunks of [`ROWS_PER_CHUNK`] rows (one array map
//! value each), so a binary search step costs one inlined array lookup. The target's mappings
//! ([`ProcMappings`]) say which rows cover which addresses.

/// `ucontext_t` offsets of the registers a signal frame saved, from the rsp of
/// `__restore_rt` (x86_64: `struct sigcontext` inside `uc_mcontext` at offset 40; rbp is
/// greg 10, rsp greg 15, rip greg 16). libc's CFI for `__restore_rt` says the same
/// (`DW_OP_breg7 (rsp): 120 / 160 / 168`).
pub const UC_RBP: u64 = 40 + 10 * 8;
pub const UC_RSP: u64 = 40 + 15 * 8;
pub const UC_RIP: u64 = 40 + 16 * 8;

/// Rows per chunk (one `BPF_MAP_TYPE_ARRAY` value of 768 KiB).
pub const ROWS_PER_CHUNK: usize = 1 << 16;
/// Executable mappings of the target the unwinder can tell apart.
pub const MAX_MAPPINGS: usize = 512;

/// How to compute the CFA of a frame.
pub mod cfa_kind {
    /// The return address is undefined: the outermost frame (`_start`, `clone3`).
    pub const END_OF_STACK: u8 = 0;
    /// CFA = rsp + offset.
    pub const RSP: u8 = 1;
    /// CFA = rbp + offset.
    pub const RBP: u8 = 2;
    /// PLT stub: CFA = rsp + 8, plus 8 more when `(rip & 15) >= offset` (the stub has
    /// pushed its relocation index). The standard `.plt` CFA expression.
    pub const PLT: u8 = 3;
    /// Signal trampoline (`__restore_rt`): the interrupted registers are in the
    /// `ucontext_t` at rsp; rip, rsp and rbp are read from there.
    pub const SIGNAL_FRAME: u8 = 4;
    /// A rule the unwinder cannot express: this frame falls back to frame pointers.
    pub const UNSUPPORTED: u8 = 5;
    /// No FDE covers this address (a gap between functions): frame pointers.
    pub const NO_INFO: u8 = 6;
    /// HotSpot's template interpreter (rows made from the JVM's code cache, not a file):
    /// an rbp-linked frame (caller's rbp at [rbp], return address at [rbp + 8]) whose
    /// `Method*` sits at rbp + `cfa_offset` and whose caller's stack pointer (the
    /// "sender sp") at rbp + `rbp_offset` (0: rbp + 16), the interpreter's frame layout
    /// read from the JVM's vmStructs. The frame is recorded as
    /// [`super::java_method_frame`] of that `Method*` instead of its pc, so user space can
    /// name the Java method.
    pub const HOTSPOT_INTERPRETER: u8 = 7;
    /// Code cache space that held no code when the JVM's cache was last read: code
    /// compiled since. Frame pointers, as `NO_INFO`, but counted
    /// ([`crate::Counter::JitGapFrames`]) so user space reads the cache again now
    /// instead of at its usual pace: a compiled frame without its row hides its caller.
    pub const JIT_GAP: u8 = 8;
}

/// Top 16 bits of a user frame that is a HotSpot `Method*`, not a pc (an interpreted
/// Java frame). User addresses on x86_64 stay below 2^47, so no pc carries them.
pub const JAVA_METHOD_TAG: u64 = 0x4a56 << 48;

/// The frame recorded for an interpreted Java frame running `method`.
pub const fn java_method_frame(method: u64) -> u64 {
    JAVA_METHOD_TAG | (method & 0x0000_ffff_ffff_ffff)
}

/// The `Method*` of a frame made by [`java_method_frame`].
pub const fn java_method_of(frame: u64) -> Option<u64> {
    if frame & 0xffff_0000_0000_0000 == JAVA_METHOD_TAG {
        Some(frame & 0x0000_ffff_ffff_ffff)
    } else {
        None
    }
}

/// Where the caller's rbp is.
pub mod rbp_kind {
    /// Not saved by this frame: the caller's rbp is the current rbp.
    pub const UNCHANGED: u8 = 0;
    /// Saved at CFA + `rbp_offset`.
    pub const AT_CFA_OFFSET: u8 = 1;
    /// Any other rule: the caller's rbp is unknown (frames above may fall back badly).
    pub const UNSUPPORTED: u8 = 2;
}

/// One unwind row; 12 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindRow {
    /// Address relative to the table's base (the lowest address any row of the file covers).
    pub pc: u32,
    pub cfa_offset: i32,
    pub rbp_offset: i16,
    /// One of [`cfa_kind`].
    pub cfa_kind: u8,
    /// One of [`rbp_kind`].
    pub rbp_kind: u8,
}

/// One chunk of the global row array.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RowChunk {
    pub rows: [UnwindRow; ROWS_PER_CHUNK],
}

/// One executable mapping of the target.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecMapping {
    pub start: u64,
    pub end: u64,
    /// Subtract from a runtime address to get a row `pc`: the file's load bias plus its
    /// table base.
    pub bias: u64,
    /// Index of the file's first row in the global row array.
    pub first_row: u32,
    /// Rows of the file; 0 means no `.eh_frame`: unwind with frame pointers.
    pub row_count: u32,
    /// Pages (of `1 << ROW_PAGE_SHIFT` bytes of row pc) the file's page index covers; 0:
    /// no index (a JIT region), search all the rows. The index follows the rows in the
    /// global array: `pages + 1` rows whose `pc` is the index of the first row with a pc
    /// at or past that page's start (the last: `row_count`). A lookup then searches the
    /// few rows of one page, where a search of all of a large file's rows went through
    /// 17 of them, most a cache miss (2.4 µs of a full unwind's 15, each time).
    pub index_pages: u32,
    pub _pad: u32,
}

/// A page index entry per `1 << ROW_PAGE_SHIFT` bytes of code (see
/// [`ExecMapping::index_pages`]): 4 KiB hold ~30 rows, the index is ~3 % of the rows.
pub const ROW_PAGE_SHIFT: u32 = 12;

/// The target's executable mappings sorted by `start`, `count` of them valid.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcMappings {
    pub count: u32,
    /// Bumped by every upload: lookups cached in the kernel under another generation
    /// are stale.
    pub generation: u32,
    pub entries: [ExecMapping; MAX_MAPPINGS],
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), integer fields, no padding (4 + 4 + 2 + 1 + 1).
unsafe impl aya::Pod for UnwindRow {}
#[cfg(feature = "aya")]
// SAFETY: an array of Pod rows.
unsafe impl aya::Pod for RowChunk {}
#[cfg(feature = "aya")]
// SAFETY: repr(C), u64/u32 fields, no padding.
unsafe impl aya::Pod for ExecMapping {}
#[cfg(feature = "aya")]
// SAFETY: repr(C), u32 fields then an array of Pod mappings (8-byte aligned at offset 8).
unsafe impl aya::Pod for ProcMappings {}
