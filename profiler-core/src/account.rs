//! Account: drained kernel aggregates (plus the start snapshot) → one time model: per thread
//! and stack, how much time on the CPU and in each off-CPU state, inside the capture window.
//! Pure; every rule about time lives here and in `profiler_common::split_cycle`.
//!
//! Rules:
//! - With switches traced, a thread's time is cut into cycles (switch-out to switch-out) and
//!   each cycle is split by the scheduler's own counters: on the CPU as `sum_exec_runtime`
//!   grew, runnable as `run_delay` grew, blocked the rest. The kernel side closes every cycle
//!   but the last; the last one (up to the end of the window) is closed here with the counters
//!   read from /proc when the window closed. A thread's figures therefore add up to its
//!   schedstat, and its states to the window.
//! - Of the CPU time, the profiler's own programs (charged to the thread by the kernel) and
//!   the time charged before the switch-in are shown as such; the rest is apportioned to
//!   stacks by the samples. Without switch tracing (`--mode cpu`) each sample stands for one
//!   sample period.
//! - A wait counts for its part inside the window: waits already in progress at the start
//!   were seeded from the snapshot with the window start as their beginning; waits still in
//!   progress at the end are cut at the end.

use std::collections::{BTreeMap, HashMap, HashSet};

use profiler_common::{
    Cycle, CycleInput, SampleKey, SampleValue, SiteKey, Thread, WaitHist, WaitKey, WaitStart,
    WaitState, WaitValue, WakerKey, WakerValue, exit_overcount_ns, hist_bucket, split_cycle,
    stack_id, thread_flags, wait_flags,
};

use crate::model::{
    Drained, Entry, Kind, Mode, ProcessInfo, Profile, SchedStat, Seeds, ThreadTime, Waker, Window,
    comm_name,
};

pub struct AccountOptions {
    /// The profiled processes: wakers from other processes keep only their kernel stacks.
    pub processes: BTreeMap<u32, ProcessInfo>,
    /// Process of each thread the kernel side did not say (live threads, from /proc).
    pub pid_of: HashMap<u32, u32>,
    pub mode: Mode,
    pub window: Window,
    pub period_ns: u64,
    pub min_block_ns: u64,
    pub max_block_ns: u64,
    /// Wakers were recorded (not `--no-wakers`).
    pub wakers: bool,
}

pub fn account(drained: Drained, seeds: Seeds, opts: &AccountOptions) -> Profile {
    let Drained {
        samples,
        waits,
        wakers,
        threads: kernel_threads,
        mut stacks,
        stack_generations,
        counters,
        mut site_hists,
        runqueue_hists,
        lost_waits,
        sched_at_start,
        sched_at_stop,
        tables_at_end,
        resources,
        goroutines,
        // Built by `timeline::build`, beside this stage.
        timeline: _,
    } = drained;
    stacks.extend(seeds.stacks);
    let mut acc = Accumulator {
        pid_of: pids_of(&opts.pid_of, &seeds.pids, &kernel_threads),
        ..Accumulator::default()
    };
    let cpu = if opts.mode.traces_switches() {
        acc.finished_waits(&waits);
        let sampled: HashSet<u32> = samples.iter().map(|(k, _)| k.tid).collect();
        acc.last_cycles(
            &kernel_threads,
            &sched_at_stop,
            &sampled,
            &lost_waits,
            &mut site_hists,
            opts,
        )
    } else {
        HashMap::new()
    };
    acc.on_cpu(&samples, &cpu, opts);

    let mut threads = acc.threads;
    name_threads(&mut threads, &kernel_threads, &seeds.names);
    window_schedstats(&mut threads, &sched_at_start, &sched_at_stop);

    let mut processes = opts.processes.clone();
    for t in threads.values() {
        processes.entry(t.pid).or_default();
    }
    name_unnamed_processes(&mut processes, &threads);
    let mut entries: Vec<Entry> = acc.entries.into_values().collect();
    entries.sort_by_key(|e| (e.tid, e.kind, e.user_stack, e.kernel_stack, e.resource));
    Profile {
        mode: opts.mode,
        window: opts.window,
        period_ns: opts.period_ns,
        entries,
        threads,
        processes,
        stacks,
        stack_generations,
        counters,
        site_hists,
        runqueue_hists,
        open_waits: acc.open_waits,
        blocked_at_start: seeds.blocked,
        wakers: if opts.mode.traces_switches() {
            wakers_of(&wakers, &opts.processes)
        } else {
            Vec::new()
        },
        wakers_recorded: opts.wakers && opts.mode.traces_switches(),
        lost_seeds: seeds.lost,
        tables_at_end: tables_at_end
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        resources,
        goroutines: crate::goroutines::collect(goroutines, opts.window),
    }
}

