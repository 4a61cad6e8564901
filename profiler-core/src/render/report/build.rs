//! The report's builder: the time model with named stacks and its analysis → the report
//! model, every figure computed once — shares, totals, threads, processes, groups, idle
//! threads, functions, sites (`sites.rs`), run queue, notes (`notes.rs`) and the verdict. The
//! writers only format what this returns.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BTreeSet, HashMap},
};

use profiler_common::{Counter, RunqueueHist, WaitState, stack_id};

use super::{
    goroutines,
    model::{
        Capture, FunctionRow, GroupRow, GroupWait, IdleRow, Loss, MachineRow, MachineUser,
        ProcessRow, Report, RunQueue, SCHEMA_VERSION, ShortLivedRow, SiteRow, StateShares,
        ThreadRow, ThreadTableRow,
    },
    notes, sites,
    units::{ms, pct_of, round1, round3, secs, thread_name},
    verdict, when,
    words::{IdleRuleWords, idle_rule, wakers_text},
};
use crate::{
    analysis::{self, Analysis, SiteId},
    model::{
        CaptureMeta, Hist, Kind, Machine, Profile, StackNames, StateTimes, Timeline, stack_frames,
    },
};

const TOP_FUNCTIONS: usize = 15;

/// The smallest share of a group's active time (%) named as its dominant or event wait.
const MIN_GROUP_WAIT_PCT: f64 = 0.5;

pub const PERCENTILE_METHOD: &str = "in-kernel log2 histogram with 32 linear sub-buckets per \
     power of two (each at most 3.1 % wide), linear interpolation inside the bucket, bounded by \
     the exact minimum and maximum; per blocking site and for the run queue overall (per thread: \
     count, mean, minimum and maximum only)";

/// What the report needs besides the profile.
pub struct ReportInput<'a> {
    pub profile: &'a Profile,
    pub names: &'a StackNames,
    pub meta: &'a CaptureMeta,
    pub analysis: &'a Analysis,
    /// The capture's timeline, when it has one: each top site's `when` and the waits.
    pub timeline: Option<&'a Timeline>,
}

pub fn build(input: &ReportInput<'_>) -> Report {
    let (profile, names, analysis) = (input.profile, input.names, input.analysis);
    let totals = profile.state_totals();
    // All threads' time: the denominator of every share of "all thread time".
    let all_thread_ns = totals.total().max(1);
    let threads = thread_rows(profile, analysis);
    let (short_lived, thread_table) = short_lived_rows(profile, analysis, &threads);
    let processes = process_rows(profile);
    let all_sites = sites::site_rows(profile, names, analysis, all_thread_ns);
    let groups = group_rows(profile, analysis, &all_sites);
    let idle_threads = idle_rows(profile, analysis, &all_sites, all_thread_ns);
    let (mut top_blocking_sites, ranked_sites) = sites::ranked(all_sites);
    let timeline = input.timeline.map(|timeline| {
        when::when(
            &mut top_blocking_sites,
            &ranked_sites,
            profile,
            names,
            analysis,
            timeline,
        );
        when::waits(profile, names, analysis, timeline)
    });
    let machine = input
        .meta
        .machine
        .as_ref()
        .map(|m| machine_row(m, analysis));
    let (go_processes, goroutines) = goroutines::rows(profile, names);
    let mut report = Report {
        schema_version: SCHEMA_VERSION,
        capture: capture(profile, input.meta, processes.len()),
        verdict: String::new(),
        machine,
        processes,
        idle_rule: idle_rule(IdleRuleWords::Full),
        idle_wait_frames: crate::waits::idle_wait_frames(),
        event_wait_frames: analysis::EVENT_WAIT_FRAMES,
        threads,
        short_lived,
        thread_table,
        groups,
        idle_threads,
        top_on_cpu_functions: function_rows(profile, names),
        top_blocking_sites,
        ranked_sites,
        run_queue: run_queue(profile),
        notes: notes::notes(profile, names, input.meta),
        percentile_method: PERCENTILE_METHOD,
        timeline,
        chains: crate::chain::chains(profile, names, analysis),
        go_processes,
        goroutines,
        mode: profile.mode,
        totals,
    };
    report.verdict = verdict::verdict(&verdict::VerdictInput::of(&report));
    report
}

