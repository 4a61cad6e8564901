//! Report: the time model with named stacks → what a performance write-up needs: where each
//! thread's time went, the top on-CPU functions, the top blocking sites with their latency
//! distribution and wakers, the run-queue delay, and one sentence naming the dominant state
//! and site. Rendered as terminal text, Markdown (`--report x.md`) or JSON (`--report x.json`,
//! schema: docs/report.schema.json).
//!
//! Percentiles come from the in-kernel histograms (log2 buckets with 32 linear sub-buckets,
//! each at most 3.1 % wide), interpolated linearly inside the bucket that holds the rank and
//! bounded by the exact minimum and maximum.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    io::{self, Write},
};

use profiler_common::{
    RunqueueHist, SiteKey as KernelSite, WaitState, hist_bucket_bounds, stack_id,
};
use serde::Serialize;

use crate::{
    analysis::{self, Analysis, SiteId, distinct_labels},
    holders::HoldersRow,
    model::{
        CaptureMeta, Hist, Kind, Mode, Profile, StackNames, stack_frames, waker_frames,
        waker_identity,
    },
    render::verdict,
    waits::{self, WaitKind},
};

/// Version of the JSON layout (docs/report.schema.json).
pub const SCHEMA_VERSION: u32 = 3;
const TOP_SITES: usize = 10;
const TOP_FUNCTIONS: usize = 15;
const TOP_WAKERS: usize = 3;

#[derive(Debug, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub capture: Capture,
    /// The busiest active group, its dominant wait and run-queue share; then the next group
    /// and the idle threads (render/verdict.rs).
    pub verdict: String,
    /// Each process's threads summed, busiest first.
    pub processes: Vec<ProcessRow>,
    /// How threads are classified idle or active.
    pub idle_rule: &'static str,
    /// Frames that make a wait an idle wait (waiting for work) in any thread: not ranked among
    /// blocking sites, never a group's dominant wait.
    pub idle_wait_frames: &'static [&'static str],
    /// Frames that make a wait an event wait (an event loop waiting for its next event): ranked
    /// after blocking sites, named apart in the verdict.
    pub event_wait_frames: &'static [&'static str],
    pub threads: Vec<ThreadRow>,
    /// Threads grouped into pools, active groups busiest first.
    pub groups: Vec<GroupRow>,
    /// Idle threads, by process and wait site.
    pub idle_threads: Vec<IdleRow>,
    pub top_on_cpu_functions: Vec<FunctionRow>,
    pub top_blocking_sites: Vec<SiteRow>,
    pub run_queue: RunQueue,
    /// Where a figure is less than it seems (e.g. samples that cannot see part of a thread's
    /// CPU time), each one sentence.
    pub notes: Vec<String>,
    pub percentile_method: &'static str,
}