/// Process of each thread: the caller's (live threads, from /proc), then the start
/// snapshot's, then the kernel side's, each overriding the one before; the kernel side also
/// knows the threads gone before /proc was read.
fn pids_of(
    live: &HashMap<u32, u32>,
    seeded: &HashMap<u32, u32>,
    kernel_threads: &HashMap<u32, Thread>,
) -> HashMap<u32, u32> {
    let mut pid_of = live.clone();
    pid_of.extend(seeded.iter().map(|(&tid, &pid)| (tid, pid)));
    pid_of.extend(
        kernel_threads
            .iter()
            .filter(|(_, t)| t.stats.tgid != 0)
            .map(|(&tid, t)| (tid, t.stats.tgid)),
    );
    pid_of
}

/// Names every thread the accounting produced (see `thread_name`).
fn name_threads(
    threads: &mut BTreeMap<u32, ThreadTime>,
    kernel_threads: &HashMap<u32, Thread>,
    seeded: &HashMap<u32, String>,
) {
    for (tid, t) in threads.iter_mut() {
        t.name = thread_name(*tid, kernel_threads.get(tid), seeded);
    }
}

/// Each thread's schedstat over the window: the counters read at its end less those read at
/// its start; none for a thread missing either read (started or gone during the window).
fn window_schedstats(
    threads: &mut BTreeMap<u32, ThreadTime>,
    at_start: &HashMap<u32, SchedStat>,
    at_stop: &HashMap<u32, SchedStat>,
) {
    for (tid, t) in threads.iter_mut() {
        t.schedstat = match (at_start.get(tid), at_stop.get(tid)) {
            (Some(a), Some(b)) => Some(SchedStat {
                exec_ns: b.exec_ns.saturating_sub(a.exec_ns),
                delay_ns: b.delay_ns.saturating_sub(a.delay_ns),
            }),
            _ => None,
        };
    }
}

/// A process gone before its name was read from /proc (a child that lived a few ms: a
/// redis AOF rewrite, a short CGI) is named as its main thread was in the kernel, so it
/// joins the tower of its namesakes instead of standing apart as `pid-N`.
fn name_unnamed_processes(
    processes: &mut BTreeMap<u32, ProcessInfo>,
    threads: &BTreeMap<u32, ThreadTime>,
) {
    for (&pid, info) in processes.iter_mut().filter(|(_, i)| i.name.is_empty()) {
        let main = threads.get(&pid).filter(|t| !t.name.starts_with("tid-"));
        let any = || {
            threads
                .values()
                .find(|t| t.pid == pid && !t.name.starts_with("tid-"))
        };
        info.name = main
            .or_else(any)
            .map_or_else(|| format!("pid-{pid}"), |t| t.name.clone());
    }
}

/// The kernel's name of a thread, else the start snapshot's, else its tid.
fn thread_name(tid: u32, kernel: Option<&Thread>, seeded: &HashMap<u32, String>) -> String {
    kernel
        .map(|t| comm_name(&t.stats.comm))
        .filter(|n| !n.is_empty())
        .or_else(|| seeded.get(&tid).cloned())
        .unwrap_or_else(|| format!("tid-{tid}"))
}

/// A thread's CPU time from the switch bookkeeping.
#[derive(Clone, Copy, Debug, Default)]
struct CpuTime {
    /// As the scheduler charged it.
    on_ns: u64,
    /// Between switch-ins and switch-outs.
    traced_ns: u64,
    /// The profiler's programs.
    overhead_ns: u64,
    /// Held the CPU, charged neither as CPU nor as run-queue wait (steal).
    uncharged_ns: u64,
    /// Waits the wait table had no room for.
    lost_ns: u64,
}

/// A wait for the CPU (preempted, or woken and not yet run) rather than a sleep: the
/// whole of it is run-queue time.
fn is_runqueue_wait(slot: &WaitStart) -> bool {
    slot.state == WaitState::RunqueuePreempted as u32
        || slot.state == WaitState::RunqueueWoken as u32
}

/// The last cycle's CPU time, closed at the end of the window.
#[derive(Clone, Copy, Debug, Default)]
struct LastCycle {
    on_ns: u64,
    traced_ns: u64,
    uncharged_ns: u64,
}

#[derive(Default)]
struct Accumulator {
    entries: HashMap<(u32, u64, u64, Kind, u64), Entry>,
    threads: BTreeMap<u32, ThreadTime>,
    open_waits: u64,
    /// Process of each thread (0: unknown).
    pid_of: HashMap<u32, u32>,
}

