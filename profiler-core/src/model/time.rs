//! The accounted time model: per thread and stack, how much time on the CPU and in each
//! off-CPU state, inside the window. Built by `profile::account`; read by fold and render.

use std::collections::{BTreeMap, HashMap};

use profiler_common::{RunqueueHist, SiteKey, WaitHist, WaitState, stack_id};
use serde::{Deserialize, Serialize};

use super::{Counters, Mode, SchedStat, Window};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    OnCpu,
    Off(WaitState),
}

/// Time of one thread in one stack and kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The thread's process (0 in captures saved before processes were recorded: the
    /// capture's one process).
    #[serde(default)]
    pub pid: u32,
    pub tid: u32,
    pub user_stack: u64,
    pub kernel_stack: u64,
    pub kind: Kind,
    /// On-CPU samples (0 for waits).
    pub samples: u64,
    /// Time inside the window, in nanoseconds.
    pub time_ns: u64,
    /// Finished waits (0 for on-CPU).
    pub waits: u64,
    /// Shortest and longest finished wait (0 when none).
    pub min_ns: u64,
    pub max_ns: u64,
}

impl Entry {
    /// The state of a wait at a blocking site (sleep, io, other). None for CPU and run-queue
    /// time, and for time a thread held its CPU that the kernel did not charge or whose waits
    /// were lost (state other, but no site is known).
    pub fn blocked_state(&self) -> Option<WaitState> {
        match self.kind {
            Kind::Off(WaitState::Other)
                if matches!(self.user_stack, stack_id::UNCHARGED | stack_id::LOST_WAITS) =>
            {
                None
            }
            Kind::Off(s @ (WaitState::Sleep | WaitState::Io | WaitState::Other)) => Some(s),
            _ => None,
        }
    }

    pub fn new(pid: u32, tid: u32, user_stack: u64, kernel_stack: u64, kind: Kind) -> Self {
        Self {
            pid,
            tid,
            user_stack,
            kernel_stack,
            kind,
            samples: 0,
            time_ns: 0,
            waits: 0,
            min_ns: 0,
            max_ns: 0,
        }
    }

    /// One more finished wait of `ns`.
    pub fn finished(&mut self, ns: u64) {
        self.min_ns = if self.waits == 0 {
            ns
        } else {
            self.min_ns.min(ns)
        };
        self.max_ns = self.max_ns.max(ns);
        self.waits += 1;
    }
}

/// Where one thread's time went.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadTime {
    /// Its process (0 in captures saved before processes were recorded).
    #[serde(default)]
    pub pid: u32,
    pub name: String,
    pub samples: u64,
    /// CPU time inside the window: as the scheduler charged it when switches are traced
    /// (`overhead_ns` and `switching_in_ns` included), else sample periods.
    pub on_cpu_ns: u64,
    /// Of `on_cpu_ns`, the profiler's own programs.
    pub overhead_ns: u64,
    /// Of `on_cpu_ns`, time charged before the thread was switched in (see
    /// `stack_id::SWITCHING_IN`).
    pub switching_in_ns: u64,
    /// Off-CPU time per state, indexed by `WaitState as usize - 1`.
    pub off_ns: [u64; 5],
    /// Of `off_ns[Other]`, time the thread held its CPU that the kernel charged neither as
    /// CPU nor as run-queue wait (hypervisor steal; see `Cycle::uncharged_ns`).
    #[serde(default)]
    pub uncharged_ns: u64,
    /// Of `off_ns[Other]`, time of waits the wait table had no room for: their state is
    /// unknown (see `stack_id::LOST_WAITS`).
    #[serde(default)]
    pub lost_ns: u64,
    /// Whether `on_cpu_ns` was measured at context switches (exact) or from samples.
    pub on_cpu_exact: bool,
    /// The thread's schedstat over the window, read from /proc at its start and end (threads
    /// alive at both); the ground truth the other figures are checked against.
    pub schedstat: Option<SchedStat>,
}

impl ThreadTime {
    pub fn off(&self, state: WaitState) -> u64 {
        self.off_ns[state as usize - 1]
    }

    /// CPU time that is the thread's own work (the profiler's programs left out).
    pub fn running_ns(&self) -> u64 {
        self.on_cpu_ns.saturating_sub(self.overhead_ns)
    }

