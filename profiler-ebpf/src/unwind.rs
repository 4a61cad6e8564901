//! User stacks from `.eh_frame`, unwound in the kernel (x86_64).
//!
//! User space turns every executable file the target maps into sorted unwind rows
//! (`profiler_common::unwind`) and publishes the target's mappings in `PROC_MAPPINGS`. Here,
//! starting from the user registers, each frame is: find the mapping of `ip` (binary search),
//! find its row (the file's page index, then a binary search among that page's rows), compute
//! the CFA, read the return address at CFA − 8 and the caller's rbp if the row says where it
//! was saved. Frames without a row (JIT
//! code, files without `.eh_frame`, rules we cannot express) fall back to frame pointers. The
//! loop runs under `bpf_loop`, so the verifier checks one step, not 127 of them.
//!
//! Cost per frame is what this program pays per switch-out, so three things keep it down:
//! the first 4 KiB of the stack are copied once and read from the copy (one helper call
//! instead of two per frame), a per-CPU cache maps return addresses to their rows (a service
//! returns to the same call sites over and over), and a thread that stops where it stopped
//! before (the same syscall of the same loop) is recognised by a memo instead of walked again.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{bpf_perf_event_data, pt_regs},
    helpers::generated::{
        bpf_get_current_task_btf, bpf_loop, bpf_probe_read_user, bpf_task_pt_regs,
    },
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray},
};
use profiler_common::{
    HASH_SEED, MAX_STACK_DEPTH, hash_finish, hash_step,
    unwind::{
        ExecMapping, MAX_MAPPINGS, ProcMappings, ROW_PAGE_SHIFT, ROWS_PER_CHUNK, RowChunk, UC_RBP,
        UC_RIP, UC_RSP, UnwindRow, cfa_kind, java_method_frame, rbp_kind,
    },
};

use crate::maps::{SCRATCH, Scratch};

/// The global row array, in chunks (sized by the loader to what the target needs).
#[map]
pub static UNWIND_ROWS: Array<RowChunk> = Array::with_max_entries(1, 0);

/// Each target process's executable mappings (sized by the loader: `--max-processes`). Only
/// user space inserts, so 20 KiB per process mapped, not per process the table could hold.
#[map]
pub static PROC_MAPPINGS: HashMap<u32, ProcMappings> =
    HashMap::with_max_entries(1, crate::maps::NO_PREALLOC);

/// Bumped by user space after every change of any process's mapping table (`names::
/// MAP_TABLES_EPOCH`): a memo recorded before it is stale. An array entry every CPU reads and
/// user space rarely writes, so the check costs no cache miss, where looking the process's
/// table up (a hash map) to compare its generation was a twentieth of a PostgreSQL backend's
/// switch-out.
#[map]
static TABLES_EPOCH: Array<u32> = Array::with_max_entries(1, 0);

#[inline(always)]
fn tables_epoch() -> u32 {
    TABLES_EPOCH.get(0).copied().unwrap_or(0)
}

/// The generation of the current process's mapping table: processes with the same layout
/// share it (0: no table yet).
#[inline(always)]
pub fn current_generation() -> u32 {
    current_mappings().map_or(0, |m| m.generation)
}

/// Whether the current process has a mapping table (none yet right after an exec).
#[inline(always)]
pub fn has_table() -> bool {
    current_mappings().is_some()
}

/// The mappings of the current task's process (the one whose stack is walked).
#[inline(always)]
fn current_mappings() -> Option<&'static ProcMappings> {
    let tgid = (aya_ebpf::helpers::bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: read-only use of a map value while the program runs; user space replaces a
    // process's table only as a whole, with one update.
    unsafe { PROC_MAPPINGS.get(&tgid) }
}

/// Steps of a binary search over `MAX_MAPPINGS` (2^9) mappings.
const MAPPING_SEARCH_STEPS: usize = 10;
/// Steps of a binary search over up to 2^24 rows.
const ROW_SEARCH_STEPS: usize = 25;

