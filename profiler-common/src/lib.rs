//! Wire types shared by the eBPF programs (`profiler-ebpf`) and the loader (`profiler`).
//!
//! Everything here is `#[repr(C)]` with fixed-width fields and explicit padding: the same bytes
//! are written by the kernel side and read back by user space through BPF maps. Names of maps,
//! programs and load-time globals exist once, here; the eBPF statics carry the same names.
#![no_std]

/// Deepest stack the kernel helpers and our stack table keep (the kernel's
/// `PERF_MAX_STACK_DEPTH` default is 127 as well).
pub const MAX_STACK_DEPTH: usize = 127;

/// `TASK_COMM_LEN` in the kernel.
pub const COMM_LEN: usize = 16;

/// `BPF_NOEXIST`: a map update that only creates (include/uapi/linux/bpf.h).
pub const BPF_NOEXIST: u64 = 1;

/// `EEXIST`, the errno of a map insert (`BPF_NOEXIST`) whose key another CPU inserted first;
/// helpers return it negated.
pub const EEXIST: i32 = 17;

/// Where process `tgid` is in the target bitmap: (word, bit mask).
#[inline(always)]
pub const fn target_bit(tgid: u32) -> (u32, u64) {
    (tgid >> 6, 1 << (tgid & 63))
}

/// Value of [`names::MAP_PROCS`]: what happened to a target process during the capture.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcEvent {
    /// The target process that forked it (0: not forked during the capture).
    pub parent: u32,
    /// Execs since the capture began: each one replaces its mappings.
    pub execs: u32,
    /// When it was forked (CLOCK_MONOTONIC; 0: before the capture).
    pub forked_ns: u64,
    /// When its last thread exited (0: still running).
    pub exited_ns: u64,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), u32 and u64 fields, no padding.
unsafe impl aya::Pod for ProcEvent {}

/// Buckets of the wait-time histograms, see [`hist_bucket`].
pub const WAIT_HIST_BUCKETS: usize = 2 + HIST_OCTAVES * HIST_SUB_BUCKETS;
/// Powers of two covered: 2^10 ns (1 µs) up to 2^36 ns (69 s); longer waits share the last
/// bucket, whose values are bounded by the exact maximum.
pub const HIST_OCTAVES: usize = 26;
/// log2 of [`HIST_SUB_BUCKETS`].
pub const HIST_SUB_LOG2: u32 = 5;
/// Linear sub-buckets per power of two: a bucket is at most 1/32 (3.1 %) of its lower bound
/// wide, so a value read from its middle is within 1.6 %.
pub const HIST_SUB_BUCKETS: usize = 1 << HIST_SUB_LOG2;
/// log2 of the histogram's first bucket bound (1024 ns).
pub const HIST_MIN_LOG2: u32 = 10;

/// Names of maps, programs and globals as the loader looks them up in the object file.
pub mod names {
    /// perf_event program: one on-CPU sample.
    pub const PROG_SAMPLE: &str = "on_cpu_sample";
    /// tp_btf program on `sched_switch`: off-CPU intervals and exact on-CPU time.
    pub const PROG_SWITCH: &str = "sched_switch";
    /// Task iterator: the state and stacks of every target thread when the capture starts.
    pub const PROG_SNAPSHOT: &str = "snapshot_tasks";
    /// tp_btf programs on `sched_waking` / `sched_wakeup_new`: end of a sleep, start of the
    /// wait for a CPU, and who woke the thread. `sched_waking` fires in the waker's context;
    /// `sched_wakeup` may fire later on the wakee's CPU, from an IPI or the idle loop, where
    /// the waker is no longer known.
    pub const PROG_WAKEUP: &str = "sched_waking";
    pub const PROG_WAKEUP_NEW: &str = "sched_wakeup_new";

    /// `HashMap<SampleKey, SampleValue>`: on-CPU samples aggregated in the kernel.
    pub const MAP_SAMPLES: &str = "SAMPLES";
    /// `HashMap<u64, Stack>`: every stack seen, keyed by its id (see [`super::stack_id`]).
    pub const MAP_STACKS: &str = "STACKS";
    /// `HashMap<WaitKey, WaitEntry>`: finished off-CPU waits aggregated in the kernel.
    pub const MAP_WAITS: &str = "WAITS";
    /// `HashMap<u32 tid, Thread>`: per thread, its name and exact on-CPU time, and the wait
    /// it is in right now.
    pub const MAP_THREADS: &str = "THREADS";
    /// `PerCpuArray<u64>` indexed by [`super::Counter`].
    pub const MAP_COUNTERS: &str = "COUNTERS";
    /// `Array<Control>` with one entry: the capture window.
    pub const MAP_CONTROL: &str = "CONTROL";
    /// `PerCpuArray<Stack>`: scratch space for one stack per program (the BPF stack is 512 B).
    pub const MAP_SCRATCH: &str = "SCRATCH";
    /// `HashMap<WakerKey, WakerValue>`: who woke each blocking site.
    pub const MAP_WAKERS: &str = "WAKERS";
    /// `HashMap<SiteKey, WaitHist>`: the distribution of blocked times per blocking site
    /// (state and stacks, all threads together).
    pub const MAP_SITE_HISTS: &str = "SITE_HISTS";
    /// Per thread, time of waits the wait table had no room for.
    pub const MAP_LOST_WAITS: &str = "LOST_WAITS";
    /// The kernel stacks' and the unwinder's memos (LRU).
    pub const MAP_KERNEL_MEMO: &str = "KERNEL_MEMO";
    pub const MAP_UNWIND_MEMO: &str = "UNWIND_MEMO";
    /// `PerCpuArray<WaitHist>` indexed by [`super::RunqueueHist`]: run-queue delays.
    pub const MAP_RUNQUEUE_HISTS: &str = "RUNQUEUE_HISTS";
    /// `Array<unwind::RowChunk>`: every unwind row, in chunks.
    pub const MAP_UNWIND_ROWS: &str = "UNWIND_ROWS";
    /// `HashMap<u32 tgid, unwind::ProcMappings>`: each target process's executable mappings.
    pub const MAP_PROC_MAPPINGS: &str = "PROC_MAPPINGS";
    /// `Array<u32>` with one entry: bumped after every change of `PROC_MAPPINGS`, so the
    /// unwinder's memos made before it are not used again.
    pub const MAP_TABLES_EPOCH: &str = "TABLES_EPOCH";
    /// `Array<u64>`: the target set, one bit per process id (see [`super::target_bit`]).
    pub const MAP_TARGETS: &str = "TARGETS";
    /// `HashMap<u32 tgid, ProcEvent>`: what happened to target processes (forked, exec'd,
    /// exited) since user space last looked.
    pub const MAP_PROCS: &str = "PROCS";
    /// `RingBuf`: the timeline's records ([`super::TimelineWait`], [`super::TimelineSample`]),
    /// read by user space while the capture runs.
    pub const MAP_TIMELINE: &str = "TIMELINE";
    /// `RingBuf`: on-CPU samples of processes without a mapping table yet
    /// ([`super::LateSample`]), read by user space every tick.
    pub const MAP_LATE_SAMPLES: &str = "LATE_SAMPLES";
    /// tp_btf programs that keep the target set: a target's new process joins it
    /// (`sched_process_fork`), an exec or exit is noted for user space.
    pub const PROG_FORK: &str = "sched_process_fork";
    pub const PROG_EXEC: &str = "sched_process_exec";
    pub const PROG_EXIT: &str = "sched_process_exit";

    /// Load-time globals (set with `EbpfLoader::override_global`).
    pub const GLOBAL_CONFIG: &str = "CONFIG";
    /// `[u64; 2 * IRQ_ENTRY_RANGES]`: `[start, end)` pairs of interrupt entry text, where a
    /// waker's kernel stack stops.
    pub const GLOBAL_IRQ_ENTRY: &str = "IRQ_ENTRY";
}

/// Load-time configuration of the eBPF programs, one global.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Words of the target bitmap (`MAP_TARGETS`): process ids up to `64 * target_words`.
    pub target_words: u32,
    /// `offsetof(struct task_struct, pid)`, read from the running kernel's BTF: Rust eBPF has
    /// no CO-RE relocations, so user space resolves field offsets and hands them in.
    pub task_pid_offset: u32,
    /// `offsetof(struct task_struct, tgid)`.
    pub task_tgid_offset: u32,
    /// `offsetof(struct task_struct, comm)`.
    pub task_comm_offset: u32,
    /// `offsetof(struct task_struct, __state)`.
    pub task_state_offset: u32,
    /// `offsetof(struct task_struct, se.sum_exec_runtime)`: the thread's CPU time, kept by the
    /// scheduler itself.
    pub task_exec_offset: u32,
    /// `offsetof(struct task_struct, se.cfs_rq)`: the CFS run queue a task is on (this
    /// CPU's, or its task group's on this CPU, for the current task).
    pub task_cfs_rq_offset: u32,
    /// `offsetof(struct cfs_rq, rq)`: the CPU's run queue.
    pub cfs_rq_rq_offset: u32,
    /// Offsets of the per-CPU variables `runqueues` and `__preempt_count` in the per-CPU area
    /// (`.data..percpu` in BTF): `rq - runqueues + __preempt_count` is this CPU's preempt
    /// count, which says whether a wakeup runs in a task or in an interrupt.
    pub percpu_runqueues: u32,
    pub percpu_preempt_count: u32,
    /// `offsetof(struct task_struct, sched_info.run_delay)`: the thread's time waiting on a
    /// run queue, kept by the scheduler itself (CONFIG_SCHED_INFO).
    pub task_run_delay_offset: u32,
    /// `offsetof(struct task_struct, on_cpu)`: whether a runnable task is on a CPU right now.
    pub task_on_cpu_offset: u32,
    /// Bit set of [`config_flags`].
    pub flags: u32,
    /// `offsetof(struct task_struct, start_time)`: when the task was created (CLOCK_MONOTONIC,
    /// `bpf_ktime_get_ns`'s clock).
    pub task_start_time_offset: u32,
    /// Waits shorter than this are not aggregated (`--min-block-us`).
    pub min_block_ns: u64,
    /// Waits longer than this are not aggregated (`--max-block-us`); `u64::MAX` = no limit.
    pub max_block_ns: u64,
    /// With [`config_flags::TIMELINE`]: waits at least this long (blocked and runnable
    /// together) are written to the timeline one by one (`--timeline-resolution-us`).
    pub timeline_min_ns: u64,
}

