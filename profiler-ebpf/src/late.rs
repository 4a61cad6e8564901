//! Samples of a process the kernel has no mapping table for yet: an exec moments ago. User
//! space reads the new program's mapping records and uploads its table within a few
//! milliseconds, but a process that lives 40 ms takes a few samples before that, and frame
//! pointers alone lose their callers. Such a sample leaves its registers and the top 4 KiB of
//! its stack in `LATE_SAMPLES` instead of being aggregated; user space unwinds it with the same
//! rows once the table is in (perf's `--call-graph dwarf`, for a process's first moments
//! only). When the ring is full the sample takes the usual path (counted: `LateRingFull`).

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, generated::bpf_probe_read_user},
    macros::map,
    maps::RingBuf,
    programs::PerfEventContext,
};
use core::ffi::c_void;
use profiler_common::{Counter, LATE_STACK_WORDS, LateSample};

use crate::{maps::count, unwind};

/// 64 samples of 4 KiB: user space reads it every tick, and a new process needs it only until
/// its table is in (sized by the loader).
#[map]
pub static LATE_SAMPLES: RingBuf = RingBuf::with_byte_size(256 << 10, 0);

/// Writes the current sample whole; false when it must be aggregated as usual (no registers,
/// or no room).
#[inline(never)]
pub fn record(
    ctx: &PerfEventContext,
    tid: u32,
    tgid: u32,
    kernel_stack: u64,
    period_ns: u64,
) -> bool {
    // Plain loads from the context (see `unwind::user_regs`): the interrupted registers when
    // the sample hit user mode.
    // SAFETY: `ctx.ctx` is the perf_event program's context.
    let (cs, ip, sp, bp) = unsafe {
        let regs = &(*ctx.ctx).regs;
        (regs.cs, regs.rip, regs.rsp, regs.rbp)
    };
    let (ip, sp, bp) = if cs & 3 == 3 {
        (ip, sp, bp)
    } else {
        // In the kernel (a page fault, a syscall): the registers saved at kernel entry, read
        // out of line — inlined, LLVM merges this load with the context's above into one
        // instruction on two kinds of pointer, which the verifier refuses.
        let mut regs = [0u64; 3];
        if !entry_regs(&mut regs) {
            return false;
        }
        (regs[0], regs[1], regs[2])
    };
    let Some(mut entry) = LATE_SAMPLES.reserve::<LateSample>(0) else {
        count(Counter::LateRingFull);
        return false;
    };
    let rec = entry.as_mut_ptr();
    // SAFETY: `rec` is the reserved record, ours until submitted; each field is written once
    // and the stack by the helper, which fills what it cannot read with zeros.
    unsafe {
        (*rec).tid = tid;
        (*rec).tgid = tgid;
        (*rec).time_ns = bpf_ktime_get_ns();
        (*rec).kernel_stack = kernel_stack;
        (*rec).period_ns = period_ns;
        (*rec).ip = ip;
        (*rec).sp = sp;
        (*rec).bp = bp;
        (*rec).len = copy_stack((&raw mut (*rec).stack).cast(), sp);
    }
    entry.submit(0);
    count(Counter::LateSamples);
    true
}

/// The current task's user registers saved at kernel entry: rip, rsp, rbp.
#[inline(never)]
fn entry_regs(out: &mut [u64; 3]) -> bool {
    // SAFETY: no context pointer is involved; the helper reads the current task's pt_regs.
    match unsafe { unwind::user_regs(None) } {
        Some(regs) => {
            *out = [regs.ip, regs.sp, regs.bp];
            true
        }
        None => false,
    }
}

/// Copies the top of the stack from `sp`: all 4 KiB, or, near the top of the stack (a new
/// process's first frames), up to the end of sp's page, which is mapped if sp is. The bytes
/// copied.
#[inline(always)]
fn copy_stack(dst: *mut c_void, sp: u64) -> u64 {
    const FULL: u32 = (LATE_STACK_WORDS * 8) as u32;
    // SAFETY: `dst` holds FULL bytes.
    if unsafe { bpf_probe_read_user(dst, FULL, sp as *const c_void) } == 0 {
        return u64::from(FULL);
    }
    let to_page_end = (4096 - (sp & 4095)) as u32;
    if to_page_end == 0 || to_page_end > FULL {
        return 0;
    }
    // SAFETY: as above, fewer bytes.
    if unsafe { bpf_probe_read_user(dst, to_page_end, sp as *const c_void) } == 0 {
        u64::from(to_page_end)
    } else {
        0
    }
}