/// Unwinding state shared with the `bpf_loop` callback (it must live on the BPF stack).
#[repr(C)]
pub struct Walk {
    ip: u64,
    sp: u64,
    bp: u64,
    /// Frames written so far.
    n: u64,
    /// Hash of the frames written so far (`profiler_common::hash_step`), so the stack needs
    /// no second pass to get its id.
    hash: u64,
    /// The stack pointer the walk started from: memo offsets are relative to it.
    sp0: u64,
    /// Which scratch stack receives the frames (and which memo records the reads).
    scratch: u32,
    /// Bytes from `sp0` copied into `STACK_COPY[scratch]`.
    copy_len: u32,
    /// Whether reads are recorded for a memo (switch-outs keep one; samples stop anywhere).
    record: u32,
    /// Generation of the mapping table this walk uses (row cache entries of another
    /// generation are stale).
    generation: u32,
}

/// `bp` is still the register value the walk started with.
const BP_INITIAL: u32 = 0;
/// `bp` was restored from a stack word not yet recorded.
const BP_PENDING: u32 = 1;
/// Whatever `bp` came from is already accounted for.
const BP_RECORDED: u32 = 2;

/// Words of stack copied at once (4 KiB: nginx's request path is 24 frames in about 2.1 KiB;
/// deeper stacks are read word by word beyond it).
pub const COPY_WORDS: usize = 512;

/// The copy of the top of the stack being unwound, one per scratch slot.
#[map]
static STACK_COPY: PerCpuArray<[u64; COPY_WORDS]> =
    PerCpuArray::with_max_entries(crate::maps::Scratch::COUNT, 0);

/// Per-CPU cache of lookups: return address → row (or "no row"), valid for one generation of
/// the mapping table.
/// 1024 slots of 32 bytes: per-CPU map values may not exceed 32 KiB.
const ROW_CACHE_SLOTS: usize = 1024;

#[repr(C)]
#[derive(Clone, Copy)]
struct RowSlot {
    ip: u64,
    generation: u32,
    /// 1: `row` applies; 0: no row covers `ip` (frame pointers).
    found: u32,
    row: UnwindRow,
    _pad: u32,
}

#[map]
static ROW_CACHE: PerCpuArray<[RowSlot; ROW_CACHE_SLOTS]> = PerCpuArray::with_max_entries(1, 0);

/// Copies the top of the stack (`words` words from `sp`, at most `COPY_WORDS`) for the unwind
/// or memo check about to run in `scratch`. Returns the bytes copied; 0 means every read goes
/// to user memory.
#[inline(always)]
pub fn copy_stack(scratch: Scratch, sp: u64, words: u32) -> u32 {
    let Some(copy) = STACK_COPY.get_ptr_mut(scratch as u32) else {
        return 0;
    };
    let full = if words == 0 || words >= COPY_WORDS as u32 {
        (COPY_WORDS * 8) as u32
    } else {
        words * 8
    };
    // SAFETY: copies at most sizeof(*copy) bytes of the current task's stack.
    if unsafe { bpf_probe_read_user(copy.cast(), full, sp as *const c_void) } == 0 {
        return full;
    }
    // Near the top of the stack the full copy runs off the mapping: copy to the end of the
    // page instead, which is always mapped if sp's page is.
    let to_page_end = (4096 - (sp & 4095)) as u32;
    if to_page_end == 0 || to_page_end > full {
        return 0;
    }
    // SAFETY: as above, fewer bytes.
    if unsafe { bpf_probe_read_user(copy.cast(), to_page_end, sp as *const c_void) } == 0 {
        to_page_end
    } else {
        0
    }
}

/// Words of user memory one memo can hold (two per frame for most stacks).
pub const MEMO_WORDS: usize = 64;
/// Words of stack above the stack pointer a memo may cover (its offsets are `u16`). Words
/// beyond the stack copy are read again one by one to check a memo: still much cheaper than
/// the frames they belong to.
const MEMO_REGION_WORDS: usize = u16::MAX as usize;
/// `count` of a memo whose unwind read something it cannot replay.
const MEMO_POISONED: u32 = u32::MAX;

