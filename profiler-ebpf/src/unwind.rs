//! User stacks from `.eh_frame`, unwound in the kernel (x86_64).
//!
//! User space turns every executable file the target maps into sorted unwind rows
//! (`profiler_common::unwind`) and publishes the target's mappings in `PROC_MAPPINGS`. Here,
//! starting from the user registers, each frame is: find the mapping of `ip` (binary search),
//! find its row (binary search in the file's rows), compute the CFA, read the return address at
//! CFA − 8 and the caller's rbp if the row says where it was saved. Frames without a row (JIT
//! code, files without `.eh_frame`, rules we cannot express) fall back to frame pointers. The
//! loop runs under `bpf_loop`, so the verifier checks one step, not 127 of them.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{bpf_perf_event_data, pt_regs},
    helpers::{
        bpf_probe_read_kernel,
        generated::{bpf_get_current_task_btf, bpf_loop, bpf_probe_read_user, bpf_task_pt_regs},
    },
    macros::map,
    maps::Array,
};
use profiler_common::{
    MAX_STACK_DEPTH,
    unwind::{
        ExecMapping, MAX_MAPPINGS, ProcMappings, ROWS_PER_CHUNK, RowChunk, UnwindRow, cfa_kind,
        rbp_kind,
    },
};

use crate::maps::{SCRATCH, Scratch};

/// The global row array, in chunks (sized by the loader to what the target needs).
#[map]
pub static UNWIND_ROWS: Array<RowChunk> = Array::with_max_entries(1, 0);

/// The target's executable mappings.
#[map]
pub static PROC_MAPPINGS: Array<ProcMappings> = Array::with_max_entries(1, 0);

/// `ucontext_t` offsets of the registers a signal frame saved (x86_64 `struct sigcontext`
/// inside `uc_mcontext` at offset 40): rbp is greg 10, rsp greg 15, rip greg 16.
const UC_RBP: u64 = 40 + 10 * 8;
const UC_RSP: u64 = 40 + 15 * 8;
const UC_RIP: u64 = 40 + 16 * 8;

/// Steps of a binary search over `MAX_MAPPINGS` (2^9) mappings.
const MAPPING_SEARCH_STEPS: usize = 10;
/// Steps of a binary search over up to 2^24 rows.
const ROW_SEARCH_STEPS: usize = 25;

/// Unwinding state shared with the `bpf_loop` callback (it must live on the BPF stack).
#[repr(C)]
struct Walk {
    ip: u64,
    sp: u64,
    bp: u64,
    /// Frames written so far.
    n: u64,
    /// Which scratch stack receives the frames.
    scratch: u32,
    _pad: u32,
}

/// User registers where user code stopped: the interrupted registers when a sample hit user
/// mode, else those saved at kernel entry.
///
/// # Safety
/// `sample`, when given, must be the perf_event program's context.
#[inline(always)]
pub unsafe fn user_regs(sample: Option<*const bpf_perf_event_data>) -> Option<(u64, u64, u64)> {
    if let Some(ctx) = sample {
        // Plain loads from the context: the verifier rewrites them into reads of the sample's
        // pt_regs (the context the program really gets is `bpf_perf_event_data_kern`, so its
        // address must never be handed to a helper).
        // SAFETY: the caller guarantees `ctx`.
        let (cs, ip, sp, bp) = unsafe {
            (
                (*ctx).regs.cs,
                (*ctx).regs.rip,
                (*ctx).regs.rsp,
                (*ctx).regs.rbp,
            )
        };
        if cs & 3 == 3 {
            return Some((ip, sp, bp));
        }
    }
    // SAFETY: the current task always exists; the helper returns its saved user registers.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) as *const pt_regs };
    // SAFETY: `regs` is a kernel pt_regs; probe reads fault safely.
    unsafe {
        let ip = bpf_probe_read_kernel(&(*regs).rip).ok()?;
        let sp = bpf_probe_read_kernel(&(*regs).rsp).ok()?;
        let bp = bpf_probe_read_kernel(&(*regs).rbp).ok()?;
        Some((ip, sp, bp))
    }
}

