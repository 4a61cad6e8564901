//! The accounted time model: per thread and stack, how much time on the CPU and in each
//! off-CPU state, inside the window. Built by `account::account`; read by every stage after it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use profiler_common::{RunqueueHist, SiteKey, Table, WaitHist, WaitState, stack_id};
use serde::{Deserialize, Serialize};

use super::{Counters, Mode, NamedResource, SchedStat, Window};

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
    /// What the wait was on (`Profile::resources`' key; 0: no fd, or not recorded).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resource: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
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
            resource: 0,
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

/// Time per state: a thread's, a process's, a group's, all threads' or a capture's. Every
/// figure of time by state has this one shape, so no total is an array read in an order
/// someone has to remember (a thread's off-CPU time was indexed by `WaitState`, the
/// verdict's totals by running/runnable/sleep/io/other, and they drifted apart).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateTimes {
    /// On the CPU, the profiler's own programs left out.
    pub running: u64,
    /// The profiler's programs, run on the thread's CPU time: never its work.
    pub profiler: u64,
    /// Waiting for a CPU: preempted, or woken and not yet running.
    pub runnable: u64,
    /// Interruptible sleep.
    pub sleep: u64,
    /// Uninterruptible sleep.
    pub io: u64,
    /// Stopped or traced; held but not charged (steal); waits whose state was lost.
    pub other: u64,
}

impl StateTimes {
    /// Time in a wait of `state`: the one place a `WaitState` becomes a state of the report
    /// (both run-queue kinds are runnable).
    pub fn add_wait(&mut self, state: WaitState, ns: u64) {
        let field = match state {
            WaitState::Sleep => &mut self.sleep,
            WaitState::Io => &mut self.io,
            WaitState::RunqueuePreempted | WaitState::RunqueueWoken => &mut self.runnable,
            WaitState::Other => &mut self.other,
        };
        *field += ns;
    }

    /// CPU time: the thread's work and the profiler's programs.
    pub fn on_cpu(&self) -> u64 {
        self.running + self.profiler
    }

    pub fn total(&self) -> u64 {
        self.on_cpu() + self.runnable + self.sleep + self.io + self.other
    }

    /// On the CPU, waiting for one, or in uninterruptible I/O: what Linux's load average
    /// counts. The measure of how busy a group is.
    pub fn busy(&self) -> u64 {
        self.on_cpu() + self.runnable + self.io
    }

    /// `ns` as a percentage of this time.
    pub fn pct(&self, ns: u64) -> f64 {
        100.0 * ns as f64 / self.total().max(1) as f64
    }
}

impl std::ops::AddAssign for StateTimes {
    fn add_assign(&mut self, o: Self) {
        self.running += o.running;
        self.profiler += o.profiler;
        self.runnable += o.runnable;
        self.sleep += o.sleep;
        self.io += o.io;
        self.other += o.other;
    }
}

impl std::iter::Sum for StateTimes {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        let mut total = Self::default();
        for t in iter {
            total += t;
        }
        total
    }
}

/// Where one thread's time went. Saved in the layout captures have always had
/// ([`wire::ThreadTimeV1`]), so captures saved before and after read alike.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "wire::ThreadTimeV1", into = "wire::ThreadTimeV1")]
pub struct ThreadTime {
    /// Its process (0 in captures saved before processes were recorded).
    pub pid: u32,
    pub name: String,
    pub samples: u64,
    /// Its time per state inside the window. Running + profiler is its CPU time: as the
    /// scheduler charged it when switches are traced (`switching_in_ns` included), else
    /// sample periods.
    pub time: StateTimes,
    /// Of the CPU time, time charged before the thread was switched in (see
    /// `stack_id::SWITCHING_IN`).
    pub switching_in_ns: u64,
    /// Of `time.other`, time the thread held its CPU that the kernel charged neither as CPU
    /// nor as run-queue wait (hypervisor steal; see `Cycle::uncharged_ns`).
    pub uncharged_ns: u64,
    /// Of `time.other`, time of waits the wait table had no room for: their state is unknown
    /// (see `stack_id::LOST_WAITS`).
    pub lost_ns: u64,
    /// Whether the CPU time was measured at context switches (exact) or from samples.
    pub on_cpu_exact: bool,
    /// The thread's schedstat over the window, read from /proc at its start and end (threads
    /// alive at both); the ground truth the other figures are checked against.
    pub schedstat: Option<SchedStat>,
}

impl ThreadTime {
    /// CPU time inside the window, the profiler's programs included.
    pub fn on_cpu_ns(&self) -> u64 {
        self.time.on_cpu()
    }