#[derive(Debug, Serialize)]
pub struct Capture {
    /// The first target process's name and PID.
    pub target: String,
    pub pid: u32,
    /// What was selected, in words: PIDs with or without descendants, a cgroup, a command.
    pub selection: String,
    pub processes: usize,
    pub mode: &'static str,
    pub duration_s: f64,
    pub frequency_hz: Option<f64>,
    pub samples: u64,
    pub kernel: String,
    pub threads: usize,
    pub waits: u64,
    pub open_waits_at_end: u64,
    pub blocked_at_start: u64,
    pub lost_total: u64,
    pub lost: Vec<Loss>,
    /// Every in-kernel counter by name, losses and events alike.
    pub counters: BTreeMap<&'static str, u64>,
    /// Entries left in the kernel's per-process and per-thread tables when the window
    /// closed, by map name (exited processes' entries are freed during the capture).
    pub tables_at_end: BTreeMap<String, u64>,
    pub ended_early: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Loss {
    pub what: &'static str,
    pub count: u64,
    pub raise_with: Option<&'static str>,
}

#[derive(Debug, Serialize)]
pub struct ProcessRow {
    pub pid: u32,
    pub name: String,
    /// The target process that forked it during the capture.
    pub parent: Option<u32>,
    /// Seconds into the capture it was forked / its last thread exited, if it was / did.
    pub forked_at_s: Option<f64>,
    pub exited_at_s: Option<f64>,
    /// Programs it exec'd during the capture.
    pub execs: u32,
    pub threads: usize,
    /// CPU time over the window ÷ its length: CPUs it kept busy on average.
    pub cpus: f64,
    pub on_cpu_s: f64,
    /// All its threads' time in the window (a thread alive throughout adds the window's
    /// length): the denominator of its shares.
    pub thread_s: f64,
    /// Shares of `thread_s`, as for a thread.
    pub running_pct: f64,
    pub runnable_pct: f64,
    pub sleep_pct: f64,
    pub io_pct: f64,
    pub other_pct: f64,
    pub profiler_pct: f64,
}

#[derive(Debug, Serialize)]
pub struct ThreadRow {
    pub tid: u32,
    /// Its process.
    pub pid: u32,
    pub name: String,
    /// `idle` or `active` (see `idle_rule`).
    pub class: &'static str,
    /// The label of its group (`groups[].name`).
    pub group: String,
    /// On the CPU, the profiler's own programs left out.
    pub running_pct: f64,
    pub runnable_pct: f64,
    pub sleep_pct: f64,
    pub io_pct: f64,
    pub other_pct: f64,
    /// The profiler's programs, run on this thread's CPU time.
    pub profiler_pct: f64,
    /// CPU time: running + profiler (with switches traced, as the scheduler charged it).
    pub on_cpu_s: f64,
    /// Of the running time, what the scheduler charged before the thread was switched in
    /// (null without switch tracing).
    pub switching_in_s: Option<f64>,
    /// Of the other time, what the thread held its CPU without the kernel charging it as CPU
    /// or run-queue time (hypervisor steal; null without switch tracing).
    pub uncharged_s: Option<f64>,
    /// The thread's own schedstat over the window (/proc at start and end; null for threads
    /// that were not alive at both).
    pub schedstat_on_cpu_s: Option<f64>,
    pub schedstat_runnable_s: Option<f64>,
    pub run_queue_delay: Option<Latency>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    pub count: u64,
    pub mean_ms: f64,
    /// Null where no histogram was kept (per thread).
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub min_ms: f64,
    pub max_ms: f64,
    /// The in-kernel histogram's non-empty buckets, shortest first (absent where none was
    /// kept): what the percentiles were read from, and what the HTML report draws.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub histogram: Vec<HistBucket>,
}

/// One bucket of an in-kernel latency histogram: `count` waits in `[from_ns, to_ns)`.
#[derive(Clone, Debug, Serialize)]
pub struct HistBucket {
    pub from_ns: u64,
    /// The last bucket is open-ended in the kernel: here it ends at the exact maximum.
    pub to_ns: u64,
    pub count: u64,
}

#[derive(Debug, Serialize)]
pub struct FunctionRow {
    pub function: String,
    /// % of on-CPU time with this function at the top of the stack.
    pub self_pct: f64,
    /// % of on-CPU time with this function anywhere on the stack.
    pub total_pct: f64,
    pub self_s: f64,
    pub total_s: f64,
}

#[derive(Debug, Serialize)]
pub struct SiteRow {
    pub rank: usize,
    /// `sleep`, `io` or `other`.
    pub state: &'static str,
    /// The blocking call and its caller, leaf first (`read ← blocked_reader`).
    pub site: String,
    /// Frames root→leaf, user then kernel, of the site's largest stack.
    pub stack: Vec<String>,
    /// Distinct stacks the site groups (kernel paths below the call, callers above it).
    pub stacks: usize,
    pub threads: Vec<String>,
    pub thread_count: usize,
    pub total_s: f64,
    /// % of all threads' time in the capture.
    pub share_pct: f64,
    /// Of the total, the time of active threads (what sites are ranked by) …
    pub active_s: f64,
    /// … as % of all active threads' time …
    pub active_pct: f64,
    /// … and the time of idle threads.
    pub idle_s: f64,
    /// A wait for any of many events (epoll, poll, select): ranked after the blocking sites.
    pub event_wait: bool,
    /// What the wait was for, by its frames (waits.rs): lock, waiting_for_work (idle),
    /// condition, sleep, events, io.
    pub kind: WaitKind,
    /// For a lock: what the threads that released it did while holding it (holders.rs).
    pub holders: Option<HoldersRow>,
    pub waits: u64,
    pub latency: Option<Latency>,
    /// Time the site's threads then waited for a CPU after being woken.
    pub runnable_after_wakeup_s: f64,
    pub wakers: Vec<WakerRow>,
}

/// A pool: threads of processes of the same name whose names are equal once digits are
/// stripped.
#[derive(Debug, Serialize)]
pub struct GroupRow {
    /// `redis-server (main thread)`, `workload (worker-* pool, 4 threads)`.
    pub name: String,
    pub process: String,
    /// The thread name with digit runs as `*`.
    pub pattern: String,
    pub thread_count: usize,
    pub idle_threads: usize,
    /// Up to 5 of its threads, `name-tid`.
    pub threads: Vec<String>,
    /// Time per state as % of its active threads' time (of all its threads when all are
    /// idle).
    pub running_pct: f64,
    pub runnable_pct: f64,
    pub sleep_pct: f64,
    pub io_pct: f64,
    pub other_pct: f64,
    /// Of its sleep, waits for work by their stack (`idle_wait_frames`: the Go scheduler
    /// parking a thread with nothing to run), never its dominant wait.
    pub idle_wait_pct: f64,
    /// Running, runnable and io (what the load average counts), in seconds: the busiest
    /// active group comes first.
    pub busy_s: f64,
    /// Its largest wait that is not an event wait or idle wait.
    pub dominant_wait: Option<GroupWait>,
    /// Its largest event wait (`event_wait_frames`: epoll, poll, select): an event loop
    /// waiting for its next request or reply.
    pub event_wait: Option<GroupWait>,
}

/// A group's largest wait site.
#[derive(Clone, Debug, Serialize)]
pub struct GroupWait {
    pub state: &'static str,
    /// As in `top_blocking_sites[].site`.
    pub site: String,
    /// The group's threads' time there, as % of the time the group's percentages refer to.
    pub share_pct: f64,
    pub total_s: f64,
    /// The site's latency over all its threads.
    pub p99_ms: Option<f64>,
    /// The site's first waker (`name-tid`, or `[interrupt]`, `[timer interrupt]`) and its share
    /// of the wakeups.
    pub woken_by: Option<String>,
    /// As in `top_blocking_sites[].kind`.
    pub kind: WaitKind,
    /// For a lock: what its holders did most with the held time, with its state and share.
    pub holders_mostly: Option<String>,
}

/// Idle threads of one process waiting at the same site.
#[derive(Debug, Serialize)]
pub struct IdleRow {
    pub process: String,
    pub pid: u32,
    pub state: Option<&'static str>,
    /// Their wait site, as in `top_blocking_sites[].site` (null: no wait recorded).
    pub site: Option<String>,
    /// What they waited for, as in `top_blocking_sites[].kind`.
    pub kind: Option<WaitKind>,
    pub thread_count: usize,
    /// Up to 8 of them, `name-tid`.
    pub threads: Vec<String>,
    /// Their time asleep.
    pub sleep_s: f64,
    /// % of all threads' time.
    pub share_pct: f64,
}

#[derive(Debug, Serialize)]
pub struct WakerRow {
    pub name: String,
    pub tid: u32,
    pub pid: u32,
    pub wakeups: u64,
    pub wakeups_pct: f64,
    /// The waker's stack root→leaf (with `--wakers`), or empty.
    pub stack: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct RunQueue {
    /// Preempted (or yielded) while runnable, until back on a CPU.
    pub preempted_s: f64,
    pub preempted: Option<Latency>,
    /// Woken from a sleep, until on a CPU.
    pub after_wakeup_s: f64,
    pub after_wakeup: Option<Latency>,
}

/// A waker: name, tid, pid.
type WakerKey = (String, u32, u32);

/// What the report needs besides the profile.
pub struct ReportInput<'a> {
    pub profile: &'a Profile,
    pub names: &'a StackNames,
    pub meta: &'a CaptureMeta,
    pub analysis: &'a Analysis,
}

/// The report's view of merged waits.
impl Hist {
    fn latency(&self) -> Option<Latency> {
        (self.count > 0).then(|| Latency {
            count: self.count,
            mean_ms: ms(self.total_ns as f64 / self.count as f64),
            p50_ms: self.quantile_ns(0.50).map(ms),
            p90_ms: self.quantile_ns(0.90).map(ms),
            p99_ms: self.quantile_ns(0.99).map(ms),
            min_ms: ms(self.min_ns as f64),
            max_ms: ms(self.max_ns as f64),
            histogram: self.histogram(),
        })
    }

    fn histogram(&self) -> Vec<HistBucket> {
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, &count)| {
                let (from_ns, to_ns) = hist_bucket_bounds(i);
                HistBucket {
                    from_ns,
                    to_ns: if to_ns > from_ns {
                        to_ns
                    } else {
                        self.max_ns.max(from_ns)
                    },
                    count,
                }
            })
            .collect()
    }
}

fn ms(ns: f64) -> f64 {
    round3(ns / 1e6)
}
fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}
fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}
fn secs(ns: u64) -> f64 {
    round3(ns as f64 / 1e9)
}

