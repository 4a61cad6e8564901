//! Kernel stacks of threads going to sleep, recognised instead of unwound again.
//!
//! The kernel's own unwinder (ORC, behind `bpf_get_stack`) costs 7–15 µs here for the dozen
//! frames of an nginx worker sleeping in `epoll_wait`: with the waker stacks gone, half of what
//! `sched_switch` costs under load. But a thread sleeps again and again in the same syscall
//! along the same path, and the frames the unwinder reports are the return addresses on the
//! thread's kernel stack. So the first unwind at a place records where on the stack each frame's
//! return address lay; the next time, if those words hold the same values, the stack is the same.
//!
//! Where "on the stack" is measured from matters, because CONFIG_RANDOMIZE_KSTACK_OFFSET (on
//! here, as in most distributions) moves everything below `do_syscall_64` by a random amount
//! at each syscall. Two fixed points survive it:
//! - the tracepoint's argument array: `ctx` of a tp_btf program is `bpf_trace_run4`'s local
//!   `args[]`, on the sleeping thread's kernel stack, so every frame between it and the random
//!   gap (all of them but the root) sits at a fixed distance above it for a given path;
//! - the user registers at the top of the stack: the root frame, the return into the entry
//!   code (pushed by its `call do_syscall_64`, above the gap), lies right below them.
//!
//! A frame the check does not find where it was is a miss, never a wrong stack; the memo only
//! decides between "the same stack" and "unwind".
//!
//! One syscall often waits at several places: an `fdatasync` waits for its pages' writeback
//! and then for the device flush, a `read` for the pipe or for a lock. So each (thread,
//! syscall) keeps the last [`SLOTS`] stacks seen there, and a check tries them most recent
//! first; in-kernel preemptions (at `cond_resched` points of long kernel loops) are memoised
//! the same way under their own key.

use core::ffi::c_void;

use aya_ebpf::{
    EbpfContext,
    bindings::pt_regs,
    helpers::generated::{
        bpf_get_current_task_btf, bpf_loop, bpf_probe_read_kernel, bpf_task_pt_regs,
    },
    macros::map,
    maps::{LruHashMap, PerCpuArray},
};
use profiler_common::{Counter, config_flags, stack_id};

use crate::{
    maps::{SCRATCH, Scratch, Stash, count, stash, unstash},
    stack,
};

/// Frames between the tracepoint and the syscall entry a memo can hold (a sleep in a syscall
/// has about ten).
const MEMO_FRAMES: usize = 32;
/// How far above `ctx` frames are looked for: 4 KiB, a quarter of the kernel stack.
const REGION_WORDS: usize = 512;
/// Frames at the start of the unwind that lie below `ctx` (this program's own, the
/// subprograms it called to get here, and the return into `bpf_trace_run4`): the same for every
/// call, so a memo need not find them.
const MAX_PREFIX: u32 = 4;
/// Words compared per `bpf_loop` step.
const WORDS_PER_STEP: u32 = 4;
/// Stacks remembered per (thread, syscall): the places one syscall waits at (an `fsync`: two
/// or three).
const SLOTS: usize = 4;
/// Compare steps per slot.
const STEPS_PER_SLOT: u32 = MEMO_FRAMES as u32 / WORDS_PER_STEP;
// `remember` shifts the slots by hand.
const _: () = assert!(SLOTS == 4);

/// Set in `MemoKey::place` for a preemption inside the kernel (not a sleep).
const PREEMPTED: u32 = 1 << 31;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemoKey {
    tid: u32,
    /// `orig_ax` of the user registers: the syscall (or -1 for a fault), with [`PREEMPTED`]
    /// for an in-kernel preemption.
    place: u32,
}

