//! Names of maps, programs and globals as the loader looks them up in the object file.
//!
//! The eBPF statics carry the same names.

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
/// What waits were on, by resource id (`Resource`), as first seen.
pub const MAP_RESOURCES: &str = "RESOURCES";
/// The listening TCP ports, a bit each: which end of a connection is the service's.
pub const MAP_LISTENING: &str = "LISTENING";
/// uprobes on a Go target's runtime (`go_park` on `runtime.gopark`, `go_execute` on
/// `runtime.execute`): its goroutines' waits.
pub const PROG_GO_PARK: &str = "go_park";
pub const PROG_GO_EXECUTE: &str = "go_execute";
/// `HashMap<u64 g, GoPark>`: goroutines parked now.
pub const MAP_GO_PARKED: &str = "GO_PARKED";
/// `HashMap<GoWaitKey, GoWaitValue>`: goroutine waits per process, stack and reason.
pub const MAP_GO_WAITS: &str = "GO_WAITS";
/// `HashMap<u32 tgid, u64>`: per Go process, the wait reasons whose re-park at the same place
/// continues the wait (a bit each).
pub const MAP_GO_MERGE: &str = "GO_MERGE";
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
