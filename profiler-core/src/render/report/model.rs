//! The report's model: what a performance write-up says about a capture, every figure
//! computed once by the builder (`build.rs`) and only formatted by the writers (terminal,
//! Markdown, JSON, HTML, the end-of-run summary) and the verdict. Its JSON form is the JSON
//! report (docs/report.schema.json); fields marked `serde(skip)` are figures the writers need
//! that the JSON has no place for.

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};

use crate::{
    holders::HoldersRow,
    model::{CaptureNote, Mode, StateTimes},
    waits::{Purpose, WaitKind},
};

/// Version of the JSON layout (docs/report.schema.json).
pub const SCHEMA_VERSION: u32 = 5;

#[derive(Debug, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub capture: Capture,
    /// The busiest active group, its dominant wait and run-queue share; then the next group
    /// and the idle threads (verdict.rs).
    pub verdict: String,
    /// Each process's threads summed, busiest first.
    pub processes: Vec<ProcessRow>,
    /// The machine's CPUs over the window and what used them (null: not recorded).
    pub machine: Option<MachineRow>,
    /// How threads are classified idle or active.
    pub idle_rule: String,
    /// Frames that make a wait an idle wait (waiting for work) in any thread: not ranked among
    /// blocking sites, never a group's dominant wait.
    pub idle_wait_frames: Vec<&'static str>,
    /// Frames that make a wait an event wait (an event loop waiting for its next event): ranked
    /// after blocking sites, named apart in the verdict.
    pub event_wait_frames: &'static [&'static str],
    pub threads: Vec<ThreadRow>,
    /// Threads of one group that lived less than the window (a thread per request), as one
    /// row each group: the thread tables show these instead of their threads (`threads`
    /// keeps every one).
    pub short_lived: Vec<ShortLivedRow>,
    /// The thread tables' rows, busiest first: a thread, or a short-lived group.
    #[serde(skip)]
    pub thread_table: Vec<ThreadTableRow>,
    /// Threads grouped into pools, active groups busiest first.
    pub groups: Vec<GroupRow>,
    /// Idle threads, by process and wait site.
    pub idle_threads: Vec<IdleRow>,
    pub top_on_cpu_functions: Vec<FunctionRow>,
    pub top_blocking_sites: Vec<SiteRow>,
    /// The sites of `top_blocking_sites`, in the same order: the trace draws their wakeups.
    #[serde(skip)]
    pub ranked_sites: Vec<crate::site::SiteId>,
    pub run_queue: RunQueue,
    /// Where a figure is less than it seems (e.g. samples that cannot see part of a thread's
    /// CPU time), each one sentence.
    #[serde(serialize_with = "as_sentences")]
    pub notes: Vec<Note>,
    pub percentile_method: &'static str,
    /// Each thread's waits of at least the timeline's resolution, when the capture has a
    /// timeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<crate::timeline::intervals::Intervals>,
    /// Waits on another profiled process, followed into it hop by hop (chain.rs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chains: Vec<crate::chain::Chain>,
    /// Go processes of the target set, and whether their goroutines were followed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub go_processes: Vec<GoProcessRow>,
    /// Goroutines of Go processes by the function they were started with, busiest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub goroutines: Vec<GoGroupRow>,
    /// The capture's mode: which states and tables there are.
    #[serde(skip)]
    pub mode: Mode,
    /// Time per state over all threads: the summary's time line, the verdict's input.
    #[serde(skip)]
    pub totals: StateTimes,
}

#[derive(Debug, Serialize)]
pub struct GoProcessRow {
    pub pid: u32,
    pub name: String,
    /// `go1.19.8`.
    pub version: String,
    /// Why its goroutines were not followed (absent: they were).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unfollowed: Option<String>,
}

/// Goroutines of one process started with one function.
#[derive(Debug, Serialize)]
pub struct GoGroupRow {
    pub pid: u32,
    pub process: String,
    /// `goroutines under main.handle (net/http.(*conn).serve)`.
    pub subject: String,
    /// The function they were started with (the frame under `runtime.goexit`).
    pub entry: String,
    /// The application's outermost function in their stacks, when other than `entry`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// No time on the CPU nor in waits that are work.
    pub idle: bool,
    pub on_cpu_s: f64,
    /// Of their time with work (on the CPU + waits that are not idle).
    pub on_cpu_pct: f64,
    pub wait_s: f64,
    pub idle_wait_s: f64,
    pub sites: Vec<GoSiteRow>,
}