    pub fn runnable_ns(&self) -> u64 {
        self.off(WaitState::RunqueuePreempted) + self.off(WaitState::RunqueueWoken)
    }

    /// All of its time accounted in the window.
    pub fn total_ns(&self) -> u64 {
        self.on_cpu_ns + self.off_ns.iter().sum::<u64>()
    }

    /// What its shares (running %, sleep %, …) are of: its own time in the window (the
    /// window for a thread alive throughout; a forked child that lived 3 ms reads as what it
    /// did in them, not as 0.0 % everywhere), as a process's are of its threads'. Without
    /// switches traced (`--mode cpu`) only its CPU time is known: the window.
    pub fn share_base_ns(&self, mode: Mode, window_ns: u64) -> u64 {
        if mode.traces_switches() {
            self.total_ns().clamp(1, window_ns.max(1))
        } else {
            window_ns.max(1)
        }
    }
}

/// A thread that woke a blocking site, and how often.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waker {
    /// The blocking site: wakee, state, stacks.
    pub tid: u32,
    pub state: WaitState,
    pub user_stack: u64,
    pub kernel_stack: u64,
    /// The waker (tid 0: an interrupt on an idle CPU).
    pub waker_tid: u32,
    pub waker_pid: u32,
    pub waker_name: String,
    pub waker_user_stack: u64,
    pub waker_kernel_stack: u64,
    /// Where the wakeup ran: a `profiler_common::waker_context` value.
    pub waker_context: u32,
    pub count: u64,
    /// Blocked time those wakeups ended.
    pub time_ns: u64,
}

/// A process's threads summed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessTotals {
    pub pid: u32,
    pub name: String,
    pub threads: usize,
    pub on_cpu_ns: u64,
    pub overhead_ns: u64,
    /// Off-CPU time per state, indexed like `ThreadTime::off_ns`.
    pub off_ns: [u64; 5],
}

impl ProcessTotals {
    pub fn off(&self, state: WaitState) -> u64 {
        self.off_ns[state as usize - 1]
    }

    pub fn running_ns(&self) -> u64 {
        self.on_cpu_ns.saturating_sub(self.overhead_ns)
    }

    pub fn runnable_ns(&self) -> u64 {
        self.off(WaitState::RunqueuePreempted) + self.off(WaitState::RunqueueWoken)
    }

    /// All its threads' time: the denominator of its shares.
    pub fn thread_ns(&self) -> u64 {
        self.on_cpu_ns + self.off_ns.iter().sum::<u64>()
    }
}

/// One process of the capture.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Its name (`comm`; after an exec, the new program's).
    pub name: String,
    /// The target process that forked it during the capture.
    pub parent: Option<u32>,
    /// When it was forked, if during the capture (CLOCK_MONOTONIC ns, like the window).
    pub forked_ns: Option<u64>,
    /// When its last thread exited, if it did.
    pub exited_ns: Option<u64>,
    /// Execs during the capture.
    pub execs: u32,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Profile {
    pub mode: Mode,
    pub window: Window,
    pub period_ns: u64,
    pub entries: Vec<Entry>,
    /// Threads by tid.
    pub threads: BTreeMap<u32, ThreadTime>,
    /// Processes by pid.
    #[serde(default)]
    pub processes: BTreeMap<u32, ProcessInfo>,
    /// Frames (leaf first) by stack id, kernel-side and user-side recorded ones together:
    /// symbolization's input, not kept in a saved capture (its names are).
    #[serde(skip)]
    pub stacks: HashMap<u64, Vec<u64>>,
    /// The mapping-table generation each user stack was unwound under (absent: 0, none):
    /// which layout's files name it. Symbolization's input too.
    #[serde(skip)]
    pub stack_generations: HashMap<u64, u32>,
    #[serde(with = "counters_by_name")]
    pub counters: Counters,
    /// Blocked-time histogram per blocking site (all threads).
    #[serde(with = "pairs")]
    pub site_hists: HashMap<SiteKey, WaitHist>,
    /// Run-queue delay histograms, indexed by `RunqueueHist`.
    pub runqueue_hists: [WaitHist; RunqueueHist::COUNT as usize],
    /// Waits still in progress when the window closed (cut at the end).
    pub open_waits: u64,
    /// Threads found blocked at capture start (their waits start at the window start).
    pub blocked_at_start: u64,
    /// Who woke each blocking site, largest first.
    pub wakers: Vec<Waker>,
    /// Threads found at start whose entry could not be seeded.
    pub lost_seeds: u64,
    /// Entries left in the kernel's per-process and per-thread tables at the end, by map.
    #[serde(default)]
    pub tables_at_end: BTreeMap<String, u64>,
}

