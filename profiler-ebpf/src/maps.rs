//! Maps shared by the programs. Each static's name is the one in `profiler_common::names`;
//! the loader resizes them with `map_max_entries` from the command line.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
};
use profiler_common::{
    BPF_NOEXIST, Control, Counter, EEXIST, RunqueueHist, SampleKey, SampleValue, SiteKey, Stack,
    Thread, WaitEntry, WaitHist, WaitKey, WaitStart, WakerKey, WakerValue,
};

// The tables of small entries are preallocated: an insert from sched_switch (IRQs off,
// run-queue lock held) into a BPF_F_NO_PREALLOC map draws on a small per-CPU cache that an
// irq_work refills once IRQs are on again, so a burst of new keys in one program run can
// fail with -ENOMEM (seen here at capture start, where each CPU's cache holds one element).
// The tables of large entries (stacks, site histograms, mapping tables) are not: their
// memory follows what the capture finds, not the worst case the loader sized them for. A
// switch inserts at most three stacks and one histogram, fewer than the cache's low mark
// (7 and 2 elements), and the loader fills every CPU's cache before attaching
// (`probes::warm_allocators`). Sizes are set by the loader.

/// `BPF_F_NO_PREALLOC` (include/uapi/linux/bpf.h): entries are allocated as inserted.
pub const NO_PREALLOC: u32 = 1;

#[map]
pub static SAMPLES: HashMap<SampleKey, SampleValue> = HashMap::with_max_entries(65_536, 0);

#[map]
pub static STACKS: HashMap<u64, Stack> = HashMap::with_max_entries(32_768, NO_PREALLOC);

#[map]
pub static WAITS: HashMap<WaitKey, WaitEntry> = HashMap::with_max_entries(32_768, 0);

/// Per thread, one entry for its stats and its open wait: each side of a context switch looks
/// the thread up once.
#[map]
pub static THREADS: HashMap<u32, Thread> = HashMap::with_max_entries(65_536, 0);

#[map]
pub static WAKERS: HashMap<WakerKey, WakerValue> = HashMap::with_max_entries(32_768, 0);

/// Per thread, the time of its waits the wait table had no room for (written only when it
/// is full): shown as lost, never as time on the CPU. Its own table, not a field of
/// `THREADS`: a larger thread entry costs every switch.
#[map]
pub static LOST_WAITS: HashMap<u32, u64> = HashMap::with_max_entries(4_096, 0);

/// Adds `ns` to thread `tid`'s lost wait time. Out of line (a BPF subprogram): inline, each
/// of its outcomes would have the rest of `sched_switch` verified once more, and the
/// verifier's budget was exceeded.
#[inline(never)]
pub fn add_lost_wait(tid: u32, ns: u64) {
    match LOST_WAITS.get_ptr_mut(&tid) {
        // SAFETY: keyed by the thread, whose switch-outs run on one CPU at a time.
        Some(lost) => unsafe { *lost += ns },
        None => {
            if LOST_WAITS.insert(&tid, &ns, BPF_NOEXIST).is_err() {
                count(Counter::LostWaitsFull);
            }
        }
    }
}

/// Blocked-time distribution per blocking site, shared by the site's threads (updated with
/// atomic adds).
#[map]
pub static SITE_HISTS: HashMap<SiteKey, WaitHist> = HashMap::with_max_entries(4_096, NO_PREALLOC);

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

/// Values parked in map memory across a stretch of code, so the verifier sees them as unknown
/// numbers rather than following each of their possible origins through that code: a stack id
/// that came from one of several stack paths, carried through the wait accounting, would make
/// it verify the accounting once per path (together more than its budget). Indexed by
/// [`Stash`].
#[map]
pub static STASH: PerCpuArray<u64> = PerCpuArray::with_max_entries(Stash::COUNT, 0);