/// Address ranges of interrupt entry code handed to the waker probe (see
/// [`names::GLOBAL_IRQ_ENTRY`]).
pub const IRQ_ENTRY_RANGES: usize = 4;

pub mod config_flags {
    /// Take user stacks.
    pub const USER_STACKS: u32 = 1 << 0;
    /// Take kernel stacks.
    pub const KERNEL_STACKS: u32 = 1 << 1;
    /// Take the stacks of wakers (`--wakers`).
    pub const WAKER_STACKS: u32 = 1 << 2;
    /// Unwind user stacks with the `.eh_frame` rows (frame pointers where there are none).
    pub const DWARF_UNWIND: u32 = 1 << 3;
    /// The preempt-count offsets in [`super::Config`] are valid.
    pub const PREEMPT_COUNT: u32 = 1 << 4;
    /// Context switches are traced (`--mode wall|off`): thread entries are created by the
    /// switch programs and the start snapshot, which give them their time baseline; the
    /// sampler only names threads it finds there.
    pub const SWITCHES: u32 = 1 << 5;
    /// Unwind every stack even when a memo recognises it, and count disagreements
    /// (`--verify-memos`, for tests).
    pub const VERIFY_MEMOS: u32 = 1 << 6;
    /// A target's new processes join the target set (not with `--no-children`).
    pub const FOLLOW_CHILDREN: u32 = 1 << 7;
    /// Write the timeline: each wait of at least `Config::timeline_min_ns` and each on-CPU
    /// sample, with its time, to [`super::names::MAP_TIMELINE`] (when `--timeline`, `--save` or
    /// `--report` asks for it, not with `--no-timeline`).
    pub const TIMELINE: u32 = 1 << 8;
    /// Wakers are not recorded (`--no-wakers`): `sched_waking` is neither loaded nor
    /// attached, `sched_switch` credits no waker and `sched_wakeup_new` (still attached: it
    /// starts a new thread's first cycle) names none. `WAKERS` is one entry.
    pub const NO_WAKERS: u32 = 1 << 9;
}

/// Where a wakeup ran (`WaitStart::waker_context`, `WakerKey::waker_context`).
pub mod waker_context {
    /// Not known (the preempt count could not be read): the waker's kernel stack decides.
    pub const UNKNOWN: u32 = 0;
    /// A thread woke the sleeper.
    pub const TASK: u32 = 1;
    /// Softirq processing (packets, timer wheel, block completions) on whatever task the CPU
    /// was running: that task did not wake anyone.
    pub const SOFTIRQ: u32 = 2;
    /// A hard interrupt or NMI (hrtimers expire here: nanosleep, epoll timeouts).
    pub const HARDIRQ: u32 = 3;

    /// `include/linux/preempt.h`: bits 8–15 count softirqs (bit 8: one is being served, the
    /// rest: bottom halves disabled), 16–19 hard interrupts, 20–23 NMIs. x86 keeps an inverted
    /// need-resched flag in bit 31, ignored here.
    const SOFTIRQ_OFFSET: u32 = 1 << 8;
    const HARDIRQ_MASK: u32 = 0xf << 16;
    const NMI_MASK: u32 = 0xf << 20;

    /// The context a preempt count stands for.
    #[inline(always)]
    pub const fn from_preempt_count(count: u32) -> u32 {
        if count & (HARDIRQ_MASK | NMI_MASK) != 0 {
            HARDIRQ
        } else if count & SOFTIRQ_OFFSET != 0 {
            SOFTIRQ
        } else {
            TASK
        }
    }
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only integer fields, no padding holes.
unsafe impl aya::Pod for Config {}

/// Stack ids. A real stack's id is a 63-bit hash of its frames; ids with the top bit set are
/// reserved for stacks that are not in the stack table, so the sample or wait that carries one
/// still counts (its time is never dropped) while the reason shows in the flame graph.
pub mod stack_id {
    /// No frames (a sample taken in user mode has no kernel stack, a kernel thread no user
    /// stack).
    pub const EMPTY: u64 = 0;
    /// Top bit: not a hash.
    pub const RESERVED: u64 = 1 << 63;
    /// The kernel helper or the unwinder failed to produce the stack.
    pub const LOST_FETCH: u64 = RESERVED | 1;
    /// The stack table was full.
    pub const LOST_TABLE_FULL: u64 = RESERVED | 2;
    /// Used by user space only: on-CPU time measured at context switches that no sample fell
    /// into (short bursts between samples).
    pub const UNSAMPLED: u64 = RESERVED | 3;
    /// Used by user space only: the user stack of a thread of another process (a waker),
    /// which the target's symbols cannot name.
    pub const FOREIGN: u64 = RESERVED | 4;
    /// Used by user space only: CPU time the scheduler charged to a woken thread before it
    /// was switched in (its CPU leaving idle, or finishing the task it preempted).
    pub const SWITCHING_IN: u64 = RESERVED | 5;
    /// Used by user space only: the profiler's own programs, run on the thread's CPU time.
    pub const PROFILER: u64 = RESERVED | 6;
    /// Used by user space only: time a thread held its CPU that the kernel charged neither
    /// as CPU time nor as run-queue wait (steal on a virtual machine).
    pub const UNCHARGED: u64 = RESERVED | 7;
    /// Used by user space only: time of a thread's waits that the wait table had no room
    /// for (its state unknown: shown as lost, never as time on the CPU).
    pub const LOST_WAITS: u64 = RESERVED | 8;
    /// `SNAPSHOT | i`: the stack user space recorded for thread snapshot `i` at capture start
    /// (a thread already blocked when the capture began has no switch-out event).
    pub const SNAPSHOT: u64 = RESERVED | (1 << 32);

    /// Turns a frame hash into a stack id: never 0 and never reserved.
    #[inline(always)]
    pub const fn from_hash(hash: u64) -> u64 {
        let id = hash & !RESERVED;
        if id == EMPTY { 1 } else { id }
    }

    /// The snapshot index carried by a snapshot id.
    pub const fn snapshot_index(id: u64) -> Option<u32> {
        if id & SNAPSHOT == SNAPSHOT {
            Some(id as u32)
        } else {
            None
        }
    }
}

/// 64-bit frame hash (FNV-1a over 8-byte words, then a final avalanche). Shared so that the
/// eBPF side and the tests agree on ids.
#[inline(always)]
pub const fn hash_step(hash: u64, word: u64) -> u64 {
    (hash ^ word).wrapping_mul(0x0000_0100_0000_01b3)
}

/// Starting value of [`hash_step`].
pub const HASH_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// Final mix (murmur3's fmix64) so that stacks differing only in the last frame spread over
/// the whole id space.
#[inline(always)]
pub const fn hash_finish(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// One stack, as stored in [`names::MAP_STACKS`]: frames leaf first, the low 32 bits of `len`
/// of them valid, the rest zero. The high 32 bits of `len` hold the mapping-table generation
/// a user stack was unwound under (0 for kernel stacks and helper-fetched user stacks,
/// [`NO_TABLE_GENERATION`] for a walk whose process had no table): which layout's files name
/// its addresses.
/// The generation of a user stack walked while its process had no mapping table (an exec
/// moments ago, or a child forked before its parent's table was published): by frame pointers
/// alone, which in code built without them read on into garbage. Never a table's generation
/// (uploads count up from 1).
pub const NO_TABLE_GENERATION: u32 = u32::MAX;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Stack {
    pub len: u64,
    pub frames: [u64; MAX_STACK_DEPTH],
}

impl Stack {
    pub const fn frames(&self) -> &[u64] {
        let len = (self.len & 0xffff_ffff) as usize;
        let len = if len < MAX_STACK_DEPTH {
            len
        } else {
            MAX_STACK_DEPTH
        };
        self.frames.split_at(len).0
    }

    pub const fn generation(&self) -> u32 {
        (self.len >> 32) as u32
    }
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only u64 fields.
unsafe impl aya::Pod for Stack {}

/// Key of [`names::MAP_SAMPLES`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SampleKey {
    pub tid: u32,
    /// The drain epoch's parity ([`Control::epoch`]); 0 once drained.
    pub epoch: u32,
    pub user_stack: u64,
    pub kernel_stack: u64,
}

/// Value of [`names::MAP_SAMPLES`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleValue {
    pub count: u64,
    /// Sum of the sample periods in nanoseconds (cpu-clock counts time), so on-CPU time can be
    /// expressed in microseconds whatever the sampling policy.
    pub period_ns: u64,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only integer fields, explicit padding.
unsafe impl aya::Pod for SampleKey {}
#[cfg(feature = "aya")]
// SAFETY: repr(C), only u64 fields.
unsafe impl aya::Pod for SampleValue {}

/// Why a thread is off the CPU. Stored as `u32` in the wire types.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum WaitState {
    /// Interruptible sleep: sockets, futexes, epoll, nanosleep.
    Sleep = 1,
    /// Uninterruptible sleep: disk I/O, fsync, page faults, some kernel locks.
    Io = 2,
    /// Switched out while still runnable: preempted or yielded; waiting for a CPU.
    RunqueuePreempted = 3,
    /// Woken from a sleep and waiting for a CPU (filled in by the wakeup slot).
    RunqueueWoken = 4,
    /// Stopped, traced, parked, frozen.
    Other = 5,
}

impl WaitState {
    pub const ALL: [WaitState; 5] = [
        WaitState::Sleep,
        WaitState::Io,
        WaitState::RunqueuePreempted,
        WaitState::RunqueueWoken,
        WaitState::Other,
    ];

    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Sleep),
            2 => Some(Self::Io),
            3 => Some(Self::RunqueuePreempted),
            4 => Some(Self::RunqueueWoken),
            5 => Some(Self::Other),
            _ => None,
        }
    }

    /// The word used in `[off-cpu:<word>]` frames; both run-queue kinds fold together.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Sleep => "sleep",
            Self::Io => "io",
            Self::RunqueuePreempted | Self::RunqueueWoken => "runqueue",
            Self::Other => "other",
        }
    }
}