    /// All of its time accounted in the window.
    pub fn total_ns(&self) -> u64 {
        self.time.total()
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

/// The saved layout of a thread's time.
mod wire {
    use profiler_common::WaitState;
    use serde::{Deserialize, Serialize};

    use super::{SchedStat, StateTimes, ThreadTime};

    /// `ThreadTime` as format 1 of saved captures holds it: CPU time with the profiler's part
    /// in it, and off-CPU time per state indexed by `WaitState as usize - 1` (the two run-queue
    /// kinds apart; they are read back as one, runnable, and saved in the first slot).
    #[derive(Clone, Serialize, Deserialize)]
    pub struct ThreadTimeV1 {
        #[serde(default)]
        pid: u32,
        name: String,
        samples: u64,
        on_cpu_ns: u64,
        overhead_ns: u64,
        switching_in_ns: u64,
        off_ns: [u64; 5],
        #[serde(default)]
        uncharged_ns: u64,
        #[serde(default)]
        lost_ns: u64,
        on_cpu_exact: bool,
        schedstat: Option<SchedStat>,
    }

    impl From<ThreadTimeV1> for ThreadTime {
        fn from(w: ThreadTimeV1) -> Self {
            let mut time = StateTimes {
                running: w.on_cpu_ns.saturating_sub(w.overhead_ns),
                profiler: w.overhead_ns.min(w.on_cpu_ns),
                ..StateTimes::default()
            };
            for (state, ns) in WaitState::ALL.into_iter().zip(w.off_ns) {
                time.add_wait(state, ns);
            }
            ThreadTime {
                pid: w.pid,
                name: w.name,
                samples: w.samples,
                time,
                switching_in_ns: w.switching_in_ns,
                uncharged_ns: w.uncharged_ns,
                lost_ns: w.lost_ns,
                on_cpu_exact: w.on_cpu_exact,
                schedstat: w.schedstat,
            }
        }
    }

    impl From<ThreadTime> for ThreadTimeV1 {
        fn from(t: ThreadTime) -> Self {
            let mut off_ns = [0; 5];
            for state in WaitState::ALL {
                off_ns[state as usize - 1] = match state {
                    WaitState::Sleep => t.time.sleep,
                    WaitState::Io => t.time.io,
                    WaitState::RunqueuePreempted => t.time.runnable,
                    WaitState::RunqueueWoken => 0,
                    WaitState::Other => t.time.other,
                };
            }
            ThreadTimeV1 {
                pid: t.pid,
                name: t.name,
                samples: t.samples,
                on_cpu_ns: t.time.on_cpu(),
                overhead_ns: t.time.profiler,
                switching_in_ns: t.switching_in_ns,
                off_ns,
                uncharged_ns: t.uncharged_ns,
                lost_ns: t.lost_ns,
                on_cpu_exact: t.on_cpu_exact,
                schedstat: t.schedstat,
            }
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
    /// All its threads' time per state: its total is the denominator of its shares.
    pub time: StateTimes,
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
    /// Whether wakers were recorded: an off-CPU mode without `--no-wakers` (captures saved
    /// before the flag existed recorded them).
    #[serde(default = "recorded")]
    pub wakers_recorded: bool,
    /// Threads found at start whose entry could not be seeded.
    pub lost_seeds: u64,
    /// Entries left in the kernel's per-process and per-thread tables at the end, by map.
    #[serde(default)]
    pub tables_at_end: BTreeMap<String, u64>,
    /// What waits were on, by id ([`Entry::resource`]), named when first seen.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<u64, NamedResource>,
    /// Goroutine waits of Go targets (`goroutines::collect`).
    #[serde(default, skip_serializing_if = "super::Goroutines::is_empty")]
    pub goroutines: super::Goroutines,
}

/// [`Profile::wakers_recorded`] of a capture saved before `--no-wakers`.
fn recorded() -> bool {
    true
}

impl Profile {
    /// The kernel's latency histogram of `e`'s stack pair in `state`, the first time `seen`
    /// asks for it: the kernel keeps one per stack pair, shared by its threads, so a site that
    /// sums their entries adds it once.
    pub fn site_hist_once(
        &self,
        e: &Entry,
        state: WaitState,
        seen: &mut BTreeSet<SiteKey>,
    ) -> Option<&WaitHist> {
        let key = SiteKey {
            state: state as u32,
            epoch: 0,
            user_stack: e.user_stack,
            kernel_stack: e.kernel_stack,
        };
        if seen.insert(key) {
            self.site_hists.get(&key)
        } else {
            None
        }
    }

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
            resources: BTreeMap::new(),
            goroutines: Default::default(),
            site_hists: HashMap::new(),
            runqueue_hists: Default::default(),
            open_waits: 0,
            blocked_at_start: 0,
            wakers: Vec::new(),
            wakers_recorded: mode.traces_switches(),
            lost_seeds: 0,
            tables_at_end: BTreeMap::new(),
        }
    }

    /// Every loss, zero or not: what was lost, how many, and the flag that helps.
    pub fn lost(&self) -> Vec<(&'static str, u64, Option<&'static str>)> {
        let mut lost: Vec<_> = self
            .counters
            .losses()
            .filter_map(|(c, n)| {
                c.loss()
                    .map(|(what, table)| (what, n, table.map(flag_raising)))
            })
            .collect();
        lost.push((
            "threads at start: thread table full",
            self.lost_seeds,
            Some(flag_raising(Table::Threads)),
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
            p.time += t.time;
        }
        let mut rows: Vec<ProcessTotals> = by_pid.into_values().collect();
        rows.sort_by_key(|p| (std::cmp::Reverse(p.time.on_cpu()), p.pid));
        rows
    }

    /// Time per state over all threads: the one sum the report, the summary, the verdict and
    /// the diff read.
    pub fn state_totals(&self) -> StateTimes {
        self.threads.values().map(|t| t.time).sum()
    }
}

/// The command-line flag that makes `table` larger, which the report names beside a loss of
/// it (the CLI's tests check that each is one of its flags).
pub fn flag_raising(table: Table) -> &'static str {
    match table {
        Table::Samples | Table::Waits | Table::Wakers | Table::SiteHists | Table::LostWaits => {
            "--max-keys"
        }
        Table::Threads => "--max-threads",
        Table::Procs => "--max-processes",
        Table::UnwindRows => "--unwind-chunks",
        Table::Stacks => "--max-stacks",
        Table::TimelineRing => "--timeline-ring-kib",
        Table::TimelineRecords => "--timeline-max-records",
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