/// The CPUs are saturated at this busy share …
pub const SATURATED_PCT: f64 = 90.0;
/// … when the target's active threads waited for a CPU at least this share of their time.
const STARVED_PCT: f64 = 5.0;
/// Processes named beside the CPUs' busy share.
const MACHINE_TOP: usize = 5;

/// The machine's figures, and whether its CPUs starved the target's active threads.
fn machine_row(m: &Machine, analysis: &Analysis) -> MachineRow {
    let capacity = m.capacity_s();
    let pct = |s: f64| {
        round1(if capacity > 0.0 {
            100.0 * s / capacity
        } else {
            0.0
        })
    };
    let mut active = StateTimes::default();
    for g in analysis.active_groups() {
        active += g.time;
    }
    let target_runnable_pct = round1(active.pct(active.runnable));
    let busy_pct = round1(m.busy_pct());
    MachineRow {
        cpus: m.cpus,
        busy_pct,
        user_pct: pct(m.user_s),
        system_pct: pct(m.system_s),
        iowait_pct: pct(m.iowait_s),
        steal_pct: pct(m.steal_s),
        top: m
            .by_name()
            .into_iter()
            .take(MACHINE_TOP)
            .map(|(name, cpu_s, processes, target)| MachineUser {
                name,
                processes,
                cpu_pct: pct(cpu_s),
                target,
            })
            .collect(),
        saturated: busy_pct >= SATURATED_PCT && target_runnable_pct >= STARVED_PCT,
        target_runnable_pct,
    }
}

/// The capture: what was profiled, how, and what was lost.
fn capture(profile: &Profile, meta: &CaptureMeta, processes: usize) -> Capture {
    let window_ns = profile.window.len_ns().max(1);
    let lost = profile
        .lost()
        .into_iter()
        .filter(|l| l.1 > 0)
        .map(|(what, count, raise_with)| Loss {
            what,
            count,
            raise_with,
        })
        .collect();
    Capture {
        target: meta.target.clone(),
        pid: meta.pid,
        selection: if meta.selection.is_empty() {
            format!("{} (PID {})", meta.target, meta.pid)
        } else {
            meta.selection.clone()
        },
        processes,
        mode: profile.mode.name(),
        duration_s: secs(window_ns),
        frequency_hz: profile
            .mode
            .samples_on_cpu()
            .then(|| round1(1e9 / profile.period_ns.max(1) as f64)),
        samples: profile.counters.get(Counter::Samples),
        kernel: meta.kernel.clone(),
        threads: profile.threads.len(),
        waits: profile.counters.get(Counter::Waits),
        open_waits_at_end: profile.open_waits,
        blocked_at_start: profile.blocked_at_start,
        lost_total: profile.total_lost(),
        lost,
        counters: profile.counters.named().collect(),
        tables_at_end: profile.tables_at_end.clone(),
        ended_early: meta.ended_early.clone(),
        // A capture saved before `--no-wakers` reads as recorded, whatever its mode.
        wakers_recorded: profile.wakers_recorded && profile.mode.traces_switches(),
        window_ns: profile.window.len_ns(),
    }
}

/// `t` per state as % of `of`.
fn shares(t: &StateTimes, of: u64) -> StateShares {
    StateShares {
        running_pct: pct_of(t.running, of),
        runnable_pct: pct_of(t.runnable, of),
        sleep_pct: pct_of(t.sleep, of),
        io_pct: pct_of(t.io, of),
        other_pct: pct_of(t.other, of),
        profiler_pct: pct_of(t.profiler, of),
    }
}