/// Task state bits of `include/linux/sched.h` (stable since 5.14).
pub mod task_state {
    pub const RUNNING: u32 = 0x0000;
    pub const INTERRUPTIBLE: u32 = 0x0001;
    pub const UNINTERRUPTIBLE: u32 = 0x0002;
    pub const EXIT_DEAD: u32 = 0x0010;
    pub const EXIT_ZOMBIE: u32 = 0x0020;
    pub const DEAD: u32 = 0x0080;
    pub const NOLOAD: u32 = 0x0400;
    pub const RTLOCK_WAIT: u32 = 0x1000;
}

/// A switch-out of a task that is exiting: it never switches back in.
#[inline(always)]
pub const fn is_exiting(prev_state: u32) -> bool {
    use task_state::*;
    prev_state & (DEAD | EXIT_DEAD | EXIT_ZOMBIE) != 0
}

/// Classifies a switch-out from `sched_switch`'s `prev_state` argument.
/// `None`: the task is exiting and will never switch back in.
///
/// Only a task still in TASK_RUNNING waits for a CPU. A task preempted between
/// set_current_state() and schedule() stays on the run queue, but it was on its way to the
/// sleep its state word names, and the kernel counts that time as neither CPU nor run-queue
/// time (`sched_info_depart` starts a run-queue wait only for a running task): it is that
/// sleep's time, as `/proc/<pid>/task/<tid>/schedstat` has it. [`wait_flags::PREEMPTED_ASLEEP`]
/// marks such a wait: not a wait of its own (the real one follows, or its wakeup came first).
#[inline(always)]
pub const fn classify_switch(prev_state: u32) -> Option<WaitState> {
    use task_state::*;
    if is_exiting(prev_state) {
        return None;
    }
    if prev_state == RUNNING {
        return Some(WaitState::RunqueuePreempted);
    }
    // TASK_IDLE (UNINTERRUPTIBLE | NOLOAD) is an idle wait that the kernel itself keeps out of
    // the load average: a sleep, not I/O.
    if prev_state & UNINTERRUPTIBLE != 0 && prev_state & NOLOAD == 0 {
        return Some(WaitState::Io);
    }
    if prev_state & (INTERRUPTIBLE | UNINTERRUPTIBLE | RTLOCK_WAIT) != 0 {
        return Some(WaitState::Sleep);
    }
    Some(WaitState::Other)
}

/// Key of [`names::MAP_WAITS`]: one blocking site of one thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaitKey {
    pub tid: u32,
    /// A [`WaitState`].
    pub state: u16,
    /// The drain epoch's parity ([`Control::epoch`]); 0 once drained.
    pub epoch: u16,
    pub user_stack: u64,
    pub kernel_stack: u64,
}

/// Value of [`names::MAP_WAITS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct WaitValue {
    pub total_ns: u64,
    pub count: u64,
    pub max_ns: u64,
    /// Shortest wait: with the maximum, it bounds every percentile read from a histogram.
    pub min_ns: u64,
}

impl WaitValue {
    /// No wait yet: a minimum of `u64::MAX` and a maximum of 0 leave any wait's as they are.
    pub const EMPTY: WaitValue = WaitValue {
        total_ns: 0,
        count: 0,
        max_ns: 0,
        min_ns: u64::MAX,
    };
}

/// Value of [`names::MAP_WAITS`] in the kernel: a blocking site's waits, and the time the
/// same waits then spent runnable before they got a CPU — which user space reads as the
/// site's [`WaitState::RunqueueWoken`] entry. One entry, so a woken wait costs one hash
/// lookup, not two. (A key whose own state is a run-queue wait uses `wait` only.)
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct WaitEntry {
    pub wait: WaitValue,
    pub runqueue: WaitValue,
}

impl WaitEntry {
    /// The entry as the waits it holds: its own, and its run-queue part under the same
    /// stacks with state [`WaitState::RunqueueWoken`], if it has one.
    pub fn split(&self, key: WaitKey) -> impl Iterator<Item = (WaitKey, WaitValue)> {
        let runqueue_key = WaitKey {
            state: WaitState::RunqueueWoken as u16,
            ..key
        };
        let own = (self.wait.total_ns != 0 || self.wait.count != 0).then_some((key, self.wait));
        let runqueue = (self.runqueue.total_ns != 0 || self.runqueue.count != 0)
            .then_some((runqueue_key, self.runqueue));
        own.into_iter().chain(runqueue)
    }
}

/// Key of [`names::MAP_SITE_HISTS`]: a blocking site, all threads together (percentiles are
/// reported per site; per thread the exact count, total, minimum and maximum remain).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SiteKey {
    /// A [`WaitState`].
    pub state: u32,
    /// The drain epoch's parity ([`Control::epoch`]); 0 once drained (saved captures name
    /// the field `_pad`, as it was before epochs).
    #[cfg_attr(feature = "serde", serde(rename = "_pad"))]
    pub epoch: u32,
    pub user_stack: u64,
    pub kernel_stack: u64,
}

/// A histogram of wait durations, see [`hist_bucket`]. 3.3 KiB: kept per blocking site, not
/// per thread and site.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitHist {
    pub buckets: [u32; WAIT_HIST_BUCKETS],
}

impl Default for WaitHist {
    fn default() -> Self {
        Self {
            buckets: [0; WAIT_HIST_BUCKETS],
        }
    }
}

/// Saved as its non-empty buckets, `[[bucket, count], …]`.
#[cfg(feature = "serde")]
impl serde::Serialize for WaitHist {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq as _;
        let used = self.buckets.iter().filter(|&&c| c != 0).count();
        let mut seq = s.serialize_seq(Some(used))?;
        for (i, &c) in self.buckets.iter().enumerate() {
            if c != 0 {
                seq.serialize_element(&(i as u32, c))?;
            }
        }
        seq.end()
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for WaitHist {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Buckets;
        impl<'de> serde::de::Visitor<'de> for Buckets {
            type Value = WaitHist;
            fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
                f.write_str("a list of [bucket, count] pairs")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<WaitHist, A::Error> {
                let mut h = WaitHist::default();
                while let Some((i, c)) = a.next_element::<(u32, u32)>()? {
                    let slot = h
                        .buckets
                        .get_mut(i as usize)
                        .ok_or_else(|| serde::de::Error::custom("histogram bucket out of range"))?;
                    *slot = c;
                }
                Ok(h)
            }
        }
        d.deserialize_seq(Buckets)
    }
}

/// Indexes of [`names::MAP_RUNQUEUE_HISTS`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunqueueHist {
    /// Waits for a CPU after a preemption.
    Preempted = 0,
    /// Waits for a CPU after a wakeup.
    Woken = 1,
}

impl RunqueueHist {
    pub const COUNT: u32 = 2;
}

/// Histogram bucket of a duration: a log2 histogram with [`HIST_SUB_BUCKETS`] linear
/// sub-buckets per power of two. Bucket 0 takes everything below 1 µs; bucket
/// `1 + 32·(e − 10) + s` takes `[2^e + s·2^(e−5), 2^e + (s+1)·2^(e−5))` ns; the last bucket
/// takes everything from 2^36 ns on.
#[inline(always)]
pub const fn hist_bucket(ns: u64) -> usize {
    if ns < (1 << HIST_MIN_LOG2) {
        return 0;
    }
    let e = log2_floor(ns);
    if e >= HIST_MIN_LOG2 + HIST_OCTAVES as u32 {
        return WAIT_HIST_BUCKETS - 1;
    }
    let sub = ((ns >> (e - HIST_SUB_LOG2)) & (HIST_SUB_BUCKETS as u64 - 1)) as usize;
    1 + (e - HIST_MIN_LOG2) as usize * HIST_SUB_BUCKETS + sub
}

/// Lower and upper bound (ns) of histogram bucket `i`; the last bucket's upper bound is its
/// lower bound (open-ended).
pub const fn hist_bucket_bounds(i: usize) -> (u64, u64) {
    if i == 0 {
        return (0, 1 << HIST_MIN_LOG2);
    }
    if i >= WAIT_HIST_BUCKETS - 1 {
        let lo = 1u64 << (HIST_MIN_LOG2 as usize + HIST_OCTAVES);
        return (lo, lo);
    }
    let e = HIST_MIN_LOG2 as usize + (i - 1) / HIST_SUB_BUCKETS;
    let sub = ((i - 1) % HIST_SUB_BUCKETS) as u64;
    let step = 1u64 << (e - HIST_SUB_LOG2 as usize);
    let lo = (1u64 << e) + sub * step;
    (lo, lo + step)
}

