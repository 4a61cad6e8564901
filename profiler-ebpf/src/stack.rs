//! Stacks → stack ids. Frames are hashed here and stored once in `STACKS`, so aggregation
//! keys stay 24 bytes and a stack table collision never loses a stack (a hash map chains where
//! `BPF_MAP_TYPE_STACK_TRACE` would answer -EEXIST).
//!
//! User stacks come from frame pointers (`bpf_get_stack`) today; the in-kernel `.eh_frame`
//! unwinder plugs in at [`user_stack`], filling the same scratch stack before [`store`].

use core::mem::size_of;

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_F_USER_STACK, bpf_perf_event_data},
    helpers::generated::bpf_get_stack,
};
use profiler_common::{
    Counter, HASH_SEED, MAX_STACK_DEPTH, Stack, config_flags, hash_finish, hash_step, stack_id,
};

use crate::{
    maps::{SCRATCH, STACKS, Scratch, count},
    unwind,
};

/// `BPF_NOEXIST` for map updates.
const NOEXIST: u64 = 1;
/// `EEXIST`: another CPU stored the same stack first.
const EEXIST: i32 = 17;

const FRAMES_BYTES: u32 = (size_of::<u64>() * MAX_STACK_DEPTH) as u32;

/// The current task's kernel stack.
#[inline(always)]
pub fn kernel_stack<C: EbpfContext>(ctx: &C, scratch: Scratch) -> u64 {
    from_helper(ctx, scratch, 0, Some(Counter::KernelStackFailed))
}

/// The current task's user stack: from `.eh_frame` rows when the loader provided them
/// (`--unwind dwarf`, the default), else from frame pointers. `sample` is the perf_event
/// context when called from the sampler.
#[inline(always)]
pub fn user_stack<C: EbpfContext>(
    ctx: &C,
    scratch: Scratch,
    sample: Option<*const bpf_perf_event_data>,
) -> u64 {
    if crate::config().flags & config_flags::DWARF_UNWIND == 0 {
        return from_helper(
            ctx,
            scratch,
            BPF_F_USER_STACK as u64,
            Some(Counter::UserStackFailed),
        );
    }
    // SAFETY: `sample` is the perf_event context when given.
    let Some((ip, sp, bp)) = (unsafe { unwind::user_regs(sample) }) else {
        count(Counter::UserStackFailed);
        return stack_id::LOST_FETCH;
    };
    let n = unwind::unwind(scratch, ip, sp, bp);
    let Some(buf) = SCRATCH.get_ptr_mut(scratch as u32) else {
        return stack_id::LOST_FETCH;
    };
    // SAFETY: the per-CPU scratch stack the unwinder just filled.
    store(unsafe { &mut *buf }, n)
}

/// The stacks (user, kernel) of a waker: any task, often one without user space (an idle CPU
/// taking an interrupt), so a failure is expected and is not a loss of the target's data.
#[inline(always)]
pub fn waker_stacks<C: EbpfContext>(ctx: &C, scratch: Scratch, user: bool) -> (u64, u64) {
    let kernel = from_helper(ctx, scratch, 0, None);
    let user = if user {
        user_stack(ctx, scratch, None)
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

#[inline(always)]
fn from_helper<C: EbpfContext>(
    ctx: &C,
    scratch: Scratch,
    flags: u64,
    failed: Option<Counter>,
) -> u64 {
    let Some(buf) = SCRATCH.get_ptr_mut(scratch as u32) else {
        return stack_id::LOST_FETCH;
    };
    // SAFETY: a per-CPU slot owned by this program while it runs (see `Scratch`).
    let buf = unsafe { &mut *buf };
    // SAFETY: `frames` is FRAMES_BYTES long; the helper writes at most that and zero-fills the
    // rest.
    let ret = unsafe {
        bpf_get_stack(
            ctx.as_ptr(),
            buf.frames.as_mut_ptr().cast(),
            FRAMES_BYTES,
            flags,
        )
    };
    if ret < 0 {
        if let Some(failed) = failed {
            count(failed);
        }
        return stack_id::LOST_FETCH;
    }
    store(buf, ret as u64 / size_of::<u64>() as u64)
}

/// Hashes `buf.frames[..len]` and makes sure the stack table holds it. Returns its id.
#[inline(always)]
pub fn store(buf: &mut Stack, len: u64) -> u64 {
    if len == 0 {
        return stack_id::EMPTY;
    }
    let mut hash = HASH_SEED;
    for i in 0..MAX_STACK_DEPTH {
        if i as u64 >= len {
            break;
        }
        hash = hash_step(hash, buf.frames[i]);
    }
    let id = stack_id::from_hash(hash_finish(hash));
    // SAFETY: read-only lookup; the value is not kept.
    if unsafe { STACKS.get(&id) }.is_some() {
        return id;
    }
    buf.len = len;
    match STACKS.insert(&id, &*buf, NOEXIST) {
        Ok(()) => id,
        Err(e) if e == -EEXIST => id,
        Err(_) => {
            count(Counter::StackTableFull);
            stack_id::LOST_TABLE_FULL
        }
    }
}