pub fn build(input: &ReportInput<'_>) -> Report {
    let profile = input.profile;
    let names = input.names;
    let window_ns = profile.window.len_ns().max(1);
    // All threads' time: the denominator of every share.
    let all_thread_ns: u64 = profile
        .threads
        .values()
        .map(|t| t.total_ns())
        .sum::<u64>()
        .max(1);
    let analysis = input.analysis;
    let threads = thread_rows(profile, analysis);
    let processes = process_rows(profile);
    let functions = function_rows(profile, names);
    let all_sites = site_rows(profile, names, analysis, all_thread_ns);
    let groups = group_rows(profile, analysis, &all_sites);
    let idle_threads = idle_rows(profile, analysis, &all_sites, all_thread_ns);
    let mut sites: Vec<SiteRow> = all_sites.into_values().collect();
    sites.sort_by(|a, b| {
        (a.active_s == 0.0)
            .cmp(&(b.active_s == 0.0))
            .then(a.event_wait.cmp(&b.event_wait))
            .then(b.active_s.total_cmp(&a.active_s))
            .then(b.total_s.total_cmp(&a.total_s))
            .then(a.site.cmp(&b.site))
    });
    sites.truncate(TOP_SITES);
    for (i, s) in sites.iter_mut().enumerate() {
        s.rank = i + 1;
    }
    let run_queue = run_queue(profile);
    let verdict = verdict::verdict(&verdict::VerdictInput {
        mode: profile.mode,
        threads: profile.threads.len(),
        all_thread_ns,
        by_state: state_totals(profile),
        functions: &functions,
        groups: &groups,
        idle: &idle_threads,
        run_queue: &run_queue,
    });
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
    let meta = input.meta;
    Report {
        schema_version: SCHEMA_VERSION,
        capture: Capture {
            target: meta.target.clone(),
            pid: meta.pid,
            selection: if meta.selection.is_empty() {
                format!("{} (PID {})", meta.target, meta.pid)
            } else {
                meta.selection.clone()
            },
            processes: processes.len(),
            mode: profile.mode.name(),
            duration_s: secs(window_ns),
            frequency_hz: profile
                .mode
                .samples_on_cpu()
                .then(|| round1(1e9 / profile.period_ns.max(1) as f64)),
            samples: profile.counters.get(profiler_common::Counter::Samples),
            kernel: meta.kernel.clone(),
            threads: profile.threads.len(),
            waits: profile.counters.get(profiler_common::Counter::Waits),
            open_waits_at_end: profile.open_waits,
            blocked_at_start: profile.blocked_at_start,
            lost_total: profile.total_lost(),
            lost,
            counters: profile.counters.named().collect(),
            tables_at_end: profile.tables_at_end.clone(),
            ended_early: meta.ended_early.clone(),
        },
        verdict,
        processes,
        idle_rule: analysis::IDLE_RULE,
        idle_wait_frames: analysis::IDLE_WAIT_FRAMES,
        event_wait_frames: analysis::EVENT_WAIT_FRAMES,
        threads,
        groups,
        idle_threads,
        top_on_cpu_functions: functions,
        top_blocking_sites: sites,
        run_queue,
        notes: notes(profile, input.names)
            .into_iter()
            .chain(meta.notes.iter().cloned())
            .collect(),
        percentile_method: PERCENTILE_METHOD,
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
    let mut threads: Vec<ThreadRow> = profile
        .threads
        .iter()
        .map(|(&tid, t)| {
            let all = t.share_base_ns(profile.mode, window_ns) as f64;
            (tid, t, move |ns: u64| round1(100.0 * ns as f64 / all))
        })
        .map(|(tid, t, pct)| ThreadRow {
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
            running_pct: pct(t.running_ns()),
            runnable_pct: pct(t.runnable_ns()),
            sleep_pct: pct(t.off(WaitState::Sleep)),
            io_pct: pct(t.off(WaitState::Io)),
            other_pct: pct(t.off(WaitState::Other)),
            profiler_pct: pct(t.overhead_ns),
            on_cpu_s: secs(t.on_cpu_ns),
            switching_in_s: exact.then(|| secs(t.switching_in_ns)),
            uncharged_s: exact.then(|| secs(t.uncharged_ns)),
            schedstat_on_cpu_s: t.schedstat.map(|s| secs(s.exec_ns)),
            schedstat_runnable_s: t.schedstat.map(|s| secs(s.delay_ns)),
            run_queue_delay: run_queue_per_thread.get(&tid).and_then(Hist::latency),
        })
        .collect();
    threads.sort_by(|a, b| b.on_cpu_s.total_cmp(&a.on_cpu_s).then(a.tid.cmp(&b.tid)));
    threads
}

/// Per process, its threads summed, busiest first.
fn process_rows(profile: &Profile) -> Vec<ProcessRow> {
    let window_ns = profile.window.len_ns().max(1);
    let since_start = |ns: u64| round3(secs(ns.saturating_sub(profile.window.start_ns)));
    profile
        .process_totals()
        .into_iter()
        .map(|p| {
            let all = p.thread_ns().max(1) as f64;
            let pct = |ns: u64| round1(100.0 * ns as f64 / all);
            let info = profile.processes.get(&p.pid);
            ProcessRow {
                pid: p.pid,
                parent: info.and_then(|i| i.parent),
                forked_at_s: info.and_then(|i| i.forked_ns).map(since_start),
                exited_at_s: info.and_then(|i| i.exited_ns).map(since_start),
                execs: info.map_or(0, |i| i.execs),
                threads: p.threads,
                cpus: round3(p.on_cpu_ns as f64 / window_ns as f64),
                on_cpu_s: secs(p.on_cpu_ns),
                thread_s: secs(p.thread_ns()),
                running_pct: pct(p.running_ns()),
                runnable_pct: pct(p.runnable_ns()),
                sleep_pct: pct(p.off(WaitState::Sleep)),
                io_pct: pct(p.off(WaitState::Io)),
                other_pct: pct(p.off(WaitState::Other)),
                profiler_pct: pct(p.overhead_ns),
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
    let on_cpu_ns = on_cpu_ns.max(1);
    let mut functions: Vec<FunctionRow> = self_ns
        .iter()
        .map(|(f, &s)| {
            let t = total_ns.get(f).copied().unwrap_or(s);
            FunctionRow {
                function: f.clone(),
                self_pct: round1(100.0 * s as f64 / on_cpu_ns as f64),
                total_pct: round1(100.0 * t as f64 / on_cpu_ns as f64),
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

/// One blocking site as the user reads it: a state and a user stack (the blocking call and
/// its callers). Kernel paths that differ below the call (several of one `fsync`) are the
/// same site; sites whose labels would read alike name more callers.
#[derive(Default)]
struct Site {
    hist: Hist,
    time_ns: u64,
    active_ns: u64,
    threads: BTreeSet<u32>,
    /// Each full stack of the site with its time: the largest is shown.
    stacks: HashMap<Vec<String>, u64>,
    runnable_after_ns: u64,
    /// Wakeups per waker, with a stack of the waker.
    wakers: BTreeMap<WakerKey, (u64, Vec<String>)>,
}

/// Every blocking site, by its identity (ranked and cut by the caller).
fn site_rows(
    profile: &Profile,
    names: &StackNames,
    analysis: &Analysis,
    all_thread_ns: u64,
) -> BTreeMap<SiteId, SiteRow> {
    // Stack pair → (full frames, site frames): computed once per pair.
    let mut frames_of: HashMap<(u64, u64), (Vec<String>, Vec<String>)> = HashMap::new();
    let mut lookup = |user: u64, kernel: u64| {
        frames_of
            .entry((user, kernel))
            .or_insert_with(|| {
                (
                    stack_frames(user, kernel, names),
                    analysis::site_frames(user, kernel, names),
                )
            })
            .clone()
    };
    let mut sites: BTreeMap<SiteId, Site> = BTreeMap::new();
    let mut hists_added: BTreeSet<KernelSite> = BTreeSet::new();
    let mut runnable_after: Vec<(Vec<String>, u64)> = Vec::new();
    for e in &profile.entries {
        let Kind::Off(state) = e.kind else { continue };
        let (frames, key) = lookup(e.user_stack, e.kernel_stack);
        // The run-queue part after a wakeup belongs to the blocking site it followed.
        if state == WaitState::RunqueueWoken {
            runnable_after.push((key, e.time_ns));
            continue;
        }
        let Some(state) = e.blocked_state() else {
            continue;
        };
        let idle_wait = analysis::is_idle_wait(&key);
        let site = sites.entry((state.label(), key)).or_default();
        site.hist.add_waits(e.waits, e.time_ns, e.min_ns, e.max_ns);
        site.time_ns += e.time_ns;
        if !analysis.is_idle(e.tid) && !idle_wait {
            site.active_ns += e.time_ns;
        }
        site.threads.insert(e.tid);
        *site.stacks.entry(frames).or_default() += e.time_ns;
        // The kernel keeps one histogram per stack pair, shared by its threads.
        let kernel_site = KernelSite {
            state: state as u32,
            epoch: 0,
            user_stack: e.user_stack,
            kernel_stack: e.kernel_stack,
        };
        if hists_added.insert(kernel_site)
            && let Some(h) = profile.site_hists.get(&kernel_site)
        {
            site.hist.add_buckets(h);
        }
    }
    for (key, ns) in runnable_after {
        // Which state the wait was in is not in the run-queue key: the one the stack has.
        let state = ["sleep", "io", "other"]
            .into_iter()
            .find(|st| sites.contains_key(&(*st, key.clone())));
        if let Some(site) = state.and_then(|st| sites.get_mut(&(st, key))) {
            site.runnable_after_ns += ns;
        }
    }
    for w in &profile.wakers {
        let (_, key) = lookup(w.user_stack, w.kernel_stack);
        let Some(site) = sites.get_mut(&(w.state.label(), key)) else {
            continue;
        };
        let who = waker_identity(w, names);
        let stack = waker_frames(w, &who, names);
        let entry = site
            .wakers
            .entry((who.name, who.tid, who.pid))
            .or_insert((0, Vec::new()));
        entry.0 += w.count;
        if entry.1.is_empty() {
            entry.1 = stack;
        }
    }
    let active_ns: u64 = profile
        .threads
        .iter()
        .filter(|(tid, _)| !analysis.is_idle(**tid))
        .map(|(_, t)| analysis::StateTimes::of(t).total())
        .sum::<u64>()
        .max(1);
    let labels = distinct_labels(sites.keys());
    sites
        .into_iter()
        .zip(labels)
        .map(|((id, site), label)| {
            let mut row = site_row(profile, id.0, label, site, all_thread_ns, active_ns);
            row.event_wait = analysis.event_sites.contains(&id);
            row.kind = waits::classify(&id.1);
            row.holders = analysis.holders.get(&id).map(|h| h.row());
            (id, row)
        })
        .collect()
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
                busy_s: secs(t.busy()),
                dominant_wait: g
                    .dominant_wait
                    .as_ref()
                    .and_then(|w| group_wait(w, sites, &pct)),
                event_wait: g
                    .event_wait
                    .as_ref()
                    .and_then(|w| group_wait(w, sites, &pct)),
            }
        })
        .collect()
}

/// The smallest share of a group's active time (%) named as its dominant or event wait.
pub(crate) const MIN_GROUP_WAIT_PCT: f64 = 0.5;

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

fn thread_name(profile: &Profile, tid: u32) -> String {
    let name = profile.threads.get(&tid).map_or("?", |t| t.name.as_str());
    format!("{name}-{tid}")
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
                share_pct: round1(100.0 * set.sleep_ns as f64 / all_thread_ns as f64),
            }
        })
        .collect()
}

fn site_row(
    profile: &Profile,
    state: &'static str,
    label: String,
    site: Site,
    all_thread_ns: u64,
    active_ns: u64,
) -> SiteRow {
    let total_wakeups: u64 = site.wakers.values().map(|v| v.0).sum();
    let mut wakers: Vec<WakerRow> = site
        .wakers
        .into_iter()
        .map(|((name, tid, pid), (count, stack))| WakerRow {
            name: if name.is_empty() { "?".into() } else { name },
            tid,
            pid,
            wakeups: count,
            wakeups_pct: round1(100.0 * count as f64 / total_wakeups.max(1) as f64),
            stack,
        })
        .collect();
    wakers.sort_by(|a, b| b.wakeups.cmp(&a.wakeups).then(a.tid.cmp(&b.tid)));
    wakers.truncate(TOP_WAKERS);
    let thread_names: Vec<String> = site
        .threads
        .iter()
        .take(5)
        .map(|tid| thread_name(profile, *tid))
        .collect();
    let paths = site.stacks.len();
    let stack = site
        .stacks
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(frames, _)| frames)
        .unwrap_or_default();
    SiteRow {
        rank: 0,
        state,
        site: label,
        stack,
        stacks: paths,
        runnable_after_wakeup_s: secs(site.runnable_after_ns),
        threads: thread_names,
        thread_count: site.threads.len(),
        total_s: secs(site.time_ns),
        share_pct: round1(100.0 * site.time_ns as f64 / all_thread_ns as f64),
        active_s: secs(site.active_ns),
        active_pct: round1(100.0 * site.active_ns as f64 / active_ns as f64),
        idle_s: secs(site.time_ns - site.active_ns),
        event_wait: false,
        kind: WaitKind::Io,
        holders: None,
        waits: site.hist.count,
        latency: site.hist.latency(),
        wakers,
    }
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

pub const PERCENTILE_METHOD: &str = "in-kernel log2 histogram with 32 linear sub-buckets per \
     power of two (each at most 3.1 % wide), linear interpolation inside the bucket, bounded by \
     the exact minimum and maximum; per blocking site and for the run queue overall (per thread: \
     count, mean, minimum and maximum only)";

/// Threads that ran more than this are checked against their schedstat.
const CHECKED_CPU_NS: u64 = 1_000_000_000;

/// Where the figures would mislead without a word.
fn notes(profile: &Profile, names: &StackNames) -> Vec<String> {
    let mut notes = Vec::new();
    let at = |ns: u64| ns.saturating_sub(profile.window.start_ns) as f64 / 1e9;
    // A process that was there from the start and ended: the others went on without it.
    for (pid, p) in &profile.processes {
        if let (None, Some(end)) = (p.forked_ns, p.exited_ns) {
            notes.push(format!(
                "{}-{pid} exited {:.2} s into the capture; the other processes were profiled to the end.",
                p.name,
                at(end)
            ));
        }
    }
    let forked = profile.processes.values().filter(|p| p.forked_ns.is_some());
    let (forked, ended) = forked.fold((0, 0), |(f, e), p| {
        (f + 1, e + p.exited_ns.is_some() as u32)
    });
    if forked > 0 {
        notes.push(format!(
            "{forked} process{} forked during the capture and followed from its first instruction ({ended} exited before the end).",
            if forked == 1 { " was" } else { "es were" },
        ));
    }
    // Steal: the thread's time on a CPU the host gave to someone else.
    let uncharged: u64 = profile.threads.values().map(|t| t.uncharged_ns).sum();
    let all: u64 = profile.threads.values().map(|t| t.total_ns()).sum();
    if uncharged > 0 && uncharged * 1000 >= all {
        let most = profile
            .threads
            .iter()
            .max_by_key(|(tid, t)| (t.uncharged_ns, std::cmp::Reverse(**tid)));
        notes.push(format!(
            "The threads held their CPUs for {:.2} s ({:.1} % of all thread time{}) that the \
             kernel charged neither as CPU time nor as run-queue wait: the hypervisor ran \
             something else on this virtual machine's CPUs (steal). That time is shown as \
             other, in the frame [held the CPU, not charged: hypervisor steal]; running is \
             what the scheduler charged.",
            uncharged as f64 / 1e9,
            100.0 * uncharged as f64 / all.max(1) as f64,
            most.map_or(String::new(), |(tid, t)| format!(
                "; most in {}-{tid}, {:.2} s",
                t.name,
                t.uncharged_ns as f64 / 1e9
            )),
        ));
    }
    notes.extend(interrupt_skew(profile, names));
    if profile.mode == Mode::Cpu {
        // Samples see only what runs when the timer fires; the kernel also charges a thread
        // for time before it is switched in.
        for (tid, t) in &profile.threads {
            let Some(sched) = t.schedstat else { continue };
            if sched.exec_ns < CHECKED_CPU_NS {
                continue;
            }
            let sampled = t.on_cpu_ns as f64 / sched.exec_ns as f64;
            if (sampled - 1.0).abs() > 0.05 {
                notes.push(format!(
                    "{}-{tid}: samples cover {:.0} % of its CPU time by the kernel's account \
                     ({:.2} s of {:.2} s); the rest is time no sample sees — the scheduler charges \
                     a woken thread from its wakeup, while its CPU leaves idle or finishes the \
                     task it preempts. --mode wall measures that part (`switching in`).",
                    t.name,
                    100.0 * sampled,
                    t.on_cpu_ns as f64 / 1e9,
                    sched.exec_ns as f64 / 1e9,
                ));
            }
        }
    }
    notes
}

/// Kernel functions that turn interrupts back on.
pub(crate) fn enables_interrupts(frame: &str) -> bool {
    const PREFIXES: [&str; 5] = [
        "_raw_spin_unlock_irq",
        "_raw_read_unlock_irq",
        "_raw_write_unlock_irq",
        "finish_task_switch",
        "__local_bh_enable_ip",
    ];
    PREFIXES.iter().any(|p| frame.starts_with(p))
}

/// cpu-clock samples come from a timer interrupt, which waits while the kernel runs with
/// interrupts off: that time lands on the function that turns them back on. Said when it is
/// a visible share of the samples (perf's cpu-clock shows the same).
fn interrupt_skew(profile: &Profile, names: &StackNames) -> Option<String> {
    let (mut skewed, mut sampled) = (0u64, 0u64);
    let mut by_frame: BTreeMap<&str, u64> = BTreeMap::new();
    for e in profile.entries.iter().filter(|e| e.kind == Kind::OnCpu) {
        if e.samples == 0 {
            continue;
        }
        sampled += e.samples;
        let leaf = names.kernel.get(&e.kernel_stack).and_then(|k| k.last());
        if let Some(leaf) = leaf.filter(|l| enables_interrupts(l)) {
            skewed += e.samples;
            *by_frame.entry(leaf).or_default() += e.samples;
        }
    }
    if sampled == 0 || skewed * 20 < sampled {
        return None;
    }
    let mut frames: Vec<(&str, u64)> = by_frame.into_iter().collect();
    frames.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let listed: Vec<&str> = frames.iter().take(3).map(|(f, _)| *f).collect();
    Some(format!(
        "{:.0} % of the on-CPU samples landed where the kernel turns interrupts back on ({}): \
         the sampling timer (cpu-clock) is an interrupt, so time the kernel ran with \
         interrupts off, in the callers of these frames, is counted there (perf's cpu-clock \
         and BCC's profile show the same).",
        100.0 * skewed as f64 / sampled as f64,
        listed.join(", ")
    ))
}

/// Time per state over all threads: running, runnable, sleep, io, other.
fn state_totals(profile: &Profile) -> [u64; 5] {
    let mut by_state = [0u64; 5];
    for t in profile.threads.values() {
        by_state[0] += t.on_cpu_ns;
        by_state[1] += t.runnable_ns();
        by_state[2] += t.off(WaitState::Sleep);
        by_state[3] += t.off(WaitState::Io);
        by_state[4] += t.off(WaitState::Other);
    }
    by_state
}

pub fn write_json(report: &Report, out: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report).map_err(io::Error::other)?;
    writeln!(out)
}

fn lat(l: &Option<Latency>) -> [String; 4] {
    let p = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2} ms"));
    match l {
        Some(l) => [p(l.p50_ms), p(l.p90_ms), p(l.p99_ms), p(Some(l.max_ms))],
        None => ["-".into(), "-".into(), "-".into(), "-".into()],
    }
}

