//! One ELF file's bytes → its call frame information as sorted [`UnwindRow`]s (x86_64): the
//! table the in-kernel unwinder binary-searches.
//!
//! The CFI comes from `.eh_frame`, and from `.debug_frame` for the functions no `.eh_frame`
//! FDE covers: Go's linker writes only `.debug_frame` (zlib-compressed since Go 1.11), and a
//! cgo binary has `.eh_frame` for its C code and `.debug_frame` for its Go code. Go's CFI does
//! not mark the ends of its stacks nor its signal return; [`GO_FRAMES`] does.
//!
//! Every FDE's call frame program is evaluated with gimli; every row of its table becomes one
//! `UnwindRow`. Rules the unwinder can follow (CFA = rsp/rbp + offset, the `.plt` expression,
//! glibc's signal trampoline) keep their meaning; any other rule becomes a row that sends the
//! unwinder back to frame pointers. A `NO_INFO` row closes every FDE, so addresses in the gaps
//! between functions never borrow the rule of the function before them.
//!
//! What each row kind carries besides `pc`:
//! - `RSP`, `RBP`: `cfa_offset` from that register; the caller's rbp as `rbp_kind` says.
//! - `PLT`: `cfa_offset` = the expression's threshold (11, or 9 for IBT stubs).
//! - `SIGNAL_FRAME`: `cfa_offset` = [`UC_RSP`] (the interrupted rsp is at rsp + 160, its rip 8
//!   bytes further), `rbp_offset` = [`UC_RBP`] (the interrupted rbp at rsp + 120), `rbp_kind`
//!   `UNSUPPORTED` because that rbp is not CFA-relative.
//! - `END_OF_STACK`, `UNSUPPORTED`, `NO_INFO`: offsets 0 and `rbp_kind` `UNCHANGED`, so that
//!   neighbours merge.
//!
//! The files come from processes we do not trust, and we run as root: nothing here panics,
//! arithmetic is checked, allocations grow with the input and not with header fields (a
//! compressed `.debug_frame` by at most deflate's 1032:1, and at most 64 MiB), and both the
//! rows and the CFI work are capped.

use std::{borrow::Cow, collections::HashMap};

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, CommonInformationEntry, DebugFrame, EhFrame, EhFrameHdr,
    EndianSlice, FrameDescriptionEntry, LittleEndian, Operation, Register, RegisterRule,
    UnwindContext, UnwindExpression, UnwindOffset, UnwindSection, UnwindTableRow,
};
use object::{
    LittleEndian as ElfEndian, Object as _, ObjectSection as _, ObjectSymbol as _, SymbolKind, elf,
    read::elf::{ElfFile64, FileHeader as _, ProgramHeader as _},
};
use profiler_common::unwind::{ROWS_PER_CHUNK, UnwindRow, cfa_kind, rbp_kind};
use thiserror::Error;

/// Most rows one file may produce (64 chunks, 4 Mi rows, 48 MiB). The biggest file we tried,
/// librustc_driver (150 MiB), has 1.15 Mi rows; anything larger is refused rather than allowed
/// to fill the kernel's row array on its own.
pub const MAX_ROWS: usize = 64 * ROWS_PER_CHUNK;

/// CFI bytes evaluated per byte of CFI before giving up. Every FDE re-runs its CIE's
/// initial instructions; real CIEs are a few dozen bytes, which keeps real files near 1.4
/// bytes of work per byte (libc, node, libLLVM, librustc_driver), while a crafted file with
/// one huge CIE shared by many FDEs would otherwise take time quadratic in its size.
const WORK_PER_BYTE: u64 = 16;
/// Work allowed to any file, however small its CFI.
const MIN_WORK: u64 = 1 << 20;

/// Most bytes a compressed `.debug_frame` may expand to. Its header says how many it will
/// be, and a few KiB can claim gigabytes; a Go binary has about 45 bytes of `.debug_frame`
/// per function (62 KiB for the 1436 functions of a small program), so this is room for
/// 1.4 million functions.
pub const MAX_DEBUG_FRAME: u64 = 64 << 20;
/// Most bytes a compressed `.debug_frame` may expand to per compressed byte: deflate's limit
/// (a 258-byte match per 2 bits, about 1032:1). Real ones expand 3–4 times (Go, zlib).
const MAX_EXPANSION: u64 = 1032;

/// DWARF register numbers of the x86_64 psABI (figure 3.36).
const RBP: Register = Register(6);
const RSP: Register = Register(7);
const RIP: Register = Register(16);

// glibc's `__restore_rt` (sysdeps/unix/sysv/linux/x86_64/libc_sigaction.c) describes the
// interrupted frame with expressions on the `ucontext_t` that rsp points at once the signal
// handler has returned into the trampoline: `uc_flags` (8) + `uc_link` (8) + `uc_stack` (24)
// = 40 bytes, then `mcontext_t.gregs` in `REG_R8` … `REG_RIP` order. Debian 12's libc.so.6
// (glibc 2.36) has one such FDE, with CIE augmentation "zRS" (signal frame), covering the
// `nop` before the trampoline and its `mov $15 (rt_sigreturn), %rax; syscall`
// (`readelf --debug-dump=frames`, FDE pc=0x3c04f..0x3c059); ld.so carries a copy:
//
//   DW_CFA_def_cfa_expression (DW_OP_breg7 (rsp): 160; DW_OP_deref)
//   DW_CFA_expression: r8 (r8) (DW_OP_breg7 (rsp): 40)     … r15 96, rdi 104, rsi 112
//   DW_CFA_expression: r6 (rbp) (DW_OP_breg7 (rsp): 120)   … rbx 128, rdx 136, rax 144, rcx 152
//   DW_CFA_expression: r7 (rsp) (DW_OP_breg7 (rsp): 160)
//   DW_CFA_expression: r16 (rip) (DW_OP_breg7 (rsp): 168)
//
// A row is SIGNAL_FRAME when the CFA, rip and rbp rules are exactly these.

pub use profiler_common::unwind::{UC_RBP, UC_RIP, UC_RSP};
/// [`UC_RSP`] as a DWARF register offset (a pattern needs a constant of the operand's type).
const UC_RSP_OFFSET: i64 = UC_RSP as i64;

// The lazy `.plt` CFA expression of binutils (`elf_x86_64_eh_frame_lazy_plt`):
// `rsp + 8 + (((rip & 15) >= threshold) << 3)`: past the `push` of its 16-byte entry, a stub
// has 8 more bytes on the stack. The threshold is where the `push` ends: 11 in the classic
// entry (`jmp *GOT` 6 bytes + `push` 5), 9 in the IBT entry (`endbr64` 4 + `push` 5, what
// `-z ibtplt` links), 10 in the old MPX (BND) one. Any threshold 0–15 is taken as written.
const PLT_MASK: u64 = 15;

/// How a Go runtime function is unwound instead of by its `.debug_frame` rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoFrame {
    /// One `END_OF_STACK` row: nothing above its frame belongs to the stack being walked.
    End,
    /// One `SIGNAL_FRAME` row: the signal return trampoline, where rsp points at the
    /// `ucontext_t` of the interrupted code (Go's copies glibc's `__restore_rt`).
    Signal,
}

/// Go functions whose `.debug_frame` FDE becomes one fixed row. Go's CFI says nothing about
/// them (every FDE's return address is at CFA − 8, `goexit`'s included); Go's own traceback
/// knows them by function flags in `.gopclntab` (`runtime/traceback.go`, Go 1.19, lines
/// 209–235: stop at `TOPFRAME`; in a profiling signal also at `SPWRITE`). Matched by symbol
/// name, with or without the `.abi0` suffix Go 1.17+ gives assembly functions. From Go 1.19's
/// `runtime/asm_amd64.s`, `sys_linux_amd64.s` and `time_linux_amd64.s`:
pub const GO_FRAMES: &[(&str, GoFrame)] = &[
    // TOPFRAME: the return address a new goroutine starts with is `goexit` + 1
    // (`newproc1`); a thread Go starts runs `mstart` (from `clone`), the main thread
    // `rt0_go`; `sigtramp` is entered by the kernel, on the signal stack.
    ("runtime.goexit", GoFrame::End),
    ("runtime.mstart", GoFrame::End),
    ("runtime.rt0_go", GoFrame::End),
    ("runtime.sigtramp", GoFrame::End),
    // SPWRITE, calling on another stack: `mcall`, `systemstack` and `morestack` call on the
    // thread's g0 stack from `g0.sched.sp` (set by `mstart1`), where the word above their
    // return address is `mstart0`'s; `asmcgocall` calls C there, `cgocallback` calls Go on
    // the goroutine's stack; `nanotime1` and `time.now` call the vDSO on g0. Their own rows
    // would take the unwinder into whatever lies above.
    ("runtime.mcall", GoFrame::End),
    ("runtime.systemstack", GoFrame::End),
    ("runtime.morestack", GoFrame::End),
    ("runtime.asmcgocall", GoFrame::End),
    ("runtime.asmcgocall_no_g", GoFrame::End),
    ("runtime.cgocallback", GoFrame::End),
    ("runtime.nanotime1", GoFrame::End),
    ("time.now", GoFrame::End),
    // `sa_restorer` of Go's signal handlers: `mov $15 (rt_sigreturn), %rax; syscall`, seen as
    // the leaf while the kernel restores the interrupted context.
    ("runtime.sigreturn", GoFrame::Signal),
];