/// Everything an unwind depended on besides the rows: the starting ip and sp (the key), rbp if
/// a frame used it, and each word of user memory whose value it used (return addresses, and
/// saved rbp values that a later frame used as a frame base). Unwinding is a pure function of
/// those, so a later switch-out at the same place whose stack holds the same words at the
/// same offsets has the same stack — checking that is about 20 words on nginx's request path
/// instead of 24 frames through the rows (sched_switch 870 → 640 ns/event).
///
/// The words' values are kept as one 64-bit hash ([`memo_hash`]), like the stack ids
/// themselves: a check then reads the memo's header and offsets, two or three cache lines,
/// where comparing values read eight more — the check was a sixth of sched_switch's
/// time (A/B of two profilers on one nginx worker, `bpf_stats`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UnwindMemo {
    /// The starting rbp; it matters only if `bp_used`.
    bp: u64,
    stack_id: u64,
    /// Words recorded, or MEMO_POISONED.
    count: u32,
    /// [`tables_epoch`] when the unwind began: rows uploaded since (a library loaded during
    /// the capture) can change the result, so a memo of another epoch is stale.
    epoch: u32,
    /// 1 if a frame used the starting rbp as its frame base.
    bp_used: u32,
    /// While recording: where the walk's current rbp came from (`BP_*`). A memo must check
    /// whatever the walk's result depended on, and services built without frame pointers keep
    /// data in rbp, so its value (and each saved copy of it) is checked only if some frame
    /// really used it as a frame base. Kept here, in map memory, rather than in `Walk`: the
    /// verifier would track a constant there and walk every combination of it.
    bp_from: u32,
    /// While recording, with `BP_PENDING`: the stack word (index from `sp`) rbp was restored
    /// from, or `u32::MAX` if a memo cannot replay it, and its value.
    bp_word: u32,
    /// One past the highest recorded word: what a check must copy of the stack.
    span: u32,
    bp_value: u64,
    /// [`memo_hash`] of the recorded words' values, in the order recorded.
    hash: u64,
    /// Word index from `sp` of each recorded word.
    offsets: [u16; MEMO_WORDS],
}

/// One step of the hash of a memo's words: a full avalanche per word (murmur3's fmix64, a
/// bijection), so any change of one word changes the hash and structured changes of several
/// (flipped high bits) do not cancel out.
#[inline(always)]
fn memo_hash(hash: u64, word: u64) -> u64 {
    hash_finish(hash ^ word)
}

/// The memo being recorded by the running unwind, one per scratch slot.
#[map]
static MEMO_SCRATCH: PerCpuArray<UnwindMemo> =
    PerCpuArray::with_max_entries(crate::maps::Scratch::COUNT, 0);

/// Where a thread stopped: a memo is kept per place, so a thread that alternates between a few
/// syscalls (or is preempted on its way back from them) finds each one's memo.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemoKey {
    tid: u32,
    _pad: u32,
    ip: u64,
    sp: u64,
}

impl MemoKey {
    #[inline(always)]
    pub fn new(tid: u32, ip: u64, sp: u64) -> Self {
        MemoKey {
            tid,
            _pad: 0,
            ip,
            sp,
        }
    }
}

/// Recent switch-out unwinds by where the thread stopped. LRU: a forgotten memo only costs a
/// full walk. 8192 entries of about 0.7 KiB: 6 MiB of kernel memory, enough for a pool of a
/// few hundred threads stopping at a dozen places each.
#[map]
static UNWIND_MEMO: LruHashMap<MemoKey, UnwindMemo> = LruHashMap::with_max_entries(8192, 0);

/// Where user code stopped.
#[derive(Clone, Copy)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// The task entered the kernel by an interrupt or exception rather than a system call:
    /// `orig_ax` of its saved registers is the syscall number, and negative (-1) for the
    /// entries that have no error code, the timer's and IPIs' system vectors among them
    /// (arch/x86/entry). Such a thread stopped at whatever instruction it was running.
    pub by_interrupt: bool,
}