#[derive(Debug, Serialize)]
pub struct GoSiteRow {
    /// `select ← net/http.(*Client).Get ← main.fetchPrice`.
    pub label: String,
    /// The runtime's wait reason.
    pub reason: String,
    /// What it waits for, in words.
    pub waiting_for: &'static str,
    pub idle: bool,
    /// Goroutine time (goroutines wait side by side: it can exceed the window).
    pub time_s: f64,
    /// Of the group's time with work (an idle site: of the group's idle time).
    pub share_pct: f64,
    /// Waits that ended in the window, and goroutines still parked here at its end.
    pub waits: u64,
    pub still_parked: u64,
    /// Of the waits that ended.
    pub latency: Option<Latency>,
    /// The park's goroutine stack, root first.
    pub stack: Vec<String>,
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
    /// Whether who woke each wait was recorded (`false` with `--no-wakers`, and in `--mode
    /// cpu`): without, no site names its wakers.
    pub wakers_recorded: bool,
    /// The window's length, exactly.
    #[serde(skip)]
    pub window_ns: u64,
}

impl Capture {
    /// The kernel memory the capture's BPF maps held (captures saved before it was measured:
    /// none).
    pub fn kernel_memory_mib(&self) -> Option<f64> {
        self.counters
            .get("kernel_memory_bytes")
            .filter(|b| **b > 0)
            .map(|b| *b as f64 / (1024.0 * 1024.0))
    }
}

/// The machine around the target: its CPUs' busy share over the window and the processes
/// that used them, from /proc read at the window's ends.
#[derive(Debug, Serialize)]
pub struct MachineRow {
    pub cpus: u32,
    /// User, system and steal time as % of all the CPUs' time.
    pub busy_pct: f64,
    pub user_pct: f64,
    pub system_pct: f64,
    pub iowait_pct: f64,
    pub steal_pct: f64,
    /// The processes that used the most CPU, by name (a database's backends together).
    pub top: Vec<MachineUser>,
    /// The CPUs were saturated (busy at least `SATURATED_PCT`) and the target's active threads
    /// waited for a CPU notably: the verdict says so first.
    pub saturated: bool,
    /// The target's active threads' time waiting for a CPU, as % of their time.
    pub target_runnable_pct: f64,
}

#[derive(Debug, Serialize)]
pub struct MachineUser {
    pub name: String,
    pub processes: usize,
    /// % of all the CPUs' time over the window.
    pub cpu_pct: f64,
    /// Among the profiled processes.
    pub target: bool,
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
    #[serde(flatten)]
    pub shares: StateShares,
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
    /// Its time per state, as % of its time in the capture.
    #[serde(flatten)]
    pub shares: StateShares,
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

/// Threads of one group that lived less than the window, summed.
#[derive(Debug, Serialize)]
pub struct ShortLivedRow {
    pub pid: u32,
    /// `python3 (Thread-* pool)`: the group's label.
    pub group: String,
    pub thread_count: usize,
    /// Their time in the window, the median of them.
    pub median_life_ms: f64,
    /// Their CPU time summed.
    pub on_cpu_s: f64,
    /// Shares of their summed time in the window.
    #[serde(flatten)]
    pub shares: StateShares,
}

impl ShortLivedRow {
    /// `7459 threads, median life 6.0 ms`.
    pub fn lives(&self) -> String {
        format!(
            "{} threads, median life {:.1} ms",
            self.thread_count, self.median_life_ms
        )
    }
}

/// A row of the thread tables.
#[derive(Debug)]
pub enum ThreadTableRow {
    /// `threads[i]`.
    Thread(usize),
    /// `short_lived[i]`.
    ShortLived(usize),
}

/// Time per state as % of a thread's (or a process's threads') time, to a tenth: the
/// columns of the thread and process tables, computed once by the builder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StateShares {
    /// On the CPU, the profiler's own programs left out.
    pub running_pct: f64,
    pub runnable_pct: f64,
    pub sleep_pct: f64,
    pub io_pct: f64,
    pub other_pct: f64,
    /// The profiler's programs, run on the thread's CPU time.
    pub profiler_pct: f64,
}