#[derive(Debug, Error)]
pub enum UnwindError {
    #[error("not a readable 64-bit little-endian ELF file: {0}")]
    Elf(#[from] object::read::Error),
    #[error("ELF machine {0} is not x86_64")]
    NotX86_64(u16),
    #[error("malformed .eh_frame or .debug_frame: {0}")]
    Cfi(#[from] gimli::Error),
    #[error("PT_GNU_EH_FRAME points outside the file")]
    BadEhFrameHdr,
    #[error("compressed .debug_frame claims {size} bytes, more than {limit}")]
    DebugFrameTooLarge { size: u64, limit: u64 },
    #[error("FDEs cover {span:#x} bytes from {base:#x}: more than a 32-bit row pc can address")]
    SpanTooLarge { base: u64, span: u64 },
    #[error("more than {MAX_ROWS} unwind rows")]
    TooManyRows,
    #[error("CFI needs more than {budget} bytes of evaluation (crafted CIEs?)")]
    TooMuchWork { budget: u64 },
}

/// The unwind rows of one file, sorted by `pc`, no two neighbours with the same rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnwindTable {
    /// Lowest address (in the file's own address space) any FDE covers; row `pc`s are
    /// relative to it. 0 when there are no rows.
    pub base: u64,
    pub rows: Vec<UnwindRow>,
}

/// The row that applies at `pc` (relative to the table's base): the last one starting at or
/// before it. The eBPF side does the same binary search.
pub fn find_row(rows: &[UnwindRow], pc: u32) -> Option<&UnwindRow> {
    let after = rows.partition_point(|row| row.pc <= pc);
    rows.get(after.checked_sub(1)?)
}

/// Builds the unwind table of an x86_64 ELF file: `.eh_frame`, then `.debug_frame` for the
/// functions `.eh_frame` leaves out. A file with neither (or whose FDEs all lie outside its
/// executable segments) gives an empty table: frame pointers only.
pub fn build_rows(elf: &[u8]) -> Result<UnwindTable, UnwindError> {
    let file = ElfFile64::<ElfEndian>::parse(elf)?;
    let machine = file.elf_header().e_machine(file.endian());
    if machine != elf::EM_X86_64 {
        // Register numbers and the rules below are x86_64's.
        return Err(UnwindError::NotX86_64(machine));
    }
    let exec = ExecRanges::of(&file, elf);
    let eh_frame = locate_eh_frame(&file, elf)?;
    let debug_frame = read_debug_frame(&file)?;
    build_from_sections(eh_frame.as_ref(), debug_frame.as_deref(), &exec, || {
        go_frames(&file)
    })
}

/// The rows of an `.eh_frame` and a `.debug_frame` section's bytes (either may be missing).
/// `fixed` gives the functions whose `.debug_frame` FDE is one row of the given rule, by
/// address; it is asked only if `.debug_frame` has FDEs to use.
fn build_from_sections(
    eh_frame: Option<&Source<'_>>,
    debug_frame: Option<&[u8]>,
    exec: &ExecRanges,
    fixed: impl FnOnce() -> Vec<(u64, UnwindRow)>,
) -> Result<UnwindTable, UnwindError> {
    let mut eh = eh_frame.map(|source| {
        let mut section = EhFrame::new(source.data, LittleEndian);
        section.set_address_size(8);
        CfiSection::new(section, source.bases.clone())
    });
    let mut debug = debug_frame.map(|data| {
        let mut section = DebugFrame::new(data, LittleEndian);
        // Only CIEs of version < 4 use it (version 4 names the address size itself); Go
        // writes version 3.
        section.set_address_size(8);
        CfiSection::new(section, BaseAddresses::default())
    });

    let mut fdes = Vec::new();
    if let Some(eh) = &mut eh {
        eh.list_fdes(exec, From::EhFrame, &mut fdes)?;
    }
    let eh_count = fdes.len();
    if let Some(debug) = &mut debug {
        debug.list_fdes(exec, From::DebugFrame, &mut fdes)?;
        // `.eh_frame` wins: an FDE of `.debug_frame` is used only where none of `.eh_frame`
        // covers any of its addresses (`.cfi_sections .eh_frame, .debug_frame` writes both).
        let covered = Covered::of(fdes.get(..eh_count).unwrap_or_default());
        let mut i = 0;
        fdes.retain(|fde| {
            i += 1;
            i <= eh_count || !covered.overlaps(fde.start, fde.end)
        });
    }
    let fixed = if fdes.len() > eh_count {
        let mut fixed = fixed();
        fixed.sort_unstable_by_key(|&(address, _)| address);
        fixed
    } else {
        Vec::new()
    };
    // Equal starts keep their order: the FDE later in its section wins their addresses.
    fdes.sort_by_key(|fde| fde.start);

    let cfi_len = eh_frame.map_or(0, |s| s.data.len()) + debug_frame.map_or(0, <[u8]>::len);
    let budget = u64::try_from(cfi_len)
        .unwrap_or(u64::MAX)
        .saturating_mul(WORK_PER_BYTE)
        .max(MIN_WORK);
    evaluate(
        Sections {
            eh: eh.as_mut(),
            debug: debug.as_mut(),
        },
        &fdes,
        &fixed,
        (budget, exec),
    )
}

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// Where `.eh_frame` is and the bases its pointer encodings are relative to.
struct Source<'a> {
    data: &'a [u8],
    bases: BaseAddresses,
}

fn locate_eh_frame<'a>(
    file: &ElfFile64<'a, ElfEndian>,
    elf: &'a [u8],
) -> Result<Option<Source<'a>>, UnwindError> {
    let address = |name: &str| file.section_by_name(name).map(|s| s.address());
    if let Some(section) = file.section_by_name(".eh_frame") {
        // A separate debug file keeps the section header but not the bytes (SHT_NOBITS):
        // `data` is then empty and there is nothing to unwind with.
        let data = section.data()?;
        let mut bases = BaseAddresses::default().set_eh_frame(section.address());
        if let Some(text) = address(".text") {
            bases = bases.set_text(text);
        }
        // DW_EH_PE_datarel is relative to the GOT on x86_64 (as in libgcc's unwind-dw2-fde).
        if let Some(got) = address(".got") {
            bases = bases.set_got(got);
        }
        return Ok(Some(Source { data, bases }));
    }
    from_eh_frame_hdr(file, elf)
}

/// Files without section headers (`sstrip`ped) still have `PT_GNU_EH_FRAME`, which the
/// runtime's own unwinder uses: `.eh_frame_hdr` names `.eh_frame`'s address.
fn from_eh_frame_hdr<'a>(
    file: &ElfFile64<'a, ElfEndian>,
    elf: &'a [u8],
) -> Result<Option<Source<'a>>, UnwindError> {
    let endian = file.endian();
    let headers = file.elf_program_headers();
    let Some(hdr) = headers
        .iter()
        .find(|p| p.p_type(endian) == elf::PT_GNU_EH_FRAME)
    else {
        return Ok(None);
    };
    let hdr_data = hdr
        .data(endian, elf)
        .map_err(|()| UnwindError::BadEhFrameHdr)?;
    let hdr_bases = BaseAddresses::default().set_eh_frame_hdr(hdr.p_vaddr(endian));
    let parsed = EhFrameHdr::new(hdr_data, LittleEndian).parse(&hdr_bases, 8)?;
    let gimli::Pointer::Direct(address) = parsed.eh_frame_ptr() else {
        // An indirect pointer would have to be read from memory the file does not describe.
        return Ok(None);
    };
    // The header gives no length: the section runs at most to the end of the file bytes of
    // its load segment, and gimli stops at its zero terminator.
    let data = headers
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD)
        .find_map(|p| {
            let into = address.checked_sub(p.p_vaddr(endian))?;
            let (offset, size) = p.file_range(endian);
            let rest = size.checked_sub(into)?;
            let start = offset.checked_add(into)?;
            let end = start.checked_add(rest)?;
            elf.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
        })
        .ok_or(UnwindError::BadEhFrameHdr)?;
    let bases = BaseAddresses::default().set_eh_frame(address);
    Ok(Some(Source { data, bases }))
}

/// `.debug_frame`'s bytes, decompressed if the section is (`SHF_COMPRESSED`, what Go 1.12+
/// writes, or GNU `.zdebug_frame`, Go 1.11's: `section_by_name` finds either).
fn read_debug_frame<'a>(
    file: &ElfFile64<'a, ElfEndian>,
) -> Result<Option<Cow<'a, [u8]>>, UnwindError> {
    let Some(section) = file.section_by_name(".debug_frame") else {
        return Ok(None);
    };
    let compressed = section.compressed_data()?;
    let limit = u64::try_from(compressed.data.len())
        .unwrap_or(u64::MAX)
        .saturating_mul(MAX_EXPANSION)
        .min(MAX_DEBUG_FRAME);
    if compressed.format != object::CompressionFormat::None && compressed.uncompressed_size > limit
    {
        // object reserves the size the header claims before inflating.
        return Err(UnwindError::DebugFrameTooLarge {
            size: compressed.uncompressed_size,
            limit,
        });
    }
    Ok(Some(compressed.decompress()?))
}

/// The [`GO_FRAMES`] functions' addresses and rows, from `.symtab` (a Go binary that still
/// has `.debug_frame` has its symbols: `-ldflags=-s` drops both).
fn go_frames(file: &ElfFile64<'_, ElfEndian>) -> Vec<(u64, UnwindRow)> {
    file.symbols()
        .filter(|s| s.kind() == SymbolKind::Text)
        .filter_map(|s| {
            let name = s.name_bytes().ok()?;
            let name = name.strip_suffix(b".abi0").unwrap_or(name);
            let &(_, frame) = GO_FRAMES.iter().find(|(go, _)| go.as_bytes() == name)?;
            let row = match frame {
                GoFrame::End => rule(cfa_kind::END_OF_STACK, 0, (rbp_kind::UNCHANGED, 0)),
                GoFrame::Signal => SIGNAL_FRAME,
            };
            Some((s.address(), row))
        })
        .collect()
}

/// Sorted, disjoint address ranges, from any list of ranges.
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// Address ranges of the executable load segments, sorted and disjoint. An FDE that starts
/// outside them (a stale FDE of a section the linker discarded, relocated to 0) would only
/// stretch the table's span.
#[derive(Default)]
struct ExecRanges<'a> {
    /// Sorted and disjoint.
    ranges: Vec<(u64, u64)>,
    /// Each executable segment's bytes in the file, by address.
    code: Vec<(u64, &'a [u8])>,
}

impl<'a> ExecRanges<'a> {
    fn of(file: &ElfFile64<'a, ElfEndian>, elf: &'a [u8]) -> Self {
        let endian = file.endian();
        let segments: Vec<_> = file
            .elf_program_headers()
            .iter()
            .filter(|p| p.p_type(endian) == elf::PT_LOAD && p.p_flags(endian) & elf::PF_X != 0)
            .collect();
        Self {
            ranges: merged(
                segments
                    .iter()
                    .filter_map(|p| {
                        let start = p.p_vaddr(endian);
                        Some((start, start.checked_add(p.p_memsz(endian))?))
                    })
                    .collect(),
            ),
            code: segments
                .iter()
                .filter_map(|p| Some((p.p_vaddr(endian), p.data(endian, elf).ok()?)))
                .collect(),
        }
    }

    #[cfg(test)]
    fn of_ranges(ranges: Vec<(u64, u64)>) -> Self {
        Self {
            ranges,
            code: Vec::new(),
        }
    }

    /// A file without program headers (a relocatable object) is not filtered.
    fn contains(&self, address: u64) -> bool {
        if self.ranges.is_empty() {
            return true;
        }
        let after = self.ranges.partition_point(|&(start, _)| start <= address);
        after
            .checked_sub(1)
            .and_then(|i| self.ranges.get(i))
            .is_some_and(|&(_, end)| address < end)
    }

    /// Whether the instruction at `address` is a `syscall` (0f 05).
    fn syscall_at(&self, address: u64) -> bool {
        self.code.iter().any(|&(start, bytes)| {
            address
                .checked_sub(start)
                .and_then(|at| usize::try_from(at).ok())
                .and_then(|at| bytes.get(at..at.checked_add(2)?))
                == Some(&[0x0f, 0x05][..])
        })
    }
}

/// The addresses some FDEs cover, sorted and disjoint.
struct Covered(Vec<(u64, u64)>);

impl Covered {
    fn of(fdes: &[FdeSpan]) -> Self {
        Self(merged(fdes.iter().map(|f| (f.start, f.end)).collect()))
    }

    /// Whether any address in `start..end` is covered.
    fn overlaps(&self, start: u64, end: u64) -> bool {
        // Only the last range starting before `end` can reach past `start`: the ones before it
        // end before it starts.
        let before_end = self.0.partition_point(|&(s, _)| s < end);
        before_end
            .checked_sub(1)
            .and_then(|i| self.0.get(i))
            .is_some_and(|&(_, e)| e > start)
    }
}

/// Which section an FDE is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum From {
    EhFrame,
    DebugFrame,
}

/// One FDE to evaluate: its range and where it is.
struct FdeSpan {
    start: u64,
    end: u64,
    from: From,
    offset: usize,
}

/// One CFI section and the CIEs parsed from it so far.
struct CfiSection<'a, S> {
    section: S,
    bases: BaseAddresses,
    /// CIEs parsed once each: parsing the CIE again for every FDE would give a crafted file
    /// (one CIE with a huge augmentation string, shared by many FDEs) time quadratic in its
    /// size.
    cies: HashMap<usize, CommonInformationEntry<Slice<'a>>>,
}