/// The stacks last seen at one (thread, syscall), slot 0 the most recent.
#[repr(C)]
#[derive(Clone, Copy)]
struct KernelMemos {
    slots: [KernelMemo; SLOTS],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct KernelMemo {
    stack_id: u64,
    /// The root frame, read right below the user registers.
    root: u64,
    /// Frames recorded above `ctx`.
    count: u32,
    /// One past the highest recorded word: what a check copies.
    span: u32,
    /// Word index above `ctx` of each recorded frame.
    words: [u16; MEMO_FRAMES],
    values: [u64; MEMO_FRAMES],
}

/// The last unwinds at each (thread, syscall). LRU: a forgotten memo only costs an unwind.
/// 8192 entries of ~1.4 KiB.
#[map]
static KERNEL_MEMO: LruHashMap<MemoKey, KernelMemos> = LruHashMap::with_max_entries(8192, 0);

/// Per-CPU working space: the copy of the stack above `ctx`, and a scan's progress. The scan
/// state lives here, in map memory, so that the verifier sees unknown values rather than
/// constants it would follow through every iteration.
#[repr(C)]
struct Work {
    /// `ctx` and the user registers' address as plain numbers (stored here and read back, so
    /// the verifier treats them as numbers, not pointers it would forbid arithmetic on).
    ctx: u64,
    regs: u64,
    /// Frames of the unwind being recorded, and the next one to find.
    frames: u32,
    next: u32,
    /// Frames skipped at the start because they lie below `ctx`.
    skipped: u32,
    /// Words being copied.
    copy_words: u32,
    memo: KernelMemo,
    /// A new entry is built here: slot 0 the memo, the other slots empty (count 0).
    fresh: KernelMemos,
    copy: [u64; REGION_WORDS],
}

#[map]
static WORK: PerCpuArray<Work> = PerCpuArray::with_max_entries(1, 0);

/// Where the current thread is going to sleep.
#[repr(C)]
pub struct Place {
    key: MemoKey,
    /// Address of `ctx` (the tracepoint's argument array).
    ctx: u64,
    /// Address of the user registers at the top of the kernel stack.
    regs: u64,
}

/// The kernel stack of the current thread, switching out to sleep in the kernel
/// (`preempted`: preempted inside the kernel).
#[inline(always)]
pub fn switch_stack<C: EbpfContext>(ctx: &C, tid: u32, preempted: bool) -> u64 {
    let Some(place) = place(ctx, tid, preempted) else {
        return stack::kernel_stack(ctx, Scratch::Switch);
    };
    match recognised(&place) {
        Some(id) if crate::config().flags & config_flags::VERIFY_MEMOS == 0 => {
            count(Counter::KernelMemoHits);
            return id;
        }
        Some(id) => {
            count(Counter::KernelMemoHits);
            stash(Stash::KernelRecognised, id);
        }
        None => {
            count(Counter::KernelMemoMisses);
            stash(Stash::KernelRecognised, 0);
        }
    }
    let (id, frames) = stack::kernel_stack_kept(ctx, Scratch::Switch);
    let seen = unstash(Stash::KernelRecognised);
    if seen != 0 && seen != id {
        count(Counter::MemoDisagreements);
    }
    if seen == 0 && id & stack_id::RESERVED == 0 {
        kernel_memo_remember(&place, id, frames);
    }
    id
}

#[inline(always)]
fn place<C: EbpfContext>(ctx: &C, tid: u32, preempted: bool) -> Option<Place> {
    // SAFETY: the current task always exists; the helper returns where its user registers are
    // saved, at the top of its kernel stack.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) as *const pt_regs };
    if regs.is_null() {
        return None;
    }
    // SAFETY: a BTF pointer the verifier lets us read (faults read as zero).
    let syscall = unsafe { core::ptr::read_volatile(&(*regs).orig_rax) } as u32;
    let work = WORK.get_ptr_mut(0)?;
    // SAFETY: per-CPU working space owned by this program while it runs.
    let (ctx_addr, regs) = unsafe {
        core::ptr::write_volatile(&mut (*work).ctx, ctx.as_ptr() as u64);
        core::ptr::write_volatile(&mut (*work).regs, regs as u64);
        (
            core::ptr::read_volatile(&(*work).ctx),
            core::ptr::read_volatile(&(*work).regs),
        )
    };
    // The argument array lies below the registers on the same stack; anything else is not a
    // place this scheme understands.
    if ctx_addr >= regs || regs - ctx_addr > 16 * 1024 {
        return None;
    }
    Some(Place {
        key: MemoKey {
            tid,
            place: if preempted {
                syscall | PREEMPTED
            } else {
                syscall & !PREEMPTED
            },
        },
        ctx: ctx_addr,
        regs,
    })
}

/// [`kernel_memo_recognise`]'s answer: 0 is "not recognised" (no stack id is 0).
#[inline(always)]
fn recognised(place: &Place) -> Option<u64> {
    match core::hint::black_box(kernel_memo_recognise(place)) {
        0 => None,
        id => Some(id),
    }
}

/// [`recognise`] as a global function: the verifier checks it once, with `place` unknown,
/// instead of once per state `sched_switch` reaches it in. 0: not recognised.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn kernel_memo_recognise(place: *const Place) -> u64 {
    // SAFETY: null or the caller's live `Place`.
    unsafe { place.as_ref() }.and_then(recognise).unwrap_or(0)
}

/// [`remember`] as a global function, for the same reason as [`kernel_memo_recognise`].
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn kernel_memo_remember(place: *const Place, stack_id: u64, frames: u64) -> i64 {
    // SAFETY: null or the caller's live `Place`.
    if let Some(place) = unsafe { place.as_ref() } {
        remember(place, stack_id, frames);
    }
    0
}

