//! What the kernel side hands user space: the drained aggregates, the start snapshot's seeds,
//! the counters, the window, and the scheduler's own per-thread accounting.

use std::collections::{BTreeMap, HashMap};

use profiler_common::{
    Counter, CounterKind, RunqueueHist, SampleKey, SampleValue, SiteKey, Thread, TimelineSample,
    TimelineWait, WaitHist, WaitKey, WaitValue, WakerKey, WakerValue,
};
use serde::{Deserialize, Serialize};

/// The capture window on the BPF clock (CLOCK_MONOTONIC, ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub start_ns: u64,
    pub stop_ns: u64,
}

impl Window {
    pub fn len_ns(&self) -> u64 {
        self.stop_ns.saturating_sub(self.start_ns)
    }
}

/// Counter totals over all CPUs, indexed by `profiler_common::Counter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters {
    values: [u64; Counter::COUNT as usize],
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            values: [0; Counter::COUNT as usize],
        }
    }
}

impl Counters {
    pub fn get(&self, counter: Counter) -> u64 {
        self.values[counter as usize]
    }

    pub fn set(&mut self, counter: Counter, value: u64) {
        self.values[counter as usize] = value;
    }

    /// Every counter with its report name, in `Counter::ALL` order.
    pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Counter::ALL.iter().map(|&c| (c.name(), self.get(c)))
    }

    /// The losses (`CounterKind::Loss`) with what was lost and the flag that helps.
    pub fn losses(&self) -> impl Iterator<Item = (Counter, u64)> + '_ {
        Counter::ALL
            .iter()
            .filter(|c| c.kind() == CounterKind::Loss)
            .map(|&c| (c, self.get(c)))
    }
}

/// One line of `/proc/<pid>/task/<tid>/schedstat`: the scheduler's own accounting of a thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedStat {
    /// `se.sum_exec_runtime`: time on a CPU.
    pub exec_ns: u64,
    /// `sched_info.run_delay`: time runnable, waiting on a run queue.
    pub delay_ns: u64,
}

/// Everything the kernel side aggregated, read once after the window closed.
#[derive(Debug, Default)]
pub struct Drained {
    pub samples: Vec<(SampleKey, SampleValue)>,
    pub waits: Vec<(WaitKey, WaitValue)>,
    /// Who woke each blocking site.
    pub wakers: Vec<(WakerKey, WakerValue)>,
    /// Per thread: its bookkeeping, and the wait that began its current cycle.
    pub threads: HashMap<u32, Thread>,
    /// Per thread, time of waits the wait table had no room for.
    pub lost_waits: HashMap<u32, u64>,
    /// Frames (leaf first) by stack id.
    pub stacks: HashMap<u64, Vec<u64>>,
    /// Mapping-table generation of each user stack unwound under one.
    pub stack_generations: HashMap<u64, u32>,
    pub counters: Counters,
    /// Blocked-time histogram per blocking site.
    pub site_hists: HashMap<SiteKey, WaitHist>,
    /// Run-queue delay histograms (all CPUs summed), indexed by [`RunqueueHist`].
    pub runqueue_hists: [WaitHist; RunqueueHist::COUNT as usize],
    /// The scheduler's counters per live thread, read right after the window opened and right
    /// after it closed: the latter close each thread's last cycle; both give the schedstat
    /// figures the report checks against.
    pub sched_at_start: HashMap<u32, SchedStat>,
    pub sched_at_stop: HashMap<u32, SchedStat>,
    /// Entries left in the kernel's per-process and per-thread tables when the window
    /// closed, by map: what shows that process and thread churn does not grow them.
    pub tables_at_end: BTreeMap<&'static str, u64>,
    /// The timeline's records, as the kernel wrote them (none with `--no-timeline`).
    pub timeline: RawTimeline,
    /// What waits were on, named by the capture side when the drainer first saw them.
    pub resources: BTreeMap<u64, super::NamedResource>,
    /// Goroutine waits of Go targets.
    pub goroutines: super::RawGoroutines,
}

/// What the timeline ring held over the capture.
#[derive(Debug, Default)]
pub struct RawTimeline {
    /// Whether the programs wrote it.
    pub enabled: bool,
    /// Waits at least this long were written.
    pub resolution_ns: u64,
    pub waits: Vec<TimelineWait>,
    pub samples: Vec<TimelineSample>,
    /// Goroutine waits of Go targets.
    pub go_waits: Vec<profiler_common::TimelineGoWait>,
}

/// What the start snapshot recorded in user space: stacks of threads already waiting when the
/// capture began, and the names of all threads.
#[derive(Debug, Default)]
pub struct Seeds {
    pub stacks: HashMap<u64, Vec<u64>>,
    /// Thread names seen by the snapshot (threads that never ran during the capture).
    pub names: HashMap<u32, String>,
    /// Process of each thread the snapshot saw.
    pub pids: HashMap<u32, u32>,
    /// Threads found blocked at capture start.
    pub blocked: u64,
    /// Threads whose entry could not be seeded (thread table full).
    pub lost: u64,
}

/// A kernel `comm` (NUL-padded) as a string.
pub fn comm_name(comm: &[u8]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// A user stack the drainer met for the first time, sent to the target set while the capture
/// runs (a JVM's methods in it are named while the JVM still runs): the mapping-table
/// generation it was unwound under (which process's layout) and its frames, leaf first.
#[derive(Debug)]
pub struct NewStack {
    pub generation: u32,
    pub frames: Box<[u64]>,
}