fn cached_cie<'a, S: UnwindSection<Slice<'a>>>(
    cies: &mut HashMap<usize, CommonInformationEntry<Slice<'a>>>,
    section: &S,
    bases: &BaseAddresses,
    offset: S::Offset,
) -> gimli::Result<CommonInformationEntry<Slice<'a>>> {
    let key = UnwindOffset::into(offset);
    if let Some(cie) = cies.get(&key) {
        return Ok(cie.clone());
    }
    let cie = section.cie_from_offset(bases, offset)?;
    cies.insert(key, cie.clone());
    Ok(cie)
}

impl<'a, S: UnwindSection<Slice<'a>>> CfiSection<'a, S> {
    fn new(section: S, bases: BaseAddresses) -> Self {
        Self {
            section,
            bases,
            cies: HashMap::new(),
        }
    }

    /// First pass: appends the address range of every FDE that covers executable code.
    fn list_fdes(
        &mut self,
        exec: &ExecRanges,
        from: From,
        fdes: &mut Vec<FdeSpan>,
    ) -> Result<(), UnwindError> {
        let Self {
            section,
            bases,
            cies,
        } = self;
        let mut entries = section.entries(bases);
        while let Some(entry) = entries.next()? {
            let CieOrFde::Fde(partial) = entry else {
                continue;
            };
            let fde = partial.parse(|s, b, o| cached_cie(cies, s, b, o))?;
            let start = fde.initial_address();
            // gimli wraps the end address; an FDE that wraps around covers nothing real.
            let Some(end) = start.checked_add(fde.len()) else {
                continue;
            };
            if end == start || !exec.contains(start) {
                continue;
            }
            // Every FDE adds at least two rows (its first and its end marker).
            if fdes.len() >= MAX_ROWS {
                return Err(UnwindError::TooManyRows);
            }
            fdes.push(FdeSpan {
                start,
                end,
                from,
                offset: fde.offset(),
            });
        }
        Ok(())
    }

    /// The FDE at `span`, and the CFI bytes its evaluation runs (its own and its CIE's
    /// initial instructions, which every FDE re-runs).
    fn fde(
        &mut self,
        span: &FdeSpan,
    ) -> Result<(FrameDescriptionEntry<Slice<'a>>, u64), UnwindError> {
        let Self {
            section,
            bases,
            cies,
        } = self;
        let fde = section.fde_from_offset(bases, span.offset.into(), |s, b, o| {
            cached_cie(cies, s, b, o)
        })?;
        let len = fde.entry_len().saturating_add(fde.cie().entry_len());
        Ok((fde, u64::try_from(len).unwrap_or(u64::MAX)))
    }

    /// The rows of one FDE, pushed onto `rows`.
    fn push_fde_rows(
        &self,
        ctx: &mut UnwindContext<usize>,
        fde: &FrameDescriptionEntry<Slice<'a>>,
        span: &FdeSpan,
        pc_of: &impl Fn(u64) -> Result<u32, UnwindError>,
        rows: &mut Vec<UnwindRow>,
    ) -> Result<(), UnwindError> {
        let mut table = fde.rows(&self.section, &self.bases, ctx)?;
        while let Some(row) = table.next_row()? {
            let start = row.start_address();
            // Empty rows (an advance by 0) are overridden by the next row anyway; rows an
            // advance pushed past the FDE's end describe addresses the FDE does not cover.
            if start >= row.end_address() || start < span.start || start >= span.end {
                continue;
            }
            push(rows, pc_of(start)?, convert(row, &self.section, fde.cie()))?;
        }
        Ok(())
    }
}

/// The sections the FDEs of one file come from.
struct Sections<'s, 'a> {
    eh: Option<&'s mut CfiSection<'a, EhFrame<Slice<'a>>>>,
    debug: Option<&'s mut CfiSection<'a, DebugFrame<Slice<'a>>>>,
}

impl<'a> Sections<'_, 'a> {
    /// Evaluates the FDE at `span` onto `rows`, adding the CFI bytes that takes to `work`.
    fn push_fde_rows(
        &mut self,
        ctx: &mut UnwindContext<usize>,
        span: &FdeSpan,
        pc_of: &impl Fn(u64) -> Result<u32, UnwindError>,
        rows: &mut Vec<UnwindRow>,
        (work, budget): (&mut u64, u64),
    ) -> Result<(), UnwindError> {
        fn run<'a, S: UnwindSection<Slice<'a>>>(
            cfi: &mut CfiSection<'a, S>,
            ctx: &mut UnwindContext<usize>,
            span: &FdeSpan,
            pc_of: &impl Fn(u64) -> Result<u32, UnwindError>,
            rows: &mut Vec<UnwindRow>,
            (work, budget): (&mut u64, u64),
        ) -> Result<(), UnwindError> {
            let (fde, len) = cfi.fde(span)?;
            *work = work.saturating_add(len);
            if *work > budget {
                return Err(UnwindError::TooMuchWork { budget });
            }
            cfi.push_fde_rows(ctx, &fde, span, pc_of, rows)
        }
        match (span.from, &mut self.eh, &mut self.debug) {
            (From::EhFrame, Some(eh), _) => run(eh, ctx, span, pc_of, rows, (work, budget)),
            (From::DebugFrame, _, Some(debug)) => {
                run(debug, ctx, span, pc_of, rows, (work, budget))
            }
            // Spans only come from sections that exist.
            _ => Ok(()),
        }
    }
}

/// Second pass: every FDE's rows in start order, each closed by a `NO_INFO` row; then sort,
/// resolve shared addresses, merge repeated rules. An FDE of `.debug_frame` that starts at
/// an address of `fixed` (sorted) is that one row.
fn evaluate(
    mut sections: Sections<'_, '_>,
    fdes: &[FdeSpan],
    fixed: &[(u64, UnwindRow)],
    (budget, exec): (u64, &ExecRanges<'_>),
) -> Result<UnwindTable, UnwindError> {
    let (Some(first), Some(end)) = (fdes.first(), fdes.iter().map(|fde| fde.end).max()) else {
        return Ok(UnwindTable::default());
    };
    let base = first.start;
    let span = end.saturating_sub(base);
    if span > u64::from(u32::MAX) {
        return Err(UnwindError::SpanTooLarge { base, span });
    }
    let pc_of = |address: u64| {
        address
            .checked_sub(base)
            .and_then(|pc| u32::try_from(pc).ok())
            .ok_or(UnwindError::SpanTooLarge { base, span })
    };

    let mut ctx = UnwindContext::new();
    let mut rows: Vec<UnwindRow> = Vec::new();
    let mut work: u64 = 0;
    for (i, span) in fdes.iter().enumerate() {
        let first_row = rows.len();
        let fixed = fixed
            .binary_search_by_key(&span.start, |&(address, _)| address)
            .ok()
            .and_then(|i| fixed.get(i))
            .filter(|_| span.from == From::DebugFrame);
        let result = match fixed {
            Some(&(_, row)) => push(&mut rows, pc_of(span.start)?, row),
            None => sections.push_fde_rows(&mut ctx, span, &pc_of, &mut rows, (&mut work, budget)),
        };
        match result {
            Ok(()) => {}
            // One FDE whose program does not evaluate (an unknown opcode, a restore_state
            // without remember_state) costs its own function only: frame pointers there.
            Err(UnwindError::Cfi(_)) => {
                rows.truncate(first_row);
                push(
                    &mut rows,
                    pc_of(span.start)?,
                    rule(cfa_kind::UNSUPPORTED, 0, (rbp_kind::UNCHANGED, 0)),
                )?;
            }
            Err(e) => return Err(e),
        }
        let mut end = span.end;
        // glibc's clone and clone3 end their FDE just before the `syscall` ("in the child the
        // unwind info will be wrong"). The parent spends the whole fork or thread creation in
        // it, returning to the 2 bytes after: its frame there is the one at the FDE's end.
        if let Some(&last) = rows.get(first_row..).and_then(<[UnwindRow]>::last)
            && last.cfa_kind == cfa_kind::RSP
            && exec.syscall_at(span.end)
            && fdes
                .get(i + 1)
                .is_none_or(|next| next.start > span.end + SYSCALL_LEN)
        {
            push(&mut rows, pc_of(span.end)?, last)?;
            end = span.end + SYSCALL_LEN + 1;
        }
        push(
            &mut rows,
            pc_of(end)?,
            rule(cfa_kind::NO_INFO, 0, (rbp_kind::UNCHANGED, 0)),
        )?;
    }

    Ok(UnwindTable {
        base,
        rows: sorted_and_merged(rows),
    })
}

/// The rows in pc order, one per pc, neighbours with one rule merged.
fn sorted_and_merged(mut rows: Vec<UnwindRow>) -> Vec<UnwindRow> {
    // Stable: rows sharing a pc stay in push order, and the last one pushed wins — a later row
    // of the same FDE, the first row of an FDE over the end marker of the one before it.
    // Nested FDEs (never in linked output) end up with NO_INFO after the inner one's end.
    rows.sort_by_key(|row| row.pc);
    let mut out: Vec<UnwindRow> = Vec::with_capacity(rows.len());
    for row in rows {
        match out.last_mut() {
            Some(last) if last.pc == row.pc => *last = row,
            _ => out.push(row),
        }
    }
    // Replacing above can leave two neighbours with one rule; merge only now.
    out.dedup_by(|next, kept| same_rule(next, kept));
    out
}

fn push(rows: &mut Vec<UnwindRow>, pc: u32, row: UnwindRow) -> Result<(), UnwindError> {
    if rows.len() >= MAX_ROWS {
        return Err(UnwindError::TooManyRows);
    }
    rows.push(UnwindRow { pc, ..row });
    Ok(())
}

/// The signal trampoline's rule: rip, rsp and rbp come from the ucontext; rbp_kind has no
/// CFA-relative rule to give, the offsets say where in the ucontext (from rsp) to look.
const SIGNAL_FRAME: UnwindRow = rule(
    cfa_kind::SIGNAL_FRAME,
    UC_RSP as i32,
    (rbp_kind::UNSUPPORTED, UC_RBP as i16),
);

/// Bytes of the `syscall` instruction.
const SYSCALL_LEN: u64 = 2;

const fn rule(cfa: u8, cfa_offset: i32, (rbp, rbp_offset): (u8, i16)) -> UnwindRow {
    UnwindRow {
        pc: 0,
        cfa_offset,
        rbp_offset,
        cfa_kind: cfa,
        rbp_kind: rbp,
    }
}

fn same_rule(a: &UnwindRow, b: &UnwindRow) -> bool {
    (a.cfa_kind, a.cfa_offset, a.rbp_kind, a.rbp_offset)
        == (b.cfa_kind, b.cfa_offset, b.rbp_kind, b.rbp_offset)
}

/// One gimli row → the rule the unwinder follows (`pc` left 0).
fn convert<'a, S: UnwindSection<Slice<'a>>>(
    row: &UnwindTableRow<usize>,
    section: &S,
    cie: &CommonInformationEntry<Slice<'a>>,
) -> UnwindRow {
    let unsupported = rule(cfa_kind::UNSUPPORTED, 0, (rbp_kind::UNCHANGED, 0));
    let ra = row.register(cie.return_address_register());
    if ra == Some(RegisterRule::Undefined) {
        // `_start`, `clone3`: the outermost frame says so.
        return rule(cfa_kind::END_OF_STACK, 0, (rbp_kind::UNCHANGED, 0));
    }
    let ops = |expr: &UnwindExpression<usize>| Ops::decode(expr, section, cie);
    let expr_rule = |register| match row.register(register) {
        Some(RegisterRule::Expression(expr)) => ops(&expr),
        _ => Ops::default(),
    };
    let cfa = match row.cfa() {
        CfaRule::Expression(expr) => {
            let cfa = ops(expr);
            match cfa.as_slice() {
                [Op::Breg(RSP, UC_RSP_OFFSET), Op::Deref]
                    if expr_rule(RIP).as_slice() == [Op::Breg(RSP, UC_RIP as i64)]
                        && expr_rule(RBP).as_slice() == [Op::Breg(RSP, UC_RBP as i64)] =>
                {
                    return SIGNAL_FRAME;
                }
                &[
                    Op::Breg(RSP, 8),
                    Op::Breg(RIP, 0),
                    Op::Lit(PLT_MASK),
                    Op::And,
                    Op::Lit(threshold),
                    Op::Ge,
                    Op::Lit(3),
                    Op::Shl,
                    Op::Plus,
                ] if threshold <= PLT_MASK => (cfa_kind::PLT, threshold as i32),
                _ => return unsupported,
            }
        }
        &CfaRule::RegisterAndOffset { register, offset } => {
            let kind = match register {
                RSP => cfa_kind::RSP,
                RBP => cfa_kind::RBP,
                _ => return unsupported,
            };
            let Ok(offset) = i32::try_from(offset) else {
                return unsupported;
            };
            (kind, offset)
        }
    };
    // The return address must be where the unwinder reads it: CFA - 8.
    if ra != Some(RegisterRule::Offset(-8)) {
        return unsupported;
    }
    let rbp = match row.register(RBP) {
        // No rule: rbp is callee-saved, so a frame that does not mention it leaves it alone.
        None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => (rbp_kind::UNCHANGED, 0),
        Some(RegisterRule::Offset(offset)) => match i16::try_from(offset) {
            Ok(offset) => (rbp_kind::AT_CFA_OFFSET, offset),
            Err(_) => (rbp_kind::UNSUPPORTED, 0),
        },
        Some(_) => (rbp_kind::UNSUPPORTED, 0),
    };
    rule(cfa.0, cfa.1, rbp)
}

/// The few DWARF operations the recognised expressions use; everything else is `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// `DW_OP_bregN offset`
    Breg(Register, i64),
    /// `DW_OP_litN` (or any unsigned constant)
    Lit(u64),
    And,
    Ge,
    Shl,
    Plus,
    /// `DW_OP_deref` of an address-sized value.
    Deref,
    Other,
}

