//! Goroutine waits of Go targets. User space attaches `go_park` to the target binary's
//! `runtime.gopark` and `go_execute` to its `runtime.execute`, per target process: a
//! goroutine parks (a channel, a mutex, the network poller, a timer …) with its stack and the
//! runtime's wait reason, and the wait ends when the scheduler runs that goroutine again. The
//! two are paired by the goroutine's `g` pointer, which is stable while it is parked. The wait
//! so measured includes the goroutine's time in the run queue after it was readied. A wait
//! that ended is aggregated at the goroutine's next park, unless that park continues it
//! (`GO_REPARK_NS`); user space takes the ones still pending after the window.
//!
//! Registers: Go's internal register ABI (amd64, Go 1.17 and later) passes integer arguments
//! in rax, rbx, rcx, rdi, rsi, r8, r9, r10, r11 and keeps the running goroutine's `g` in r14.
//! So `gopark(unlockf, lock, reason, …)` has its `reason` (a uint8 `waitReason`) in rcx, and
//! `execute(gp, inheritTime)` its `gp` in rax. User space attaches only to binaries of Go
//! versions with that ABI.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{map, uprobe},
    maps::{HashMap, PerCpuArray},
    programs::ProbeContext,
};
use core::intrinsics::AtomicOrdering;
use profiler_common::{
    BPF_NOEXIST, Counter, EEXIST, GO_REPARK_NS, GoPark, GoWaitKey, GoWaitValue, WAIT_HIST_BUCKETS,
    config_flags, hist_bucket,
};

use crate::{
    maps::{NO_PREALLOC, Scratch, capture_start, count, opaque},
    stack,
    targets::is_target,
    timeline,
};

/// Goroutines parked now, by `g` pointer. Sized by the loader.
#[map]
pub static GO_PARKED: HashMap<u64, GoPark> = HashMap::with_max_entries(65_536, 0);

/// Goroutine waits per process, stack and reason (entries of 3.3 KiB: allocated as used).
#[map]
pub static GO_WAITS: HashMap<GoWaitKey, GoWaitValue> =
    HashMap::with_max_entries(4_096, NO_PREALLOC);

/// Per Go process, the wait reasons (bit `reason`, reasons below 64) whose re-park at the same
/// place continues a wait: `select`, `IO wait`, the semaphores under a mutex. Not a sleep: a
/// loop of `time.Sleep` is one wait per call. Set by user space from the binary's reason
/// names; a process without an entry merges none.
#[map]
pub static GO_MERGE: HashMap<u32, u64> = HashMap::with_max_entries(1_024, 0);

/// Where a new `GO_WAITS` value is built: too large for the BPF stack. All zeros between uses.
#[map]
static GO_NEW_WAIT: PerCpuArray<GoWaitValue> = PerCpuArray::with_max_entries(1, 0);

#[uprobe]
pub fn go_park(ctx: ProbeContext) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !is_target(tgid) || capture_start().is_none() {
        return 0;
    }
    // SAFETY: a uprobe's context is the task's user registers.
    let (g, reason) = unsafe { ((*ctx.regs).r14, (*ctx.regs).rcx & 0xff) };
    if g == 0 {
        return 0;
    }
    count(Counter::GoParks);
    // At the function's entry: the unwinder's rows (Go's `.debug_frame`) start from the
    // return address at sp, so gopark's caller (chanrecv, selectgo, netpollblock …) is kept.
    let user_stack = stack::user_stack(&ctx, Scratch::Goroutine, None, None);
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let reason = reason as u32;
    if let Some(last) = GO_PARKED.get_ptr_mut(&g) {
        // SAFETY: a live map value; only this goroutine's parks and runs write it, and a
        // goroutine runs on one thread at a time.
        let last = unsafe { &mut *last };
        if last.end_ns != 0 {
            if last.user_stack == user_stack
                && last.reason == reason
                && last.tgid == tgid
                && now.saturating_sub(last.end_ns) < GO_REPARK_NS
                && merges(tgid, reason)
            {
                last.end_ns = 0;
                return 0;
            }
            let key = GoWaitKey {
                tgid: last.tgid,
                reason: last.reason,
                user_stack: last.user_stack,
            };
            let ns = last.end_ns.saturating_sub(last.ts_ns);
            add_go_wait(&key, ns);
            let cfg = crate::config();
            if cfg.flags & config_flags::TIMELINE != 0 && ns >= cfg.timeline_min_ns {
                timeline::record_go_wait(g, last);
            }
        }
    }
    let park = GoPark {
        ts_ns: now,
        end_ns: 0,
        user_stack,
        tgid,
        reason,
    };
    if GO_PARKED.insert(&g, &park, 0).is_err() {
        count(Counter::GoParkedFull);
    }
    0
}