impl StateShares {
    /// The columns in the tables' order: running, runnable, sleep, io, other, profiler.
    pub fn columns(&self) -> [f64; 6] {
        [
            self.running_pct,
            self.runnable_pct,
            self.sleep_pct,
            self.io_pct,
            self.other_pct,
            self.profiler_pct,
        ]
    }
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
    /// Of its time, waits whose stacks the unwinder cut short (JIT code it had not read yet),
    /// placed here because their thread's whole stacks that end the same way are nearly all
    /// here.
    pub attributed_s: f64,
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
    /// What the wait was for, by its frames (waits.rs): lock, work (waiting for its next
    /// task: idle), connection (a pooled connection), reply (a downstream's reply: an HTTP
    /// client, a database driver), file, condition, sleep, events, io.
    pub kind: WaitKind,
    /// Why: `idle` (for the next task or event), `task` (inside a task: work), `unknown`.
    pub purpose: Purpose,
    /// Below an event loop's own frames: a handler that blocks the loop.
    pub in_event_loop: bool,
    /// For a lock: what the threads that released it did while holding it (holders.rs).
    pub holders: Option<HoldersRow>,
    pub waits: u64,
    pub latency: Option<Latency>,
    /// Time the site's threads then waited for a CPU after being woken.
    pub runnable_after_wakeup_s: f64,
    pub wakers: Vec<WakerRow>,
    /// What its waits in system calls were on (a file, a socket's service end, a pipe),
    /// most time first: one site that waits on several is split here.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceRow>,
    /// When its time concentrated, from the timeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<crate::timeline::bursts::When>,
}

/// One resource of a site, with its share of the site's time.
#[derive(Debug, Serialize)]
pub struct ResourceRow {
    #[serde(flatten)]
    pub resource: crate::model::NamedResource,
    pub time_s: f64,
    /// % of the site's time.
    pub site_pct: f64,
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
    /// Of its time, waits inside tasks (a reply, a pooled connection, a lock, a file …):
    /// work, though off the CPU.
    pub work_wait_pct: f64,
    /// Running, runnable and io (what the load average counts), in seconds.
    pub busy_s: f64,
    /// Busy and in waits inside tasks, in seconds: the group with the most work comes first.
    pub work_s: f64,
    /// Its largest wait that is not an event wait or idle wait.
    pub dominant_wait: Option<GroupWait>,
    /// Its largest event wait (`event_wait_frames`: epoll, poll, select): an event loop
    /// waiting for its next request or reply.
    pub event_wait: Option<GroupWait>,
    /// An event loop that blocks: its largest wait inside its handlers (a sleep, a lock, a
    /// socket read, a file) while its other connections wait.
    pub loop_blocked: Option<GroupWait>,
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

/// Where a figure is less than it seems: each becomes one sentence (`words.rs`).
#[derive(Clone, Debug, PartialEq)]
pub enum Note {
    /// A process there from the start ended during the capture; the others went on.
    ProcessExited { name: String, pid: u32, at_s: f64 },
    /// Processes forked during the capture (followed from their first instruction), and how
    /// many of them exited before the end.
    Forked { processes: u32, exited: u32 },
    /// Time the threads held their CPUs that the kernel charged neither as CPU time nor as
    /// run-queue wait (hypervisor steal): in all, its share of all thread time, and the
    /// thread with the most (`name-tid`, seconds).
    Steal {
        uncharged_s: f64,
        share_pct: f64,
        most: Option<(String, f64)>,
    },
    /// The share of the on-CPU samples where the kernel turns interrupts back on, and those
    /// frames, most samples first (at most 3).
    InterruptSkew { share_pct: f64, frames: Vec<String> },
    /// `--mode cpu`: a busy thread whose samples cover a different share of its CPU time
    /// than its schedstat says.
    SampleCoverage {
        thread: String,
        covered_pct: f64,
        sampled_s: f64,
        schedstat_s: f64,
    },
    /// An off-CPU capture made with `--no-wakers`: no site names who woke it.
    WakersNotRecorded,
    /// What the capture itself found worth saying (model/saved.rs).
    Capture(CaptureNote),
}

/// Notes in the JSON report: their sentences (as they have always been).
fn as_sentences<S: Serializer>(notes: &[Note], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(notes.iter().map(ToString::to_string))
}