/// A state a thread blocks in at a site (not a wait for a CPU).
fn is_blocked(state: WaitState) -> bool {
    matches!(state, WaitState::Sleep | WaitState::Io | WaitState::Other)
}

impl Accumulator {
    fn entry(&mut self, tid: u32, user_stack: u64, kernel_stack: u64, kind: Kind) -> &mut Entry {
        self.entry_on(tid, user_stack, kernel_stack, kind, 0)
    }

    /// The entry of a wait on `resource` (0: none known).
    fn entry_on(
        &mut self,
        tid: u32,
        user_stack: u64,
        kernel_stack: u64,
        kind: Kind,
        resource: u64,
    ) -> &mut Entry {
        let pid = self.pid_of.get(&tid).copied().unwrap_or(0);
        self.thread(tid);
        self.entries
            .entry((tid, user_stack, kernel_stack, kind, resource))
            .or_insert_with(|| Entry {
                resource,
                ..Entry::new(pid, tid, user_stack, kernel_stack, kind)
            })
    }

    fn thread(&mut self, tid: u32) -> &mut ThreadTime {
        let pid = self.pid_of.get(&tid).copied().unwrap_or(0);
        self.threads.entry(tid).or_insert_with(|| ThreadTime {
            pid,
            ..ThreadTime::default()
        })
    }

    /// Time in state "other" under a reserved stack id of its own (no blocking site).
    fn other_time(&mut self, tid: u32, id: u64, ns: u64) {
        if ns == 0 {
            return;
        }
        self.thread(tid).time.other += ns;
        self.entry(tid, id, stack_id::EMPTY, Kind::Off(WaitState::Other))
            .time_ns += ns;
    }

    /// Waits the kernel side aggregated (every cycle closed by a switch-out).
    fn finished_waits(&mut self, waits: &[(WaitKey, WaitValue)]) {
        for (key, value) in waits {
            let Some(state) = WaitState::from_u32(u32::from(key.state)) else {
                continue;
            };
            let e = self.entry_on(
                key.tid,
                key.user_stack,
                key.kernel_stack,
                Kind::Off(state),
                key.resource,
            );
            e.time_ns += value.total_ns;
            // Time of preemptions on the way to a sleep only: no wait of its own.
            if value.count > 0 {
                e.min_ns = if e.waits == 0 {
                    value.min_ns
                } else {
                    e.min_ns.min(value.min_ns)
                };
                e.waits += value.count;
                e.max_ns = e.max_ns.max(value.max_ns);
            }
            self.thread(key.tid).time.add_wait(state, value.total_ns);
        }
    }

    /// Every thread's CPU time: the kernel's closed cycles plus its last one.
    fn last_cycles(
        &mut self,
        kernel_threads: &HashMap<u32, Thread>,
        sched_at_stop: &HashMap<u32, SchedStat>,
        sampled: &HashSet<u32>,
        lost_waits: &HashMap<u32, u64>,
        site_hists: &mut HashMap<SiteKey, WaitHist>,
        opts: &AccountOptions,
    ) -> HashMap<u32, CpuTime> {
        let mut cpu = HashMap::new();
        for (&tid, thread) in kernel_threads {
            let at_stop = sched_at_stop.get(&tid).copied();
            let traced = sampled.contains(&tid);
            let last = self.last_cycle(tid, thread, at_stop, traced, site_hists, opts);
            let on = thread.stats.on_cpu_ns + last.on_ns;
            // What a short-lived thread's cycles counted ahead of the scheduler's CPU time
            // (see `exit_overcount_ns`) was time on the run queue, by the kernel's clock.
            let over = exit_overcount_ns(&thread.stats).min(on);
            if over > 0 {
                self.entry(
                    tid,
                    stack_id::EMPTY,
                    stack_id::EMPTY,
                    Kind::Off(WaitState::RunqueueWoken),
                )
                .time_ns += over;
                self.thread(tid).time.runnable += over;
            }
            cpu.insert(
                tid,
                CpuTime {
                    on_ns: on - over,
                    traced_ns: (thread.stats.traced_on_ns + last.traced_ns).min(on - over),
                    overhead_ns: thread.stats.overhead_ns,
                    uncharged_ns: thread.stats.uncharged_ns + last.uncharged_ns,
                    lost_ns: lost_waits.get(&tid).copied().unwrap_or(0),
                },
            );
        }
        cpu
    }

