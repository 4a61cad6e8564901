//! Stacks → stack ids. Frames are hashed here and stored once in `STACKS`, so aggregation
//! keys stay 24 bytes and a stack table collision never loses a stack (a hash map chains where
//! `BPF_MAP_TYPE_STACK_TRACE` would answer -EEXIST).
//!
//! Kernel stacks come from the kernel's unwinder (`bpf_get_stack`); user stacks from the
//! `.eh_frame` unwinder (`unwind`), or frame pointers with `--unwind fp`. Both fill a per-CPU
//! scratch stack before [`store`]; `kstack` and the user memo skip the unwind when they
//! recognise a stack.

use core::{ffi::c_void, mem::size_of};

use aya_ebpf::{
    EbpfContext, Global,
    bindings::{BPF_F_USER_STACK, bpf_perf_event_data},
    helpers::generated::{bpf_get_stack, bpf_loop},
};
use profiler_common::{
    BPF_NOEXIST, Counter, EEXIST, HASH_SEED, IRQ_ENTRY_RANGES, MAX_STACK_DEPTH, config_flags,
    hash_finish, hash_step, stack_id,
};

use crate::{
    maps::{SCRATCH, STACKS, Scratch, Stash, add, count, stash, unstash},
    unwind,
};

const FRAMES_BYTES: u32 = (size_of::<u64>() * MAX_STACK_DEPTH) as u32;

/// The current task's kernel stack.
#[inline(always)]
pub fn kernel_stack<C: EbpfContext>(ctx: &C, scratch: Scratch) -> u64 {
    kernel_stack_kept(ctx, scratch).0
}

/// The current task's kernel stack, and its number of frames, which stay in `SCRATCH[scratch]`
/// for the caller to look at.
#[inline(always)]
pub fn kernel_stack_kept<C: EbpfContext>(ctx: &C, scratch: Scratch) -> (u64, u64) {
    from_helper(
        ctx,
        scratch,
        0,
        MAX_STACK_DEPTH as u32,
        Some(Counter::KernelStackFailed),
    )
}

/// Frames asked for of a hard interrupt's wakeup stack when only the waker's name is wanted:
/// `hrtimer_wakeup` (a timer expired) lies within the first six here, after the profiler's own
/// frames and `try_to_wake_up`.
pub const TIMER_WAKEUP_FRAMES: u32 = 8;

/// The first `frames` frames of the current task's kernel stack (a waker's: no loss counted).
#[inline(always)]
pub fn kernel_stack_frames<C: EbpfContext>(ctx: &C, scratch: Scratch, frames: u32) -> u64 {
    from_helper(ctx, scratch, 0, frames, None).0
}

/// The current task's user stack: from `.eh_frame` rows when the loader provided them
/// (`--unwind dwarf`, the default), else from frame pointers. `sample` is the perf_event
/// context when called from the sampler; `memo_tid` the current thread's id when the stop
/// should be remembered (switch-outs).
#[inline(always)]
pub fn user_stack<C: EbpfContext>(
    ctx: &C,
    scratch: Scratch,
    sample: Option<*const bpf_perf_event_data>,
    memo_tid: Option<u32>,
) -> u64 {
    if crate::config().flags & config_flags::DWARF_UNWIND == 0 {
        return from_helper(
            ctx,
            scratch,
            BPF_F_USER_STACK as u64,
            MAX_STACK_DEPTH as u32,
            Some(Counter::UserStackFailed),
        )
        .0;
    }
    match (sample, memo_tid) {
        (None, Some(tid)) => core::hint::black_box(unwind_switch_user_stack(tid)),
        _ => dwarf_user_stack(scratch, sample, memo_tid),
    }
}

/// A switching-out thread's user stack unwound from `.eh_frame` rows: a global function, so
/// the verifier checks it once, with `tid` unknown, instead of once per state `sched_switch`
/// reaches it in.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn unwind_switch_user_stack(tid: u32) -> u64 {
    dwarf_user_stack(Scratch::Switch, None, Some(tid))
}

