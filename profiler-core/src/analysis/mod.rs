//! Analysis: the time model with named stacks → what the threads were doing as a whole. Each
//! wait is a site with a meaning and a purpose (`waits`: for the next task, inside one, or
//! unsaid); each thread is idle or active by what it waited for ([`is_idle`]); threads with
//! the same name once digits are stripped, in processes of the same name, are one group (a
//! pool); each group gets its time per state, the time of its waits inside tasks, its dominant
//! wait (idle waits apart) and, for an event loop, what blocks it; idle threads are gathered
//! by process and wait. Pure; the report and the verdict render it, fold uses it for
//! `--hide-idle`.

mod cut;

use std::collections::{BTreeMap, HashMap, HashSet};

use profiler_common::WaitState;

pub use cut::{Attributed, WaitKey};

pub use crate::site::SiteId;
use crate::{
    holders::{Holders, lock_holders},
    model::{Entry, Profile, StackNames, StateTimes, ThreadTime},
    site::Sites,
    waits::{self, Purpose},
};

/// Idle: on the CPU at most this share of the thread's time in the window …
pub const IDLE_MAX_ON_CPU_PCT: f64 = 1.0;
/// … in uninterruptible I/O (or stopped) at most this share …
pub const IDLE_MAX_IO_PCT: f64 = 1.0;
/// … and at least this share in waits that are not work: waits for its next task or event,
/// or sleeps whose stack does not say they are inside a task (the rest: waiting for a CPU
/// after its wakeups). The rule's words are made from these three (render/report/words.rs
/// `idle_rule`).
pub const IDLE_MIN_SLEEP_PCT: f64 = 90.0;
/// A group is an event loop that blocks when waits inside its handlers take at least this
/// share of its time.
pub const LOOP_BLOCKED_MIN_PCT: f64 = 5.0;

/// Frames of a wait for any of many events — epoll, poll, select — in the kernel, or (without
/// kernel stacks) in libc or the Go runtime: an event loop waiting for its next request or
/// reply. With no handler below it, such a wait is an idle wait.
pub const EVENT_WAIT_FRAMES: &[&str] = waits::EVENT_FRAMES;

/// Kernel functions that turn interrupts back on: cpu-clock samples pile up there for time
/// the kernel ran with interrupts off in their callers (the timer is an interrupt and waits),
/// so the report notes their share and the verdict never names one as the hottest function.
pub fn enables_interrupts(frame: &str) -> bool {
    const PREFIXES: [&str; 5] = [
        "_raw_spin_unlock_irq",
        "_raw_read_unlock_irq",
        "_raw_write_unlock_irq",
        "finish_task_switch",
        "__local_bh_enable_ip",
    ];
    PREFIXES.iter().any(|p| frame.starts_with(p))
}

/// Whether a thread with these times is idle: the idle rule, by the three constants above.
/// `not_work_ns` is its time in waits that are not work (purpose idle or unknown).
pub fn is_idle(t: &StateTimes, not_work_ns: u64) -> bool {
    t.total() > 0
        && t.pct(t.on_cpu()) <= IDLE_MAX_ON_CPU_PCT
        && t.pct(t.io + t.other) <= IDLE_MAX_IO_PCT
        && t.pct(not_work_ns) >= IDLE_MIN_SLEEP_PCT
}

#[derive(Clone, Debug)]
pub struct ThreadClass {
    pub idle: bool,
    /// Index into [`Analysis::groups`].
    pub group: usize,
    /// The thread's largest wait (sleep, io or other) and its time.
    pub dominant_wait: Option<(SiteId, u64)>,
}