    /// Closes a thread's last cycle at the end of the window with the same rule the kernel
    /// side uses, and the scheduler's counters read right after the window closed: its
    /// run-queue time is final once the thread runs; its CPU time is final while it waits.
    fn last_cycle(
        &mut self,
        tid: u32,
        thread: &Thread,
        at_stop: Option<SchedStat>,
        sampled: bool,
        site_hists: &mut HashMap<SiteKey, WaitHist>,
        opts: &AccountOptions,
    ) -> LastCycle {
        let stats = &thread.stats;
        let slot = &thread.wait;
        let window = opts.window;
        if stats.flags & thread_flags::EXITED != 0
            || (stats.last_out_ns == 0 && stats.last_in_ns == 0)
        {
            return LastCycle::default();
        }
        // On a CPU (or waiting for one) at the start, gone when the window closed, never
        // switched in or out inside it and never sampled:
        // a thread the start snapshot saw whose last switch-out raced the seeding of its
        // entry (its exit went unrecorded). When it ended is unknown; closing its cycle at
        // the window's end charged a request thread that lived milliseconds the whole 20 s
        // window on the CPU (tests/churn.rs, thread per request, once in ~15 runs).
        let switched_inside =
            stats.last_out_ns > window.start_ns || stats.last_in_ns > window.start_ns;
        if at_stop.is_none() && !switched_inside && !sampled && slot.ts_ns == 0 {
            return LastCycle::default();
        }
        let from = if stats.last_out_ns != 0 {
            stats.last_out_ns
        } else {
            stats.last_in_ns
        }
        .max(window.start_ns);
        if from >= window.stop_ns {
            return LastCycle::default();
        }
        let waiting = slot.ts_ns != 0;
        let switched_in = stats.last_in_ns > from;
        let baseline = stats.flags & thread_flags::BASELINE != 0;
        let counters = at_stop.filter(|_| baseline);
        let cycle = split_cycle(&CycleInput {
            from_ns: from,
            to_ns: window.stop_ns,
            in_ns: if switched_in { stats.last_in_ns } else { 0 },
            wake_ns: slot.wake_ts_ns,
            waiting,
            runqueue_wait: is_runqueue_wait(slot),
            exec_delta: counters.map_or(0, |c| c.exec_ns.saturating_sub(stats.last_exec_ns)),
            exec_known: counters.is_some() && !switched_in,
            delay_delta: counters.map_or(0, |c| c.delay_ns.saturating_sub(stats.last_delay_ns)),
            delay_known: counters.is_some() && switched_in,
        });
        if waiting {
            self.last_wait(tid, slot, &cycle, switched_in, site_hists, opts);
        }
        LastCycle {
            on_ns: cycle.on_ns,
            traced_ns: cycle.traced_on_ns,
            uncharged_ns: cycle.uncharged_ns,
        }
    }

    /// Books the part of a thread's last cycle spent waiting, as `finished_waits` books the
    /// kernel's: to the wait's stacks and state; not at all when its state is unknown or it
    /// is longer than `max_block_ns` (or, finished, shorter than `min_block_ns`). A wait
    /// still open at the end of the window is counted in `open_waits`.
    fn last_wait(
        &mut self,
        tid: u32,
        slot: &WaitStart,
        cycle: &Cycle,
        switched_in: bool,
        site_hists: &mut HashMap<SiteKey, WaitHist>,
        opts: &AccountOptions,
    ) {
        let runqueue_wait = is_runqueue_wait(slot);
        let total = cycle.blocked_ns + cycle.runnable_ns;
        let wait_state = WaitState::from_u32(slot.state);
        if let Some(state) = wait_state
            && total > 0
            && total <= opts.max_block_ns
            && (!switched_in || total >= opts.min_block_ns)
        {
            if !switched_in {
                self.open_waits += 1;
            }
            let seeded_whole = slot.flags & wait_flags::SNAPSHOT != 0 && !switched_in;
            // A preemption on the way to a sleep is that sleep's time, no wait of its own.
            let a_wait = slot.flags & wait_flags::PREEMPTED_ASLEEP == 0;
            let add = |acc: &mut Self, state: WaitState, ns: u64| {
                if ns == 0 {
                    return;
                }
                // The wait for a CPU that follows is not on the resource.
                let resource = if is_blocked(state) { slot.resource } else { 0 };
                let e = acc.entry_on(
                    tid,
                    slot.user_stack,
                    slot.kernel_stack,
                    Kind::Off(state),
                    resource,
                );
                e.time_ns += ns;
                if a_wait && switched_in {
                    e.finished(ns);
                } else if a_wait && seeded_whole {
                    // Blocked for the whole window: its one unfinished wait is the longest.
                    e.max_ns = e.max_ns.max(ns);
                }
                acc.thread(tid).time.add_wait(state, ns);
            };
            if runqueue_wait {
                add(self, state, total);
            } else {
                add(self, state, cycle.blocked_ns);
                add(self, WaitState::RunqueueWoken, cycle.runnable_ns);
                if a_wait && switched_in && cycle.blocked_ns > 0 {
                    let site = SiteKey {
                        state: slot.state,
                        epoch: 0,
                        user_stack: slot.user_stack,
                        kernel_stack: slot.kernel_stack,
                    };
                    let hist = site_hists.entry(site).or_default();
                    hist.buckets[hist_bucket(cycle.blocked_ns)] += 1;
                }
            }
        }
    }