/// `floor(log2(v))` for v > 0, as a fixed binary search because BPF has no
/// count-leading-zeros instruction.
#[inline(always)]
pub const fn log2_floor(v: u64) -> u32 {
    let mut v = v;
    let mut b = 0u32;
    if v >= 1 << 32 {
        v >>= 32;
        b += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        b += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        b += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        b += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        b += 2;
    }
    if v >= 1 << 1 {
        b += 1;
    }
    b
}

/// The wait a thread is in right now ([`Thread::wait`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitStart {
    /// `bpf_ktime_get_ns()` at switch-out (CLOCK_MONOTONIC).
    pub ts_ns: u64,
    pub user_stack: u64,
    pub kernel_stack: u64,
    /// A [`WaitState`].
    pub state: u32,
    /// Bit set of [`wait_flags`].
    pub flags: u32,
    /// When `sched_waking` began to make the thread runnable again (0 = not seen: preempted,
    /// or the wakeup was missed); from here until switch-in it waits for a CPU.
    pub wake_ts_ns: u64,
    /// Which thread woke it (0: an interrupt).
    pub waker_tid: u32,
    pub waker_tgid: u32,
    pub waker_comm: [u8; COMM_LEN],
    /// The waker's stacks (with `--wakers`; otherwise `stack_id::EMPTY`, but for a short
    /// kernel stack of a hard interrupt, which tells a timer).
    pub waker_user_stack: u64,
    pub waker_kernel_stack: u64,
    /// A [`waker_context`] value.
    pub waker_context: u32,
    pub _pad: u32,
}

pub mod wait_flags {
    /// Inserted by user space from the start-of-capture snapshot.
    pub const SNAPSHOT: u32 = 1 << 0;
    /// Begun by a preemption of a task already in a sleep state (see
    /// [`classify_switch`](super::classify_switch)): its time counts in its state, but it is
    /// no wait of its own — not in the site's count, minimum, maximum or histogram.
    pub const PREEMPTED_ASLEEP: u32 = 1 << 1;
}

/// Key of [`names::MAP_WAKERS`]: one blocking site and one waker of it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakerKey {
    pub tid: u32,
    /// A [`WaitState`] (the blocking site's).
    pub state: u32,
    pub user_stack: u64,
    pub kernel_stack: u64,
    pub waker_tid: u32,
    pub waker_tgid: u32,
    pub waker_user_stack: u64,
    pub waker_kernel_stack: u64,
    /// A [`waker_context`] value.
    pub waker_context: u32,
    /// The drain epoch's parity ([`Control::epoch`]); 0 once drained.
    pub epoch: u32,
}

/// Value of [`names::MAP_WAKERS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakerValue {
    /// Wakeups of the site by this waker.
    pub count: u64,
    /// Blocked time those wakeups ended (switch-out to wakeup).
    pub total_ns: u64,
    pub waker_comm: [u8; COMM_LEN],
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), integer fields, no padding holes.
unsafe impl aya::Pod for WakerKey {}
#[cfg(feature = "aya")]
// SAFETY: repr(C), integer fields and a byte array, no padding.
unsafe impl aya::Pod for WakerValue {}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only integer fields, no padding holes.
unsafe impl aya::Pod for WaitKey {}
#[cfg(feature = "aya")]
// SAFETY: repr(C), only u64 fields.
unsafe impl aya::Pod for WaitValue {}
#[cfg(feature = "aya")]
// SAFETY: repr(C), two WaitValues: only u64 fields.
unsafe impl aya::Pod for WaitEntry {}
#[cfg(feature = "aya")]
// SAFETY: repr(C), integer fields, explicit padding.
unsafe impl aya::Pod for SiteKey {}
#[cfg(feature = "aya")]
// SAFETY: repr(C), an array of u32 (834 of them: a multiple of 2, so no tail padding).
unsafe impl aya::Pod for WaitHist {}
#[cfg(feature = "aya")]
// SAFETY: repr(C), only integer fields, explicit padding.
unsafe impl aya::Pod for WaitStart {}

/// Value of [`names::MAP_THREADS`]: everything kept per thread, in one entry so that each side
/// of a context switch looks a thread up once.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Thread {
    pub stats: ThreadStats,
    /// Open while `wait.ts_ns != 0`.
    pub wait: WaitStart,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C) of two Pod structs whose sizes are multiples of 8: no padding.
unsafe impl aya::Pod for Thread {}

/// A thread's name and time bookkeeping ([`Thread::stats`]).
///
/// Time is accounted per *cycle*: from one switch-out of the thread to the next (the first
/// cycle starts at the window start, or when the thread was created). See [`split_cycle`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadStats {
    pub comm: [u8; COMM_LEN],
    /// On-CPU time inside the window as the scheduler charges it (`se.sum_exec_runtime`),
    /// over the cycles closed so far.
    pub on_cpu_ns: u64,
    /// Of those cycles, the time between each switch-in and the following switch-out as the
    /// tracepoint saw them: what samples can see. The kernel also charges a woken thread for
    /// the time its CPU takes to switch to it (see ARCHITECTURE.md, "Time rules").
    pub traced_on_ns: u64,
    /// Time of the profiler's own programs that the kernel charged to this thread.
    pub overhead_ns: u64,
    /// Time the thread held its CPU that the scheduler charged neither as its CPU time nor
    /// as its run-queue wait: the hypervisor running another guest on that CPU (steal), or
    /// interrupts where the kernel accounts their time apart. See [`Cycle::uncharged_ns`].
    pub uncharged_ns: u64,
    /// Last switch-in (0: none seen).
    pub last_in_ns: u64,
    /// Last switch-out, or where the current cycle began (window start, thread creation);
    /// 0: no cycle begun.
    pub last_out_ns: u64,
    /// Context switches out of the CPU.
    pub switches: u64,
    /// `se.sum_exec_runtime` and `sched_info.run_delay` as far as the closed cycles used them
    /// (valid with [`thread_flags::BASELINE`]): the counters at `last_out_ns`, less what the
    /// last cycles could not take (left for the next), or more by what a preemption's CPU
    /// share took ahead of the counter (repaid by the next). Once the thread exited
    /// ([`thread_flags::EXITED`]), `last_exec_ns` is instead what its cycles counted ahead of
    /// `sum_exec_runtime` at its end, as an `i64` (never repaid: see [`exit_overcount_ns`]).
    pub last_exec_ns: u64,
    pub last_delay_ns: u64,
    /// Bit set of [`thread_flags`].
    pub flags: u32,
    /// The thread's process.
    pub tgid: u32,
}

/// CPU time an exited thread's cycles counted beyond what the scheduler charged it (its
/// `last_exec_ns` at exit, read as signed; 0 when they counted less or it has not exited).
pub const fn exit_overcount_ns(stats: &ThreadStats) -> u64 {
    if stats.flags & thread_flags::EXITED == 0 {
        return 0;
    }
    let over = stats.last_exec_ns as i64;
    if over > 0 { over as u64 } else { 0 }
}

pub mod thread_flags {
    /// `last_exec_ns`/`last_delay_ns` are the scheduler's counters at `last_out_ns`: the
    /// cycle now running is split by the kernel's own accounting.
    pub const BASELINE: u32 = 1 << 0;
    /// The thread exited (its last switch-out had it dead): nothing after `last_out_ns`.
    pub const EXITED: u32 = 1 << 1;
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), byte array of 16, u64 fields, two u32: no padding.
unsafe impl aya::Pod for ThreadStats {}

/// What is known about one cycle of a thread: from `from_ns` (a switch-out, or where the
/// thread's accounting began) to `to_ns` (the next switch-out, or the end of the window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleInput {
    pub from_ns: u64,
    pub to_ns: u64,
    /// The switch-in inside the cycle (0: none reported).
    pub in_ns: u64,
    /// The wakeup that ended the wait (0: none seen).
    pub wake_ns: u64,
    /// A wait began at `from_ns`; otherwise the thread was on the CPU from there on.
    pub waiting: bool,
    /// That wait is a wait for a CPU from the start (preempted, or just created).
    pub runqueue_wait: bool,
    /// `se.sum_exec_runtime` and `sched_info.run_delay` grew by these over the cycle, when
    /// known (`*_known`). Plain numbers, not `Option`s: LLVM computes with an `Option`'s
    /// payload before testing it, and the verifier rejects reading that undefined register.
    pub exec_delta: u64,
    pub exec_known: bool,
    pub delay_delta: u64,
    pub delay_known: bool,
}

/// How one cycle splits. `on_ns + runnable_ns + blocked_ns + uncharged_ns` is the cycle's
/// length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cycle {
    /// On the CPU, as the scheduler charges it when its counters are known.
    pub on_ns: u64,
    /// Switch-in to switch-out as the tracepoints saw it (`on_ns` when no switch-in was seen).
    pub traced_on_ns: u64,
    /// Waiting for a CPU.
    pub runnable_ns: u64,
    /// In the wait's own state (sleep, io, other) until it was made runnable.
    pub blocked_ns: u64,
    /// On the CPU by the tracepoints, but charged by the scheduler as neither CPU time nor
    /// run-queue wait: on a virtual machine, the host ran something else on the thread's
    /// CPU (`sum_exec_runtime` leaves steal out, with `CONFIG_PARAVIRT_TIME_ACCOUNTING`; so
    /// does interrupt time with `CONFIG_IRQ_TIME_ACCOUNTING`). Not part of the other three.
    pub uncharged_ns: u64,
}