/// Per thread, where its time went, busiest first.
fn thread_rows(profile: &Profile, analysis: &Analysis) -> Vec<ThreadRow> {
    let window_ns = profile.window.len_ns().max(1);
    let mut run_queue_per_thread: HashMap<u32, Hist> = HashMap::new();
    for e in &profile.entries {
        if let Kind::Off(WaitState::RunqueuePreempted | WaitState::RunqueueWoken) = e.kind {
            run_queue_per_thread
                .entry(e.tid)
                .or_default()
                .add_waits(e.waits, e.time_ns, e.min_ns, e.max_ns);
        }
    }
    let exact = profile.mode.traces_switches();
    let mut threads: Vec<_> = profile.threads.iter().collect();
    threads.sort_by_key(|(tid, t)| (Reverse(t.on_cpu_ns()), **tid));
    threads
        .into_iter()
        .map(|(&tid, t)| {
            let all = t.share_base_ns(profile.mode, window_ns);
            ThreadRow {
                tid,
                pid: if t.pid == 0 { tid } else { t.pid },
                name: t.name.clone(),
                class: if analysis.is_idle(tid) {
                    "idle"
                } else {
                    "active"
                },
                group: analysis
                    .threads
                    .get(&tid)
                    .and_then(|c| analysis.groups.get(c.group))
                    .map_or_else(String::new, |g| g.label(profile)),
                shares: shares(&t.time, all),
                on_cpu_s: secs(t.on_cpu_ns()),
                switching_in_s: exact.then(|| secs(t.switching_in_ns)),
                uncharged_s: exact.then(|| secs(t.uncharged_ns)),
                schedstat_on_cpu_s: t.schedstat.map(|s| secs(s.exec_ns)),
                schedstat_runnable_s: t.schedstat.map(|s| secs(s.delay_ns)),
                run_queue_delay: run_queue_per_thread.get(&tid).and_then(Hist::latency),
            }
        })
        .collect()
}

/// Short-lived threads of a group are one row once there are this many.
const SHORT_LIVED_ROW_MIN: usize = 5;

/// A thread lived less than the window when its time in it is less than this share of it.
const SHORT_LIVED_LIFE_PCT: u64 = 90;

/// The short-lived threads of each group with at least [`SHORT_LIVED_ROW_MIN`] of them,
/// summed, and the thread tables' rows: every other thread, and those groups, by CPU time.
fn short_lived_rows(
    profile: &Profile,
    analysis: &Analysis,
    threads: &[ThreadRow],
) -> (Vec<ShortLivedRow>, Vec<ThreadTableRow>) {
    let window_ns = profile.window.len_ns().max(1);
    // Without switches traced a thread's life is not known: no short-lived rows.
    let short = |tid: u32| {
        profile.mode.traces_switches()
            && profile
                .threads
                .get(&tid)
                .is_some_and(|t| t.total_ns() < window_ns / 100 * SHORT_LIVED_LIFE_PCT)
    };
    let mut by_group: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for row in threads.iter().filter(|row| short(row.tid)) {
        if let Some(class) = analysis.threads.get(&row.tid) {
            by_group.entry(class.group).or_default().push(row.tid);
        }
    }
    by_group.retain(|_, tids| tids.len() >= SHORT_LIVED_ROW_MIN);
    let folded: HashMap<u32, usize> = by_group
        .values()
        .enumerate()
        .flat_map(|(i, tids)| tids.iter().map(move |tid| (*tid, i)))
        .collect();
    let rows: Vec<ShortLivedRow> = by_group
        .iter()
        .map(|(group, tids)| short_lived_row(profile, analysis, *group, tids))
        .collect();
    let mut table: Vec<(f64, ThreadTableRow)> = threads
        .iter()
        .enumerate()
        .filter(|(_, row)| !folded.contains_key(&row.tid))
        .map(|(i, row)| (row.on_cpu_s, ThreadTableRow::Thread(i)))
        .chain(
            rows.iter()
                .enumerate()
                .map(|(i, row)| (row.on_cpu_s, ThreadTableRow::ShortLived(i))),
        )
        .collect();
    table.sort_by(|a, b| b.0.total_cmp(&a.0));
    (rows, table.into_iter().map(|(_, row)| row).collect())
}