#[derive(Clone, Copy)]
#[repr(u32)]
pub enum Stash {
    /// `--verify-memos`: the user stack a memo recognised (0: none) while a full unwind checks it.
    UserRecognised = 0,
    /// The same for kernel stacks.
    KernelRecognised = 1,
    /// The stacks of the wait a switch-out begins, until it is written to the thread's entry.
    UserStack = 2,
    KernelStack = 3,
    /// [`opaque`]'s slot.
    Opaque = 4,
    /// What the wait a switch-out begins is on (`crate::resource`).
    Resource = 5,
}

impl Stash {
    const COUNT: u32 = 6;
}

/// `v`, as a number the verifier knows nothing about: a value computed along many branches
/// (a histogram bucket from a binary search, a time split by several minimums) would otherwise
/// make it verify everything after it once per branch.
#[inline(always)]
pub fn opaque(v: u64) -> u64 {
    stash(Stash::Opaque, v);
    unstash(Stash::Opaque)
}

/// Parks `v` in `slot` (this CPU's).
#[inline(always)]
pub fn stash(slot: Stash, v: u64) {
    if let Some(p) = STASH.get_ptr_mut(slot as u32) {
        // SAFETY: per-CPU slot owned by this program while it runs.
        unsafe { core::ptr::write_volatile(p, v) };
    }
}

/// What [`stash`] parked in `slot` (0 if nothing could be).
#[inline(always)]
pub fn unstash(slot: Stash) -> u64 {
    match STASH.get_ptr_mut(slot as u32) {
        // SAFETY: as in `stash`.
        Some(p) => unsafe { core::ptr::read_volatile(p) },
        None => 0,
    }
}

/// Where a thread's first entry is built before it is inserted: with the programs' other
/// locals, a `Thread` on the stack passes the BPF stack's 512 bytes. One per [`Scratch`], so
/// that a sample interrupting a tracepoint program cannot overwrite its entry.
#[map]
pub static NEW_THREAD: PerCpuArray<Thread> = PerCpuArray::with_max_entries(Scratch::COUNT, 0);

/// The zeroed per-CPU [`NEW_THREAD`] entry of `scratch`'s programs.
#[inline(always)]
pub fn new_thread(scratch: Scratch) -> Option<&'static mut Thread> {
    let p = NEW_THREAD.get_ptr_mut(scratch as u32)?;
    // SAFETY: a per-CPU map value, used by this program on this CPU only until it inserts it
    // (programs of one kind do not nest on one CPU).
    unsafe {
        core::ptr::write_bytes(p, 0, 1);
        Some(&mut *p)
    }
}

/// Inserts a thread's first entry. Another CPU, or the start snapshot seeding from user space,
/// may have created it since this program looked it up: that entry stands, and the next cycle
/// it closes covers what this event would have begun (the scheduler's counters place the
/// time). Only a full table loses anything: counted, and the counter's value before returned
/// (0: the first loss on this CPU), `None` when nothing was lost. Counting the lost race as a
/// full table reported "thread table full" for a 64-thread process in a 2 048-entry table.
#[inline(always)]
pub fn insert_thread(tid: u32, thread: &Thread) -> Option<u64> {
    match THREADS.insert(&tid, thread, BPF_NOEXIST) {
        Err(e) if e != -EEXIST => Some(count(Counter::ThreadsFull)),
        _ => None,
    }
}

/// Where a switch-out builds the wait it begins, for `switch_account` to store: 96 bytes that
/// on the stack counted against the 512 that `sched_switch` shares with the subprograms it
/// calls (see `config`).
#[map]
pub static NEW_WAIT: PerCpuArray<WaitStart> = PerCpuArray::with_max_entries(1, 0);

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
    /// The Go runtime's uprobes (`goroutine.rs`).
    Goroutine = 3,
}

impl Scratch {
    pub const COUNT: u32 = 4;
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

/// The drain epoch's parity, which every key of the aggregate tables carries (see
/// `Control::epoch`). Read where a key is built, not carried from the program's start: a
/// value kept across the switch accounting made the verifier go through it once per path.
#[inline(always)]
pub fn parity() -> u32 {
    CONTROL.get(0).map_or(0, |c| c.parity())
}