/// Threads of one pool: processes of the same name, thread names equal once digit runs are
/// replaced by `*`.
#[derive(Clone, Debug)]
pub struct Group {
    pub process: String,
    /// The thread name with digit runs as `*` (`worker-*`).
    pub pattern: String,
    /// Its threads, by tid.
    pub tids: Vec<u32>,
    /// Its processes, by pid.
    pub pids: Vec<u32>,
    pub idle: usize,
    /// Time per state of its active threads (of all its threads when all are idle).
    pub time: StateTimes,
    /// The largest wait site of those threads that is not an idle wait, with their time in
    /// it.
    pub dominant_wait: Option<(SiteId, u64)>,
    /// Their time in idle waits other than an event loop's (a pool's queue, housekeeping).
    pub idle_wait_ns: u64,
    /// Their time in waits inside tasks ([`Purpose::Task`]): work, though off the CPU.
    pub work_wait_ns: u64,
    /// Their largest event wait (an event loop's, with no handler below), never the dominant
    /// wait.
    pub event_wait: Option<(SiteId, u64)>,
    /// An event loop (it waits for events, or its waits are below a loop's frames) and the
    /// largest wait inside its handlers, with its time: a loop that blocks.
    pub loop_blocked: Option<(SiteId, u64)>,
}

impl Group {
    pub fn active(&self) -> usize {
        self.tids.len() - self.idle
    }

    /// Time spent working: on the CPU, waiting for one, in uninterruptible I/O, and in waits
    /// inside tasks. What ranks the groups.
    pub fn work_ns(&self) -> u64 {
        self.time.busy() + self.work_wait_ns
    }

    /// `redis-server (main thread)`, `workload (syncer)`, `workload (worker-* pool, 4
    /// threads)`, `postgres (6 threads)`.
    pub fn label(&self, profile: &Profile) -> String {
        let name = |tid: &u32| profile.threads.get(tid).map_or("?", |t| t.name.as_str());
        let procs = if self.pids.len() > 1 {
            format!(", {} processes", self.pids.len())
        } else {
            String::new()
        };
        match self.tids.as_slice() {
            [tid] if self.pids.first() == Some(tid) => format!("{} (main thread)", self.process),
            [tid] => format!("{} ({})", self.process, name(tid)),
            tids if self.pids.len() == tids.len() => {
                format!("{} ({} processes)", self.process, tids.len())
            }
            tids if self.pattern == self.process => {
                format!("{} ({} threads{procs})", self.process, tids.len())
            }
            tids => format!(
                "{} ({} pool, {} threads{procs})",
                self.process,
                self.pattern,
                tids.len()
            ),
        }
    }
}

/// Idle threads of one process that wait at the same site.
#[derive(Clone, Debug)]
pub struct IdleSet {
    pub process: String,
    pub pid: u32,
    pub site: Option<SiteId>,
    pub tids: Vec<u32>,
    /// Their time asleep.
    pub sleep_ns: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Analysis {
    pub threads: BTreeMap<u32, ThreadClass>,
    /// Active groups, most work first, then groups whose threads are all idle.
    pub groups: Vec<Group>,
    /// Idle threads by process and wait, most threads first.
    pub idle: Vec<IdleSet>,
    /// Whether threads could be classified (off-CPU states were traced).
    pub classified: bool,
    /// Lock sites' holders: what the threads that released each lock did while holding it.
    pub holders: HashMap<SiteId, Holders>,
    /// Waits whose stacks the unwinder cut short, at the site their thread's whole stacks
    /// place them (`cut.rs`).
    pub attributed: Attributed,
    /// Every stack pair's site, resolved for the whole capture.
    pub sites: Sites,
}

impl Analysis {
    pub fn is_idle(&self, tid: u32) -> bool {
        self.threads.get(&tid).is_some_and(|c| c.idle)
    }

    /// The site a cut-short wait was placed at, if it was.
    pub fn placed(&self, e: &Entry, state: WaitState) -> Option<&SiteId> {
        self.attributed
            .get(&(e.tid, e.user_stack, e.kernel_stack, state))
    }

    /// The site that stands for `id`: with the purpose and event loop all its stacks say
    /// together, and the one of all that read alike.
    pub fn canonical(&self, id: SiteId) -> SiteId {
        self.sites.resolve(id)
    }

    pub fn idle_threads(&self) -> usize {
        self.threads.values().filter(|c| c.idle).count()
    }

    /// Active groups, most work first.
    pub fn active_groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter().filter(|g| g.active() > 0)
    }
}