/// User registers where user code stopped: the interrupted registers when a sample hit user
/// mode, else those saved at kernel entry.
///
/// # Safety
/// `sample`, when given, must be the perf_event program's context.
#[inline(always)]
pub unsafe fn user_regs(sample: Option<*const bpf_perf_event_data>) -> Option<UserRegs> {
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
            return Some(UserRegs {
                ip,
                sp,
                bp,
                by_interrupt: true,
            });
        }
    }
    // SAFETY: the current task always exists; the helper returns its saved user registers.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) as *const pt_regs };
    if regs.is_null() {
        return None;
    }
    // Plain loads: the helper returns a BTF pointer, which the verifier lets us read
    // directly (as fault-safe loads) instead of through probe-read calls.
    // SAFETY: `regs` is the task's pt_regs, checked non-null above.
    unsafe {
        Some(UserRegs {
            ip: core::ptr::read_volatile(&(*regs).rip),
            sp: core::ptr::read_volatile(&(*regs).rsp),
            bp: core::ptr::read_volatile(&(*regs).rbp),
            by_interrupt: (core::ptr::read_volatile(&(*regs).orig_rax) as i64) < 0,
        })
    }
}

/// Unwinds into `SCRATCH[scratch]`; returns the number of frames (0: no user stack).
#[inline(always)]
/// Returns the number of frames and their hash.
pub fn unwind(
    scratch: Scratch,
    ip: u64,
    sp: u64,
    bp: u64,
    copy_len: u32,
    record: bool,
) -> (u64, u64) {
    if ip == 0 {
        return (0, HASH_SEED);
    }
    if let Some(rec) = MEMO_SCRATCH.get_ptr_mut(scratch as u32) {
        // SAFETY: per-CPU scratch owned by the running program.
        let rec = unsafe { &mut *rec };
        rec.bp = bp;
        rec.bp_used = 0;
        rec.bp_from = BP_INITIAL;
        rec.count = 0;
        rec.span = 0;
        rec.hash = HASH_SEED;
        // Read before the table: a table replaced from here on makes the memo stale.
        rec.epoch = tables_epoch();
    }
    let generation = current_mappings().map_or(0, |m| m.generation);
    let mut walk = Walk {
        ip,
        sp,
        bp,
        n: 0,
        hash: HASH_SEED,
        sp0: sp,
        scratch: scratch as u32,
        copy_len,
        record: u32::from(record),
        generation,
    };
    // SAFETY: `step` has the callback signature bpf_loop expects; `walk` outlives the call.
    unsafe {
        bpf_loop(
            MAX_STACK_DEPTH.div_ceil(FRAMES_PER_STEP) as u32,
            step as *mut c_void,
            (&mut walk as *mut Walk).cast(),
            0,
        );
    }
    (walk.n, walk.hash)
}

/// Frames per `bpf_loop` callback. One: the verifier checks each frame's paths once per
/// callback, and most of the start-up's CPU time is the verifier's (two frames a step:
/// sched_switch 331 k and on_cpu_sample 169 k instructions verified; one: 280 k and 120 k,
/// 0.5-0.7 s less CPU at start-up), for one more callback call per two frames.
const FRAMES_PER_STEP: usize = 1;

/// `FRAMES_PER_STEP` frames. Returns 1 to stop.
///
/// Frame slots derive from bpf_loop's own `index`, which the verifier treats as any value
/// below the loop count: indexing with a counter kept in `Walk` would make every iteration a
/// distinct state and the callback would never converge within the verifier's budget.
#[inline(never)]
extern "C" fn step(index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back the pointer `unwind` passed: a live `Walk` on its stack.
    let walk = unsafe { &mut *(ctx as *mut Walk) };
    for k in 0..FRAMES_PER_STEP as u64 {
        // The verifier knows nothing of a global function's result, and a callback must
        // return 0 or 1: the comparison must survive LLVM, which sees `unwind_frame` return
        // only those and would pass its result on as is.
        if core::hint::black_box(unwind_frame(walk, index * FRAMES_PER_STEP as u64 + k)) != 0 {
            return 1;
        }
    }
    0
}