/// ` (3 kernel paths)` when a site groups several (its stacks differ below the call).
fn paths(s: &SiteRow) -> String {
    if s.stacks > 1 {
        format!(" ({} kernel paths)", s.stacks)
    } else {
        String::new()
    }
}

pub(crate) fn wakers_text(wakers: &[WakerRow]) -> String {
    // A waker that would read "(0 %)" tells the reader nothing; the first is always named.
    wakers
        .iter()
        .enumerate()
        .filter(|(i, w)| *i == 0 || w.wakeups_pct >= 0.5)
        .map(|(_, w)| {
            if w.tid == 0 {
                format!("{} ({:.0} %)", w.name, w.wakeups_pct)
            } else {
                format!("{}-{} ({:.0} %)", w.name, w.tid, w.wakeups_pct)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Markdown, ready to paste.
pub fn write_markdown(r: &Report, out: &mut impl Write) -> io::Result<()> {
    md_capture(r, out)?;
    md_processes(r, out)?;
    md_threads(r, out)?;
    md_groups(r, out)?;
    md_idle_and_notes(r, out)?;
    md_sites(r, out)?;
    md_functions(r, out)?;
    md_run_queue(r, out)?;
    writeln!(out, "\n_Percentiles: {}._", r.percentile_method)?;
    Ok(())
}

/// The title, the verdict and the capture table.
fn md_capture(r: &Report, out: &mut impl Write) -> io::Result<()> {
    let c = &r.capture;
    writeln!(out, "# Profile of {}\n", c.selection)?;
    writeln!(out, "**{}**\n", r.verdict)?;
    writeln!(out, "## Capture\n")?;
    writeln!(out, "| | |\n|---|---|")?;
    writeln!(
        out,
        "| target | {}, {} process{}, {} threads |",
        c.selection,
        c.processes,
        if c.processes == 1 { "" } else { "es" },
        c.threads
    )?;
    writeln!(out, "| mode | {} |", c.mode)?;
    writeln!(
        out,
        "| duration | {:.2} s{} |",
        c.duration_s,
        c.ended_early
            .as_ref()
            .map_or(String::new(), |e| format!(" ({e})"))
    )?;
    if let Some(hz) = c.frequency_hz {
        writeln!(out, "| sampling | {hz} Hz, {} samples |", c.samples)?;
    }
    writeln!(out, "| kernel | {} |", c.kernel)?;
    writeln!(
        out,
        "| waits | {} finished, {} still open at the end, {} blocked since before the start |",
        c.waits,
        c.open_waits_at_end,
        super::count(c.blocked_at_start, "thread")
    )?;
    let lost: Vec<String> = c
        .lost
        .iter()
        .map(|l| match l.raise_with {
            Some(flag) => format!("{} {} (raise {flag})", l.count, l.what),
            None => format!("{} {}", l.count, l.what),
        })
        .collect();
    writeln!(
        out,
        "| lost | {}{} |\n",
        c.lost_total,
        if lost.is_empty() {
            String::new()
        } else {
            format!(": {}", lost.join("; "))
        }
    )?;

    Ok(())
}

/// One row per process, when there are several.
fn md_processes(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if r.processes.len() > 1 {
        writeln!(
            out,
            "## Processes (% of all their threads' time; CPUs = CPU time ÷ capture length)\n"
        )?;
        writeln!(
            out,
            "| process | threads | CPUs | running | runnable | sleep | io | other | profiler | lifetime |"
        )?;
        writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")?;
        for p in &r.processes {
            let life = match (p.forked_at_s, p.exited_at_s) {
                (None, None) => "whole capture".to_string(),
                (Some(f), None) => format!("forked at {f:.2} s"),
                (None, Some(e)) => format!("exited at {e:.2} s"),
                (Some(f), Some(e)) => format!("{f:.2} s – {e:.2} s"),
            };
            writeln!(
                out,
                "| {}-{} | {} | {:.2} | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {life}{} |",
                p.name,
                p.pid,
                p.threads,
                p.cpus,
                p.running_pct,
                p.runnable_pct,
                p.sleep_pct,
                p.io_pct,
                p.other_pct,
                p.profiler_pct,
                if p.execs > 0 {
                    format!(", {} exec", p.execs)
                } else {
                    String::new()
                }
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// One row per thread: its time per state.
fn md_threads(r: &Report, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "## Where each thread's time went (% of the capture)\n")?;
    writeln!(
        out,
        "| thread | running | runnable | sleep | io | other | profiler | run-queue waits: mean / max |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---|")?;
    for t in &r.threads {
        let rq = t.run_queue_delay.as_ref().map_or("-".into(), |l| {
            format!("{} × {:.3} / {:.2} ms", l.count, l.mean_ms, l.max_ms)
        });
        writeln!(
            out,
            "| {}-{} | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {rq} |",
            t.name,
            t.tid,
            t.running_pct,
            t.runnable_pct,
            t.sleep_pct,
            t.io_pct,
            t.other_pct,
            t.profiler_pct
        )?;
    }
    writeln!(
        out,
        "\nRunning is CPU time as the scheduler charges it (the thread's schedstat), the \
         profiler's own programs left out (column *profiler*)."
    )?;
    Ok(())
}

/// Pools of threads named alike.
fn md_groups(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if !r.groups.is_empty() {
        writeln!(out, "\n## Groups\n")?;
        writeln!(
            out,
            "Threads named alike once digits are stripped, in processes of the same name; % of \
             the time of the group's active threads (of all of them when all are idle), busiest \
             first.\n"
        )?;
        writeln!(
            out,
            "| group | threads | idle | running | runnable | sleep | io | other | dominant wait | share | p99 | woken by |"
        )?;
        writeln!(
            out,
            "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"
        )?;
        for g in &r.groups {
            let (site, share, p99, by) = g.dominant_wait.as_ref().map_or(
                (
                    "-".to_string(),
                    "-".to_string(),
                    "-".to_string(),
                    "-".to_string(),
                ),
                |w| {
                    (
                        format!("{} `{}`", w.state, w.site),
                        format!("{:.1} %", w.share_pct),
                        w.p99_ms.map_or("-".into(), |p| format!("{p:.2} ms")),
                        w.woken_by.clone().unwrap_or_else(|| "-".into()),
                    )
                },
            );
            writeln!(
                out,
                "| {} | {} | {} | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {site} | {share} | {p99} | {by} |",
                g.name,
                g.thread_count,
                g.idle_threads,
                g.running_pct,
                g.runnable_pct,
                g.sleep_pct,
                g.io_pct,
                g.other_pct
            )?;
        }
    }
    Ok(())
}

/// Idle threads (the rule, one line each) and the notes.
fn md_idle_and_notes(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if !r.idle_threads.is_empty() {
        writeln!(out, "\n## Idle threads\n")?;
        writeln!(
            out,
            "Rule: {}. Idle threads are not ranked among blocking sites.\n",
            r.idle_rule
        )?;
        for i in &r.idle_threads {
            writeln!(out, "- {}", idle_text(i))?;
        }
    }
    for n in &r.notes {
        writeln!(out, "\n> {n}")?;
    }
    Ok(())
}

/// Blocking sites ranked by active threads, then their stacks and wakers.
fn md_sites(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if !r.top_blocking_sites.is_empty() {
        writeln!(out, "\n## Top blocking sites\n")?;
        writeln!(
            out,
            "Ranked by the time of active threads (% of all active threads' time), event waits \
             (epoll, poll, select: marked *event*) after the others; idle threads' time at the \
             same site apart.\n"
        )?;
        writeln!(
            out,
            "| # | state | site | threads | active | % of active | idle | waits | p50 | p90 | p99 | max | woken by |"
        )?;
        writeln!(
            out,
            "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
        )?;
        for s in &r.top_blocking_sites {
            let [p50, p90, p99, max] = lat(&s.latency);
            writeln!(
                out,
                "| {} | {}{} | `{}`{} | {} | {:.2} s | {:.1} % | {:.2} s | {} | {p50} | {p90} | {p99} | {max} | {} |",
                s.rank,
                s.state,
                if s.event_wait { " (event)" } else { "" },
                s.site,
                paths(s),
                s.thread_count,
                s.active_s,
                s.active_pct,
                s.idle_s,
                s.waits,
                wakers_text(&s.wakers)
            )?;
        }
        writeln!(out, "\nStacks (root → leaf):\n")?;
        for s in &r.top_blocking_sites {
            writeln!(out, "{}. `{}`", s.rank, s.stack.join(";"))?;
            for w in s.wakers.iter().filter(|w| !w.stack.is_empty()) {
                writeln!(
                    out,
                    "   - woken by {}: `{}`",
                    wakers_text(std::slice::from_ref(w)),
                    w.stack.join(";")
                )?;
            }
        }
    }
    Ok(())
}

/// The hottest on-CPU functions.
fn md_functions(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if !r.top_on_cpu_functions.is_empty() {
        writeln!(out, "\n## Top on-CPU functions\n")?;
        writeln!(out, "| function | self | total |\n|---|---:|---:|")?;
        for f in &r.top_on_cpu_functions {
            writeln!(
                out,
                "| `{}` | {:.1} % | {:.1} % |",
                f.function, f.self_pct, f.total_pct
            )?;
        }
    }
    Ok(())
}

/// Run-queue delay: preempted and after a wakeup.
fn md_run_queue(r: &Report, out: &mut impl Write) -> io::Result<()> {
    let q = &r.run_queue;
    if q.preempted.is_some() || q.after_wakeup.is_some() {
        writeln!(out, "\n## Run queue\n")?;
        writeln!(
            out,
            "| | total | waits | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|---:|---:|"
        )?;
        for (what, total, l) in [
            ("preempted", q.preempted_s, &q.preempted),
            ("after wakeup", q.after_wakeup_s, &q.after_wakeup),
        ] {
            let [p50, p90, p99, max] = lat(l);
            let n = l.as_ref().map_or(0, |l| l.count);
            writeln!(
                out,
                "| {what} | {total:.3} s | {n} | {p50} | {p90} | {p99} | {max} |"
            )?;
        }
    }
    Ok(())
}

/// The end-of-run text on the terminal.
pub fn write_text(r: &Report, out: &mut impl Write, mode: Mode) -> io::Result<()> {
    if mode.traces_switches() {
        write_groups_text(r, out)?;
    }
    let ranked: Vec<&SiteRow> = r
        .top_blocking_sites
        .iter()
        .filter(|s| s.active_s > 0.0)
        .take(5)
        .collect();
    if mode.traces_switches() && !ranked.is_empty() {
        writeln!(
            out,
            "  top blocking sites of active threads (time of active threads, % of theirs; idle threads' time apart)"
        )?;
        let labels: Vec<(&str, String)> = ranked.iter().map(|s| (&*s.site, paths(s))).collect();
        let texts = site_texts(&labels, 56);
        for (s, (text, full)) in ranked.into_iter().zip(texts) {
            let [p50, _, p99, max] = lat(&s.latency);
            let woken = if s.wakers.is_empty() {
                String::new()
            } else {
                format!("  woken by {}", wakers_text(&s.wakers))
            };
            let mut idle = if s.idle_s > 0.0 {
                format!("  idle {:.2} s", s.idle_s)
            } else {
                String::new()
            };
            if s.event_wait {
                idle.push_str("  (event wait)");
            }
            writeln!(
                out,
                "  {:>2}. {:<5} {:<56} {:>8.2} s {:>5.1} %{idle}  {:>6} waits  p50 {p50}  p99 {p99}  max {max}{woken}",
                s.rank, s.state, text, s.active_s, s.active_pct, s.waits
            )?;
            if let Some(full) = full {
                writeln!(out, "            = {full}")?;
            }
        }
    }
    if !r.top_on_cpu_functions.is_empty() {
        writeln!(out, "  top on-CPU functions (self / total)")?;
        for f in r.top_on_cpu_functions.iter().take(5) {
            writeln!(
                out,
                "      {:<60} {:>5.1} % / {:>5.1} %",
                truncate(&f.function, 60),
                f.self_pct,
                f.total_pct
            )?;
        }
    }
    for n in &r.notes {
        writeln!(out, "  note     {n}")?;
    }
    writeln!(out, "  verdict  {}", r.verdict)
}

/// Groups (the five busiest) and idle threads, on the terminal.
fn write_groups_text(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if r.groups.iter().any(|g| g.idle_threads < g.thread_count) {
        write_active_groups_text(r, out)?;
    }
    if !r.idle_threads.is_empty() {
        let n: usize = r.idle_threads.iter().map(|i| i.thread_count).sum();
        writeln!(
            out,
            "  idle     {} (≤ 1 % on the CPU, ≤ 1 % in I/O, ≥ 90 % asleep), by process and wait, not ranked:",
            super::count(n as u64, "thread")
        )?;
        for i in r.idle_threads.iter().take(5) {
            writeln!(out, "           {}", idle_text(i))?;
        }
        if r.idle_threads.len() > 5 {
            writeln!(out, "           … {} more", r.idle_threads.len() - 5)?;
        }
    }
    Ok(())
}

fn write_active_groups_text(r: &Report, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "  {:<40} {:>9} {:>8} {:>9} {:>8} {:>8}  dominant wait",
        "group (% of its active threads' time)", "threads", "running", "runnable", "sleep", "io"
    )?;
    for g in r
        .groups
        .iter()
        .filter(|g| g.idle_threads < g.thread_count)
        .take(5)
    {
        let threads = if g.idle_threads > 0 {
            format!("{} ({} idle)", g.thread_count, g.idle_threads)
        } else {
            g.thread_count.to_string()
        };
        let wait = g.dominant_wait.as_ref().map_or(String::new(), |w| {
            format!("{:>5.1} % {} {}", w.share_pct, w.state, w.site)
        });
        writeln!(
            out,
            "  {:<40} {:>9} {:>7.1}% {:>8.1}% {:>7.1}% {:>7.1}%  {wait}",
            truncate(&g.name, 40),
            threads,
            g.running_pct,
            g.runnable_pct,
            g.sleep_pct,
            g.io_pct
        )?;
    }
    Ok(())
}

/// `4 × workload: worker-0-12, worker-1-13, … in pthread_cond_wait ← park (20.00 s, 57.1 %)`
fn idle_text(i: &IdleRow) -> String {
    let mut names = i.threads.join(", ");
    if i.thread_count > i.threads.len() {
        names.push_str(", …");
    }
    let site = i
        .site
        .as_ref()
        .map_or(String::new(), |s| format!(" in {s}"));
    format!(
        "{} × {}: {names}{site} (asleep {:.2} s, {:.1} % of all thread time)",
        i.thread_count, i.process, i.sleep_s, i.share_pct
    )
}

/// A site's label and its kernel-path count in `n` characters. Too long, the label keeps the
/// blocking call and the callers furthest up, which are what tells sites apart that share
/// the first ones: `__futex_abstimed_wait_common ← … ← LWLockAcquireOrWait`.
fn site_text(site: &str, suffix: &str, n: usize) -> String {
    let width = |s: &str| s.chars().count();
    let room = n.saturating_sub(width(suffix)).max(n / 2);
    let fitted = if width(site) <= room {
        site.to_string()
    } else {
        let parts: Vec<&str> = site.split(" ← ").collect();
        let mut kept = None;
        if parts.len() > 2 {
            // The leaf, then as many of the furthest callers as fit.
            for from in 2..parts.len() {
                let t = format!("{} ← … ← {}", parts[0], parts[from..].join(" ← "));
                if width(&t) <= room {
                    kept = Some(t);
                    break;
                }
            }
        }
        kept.unwrap_or_else(|| truncate(site, room))
    };
    truncate(&format!("{fitted}{suffix}"), n)
}

/// The shown sites' labels (with their suffixes) in `n` characters each, told apart: where
/// two different sites would read alike once shortened, another shortening that keeps a frame
/// they differ by is tried, and failing that the row is followed by its whole label (`= …`).
fn site_texts(sites: &[(&str, String)], n: usize) -> Vec<(String, Option<String>)> {
    let candidates: Vec<Vec<String>> = sites
        .iter()
        .map(|(site, suffix)| site_text_candidates(site, suffix, n))
        .collect();
    let mut texts: Vec<(String, Option<String>)> =
        candidates.iter().map(|c| (c[0].clone(), None)).collect();
    let clashes = |i: usize, t: &str, texts: &[(String, Option<String>)]| {
        (0..sites.len()).any(|j| j != i && sites[j].0 != sites[i].0 && texts[j].0 == t)
    };
    for i in 0..sites.len() {
        if !clashes(i, &texts[i].0, &texts) {
            continue;
        }
        match candidates[i].iter().find(|c| !clashes(i, c, &texts)) {
            Some(c) => texts[i].0 = c.clone(),
            None => texts[i].1 = Some(sites[i].0.to_string()),
        }
    }
    // A row whose twin found another text no longer needs its whole label.
    for i in 0..sites.len() {
        if texts[i].1.is_some() && !clashes(i, &texts[i].0, &texts) {
            texts[i].1 = None;
        }
    }
    texts
}

/// Ways to show `site` in `n` characters, the preferred (`site_text`) first, then those that
/// keep one middle frame and the last (`leaf ← … ← ProcSleep ← … ← heap_update`).
fn site_text_candidates(site: &str, suffix: &str, n: usize) -> Vec<String> {
    let mut out = vec![site_text(site, suffix, n)];
    let parts: Vec<&str> = site.split(" ← ").collect();
    let last = parts.len().saturating_sub(1);
    for i in (1..last.saturating_sub(1)).rev() {
        let before = if i > 1 { " ← … ← " } else { " ← " };
        let t = format!(
            "{}{before}{} ← … ← {}{suffix}",
            parts[0], parts[i], parts[last]
        );
        if t.chars().count() <= n && !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hist::tests::hist_of;

    #[test]
    fn wakers_that_would_read_zero_percent_are_left_out() {
        let waker = |name: &str, tid, wakeups_pct| WakerRow {
            name: name.into(),
            tid,
            pid: tid,
            wakeups: 1,
            wakeups_pct,
            stack: Vec::new(),
        };
        let text = wakers_text(&[
            waker("[interrupt]", 0, 99.7),
            waker("kworker/u8:3", 22664, 0.6),
            waker("[timer interrupt]", 0, 0.3),
        ]);
        assert_eq!(text, "[interrupt] (100 %), kworker/u8:3-22664 (1 %)");
        assert_eq!(wakers_text(&[waker("rare", 7, 0.2)]), "rare-7 (0 %)");
    }

    #[test]
    fn a_sites_latency_is_its_exact_figures_and_percentiles() {
        let l = hist_of(&[20_100_000; 250]).latency().unwrap();
        assert_eq!((l.p50_ms, l.max_ms, l.min_ms), (Some(20.1), 20.1, 20.1));
        assert_eq!((l.count, l.mean_ms), (250, 20.1));
    }

    #[test]
    fn without_a_histogram_there_are_no_percentiles() {
        let mut h = Hist::default();
        h.add_waits(3, 30_000_000, 9_000_000, 11_000_000);
        let l = h.latency().unwrap();
        assert_eq!((l.p50_ms, l.mean_ms, l.max_ms), (None, 10.0, 11.0));
    }

    #[test]
    fn samples_where_interrupts_come_back_on_are_said_to_be_skewed() {
        use std::sync::Arc;

        use crate::model::{Entry, Window};
        let mut names = StackNames::default();
        let k = |v: &[&str]| v.iter().map(|s| Arc::from(*s)).collect::<Vec<_>>();
        names.kernel.insert(
            7,
            k(&["tcp_sendmsg_[k]", "_raw_spin_unlock_irqrestore_[k]"]),
        );
        names
            .kernel
            .insert(8, k(&["tcp_sendmsg_[k]", "skb_copy_[k]"]));
        let on = |kernel, samples| Entry {
            samples,
            ..Entry::new(1, 1, 0, kernel, Kind::OnCpu)
        };
        let window = Window {
            start_ns: 0,
            stop_ns: 1_000_000_000,
        };
        let with = |skewed| Profile {
            entries: vec![on(7, skewed), on(8, 100 - skewed)],
            ..Profile::empty(Mode::Wall, window, 10_101_010)
        };
        let note = interrupt_skew(&with(30), &names).expect("30 % is said");
        assert!(
            note.starts_with("30 % of the on-CPU samples")
                && note.contains("_raw_spin_unlock_irqrestore_[k]"),
            "{note}"
        );
        assert!(interrupt_skew(&with(4), &names).is_none());
    }

    #[test]
    fn sites_that_would_read_alike_once_shortened_are_told_apart() {
        // Seen on PostgreSQL: both shortened to `__futex_abstimed_wait_common ← … ← heap_update`.
        let long = "__futex_abstimed_wait_common ← PGSemaphoreLock ← LWLockAcquire ← ProcSleep \
                    ← LockAcquireExtended ← XactLockTableWait ← heap_update";
        let short = "__futex_abstimed_wait_common ← PGSemaphoreLock ← LWLockAcquire ← heap_update";
        let other = "fdatasync ← XLogFlush";
        let texts = site_texts(
            &[
                (long, String::new()),
                (other, " (6 kernel paths)".into()),
                (short, String::new()),
            ],
            56,
        );
        assert_eq!(
            texts[1],
            ("fdatasync ← XLogFlush (6 kernel paths)".into(), None)
        );
        // Nothing shorter than 56 tells them apart: each row is followed by its whole label.
        assert_eq!(texts[0].0, texts[2].0);
        assert_eq!(texts[0].1.as_deref(), Some(long));
        assert_eq!(texts[2].1.as_deref(), Some(short));
        // With more room, a middle frame does.
        let texts = site_texts(&[(long, String::new()), (short, String::new())], 64);
        assert_ne!(texts[0].0, texts[1].0, "{texts:?}");
        assert!(
            texts
                .iter()
                .all(|(t, full)| t.chars().count() <= 64 && full.is_none())
        );
        assert_eq!(
            site_text_candidates("a ← b ← c ← d", "", 80),
            ["a ← b ← c ← d", "a ← b ← … ← d"]
        );
        // The same site twice (never in one table, but) is no clash.
        let same = site_texts(&[(short, String::new()), (short, String::new())], 56);
        assert!(same.iter().all(|(_, full)| full.is_none()));
    }

    #[test]
    fn long_site_labels_keep_the_call_and_the_callers_that_tell_them_apart() {
        let a = "__futex_abstimed_wait_common ← PGSemaphoreLock ← LWLockAcquireOrWait";
        let b = "__futex_abstimed_wait_common ← PGSemaphoreLock ← LWLockWaitForVar";
        let (ta, tb) = (site_text(a, "", 56), site_text(b, "", 56));
        assert_eq!(tb, "__futex_abstimed_wait_common ← … ← LWLockWaitForVar");
        assert_ne!(ta, tb);
        assert_eq!(ta, "__futex_abstimed_wait_common ← … ← LWLockAcquireOrWait");
        assert_eq!(
            site_text("fdatasync ← XLogFlush", " (6 kernel paths)", 48),
            "fdatasync ← XLogFlush (6 kernel paths)"
        );
        let long = site_text(a, " (6 kernel paths)", 48);
        assert!(
            long.ends_with(" (6 kernel paths)") && long.chars().count() <= 48,
            "{long}"
        );
    }
}