/// `worker-12` → `worker-*`, `http-nio-8080-exec-3` → `http-nio-*-exec-*`.
pub fn pattern(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('*');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// Per thread, its time per wait site.
type SiteTimes = HashMap<u32, HashMap<SiteId, u64>>;

/// `fallback` names the process of a thread whose process is unknown.
pub fn analyze(profile: &Profile, names: &StackNames, fallback: &str) -> Analysis {
    let classified = profile.mode.traces_switches();
    let sites = Sites::of(profile, names);
    let attributed = cut::attribute(profile, names, &sites);
    let waits = site_times(profile, &sites, &attributed);
    let process_of = |t: &ThreadTime| -> String {
        profile
            .processes
            .get(&t.pid)
            .map(|p| p.name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| fallback.to_string())
    };

    let mut by_key: BTreeMap<(String, String), Vec<u32>> = BTreeMap::new();
    let mut threads = BTreeMap::new();
    for (&tid, t) in &profile.threads {
        let sites = waits.get(&tid);
        let not_work: u64 = sites
            .into_iter()
            .flatten()
            .filter(|(s, _)| s.purpose != Purpose::Task)
            .map(|(_, ns)| ns)
            .sum();
        threads.insert(
            tid,
            ThreadClass {
                idle: classified && is_idle(&t.time, not_work),
                group: 0,
                dominant_wait: largest(sites),
            },
        );
        by_key
            .entry((process_of(t), pattern(&t.name)))
            .or_default()
            .push(tid);
    }

    let mut groups: Vec<Group> = by_key
        .into_iter()
        .map(|((process, pattern), tids)| group(profile, &threads, &waits, process, pattern, tids))
        .collect();
    groups.sort_by(|a, b| {
        (b.active() > 0)
            .cmp(&(a.active() > 0))
            .then(b.work_ns().cmp(&a.work_ns()))
            .then(b.time.running.cmp(&a.time.running))
            .then(b.tids.len().cmp(&a.tids.len()))
            .then(a.tids.cmp(&b.tids))
    });
    for (i, g) in groups.iter().enumerate() {
        for tid in &g.tids {
            if let Some(c) = threads.get_mut(tid) {
                c.group = i;
            }
        }
    }
    let idle = idle_sets(profile, &threads, process_of);
    let lock_sites: HashSet<&SiteId> = waits.values().flat_map(|s| s.keys()).collect();
    let holders = lock_holders(profile, names, lock_sites.into_iter());
    Analysis {
        threads,
        groups,
        idle,
        classified,
        holders,
        attributed,
        sites,
    }
}

/// The largest site of a thread or group (ties: the first site in order).
fn largest(sites: Option<&HashMap<SiteId, u64>>) -> Option<(SiteId, u64)> {
    sites?
        .iter()
        .filter(|(_, ns)| **ns > 0)
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(k, ns)| (k.clone(), *ns))
}

/// Each thread's blocked time (sleep, io, other) per site.
fn site_times(profile: &Profile, sites: &Sites, attributed: &Attributed) -> SiteTimes {
    let mut waits: SiteTimes = HashMap::new();
    for e in &profile.entries {
        let Some(state) = e.blocked_state() else {
            continue;
        };
        let key = (e.user_stack, e.kernel_stack, state);
        let Some(id) = attributed
            .get(&(e.tid, e.user_stack, e.kernel_stack, state))
            .or_else(|| sites.at(&key))
        else {
            continue;
        };
        *waits
            .entry(e.tid)
            .or_default()
            .entry(id.clone())
            .or_default() += e.time_ns;
    }
    waits
}