/// Unwinds into `SCRATCH[scratch]`; returns the number of frames (0: no user stack).
#[inline(always)]
pub fn unwind(scratch: Scratch, ip: u64, sp: u64, bp: u64) -> u64 {
    if ip == 0 {
        return 0;
    }
    let mut walk = Walk {
        ip,
        sp,
        bp,
        n: 0,
        scratch: scratch as u32,
        _pad: 0,
    };
    // SAFETY: `step` has the callback signature bpf_loop expects; `walk` outlives the call.
    unsafe {
        bpf_loop(
            MAX_STACK_DEPTH as u32,
            step as *mut c_void,
            (&mut walk as *mut Walk).cast(),
            0,
        );
    }
    walk.n
}

/// One frame: record `ip`, then compute the caller's registers. Returns 1 to stop.
///
/// The frame slot is bpf_loop's own `index`, which the verifier treats as any value below the
/// loop count: indexing with a counter kept in `Walk` would make every iteration a distinct
/// state and the callback would never converge within the verifier's budget.
#[inline(never)]
extern "C" fn step(index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the pointer `unwind` passed: a live `Walk` on its stack.
    let walk = unsafe { &mut *(ctx as *mut Walk) };
    let Some(buf) = SCRATCH.get_ptr_mut(walk.scratch) else {
        return 1;
    };
    // SAFETY: a per-CPU scratch stack owned by the running program.
    let buf = unsafe { &mut *buf };
    let Some(slot) = buf.frames.get_mut(index as usize & 127) else {
        return 1;
    };
    *slot = walk.ip;
    walk.n = index + 1;

    // Every frame but the first holds a return address: look up the call instruction.
    let lookup = if index == 0 { walk.ip } else { walk.ip - 1 };
    let row = find_row(lookup);
    let (cfa, rbp_rule) = match row {
        Some(row) => match row.cfa_kind {
            cfa_kind::END_OF_STACK => return 1,
            cfa_kind::RSP => (walk.sp.wrapping_add(row.cfa_offset as i64 as u64), row),
            cfa_kind::RBP => (walk.bp.wrapping_add(row.cfa_offset as i64 as u64), row),
            cfa_kind::PLT => {
                // The stub has pushed its relocation index once rip is past `offset`.
                let extra = if (walk.ip & 15) >= row.cfa_offset as u64 {
                    8
                } else {
                    0
                };
                (walk.sp + 8 + extra, row)
            }
            cfa_kind::SIGNAL_FRAME => return signal_frame(walk),
            _ => return frame_pointer_step(walk),
        },
        None => return frame_pointer_step(walk),
    };
    let Some(ra) = read_user(cfa.wrapping_sub(8)) else {
        return 1;
    };
    if rbp_rule.rbp_kind == rbp_kind::AT_CFA_OFFSET {
        match read_user(cfa.wrapping_add(rbp_rule.rbp_offset as i64 as u64)) {
            Some(bp) => walk.bp = bp,
            None => return 1,
        }
    }
    // The stack grows down: a caller's frame is above its callee's.
    if ra == 0 || cfa <= walk.sp {
        return 1;
    }
    walk.sp = cfa;
    walk.ip = ra;
    0
}

/// Frame-pointer step: [rbp] is the caller's rbp, [rbp + 8] the return address.
#[inline(always)]
fn frame_pointer_step(walk: &mut Walk) -> i64 {
    let bp = walk.bp;
    if bp == 0 || bp & 7 != 0 || bp < walk.sp {
        return 1;
    }
    let (Some(next_bp), Some(ra)) = (read_user(bp), read_user(bp + 8)) else {
        return 1;
    };
    if ra == 0 {
        return 1;
    }
    walk.bp = next_bp;
    walk.sp = bp + 16;
    walk.ip = ra;
    0
}

/// Signal trampoline: the interrupted code's registers are in the `ucontext_t` at rsp.
#[inline(always)]
fn signal_frame(walk: &mut Walk) -> i64 {
    let uc = walk.sp;
    let (Some(ip), Some(sp), Some(bp)) = (
        read_user(uc + UC_RIP),
        read_user(uc + UC_RSP),
        read_user(uc + UC_RBP),
    ) else {
        return 1;
    };
    if ip == 0 {
        return 1;
    }
    walk.ip = ip;
    walk.sp = sp;
    walk.bp = bp;
    0
}

