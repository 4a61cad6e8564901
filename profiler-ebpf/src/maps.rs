//! Maps shared by the programs. Each static's name is the one in `profiler_common::names`;
//! the loader resizes them with `map_max_entries` from the command line.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
};
use profiler_common::{
    Control, Counter, RunqueueHist, SampleKey, SampleValue, SiteKey, Stack, Thread, WaitHist,
    WaitKey, WaitValue, WakerKey, WakerValue,
};

// Every hash map is preallocated: an insert from sched_switch (IRQs off, run-queue lock held)
// into a BPF_F_NO_PREALLOC map draws on a small per-CPU cache that is refilled later, so bursts
// of new keys fail with -ENOMEM (seen here at capture start). Sizes are set by the loader.

#[map]
pub static SAMPLES: HashMap<SampleKey, SampleValue> = HashMap::with_max_entries(65_536, 0);

#[map]
pub static STACKS: HashMap<u64, Stack> = HashMap::with_max_entries(32_768, 0);

#[map]
pub static WAITS: HashMap<WaitKey, WaitValue> = HashMap::with_max_entries(32_768, 0);

/// Per thread, one entry for its stats and its open wait: each side of a context switch looks
/// the thread up once.
#[map]
pub static THREADS: HashMap<u32, Thread> = HashMap::with_max_entries(65_536, 0);

#[map]
pub static WAKERS: HashMap<WakerKey, WakerValue> = HashMap::with_max_entries(32_768, 0);

/// Blocked-time distribution per blocking site, shared by the site's threads (updated with
/// atomic adds).
#[map]
pub static SITE_HISTS: HashMap<SiteKey, WaitHist> = HashMap::with_max_entries(4_096, 0);

/// Run-queue delay distributions, indexed by [`RunqueueHist`].
#[map]
pub static RUNQUEUE_HISTS: PerCpuArray<WaitHist> =
    PerCpuArray::with_max_entries(RunqueueHist::COUNT, 0);

#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

#[map]
pub static CONTROL: Array<Control> = Array::with_max_entries(1, 0);

/// One scratch stack per program so that a sample interrupting a tracepoint program on the
/// same CPU cannot overwrite a stack being hashed.
#[map]
pub static SCRATCH: PerCpuArray<Stack> = PerCpuArray::with_max_entries(Scratch::COUNT, 0);

/// `--verify-memos`: the stack id a memo recognised (0: none), kept in map memory across the
/// full unwind that checks it, so the verifier sees one path through that unwind instead of a
/// "recognised" and a "not recognised" copy (which together exceed its budget). Index 0 for
/// user stacks, 1 for kernel stacks.
#[map]
pub static RECOGNISED: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);

/// Remembers (`Some`) or reads back (`None`) what a memo recognised; see [`RECOGNISED`].
#[inline(always)]
pub fn recognised(side: u32, set: Option<u64>) -> u64 {
    let Some(slot) = RECOGNISED.get_ptr_mut(side) else {
        return 0;
    };
    // SAFETY: per-CPU slot owned by this program while it runs.
    unsafe {
        match set {
            Some(id) => {
                core::ptr::write_volatile(slot, id);
                id
            }
            None => core::ptr::read_volatile(slot),
        }
    }
}

/// Where a new site histogram is built: at 3.3 KiB it does not fit the BPF stack. All zeros
/// between uses.
#[map]
pub static SCRATCH_HIST: PerCpuArray<WaitHist> = PerCpuArray::with_max_entries(1, 0);

#[derive(Clone, Copy)]
#[repr(u32)]
pub enum Scratch {
    Sample = 0,
    Switch = 1,
    Wakeup = 2,
}

impl Scratch {
    const COUNT: u32 = 3;
}

/// Adds one to a loss or event counter and returns its previous value on this CPU (0 means
/// "first time here", worth one log line).
#[inline(always)]
pub fn count(counter: Counter) -> u64 {
    match COUNTERS.get_ptr_mut(counter as u32) {
        Some(slot) => {
            // SAFETY: per-CPU slot; programs that could interleave on one CPU only ever add,
            // and a lost increment under nesting is preferable to an atomic on every event.
            unsafe {
                let before = *slot;
                *slot = before + 1;
                before
            }
        }
        None => 0,
    }
}

/// Adds `n` to `counter` (same caveat as [`count`]).
#[inline(always)]
pub fn add(counter: Counter, n: u64) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: as in `count`.
        unsafe { *slot += n };
    }
}

/// The capture window: `Some(start_ns)` while programs should record.
#[inline(always)]
pub fn capture_start() -> Option<u64> {
    let control = CONTROL.get(0)?;
    if control.start_ns == 0 || control.stop_ns != 0 {
        return None;
    }
    Some(control.start_ns)
}