impl Profile {
    /// A profile of `mode` over `window` with nothing in it yet.
    pub fn empty(mode: Mode, window: Window, period_ns: u64) -> Self {
        Self {
            mode,
            window,
            period_ns,
            entries: Vec::new(),
            threads: BTreeMap::new(),
            processes: BTreeMap::new(),
            stacks: HashMap::new(),
            stack_generations: HashMap::new(),
            counters: Counters::default(),
            site_hists: HashMap::new(),
            runqueue_hists: Default::default(),
            open_waits: 0,
            blocked_at_start: 0,
            wakers: Vec::new(),
            lost_seeds: 0,
            tables_at_end: BTreeMap::new(),
        }
    }

    /// Every loss, zero or not: what was lost, how many, and the flag that helps.
    pub fn lost(&self) -> Vec<(&'static str, u64, Option<&'static str>)> {
        let mut lost: Vec<_> = self
            .counters
            .losses()
            .filter_map(|(c, n)| c.loss().map(|(what, flag)| (what, n, flag)))
            .collect();
        lost.push((
            "threads at start: thread table full",
            self.lost_seeds,
            Some("--max-threads"),
        ));
        lost
    }

    /// Total of all losses (0 in a clean capture).
    pub fn total_lost(&self) -> u64 {
        self.lost().iter().map(|l| l.1).sum()
    }

    /// Each process's threads summed: the per-process rows of the summary and report,
    /// busiest (on-CPU) first. A thread whose process is unknown (pid 0) is its own.
    pub fn process_totals(&self) -> Vec<ProcessTotals> {
        let mut by_pid: BTreeMap<u32, ProcessTotals> = BTreeMap::new();
        for (&tid, t) in &self.threads {
            let pid = if t.pid == 0 { tid } else { t.pid };
            let p = by_pid.entry(pid).or_insert_with(|| ProcessTotals {
                pid,
                name: self
                    .processes
                    .get(&pid)
                    .map(|i| i.name.clone())
                    .filter(|n| !n.is_empty())
                    .or_else(|| self.threads.get(&pid).map(|main| main.name.clone()))
                    .unwrap_or_else(|| t.name.clone()),
                ..Default::default()
            });
            p.threads += 1;
            p.on_cpu_ns += t.on_cpu_ns;
            p.overhead_ns += t.overhead_ns;
            for (sum, v) in p.off_ns.iter_mut().zip(t.off_ns) {
                *sum += v;
            }
        }
        let mut rows: Vec<ProcessTotals> = by_pid.into_values().collect();
        rows.sort_by_key(|p| (std::cmp::Reverse(p.on_cpu_ns), p.pid));
        rows
    }

    /// Sum of time per kind over all threads.
    pub fn totals(&self) -> BTreeMap<Kind, u64> {
        let mut totals = BTreeMap::new();
        for e in &self.entries {
            *totals.entry(e.kind).or_default() += e.time_ns;
        }
        totals
    }
}

/// Counters as `{name: value}`; unknown names are ignored, missing ones read as 0.
mod counters_by_name {
    use std::collections::BTreeMap;

    use profiler_common::Counter;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Counters;

    pub fn serialize<S: Serializer>(c: &Counters, s: S) -> Result<S::Ok, S::Error> {
        c.named().collect::<BTreeMap<_, _>>().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Counters, D::Error> {
        let by_name = BTreeMap::<String, u64>::deserialize(d)?;
        let mut c = Counters::default();
        for counter in Counter::ALL {
            if let Some(&v) = by_name.get(counter.name()) {
                c.set(counter, v);
            }
        }
        Ok(c)
    }
}

/// A map with structured keys as a list of `[key, value]` pairs (JSON keys are strings).
mod pairs {
    use std::{collections::HashMap, hash::Hash};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<K: Serialize + Ord, V: Serialize, S: Serializer>(
        m: &HashMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        // Sorted: the same capture always saves to the same bytes.
        let mut v: Vec<(&K, &V)> = m.iter().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v.serialize(s)
    }

    pub fn deserialize<'de, K, V, D>(d: D) -> Result<HashMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Eq + Hash,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}