/// One frame of `walk` into slot `slot` of its scratch stack. A global function: the
/// verifier checks it once, with its arguments unknown, instead of once per state the
/// callback reaches it in.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn unwind_frame(walk: *mut Walk, slot: u64) -> i64 {
    // SAFETY: null or a live `Walk` (the verifier holds us to its size either way).
    let Some(walk) = (unsafe { walk.as_mut() }) else {
        return 1;
    };
    let Some(buf) = SCRATCH.get_ptr_mut(walk.scratch) else {
        return 1;
    };
    // SAFETY: a per-CPU scratch stack owned by the running program.
    let buf = unsafe { &mut *buf };
    frame(walk, &mut buf.frames, slot)
}

/// One frame: record `ip` in slot `slot`, then compute the caller's registers. Returns 1 to
/// stop.
#[inline(always)]
fn frame(walk: &mut Walk, frames: &mut [u64; MAX_STACK_DEPTH], slot: u64) -> i64 {
    let Some(out) = frames.get_mut(slot as usize & 127) else {
        return 1;
    };
    *out = walk.ip;
    walk.n = slot + 1;
    let hash_before = walk.hash;
    walk.hash = hash_step(walk.hash, walk.ip);

    // Every frame but the first holds a return address: look up the call instruction.
    let lookup = if slot == 0 { walk.ip } else { walk.ip - 1 };
    let row = cached_row(lookup, walk.generation);
    let (cfa, rbp_rule) = match row {
        Some(row) => match row.cfa_kind {
            cfa_kind::END_OF_STACK => return 1,
            cfa_kind::RSP => (walk.sp.wrapping_add(row.cfa_offset as i64 as u64), row),
            cfa_kind::RBP => {
                use_bp(walk);
                (walk.bp.wrapping_add(row.cfa_offset as i64 as u64), row)
            }
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
            cfa_kind::HOTSPOT_INTERPRETER => {
                return interpreted_frame(walk, out, hash_before, &row);
            }
            cfa_kind::JIT_GAP => {
                crate::maps::count(profiler_common::Counter::JitGapFrames);
                return frame_pointer_step(walk);
            }
            _ => return frame_pointer_step(walk),
        },
        None => return frame_pointer_step(walk),
    };
    let Some(ra) = read_recorded(walk, cfa.wrapping_sub(8)) else {
        return 1;
    };
    if rbp_rule.rbp_kind == rbp_kind::AT_CFA_OFFSET
        && restore_bp(walk, cfa.wrapping_add(rbp_rule.rbp_offset as i64 as u64)).is_none()
    {
        return 1;
    }
    // The stack grows down: a caller's frame is above its callee's.
    if ra == 0 || cfa <= walk.sp {
        return 1;
    }
    walk.sp = cfa;
    walk.ip = ra;
    0
}

/// A HotSpot interpreter frame (`cfa_kind::HOTSPOT_INTERPRETER`). It is named by the method it
/// interprets, not by the interpreter's code: the `Method*` at rbp + `cfa_offset` takes the
/// frame's slot (read through the memo like any other word, so a remembered stack is only
/// replayed for the same methods). The frame is rbp-linked; the caller's stack pointer is the
/// sender sp saved at rbp + `rbp_offset`, not rbp + 16, because an adapter between compiled
/// code and the interpreter may have extended the caller's stack with arguments.
#[inline(always)]
fn interpreted_frame(walk: &mut Walk, out: &mut u64, hash_before: u64, row: &UnwindRow) -> i64 {
    use_bp(walk);
    let fp = walk.bp;
    if let Some(method) = read_recorded(walk, fp.wrapping_add(row.cfa_offset as i64 as u64))
        && method != 0
    {
        let frame = java_method_frame(method);
        *out = frame;
        walk.hash = hash_step(hash_before, frame);
    }
    let sender_sp = if row.rbp_offset != 0 {
        read_recorded(walk, fp.wrapping_add(row.rbp_offset as i64 as u64))
    } else {
        None
    };
    if frame_pointer_step(walk) != 0 {
        return 1;
    }
    // Within 1 MiB above the frame, or it is not a stack pointer of this stack.
    if let Some(sp) = sender_sp
        && sp >= fp + 16
        && sp - fp < 1 << 20
    {
        walk.sp = sp;
    }
    0
}