/// [`user_stack`] with `--unwind dwarf`.
#[inline(always)]
fn dwarf_user_stack(
    scratch: Scratch,
    sample: Option<*const bpf_perf_event_data>,
    memo_tid: Option<u32>,
) -> u64 {
    // SAFETY: `sample` is the perf_event context when given.
    let Some(regs) = (unsafe { unwind::user_regs(sample) }) else {
        count(Counter::UserStackFailed);
        return stack_id::LOST_FETCH;
    };
    let (ip, sp, bp) = (regs.ip, regs.sp, regs.bp);
    // A thread an interrupt took off the CPU (a tick or a wakeup's IPI preempting it in user
    // code) stopped at whatever instruction it was running: that place is not met again, so a
    // memo would be looked for in vain and its store would push out the memos of the places
    // that repeat (a PostgreSQL backend at 30 % run-queue: 369 places in 7 s, a tenth of its
    // switch-outs).
    let memo_tid = if regs.by_interrupt { None } else { memo_tid };
    // A thread switching out again where it stopped before (the same syscall of the same loop,
    // or preemption on the way back from it) has the same stack if the words that stack was
    // unwound from are unchanged: recognise it instead of walking it again.
    let memo = memo_tid.is_some();
    let key = unwind::MemoKey::new(memo_tid.unwrap_or(0), ip, sp);
    if memo {
        match unwind::memo_lookup(&key, bp, scratch) {
            Some(id) if crate::config().flags & config_flags::VERIFY_MEMOS == 0 => {
                count(Counter::UnwindMemoHits);
                return id;
            }
            Some(id) => {
                count(Counter::UnwindMemoHits);
                stash(Stash::UserRecognised, id);
            }
            None => {
                count(Counter::UnwindMemoMisses);
                stash(Stash::UserRecognised, 0);
            }
        }
    }
    let copy_len = unwind::copy_stack(scratch, sp, unwind::COPY_WORDS as u32);
    let (n, hash) = unwind::unwind(scratch, ip, sp, bp, copy_len, memo);
    add(Counter::UnwindFrames, n);
    // The same addresses mean other functions under another layout: the layout (its mapping
    // table's generation) is part of the id, and stored for user space to name the frames.
    let generation = match unwind::current_generation() {
        0 => profiler_common::NO_TABLE_GENERATION,
        g => g,
    };
    let id = store_hashed(scratch, n, hash, generation);
    let seen = if memo {
        unstash(Stash::UserRecognised)
    } else {
        0
    };
    if seen != 0 && seen != id {
        count(Counter::MemoDisagreements);
    }
    if memo && seen == 0 && id & stack_id::RESERVED == 0 {
        unwind::memo_store(&key, scratch, id);
    }
    id
}

/// The stacks (user, kernel) of a waker: any task, often one without user space (an idle CPU
/// taking an interrupt), so a failure is expected and is not a loss of the target's data.
#[inline(always)]
pub fn waker_stacks<C: EbpfContext>(ctx: &C, scratch: Scratch, user: bool) -> (u64, u64) {
    let kernel = waker_kernel_stack(ctx, scratch);
    let user = if user {
        user_stack(ctx, scratch, None, None)
    } else {
        stack_id::EMPTY
    };
    let user = if user == stack_id::LOST_FETCH {
        stack_id::EMPTY
    } else {
        user
    };
    (user, kernel)
}

/// Up to `frames` frames of the current stack through the kernel's helper, stored: the stack
/// id and the number of frames.
#[inline(always)]
fn from_helper<C: EbpfContext>(
    ctx: &C,
    scratch: Scratch,
    flags: u64,
    frames: u32,
    failed: Option<Counter>,
) -> (u64, u64) {
    match fetch(ctx, scratch, flags, frames) {
        Some(len) => (store(scratch, len), len),
        None => {
            if let Some(failed) = failed {
                count(failed);
            }
            (stack_id::LOST_FETCH, 0)
        }
    }
}

