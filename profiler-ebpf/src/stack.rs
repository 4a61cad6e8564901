//! Stacks → stack ids. Frames are hashed here and stored once in `STACKS`, so aggregation
//! keys stay 24 bytes and a stack table collision never loses a stack (a hash map chains where
//! `BPF_MAP_TYPE_STACK_TRACE` would answer -EEXIST).
//!
//! User stacks come from frame pointers (`bpf_get_stack`) today; the in-kernel `.eh_frame`
//! unwinder plugs in at [`user_stack`], filling the same scratch stack before [`store`].

use core::{ffi::c_void, mem::size_of};

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_F_USER_STACK, bpf_perf_event_data},
    helpers::bpf_get_current_pid_tgid,
    helpers::generated::{bpf_get_stack, bpf_loop},
};
use profiler_common::{
    Counter, HASH_SEED, MAX_STACK_DEPTH, config_flags, hash_finish, hash_step, stack_id,
};

use crate::{
    maps::{SCRATCH, STACKS, Scratch, add, count},
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
    memo: bool,
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
    // A thread switching out again where it stopped before (the same syscall of the same loop,
    // or preemption on the way back from it) has the same stack if the words that stack was
    // unwound from are unchanged: recognise it instead of walking it again.
    let key = unwind::MemoKey::new(bpf_get_current_pid_tgid() as u32, ip, sp);
    let copy_len = unwind::copy_stack(scratch, sp);
    if memo {
        if let Some(id) = unwind::memo_lookup(&key, bp, scratch, copy_len) {
            count(Counter::UnwindMemoHits);
            return id;
        }
        count(Counter::UnwindMemoMisses);
    }
    let (n, hash) = unwind::unwind(scratch, ip, sp, bp, copy_len, memo);
    add(Counter::UnwindFrames, n);
    let id = store_hashed(scratch, n, hash);
    if memo && id & stack_id::RESERVED == 0 {
        unwind::memo_store(&key, scratch, id);
    }
    id
}

/// The stacks (user, kernel) of a waker: any task, often one without user space (an idle CPU
/// taking an interrupt), so a failure is expected and is not a loss of the target's data.
#[inline(always)]
pub fn waker_stacks<C: EbpfContext>(ctx: &C, scratch: Scratch, user: bool) -> (u64, u64) {
    let kernel = from_helper(ctx, scratch, 0, None);
    let user = if user {
        user_stack(ctx, scratch, None, false)
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
    store(scratch, ret as u64 / size_of::<u64>() as u64)
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
    let len = if len > MAX_STACK_DEPTH as u64 {
        MAX_STACK_DEPTH as u64
    } else {
        len
    };
    // A bpf_loop rather than a plain loop: the verifier then checks one step once, instead of
    // 127 steps on every path that reaches here (which blows its instruction budget).
    // SAFETY: `hash_frame` has bpf_loop's callback signature; `hashing` outlives the call.
    unsafe {
        bpf_loop(
            len as u32,
            hash_frame as *mut c_void,
            (&mut hashing as *mut Hashing).cast(),
            0,
        );
    }
    store_hashed(scratch, len, hashing.hash)
}

/// Makes sure the stack table holds `SCRATCH[scratch].frames[..len]`, whose frame hash is
/// `hash`. Returns its id.
#[inline(always)]
pub fn store_hashed(scratch: Scratch, len: u64, hash: u64) -> u64 {
    if len == 0 {
        return stack_id::EMPTY;
    }
    let len = if len > MAX_STACK_DEPTH as u64 {
        MAX_STACK_DEPTH as u64
    } else {
        len
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
    let Some(buf) = SCRATCH.get(hashing.scratch) else {
        return 1;
    };
    // `get`, not indexing: 127 frames, and a bounds-check panic cannot be verified.
    let Some(&frame) = buf.frames.get(index as usize) else {
        return 1;
    };
    hashing.hash = hash_step(hashing.hash, frame);
    0
}