/// The stack id of the most recent slot whose root frame and every recorded word are
/// unchanged.
#[inline(always)]
fn recognise(place: &Place) -> Option<u64> {
    // SAFETY: read-only use of the LRU entry while this program runs.
    let memos = unsafe { KERNEL_MEMO.get(&place.key) }?;
    let root = read_kernel(place.regs.wrapping_sub(8))?;
    // One copy of the stack for all slots: as far up as the furthest of them reaches, but
    // not past the user registers (a deeper place's memo would read off the top of this
    // stack, and the read would fail).
    let live = ((place.regs - place.ctx) / 8) as u32;
    let mut span = 0;
    let mut candidates = 0u32;
    for (i, memo) in memos.slots.iter().enumerate() {
        if memo.count == 0
            || memo.count > MEMO_FRAMES as u32
            || memo.span > REGION_WORDS as u32
            || memo.span > live
            || memo.root != root
        {
            continue;
        }
        candidates |= 1 << i;
        if memo.span > span {
            span = memo.span;
        }
    }
    if candidates == 0 {
        return None;
    }
    let work = WORK.get_ptr_mut(0)?;
    // SAFETY: per-CPU working space owned by this program while it runs.
    let work = unsafe { &mut *work };
    copy_region(work, place.ctx, span)?;
    let mut check = Check {
        memos: memos as *const KernelMemos,
        candidates,
        found: u32::MAX,
    };
    // SAFETY: `compare` has bpf_loop's callback signature; `check` outlives the call and the
    // memo entry stays valid while this program runs.
    unsafe {
        bpf_loop(
            SLOTS as u32 * STEPS_PER_SLOT,
            compare as *mut c_void,
            (&mut check as *mut Check).cast(),
            0,
        );
    }
    let found = memos.slots.get(check.found as usize)?;
    Some(found.stack_id)
}

#[repr(C)]
struct Check {
    memos: *const KernelMemos,
    /// Slots still in the running, one bit each.
    candidates: u32,
    /// The first slot all of whose words matched.
    found: u32,
}

/// Step `slot * STEPS_PER_SLOT + chunk` compares words `4 * chunk ..` of that slot; a slot is
/// dropped at its first difference, and the first slot to match to its end wins.
#[inline(never)]
extern "C" fn compare(step: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop hands back `recognise`'s `Check`.
    let check = unsafe { &mut *(ctx as *mut Check) };
    let Some(work) = WORK.get(0) else {
        return 1;
    };
    let slot = (step as u32 / STEPS_PER_SLOT) as usize & (SLOTS - 1);
    if check.candidates & (1 << slot) == 0 {
        return 0;
    }
    // SAFETY: the memo entry stays valid while the caller runs.
    let memo = unsafe { &(*check.memos).slots[slot] };
    for j in 0..WORDS_PER_STEP {
        let n = (step as u32 % STEPS_PER_SLOT) * WORDS_PER_STEP + j;
        if n >= memo.count {
            check.found = slot as u32;
            return 1;
        }
        let i = n as usize & (MEMO_FRAMES - 1);
        if work.copy[memo.words[i] as usize & (REGION_WORDS - 1)] != memo.values[i] {
            check.candidates &= !(1 << slot);
            return 0;
        }
    }
    if (step as u32 % STEPS_PER_SLOT) == STEPS_PER_SLOT - 1 {
        // All MEMO_FRAMES words matched.
        check.found = slot as u32;
        return 1;
    }
    0
}

/// Records where the frames of the unwind just left in `SCRATCH[Switch]` lie, as this
/// thread's memo for this syscall. Gives up (keeping no memo) unless the root frame is right
/// below the user registers and every other frame but a short prefix is found above `ctx`, in
/// order.
#[inline(always)]
fn remember(place: &Place, stack_id: u64, frames: u64) {
    if frames < 2 || frames > (MEMO_FRAMES as u64 + MAX_PREFIX as u64 + 1) {
        return;
    }
    let Some(root) = frame(frames - 1) else {
        return;
    };
    if read_kernel(place.regs.wrapping_sub(8)) != Some(root) {
        return;
    }
    let Some(work) = WORK.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU working space owned by this program while it runs.
    let work = unsafe { &mut *work };
    let words = ((place.regs - place.ctx) / 8) as u32;
    let Some(words) = copy_region(work, place.ctx, words) else {
        return;
    };
    work.frames = (frames - 1) as u32;
    work.next = 0;
    work.skipped = 0;
    work.memo.count = 0;
    work.memo.span = 0;
    // SAFETY: `scan` has bpf_loop's callback signature and takes no state of ours.
    unsafe {
        bpf_loop(
            words.div_ceil(WORDS_PER_STEP),
            scan as *mut c_void,
            core::ptr::null_mut(),
            0,
        );
    }
    if work.next != work.frames || work.memo.count == 0 {
        return;
    }
    work.memo.stack_id = stack_id;
    work.memo.root = root;
    match KERNEL_MEMO.get_ptr_mut(&place.key) {
        // The newest first: the others move down a slot, the oldest is forgotten.
        // SAFETY: the entry is this thread's, written by its own switch-outs only.
        Some(memos) => unsafe {
            let slots = &mut (*memos).slots;
            slots[3] = slots[2];
            slots[2] = slots[1];
            slots[1] = slots[0];
            slots[0] = work.memo;
        },
        None => {
            // Slots 1.. of `fresh` stay empty: only slot 0 is ever written.
            work.fresh.slots[0] = work.memo;
            let _ = KERNEL_MEMO.insert(&place.key, &work.fresh, 0);
        }
    }
}