/// The least time a cycle must lack from the scheduler's counters to be counted as
/// uncharged. The run queue's clock and the tracepoint clock differ by a few µs at a switch
/// (carried to the next cycle, see [`ThreadStats::last_exec_ns`]); a host takes a vCPU for
/// its own scheduler's slices, hundreds of µs and more.
pub const UNCHARGED_MIN_NS: u64 = 50_000;

/// The time rule. With the scheduler's counters, a cycle is on the CPU for as long as
/// `sum_exec_runtime` grew, runnable for as long as `run_delay` grew, and blocked for the
/// rest (a preemption: runnable for as long as `run_delay` grew, on the CPU for the rest):
/// the thread's figures then add up to `/proc/<pid>/task/<tid>/schedstat`, the caller
/// carrying what a cycle could not take over to the next. Time the thread held the CPU that
/// neither counter grew by, beyond the clocks' few µs ([`UNCHARGED_MIN_NS`]), is uncharged
/// (steal on a virtual machine): neither CPU time nor a wait. Without the counters (the first
/// cycle of a thread the start snapshot missed), the tracepoint times decide: on the CPU from
/// switch-in to switch-out, runnable from the wakeup to the switch-in.
pub const fn split_cycle(c: &CycleInput) -> Cycle {
    let cycle = c.to_ns.saturating_sub(c.from_ns);
    if !c.waiting {
        return Cycle {
            on_ns: cycle,
            traced_on_ns: cycle,
            runnable_ns: 0,
            blocked_ns: 0,
            uncharged_ns: 0,
        };
    }
    let switched_in = c.in_ns > c.from_ns && c.in_ns <= c.to_ns;
    let traced = if switched_in { c.to_ns - c.in_ns } else { 0 };
    if c.runqueue_wait && c.delay_known {
        // A wait for a CPU from the start: the kernel's run delay is its length, and the CPU
        // time is the rest of the cycle. The two clocks differ by a few µs at a switch; the
        // caller carries the difference to the next cycle (see `ThreadStats::last_exec_ns`).
        let runnable = min(c.delay_delta, cycle);
        let rest = cycle - runnable;
        let uncharged = if c.exec_known && rest > c.exec_delta + UNCHARGED_MIN_NS {
            rest - c.exec_delta
        } else {
            0
        };
        let on = rest - uncharged;
        return Cycle {
            on_ns: on,
            traced_on_ns: if switched_in {
                traced.saturating_sub(uncharged)
            } else {
                on
            },
            runnable_ns: runnable,
            blocked_ns: 0,
            uncharged_ns: uncharged,
        };
    }
    let on = if c.exec_known {
        min(c.exec_delta, cycle)
    } else {
        traced
    };
    let off = cycle - on;
    // The switch-in to switch-out stretch the scheduler charged less than it lasted.
    let uncharged = if c.exec_known && traced > on + UNCHARGED_MIN_NS {
        min(traced - on, off)
    } else {
        0
    };
    let off = off - uncharged;
    let runnable = if c.runqueue_wait {
        off
    } else if c.delay_known {
        min(c.delay_delta, off)
    } else {
        let end = if switched_in { c.in_ns } else { c.to_ns };
        if c.wake_ns >= c.from_ns && c.wake_ns < end {
            min(end - c.wake_ns, off)
        } else {
            0
        }
    };
    Cycle {
        on_ns: on,
        traced_on_ns: if switched_in { traced - uncharged } else { on },
        runnable_ns: runnable,
        blocked_ns: off - runnable,
        uncharged_ns: uncharged,
    }
}

const fn min(a: u64, b: u64) -> u64 {
    if a < b { a } else { b }
}

/// The single entry of [`names::MAP_CONTROL`]. Programs do nothing until `start_ns` is set and
/// nothing after `stop_ns` is set, so every program observes the same window and user space
/// drains maps that no longer change.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Control {
    pub start_ns: u64,
    pub stop_ns: u64,
    /// Drain epoch: the aggregate tables' keys carry its parity (`epoch & 1`). User space
    /// drains the tables while the capture runs: it bumps the epoch, and a tick later, when no
    /// program can still be writing them, reads and deletes the keys of the other parity. So
    /// the tables hold what happens between two drains, not the whole window.
    pub epoch: u64,
}

impl Control {
    /// The parity the programs put in the keys they write now.
    pub const fn parity(&self) -> u32 {
        (self.epoch & 1) as u32
    }
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only u64 fields.
unsafe impl aya::Pod for Control {}

/// One record written by the task iterator ([`names::PROG_SNAPSHOT`]) for every thread of
/// the target when the capture starts.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TaskSnapshot {
    pub tid: u32,
    /// `task_struct::__state`.
    pub state: u32,
    pub comm: [u8; COMM_LEN],
    /// `se.sum_exec_runtime` and `sched_info.run_delay`: where the thread's first cycle
    /// starts counting.
    pub exec_ns: u64,
    pub run_delay_ns: u64,
    /// `task_struct::on_cpu`: running right now (else, if runnable, waiting on a run queue).
    pub on_cpu: u32,
    /// Its process.
    pub tgid: u32,
    /// User registers saved at kernel entry (`task_pt_regs`): where user code stopped.
    pub user_ip: u64,
    pub user_sp: u64,
    pub user_bp: u64,
    /// Number of valid kernel frames.
    pub kernel_len: u64,
    pub kernel_frames: [u64; MAX_STACK_DEPTH],
}

/// What a timeline record is: the first field of every record in
/// [`names::MAP_TIMELINE`].
pub mod timeline_kind {
    /// A [`super::TimelineWait`].
    pub const WAIT: u32 = 1;
    /// A [`super::TimelineSample`].
    pub const SAMPLE: u32 = 2;
}

/// A timeline record: one wait of a target thread at least `Config::timeline_min_ns` long,
/// written by `sched_switch` at the switch-out that closes its cycle. The wait is blocked
/// (in `state`) for `blocked_ns` from `start_ns`, then runnable for `runnable_ns` (a wait for
/// a CPU from the start, `state` a run-queue state, is all `runnable_ns`): the same split
/// the aggregates have, from the scheduler's own counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelineWait {
    /// [`timeline_kind::WAIT`].
    pub kind: u32,
    pub tid: u32,
    /// The switch-out that began the wait (CLOCK_MONOTONIC; the window start for a wait the
    /// start snapshot seeded).
    pub start_ns: u64,
    pub blocked_ns: u64,
    pub runnable_ns: u64,
    pub user_stack: u64,
    pub kernel_stack: u64,
    /// The thread's CPU time in the window before the wait began (`ThreadStats::on_cpu_ns`
    /// then): between two records of a thread, the difference is its CPU time, the rest its
    /// shorter waits.
    pub cpu_before_ns: u64,
    /// A [`WaitState`].
    pub state: u16,
    /// Bit set of [`wait_flags`].
    pub flags: u16,
    /// Who made it runnable (0: an interrupt, or not seen).
    pub waker_tid: u32,
    /// When the waker made it runnable (`sched_waking`; 0: not seen). It can come well before
    /// `start_ns + blocked_ns`, which is when the scheduler queued the thread: a wakee on
    /// another CPU is queued by that CPU's IPI handler, hundreds of µs later when the CPU is
    /// an idle vCPU.
    pub waking_ns: u64,
}

/// A timeline record: one on-CPU sample of a target thread, with its time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelineSample {
    /// [`timeline_kind::SAMPLE`].
    pub kind: u32,
    pub tid: u32,
    pub ts_ns: u64,
    pub user_stack: u64,
    pub kernel_stack: u64,
}

/// Words of user stack a [`LateSample`] carries (4 KiB: a process's first moments, the
/// dynamic loader and `main`'s first calls, are shallow).
pub const LATE_STACK_WORDS: usize = 512;

/// An on-CPU sample of a process the kernel has no mapping table for yet (an exec moments
/// ago), written whole to [`names::MAP_LATE_SAMPLES`] instead of aggregated: its registers and
/// the top of its stack, unwound by user space with the same rows once the table exists.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LateSample {
    pub tid: u32,
    pub tgid: u32,
    /// When it was taken (CLOCK_MONOTONIC): user space unwinds it only with mapping records
    /// read after that.
    pub time_ns: u64,
    pub kernel_stack: u64,
    pub period_ns: u64,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Bytes of `stack` copied from `sp` (0: none could be read).
    pub len: u64,
    pub stack: [u64; LATE_STACK_WORDS],
}

/// Wire types of the in-kernel `.eh_frame` unwinder (x86_64).
///
/// User space turns each executable file's `.eh_frame` into sorted [`UnwindRow`]s: from a row's
/// `pc` until the next row's `pc`, how to find the canonical frame address (CFA) and the
/// caller's `rbp`; the return address is always at CFA − 8 on x86_64. A file's rows are
/// contiguous in a global row array stored in chunks of [`ROWS_PER_CHUNK`] rows (one array map
/// value each), so a binary search step costs one inlined array lookup. The target's mappings
/// ([`ProcMappings`]) say which rows cover which addresses.
pub mod unwind {
    /// `ucontext_t` offsets of the registers a signal frame saved, from the rsp of
    /// `__restore_rt` (x86_64: `struct sigcontext` inside `uc_mcontext` at offset 40; rbp is
    /// greg 10, rsp greg 15, rip greg 16). libc's CFI for `__restore_rt` says the same
    /// (`DW_OP_breg7 (rsp): 120 / 160 / 168`).
    pub const UC_RBP: u64 = 40 + 10 * 8;
    pub const UC_RSP: u64 = 40 + 15 * 8;
    pub const UC_RIP: u64 = 40 + 16 * 8;

    /// Rows per chunk (one `BPF_MAP_TYPE_ARRAY` value of 768 KiB).
    pub const ROWS_PER_CHUNK: usize = 1 << 16;
    /// Executable mappings of the target the unwinder can tell apart.
    pub const MAX_MAPPINGS: usize = 512;