/// Length of the longest recognised expression (the `.plt` one).
const MAX_OPS: usize = 9;

/// The first operations of an expression; empty when it is malformed or longer than any
/// recognised one. Decoding stops after `MAX_OPS + 1` operations, so a row costs the same
/// however long its expression is.
struct Ops {
    ops: [Op; MAX_OPS],
    len: usize,
}

impl Default for Ops {
    fn default() -> Self {
        Self {
            ops: [Op::Other; MAX_OPS],
            len: 0,
        }
    }
}

impl Ops {
    fn decode<'a, S: UnwindSection<Slice<'a>>>(
        expr: &UnwindExpression<usize>,
        section: &S,
        cie: &CommonInformationEntry<Slice<'a>>,
    ) -> Self {
        let Ok(expr) = expr.get(section) else {
            return Self::default();
        };
        let mut iter = expr.operations(cie.encoding());
        let mut ops = Self::default();
        loop {
            let op = match iter.next() {
                Ok(Some(op)) => op,
                Ok(None) => return ops,
                Err(_) => return Self::default(),
            };
            let Some(slot) = ops.ops.get_mut(ops.len) else {
                return Self::default();
            };
            *slot = match op {
                Operation::RegisterOffset {
                    register,
                    offset,
                    base_type,
                } if base_type.0 == 0 => Op::Breg(register, offset),
                Operation::UnsignedConstant { value } => Op::Lit(value),
                Operation::And => Op::And,
                Operation::Ge => Op::Ge,
                Operation::Shl => Op::Shl,
                Operation::Plus => Op::Plus,
                Operation::Deref {
                    base_type,
                    size: 8,
                    space: false,
                } if base_type.0 == 0 => Op::Deref,
                _ => Op::Other,
            };
            ops.len += 1;
        }
    }

    fn as_slice(&self) -> &[Op] {
        self.ops.get(..self.len).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::{
        path::Path,
        process::Command,
        sync::OnceLock,
        time::{Duration, Instant},
    };

    use object::{SectionFlags, read::elf::ElfFile64};
    use profiler_common::unwind::{cfa_kind as cfa, rbp_kind as rbp};

    use super::*;

    /// A row as the tests write it: offset from a symbol, then the rule.
    type Row = (u64, u8, i32, u8, i16);

    /// The checked-in ELF files the tests read (`tests/fixtures/unwind/`: their sources,
    /// `build.sh` and PROVENANCE.md, which says what each is and how it was built), so that
    /// the tests need no C compiler, binutils or Go and do not move with their versions.
    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/unwind");
    /// Every file `build.sh` writes.
    const FIXTURE_FILES: &[&str] = &[
        "c-exe",
        "c-exe-znow",
        "c-exe-ibtplt",
        "c-debug-frame",
        "c-debug-frame-plain",
        "c-debug-frame-zlib-gnu",
        "c-debug-frame-zstd",
        "cfi",
        "gohot",
    ];

    fn fixture(name: &str) -> Vec<u8> {
        let path = Path::new(FIXTURES).join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    }

    /// `c-exe`: main.c, fp.c (`-fno-omit-frame-pointer`) and nofp.c (`-fomit-frame-pointer`)
    /// linked by default (lazy binding).
    fn c_exe() -> Vec<u8> {
        fixture("c-exe")
    }

    /// The gohot fixture (`tests/fixtures/gohot`, built with `go build -trimpath`, its DWARF
    /// but `.debug_frame` removed), read once per test binary.
    fn go_fixture() -> &'static [u8] {
        static ELF: OnceLock<Vec<u8>> = OnceLock::new();
        ELF.get_or_init(|| fixture("gohot"))
    }

    /// `build.sh` run into a scratch directory gives the checked-in files byte for byte: the
    /// files are what their sources and PROVENANCE.md say, and the expectations in the tests
    /// (offsets from `objdump -d` and `readelf --debug-dump=frames` of these files) still hold
    /// for what the toolchain builds.
    #[test]
    #[ignore = "rebuilds the checked-in unwind fixtures: needs gcc, objcopy and go (cargo xtask test runs it)"]
    fn checked_in_fixtures_are_what_their_sources_build() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = Path::new(FIXTURES).join("build.sh");
        let out = Command::new("sh")
            .arg(&script)
            .arg(dir.path())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed (it needs gcc, objcopy and go; `cargo xtask test` installs golang-go):\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let differ: Vec<&str> = FIXTURE_FILES
            .iter()
            .copied()
            .filter(|name| {
                let rebuilt = std::fs::read(dir.path().join(name))
                    .unwrap_or_else(|e| panic!("build.sh wrote no {name}: {e}"));
                rebuilt != fixture(name)
            })
            .collect();
        assert!(
            differ.is_empty(),
            "rebuilt {differ:?} differ from the checked-in files in {FIXTURES}: the sources \
             changed, or the toolchain is not the one PROVENANCE.md names. Rebuild them with \
             `sh build.sh`, check the offsets the row tests expect against `objdump -d` and \
             `readelf --debug-dump=frames`, and update PROVENANCE.md"
        );
        let mut written: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list the rebuilt files")
            .map(|e| {
                e.expect("a rebuilt file")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        written.sort();
        let mut listed: Vec<&str> = FIXTURE_FILES.to_vec();
        listed.sort();
        assert_eq!(written, listed, "build.sh writes exactly the listed files");
    }

    /// Address of a symbol in `.symtab` or `.dynsym`.
    fn symbol(elf: &[u8], name: &str) -> u64 {
        symbol_and_size(elf, name).0
    }

    /// Address and size of a symbol in `.symtab` or `.dynsym`.
    fn symbol_and_size(elf: &[u8], name: &str) -> (u64, u64) {
        let file = ElfFile64::<ElfEndian>::parse(elf).expect("parse ELF");
        let symbol = file
            .symbols()
            .chain(file.dynamic_symbols())
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("no symbol {name}"));
        (symbol.address(), symbol.size())
    }

    fn section(elf: &[u8], name: &str) -> (u64, u64) {
        let file = ElfFile64::<ElfEndian>::parse(elf).expect("parse ELF");
        let section = file
            .section_by_name(name)
            .unwrap_or_else(|| panic!("no section {name}"));
        (section.address(), section.size())
    }

    fn file_range(elf: &[u8], name: &str) -> std::ops::Range<usize> {
        let file = ElfFile64::<ElfEndian>::parse(elf).expect("parse ELF");
        let (offset, size) = file
            .section_by_name(name)
            .and_then(|s| s.file_range())
            .unwrap_or_else(|| panic!("no section {name}"));
        offset as usize..(offset + size) as usize
    }

    /// The rows starting in `[start, end]` (end included, to see the end marker), with their
    /// addresses as offsets from `start`.
    fn rows_in(table: &UnwindTable, start: u64, end: u64) -> Vec<Row> {
        table
            .rows
            .iter()
            .map(|r| (table.base + u64::from(r.pc), r))
            .filter(|&(address, _)| (start..=end).contains(&address))
            .map(|(address, r)| {
                (
                    address - start,
                    r.cfa_kind,
                    r.cfa_offset,
                    r.rbp_kind,
                    r.rbp_offset,
                )
            })
            .collect()
    }

    /// The rule that applies at an address, as the eBPF side finds it.
    fn rule_at(table: &UnwindTable, address: u64) -> (u8, i32, u8, i16) {
        let pc = u32::try_from(address - table.base).expect("address in table");
        let r = find_row(&table.rows, pc).expect("a row covers the address");
        (r.cfa_kind, r.cfa_offset, r.rbp_kind, r.rbp_offset)
    }

    fn assert_sorted_and_merged(table: &UnwindTable) {
        for pair in table.rows.windows(2) {
            assert!(pair[0].pc < pair[1].pc, "unsorted: {pair:?}");
            assert!(!same_rule(&pair[0], &pair[1]), "unmerged: {pair:?}");
        }
    }