/// One pool: its active threads' time (all of them when all are idle), its work off the
/// CPU, its dominant waits, and whether it is an event loop that blocks.
fn group(
    profile: &Profile,
    threads: &BTreeMap<u32, ThreadClass>,
    waits: &SiteTimes,
    process: String,
    pattern: String,
    tids: Vec<u32>,
) -> Group {
    let idle = tids.iter().filter(|t| threads[*t].idle).count();
    let counted = tids
        .iter()
        .filter(|t| idle == tids.len() || !threads[*t].idle);
    let mut time = StateTimes::default();
    let mut sites: HashMap<SiteId, u64> = HashMap::new();
    let mut events: HashMap<SiteId, u64> = HashMap::new();
    let mut in_loops = InLoops::default();
    let (mut idle_wait_ns, mut work_wait_ns) = (0, 0);
    for tid in counted {
        let thread = &profile.threads[tid];
        time += thread.time;
        let thread_sites = waits.get(tid);
        in_loops.add(thread, thread_sites);
        for (site, ns) in thread_sites.into_iter().flatten() {
            if site.is_event_wait() {
                *events.entry(site.clone()).or_default() += ns;
            } else if site.is_idle_wait() {
                idle_wait_ns += ns;
            } else {
                if site.purpose == Purpose::Task {
                    work_wait_ns += ns;
                }
                *sites.entry(site.clone()).or_default() += ns;
            }
        }
    }
    let mut pids: Vec<u32> = tids.iter().map(|t| profile.threads[t].pid).collect();
    pids.sort_unstable();
    pids.dedup();
    Group {
        process,
        pattern,
        tids,
        pids,
        idle,
        time,
        dominant_wait: largest(Some(&sites)),
        idle_wait_ns,
        work_wait_ns,
        event_wait: largest(Some(&events)),
        loop_blocked: in_loops.blocked(),
    }
}

/// A group's event loops — its threads that wait for events, or whose waits lie below an
/// event loop's own frames — and their waits inside their handlers.
#[derive(Default)]
struct InLoops {
    /// The loops' time in the window.
    time: StateTimes,
    sites: HashMap<SiteId, u64>,
}

impl InLoops {
    fn add(&mut self, thread: &ThreadTime, sites: Option<&HashMap<SiteId, u64>>) {
        let sites = sites.into_iter().flatten();
        let waits_for_events = sites.clone().any(|(s, _)| s.is_event_wait())
            || waits::is_event_loop_thread(&thread.name);
        let mut is_loop = waits_for_events;
        for (site, ns) in sites.filter(|(s, _)| !s.is_idle_wait()) {
            if site.event_loop || waits_for_events {
                is_loop = true;
                *self.sites.entry(site.clone()).or_default() += ns;
            }
        }
        if is_loop {
            self.time += thread.time;
        }
    }

    /// The largest wait inside the loops' handlers, when such waits take a notable share of
    /// the loops' time.
    fn blocked(&self) -> Option<(SiteId, u64)> {
        let total: u64 = self.sites.values().sum();
        (self.time.pct(total) >= LOOP_BLOCKED_MIN_PCT)
            .then(|| largest(Some(&self.sites)))
            .flatten()
    }
}