    /// How to compute the CFA of a frame.
    pub mod cfa_kind {
        /// The return address is undefined: the outermost frame (`_start`, `clone3`).
        pub const END_OF_STACK: u8 = 0;
        /// CFA = rsp + offset.
        pub const RSP: u8 = 1;
        /// CFA = rbp + offset.
        pub const RBP: u8 = 2;
        /// PLT stub: CFA = rsp + 8, plus 8 more when `(rip & 15) >= offset` (the stub has
        /// pushed its relocation index). The standard `.plt` CFA expression.
        pub const PLT: u8 = 3;
        /// Signal trampoline (`__restore_rt`): the interrupted registers are in the
        /// `ucontext_t` at rsp; rip, rsp and rbp are read from there.
        pub const SIGNAL_FRAME: u8 = 4;
        /// A rule the unwinder cannot express: this frame falls back to frame pointers.
        pub const UNSUPPORTED: u8 = 5;
        /// No FDE covers this address (a gap between functions): frame pointers.
        pub const NO_INFO: u8 = 6;
        /// HotSpot's template interpreter (rows made from the JVM's code cache, not a file):
        /// an rbp-linked frame (caller's rbp at [rbp], return address at [rbp + 8]) whose
        /// `Method*` sits at rbp + `cfa_offset` and whose caller's stack pointer (the
        /// "sender sp") at rbp + `rbp_offset` (0: rbp + 16), the interpreter's frame layout
        /// read from the JVM's vmStructs. The frame is recorded as
        /// [`super::java_method_frame`] of that `Method*` instead of its pc, so user space can
        /// name the Java method.
        pub const HOTSPOT_INTERPRETER: u8 = 7;
        /// Code cache space that held no code when the JVM's cache was last read: code
        /// compiled since. Frame pointers, as `NO_INFO`, but counted
        /// ([`crate::Counter::JitGapFrames`]) so user space reads the cache again now
        /// instead of at its usual pace: a compiled frame without its row hides its caller.
        pub const JIT_GAP: u8 = 8;
    }

    /// Top 16 bits of a user frame that is a HotSpot `Method*`, not a pc (an interpreted
    /// Java frame). User addresses on x86_64 stay below 2^47, so no pc carries them.
    pub const JAVA_METHOD_TAG: u64 = 0x4a56 << 48;

    /// The frame recorded for an interpreted Java frame running `method`.
    pub const fn java_method_frame(method: u64) -> u64 {
        JAVA_METHOD_TAG | (method & 0x0000_ffff_ffff_ffff)
    }

    /// The `Method*` of a frame made by [`java_method_frame`].
    pub const fn java_method_of(frame: u64) -> Option<u64> {
        if frame & 0xffff_0000_0000_0000 == JAVA_METHOD_TAG {
            Some(frame & 0x0000_ffff_ffff_ffff)
        } else {
            None
        }
    }

    /// Where the caller's rbp is.
    pub mod rbp_kind {
        /// Not saved by this frame: the caller's rbp is the current rbp.
        pub const UNCHANGED: u8 = 0;
        /// Saved at CFA + `rbp_offset`.
        pub const AT_CFA_OFFSET: u8 = 1;
        /// Any other rule: the caller's rbp is unknown (frames above may fall back badly).
        pub const UNSUPPORTED: u8 = 2;
    }

    /// One unwind row; 12 bytes.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct UnwindRow {
        /// Address relative to the table's base (the lowest address any row of the file covers).
        pub pc: u32,
        pub cfa_offset: i32,
        pub rbp_offset: i16,
        /// One of [`cfa_kind`].
        pub cfa_kind: u8,
        /// One of [`rbp_kind`].
        pub rbp_kind: u8,
    }

    /// One chunk of the global row array.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct RowChunk {
        pub rows: [UnwindRow; ROWS_PER_CHUNK],
    }

    /// One executable mapping of the target.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ExecMapping {
        pub start: u64,
        pub end: u64,
        /// Subtract from a runtime address to get a row `pc`: the file's load bias plus its
        /// table base.
        pub bias: u64,
        /// Index of the file's first row in the global row array.
        pub first_row: u32,
        /// Rows of the file; 0 means no `.eh_frame`: unwind with frame pointers.
        pub row_count: u32,
        /// Pages (of `1 << ROW_PAGE_SHIFT` bytes of row pc) the file's page index covers; 0:
        /// no index (a JIT region), search all the rows. The index follows the rows in the
        /// global array: `pages + 1` rows whose `pc` is the index of the first row with a pc
        /// at or past that page's start (the last: `row_count`). A lookup then searches the
        /// few rows of one page, where a search of all of a large file's rows went through
        /// 17 of them, most a cache miss (2.4 µs of a full unwind's 15, each time).
        pub index_pages: u32,
        pub _pad: u32,
    }

    /// A page index entry per `1 << ROW_PAGE_SHIFT` bytes of code (see
    /// [`ExecMapping::index_pages`]): 4 KiB hold ~30 rows, the index is ~3 % of the rows.
    pub const ROW_PAGE_SHIFT: u32 = 12;

    /// The target's executable mappings sorted by `start`, `count` of them valid.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct ProcMappings {
        pub count: u32,
        /// Bumped by every upload: lookups cached in the kernel under another generation
        /// are stale.
        pub generation: u32,
        pub entries: [ExecMapping; MAX_MAPPINGS],
    }

    #[cfg(feature = "aya")]
    // SAFETY: repr(C), integer fields, no padding (4 + 4 + 2 + 1 + 1).
    unsafe impl aya::Pod for UnwindRow {}
    #[cfg(feature = "aya")]
    // SAFETY: an array of Pod rows.
    unsafe impl aya::Pod for RowChunk {}
    #[cfg(feature = "aya")]
    // SAFETY: repr(C), u64/u32 fields, no padding.
    unsafe impl aya::Pod for ExecMapping {}
    #[cfg(feature = "aya")]
    // SAFETY: repr(C), u32 fields then an array of Pod mappings (8-byte aligned at offset 8).
    unsafe impl aya::Pod for ProcMappings {}
}

/// Per-CPU loss and event counters, indexes of [`names::MAP_COUNTERS`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// On-CPU samples of the target.
    Samples = 0,
    /// Samples dropped because the sample map was full.
    SamplesMapFull,
    /// User stacks the helper or unwinder failed to produce.
    UserStackFailed,
    /// Kernel stacks the helper failed to produce.
    KernelStackFailed,
    /// Stacks not stored because the stack table was full.
    StackTableFull,
    /// Context switches of target threads (out).
    SwitchesOut,
    /// Finished waits aggregated.
    Waits,
    /// Waits dropped because the wait map was full.
    WaitsMapFull,
    /// Waits outside `--min-block-us`/`--max-block-us`.
    WaitsFiltered,
    /// Threads not tracked because the thread table was full.
    ThreadsFull,
    /// Switch-ins the kernel did not report (seen on this machine for switches away from some
    /// tasks); recovered from the thread's CPU time, so nothing is lost.
    MissedSwitchIns,
    /// Wakeups of target threads.
    Wakeups,
    /// Waker records dropped because the waker map was full.
    WakersMapFull,
    /// Switch-outs whose user stack was recognised from the thread's last unwind (same
    /// registers, same stack words) instead of unwound again.
    UnwindMemoHits,
    /// Switch-outs unwound in full.
    UnwindMemoMisses,
    /// User frames the `.eh_frame` unwinder produced.
    UnwindFrames,
    /// Row lookups the per-CPU row cache did not answer (each a binary search).
    RowCacheMisses,
    /// Switch-outs to sleep whose kernel stack was recognised from the thread's last one in
    /// the same syscall (same return addresses at the same places) instead of unwound.
    KernelMemoHits,
    /// Switch-outs to sleep whose kernel stack was unwound.
    KernelMemoMisses,
    /// Waits left out of their site's latency histogram because the histogram table was full
    /// (their time and count still count).
    SiteHistsFull,
    /// Processes of the target set whose events could not be recorded (process table full):
    /// a new process may be missed.
    ProcsFull,
    /// With `--verify-memos`: stacks a memo recognised that a full unwind disagreed with (the
    /// unwound one is kept). Must stay 0.
    MemoDisagreements,
    /// Threads whose lost wait time could not be recorded (that table full too): their
    /// missing time shows as nothing at all.
    LostWaitsFull,
    /// Set by user space: the kernel's mapping records it dropped (their ring was full), so
    /// a process that exited unseen may be unnamed.
    MappingRecordsLost,
    /// Set by user space: files whose unwind rows did not fit the row array (unwound by
    /// frame pointers).
    UnwindRowsNotLoaded,
    /// Set by user space: kernel memory the capture's maps held (their `memlock`), in bytes.
    KernelMemoryBytes,
    /// Set by user space: drains of the tables during the capture.
    Drains,
    /// Timeline records (waits and samples) written to the ring.
    TimelineRecords,
    /// Timeline records the ring had no room for (user space reads it every drain): the
    /// timeline of their threads has a hole there.
    TimelineRingFull,
    /// Set by user space: timeline records read beyond `--timeline-max-records` and dropped.
    TimelineDropped,
    /// Frames in a JVM's code cache where the last read of the cache found no code (JIT
    /// code compiled since, unwound by frame pointers until its rows are in).
    JitGapFrames,
    /// On-CPU samples written whole for user space to unwind (their process had no mapping
    /// table yet: an exec moments ago).
    LateSamples,
    /// Such samples the ring had no room for: unwound by frame pointers in the kernel.
    LateRingFull,
}