    #[test]
    fn frame_pointer_and_stack_frame_functions_get_their_exact_rows() {
        let elf = c_exe();
        let table = build_rows(&elf).expect("build rows");
        assert_sorted_and_merged(&table);

        // gcc 12.2 (Debian 12), `objdump -d` and `readelf --debug-dump=frames`:
        //   0  push %rbp              DW_CFA_def_cfa_offset 16; DW_CFA_offset rbp at cfa-16
        //   1  lea 0x1(%rdi),%rax     (scheduled between push and mov)
        //   5  mov %rsp,%rbp
        //   8  sub $0x20,%rsp         DW_CFA_def_cfa_register rbp (at 8)
        //  ..
        //  35  leave
        //  36  ret                    DW_CFA_def_cfa rsp, 8 (at 0x36); FDE ends at 0x37
        let fp = symbol(&elf, "fp_func");
        assert_eq!(
            rows_in(&table, fp, fp + 0x37),
            vec![
                (0, cfa::RSP, 8, rbp::UNCHANGED, 0),
                (1, cfa::RSP, 16, rbp::AT_CFA_OFFSET, -16),
                (8, cfa::RBP, 16, rbp::AT_CFA_OFFSET, -16),
                (0x36, cfa::RSP, 8, rbp::AT_CFA_OFFSET, -16),
                // The next FDE starts at the 16-byte aligned nofp_func: a gap of padding.
                (0x37, cfa::NO_INFO, 0, rbp::UNCHANGED, 0),
            ]
        );
        assert_eq!(
            rule_at(&table, fp + 0x20),
            (cfa::RBP, 16, rbp::AT_CFA_OFFSET, -16)
        );
        assert_eq!(rule_at(&table, fp + 0x3f).0, cfa::NO_INFO);

        //   0  sub $0x148,%rsp        DW_CFA_def_cfa_offset 336 (at 7)
        //  ..
        //  84  add $0x148,%rsp        DW_CFA_def_cfa_offset 8 (at 0x85)
        //  85  ret                    FDE ends at 0x86
        let nofp = symbol(&elf, "nofp_func");
        assert_eq!(
            rows_in(&table, nofp, nofp + 0x86),
            vec![
                (0, cfa::RSP, 8, rbp::UNCHANGED, 0),
                (7, cfa::RSP, 0x148 + 8, rbp::UNCHANGED, 0),
                (0x85, cfa::RSP, 8, rbp::UNCHANGED, 0),
                (0x86, cfa::NO_INFO, 0, rbp::UNCHANGED, 0),
            ]
        );

        // `_start` (crt1.o) marks the outermost frame with DW_CFA_undefined rip.
        let start = symbol(&elf, "_start");
        assert_eq!(rule_at(&table, start + 4).0, cfa::END_OF_STACK);
        // The first row sits at the table's base.
        assert_eq!(find_row(&table.rows, 0).map(|r| r.pc), Some(0));
        assert!(table.base > 0);
    }

    #[test]
    fn plt_rows_use_the_plt_expression() {
        // Default link (lazy binding on Debian) and -z now both keep the lazy `.plt` with
        // binutils' lit11 expression; the IBT layout (`endbr64` first) moves the threshold to
        // lit9 and adds `.plt.sec`.
        for (link, threshold) in [("c-exe", 11), ("c-exe-znow", 11), ("c-exe-ibtplt", 9)] {
            let elf = fixture(link);
            let table = build_rows(&elf).unwrap_or_else(|e| panic!("{link:?}: {e}"));
            assert_sorted_and_merged(&table);
            let (plt, size) = section(&elf, ".plt");
            assert_eq!(size % 16, 0);
            // PLT0: `push GOT+8` (6 bytes) then `jmp *GOT+16`; the entries after it are covered
            // by the expression.
            assert_eq!(
                rows_in(&table, plt, plt + 15),
                vec![
                    (0, cfa::RSP, 16, rbp::UNCHANGED, 0),
                    (6, cfa::RSP, 24, rbp::UNCHANGED, 0),
                ],
                "{link:?}"
            );
            assert_eq!(
                rule_at(&table, plt + 16),
                (cfa::PLT, threshold, rbp::UNCHANGED, 0),
                "{link:?}"
            );
            assert_eq!(
                rule_at(&table, plt + size - 1),
                (cfa::PLT, threshold, rbp::UNCHANGED, 0),
                "{link:?}"
            );
        }
    }

    #[test]
    fn system_libc_signal_trampoline_and_common_functions() {
        let elf = system_libc();
        let started = Instant::now();
        let table = build_rows(&elf).expect("build libc rows");
        let took = started.elapsed();
        eprintln!("libc: {} rows in {took:?}", table.rows.len());
        assert!(table.rows.len() > 1000, "{} rows", table.rows.len());
        assert_sorted_and_merged(&table);
        // The time is printed, not asserted: a wall-clock limit here fails whenever other
        // work shares the CPUs. Timing the table build belongs to the bench.

        // libc.so.6 is stripped of `.symtab`: find `__restore_rt` by its code,
        // `mov $15 (rt_sigreturn), %rax; syscall`.
        let (text, text_size) = section(&elf, ".text");
        let range = file_range(&elf, ".text");
        let code = &elf[range];
        let pattern = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
        let hits: Vec<usize> = code
            .windows(pattern.len())
            .enumerate()
            .filter(|(_, w)| *w == pattern)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(hits.len(), 1, "__restore_rt candidates: {hits:?}");
        let restore_rt = text + hits[0] as u64;
        assert!(restore_rt < text + text_size);
        let signal = (
            cfa::SIGNAL_FRAME,
            UC_RSP as i32,
            rbp::UNSUPPORTED,
            UC_RBP as i16,
        );
        // The FDE starts one byte early, at the `nop` before the symbol, so that a return
        // address that points at the trampoline minus one (what unwinders look up) hits it.
        assert_eq!(rule_at(&table, restore_rt - 1), signal);
        assert_eq!(rule_at(&table, restore_rt), signal);
        assert_eq!(rule_at(&table, restore_rt + 8), signal);
        let signal_rows = table
            .rows
            .iter()
            .filter(|r| r.cfa_kind == cfa::SIGNAL_FRAME)
            .count();
        assert_eq!(signal_rows, 1);

        // clock_nanosleep opens with the call's CFA, keeps a frame, and its rule ends with it:
        // after it comes padding (no info) or the next function's entry. In glibc 2.36
        // (Debian 2.36-9+deb12u*), 134 bytes, FDE pc=0xcf4e0..0xcf566:
        //   DW_CFA_advance_loc: 52; DW_CFA_def_cfa_offset: 48
        //   DW_CFA_advance_loc1: 69; DW_CFA_def_cfa_offset: 8
        let (sleep, size) = symbol_and_size(&elf, "clock_nanosleep");
        let rows = rows_in(&table, sleep, sleep + size - 1);
        assert_eq!(rows.first(), Some(&(0, cfa::RSP, 8, rbp::UNCHANGED, 0)));
        assert!(
            rows.iter().any(|r| r.1 == cfa::RSP && r.2 > 8),
            "clock_nanosleep keeps a frame: {rows:?}"
        );
        let after = rule_at(&table, sleep + size);
        assert!(
            after.0 == cfa::NO_INFO || after == (cfa::RSP, 8, rbp::UNCHANGED, 0),
            "after clock_nanosleep ({size} bytes): {after:?}; its rows {rows:?}"
        );

        // `.plt` and the outermost frames of threads (clone3, `start_thread` callers).
        let (plt, _) = section(&elf, ".plt");
        assert_eq!(rule_at(&table, plt + 16).0, cfa::PLT);
        assert!(table.rows.iter().any(|r| r.cfa_kind == cfa::END_OF_STACK));
        let kinds = |kind| table.rows.iter().filter(|r| r.cfa_kind == kind).count();
        eprintln!(
            "libc rows: rsp {} rbp {} plt {} signal {} end {} unsupported {} no-info {}",
            kinds(cfa::RSP),
            kinds(cfa::RBP),
            kinds(cfa::PLT),
            kinds(cfa::SIGNAL_FRAME),
            kinds(cfa::END_OF_STACK),
            kinds(cfa::UNSUPPORTED),
            kinds(cfa::NO_INFO),
        );
    }

    #[test]
    fn the_parent_inside_clones_syscall_keeps_its_frame() {
        let elf = system_libc();
        let table = build_rows(&elf).expect("build libc rows");
        let (text, _) = section(&elf, ".text");
        let code = &elf[file_range(&elf, ".text")];
        let clone = symbol(&elf, "clone");
        let at = usize::try_from(clone - text).expect("clone in .text");
        let clone_syscall = code[at..at + 0x60]
            .windows(2)
            .position(|w| w == [0x0f, 0x05])
            .expect("clone's syscall") as u64
            + clone;
        // clone3 (glibc 2.34 on) is not exported: found by `mov $435 (clone3), %eax; syscall`.
        let pattern = [0xb8, 0xb3, 0x01, 0x00, 0x00, 0x0f, 0x05];
        let clone3_syscall = code
            .windows(pattern.len())
            .position(|w| w == pattern)
            .map(|at| at as u64 + text + 5);
        if clone3_syscall.is_none() {
            eprintln!("no clone3 in this libc (glibc before 2.34): clone alone checked");
        }
        for syscall in std::iter::once(clone_syscall).chain(clone3_syscall) {
            // Its FDE ends before the `syscall`; the parent's saved rip is the byte after it.
            assert_eq!(
                rule_at(&table, syscall + 2),
                (cfa::RSP, 8, rbp::UNCHANGED, 0),
                "{syscall:#x}"
            );
            // The child's code after it is still nobody's.
            assert_eq!(rule_at(&table, syscall + 3).0, cfa::NO_INFO);
        }
    }

    #[test]
    fn files_without_section_headers_use_pt_gnu_eh_frame() {
        let mut elf = system_libc();
        let with_sections = build_rows(&elf).expect("build libc rows");
        // What `sstrip` leaves: e_shoff, e_shnum and e_shstrndx zeroed (ELF64 header offsets
        // 0x28, 0x3c, 0x3e).
        elf[0x28..0x30].fill(0);
        elf[0x3c..0x40].fill(0);
        let file = ElfFile64::<ElfEndian>::parse(&*elf).expect("parse stripped ELF");
        assert_eq!(file.sections().count(), 0);
        let without = build_rows(&elf).expect("build rows from PT_GNU_EH_FRAME");
        assert_eq!(without, with_sections);
    }

    /// Every row kind from hand-written CFI (`tests/fixtures/unwind/cfi.s`: gas turns the
    /// directives into the CFA instructions, the labels mark where rows start, each named
    /// after the rule that starts there), checked a group of rules at a time.
    #[test]
    fn hand_written_cfi_rules() {
        let elf = fixture("cfi");
        let table = build_rows(&elf).expect("build rows");
        assert_sorted_and_merged(&table);
        assert_eq!(
            rule_at(&table, symbol(&elf, "outermost")),
            (cfa::END_OF_STACK, 0, rbp::UNCHANGED, 0)
        );
        assert_rules_the_unwinder_reads(&elf, &table);
        assert_rules_it_cannot_follow(&elf, &table);
        assert_adjacent_functions_share_a_row(&elf, &table);
    }

    /// `odd`'s rows the unwinder can follow: CFA on rsp, return address at CFA - 8.
    fn assert_rules_the_unwinder_reads(elf: &[u8], table: &UnwindTable) {
        assert_eq!(
            rule_at(table, symbol(elf, "odd")),
            (cfa::RSP, 8, rbp::UNCHANGED, 0)
        );
        assert_eq!(
            rule_at(table, symbol(elf, "odd") + 2),
            (cfa::RSP, 16, rbp::UNCHANGED, 0)
        );
        assert_eq!(
            rule_at(table, symbol(elf, "odd_back") + 1),
            (cfa::RSP, 16, rbp::UNCHANGED, 0)
        );
    }