/// One group's short-lived threads, summed.
fn short_lived_row(
    profile: &Profile,
    analysis: &Analysis,
    group: usize,
    tids: &[u32],
) -> ShortLivedRow {
    let mut time = StateTimes::default();
    let mut lives: Vec<u64> = Vec::with_capacity(tids.len());
    let mut on_cpu = 0;
    let mut pid = 0;
    for t in tids.iter().filter_map(|tid| profile.threads.get(tid)) {
        time += t.time;
        lives.push(t.total_ns());
        on_cpu += t.on_cpu_ns();
        pid = t.pid;
    }
    lives.sort_unstable();
    let median = lives.get(lives.len() / 2).copied().unwrap_or(0);
    let label = analysis
        .groups
        .get(group)
        .map_or_else(String::new, |g| g.label(profile));
    ShortLivedRow {
        pid,
        group: label,
        thread_count: tids.len(),
        median_life_ms: round3(ms(median as f64)),
        on_cpu_s: secs(on_cpu),
        shares: shares(&time, time.total()),
    }
}

/// Per process, its threads summed, busiest first.
fn process_rows(profile: &Profile) -> Vec<ProcessRow> {
    let window_ns = profile.window.len_ns().max(1);
    let since_start = |ns: u64| round3(secs(ns.saturating_sub(profile.window.start_ns)));
    profile
        .process_totals()
        .into_iter()
        .map(|p| {
            let t = p.time;
            let info = profile.processes.get(&p.pid);
            ProcessRow {
                pid: p.pid,
                parent: info.and_then(|i| i.parent),
                forked_at_s: info.and_then(|i| i.forked_ns).map(since_start),
                exited_at_s: info.and_then(|i| i.exited_ns).map(since_start),
                execs: info.map_or(0, |i| i.execs),
                threads: p.threads,
                cpus: round3(t.on_cpu() as f64 / window_ns as f64),
                on_cpu_s: secs(t.on_cpu()),
                thread_s: secs(t.total()),
                shares: shares(&t, t.total()),
                name: p.name,
            }
        })
        .collect()
}

/// On-CPU functions, self and total, largest self first.
fn function_rows(profile: &Profile, names: &StackNames) -> Vec<FunctionRow> {
    let mut self_ns: HashMap<String, u64> = HashMap::new();
    let mut total_ns: HashMap<String, u64> = HashMap::new();
    let mut on_cpu_ns = 0u64;
    for e in profile.entries.iter().filter(|e| e.kind == Kind::OnCpu) {
        on_cpu_ns += e.time_ns;
        // CPU time that is not code (charged before a switch-in, the profiler's programs,
        // between samples) is in the thread table, not among functions.
        if matches!(
            e.user_stack,
            stack_id::SWITCHING_IN | stack_id::PROFILER | stack_id::UNSAMPLED
        ) {
            continue;
        }
        let frames = stack_frames(e.user_stack, e.kernel_stack, names);
        if let Some(leaf) = frames.last() {
            *self_ns.entry(leaf.clone()).or_default() += e.time_ns;
        }
        let unique: BTreeSet<&String> = frames.iter().collect();
        for f in unique {
            *total_ns.entry(f.clone()).or_default() += e.time_ns;
        }
    }
    let mut functions: Vec<FunctionRow> = self_ns
        .iter()
        .map(|(f, &s)| {
            let t = total_ns.get(f).copied().unwrap_or(s);
            FunctionRow {
                function: f.clone(),
                self_pct: pct_of(s, on_cpu_ns),
                total_pct: pct_of(t, on_cpu_ns),
                self_s: secs(s),
                total_s: secs(t),
            }
        })
        .collect();
    functions.sort_by(|a, b| {
        b.self_s
            .total_cmp(&a.self_s)
            .then(a.function.cmp(&b.function))
    });
    functions.truncate(TOP_FUNCTIONS);
    functions
}