/// Frame-pointer step: [rbp] is the caller's rbp, [rbp + 8] the return address.
#[inline(always)]
fn frame_pointer_step(walk: &mut Walk) -> i64 {
    use_bp(walk);
    let bp = walk.bp;
    if bp == 0 || bp & 7 != 0 || bp < walk.sp {
        return 1;
    }
    let Some(ra) = read_recorded(walk, bp + 8) else {
        return 1;
    };
    if ra == 0 || restore_bp(walk, bp).is_none() {
        return 1;
    }
    walk.sp = bp + 16;
    walk.ip = ra;
    0
}

/// Signal trampoline: the interrupted code's registers are in the `ucontext_t` at rsp.
#[inline(always)]
fn signal_frame(walk: &mut Walk) -> i64 {
    let uc = walk.sp;
    let (Some(ip), Some(sp)) = (
        read_recorded(walk, uc + UC_RIP),
        read_recorded(walk, uc + UC_RSP),
    ) else {
        return 1;
    };
    if ip == 0 || restore_bp(walk, uc + UC_RBP).is_none() {
        return 1;
    }
    walk.ip = ip;
    walk.sp = sp;
    0
}

/// Reads a user word for the walk: from the stack copy when it covers it. Also returns its
/// word index from `sp0` if a memo can replay it.
#[inline(always)]
fn read_word(walk: &Walk, addr: u64) -> Option<(u64, Option<u32>)> {
    let off = addr.wrapping_sub(walk.sp0);
    let copied = if off % 8 == 0 && off + 8 <= walk.copy_len as u64 {
        STACK_COPY
            .get(walk.scratch)
            .map(|copy| copy[(off / 8) as usize & (COPY_WORDS - 1)])
    } else {
        None
    };
    let v = match copied {
        Some(v) => v,
        None => match read_user(addr) {
            Some(v) => v,
            None => {
                // The walk ends here; a memo would not notice the word becoming readable.
                if walk.record != 0 {
                    record(walk.scratch, None, 0);
                }
                return None;
            }
        },
    };
    let word = off / 8;
    let replayable = off % 8 == 0 && word < MEMO_REGION_WORDS as u64;
    Some((v, replayable.then_some(word as u32)))
}

/// Reads a word the walk's result depends on, and records it in the walk's memo.
#[inline(always)]
fn read_recorded(walk: &Walk, addr: u64) -> Option<u64> {
    let (v, word) = read_word(walk, addr)?;
    if walk.record != 0 {
        record(walk.scratch, word, v);
    }
    Some(v)
}

/// Makes `bp` the saved rbp at `addr`; recorded only if a later frame uses it.
#[inline(always)]
fn restore_bp(walk: &mut Walk, addr: u64) -> Option<()> {
    let (v, word) = read_word(walk, addr)?;
    walk.bp = v;
    if walk.record != 0
        && let Some(rec) = MEMO_SCRATCH.get_ptr_mut(walk.scratch)
    {
        // SAFETY: per-CPU scratch owned by the running program.
        let rec = unsafe { &mut *rec };
        rec.bp_from = BP_PENDING;
        rec.bp_word = word.unwrap_or(u32::MAX);
        rec.bp_value = v;
    }
    Some(())
}