    /// On-CPU time per stack. With switches traced, the samples apportion the CPU time that
    /// is the thread's own work; the profiler's programs and the time charged before a
    /// switch-in get entries of their own. Otherwise each sample is one period.
    fn on_cpu(
        &mut self,
        samples: &[(SampleKey, SampleValue)],
        cpu: &HashMap<u32, CpuTime>,
        opts: &AccountOptions,
    ) {
        let sampled_ns = if opts.mode.samples_on_cpu() {
            self.samples(samples)
        } else {
            HashMap::new()
        };
        // Without switch tracing, and for a thread the switch programs never recorded (a full
        // thread table), the samples are all there is.
        for (&tid, &ns) in &sampled_ns {
            if !cpu.contains_key(&tid) {
                self.thread(tid).time.running = ns;
            }
        }
        if !opts.mode.traces_switches() {
            return;
        }
        // Per thread: the factor that turns its sample periods into its share of work.
        let mut scale: HashMap<u32, (u64, u64)> = HashMap::new();
        for (&tid, time) in cpu {
            let sampled = sampled_ns.get(&tid).copied().unwrap_or(0);
            if let Some(factor) = self.cpu_time(tid, time, sampled, opts) {
                scale.insert(tid, factor);
            }
        }
        for e in self.entries.values_mut() {
            if e.kind != Kind::OnCpu || e.samples == 0 {
                continue;
            }
            if let Some(&(work, sampled)) = scale.get(&e.tid) {
                e.time_ns = (e.time_ns as u128 * work as u128 / sampled as u128) as u64;
            }
        }
    }

    /// Each sample as one period on its stack; the sampled time of each thread.
    fn samples(&mut self, samples: &[(SampleKey, SampleValue)]) -> HashMap<u32, u64> {
        let mut sampled_ns: HashMap<u32, u64> = HashMap::new();
        for (key, value) in samples {
            let e = self.entry(key.tid, key.user_stack, key.kernel_stack, Kind::OnCpu);
            e.samples += value.count;
            e.time_ns += value.period_ns;
            *sampled_ns.entry(key.tid).or_default() += value.period_ns;
            self.thread(key.tid).samples += value.count;
        }
        sampled_ns
    }

    /// Books a thread's CPU time as the switch programs counted it (`sampled`: its samples'
    /// time): running, the profiler's share, switching in, and the time in no one's books.
    /// The thread's (work, sampled) when its samples are to be scaled to its work.
    fn cpu_time(
        &mut self,
        tid: u32,
        time: &CpuTime,
        sampled: u64,
        opts: &AccountOptions,
    ) -> Option<(u64, u64)> {
        let window_ns = opts.window.len_ns();
        let on = time.on_ns.min(window_ns);
        let traced = time.traced_ns.min(on);
        let overhead = time.overhead_ns.min(traced);
        let work = traced - overhead;
        let switching_in = on - traced;
        let t = self.thread(tid);
        t.time.running = on - overhead;
        t.time.profiler = overhead;
        t.switching_in_ns = switching_in;
        t.on_cpu_exact = true;
        // Neither CPU time nor a wait in the kernel's books: state "other", in a frame of
        // its own, so the thread's states still add up to the window.
        let uncharged = time.uncharged_ns.min(window_ns - on);
        t.uncharged_ns = uncharged;
        // Waits that could not be recorded: their time is known, their state is not.
        let lost = time.lost_ns.min(window_ns - on - uncharged);
        t.lost_ns = lost;
        self.other_time(tid, stack_id::UNCHARGED, uncharged);
        self.other_time(tid, stack_id::LOST_WAITS, lost);
        if !opts.mode.samples_on_cpu() {
            return None;
        }
        if sampled == 0 && work > 0 {
            self.entry(tid, stack_id::UNSAMPLED, stack_id::EMPTY, Kind::OnCpu)
                .time_ns = work;
        }
        for (id, ns) in [
            (stack_id::SWITCHING_IN, switching_in),
            (stack_id::PROFILER, overhead),
        ] {
            if ns > 0 {
                self.entry(tid, id, stack_id::EMPTY, Kind::OnCpu).time_ns = ns;
            }
        }
        (sampled > 0).then_some((work, sampled))
    }
}

