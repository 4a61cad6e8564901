//! Account: drained kernel aggregates (plus the start-of-capture snapshot) → one time model:
//! per thread and stack, how much time on the CPU and in each off-CPU state, inside the
//! capture window. Pure; every rule about time lives here.
//!
//! Rules:
//! - On-CPU time per thread is measured exactly at context switches (when `sched_switch` is
//!   traced); the samples only apportion it across stacks. Without switch tracing (`--mode
//!   cpu`) each sample stands for one sample period.
//! - A wait counts for its part inside the window: waits already in progress at the start
//!   were seeded from the snapshot with the window start as their beginning; waits still in
//!   progress at the end are cut at the end.

use std::collections::{BTreeMap, HashMap};

use profiler_common::{Counter, ThreadStats, WAIT_HIST_BUCKETS, WaitState, stack_id, wait_flags};

use crate::{
    cli::Mode,
    drain::{Drained, Window},
    probes::Counters,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    OnCpu,
    Off(WaitState),
}

/// Time of one thread in one stack and kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
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
    /// Longest finished wait.
    pub max_ns: u64,
    /// log2 histogram of finished waits (see `profiler_common::hist_bucket`).
    pub hist: [u32; WAIT_HIST_BUCKETS],
}

impl Entry {
    fn new(tid: u32, user_stack: u64, kernel_stack: u64, kind: Kind) -> Self {
        Self {
            tid,
            user_stack,
            kernel_stack,
            kind,
            samples: 0,
            time_ns: 0,
            waits: 0,
            max_ns: 0,
            hist: [0; WAIT_HIST_BUCKETS],
        }
    }
}

/// Where one thread's time went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadTime {
    pub name: String,
    pub samples: u64,
    pub on_cpu_ns: u64,
    /// Off-CPU time per state, indexed by `WaitState as usize - 1`.
    pub off_ns: [u64; 5],
    /// Whether `on_cpu_ns` was measured at context switches (exact) or from samples.
    pub on_cpu_exact: bool,
}

impl ThreadTime {
    pub fn off(&self, state: WaitState) -> u64 {
        self.off_ns[state as usize - 1]
    }
}

/// Stacks user space recorded itself (threads blocked at capture start), by stack id.
#[derive(Debug, Default)]
pub struct Seeds {
    pub stacks: HashMap<u64, Vec<u64>>,
    /// Thread names seen by the snapshot (threads that never ran during the capture).
    pub names: HashMap<u32, String>,
    /// Threads found blocked at capture start.
    pub blocked: u64,
    /// Threads found blocked whose wait could not be seeded (thread table full).
    pub lost: u64,
}

#[derive(Debug)]
pub struct Profile {
    pub mode: Mode,
    pub window: Window,
    pub period_ns: u64,
    pub entries: Vec<Entry>,
    pub threads: BTreeMap<u32, ThreadTime>,
    /// Frames (leaf first) by stack id, kernel-side and user-side recorded ones together.
    pub stacks: HashMap<u64, Vec<u64>>,
    pub counters: Counters,
    /// Waits still in progress when the window closed (cut at the end).
    pub open_waits: u64,
    /// Threads found blocked at capture start (their waits start at the window start).
    pub blocked_at_start: u64,
    /// Who woke each blocking site, largest first.
    pub wakers: Vec<Waker>,
    /// Threads blocked at start whose wait could not be seeded.
    pub lost_seeds: u64,
}

/// A thread that woke a blocking site, and how often.
#[derive(Clone, Debug, PartialEq, Eq)]
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

pub struct AccountOptions {
    /// The profiled process: wakers from other processes keep only their kernel stacks.
    pub target_pid: u32,
    pub mode: Mode,
    pub window: Window,
    pub period_ns: u64,
    pub max_block_ns: u64,
}