/// The walk is about to use `bp` as a frame base: whatever it came from now matters.
#[inline(always)]
fn use_bp(walk: &Walk) {
    if walk.record == 0 {
        return;
    }
    let Some(rec) = MEMO_SCRATCH.get_ptr_mut(walk.scratch) else {
        return;
    };
    // SAFETY: per-CPU scratch owned by the running program.
    let (from, word, value) = unsafe { ((*rec).bp_from, (*rec).bp_word, (*rec).bp_value) };
    if from == BP_INITIAL {
        // SAFETY: as above.
        unsafe { (*rec).bp_used = 1 };
    } else if from == BP_PENDING {
        record(walk.scratch, (word != u32::MAX).then_some(word), value);
    }
    // SAFETY: as above (`record` is done with it).
    unsafe { (*rec).bp_from = BP_RECORDED };
}

/// Appends stack word `word` (index from the walk's `sp0`; `None`: not replayable) with value
/// `v` to the memo being recorded in `scratch`.
#[inline(always)]
fn record(scratch: u32, word: Option<u32>, v: u64) {
    let Some(rec) = MEMO_SCRATCH.get_ptr_mut(scratch) else {
        return;
    };
    // SAFETY: per-CPU scratch owned by the running program.
    let rec = unsafe { &mut *rec };
    let n = rec.count;
    let Some(word) = word else {
        rec.count = MEMO_POISONED;
        return;
    };
    if n >= MEMO_WORDS as u32 {
        rec.count = MEMO_POISONED;
        return;
    }
    // `n` comes from map memory, an unknown to the verifier: the masks prove the bounds.
    let i = n as usize & (MEMO_WORDS - 1);
    rec.offsets[i] = word as u16;
    rec.hash = memo_hash(rec.hash, v);
    rec.count = n + 1;
    if word >= rec.span {
        rec.span = word + 1;
    }
}

/// The stack id of this thread's last switch-out unwind, if registers and every recorded
/// word are unchanged. Copies the part of the stack the memo covers into
/// `STACK_COPY[scratch]` (not the whole `COPY_WORDS`).
#[inline(always)]
pub fn memo_lookup(key: &MemoKey, bp: u64, scratch: Scratch) -> Option<u64> {
    // SAFETY: read-only use of the LRU entry for the duration of the check.
    let memo = unsafe { UNWIND_MEMO.get(key) }?;
    if memo.epoch != tables_epoch()
        || memo.count > MEMO_WORDS as u32
        || (memo.bp_used != 0 && memo.bp != bp)
    {
        return None;
    }
    let copy_len = if memo.span == 0 {
        0
    } else {
        copy_stack(scratch, key.sp, memo.span)
    };
    let mut check = MemoCheck {
        memo: memo as *const UnwindMemo,
        sp: key.sp,
        hash: HASH_SEED,
        scratch: scratch as u32,
        copy_words: copy_len / 8,
        count: memo.count,
        unreadable: 0,
    };
    // SAFETY: `memo_words` has bpf_loop's callback signature; `check` outlives the call and
    // the memo entry stays valid while this program runs.
    unsafe {
        bpf_loop(
            memo.count.div_ceil(MEMO_WORDS_PER_STEP),
            memo_words as *mut c_void,
            (&mut check as *mut MemoCheck).cast(),
            0,
        );
    }
    (check.unreadable == 0 && check.hash == memo.hash).then_some(memo.stack_id)
}

/// Recorded words one step of a memo check hashes: nginx's memos hold 12–23, so one step
/// mostly does.
const MEMO_WORDS_PER_STEP: u32 = 32;

#[repr(C)]
struct MemoCheck {
    memo: *const UnwindMemo,
    sp: u64,
    /// [`memo_hash`] of the words read so far.
    hash: u64,
    scratch: u32,
    /// Words from `sp` in the stack copy.
    copy_words: u32,
    /// Words recorded in the memo.
    count: u32,
    /// 1 if a word beyond the copy could not be read.
    unreadable: u32,
}