#[uprobe]
pub fn go_execute(ctx: ProbeContext) -> u32 {
    if capture_start().is_none() {
        return 0;
    }
    // SAFETY: a uprobe's context is the task's user registers.
    let g = unsafe { (*ctx.regs).rax };
    let Some(park) = GO_PARKED.get_ptr_mut(&g) else {
        return 0;
    };
    // SAFETY: a live map value, written only by this goroutine's parks and runs.
    unsafe {
        if (*park).end_ns == 0 {
            (*park).end_ns = bpf_ktime_get_ns();
        }
    }
    0
}

/// Whether a re-park with `reason` continues the wait (`GO_MERGE`).
#[inline(always)]
fn merges(tgid: u32, reason: u32) -> bool {
    // SAFETY: a plain read of a map value.
    let mask = unsafe { GO_MERGE.get(&tgid) }.copied().unwrap_or(0);
    reason < 64 && (mask >> (reason & 63)) & 1 == 1
}

#[inline(always)]
fn add_go_wait(key: &GoWaitKey, ns: u64) {
    let bucket = opaque(hist_bucket(ns) as u64) as usize;
    if bump(key, ns, bucket) {
        return;
    }
    let Some(new) = GO_NEW_WAIT.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU scratch; uprobe programs do not nest on one CPU (the kernel skips a
    // kprobe-type program while another runs there).
    let new = unsafe { &mut *new };
    if bucket >= WAIT_HIST_BUCKETS {
        return;
    }
    new.total_ns = ns;
    new.count = 1;
    new.min_ns = ns;
    new.max_ns = ns;
    if let Some(b) = new.hist.buckets.get_mut(bucket) {
        *b = 1;
    }
    let inserted = GO_WAITS.insert(key, &*new, BPF_NOEXIST);
    new.total_ns = 0;
    new.count = 0;
    new.min_ns = 0;
    new.max_ns = 0;
    if let Some(b) = new.hist.buckets.get_mut(bucket) {
        *b = 0;
    }
    match inserted {
        Ok(()) => {}
        // Another CPU added the key in between: add to it.
        Err(e) if e == -EEXIST => {
            bump(key, ns, bucket);
        }
        Err(_) => {
            count(Counter::GoWaitsFull);
        }
    }
}

/// Adds one wait of `ns` to an existing entry; false if there is none.
#[inline(always)]
fn bump(key: &GoWaitKey, ns: u64, bucket: usize) -> bool {
    let Some(v) = GO_WAITS.get_ptr_mut(key) else {
        return false;
    };
    // The BPF target has no atomic types with read-modify-write: the intrinsic with its result
    // unused is BPF's atomic add. Goroutines of one site park and run on every CPU at once.
    // SAFETY: valid, aligned fields of a live map value; `get_mut` bounds the bucket.
    unsafe {
        core::intrinsics::atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(
            &mut (*v).total_ns,
            ns,
        );
        core::intrinsics::atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&mut (*v).count, 1);
        // Not atomic: an extreme lost to a race is one wait's, seen again in the histogram.
        if ns > (*v).max_ns {
            (*v).max_ns = ns;
        }
        if ns < (*v).min_ns {
            (*v).min_ns = ns;
        }
        if let Some(b) = (*v).hist.buckets.get_mut(bucket) {
            core::intrinsics::atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(b, 1);
        }
    }
    true
}