pub fn account(drained: Drained, seeds: Seeds, opts: &AccountOptions) -> Profile {
    let Drained {
        samples,
        waits,
        wakers: waker_records,
        open_waits,
        threads: thread_stats,
        mut stacks,
        counters,
        exec_at_stop,
    } = drained;
    let window = opts.window;
    let exact = opts.mode.traces_switches();
    stacks.extend(seeds.stacks);

    let mut threads: BTreeMap<u32, ThreadTime> = BTreeMap::new();
    let thread = |threads: &mut BTreeMap<u32, ThreadTime>, tid: u32| {
        threads.entry(tid).or_default();
    };
    let mut entries: HashMap<(u32, u64, u64, Kind), Entry> = HashMap::new();

    // On-CPU: samples, then (when switches are traced) rescaled to the measured time.
    let mut sampled_ns: HashMap<u32, u64> = HashMap::new();
    if opts.mode.samples_on_cpu() {
        for (key, value) in &samples {
            let e = entries
                .entry((key.tid, key.user_stack, key.kernel_stack, Kind::OnCpu))
                .or_insert_with(|| {
                    Entry::new(key.tid, key.user_stack, key.kernel_stack, Kind::OnCpu)
                });
            e.samples += value.count;
            e.time_ns += value.period_ns;
            *sampled_ns.entry(key.tid).or_default() += value.period_ns;
            thread(&mut threads, key.tid);
            if let Some(t) = threads.get_mut(&key.tid) {
                t.samples += value.count;
            }
        }
    }
    if exact && opts.mode.samples_on_cpu() {
        let mut measured: HashMap<u32, u64> = HashMap::new();
        for (&tid, stats) in &thread_stats {
            let sampled = sampled_ns.get(&tid).copied().unwrap_or(0);
            let ran_unreported = ran_since_last_out(stats, exec_at_stop.get(&tid).copied(), window);
            if let Some(on) = measured_on_cpu(stats, window, sampled > 0, ran_unreported) {
                measured.insert(tid, on);
            }
        }
        for e in entries.values_mut() {
            let (Some(&on), Some(&sampled)) = (measured.get(&e.tid), sampled_ns.get(&e.tid)) else {
                continue;
            };
            if sampled > 0 {
                e.time_ns = (e.time_ns as u128 * on as u128 / sampled as u128) as u64;
            }
        }
        for (&tid, &on) in &measured {
            thread(&mut threads, tid);
            if let Some(t) = threads.get_mut(&tid) {
                t.on_cpu_ns = on;
                t.on_cpu_exact = true;
            }
            if on > 0 && sampled_ns.get(&tid).copied().unwrap_or(0) == 0 {
                let mut e = Entry::new(tid, stack_id::UNSAMPLED, stack_id::EMPTY, Kind::OnCpu);
                e.time_ns = on;
                entries.insert((tid, e.user_stack, e.kernel_stack, Kind::OnCpu), e);
            }
        }
    }
    for (&tid, &ns) in &sampled_ns {
        if let Some(t) = threads.get_mut(&tid)
            && !t.on_cpu_exact
        {
            t.on_cpu_ns = ns;
        }
    }

    // Off-CPU: finished waits, then the ones still open at the end.
    if opts.mode.traces_switches() {
        for (key, value) in &waits {
            let Some(state) = WaitState::from_u32(key.state) else {
                continue;
            };
            let kind = Kind::Off(state);
            let e = entries
                .entry((key.tid, key.user_stack, key.kernel_stack, kind))
                .or_insert_with(|| Entry::new(key.tid, key.user_stack, key.kernel_stack, kind));
            e.time_ns += value.total_ns;
            e.waits += value.count;
            e.max_ns = e.max_ns.max(value.max_ns);
            for (b, v) in e.hist.iter_mut().zip(value.hist.iter()) {
                *b += v;
            }
        }
    }
    let mut open = 0;
    if opts.mode.traces_switches() {
        for (tid, start) in &open_waits {
            let Some(state) = WaitState::from_u32(start.state) else {
                continue;
            };
            // A seed whose thread has run since is stale: the seed raced with its wakeup.
            if let Some(stats) = thread_stats.get(tid)
                && stats.last_in_ns > start.ts_ns
            {
                continue;
            }
            let began = start.ts_ns.max(window.start_ns);
            // A final switch-in the kernel did not report ends the wait early.
            let ran = thread_stats.get(tid).map_or(0, |s| {
                ran_since_last_out(s, exec_at_stop.get(tid).copied(), window)
            });
            let end = window.stop_ns.saturating_sub(ran);
            let time = end.saturating_sub(began);
            if time == 0 || time > opts.max_block_ns {
                continue;
            }
            open += 1;
            // Woken but not yet on a CPU when the window closed: blocked, then runnable.
            let woken = start.wake_ts_ns > began && start.wake_ts_ns < end;
            let blocked = if woken {
                start.wake_ts_ns - began
            } else {
                time
            };
            let mut add = |kind: Kind, ns: u64| {
                let e = entries
                    .entry((*tid, start.user_stack, start.kernel_stack, kind))
                    .or_insert_with(|| {
                        Entry::new(*tid, start.user_stack, start.kernel_stack, kind)
                    });
                e.time_ns += ns;
                if start.flags & wait_flags::SNAPSHOT != 0 {
                    // Blocked for the whole window: its one unfinished wait is the longest.
                    e.max_ns = e.max_ns.max(ns);
                }
            };
            add(Kind::Off(state), blocked);
            if woken {
                add(Kind::Off(WaitState::RunqueueWoken), end - start.wake_ts_ns);
            }
        }
    }

    let mut wakers: Vec<Waker> = if opts.mode.traces_switches() {
        waker_records
            .iter()
            .filter_map(|(k, v)| {
                Some(Waker {
                    tid: k.tid,
                    state: WaitState::from_u32(k.state)?,
                    user_stack: k.user_stack,
                    kernel_stack: k.kernel_stack,
                    waker_tid: k.waker_tid,
                    waker_pid: k.waker_tgid,
                    waker_name: comm_to_string(&v.waker_comm),
                    waker_user_stack: if k.waker_tgid == opts.target_pid
                        || k.waker_user_stack == stack_id::EMPTY
                    {
                        k.waker_user_stack
                    } else {
                        stack_id::FOREIGN
                    },
                    waker_kernel_stack: k.waker_kernel_stack,
                    waker_context: k.waker_context,
                    count: v.count,
                    time_ns: v.total_ns,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    wakers.sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then(a.tid.cmp(&b.tid)));

    for e in entries.values() {
        if let Kind::Off(state) = e.kind {
            thread(&mut threads, e.tid);
            if let Some(t) = threads.get_mut(&e.tid) {
                t.off_ns[state as usize - 1] += e.time_ns;
            }
        }
    }
    for (tid, t) in threads.iter_mut() {
        t.name = thread_stats
            .get(tid)
            .map(|s| comm_to_string(&s.comm))
            .filter(|n| !n.is_empty())
            .or_else(|| seeds.names.get(tid).cloned())
            .unwrap_or_else(|| format!("tid-{tid}"));
    }

    let mut entries: Vec<Entry> = entries.into_values().collect();
    entries.sort_by(|a, b| {
        (a.tid, a.kind, a.user_stack, a.kernel_stack).cmp(&(
            b.tid,
            b.kind,
            b.user_stack,
            b.kernel_stack,
        ))
    });
    Profile {
        mode: opts.mode,
        window,
        period_ns: opts.period_ns,
        entries,
        threads,
        stacks,
        counters,
        open_waits: open,
        blocked_at_start: seeds.blocked,
        wakers,
        lost_seeds: seeds.lost,
    }
}

/// CPU time a thread used after its last reported switch-out although no switch-in was
/// reported (the kernel skips some switches): its CPU time now minus at that switch-out.
fn ran_since_last_out(stats: &ThreadStats, exec_now: Option<u64>, window: Window) -> u64 {
    let Some(exec_now) = exec_now else {
        return 0;
    };
    if stats.last_out_ns == 0 || stats.last_in_ns > stats.last_out_ns || stats.last_exec_ns == 0 {
        return 0;
    }
    exec_now
        .saturating_sub(stats.last_exec_ns)
        .min(window.stop_ns.saturating_sub(stats.last_out_ns))
}

/// A thread's on-CPU time inside the window from its switch bookkeeping, or `None` when the
/// kernel recorded nothing about it.
fn measured_on_cpu(
    stats: &ThreadStats,
    window: Window,
    has_samples: bool,
    ran_unreported: u64,
) -> Option<u64> {
    let Window { start_ns, stop_ns } = window;
    if stats.last_in_ns == 0 && stats.last_out_ns == 0 {
        // Never switched in or out during the window: on the CPU throughout if it was sampled
        // at all (the sampler made the entry), otherwise unknown.
        return has_samples.then_some(stop_ns.saturating_sub(start_ns));
    }
    let mut on = stats.on_cpu_ns + ran_unreported;
    if stats.last_in_ns > stats.last_out_ns {
        // Still on the CPU when the window closed.
        on += stop_ns.saturating_sub(stats.last_in_ns.max(start_ns));
    }
    Some(on.min(stop_ns.saturating_sub(start_ns)))
}

pub fn comm_to_string(comm: &[u8]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

impl Profile {
    pub fn lost(&self) -> Vec<(&'static str, u64, &'static str)> {
        let c = &self.counters;
        vec![
            (
                "samples: sample table full",
                c.get(Counter::SamplesMapFull),
                "--max-keys",
            ),
            (
                "waits: wait table full",
                c.get(Counter::WaitsMapFull),
                "--max-keys",
            ),
            (
                "waits in progress at start: thread table full",
                self.lost_seeds,
                "--max-threads",
            ),
            (
                "threads: thread table full",
                c.get(Counter::ThreadsFull),
                "--max-threads",
            ),
            (
                "stacks: stack table full",
                c.get(Counter::StackTableFull),
                "--max-stacks",
            ),
            (
                "user stacks: unwinding failed",
                c.get(Counter::UserStackFailed),
                "",
            ),
            (
                "kernel stacks: unwinding failed",
                c.get(Counter::KernelStackFailed),
                "",
            ),
        ]
    }

    /// Total of all losses (0 in a clean capture).
    pub fn total_lost(&self) -> u64 {
        self.lost().iter().map(|l| l.1).sum()
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

#[cfg(test)]
mod tests {
    use super::*;
    use profiler_common::{SampleKey, SampleValue, WaitKey, WaitStart, WaitValue};

    const S: u64 = 1_000_000_000;

    fn window() -> Window {
        Window {
            start_ns: 10 * S,
            stop_ns: 20 * S,
        }
    }

    fn opts(mode: Mode) -> AccountOptions {
        AccountOptions {
            target_pid: 1,
            mode,
            window: window(),
            period_ns: 10_000_000,
            max_block_ns: u64::MAX,
        }
    }

    fn stats(on: u64, last_in: u64, last_out: u64) -> ThreadStats {
        let mut comm = [0u8; 16];
        comm[..4].copy_from_slice(b"work");
        ThreadStats {
            comm,
            on_cpu_ns: on,
            last_in_ns: last_in,
            last_out_ns: last_out,
            switches: 1,
            last_exec_ns: 0,
        }
    }

    fn sample(tid: u32, ustack: u64, count: u64) -> (SampleKey, SampleValue) {
        (
            SampleKey {
                tid,
                _pad: 0,
                user_stack: ustack,
                kernel_stack: 0,
            },
            SampleValue {
                count,
                period_ns: count * 10_000_000,
            },
        )
    }

    #[test]
    fn cpu_mode_counts_sample_periods() {
        let drained = Drained {
            samples: vec![sample(7, 1, 30), sample(7, 2, 10)],
            ..Drained::default()
        };
        let p = account(drained, Seeds::default(), &opts(Mode::Cpu));
        assert_eq!(p.threads[&7].samples, 40);
        assert_eq!(p.threads[&7].on_cpu_ns, 400_000_000);
        assert!(!p.threads[&7].on_cpu_exact);
        assert_eq!(p.entries.len(), 2);
    }

    #[test]
    fn wall_mode_rescales_samples_to_the_measured_on_cpu_time() {
        let mut drained = Drained {
            samples: vec![sample(7, 1, 30), sample(7, 2, 10)],
            ..Drained::default()
        };
        // 5 s measured on the CPU, switched out at the end of the window.
        drained.threads.insert(7, stats(5 * S, 19 * S, 19 * S + 1));
        let p = account(drained, Seeds::default(), &opts(Mode::Wall));
        let t = &p.threads[&7];
        assert!(t.on_cpu_exact);
        assert_eq!(t.on_cpu_ns, 5 * S);
        let by_stack: HashMap<u64, u64> = p
            .entries
            .iter()
            .map(|e| (e.user_stack, e.time_ns))
            .collect();
        assert_eq!(by_stack[&1], 3 * S + 750_000_000);
        assert_eq!(by_stack[&2], S + 250_000_000);
    }

    #[test]
    fn a_thread_that_never_switched_was_on_cpu_for_the_whole_window() {
        let mut drained = Drained {
            samples: vec![sample(7, 1, 990)],
            ..Drained::default()
        };
        drained.threads.insert(7, stats(0, 0, 0));
        let p = account(drained, Seeds::default(), &opts(Mode::Wall));
        assert_eq!(p.threads[&7].on_cpu_ns, 10 * S);
    }

    #[test]
    fn running_at_the_end_adds_the_tail_and_unsampled_time_is_kept() {
        let mut drained = Drained::default();
        // Switched in at 19 s and still running; 1 ms earlier on-CPU, no samples at all.
        drained.threads.insert(9, stats(1_000_000, 19 * S, 18 * S));
        let p = account(drained, Seeds::default(), &opts(Mode::Wall));
        assert_eq!(p.threads[&9].on_cpu_ns, S + 1_000_000);
        let e = p.entries.iter().find(|e| e.tid == 9).unwrap();
        assert_eq!(e.user_stack, stack_id::UNSAMPLED);
        assert_eq!(e.time_ns, S + 1_000_000);
    }

    #[test]
    fn open_waits_are_cut_at_the_window_edges_and_stale_seeds_dropped() {
        let mut drained = Drained::default();
        let seed = WaitStart {
            ts_ns: 10 * S,
            user_stack: stack_id::SNAPSHOT | 1,
            kernel_stack: stack_id::SNAPSHOT | 2,
            state: WaitState::Sleep as u32,
            flags: wait_flags::SNAPSHOT,
            ..WaitStart::default()
        };
        // Thread 1: blocked throughout. Thread 2: the seed raced with a wakeup at 12 s.
        // Thread 3: switched out at 15 s in I/O and never came back.
        drained.open_waits = vec![
            (1, seed),
            (2, seed),
            (
                3,
                WaitStart {
                    ts_ns: 15 * S,
                    user_stack: 5,
                    kernel_stack: 6,
                    state: WaitState::Io as u32,
                    ..WaitStart::default()
                },
            ),
        ];
        drained.threads.insert(2, stats(0, 12 * S, 0));
        let p = account(drained, Seeds::default(), &opts(Mode::Off));
        assert_eq!(p.threads[&1].off(WaitState::Sleep), 10 * S);
        assert_eq!(p.threads[&3].off(WaitState::Io), 5 * S);
        assert!(!p.threads.contains_key(&2) || p.threads[&2].off_ns.iter().sum::<u64>() == 0);
        assert_eq!(p.open_waits, 2);
    }

    #[test]
    fn an_unreported_final_switch_in_is_placed_from_cpu_time() {
        let mut drained = Drained::default();
        // Switched out at 15 s (CPU time then: 4 s); the kernel reported no switch-in, but the
        // thread's CPU time at the end is 6 s: it ran the last 2 s of the window.
        let mut s = stats(4 * S, 12 * S, 15 * S);
        s.last_exec_ns = 4 * S;
        drained.threads.insert(3, s);
        drained.exec_at_stop.insert(3, 6 * S);
        drained.open_waits = vec![(
            3,
            WaitStart {
                ts_ns: 15 * S,
                user_stack: 5,
                kernel_stack: 6,
                state: WaitState::RunqueuePreempted as u32,
                ..WaitStart::default()
            },
        )];
        drained.samples = vec![sample(3, 1, 10)];
        let p = account(drained, Seeds::default(), &opts(Mode::Wall));
        assert_eq!(p.threads[&3].on_cpu_ns, 6 * S);
        assert_eq!(p.threads[&3].off(WaitState::RunqueuePreempted), 3 * S);
    }

    #[test]
    fn finished_waits_keep_count_max_and_histogram() {
        let mut hist = [0u32; WAIT_HIST_BUCKETS];
        hist[24] = 3;
        let drained = Drained {
            waits: vec![(
                WaitKey {
                    tid: 4,
                    state: WaitState::Sleep as u32,
                    user_stack: 1,
                    kernel_stack: 2,
                },
                WaitValue {
                    total_ns: 60_000_000,
                    count: 3,
                    max_ns: 21_000_000,
                    hist,
                },
            )],
            ..Drained::default()
        };
        let p = account(drained, Seeds::default(), &opts(Mode::Off));
        let e = &p.entries[0];
        assert_eq!(
            (e.waits, e.time_ns, e.max_ns, e.hist[24]),
            (3, 60_000_000, 21_000_000, 3)
        );
        assert_eq!(p.threads[&4].off(WaitState::Sleep), 60_000_000);
        assert_eq!(p.threads[&4].name, "tid-4");
    }
}