fn wakers_of(
    records: &[(WakerKey, WakerValue)],
    processes: &BTreeMap<u32, ProcessInfo>,
) -> Vec<Waker> {
    let mut wakers: Vec<Waker> = records
        .iter()
        .filter_map(|(k, v)| {
            Some(Waker {
                tid: k.tid,
                state: WaitState::from_u32(k.state)?,
                user_stack: k.user_stack,
                kernel_stack: k.kernel_stack,
                waker_tid: k.waker_tid,
                waker_pid: k.waker_tgid,
                waker_name: comm_name(&v.waker_comm),
                waker_user_stack: if processes.contains_key(&k.waker_tgid)
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
        .collect();
    wakers.sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then(a.tid.cmp(&b.tid)));
    wakers
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler_common::{SampleKey, SampleValue, ThreadStats, WaitStart};

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn window() -> Window {
        Window {
            start_ns: 10 * S,
            stop_ns: 20 * S,
        }
    }

    fn opts(mode: Mode) -> AccountOptions {
        AccountOptions {
            processes: BTreeMap::new(),
            pid_of: HashMap::new(),
            mode,
            window: window(),
            period_ns: 10 * MS,
            min_block_ns: 0,
            max_block_ns: u64::MAX,
            wakers: true,
        }
    }

    fn stats() -> ThreadStats {
        let mut comm = [0u8; 16];
        comm[..4].copy_from_slice(b"work");
        ThreadStats {
            comm,
            flags: thread_flags::BASELINE,
            ..ThreadStats::default()
        }
    }

    fn sample(tid: u32, ustack: u64, count: u64) -> (SampleKey, SampleValue) {
        (
            SampleKey {
                tid,
                epoch: 0,
                user_stack: ustack,
                kernel_stack: 0,
            },
            SampleValue {
                count,
                period_ns: count * 10 * MS,
            },
        )
    }

    fn wait(state: WaitState, ts: u64, wake: u64) -> WaitStart {
        WaitStart {
            ts_ns: ts,
            user_stack: 5,
            kernel_stack: 6,
            state: state as u32,
            wake_ts_ns: wake,
            ..WaitStart::default()
        }
    }

    fn by_stack(p: &Profile, tid: u32) -> HashMap<(u64, Kind), u64> {
        p.entries
            .iter()
            .filter(|e| e.tid == tid)
            .map(|e| ((e.user_stack, e.kind), e.time_ns))
            .collect()
    }

    /// A thread's time of one kind over its entries: where the run-queue kinds, one state in
    /// `ThreadTime`, are told apart.
    fn kind_ns(p: &Profile, tid: u32, kind: Kind) -> u64 {
        p.entries
            .iter()
            .filter(|e| e.tid == tid && e.kind == kind)
            .map(|e| e.time_ns)
            .sum()
    }

    #[test]
    fn cpu_mode_counts_sample_periods() {
        let drained = Drained {
            samples: vec![sample(7, 1, 30), sample(7, 2, 10)],
            ..Drained::default()
        };
        let p = account(drained, Seeds::default(), &opts(Mode::Cpu));
        assert_eq!(p.threads[&7].samples, 40);
        assert_eq!(p.threads[&7].on_cpu_ns(), 400 * MS);
        assert!(!p.threads[&7].on_cpu_exact);
        assert_eq!(p.entries.len(), 2);
    }

    #[test]
    fn samples_share_the_work_and_the_rest_of_the_cpu_time_is_named() {
        let mut drained = Drained {
            samples: vec![sample(7, 1, 30), sample(7, 2, 10)],
            ..Drained::default()
        };
        // Exited at 19 s after 5 s on the CPU by the scheduler's account, 4.5 s of it between
        // switch-ins and switch-outs, 0.1 s of it the profiler's programs.
        let mut st = stats();
        st.on_cpu_ns = 5 * S;
        st.traced_on_ns = 4_500 * MS;
        st.overhead_ns = 100 * MS;
        st.last_out_ns = 19 * S;
        st.flags |= thread_flags::EXITED;
        drained.threads.insert(
            7,
            Thread {
                stats: st,
                wait: WaitStart::default(),
            },
        );
        let p = account(drained, Seeds::default(), &opts(Mode::Wall));
        let t = &p.threads[&7];
        assert!(t.on_cpu_exact);
        assert_eq!(
            (
                t.on_cpu_ns(),
                t.time.profiler,
                t.switching_in_ns,
                t.time.running
            ),
            (5 * S, 100 * MS, 500 * MS, 4_900 * MS)
        );
        let e = by_stack(&p, 7);
        assert_eq!(e[&(1, Kind::OnCpu)], 3_300 * MS);
        assert_eq!(e[&(2, Kind::OnCpu)], 1_100 * MS);
        assert_eq!(e[&(stack_id::SWITCHING_IN, Kind::OnCpu)], 500 * MS);
        assert_eq!(e[&(stack_id::PROFILER, Kind::OnCpu)], 100 * MS);
    }

    #[test]
    fn a_process_gone_before_its_name_was_read_takes_its_main_threads() {
        let thread = |pid: u32, name: &str| ThreadTime {
            pid,
            name: name.into(),
            ..ThreadTime::default()
        };
        let threads = BTreeMap::from([
            (10, thread(10, "redis-server")),
            (21, thread(20, "worker")),
            (30, thread(30, "tid-30")),
        ]);
        let mut processes: BTreeMap<u32, ProcessInfo> = [10, 20, 30, 40]
            .into_iter()
            .map(|p| (p, ProcessInfo::default()))
            .collect();
        processes.get_mut(&40).unwrap().name = "nginx".into();
        name_unnamed_processes(&mut processes, &threads);
        let names: Vec<&str> = processes.values().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["redis-server", "worker", "pid-30", "nginx"]);
    }

    #[test]
    fn steal_is_other_time_in_a_frame_of_its_own_not_cpu() {
        // Exited at 19 s: 3 s charged as CPU, 0.7 s held the CPU uncharged (steal).
        let drained = || {
            let mut st = stats();
            st.on_cpu_ns = 3 * S;
            st.traced_on_ns = 3 * S;
            st.uncharged_ns = 700 * MS;
            st.last_out_ns = 19 * S;
            st.flags |= thread_flags::EXITED;
            let mut drained = Drained {
                samples: vec![sample(7, 1, 30)],
                ..Drained::default()
            };
            drained.threads.insert(
                7,
                Thread {
                    stats: st,
                    wait: WaitStart::default(),
                },
            );
            drained
        };
        for mode in [Mode::Wall, Mode::Off] {
            let p = account(drained(), Seeds::default(), &opts(mode));
            let t = &p.threads[&7];
            assert_eq!(t.on_cpu_ns(), 3 * S);
            assert_eq!(t.uncharged_ns, 700 * MS);
            assert_eq!(t.time.other, 700 * MS);
            let e = by_stack(&p, 7);
            assert_eq!(
                e[&(stack_id::UNCHARGED, Kind::Off(WaitState::Other))],
                700 * MS
            );
        }
    }

    #[test]
    fn a_thread_running_all_along_is_on_the_cpu_for_the_whole_window() {
        let mut drained = Drained {
            samples: vec![sample(7, 1, 990)],
            ..Drained::default()
        };
        // Seeded on a CPU at the start and never switched out.
        let mut st = stats();
        st.last_out_ns = 10 * S;
        st.last_in_ns = 10 * S;
        drained.threads.insert(
            7,
            Thread {
                stats: st,
                wait: WaitStart::default(),
            },
        );
        let p = account(drained, Seeds::default(), &opts(Mode::Wall));
        assert_eq!(p.threads[&7].on_cpu_ns(), 10 * S);
        assert_eq!(by_stack(&p, 7)[&(1, Kind::OnCpu)], 10 * S);
    }

    #[test]
    fn a_thread_gone_at_the_end_with_no_trace_in_the_window_is_not_charged_the_window() {
        // Running when the start snapshot seeded it, no switch and no sample inside the
        // window, gone before its counters could be read at the end: its exit raced the
        // seeding. It is not charged 10 s on the CPU.
        let mut drained = Drained::default();
        let mut st = stats();
        st.last_out_ns = 10 * S;
        st.last_in_ns = 10 * S;
        drained.threads.insert(
            7,
            Thread {
                stats: st,
                wait: WaitStart::default(),
            },
        );
        let p = account(drained, Seeds::default(), &opts(Mode::Wall));
        assert_eq!(p.threads.get(&7).map_or(0, |t| t.on_cpu_ns()), 0);
    }

    #[test]
    fn the_last_cycle_is_closed_with_the_counters_read_at_the_end() {
        let mut drained = Drained::default();
        // Switched out to sleep at 15 s, woken at 17 s, switched in at 18 s and running at the
        // end; the scheduler says 0.5 s of that was run-queue time. 1 s on the CPU before.
        let mut st = stats();
        st.on_cpu_ns = S;
        st.traced_on_ns = S;
        st.last_out_ns = 15 * S;
        st.last_in_ns = 18 * S;
        st.last_delay_ns = 100;
        drained.threads.insert(
            3,
            Thread {
                stats: st,
                wait: wait(WaitState::Sleep, 15 * S, 17 * S),
            },
        );
        drained.sched_at_stop.insert(
            3,
            SchedStat {
                exec_ns: 0,
                delay_ns: 100 + 500 * MS,
            },
        );
        let p = account(drained, Seeds::default(), &opts(Mode::Off));
        let t = &p.threads[&3];
        assert_eq!(t.on_cpu_ns(), 3 * S);
        assert_eq!(t.time.runnable, 500 * MS);
        assert_eq!(
            kind_ns(&p, 3, Kind::Off(WaitState::RunqueueWoken)),
            500 * MS
        );
        assert_eq!(t.time.sleep, 2_500 * MS);
        let e = p
            .entries
            .iter()
            .find(|e| e.kind == Kind::Off(WaitState::Sleep))
            .unwrap();
        assert_eq!((e.waits, e.min_ns, e.max_ns), (1, 2_500 * MS, 2_500 * MS));
        assert_eq!(p.open_waits, 0);
    }

    #[test]
    fn open_waits_are_cut_at_the_window_end() {
        let mut drained = Drained::default();
        // Thread 1: blocked throughout (seeded). Thread 3: switched out at 15 s in I/O, woken at
        // 19 s, not yet back on a CPU.
        let mut seeded = wait(WaitState::Sleep, 10 * S, 0);
        seeded.flags = wait_flags::SNAPSHOT;
        let mut st = stats();
        st.last_out_ns = 10 * S;
        drained.threads.insert(
            1,
            Thread {
                stats: st,
                wait: seeded,
            },
        );
        let mut st = stats();
        st.on_cpu_ns = 5 * S;
        st.traced_on_ns = 5 * S;
        st.last_out_ns = 15 * S;
        drained.threads.insert(
            3,
            Thread {
                stats: st,
                wait: wait(WaitState::Io, 15 * S, 19 * S),
            },
        );
        let p = account(drained, Seeds::default(), &opts(Mode::Off));
        assert_eq!(p.threads[&1].time.sleep, 10 * S);
        assert_eq!(p.entries[0].max_ns, 10 * S);
        let t = &p.threads[&3];
        assert_eq!(t.time.io, 4 * S);
        assert_eq!(t.time.runnable, S);
        assert_eq!(kind_ns(&p, 3, Kind::Off(WaitState::RunqueueWoken)), S);
        assert_eq!(t.total_ns(), 10 * S);
        assert_eq!(p.open_waits, 2);
    }

    #[test]
    fn a_final_switch_in_the_kernel_did_not_report_is_placed_from_cpu_time() {
        let mut drained = Drained::default();
        // Preempted at 15 s (CPU time then: 4 s); no switch-in reported, but the thread's CPU
        // time at the end is 6 s: it ran 2 s of the last 5.
        let mut st = stats();
        st.on_cpu_ns = 5 * S;
        st.traced_on_ns = 5 * S;
        st.last_out_ns = 15 * S;
        st.last_exec_ns = 4 * S;
        drained.threads.insert(
            3,
            Thread {
                stats: st,
                wait: wait(WaitState::RunqueuePreempted, 15 * S, 0),
            },
        );
        drained.sched_at_stop.insert(
            3,
            SchedStat {
                exec_ns: 6 * S,
                delay_ns: 0,
            },
        );
        drained.samples = vec![sample(3, 1, 10)];
        let p = account(drained, Seeds::default(), &opts(Mode::Wall));
        assert_eq!(p.threads[&3].on_cpu_ns(), 7 * S);
        assert_eq!(p.threads[&3].time.runnable, 3 * S);
        assert_eq!(
            kind_ns(&p, 3, Kind::Off(WaitState::RunqueuePreempted)),
            3 * S
        );
    }

    #[test]
    fn finished_waits_keep_count_min_and_max() {
        let drained = Drained {
            waits: vec![(
                WaitKey {
                    tid: 4,
                    state: WaitState::Sleep as u16,
                    epoch: 0,
                    user_stack: 1,
                    kernel_stack: 2,
                    resource: 0,
                },
                WaitValue {
                    total_ns: 60 * MS,
                    count: 3,
                    max_ns: 21 * MS,
                    min_ns: 19 * MS,
                },
            )],
            ..Drained::default()
        };
        let p = account(drained, Seeds::default(), &opts(Mode::Off));
        let e = &p.entries[0];
        assert_eq!(
            (e.waits, e.time_ns, e.min_ns, e.max_ns),
            (3, 60 * MS, 19 * MS, 21 * MS)
        );
        assert_eq!(p.threads[&4].time.sleep, 60 * MS);
        assert_eq!(p.threads[&4].name, "tid-4");
    }
}