#[inline(always)]
fn read_user(addr: u64) -> Option<u64> {
    let mut v = 0u64;
    // SAFETY: copies 8 bytes from the current task's user memory into `v`; faults return < 0.
    let ret = unsafe { bpf_probe_read_user((&mut v as *mut u64).cast(), 8, addr as *const c_void) };
    (ret == 0).then_some(v)
}

/// A binary search run by `bpf_loop`: the verifier checks one step instead of every path
/// through 25 of them (a plain loop's precise `lo`/`hi` bounds defeat its state pruning and
/// exhaust its 1M-instruction budget).
#[repr(C)]
struct Search {
    lo: u32,
    hi: u32,
    /// What is searched for: a row pc, or a runtime address for mappings.
    target: u64,
    /// First row of the file (row search only).
    first_row: u32,
    _pad: u32,
}

/// The row covering `ip` (a runtime address), if its mapping has rows.
#[inline(always)]
fn find_row(ip: u64) -> Option<UnwindRow> {
    let mapping = find_mapping(ip)?;
    if mapping.row_count == 0 || ip < mapping.bias {
        return None;
    }
    let pc = ip - mapping.bias;
    if pc > u32::MAX as u64 {
        return None;
    }
    // Last row with row.pc <= pc.
    let mut search = Search {
        lo: 0,
        hi: mapping.row_count,
        target: pc,
        first_row: mapping.first_row,
        _pad: 0,
    };
    // SAFETY: `row_step` has bpf_loop's callback signature; `search` outlives the call.
    unsafe {
        bpf_loop(
            ROW_SEARCH_STEPS as u32,
            row_step as *mut c_void,
            (&mut search as *mut Search).cast(),
            0,
        );
    }
    if search.lo == 0 {
        return None;
    }
    row_at(mapping.first_row.wrapping_add(search.lo - 1))
}

#[inline(never)]
extern "C" fn row_step(_index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back `find_row`'s `Search`.
    let s = unsafe { &mut *(ctx as *mut Search) };
    if s.lo >= s.hi {
        return 1;
    }
    let mid = s.lo + (s.hi - s.lo) / 2;
    let Some(row) = row_at(s.first_row.wrapping_add(mid)) else {
        return 1;
    };
    if u64::from(row.pc) <= s.target {
        s.lo = mid + 1;
    } else {
        s.hi = mid;
    }
    0
}

#[inline(always)]
fn row_at(index: u32) -> Option<UnwindRow> {
    let chunk = UNWIND_ROWS.get(index / ROWS_PER_CHUNK as u32)?;
    chunk.rows.get(index as usize % ROWS_PER_CHUNK).copied()
}

#[inline(always)]
fn find_mapping(ip: u64) -> Option<ExecMapping> {
    let maps = PROC_MAPPINGS.get(0)?;
    let count = if (maps.count as usize) < MAX_MAPPINGS {
        maps.count
    } else {
        MAX_MAPPINGS as u32
    };
    // Last mapping with start <= ip.
    let mut search = Search {
        lo: 0,
        hi: count,
        target: ip,
        first_row: 0,
        _pad: 0,
    };
    // SAFETY: `mapping_step` has bpf_loop's callback signature; `search` outlives the call.
    unsafe {
        bpf_loop(
            MAPPING_SEARCH_STEPS as u32,
            mapping_step as *mut c_void,
            (&mut search as *mut Search).cast(),
            0,
        );
    }
    if search.lo == 0 || search.lo > count {
        return None;
    }
    // The mask proves the bound to the verifier on the very register used for the access
    // (LLVM otherwise checks a copy and indexes with the original: "unbounded memory access").
    let index = (search.lo - 1) as usize & (MAX_MAPPINGS - 1);
    let m = maps.entries.get(index)?;
    (ip < m.end).then_some(*m)
}

#[inline(never)]
extern "C" fn mapping_step(_index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back `find_mapping`'s `Search`.
    let s = unsafe { &mut *(ctx as *mut Search) };
    if s.lo >= s.hi {
        return 1;
    }
    let mid = s.lo + (s.hi - s.lo) / 2;
    let Some(maps) = PROC_MAPPINGS.get(0) else {
        return 1;
    };
    let Some(m) = maps.entries.get(mid as usize & (MAX_MAPPINGS - 1)) else {
        return 1;
    };
    if m.start <= s.target {
        s.lo = mid + 1;
    } else {
        s.hi = mid;
    }
    0
}