    /// `odd`'s rows with a CFA or rbp rule outside what the table encodes.
    fn assert_rules_it_cannot_follow(elf: &[u8], table: &UnwindTable) {
        let unsupported = (cfa::UNSUPPORTED, 0, rbp::UNCHANGED, 0);
        // CFA on r12: not one the unwinder reads.
        assert_eq!(rule_at(table, symbol(elf, "odd_r12") + 3), unsupported);
        // rbp saved in another register.
        assert_eq!(
            rule_at(table, symbol(elf, "odd_rbp_in_reg") + 3),
            (cfa::RSP, 16, rbp::UNSUPPORTED, 0)
        );
        // rbp offset outside i16.
        assert_eq!(
            rule_at(table, symbol(elf, "odd_rbp_far") + 1),
            (cfa::RSP, 16, rbp::UNSUPPORTED, 0)
        );
        // CFA offset outside i32.
        assert_eq!(rule_at(table, symbol(elf, "odd_huge_cfa") + 1), unsupported);
        // Return address somewhere other than CFA - 8.
        assert_eq!(rule_at(table, symbol(elf, "odd_ra") + 1), unsupported);
    }

    /// The end of `odd` is the start of `adjacent`: no NO_INFO between them, and the two
    /// equal rules merge into one row. After `adjacent`, padding up to the next 32 bytes:
    /// NO_INFO.
    fn assert_adjacent_functions_share_a_row(elf: &[u8], table: &UnwindTable) {
        let odd_end = symbol(elf, "odd_end");
        let adjacent = symbol(elf, "adjacent");
        assert_eq!(adjacent, odd_end + 1);
        assert_eq!(
            rows_in(table, odd_end, adjacent),
            vec![(0, cfa::RSP, 8, rbp::UNCHANGED, 0)]
        );
        let adjacent_end = symbol(elf, "adjacent_end");
        assert_eq!(rule_at(table, adjacent_end).0, cfa::NO_INFO);
    }

    #[test]
    fn c_functions_described_only_in_debug_frame_get_the_same_rows() {
        let with_eh_frame = c_exe();
        // `-g` without unwind tables: gcc wrote the CFI of fp.c and nofp.c to `.debug_frame`
        // instead; `-gz` had the linker compress it (SHF_COMPRESSED, zlib). main.c and the
        // crt files keep their `.eh_frame`.
        let elf = fixture("c-debug-frame");
        let file = ElfFile64::<ElfEndian>::parse(&*elf).expect("parse ELF");
        let debug_frame = file.section_by_name(".debug_frame").expect(".debug_frame");
        assert!(matches!(debug_frame.flags(), SectionFlags::Elf { sh_flags }
            if sh_flags & u64::from(elf::SHF_COMPRESSED) != 0));
        let eh_frame = locate_eh_frame(&file, &elf)
            .expect("locate .eh_frame")
            .expect(".eh_frame");
        let eh_frame_only = build_from_sections(
            Some(&eh_frame),
            None,
            &ExecRanges::of(&file, &elf),
            Vec::new,
        )
        .expect("build rows");
        let expected = build_rows(&with_eh_frame).expect("build rows");
        let table = build_rows(&elf).expect("build rows");
        assert_sorted_and_merged(&table);
        for (name, len) in [("fp_func", 0x37), ("nofp_func", 0x86), ("main", 0x10)] {
            let (a, b) = (symbol(&with_eh_frame, name), symbol(&elf, name));
            let rows = rows_in(&table, b, b + len);
            assert!(rows.len() > 1, "{name}: {rows:?}");
            if name != "main" {
                assert_eq!(rule_at(&eh_frame_only, b).0, cfa::NO_INFO, "{name}");
            }
            assert_eq!(rows, rows_in(&expected, a, a + len), "{name}");
        }
    }

    // ---- Go: `.debug_frame` only ----

    #[test]
    fn go_assembly_that_clobbers_bp_gets_rsp_rows() {
        let elf = go_fixture();
        let file = ElfFile64::<ElfEndian>::parse(elf).expect("parse ELF");
        assert!(file.section_by_name(".eh_frame").is_none());
        let debug_frame = file
            .section_by_name(".debug_frame")
            .expect("Go writes .debug_frame");
        // Go 1.12+ compresses it (`readelf -S`: flag C).
        assert!(
            matches!(debug_frame.flags(), SectionFlags::Elf { sh_flags }
                if sh_flags & u64::from(elf::SHF_COMPRESSED) != 0),
            "{:?}",
            debug_frame.flags()
        );
        let table = build_rows(elf).expect("build rows");
        assert_sorted_and_merged(&table);

        // Go 1.19, `objdump -d` and `readelf --debug-dump=frames`:
        //   0  sub $0x20,%rsp          DW_CFA_def_cfa_offset_sf: 40 (at 4)
        //   4  mov %rbp,0x18(%rsp)     (the assembler's prologue: the frame is $24 + BP)
        //   9  lea 0x18(%rsp),%rbp
        //   e  mov 0x28(%rsp),%rbp     BP = n: frame pointers end here
        //  ..
        //  28  add $0x20,%rsp
        //  2c  ret                     DW_CFA_def_cfa_offset_sf: 8 (at 0x2c); FDE ends at 0x2d
        // Go's CIE has no rule for rbp, so none of its rows restore it.
        let spin = symbol(elf, "main.spin.abi0");
        assert_eq!(
            rows_in(&table, spin, spin + 0x2d),
            vec![
                (0, cfa::RSP, 8, rbp::UNCHANGED, 0),
                (4, cfa::RSP, 40, rbp::UNCHANGED, 0),
                (0x2c, cfa::RSP, 8, rbp::UNCHANGED, 0),
                (0x2d, cfa::NO_INFO, 0, rbp::UNCHANGED, 0),
            ]
        );
        // Compiled Go: a frame after the stack check.
        let hot = symbol(elf, "main.hot");
        assert_eq!(rule_at(&table, hot), (cfa::RSP, 8, rbp::UNCHANGED, 0));
        assert!(
            rows_in(&table, hot, hot + 0x40)
                .iter()
                .any(|r| r.1 == cfa::RSP && r.2 > 8)
        );
    }

    #[test]
    fn go_stacks_end_at_their_roots_and_its_signal_return_is_a_signal_frame() {
        let elf = go_fixture();
        let table = build_rows(elf).expect("build rows");
        for name in [
            "runtime.goexit.abi0",
            "runtime.mstart.abi0",
            "runtime.rt0_go.abi0",
            "runtime.mcall",
            "runtime.systemstack.abi0",
            "runtime.nanotime1.abi0",
        ] {
            let at = symbol(elf, name);
            assert_eq!(
                rule_at(&table, at),
                (cfa::END_OF_STACK, 0, rbp::UNCHANGED, 0),
                "{name}"
            );
            // The return address of a call is looked up one byte before it.
            assert_eq!(rule_at(&table, at + 1).0, cfa::END_OF_STACK, "{name}");
        }
        // Their neighbours are not.
        assert_eq!(rule_at(&table, symbol(elf, "runtime.goexit1")).0, cfa::RSP);
        // `runtime.sigreturn`: rsp points at the interrupted context while it runs.
        let sigreturn = symbol(elf, "runtime.sigreturn.abi0");
        // `mov $15, %rax` (7 bytes), `syscall`: the kernel sees the user ip after it, at 9.
        for at in [sigreturn, sigreturn + 7, sigreturn + 9] {
            assert_eq!(
                rule_at(&table, at),
                (cfa::SIGNAL_FRAME, 160, rbp::UNSUPPORTED, 120)
            );
        }
        let kinds = |kind| table.rows.iter().filter(|r| r.cfa_kind == kind).count();
        assert_eq!(kinds(cfa::RBP), 0);
        assert_eq!(kinds(cfa::UNSUPPORTED), 0);
        eprintln!(
            "gohot: {} rows, {} stack ends",
            table.rows.len(),
            kinds(cfa::END_OF_STACK)
        );
    }

    /// `c-debug-frame` (SHF_COMPRESSED, zlib) rewritten by `objcopy` with each other
    /// compression (build.sh): the same rows.
    #[test]
    fn every_debug_frame_compression_gives_the_same_rows() {
        let elf = fixture("c-debug-frame");
        let table = build_rows(&elf).expect("build rows");
        assert!(table.rows.len() > 1);
        for (name, section, compressed) in [
            ("c-debug-frame-plain", ".debug_frame", false),
            // GNU-style: the section is renamed and its bytes start with "ZLIB".
            ("c-debug-frame-zlib-gnu", ".zdebug_frame", false),
            ("c-debug-frame-zstd", ".debug_frame", true),
        ] {
            let copy = fixture(name);
            let file = ElfFile64::<ElfEndian>::parse(&*copy).expect("parse ELF");
            let flags = file
                .section_by_name_bytes(section.as_bytes())
                .unwrap_or_else(|| panic!("{name}: no {section}"))
                .flags();
            assert!(
                matches!(flags, SectionFlags::Elf { sh_flags }
                    if (sh_flags & u64::from(elf::SHF_COMPRESSED) != 0) == compressed),
                "{name}: {flags:?}"
            );
            assert_eq!(build_rows(&copy).expect(name), table, "{name}");
        }
    }

    #[test]
    fn a_compressed_debug_frame_that_claims_too_much_is_refused() {
        let mut elf = go_fixture().to_vec();
        // `Elf64_Chdr` opens the section: ch_type, ch_reserved, then ch_size.
        let range = file_range(&elf, ".debug_frame");
        let size = range.start + 8..range.start + 16;
        elf[size.clone()].copy_from_slice(&(MAX_DEBUG_FRAME + 1).to_le_bytes());
        assert!(matches!(
            build_rows(&elf),
            Err(UnwindError::DebugFrameTooLarge { size, limit })
                if size == MAX_DEBUG_FRAME + 1 && limit == (range.len() as u64 - 24) * 1032
        ));
        // Within the limits: inflating stops where the stream does, short of the claim.
        elf[size].copy_from_slice(&(range.len() as u64 * 100).to_le_bytes());
        assert!(matches!(build_rows(&elf), Err(UnwindError::Elf(_))));
    }

    #[test]
    fn garbage_debug_frame_sections() {
        // Damaged after inflating: the bytes the parser reads.
        let elf = go_fixture();
        let file = ElfFile64::<ElfEndian>::parse(elf).expect("parse ELF");
        let debug_frame = read_debug_frame(&file)
            .expect("inflate .debug_frame")
            .expect(".debug_frame");
        let exec = ExecRanges::of(&file, elf);
        let build = |data: &[u8]| build_from_sections(None, Some(data), &exec, || go_frames(&file));
        let rounds = 1000;
        let (ok, changed, err) = build_damaged(
            &debug_frame,
            0..debug_frame.len(),
            build,
            (0x9e37_79b9_7f4a_7c15, rounds),
        );
        eprintln!("garbage .debug_frame: {ok} tables ({changed} changed), {err} errors");
        // Both outcomes, each often, as for `.eh_frame` below.
        assert!(
            changed > rounds / 10 && err > rounds / 10,
            "of {rounds} damaged sections: {ok} tables ({changed} unlike the original), {err} errors"
        );
    }

    // ---- Hand-made `.eh_frame` sections, evaluated without an ELF around them ----

    /// `DW_CFA_def_cfa rsp, 8; DW_CFA_offset rip, cfa-8`: what every x86_64 CIE starts with.
    const CIE_START: &[u8] = &[0x0c, 7, 8, 0x80 | 16, 1];
    const DEF_CFA_OFFSET: u8 = 0x0e;
    const DEF_CFA_EXPRESSION: u8 = 0x0f;
    const EXPRESSION: u8 = 0x10;
    const ADVANCE_LOC_1: u8 = 0x41;
    const RESTORE_STATE: u8 = 0x0b;