/// What a counter counts: something lost (the user must see it, with the flag that avoids it)
/// or an event (how the capture went).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterKind {
    Loss,
    Event,
}

impl Counter {
    pub const COUNT: u32 = 33;

    /// Every counter is one or the other: the match has no wildcard, so a new counter must be
    /// classified before it compiles.
    pub const fn kind(self) -> CounterKind {
        use Counter::*;
        match self {
            SamplesMapFull | UserStackFailed | KernelStackFailed | StackTableFull
            | WaitsMapFull | ThreadsFull | WakersMapFull | SiteHistsFull | ProcsFull
            | LostWaitsFull | MappingRecordsLost | UnwindRowsNotLoaded | TimelineRingFull
            | TimelineDropped => CounterKind::Loss,
            Samples | SwitchesOut | Waits | WaitsFiltered | MissedSwitchIns | Wakeups
            | UnwindMemoHits | UnwindMemoMisses | UnwindFrames | RowCacheMisses
            | KernelMemoHits | KernelMemoMisses | MemoDisagreements | KernelMemoryBytes
            | Drains | TimelineRecords | JitGapFrames | LateSamples | LateRingFull => {
                CounterKind::Event
            }
        }
    }

    /// The counter's name in reports (snake case).
    pub const fn name(self) -> &'static str {
        use Counter::*;
        match self {
            Samples => "samples",
            SamplesMapFull => "samples_map_full",
            UserStackFailed => "user_stack_failed",
            KernelStackFailed => "kernel_stack_failed",
            StackTableFull => "stack_table_full",
            SwitchesOut => "switches_out",
            Waits => "waits",
            WaitsMapFull => "waits_map_full",
            WaitsFiltered => "waits_filtered",
            ThreadsFull => "threads_full",
            MissedSwitchIns => "missed_switch_ins",
            Wakeups => "wakeups",
            WakersMapFull => "wakers_map_full",
            UnwindMemoHits => "unwind_memo_hits",
            UnwindMemoMisses => "unwind_memo_misses",
            UnwindFrames => "unwind_frames",
            RowCacheMisses => "row_cache_misses",
            KernelMemoHits => "kernel_memo_hits",
            KernelMemoMisses => "kernel_memo_misses",
            SiteHistsFull => "site_hists_full",
            MemoDisagreements => "memo_disagreements",
            ProcsFull => "procs_full",
            LostWaitsFull => "lost_waits_full",
            MappingRecordsLost => "mapping_records_lost",
            UnwindRowsNotLoaded => "unwind_rows_not_loaded",
            KernelMemoryBytes => "kernel_memory_bytes",
            Drains => "drains",
            TimelineRecords => "timeline_records",
            TimelineRingFull => "timeline_ring_full",
            TimelineDropped => "timeline_dropped",
            JitGapFrames => "jit_gap_frames",
            LateSamples => "late_samples",
            LateRingFull => "late_ring_full",
        }
    }

    /// For a loss: what was lost, and the flag that enlarges the table that filled (None:
    /// no flag helps).
    pub const fn loss(self) -> Option<(&'static str, Option<&'static str>)> {
        use Counter::*;
        match self {
            SamplesMapFull => Some(("samples: sample table full", Some("--max-keys"))),
            WaitsMapFull => Some(("waits: wait table full", Some("--max-keys"))),
            WakersMapFull => Some(("wakers: waker table full", Some("--max-keys"))),
            SiteHistsFull => Some((
                "wait latencies: site histogram table full",
                Some("--max-keys"),
            )),
            ThreadsFull => Some(("threads: thread table full", Some("--max-threads"))),
            ProcsFull => Some(("processes: process table full", Some("--max-processes"))),
            LostWaitsFull => Some(("lost wait time: its table full too", Some("--max-keys"))),
            MappingRecordsLost => Some(("mapping records: the kernel's ring was full", None)),
            UnwindRowsNotLoaded => Some((
                "files unwound by frame pointers: the unwind row array full",
                Some("--unwind-chunks"),
            )),
            StackTableFull => Some(("stacks: stack table full", Some("--max-stacks"))),
            TimelineRingFull => Some((
                "timeline records: ring buffer full",
                Some("--timeline-ring-kib"),
            )),
            TimelineDropped => Some((
                "timeline records: beyond the cap",
                Some("--timeline-max-records"),
            )),
            UserStackFailed => Some(("user stacks: unwinding failed", None)),
            KernelStackFailed => Some(("kernel stacks: unwinding failed", None)),
            _ => None,
        }
    }

    pub const ALL: [Counter; Self::COUNT as usize] = [
        Counter::Samples,
        Counter::SamplesMapFull,
        Counter::UserStackFailed,
        Counter::KernelStackFailed,
        Counter::StackTableFull,
        Counter::SwitchesOut,
        Counter::Waits,
        Counter::WaitsMapFull,
        Counter::WaitsFiltered,
        Counter::ThreadsFull,
        Counter::MissedSwitchIns,
        Counter::Wakeups,
        Counter::WakersMapFull,
        Counter::UnwindMemoHits,
        Counter::UnwindMemoMisses,
        Counter::UnwindFrames,
        Counter::RowCacheMisses,
        Counter::KernelMemoHits,
        Counter::KernelMemoMisses,
        Counter::SiteHistsFull,
        Counter::ProcsFull,
        Counter::MemoDisagreements,
        Counter::LostWaitsFull,
        Counter::MappingRecordsLost,
        Counter::UnwindRowsNotLoaded,
        Counter::KernelMemoryBytes,
        Counter::Drains,
        Counter::TimelineRecords,
        Counter::TimelineRingFull,
        Counter::TimelineDropped,
        Counter::JitGapFrames,
        Counter::LateSamples,
        Counter::LateRingFull,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_entry_splits_into_its_wait_and_its_runqueue_part() {
        extern crate std;
        use std::vec::Vec;
        let key = WaitKey {
            tid: 7,
            state: WaitState::Sleep as u16,
            epoch: 0,
            user_stack: 3,
            kernel_stack: 4,
        };
        let part = |total_ns, count| WaitValue {
            total_ns,
            count,
            max_ns: total_ns,
            min_ns: total_ns,
        };
        let both = WaitEntry {
            wait: part(10, 1),
            runqueue: part(2, 1),
        };
        let split: Vec<_> = both.split(key).collect();
        let runqueue_key = WaitKey {
            state: WaitState::RunqueueWoken as u16,
            ..key
        };
        assert_eq!(split, [(key, part(10, 1)), (runqueue_key, part(2, 1))]);
        // Woken and on a CPU at once: the wait alone.
        let no_runqueue = WaitEntry {
            wait: part(10, 1),
            runqueue: WaitValue::EMPTY,
        };
        assert_eq!(
            no_runqueue.split(key).collect::<Vec<_>>(),
            [(key, part(10, 1))]
        );
        // Only the run-queue part (a preemption on the way to the sleep: time, no count).
        let uncounted = WaitEntry {
            wait: WaitValue {
                total_ns: 5,
                ..WaitValue::EMPTY
            },
            runqueue: WaitValue::EMPTY,
        };
        assert_eq!(uncounted.split(key).count(), 1, "uncounted time is kept");
        let runqueue_only = WaitEntry {
            wait: WaitValue::EMPTY,
            runqueue: part(2, 1),
        };
        assert_eq!(
            runqueue_only.split(key).collect::<Vec<_>>(),
            [(runqueue_key, part(2, 1))]
        );
    }

    #[test]
    fn preempt_count_tells_task_softirq_and_hardirq() {
        use waker_context::*;
        // Preemption or bottom halves disabled in a task, need-resched clear (bit 31 set).
        assert_eq!(from_preempt_count(0), TASK);
        assert_eq!(from_preempt_count(0x8000_0002), TASK);
        assert_eq!(from_preempt_count(0x200), TASK);
        // Serving a softirq (bit 8), possibly with more disable levels on top.
        assert_eq!(from_preempt_count(0x100), SOFTIRQ);
        assert_eq!(from_preempt_count(0x8000_0301), SOFTIRQ);
        // A hard interrupt, or an NMI, over anything.
        assert_eq!(from_preempt_count(0x1_0000), HARDIRQ);
        assert_eq!(from_preempt_count(0x1_0101), HARDIRQ);
        assert_eq!(from_preempt_count(0x10_0000), HARDIRQ);
    }

    #[test]
    fn log2_floor_is_exact() {
        for b in 0..64 {
            assert_eq!(log2_floor(1u64 << b), b);
            if b > 0 {
                assert_eq!(log2_floor((1u64 << b) - 1), b - 1);
            }
        }
    }

    #[test]
    fn every_duration_falls_inside_its_bucket_bounds() {
        assert_eq!(hist_bucket(0), 0);
        assert_eq!(hist_bucket(1023), 0);
        assert_eq!(hist_bucket(1024), 1);
        // 20 ms = 2^24 + 0.19·2^24: octave 24, sub-bucket 6 of 32.
        assert_eq!(hist_bucket(20_000_000), 1 + 14 * 32 + 6);
        let mut ns = 1u64;
        while ns < (1 << 37) {
            for v in [ns, ns + ns / 3, ns * 2 - 1] {
                let b = hist_bucket(v);
                let (lo, hi) = hist_bucket_bounds(b);
                assert!(
                    v >= lo && (v < hi || b == WAIT_HIST_BUCKETS - 1),
                    "{v} in {b}: {lo}..{hi}"
                );
            }
            ns *= 2;
        }
        assert_eq!(hist_bucket(u64::MAX), WAIT_HIST_BUCKETS - 1);
        // Buckets tile the range without gaps.
        for b in 1..WAIT_HIST_BUCKETS - 1 {
            assert_eq!(hist_bucket_bounds(b - 1).1, hist_bucket_bounds(b).0);
        }
    }

    #[test]
    fn classify_covers_the_states_seen_at_sched_switch() {
        use task_state::*;
        assert_eq!(classify_switch(INTERRUPTIBLE), Some(WaitState::Sleep));
        assert_eq!(classify_switch(UNINTERRUPTIBLE), Some(WaitState::Io));
        // TASK_KILLABLE = WAKEKILL | UNINTERRUPTIBLE: still an uninterruptible wait.
        assert_eq!(
            classify_switch(0x100 | UNINTERRUPTIBLE),
            Some(WaitState::Io)
        );
        // TASK_IDLE
        assert_eq!(
            classify_switch(UNINTERRUPTIBLE | NOLOAD),
            Some(WaitState::Sleep)
        );
        assert_eq!(classify_switch(RUNNING), Some(WaitState::RunqueuePreempted));
        assert_eq!(classify_switch(0x4), Some(WaitState::Other));
        assert_eq!(classify_switch(DEAD), None);
    }

    fn cycle(waiting: bool, runqueue_wait: bool) -> CycleInput {
        CycleInput {
            from_ns: 1_000,
            to_ns: 11_000,
            in_ns: 8_000,
            wake_ns: 6_000,
            waiting,
            runqueue_wait,
            exec_delta: 0,
            exec_known: false,
            delay_delta: 0,
            delay_known: false,
        }
    }

    #[test]
    fn a_cycle_splits_by_the_schedulers_counters_when_known() {
        // 10 µs cycle: the kernel charged 4 µs of CPU and 1 µs of run-queue wait.
        let c = split_cycle(&CycleInput {
            exec_delta: 4_000,
            exec_known: true,
            delay_delta: 1_000,
            delay_known: true,
            ..cycle(true, false)
        });
        assert_eq!(
            c,
            Cycle {
                on_ns: 4_000,
                traced_on_ns: 3_000,
                runnable_ns: 1_000,
                blocked_ns: 5_000,
                uncharged_ns: 0
            }
        );
        // Counters beyond the cycle (read late) are capped by it.
        let c = split_cycle(&CycleInput {
            exec_delta: 50_000,
            exec_known: true,
            delay_delta: 50_000,
            delay_known: true,
            ..cycle(true, false)
        });
        assert_eq!((c.on_ns, c.runnable_ns, c.blocked_ns), (10_000, 0, 0));
    }

    #[test]
    fn a_cycle_without_counters_splits_by_the_tracepoint_times() {
        let c = split_cycle(&cycle(true, false));
        assert_eq!(
            c,
            Cycle {
                on_ns: 3_000,
                traced_on_ns: 3_000,
                runnable_ns: 2_000,
                blocked_ns: 5_000,
                uncharged_ns: 0
            }
        );
        // A preemption: all of the time off the CPU is run-queue time.
        let c = split_cycle(&cycle(true, true));
        assert_eq!((c.on_ns, c.runnable_ns, c.blocked_ns), (3_000, 7_000, 0));
        // On the CPU since the cycle began.
        let c = split_cycle(&cycle(false, false));
        assert_eq!((c.on_ns, c.runnable_ns, c.blocked_ns), (10_000, 0, 0));
        // No switch-in seen and no counters: all of it waiting, woken at 6 µs.
        let c = split_cycle(&CycleInput {
            in_ns: 0,
            ..cycle(true, false)
        });
        assert_eq!((c.on_ns, c.runnable_ns, c.blocked_ns), (0, 5_000, 5_000));
    }

    #[test]
    fn a_cycle_always_adds_up_to_its_length() {
        for exec in [None, Some(0), Some(3_000), Some(20_000)] {
            for delay in [None, Some(0), Some(2_500), Some(20_000)] {
                for (waiting, rq) in [(true, false), (true, true), (false, false)] {
                    for in_ns in [0, 1_000, 8_000, 11_000, 12_000] {
                        let c = split_cycle(&CycleInput {
                            in_ns,
                            exec_delta: exec.unwrap_or(0),
                            exec_known: exec.is_some(),
                            delay_delta: delay.unwrap_or(0),
                            delay_known: delay.is_some(),
                            ..cycle(waiting, rq)
                        });
                        assert_eq!(
                            c.on_ns + c.runnable_ns + c.blocked_ns + c.uncharged_ns,
                            10_000,
                            "{c:?}"
                        );
                        assert!(c.traced_on_ns <= 10_000, "{c:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn time_the_scheduler_did_not_charge_is_uncharged_not_cpu() {
        const MS: u64 = 1_000_000;
        // A preemption of 10 ms: 2 ms in the run queue, on the CPU for 8 ms by the
        // tracepoints, of which the host took 3 ms (steal: not in sum_exec_runtime).
        let preempted = CycleInput {
            from_ns: 0,
            to_ns: 10 * MS,
            in_ns: 2 * MS,
            wake_ns: 0,
            waiting: true,
            runqueue_wait: true,
            exec_delta: 5 * MS,
            exec_known: true,
            delay_delta: 2 * MS,
            delay_known: true,
        };
        assert_eq!(
            split_cycle(&preempted),
            Cycle {
                on_ns: 5 * MS,
                traced_on_ns: 5 * MS,
                runnable_ns: 2 * MS,
                blocked_ns: 0,
                uncharged_ns: 3 * MS,
            }
        );
        // The same after a sleep: asleep 2 ms, on the CPU 8 ms of which 3 ms stolen.
        let slept = CycleInput {
            runqueue_wait: false,
            delay_delta: 0,
            ..preempted
        };
        assert_eq!(
            split_cycle(&slept),
            Cycle {
                on_ns: 5 * MS,
                traced_on_ns: 5 * MS,
                runnable_ns: 0,
                blocked_ns: 2 * MS,
                uncharged_ns: 3 * MS,
            }
        );
        // The clocks' few µs at a switch are not steal: the preemption's CPU share runs
        // ahead of the counter (the caller's carry repays it), the sleep's is the counter.
        let skewed = CycleInput {
            exec_delta: 8 * MS - 4_000,
            ..preempted
        };
        let c = split_cycle(&skewed);
        assert_eq!((c.on_ns, c.uncharged_ns), (8 * MS, 0));
        let c = split_cycle(&CycleInput {
            runqueue_wait: false,
            ..skewed
        });
        assert_eq!(
            (c.on_ns, c.runnable_ns, c.blocked_ns, c.uncharged_ns),
            (8 * MS - 4_000, 2 * MS, 4_000, 0)
        );
        // Without the counters nothing can be told apart.
        let c = split_cycle(&CycleInput {
            exec_known: false,
            delay_known: false,
            ..preempted
        });
        assert_eq!(c.uncharged_ns, 0);
    }

    #[test]
    fn stack_ids_never_collide_with_reserved_ones() {
        assert_eq!(stack_id::from_hash(0), 1);
        assert_eq!(stack_id::from_hash(stack_id::RESERVED), 1);
        assert_eq!(stack_id::from_hash(u64::MAX) & stack_id::RESERVED, 0);
        assert_eq!(stack_id::snapshot_index(stack_id::SNAPSHOT | 7), Some(7));
        assert_eq!(stack_id::snapshot_index(stack_id::LOST_FETCH), None);
        assert_eq!(stack_id::snapshot_index(12345), None);
    }

    #[test]
    fn wire_sizes_are_fixed() {
        use core::mem::size_of;
        assert_eq!(size_of::<Config>(), 80);
        assert_eq!(size_of::<TimelineWait>(), 72);
        assert_eq!(size_of::<TimelineSample>(), 32);
        assert_eq!(size_of::<SampleKey>(), 24);
        assert_eq!(size_of::<WaitKey>(), 24);
        assert_eq!(size_of::<WaitValue>(), 32);
        assert_eq!(size_of::<SiteKey>(), 24);
        assert_eq!(size_of::<WaitHist>(), 4 * WAIT_HIST_BUCKETS);
        assert_eq!(WAIT_HIST_BUCKETS % 2, 0);
        assert_eq!(size_of::<WaitStart>(), 88);
        assert_eq!(size_of::<WakerKey>(), 56);
        assert_eq!(size_of::<WakerValue>(), 32);
        assert_eq!(size_of::<ThreadStats>(), 96);
        assert_eq!(size_of::<Thread>(), 184);
        assert_eq!(size_of::<Stack>(), 8 * (MAX_STACK_DEPTH + 1));
        assert_eq!(size_of::<TaskSnapshot>(), 80 + 8 * MAX_STACK_DEPTH);
        assert_eq!(size_of::<unwind::UnwindRow>(), 12);
        assert_eq!(size_of::<unwind::RowChunk>(), 12 * unwind::ROWS_PER_CHUNK);
        assert_eq!(size_of::<unwind::ExecMapping>(), 40);
        assert_eq!(
            size_of::<unwind::ProcMappings>(),
            8 + 40 * unwind::MAX_MAPPINGS
        );
        assert_eq!(Counter::ALL.len(), Counter::COUNT as usize);
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }

    #[test]
    fn every_loss_says_what_was_lost_and_no_event_does() {
        for c in Counter::ALL {
            assert_eq!(
                c.kind() == CounterKind::Loss,
                c.loss().is_some(),
                "{c:?} is classified as {:?} but its loss text is {:?}",
                c.kind(),
                c.loss()
            );
            assert!(!c.name().is_empty());
        }
        let names: [&str; Counter::COUNT as usize] = Counter::ALL.map(Counter::name);
        for (i, a) in names.iter().enumerate() {
            assert!(!names[i + 1..].contains(a), "{a} named twice");
        }
    }
}