/// Up to `frames` frames of the current stack into `SCRATCH[scratch]`; their number. The
/// kernel's unwinder stops when the buffer is full, so fewer frames cost less.
#[inline(always)]
fn fetch<C: EbpfContext>(ctx: &C, scratch: Scratch, flags: u64, frames: u32) -> Option<u64> {
    let buf = SCRATCH.get_ptr_mut(scratch as u32)?;
    // SAFETY: a per-CPU slot owned by this program while it runs (see `Scratch`).
    let buf = unsafe { &mut *buf };
    let bytes = if frames < MAX_STACK_DEPTH as u32 {
        frames * size_of::<u64>() as u32
    } else {
        FRAMES_BYTES
    };
    // SAFETY: `frames` is FRAMES_BYTES long and `bytes` at most that; the helper writes at most
    // `bytes` and zero-fills what it leaves of them.
    let ret = unsafe { bpf_get_stack(ctx.as_ptr(), buf.frames.as_mut_ptr().cast(), bytes, flags) };
    (ret >= 0).then_some(ret as u64 / size_of::<u64>() as u64)
}

/// Frames of a waker's kernel stack asked for first. The interrupt entry lies within ~10 for
/// a wakeup arriving as an IPI (the profiler's own 4 included), ~18 for a timer, 22–26 for a
/// packet woken up to its socket by softirq processing — a network server's usual waker — and
/// a thread's syscall is complete within ~12. Unwinding costs ~0.25 µs a frame here.
const WAKER_FIRST_FRAMES: u32 = 28;
/// Asked for next, when the first try found neither an entry nor the end of the stack.
const WAKER_SECOND_FRAMES: u32 = 64;

/// A waker's kernel stack, ending at the interrupt entry if it ran in an interrupt: what the
/// interrupted task was doing is no part of the wakeup (user space drops it too), and
/// unwinding through it was most of the cost: ~16 µs per wakeup of an nginx worker under wrk,
/// against ~3.5 µs for the first 12 frames. Stacks are asked for in growing sizes until one
/// holds an interrupt entry or is complete.
#[inline(always)]
fn waker_kernel_stack<C: EbpfContext>(ctx: &C, scratch: Scratch) -> u64 {
    for asked in [
        WAKER_FIRST_FRAMES,
        WAKER_SECOND_FRAMES,
        MAX_STACK_DEPTH as u32,
    ] {
        let Some(len) = fetch(ctx, scratch, 0, asked) else {
            return stack_id::LOST_FETCH;
        };
        if let Some(entry) = interrupt_entry(scratch, len) {
            return store(scratch, entry + 1);
        }
        if len < u64::from(asked) {
            return store(scratch, len);
        }
    }
    store(scratch, MAX_STACK_DEPTH as u64)
}

/// Interrupt entry text, `[start, end)` pairs from kallsyms (zero pairs unused).
#[unsafe(no_mangle)]
static IRQ_ENTRY: Global<[u64; 2 * IRQ_ENTRY_RANGES]> = Global::new([0; 2 * IRQ_ENTRY_RANGES]);

/// Index of the first frame of `SCRATCH[scratch].frames[..len]` inside interrupt entry code.
#[inline(always)]
fn interrupt_entry(scratch: Scratch, len: u64) -> Option<u64> {
    let mut scan = EntryScan {
        scratch: scratch as u32,
        found: u32::MAX,
    };
    each_frame(len, entry_frame, &mut scan);
    (scan.found != u32::MAX).then_some(u64::from(scan.found))
}

#[repr(C)]
struct EntryScan {
    scratch: u32,
    found: u32,
}

#[inline(never)]
extern "C" fn entry_frame(index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back `interrupt_entry`'s `EntryScan`.
    let scan = unsafe { &mut *(ctx as *mut EntryScan) };
    let Some(frame) = scratch_frame(scan.scratch, index) else {
        return 1;
    };
    // A return address belongs to the function holding the call just before it.
    let pc = frame.wrapping_sub(1);
    let ranges = &IRQ_ENTRY as *const Global<[u64; 2 * IRQ_ENTRY_RANGES]> as *const u64;
    for r in 0..IRQ_ENTRY_RANGES {
        // SAFETY: `Global` is a transparent wrapper of the array; constant in-bounds indices.
        let (start, end) = unsafe {
            (
                core::ptr::read_volatile(ranges.add(2 * r)),
                core::ptr::read_volatile(ranges.add(2 * r + 1)),
            )
        };
        if start <= pc && pc < end {
            scan.found = index as u32;
            return 1;
        }
    }
    0
}