/// Looks for the next frames in words `step * 4 ..` of the copy, lowest first.
#[inline(never)]
extern "C" fn scan(step: u64, _ctx: *mut c_void) -> i64 {
    let (Some(work), Some(unwound)) = (WORK.get_ptr_mut(0), SCRATCH.get(Scratch::Switch as u32))
    else {
        return 1;
    };
    // SAFETY: per-CPU working space owned by this program while it runs.
    let work = unsafe { &mut *work };
    for j in 0..WORDS_PER_STEP {
        let word = step as u32 * WORDS_PER_STEP + j;
        if work.next >= work.frames {
            return 1;
        }
        let value = work.copy[word as usize & (REGION_WORDS - 1)];
        // The first frames may lie below `ctx`: until a frame is found, a later one found
        // first means those before it are that prefix.
        let mut k = 0;
        while k <= MAX_PREFIX {
            let candidate = work.next + k;
            if (k > 0 && (work.memo.count != 0 || work.skipped + k > MAX_PREFIX))
                || candidate >= work.frames
            {
                break;
            }
            // The mask proves the bound on the register used for the access.
            if unwound.frames.get(candidate as usize & 127) == Some(&value) {
                let n = work.memo.count;
                // Masked, and checked only after: a check first would let LLVM drop the mask
                // the verifier needs.
                let i = n as usize & (MEMO_FRAMES - 1);
                work.memo.words[i] = word as u16;
                work.memo.values[i] = value;
                if n >= MEMO_FRAMES as u32 {
                    // More frames than a memo holds: give up.
                    work.next = u32::MAX;
                    return 1;
                }
                work.memo.count = n + 1;
                work.memo.span = word + 1;
                work.skipped += k;
                work.next = candidate + 1;
                break;
            }
            k += 1;
        }
    }
    0
}

/// Copies `words` words from `from` into the working copy (at most `REGION_WORDS`); the words
/// copied.
#[inline(always)]
fn copy_region(work: &mut Work, from: u64, words: u32) -> Option<u32> {
    let words = if words > REGION_WORDS as u32 {
        REGION_WORDS as u32
    } else {
        words
    };
    if words == 0 {
        return None;
    }
    // Through map memory, so LLVM cannot drop the mask as redundant: it proves the size to the
    // verifier on the very register the call uses (1..=4096 either way).
    // SAFETY: a field of the per-CPU working space.
    let words = unsafe {
        core::ptr::write_volatile(&mut work.copy_words, words);
        core::ptr::read_volatile(&work.copy_words)
    };
    let bytes = ((words.wrapping_mul(8).wrapping_sub(1)) & (REGION_WORDS as u32 * 8 - 1)) + 1;
    // SAFETY: at most sizeof(copy) bytes into it; the helper faults safely.
    let ret = unsafe {
        bpf_probe_read_kernel(work.copy.as_mut_ptr().cast(), bytes, from as *const c_void)
    };
    (ret == 0).then_some(words)
}

/// Frame `index` of the unwind in `SCRATCH[Switch]`.
#[inline(always)]
fn frame(index: u64) -> Option<u64> {
    let buf = SCRATCH.get(Scratch::Switch as u32)?;
    buf.frames.get(index as usize).copied()
}

#[inline(always)]
fn read_kernel(addr: u64) -> Option<u64> {
    let mut v = 0u64;
    // SAFETY: 8 bytes into `v`; the helper faults safely.
    let ret =
        unsafe { bpf_probe_read_kernel((&mut v as *mut u64).cast(), 8, addr as *const c_void) };
    (ret == 0).then_some(v)
}