    /// Builds `.eh_frame` bytes: CIEs with augmentation "zR" and absolute 4-byte addresses.
    #[derive(Default)]
    struct Cfi(Vec<u8>);

    impl Cfi {
        fn entry(&mut self, body: &[u8]) {
            self.0.extend_from_slice(&(body.len() as u32).to_le_bytes());
            self.0.extend_from_slice(body);
        }

        /// Returns the CIE's offset for its FDEs.
        fn cie(&mut self, instructions: &[u8]) -> usize {
            let offset = self.0.len();
            // id 0, version 1, "zR", code alignment 1, data alignment -8, RA column 16,
            // one byte of augmentation data: DW_EH_PE_udata4.
            let mut body = vec![0, 0, 0, 0, 1, b'z', b'R', 0, 1, 0x78, 16, 1, 0x03];
            body.extend_from_slice(instructions);
            self.entry(&body);
            offset
        }

        fn fde(&mut self, cie: usize, start: u32, len: u32, instructions: &[u8]) {
            // The CIE pointer counts back from its own position, just after the length.
            let pointer = (self.0.len() + 4 - cie) as u32;
            let mut body = pointer.to_le_bytes().to_vec();
            body.extend_from_slice(&start.to_le_bytes());
            body.extend_from_slice(&len.to_le_bytes());
            body.push(0); // no augmentation data
            body.extend_from_slice(instructions);
            self.entry(&body);
        }

        fn build(&self) -> Result<UnwindTable, UnwindError> {
            let mut data = self.0.clone();
            data.extend_from_slice(&[0, 0, 0, 0]); // terminator
            build_eh_frame(&data, &ExecRanges::default())
        }
    }

    /// The rows of `.eh_frame` bytes alone, with addresses absolute (`DW_EH_PE_absptr`).
    fn build_eh_frame(data: &[u8], exec: &ExecRanges) -> Result<UnwindTable, UnwindError> {
        let source = Source {
            data,
            bases: BaseAddresses::default().set_eh_frame(0),
        };
        build_from_sections(Some(&source), None, exec, Vec::new)
    }

    fn simple(table: &UnwindTable) -> Vec<Row> {
        table
            .rows
            .iter()
            .map(|r| {
                (
                    table.base + u64::from(r.pc),
                    r.cfa_kind,
                    r.cfa_offset,
                    r.rbp_kind,
                    r.rbp_offset,
                )
            })
            .collect()
    }

    #[test]
    fn later_fdes_win_shared_addresses_and_gaps_get_no_info() {
        let mut cfi = Cfi::default();
        let cie = cfi.cie(CIE_START);
        // Out of section order on purpose: rows are sorted by address.
        cfi.fde(cie, 0x1030, 0x10, &[]);
        cfi.fde(cie, 0x1000, 0x10, &[]);
        // Starts where the previous one ends: its first row replaces that end marker.
        cfi.fde(cie, 0x1010, 0x10, &[DEF_CFA_OFFSET, 16]);
        // Same start as the first one, later in the section: it wins.
        cfi.fde(cie, 0x1030, 0x10, &[DEF_CFA_OFFSET, 32]);
        // Covers nothing.
        cfi.fde(cie, 0x1050, 0, &[DEF_CFA_OFFSET, 48]);
        let table = cfi.build().expect("build");
        assert_eq!(table.base, 0x1000);
        assert_eq!(
            simple(&table),
            vec![
                (0x1000, cfa::RSP, 8, rbp::UNCHANGED, 0),
                (0x1010, cfa::RSP, 16, rbp::UNCHANGED, 0),
                (0x1020, cfa::NO_INFO, 0, rbp::UNCHANGED, 0),
                (0x1030, cfa::RSP, 32, rbp::UNCHANGED, 0),
                (0x1040, cfa::NO_INFO, 0, rbp::UNCHANGED, 0),
            ]
        );
        assert_eq!(find_row(&table.rows, 0).map(|r| r.cfa_offset), Some(8));
        assert_eq!(find_row(&table.rows, 0x1f).map(|r| r.cfa_offset), Some(16));
        assert_eq!(
            find_row(&table.rows, 0x2f).map(|r| r.cfa_kind),
            Some(cfa::NO_INFO)
        );
        assert_eq!(
            find_row(&table.rows, u32::MAX).map(|r| r.cfa_kind),
            Some(cfa::NO_INFO)
        );
        assert_eq!(find_row(&[], 0), None);
    }

    #[test]
    fn expressions_are_recognised_exactly() {
        let plt = |threshold: u8, mask: u8| {
            vec![
                DEF_CFA_EXPRESSION,
                11,
                0x77,
                8, // DW_OP_breg7 8
                0x80,
                0,           // DW_OP_breg16 0
                0x30 + mask, // DW_OP_lit<mask>
                0x1a,        // DW_OP_and
                0x30 + threshold,
                0x2a, // DW_OP_ge
                0x33, // DW_OP_lit3
                0x24, // DW_OP_shl
                0x22, // DW_OP_plus
            ]
        };
        let signal = |rip: u8| {
            vec![
                DEF_CFA_EXPRESSION,
                4,
                0x77,
                0xa0,
                0x01,
                0x06, // breg7 160; deref
                EXPRESSION,
                6,
                3,
                0x77,
                0xf8,
                0x00, // rbp: breg7 120
                EXPRESSION,
                7,
                3,
                0x77,
                0xa0,
                0x01, // rsp: breg7 160
                EXPRESSION,
                16,
                3,
                0x77,
                rip,
                0x01, // rip: breg7 168 (0xa8)
            ]
        };
        let mut cfi = Cfi::default();
        let cie = cfi.cie(CIE_START);
        cfi.fde(cie, 0x1000, 0x10, &plt(11, 15));
        cfi.fde(cie, 0x1010, 0x10, &plt(9, 15));
        cfi.fde(cie, 0x1020, 0x10, &plt(11, 7));
        cfi.fde(cie, 0x1030, 0x10, &signal(0xa8));
        cfi.fde(cie, 0x1040, 0x10, &signal(0xb0));
        // A CFA expression longer than any recognised one.
        let mut long = vec![DEF_CFA_EXPRESSION, 40];
        long.extend([0x96; 40]); // DW_OP_nop
        cfi.fde(cie, 0x1050, 0x10, &long);
        let table = cfi.build().expect("build");
        let at = |address: u64| rule_at(&table, address);
        assert_eq!(at(0x1000), (cfa::PLT, 11, rbp::UNCHANGED, 0));
        assert_eq!(at(0x1010), (cfa::PLT, 9, rbp::UNCHANGED, 0));
        assert_eq!(at(0x1020).0, cfa::UNSUPPORTED);
        assert_eq!(at(0x1030), (cfa::SIGNAL_FRAME, 160, rbp::UNSUPPORTED, 120));
        assert_eq!(at(0x1040).0, cfa::UNSUPPORTED);
        assert_eq!(at(0x1050).0, cfa::UNSUPPORTED);
    }

    #[test]
    fn an_fde_that_does_not_evaluate_costs_only_its_own_range() {
        let mut cfi = Cfi::default();
        let cie = cfi.cie(CIE_START);
        cfi.fde(cie, 0x1000, 0x10, &[DEF_CFA_OFFSET, 16]);
        // restore_state without remember_state.
        cfi.fde(
            cie,
            0x1010,
            0x10,
            &[ADVANCE_LOC_1, DEF_CFA_OFFSET, 24, RESTORE_STATE],
        );
        cfi.fde(cie, 0x1020, 0x10, &[DEF_CFA_OFFSET, 16]);
        let table = cfi.build().expect("build");
        assert_eq!(
            simple(&table),
            vec![
                (0x1000, cfa::RSP, 16, rbp::UNCHANGED, 0),
                (0x1010, cfa::UNSUPPORTED, 0, rbp::UNCHANGED, 0),
                (0x1020, cfa::RSP, 16, rbp::UNCHANGED, 0),
                (0x1030, cfa::NO_INFO, 0, rbp::UNCHANGED, 0),
            ]
        );
    }

    #[test]
    fn the_span_must_fit_a_32_bit_pc() {
        let mut cfi = Cfi::default();
        let cie = cfi.cie(CIE_START);
        cfi.fde(cie, 0, u32::MAX, &[]);
        let table = cfi.build().expect("a span of exactly u32::MAX fits");
        assert_eq!(table.rows.last().map(|r| r.pc), Some(u32::MAX));

        let mut cfi = Cfi::default();
        let cie = cfi.cie(CIE_START);
        cfi.fde(cie, 0x1000, 0x10, &[]);
        cfi.fde(cie, 0xffff_fff0, 0x1010, &[]);
        assert!(matches!(
            cfi.build(),
            Err(UnwindError::SpanTooLarge {
                base: 0x1000,
                span: 0x1_0000_0000
            })
        ));
    }

    #[test]
    fn fdes_outside_executable_segments_are_dropped() {
        let mut cfi = Cfi::default();
        let cie = cfi.cie(CIE_START);
        // What a linker leaves for a discarded section: an FDE relocated to 0.
        cfi.fde(cie, 0, 0x10, &[]);
        cfi.fde(cie, 0x40_1000, 0x10, &[]);
        let mut data = cfi.0.clone();
        data.extend_from_slice(&[0, 0, 0, 0]);
        let exec = ExecRanges::of_ranges(vec![(0x40_1000, 0x40_2000)]);
        let table = build_eh_frame(&data, &exec).expect("build");
        assert_eq!(table.base, 0x40_1000);
        assert_eq!(table.rows.len(), 2);
        assert!(exec.contains(0x40_1fff));
        assert!(!exec.contains(0x40_2000));
        assert!(!exec.contains(0x40_0fff));
    }