/// Hashes `SCRATCH[scratch].frames[..len]` and makes sure the stack table holds it. Returns
/// its id.
#[inline(always)]
pub fn store(scratch: Scratch, len: u64) -> u64 {
    if len == 0 {
        return stack_id::EMPTY;
    }
    let mut hashing = Hashing {
        hash: HASH_SEED,
        scratch: scratch as u32,
        _pad: 0,
    };
    let len = clamp_depth(len);
    each_frame(len, hash_frame, &mut hashing);
    store_hashed(scratch, len, hashing.hash, 0)
}

/// Makes sure the stack table holds `SCRATCH[scratch].frames[..len]`, whose frame hash is
/// `hash`, unwound under mapping-table `generation` (0 for kernel stacks). Returns its id.
#[inline(always)]
pub fn store_hashed(scratch: Scratch, len: u64, hash: u64, generation: u32) -> u64 {
    if len == 0 {
        return stack_id::EMPTY;
    }
    let len = clamp_depth(len);
    let hash = if generation == 0 {
        hash
    } else {
        hash_step(hash, u64::from(generation))
    };
    let id = stack_id::from_hash(hash_finish(hash));
    // SAFETY: read-only lookup; the value is not kept.
    if unsafe { STACKS.get(&id) }.is_some() {
        return id;
    }
    let Some(buf) = SCRATCH.get_ptr_mut(scratch as u32) else {
        return stack_id::LOST_FETCH;
    };
    // SAFETY: the per-CPU scratch stack this program filled.
    let buf = unsafe { &mut *buf };
    buf.len = len | (u64::from(generation) << 32);
    match STACKS.insert(&id, &*buf, BPF_NOEXIST) {
        Ok(()) => id,
        Err(e) if e == -EEXIST => id,
        Err(_) => {
            count(Counter::StackTableFull);
            stack_id::LOST_TABLE_FULL
        }
    }
}

#[repr(C)]
struct Hashing {
    hash: u64,
    scratch: u32,
    _pad: u32,
}

#[inline(never)]
extern "C" fn hash_frame(index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back `store`'s `Hashing`.
    let hashing = unsafe { &mut *(ctx as *mut Hashing) };
    let Some(frame) = scratch_frame(hashing.scratch, index) else {
        return 1;
    };
    hashing.hash = hash_step(hashing.hash, frame);
    0
}

/// `len` frames, at most `MAX_STACK_DEPTH`.
#[inline(always)]
fn clamp_depth(len: u64) -> u64 {
    if len > MAX_STACK_DEPTH as u64 {
        MAX_STACK_DEPTH as u64
    } else {
        len
    }
}

/// Calls `step` (a bpf_loop callback) for frames `0..len` of a scratch stack, with `state`.
/// A bpf_loop rather than a plain loop: the verifier then checks one step once, instead of
/// 127 steps on every path that reaches here (which blows its instruction budget). Inlined,
/// so the verifier sees `step` as the constant callback it must be.
#[inline(always)]
fn each_frame<T>(len: u64, step: extern "C" fn(u64, *mut c_void) -> i64, state: &mut T) {
    // SAFETY: `step` has bpf_loop's callback signature and expects a `T`; `state` outlives
    // the call.
    unsafe {
        bpf_loop(
            clamp_depth(len) as u32,
            step as *mut c_void,
            (state as *mut T).cast(),
            0,
        );
    }
}

/// Frame `index` of scratch stack `scratch`, for the bpf_loop callbacks that walk one.
#[inline(always)]
fn scratch_frame(scratch: u32, index: u64) -> Option<u64> {
    let buf = SCRATCH.get(scratch)?;
    // `get`, not indexing: 127 frames, and a bounds-check panic cannot be verified.
    buf.frames.get(index as usize).copied()
}