/// Hashes the current values of recorded words `step * 32 ..` of a memo, from the stack copy
/// (or user memory beyond it).
#[inline(never)]
extern "C" fn memo_words(step: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back `memo_lookup`'s `MemoCheck`.
    let check = unsafe { &mut *(ctx as *mut MemoCheck) };
    let Some(copy) = STACK_COPY.get(check.scratch) else {
        check.unreadable = 1;
        return 1;
    };
    for j in 0..MEMO_WORDS_PER_STEP {
        let n = step as u32 * MEMO_WORDS_PER_STEP + j;
        if n >= check.count {
            return 1;
        }
        let i = n as usize & (MEMO_WORDS - 1);
        // SAFETY: the memo pointer was taken from the map by the caller, which is still
        // running.
        let word = unsafe { (*check.memo).offsets[i] };
        let now = if u32::from(word) < check.copy_words {
            copy[word as usize & (COPY_WORDS - 1)]
        } else {
            match read_user(check.sp.wrapping_add(u64::from(word) * 8)) {
                Some(v) => v,
                None => {
                    check.unreadable = 1;
                    return 1;
                }
            }
        };
        check.hash = memo_hash(check.hash, now);
    }
    0
}

/// Keeps the memo the last unwind recorded in `scratch` as this thread's, for `stack_id`.
#[inline(always)]
pub fn memo_store(key: &MemoKey, scratch: Scratch, stack_id: u64) {
    let Some(rec) = MEMO_SCRATCH.get_ptr_mut(scratch as u32) else {
        return;
    };
    // SAFETY: per-CPU scratch owned by the running program.
    let rec = unsafe { &mut *rec };
    if rec.count > MEMO_WORDS as u32 {
        let _ = UNWIND_MEMO.remove(key);
        return;
    }
    rec.stack_id = stack_id;
    let _ = UNWIND_MEMO.insert(key, &*rec, 0);
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
    /// The process's mappings (mapping search only): looked up once, not at every step.
    maps: *const ProcMappings,
}

/// The row covering `ip`, through the per-CPU cache.
#[inline(always)]
fn cached_row(ip: u64, generation: u32) -> Option<UnwindRow> {
    let slot = ((ip >> 2) ^ (ip >> 13)) as usize & (ROW_CACHE_SLOTS - 1);
    if let Some(cache) = ROW_CACHE.get_ptr_mut(0) {
        // SAFETY: per-CPU cache; a program interrupted mid-update leaves at worst a stale slot
        // that fails the ip/generation check.
        let entry = unsafe { &mut (*cache)[slot] };
        if entry.ip == ip && entry.generation == generation {
            return (entry.found != 0).then_some(entry.row);
        }
        crate::maps::count(profiler_common::Counter::RowCacheMisses);
        let row = find_row(ip);
        entry.ip = ip;
        entry.generation = generation;
        entry.found = u32::from(row.is_some());
        entry.row = row.unwrap_or_default();
        return row;
    }
    find_row(ip)
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
    // Last row with row.pc <= pc, among the rows of pc's page.
    let (lo, hi) = page_rows(&mapping, pc as u32);
    let mut search = Search {
        lo,
        hi,
        target: pc,
        first_row: mapping.first_row,
        _pad: 0,
        maps: core::ptr::null(),
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

/// The rows `lo..hi` the row covering `pc` is searched among (the one before `lo` when none
/// of them starts at or before `pc`): those of `pc`'s page by the mapping's page index, or all.
#[inline(always)]
fn page_rows(m: &ExecMapping, pc: u32) -> (u32, u32) {
    if m.index_pages == 0 {
        return (0, m.row_count);
    }
    let page = pc >> ROW_PAGE_SHIFT;
    if page >= m.index_pages {
        return (m.row_count, m.row_count);
    }
    let entry = m.first_row.wrapping_add(m.row_count).wrapping_add(page);
    match (row_at(entry), row_at(entry.wrapping_add(1))) {
        (Some(lo), Some(hi)) if lo.pc <= hi.pc && hi.pc <= m.row_count => (lo.pc, hi.pc),
        // Not an index (cannot happen with tables user space wrote): search them all.
        _ => (0, m.row_count),
    }
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
    let maps = current_mappings()?;
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
        maps,
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
    // SAFETY: `find_mapping` set it from a map value that stays valid while the program runs.
    let Some(maps) = (unsafe { s.maps.as_ref() }) else {
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