    #[test]
    fn a_huge_cie_shared_by_many_fdes_runs_out_of_budget() {
        let mut cfi = Cfi::default();
        // 64 KiB of DW_CFA_nop that every FDE re-evaluates.
        let mut instructions = CIE_START.to_vec();
        instructions.resize(64 << 10, 0);
        let cie = cfi.cie(&instructions);
        for i in 0..200 {
            cfi.fde(cie, 0x1000 + 0x10 * i, 0x10, &[]);
        }
        let started = Instant::now();
        assert!(matches!(cfi.build(), Err(UnwindError::TooMuchWork { .. })));
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_huge_cie_header_is_parsed_once() {
        let mut cfi = Cfi::default();
        // Augmentation "zSSS…SR": valid, 64 KiB long, to be read by every FDE's parse.
        let mut body = vec![0, 0, 0, 0, 1, b'z'];
        body.resize(body.len() + (64 << 10), b'S');
        body.extend_from_slice(&[b'R', 0, 1, 0x78, 16, 1, 0x03]);
        body.extend_from_slice(CIE_START);
        cfi.entry(&body);
        for i in 0..20_000 {
            cfi.fde(0, 0x1000 + 0x10 * i, 0x10, &[]);
        }
        let started = Instant::now();
        // The evaluation budget counts the CIE's size for every FDE, so it runs out too.
        assert!(matches!(cfi.build(), Err(UnwindError::TooMuchWork { .. })));
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn rows_are_capped() {
        let mut cfi = Cfi::default();
        let cie = cfi.cie(CIE_START);
        // One row per byte of code, a few more than allowed.
        let rows = MAX_ROWS + 4;
        cfi.fde(cie, 0x1000, rows as u32, &vec![ADVANCE_LOC_1; rows]);
        assert!(matches!(cfi.build(), Err(UnwindError::TooManyRows)));
    }

    /// Builds `.debug_frame` bytes as Go's linker writes them: version 3 CIEs without
    /// augmentation, data alignment -4, 8-byte addresses and lengths in the FDEs, and the CIE
    /// pointer an offset from the start of the section.
    #[derive(Default)]
    struct DebugCfi(Vec<u8>);

    impl DebugCfi {
        fn entry(&mut self, body: &[u8]) {
            self.0.extend_from_slice(&(body.len() as u32).to_le_bytes());
            self.0.extend_from_slice(body);
        }

        /// `DW_CFA_def_cfa rsp, 8; DW_CFA_offset_extended rip, cfa-8`, Go's CIE; returns its
        /// offset.
        fn cie(&mut self) -> usize {
            let offset = self.0.len();
            // CIE id 0xffffffff, version 3, "", code alignment 1, data alignment -4 (0x7c),
            // RA column 16.
            let mut body = vec![0xff, 0xff, 0xff, 0xff, 3, 0, 1, 0x7c, 16];
            body.extend_from_slice(&[0x0c, 7, 8, 0x05, 16, 2]);
            self.entry(&body);
            offset
        }

        fn fde(&mut self, cie: usize, start: u64, len: u64, instructions: &[u8]) {
            let mut body = (cie as u32).to_le_bytes().to_vec();
            body.extend_from_slice(&start.to_le_bytes());
            body.extend_from_slice(&len.to_le_bytes());
            body.extend_from_slice(instructions);
            self.entry(&body);
        }
    }

    /// `DW_CFA_def_cfa_offset_sf` with Go's data alignment: CFA = rsp + `offset`.
    fn go_cfa_offset(offset: i8) -> [u8; 2] {
        [0x13, ((offset / -4) as u8) & 0x7f]
    }

    #[test]
    fn debug_frame_fills_in_where_eh_frame_has_no_fde() {
        let mut eh = Cfi::default();
        let cie = eh.cie(CIE_START);
        eh.fde(cie, 0x1000, 0x10, &[DEF_CFA_OFFSET, 16]);
        let mut eh = eh.0;
        eh.extend_from_slice(&[0, 0, 0, 0]);
        let mut debug = DebugCfi::default();
        let cie = debug.cie();
        // What .eh_frame covers, whole or in part, is .eh_frame's.
        debug.fde(cie, 0x1000, 0x10, &go_cfa_offset(48));
        debug.fde(cie, 0x1008, 0x10, &go_cfa_offset(48));
        // A Go function: 24 bytes of frame after its first 4 bytes.
        let mut body = vec![0x44]; // DW_CFA_advance_loc 4
        body.extend_from_slice(&go_cfa_offset(32));
        debug.fde(cie, 0x1020, 0x10, &body);
        // A stack end.
        debug.fde(cie, 0x1030, 0x8, &go_cfa_offset(16));
        let source = Source {
            data: &eh,
            bases: BaseAddresses::default().set_eh_frame(0),
        };
        let table = build_from_sections(
            Some(&source),
            Some(&debug.0),
            &ExecRanges::default(),
            || {
                vec![
                    (0x5000, SIGNAL_FRAME),
                    (0x1030, rule(cfa::END_OF_STACK, 0, (rbp::UNCHANGED, 0))),
                ]
            },
        )
        .expect("build");
        assert_eq!(
            simple(&table),
            vec![
                (0x1000, cfa::RSP, 16, rbp::UNCHANGED, 0),
                (0x1010, cfa::NO_INFO, 0, rbp::UNCHANGED, 0),
                (0x1020, cfa::RSP, 8, rbp::UNCHANGED, 0),
                (0x1024, cfa::RSP, 32, rbp::UNCHANGED, 0),
                (0x1030, cfa::END_OF_STACK, 0, rbp::UNCHANGED, 0),
                (0x1038, cfa::NO_INFO, 0, rbp::UNCHANGED, 0),
            ]
        );

        // Alone, `.debug_frame` gives every FDE; fixed rows are asked for only then.
        let table = build_from_sections(None, Some(&debug.0), &ExecRanges::default(), Vec::new)
            .expect("build");
        assert_eq!(rule_at(&table, 0x1000), (cfa::RSP, 48, rbp::UNCHANGED, 0));
        assert_eq!(rule_at(&table, 0x1030), (cfa::RSP, 16, rbp::UNCHANGED, 0));
        let table = build_from_sections(Some(&source), None, &ExecRanges::default(), || {
            panic!("no .debug_frame FDE in use: no need for fixed rows")
        })
        .expect("build");
        assert_eq!(table.rows.len(), 2);
    }

    // ---- Malformed input: an error or a table, never a panic ----

    /// xorshift64*: deterministic bytes for the tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn bytes(&mut self, len: usize) -> Vec<u8> {
            (0..len).map(|_| self.next() as u8).collect()
        }
    }

    /// The libc this test binary runs with (what /proc/self/maps names `libc.so.6`), always
    /// there on a glibc target. The tests that read it find what they check by symbol or by
    /// code, and check what any glibc of the last years has (glibc 2.36's offsets are in
    /// the comments as examples only).
    fn system_libc() -> Vec<u8> {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
        let path = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| Path::new(p).file_name().is_some_and(|n| n == "libc.so.6"))
            .unwrap_or_else(|| panic!("this test binary maps no libc.so.6:\n{maps}"));
        std::fs::read(path).unwrap_or_else(|e| panic!("read {path}: {e}"))
    }

    fn elf_error(input: &[u8], what: &str) {
        match build_rows(input) {
            Err(UnwindError::Elf(_)) => {}
            other => panic!("{what}: expected an ELF error, got {other:?}"),
        }
    }

    #[test]
    fn empty_and_random_input() {
        elf_error(&[], "empty input");
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for len in [1, 4, 16, 63, 64, 65, 200, 4096, 65536] {
            elf_error(&rng.bytes(len), &format!("{len} random bytes"));
            // With a valid ELF64 little-endian x86_64 identification in front: the rest of
            // the header is random, and its sizes are wrong.
            let mut elf = rng.bytes(len.max(64));
            elf[..7].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1]);
            elf[18..20].copy_from_slice(&elf::EM_X86_64.to_le_bytes());
            elf_error(
                &elf,
                &format!("an ELF identification and {len} random bytes"),
            );
        }
    }

    /// Where cuts of `elf` change the outcome: the end of the program headers, the start of
    /// `.eh_frame`, and the end of the file bytes of the segment `.eh_frame` (and
    /// `.eh_frame_hdr`) lie in.
    fn cut_points(elf: &[u8]) -> (usize, std::ops::Range<usize>, usize) {
        let file = ElfFile64::<ElfEndian>::parse(elf).expect("parse the ELF file");
        let endian = file.endian();
        let header = file.elf_header();
        let headers_end = header.e_phoff(endian) as usize
            + usize::from(header.e_phnum(endian)) * usize::from(header.e_phentsize(endian));
        let eh_frame = file_range(elf, ".eh_frame");
        let eh_frame_hdr = file_range(elf, ".eh_frame_hdr");
        let segment_end = file
            .elf_program_headers()
            .iter()
            .filter(|p| p.p_type(endian) == elf::PT_LOAD)
            .map(|p| {
                let (offset, size) = p.file_range(endian);
                offset as usize..(offset + size) as usize
            })
            .find(|r| r.contains(&eh_frame.start))
            .expect("a segment holds .eh_frame")
            .end
            .max(eh_frame_hdr.end);
        assert!(headers_end < eh_frame_hdr.start && segment_end < elf.len());
        (headers_end, eh_frame, segment_end)
    }

    #[test]
    fn truncated_input() {
        let libc = system_libc();
        let whole = build_rows(&libc).expect("build libc rows");
        let (headers_end, eh_frame, segment_end) = cut_points(&libc);
        for len in [
            0,
            4,
            16,
            63,
            64,
            100,
            headers_end - 1,
            headers_end,
            eh_frame.start + 1,
            (eh_frame.start + eh_frame.end) / 2,
            segment_end - 1,
            segment_end,
            libc.len() - 1,
        ] {
            // The section headers sit at the end of the file: every cut loses them.
            elf_error(&libc[..len], &format!("libc cut to {len} bytes"));
            // What `sstrip` leaves (as in files_without_section_headers_use_pt_gnu_eh_frame):
            // `.eh_frame` is found through PT_GNU_EH_FRAME and its segment.
            let mut stripped = libc[..len].to_vec();
            if let Some(header) = stripped.get_mut(..0x40) {
                header[0x28..0x30].fill(0);
                header[0x3c..0x40].fill(0);
            }
            let what = format!("libc without section headers cut to {len} bytes");
            match build_rows(&stripped) {
                Err(UnwindError::Elf(_)) if len < headers_end => {}
                Err(UnwindError::BadEhFrameHdr) if (headers_end..segment_end).contains(&len) => {}
                Ok(table) if len >= segment_end => assert_eq!(table, whole, "{what}"),
                other => panic!(
                    "{what} (program headers end at {headers_end}, the segment at \
                     {segment_end}): got {other:?}"
                ),
            }
        }
    }

    /// Builds rows `rounds` times with `build` from `bytes` with `range` of them (a CFI
    /// section) damaged: every tenth round all of it random bytes, the others a few bytes
    /// flipped (which keeps most of the structure and reaches deeper code). Every table built
    /// must be sorted and merged. Returns the tables built, those unlike the undamaged
    /// bytes', and the errors.
    fn build_damaged(
        bytes: &[u8],
        range: std::ops::Range<usize>,
        build: impl Fn(&[u8]) -> Result<UnwindTable, UnwindError>,
        (seed, rounds): (u64, usize),
    ) -> (usize, usize, usize) {
        let original = build(bytes).expect("build rows");
        let mut rng = Rng(seed);
        let (mut ok, mut changed, mut err) = (0, 0, 0);
        for round in 0..rounds {
            let mut broken = bytes.to_vec();
            if round % 10 == 0 {
                let garbage = rng.bytes(range.len());
                broken[range.clone()].copy_from_slice(&garbage);
            } else {
                for _ in 0..1 + rng.next() % 4 {
                    let at = range.start + (rng.next() as usize) % range.len();
                    broken[at] = rng.next() as u8;
                }
            }
            match build(&broken) {
                Ok(table) => {
                    assert_sorted_and_merged(&table);
                    ok += 1;
                    changed += usize::from(table != original);
                }
                Err(_) => err += 1,
            }
        }
        (ok, changed, err)
    }

    #[test]
    fn garbage_eh_frame_sections() {
        let elf = c_exe();
        let rounds = 3000;
        let range = file_range(&elf, ".eh_frame");
        let (ok, changed, err) =
            build_damaged(&elf, range, build_rows, (0x2545_f491_4f6c_dd1d, rounds));
        eprintln!("garbage .eh_frame: {ok} tables ({changed} changed), {err} errors");
        // Both outcomes, each often: a parser that refused every damaged section (or accepted
        // every one) would pass the loop above, and the sorted-and-merged check would never
        // have run on a table built from a damaged section.
        assert!(
            changed > rounds / 10 && err > rounds / 10,
            "of {rounds} damaged sections: {ok} tables ({changed} unlike the original), {err} errors"
        );
    }
}