/// Idle threads, one set per process and dominant site, largest sets first.
fn idle_sets(
    profile: &Profile,
    threads: &BTreeMap<u32, ThreadClass>,
    process_of: impl Fn(&ThreadTime) -> String,
) -> Vec<IdleSet> {
    let mut sets: BTreeMap<(u32, Option<SiteId>), IdleSet> = BTreeMap::new();
    for (&tid, c) in threads.iter().filter(|(_, c)| c.idle) {
        let t = &profile.threads[&tid];
        let site = c.dominant_wait.as_ref().map(|(s, _)| s.clone());
        let set = sets
            .entry((t.pid, site.clone()))
            .or_insert_with(|| IdleSet {
                process: process_of(t),
                pid: t.pid,
                site,
                tids: Vec::new(),
                sleep_ns: 0,
            });
        set.tids.push(tid);
        set.sleep_ns += t.time.sleep;
    }
    let mut idle: Vec<IdleSet> = sets.into_values().collect();
    idle.sort_by(|a, b| {
        b.tids
            .len()
            .cmp(&a.tids.len())
            .then(b.sleep_ns.cmp(&a.sleep_ns))
            .then(a.tids.cmp(&b.tids))
    });
    idle
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use profiler_common::WaitState;

    use super::*;
    use crate::model::{Entry, Kind, Mode, Name, ProcessInfo, Window};

    const SEC: u64 = 1_000_000_000;

    fn thread(
        pid: u32,
        name: &str,
        running: u64,
        runnable: u64,
        sleep: u64,
        io: u64,
    ) -> ThreadTime {
        ThreadTime {
            pid,
            name: name.into(),
            time: StateTimes {
                running,
                runnable,
                sleep,
                io,
                ..StateTimes::default()
            },
            on_cpu_exact: true,
            ..ThreadTime::default()
        }
    }

    fn wait(tid: u32, user: u64, state: WaitState, ns: u64) -> Entry {
        let mut e = Entry::new(1, tid, user, 0, Kind::Off(state));
        e.time_ns = ns;
        e
    }

    fn profile(threads: Vec<(u32, ThreadTime)>, entries: Vec<Entry>) -> Profile {
        let mut processes = std::collections::BTreeMap::new();
        processes.insert(
            1,
            ProcessInfo {
                name: "srv".into(),
                ..ProcessInfo::default()
            },
        );
        let window = Window {
            start_ns: 0,
            stop_ns: 10 * SEC,
        };
        Profile {
            entries,
            threads: threads.into_iter().collect(),
            processes,
            ..Profile::empty(Mode::Wall, window, 10_101_010)
        }
    }

    fn names() -> StackNames {
        let n = |v: &[&str]| v.iter().map(|s| Arc::from(*s)).collect::<Vec<Name>>();
        let mut names = StackNames::default();
        names
            .user
            .insert(1, n(&["start", "worker_park", "pthread_cond_wait"]));
        names.user.insert(2, n(&["main", "flush", "fdatasync"]));
        names
            .user
            .insert(3, n(&["main", "poll_loop", "epoll_wait"]));
        names.user.insert(4, n(&["main", "pthread_join"]));
        names
    }

    #[test]
    fn digit_runs_make_one_pattern() {
        assert_eq!(pattern("http-nio-8080-exec-12"), "http-nio-*-exec-*");
        assert_eq!(pattern("pool-3-thread-7"), "pool-*-thread-*");
        assert_eq!(pattern("bio_aof"), "bio_aof");
        assert_eq!(pattern("worker-0"), pattern("worker-11"));
    }

    #[test]
    fn the_idle_rule_is_idle_waits_and_off_the_cpu() {
        let t = |running, runnable, sleep, io| StateTimes {
            running,
            runnable,
            sleep,
            io,
            ..StateTimes::default()
        };
        assert!(is_idle(&t(0, 0, 100, 0), 100));
        assert!(is_idle(&t(1, 0, 99, 0), 99));
        assert!(
            is_idle(&t(0, 8, 92, 0), 92),
            "waiting for a CPU after each wakeup"
        );
        assert!(!is_idle(&t(2, 0, 98, 0), 98), "2 % on the CPU is work");
        assert!(
            !is_idle(&t(0, 0, 98, 2), 98),
            "uninterruptible I/O is not idle"
        );
        assert!(!is_idle(&t(0, 11, 89, 0), 89), "starved, not idle");
        assert!(!is_idle(&t(0, 0, 0, 0), 0), "no time at all says nothing");
        assert!(
            !is_idle(&t(0, 0, 100, 0), 5),
            "asleep in a downstream's reply is work, whatever the CPU share"
        );
    }

    #[test]
    fn pools_are_one_group_and_the_busiest_active_group_comes_first() {
        let ten = 10 * SEC;
        let p = profile(
            vec![
                (1, thread(1, "srv", 0, 0, ten, 0)),
                (2, thread(1, "worker-0", 0, 0, ten, 0)),
                (3, thread(1, "worker-1", SEC / 100, 0, ten - SEC / 100, 0)),
                (4, thread(1, "flusher", 5 * SEC, SEC, SEC, 3 * SEC)),
                (5, thread(1, "poller", 2 * SEC, 0, 8 * SEC, 0)),
            ],
            vec![
                wait(1, 4, WaitState::Sleep, ten),
                wait(2, 1, WaitState::Sleep, ten),
                wait(3, 1, WaitState::Sleep, ten - SEC / 100),
                wait(4, 2, WaitState::Io, 3 * SEC),
                wait(4, 3, WaitState::Sleep, SEC),
                wait(5, 3, WaitState::Sleep, 8 * SEC),
            ],
        );
        let a = analyze(&p, &names(), "?");
        assert!(a.is_idle(1) && a.is_idle(2) && a.is_idle(3));
        assert!(!a.is_idle(4) && !a.is_idle(5));
        let labels: Vec<String> = a.groups.iter().map(|g| g.label(&p)).collect();
        assert_eq!(
            labels,
            [
                "srv (flusher)",
                "srv (poller)",
                "srv (worker-* pool, 2 threads)",
                "srv (main thread)"
            ]
        );
        let flusher = &a.groups[0];
        let (site, ns) = flusher.dominant_wait.clone().unwrap();
        assert_eq!(
            (site.state, site.frames.last().unwrap().as_str(), ns),
            ("io", "fdatasync", 3 * SEC)
        );
        assert_eq!(a.threads[&2].group, a.threads[&3].group);
        // The poller's epoll_wait is an event wait: named apart, not its dominant wait.
        let poller = &a.groups[1];
        assert!(poller.dominant_wait.is_none(), "{poller:?}");
        let (site, ns) = poller.event_wait.clone().unwrap();
        assert_eq!(
            (site.frames.last().unwrap().as_str(), ns),
            ("epoll_wait", 8 * SEC)
        );
        // The idle threads by process and wait: the pool together, main apart.
        let sets: Vec<(usize, String)> = a
            .idle
            .iter()
            .map(|s| {
                (
                    s.tids.len(),
                    s.site.clone().unwrap().frames.last().unwrap().clone(),
                )
            })
            .collect();
        assert_eq!(
            sets,
            [(2, "pthread_cond_wait".into()), (1, "pthread_join".into())]
        );
    }

    #[test]
    fn go_scheduler_parking_is_an_idle_wait_not_the_dominant_one() {
        let mut n = names();
        let go = |v: &[&str]| v.iter().map(|s| Arc::from(*s)).collect::<Vec<Name>>();
        n.user.insert(
            5,
            go(&[
                "runtime.mcall",
                "runtime.park_m",
                "runtime.schedule",
                "runtime.findRunnable",
                "runtime.stopm",
                "runtime.notesleep",
                "runtime.futex",
            ]),
        );
        n.user.insert(6, go(&["main.handler", "syscall.fsync"]));
        let p = profile(
            vec![(7, thread(1, "srv", 3 * SEC, 0, 6 * SEC, SEC))],
            vec![
                wait(7, 5, WaitState::Sleep, 6 * SEC),
                wait(7, 6, WaitState::Io, SEC),
            ],
        );
        let a = analyze(&p, &n, "?");
        let g = &a.groups[0];
        assert_eq!(g.idle_wait_ns, 6 * SEC);
        let (site, ns) = g.dominant_wait.clone().unwrap();
        assert_eq!(
            (site.frames.last().unwrap().as_str(), ns),
            ("syscall.fsync", SEC)
        );
    }

    #[test]
    fn time_held_but_not_charged_is_no_wait() {
        // An nginx worker's few ms of hypervisor steal (state other) beside its epoll waits.
        let p = profile(
            vec![(7, thread(1, "srv", 6 * SEC, 0, 3 * SEC, 0))],
            vec![
                wait(7, 3, WaitState::Sleep, 3 * SEC),
                wait(
                    7,
                    profiler_common::stack_id::UNCHARGED,
                    WaitState::Other,
                    8_000_000,
                ),
            ],
        );
        let a = analyze(&p, &names(), "?");
        let (site, _) = a.threads[&7].dominant_wait.clone().unwrap();
        assert_eq!(site.frames.last().unwrap(), "epoll_wait");
        assert!(
            a.groups[0].dominant_wait.is_none(),
            "epoll is an event wait"
        );
        assert_eq!(
            a.groups[0].event_wait.as_ref().map(|(s, _)| s.state),
            Some("sleep")
        );
    }

    #[test]
    fn without_off_cpu_states_nothing_is_idle() {
        let mut p = profile(vec![(2, thread(1, "worker-0", 0, 0, 10 * SEC, 0))], vec![]);
        p.mode = Mode::Cpu;
        let a = analyze(&p, &names(), "?");
        assert!(!a.classified && !a.is_idle(2));
    }
}