/// The groups, as `analysis` ranked them.
fn group_rows(
    profile: &Profile,
    analysis: &Analysis,
    sites: &BTreeMap<SiteId, SiteRow>,
) -> Vec<GroupRow> {
    analysis
        .groups
        .iter()
        .map(|g| {
            let t = &g.time;
            let pct = |ns: u64| round1(t.pct(ns));
            GroupRow {
                name: g.label(profile),
                process: g.process.clone(),
                pattern: g.pattern.clone(),
                thread_count: g.tids.len(),
                idle_threads: g.idle,
                threads: g
                    .tids
                    .iter()
                    .take(5)
                    .map(|tid| thread_name(profile, *tid))
                    .collect(),
                running_pct: pct(t.running),
                runnable_pct: pct(t.runnable),
                sleep_pct: pct(t.sleep),
                io_pct: pct(t.io),
                other_pct: pct(t.other),
                idle_wait_pct: pct(g.idle_wait_ns),
                work_wait_pct: pct(g.work_wait_ns),
                busy_s: secs(t.busy()),
                work_s: secs(g.work_ns()),
                dominant_wait: g
                    .dominant_wait
                    .as_ref()
                    .and_then(|w| group_wait(w, sites, &pct)),
                event_wait: g
                    .event_wait
                    .as_ref()
                    .and_then(|w| group_wait(w, sites, &pct)),
                loop_blocked: g
                    .loop_blocked
                    .as_ref()
                    .and_then(|w| group_wait(w, sites, &pct)),
            }
        })
        .collect()
}

fn group_wait(
    (id, ns): &(SiteId, u64),
    sites: &BTreeMap<SiteId, SiteRow>,
    pct: &dyn Fn(u64) -> f64,
) -> Option<GroupWait> {
    let site = sites.get(id)?;
    // A group whose largest wait is a sliver (a Go server's GC handshakes, 0.0 %) has none
    // worth naming: the row and the JSON say so rather than print it.
    if pct(*ns) < MIN_GROUP_WAIT_PCT {
        return None;
    }
    Some(GroupWait {
        state: site.state,
        site: site.site.clone(),
        share_pct: pct(*ns),
        total_s: secs(*ns),
        p99_ms: site.latency.as_ref().and_then(|l| l.p99_ms),
        woken_by: site
            .wakers
            .first()
            .map(|w| wakers_text(std::slice::from_ref(w))),
        kind: site.kind,
        holders_mostly: site.holders.as_ref().and_then(|h| {
            let top = h.held.first()?;
            Some(format!(
                "{} ({}, {:.0} %)",
                top.what, top.state, top.share_pct
            ))
        }),
    })
}

/// The idle threads, as `analysis` gathered them.
fn idle_rows(
    profile: &Profile,
    analysis: &Analysis,
    sites: &BTreeMap<SiteId, SiteRow>,
    all_thread_ns: u64,
) -> Vec<IdleRow> {
    analysis
        .idle
        .iter()
        .map(|set| {
            let site = set.site.as_ref().and_then(|id| sites.get(id));
            IdleRow {
                process: set.process.clone(),
                pid: set.pid,
                state: site.map(|s| s.state),
                site: site.map(|s| s.site.clone()),
                kind: site.map(|s| s.kind),
                thread_count: set.tids.len(),
                threads: set
                    .tids
                    .iter()
                    .take(8)
                    .map(|tid| thread_name(profile, *tid))
                    .collect(),
                sleep_s: secs(set.sleep_ns),
                share_pct: pct_of(set.sleep_ns, all_thread_ns),
            }
        })
        .collect()
}

/// Run-queue delay after preemption and after wakeup, all threads together.
fn run_queue(profile: &Profile) -> RunQueue {
    let mut preempted = Hist::default();
    let mut after_wakeup = Hist::default();
    preempted.add_buckets(&profile.runqueue_hists[RunqueueHist::Preempted as usize]);
    after_wakeup.add_buckets(&profile.runqueue_hists[RunqueueHist::Woken as usize]);
    let (mut preempted_ns, mut after_wakeup_ns) = (0u64, 0u64);
    for e in &profile.entries {
        let (hist, total) = match e.kind {
            Kind::Off(WaitState::RunqueuePreempted) => (&mut preempted, &mut preempted_ns),
            Kind::Off(WaitState::RunqueueWoken) => (&mut after_wakeup, &mut after_wakeup_ns),
            _ => continue,
        };
        *total += e.time_ns;
        hist.add_waits(e.waits, e.time_ns, e.min_ns, e.max_ns);
    }
    RunQueue {
        preempted_s: secs(preempted_ns),
        preempted: preempted.latency(),
        after_wakeup_s: secs(after_wakeup_ns),
        after_wakeup: after_wakeup.latency(),
    }
}
