//! The verdict: the report's rows → the sentences an expert would write first. It reads the
//! model only (the builder calls it last), so the verdict and the report do not import each
//! other. It follows the
//! threads that do the work: the busiest active group (most time running, runnable or in
//! uninterruptible I/O), how much of its time is on the CPU, its largest wait with latency and
//! waker, and its run-queue share when it waits for a CPU, then its event-loop wait and its
//! idle waits; then the next group; then the top on-CPU function; then how many
//! threads were idle (waiting for work), which are not ranked. With every thread idle, or in
//! `--mode cpu`, it names the dominant state over all threads.

use super::{
    model::{
        FunctionRow, GoGroupRow, GroupRow, GroupWait, IdleRow, Latency, MachineRow, Report,
        RunQueue,
    },
    words::{IdleRuleWords, idle_rule, machine_users},
};
use crate::{
    analysis::enables_interrupts,
    model::{Mode, StateTimes},
    waits::{self, WaitKind},
};

/// A run-queue share at least this large is named.
const RUNNABLE_NAMED_PCT: f64 = 5.0;
/// A group waiting for work at least this share of its time is said to be mostly idle …
const MOSTLY_WAITING_FOR_WORK_PCT: f64 = 50.0;
/// … unless its largest wait takes at least this share: then that wait is what it waits on
/// when it has work.
const BLOCKED_PCT: f64 = 20.0;
/// A second group is named when it is at least this busy compared with the first.
const NEXT_GROUP_SHARE: f64 = 0.25;

/// The parts of the report the verdict reads.
pub struct VerdictInput<'a> {
    pub mode: Mode,
    pub threads: usize,
    /// Time per state over all threads.
    pub totals: StateTimes,
    pub functions: &'a [FunctionRow],
    pub groups: &'a [GroupRow],
    pub idle: &'a [IdleRow],
    pub run_queue: &'a RunQueue,
    pub machine: Option<&'a MachineRow>,
    pub chains: &'a [crate::chain::Chain],
    pub goroutines: &'a [GoGroupRow],
}

impl<'a> VerdictInput<'a> {
    pub fn of(r: &'a Report) -> Self {
        Self {
            mode: r.mode,
            threads: r.threads.len(),
            totals: r.totals,
            functions: &r.top_on_cpu_functions,
            groups: &r.groups,
            idle: &r.idle_threads,
            run_queue: &r.run_queue,
            machine: r.machine.as_ref(),
            chains: &r.chains,
            goroutines: &r.goroutines,
        }
    }
}

pub fn verdict(v: &VerdictInput<'_>) -> String {
    let threads = threads_verdict(v);
    match goroutine_sentence(v.goroutines) {
        Some(go) => format!("{go} {threads}"),
        None => threads,
    }
}

/// A Go process's requests read by their goroutines, which the threads' view calls idle: `In
/// api (Go, PID 812), requests (goroutines under main.handle, net/http.(*conn).serve) spend 93 % of
/// their time waiting for a reply over HTTP: select ← net/http.(*Client).Get ←
/// main.fetchPrice (p50 21 ms, p99 24 ms); on the CPU 5 %.` With no goroutine doing work,
/// that they were idle.
fn goroutine_sentence(groups: &[GoGroupRow]) -> Option<String> {
    let first = groups.first()?;
    if first.idle {
        let waits: Vec<&str> = groups
            .iter()
            .filter_map(|g| g.sites.first())
            .take(3)
            .map(|s| s.label.as_str())
            .collect();
        return Some(format!(
            "In {} every goroutine that parked was idle, waiting for work ({}).",
            process_name(first),
            waits.join("; ")
        ));
    }
    let mut text = format!("In {}, {}", process_name(first), go_group_text(first));
    // A group held on a channel waits for another one: the first group that waits on
    // something else is where the time goes.
    if dominant_go_site(first).is_some_and(|s| s.waiting_for == "a channel")
        && let Some(cause) = groups.iter().skip(1).find(|g| {
            !g.idle
                && g.pid == first.pid
                && dominant_go_site(g).is_none_or(|s| s.waiting_for != "a channel")
        })
    {
        text.push_str(&format!(
            " The goroutines they wait on: {}",
            go_group_text(cause)
        ));
    }
    let idle = groups.iter().filter(|g| g.idle).count();
    if idle > 0 {
        text.push_str(&format!(
            " {} of goroutines only waited for work (not ranked).",
            crate::render::count(idle as u64, "group")
        ));
    }
    Some(text)
}

fn dominant_go_site(g: &GoGroupRow) -> Option<&super::model::GoSiteRow> {
    g.sites.iter().find(|s| !s.idle)
}

/// `requests (goroutines under main.handleOrder, net/http.(*conn).serve) spend 93 % of their
/// time waiting for a reply over HTTP: select ← … (p50 21 ms, p99 24 ms); on the CPU 5 %.`
fn go_group_text(g: &GoGroupRow) -> String {
    let subject = if g.entry.ends_with("(*conn).serve") {
        format!(
            "requests ({}, {})",
            g.app.as_deref().map_or_else(
                || "goroutines".to_string(),
                |a| format!("goroutines under {a}")
            ),
            g.entry
        )
    } else {
        g.subject.clone()
    };
    match dominant_go_site(g) {
        Some(s) if s.share_pct >= g.on_cpu_pct => format!(
            "{subject} spend {:.0} % of their time waiting for {}: {}{}; on the CPU {:.0} %.",
            s.share_pct,
            s.waiting_for,
            s.label,
            latency_text(s.latency.as_ref()),
            g.on_cpu_pct
        ),
        Some(s) => format!(
            "{subject} are on the CPU {:.0} % of their time; their largest wait, {:.0} %, is for \
             {}: {}{}.",
            g.on_cpu_pct,
            s.share_pct,
            s.waiting_for,
            s.label,
            latency_text(s.latency.as_ref())
        ),
        None => format!(
            "{subject} are on the CPU {:.0} % of their time.",
            g.on_cpu_pct
        ),
    }
}

/// `api (Go, PID 812)`.
fn process_name(g: &GoGroupRow) -> String {
    if g.process.is_empty() {
        format!("PID {} (Go)", g.pid)
    } else {
        format!("{} (Go, PID {})", g.process, g.pid)
    }
}

/// ` (p50 21 ms, p99 24 ms)`.
fn latency_text(l: Option<&Latency>) -> String {
    match l.and_then(|l| Some((l.p50_ms?, l.p99_ms?))) {
        Some((p50, p99)) => format!(" (p50 {}, p99 {})", ms_text(p50), ms_text(p99)),
        None => String::new(),
    }
}

/// The verdict as the threads tell it.
fn threads_verdict(v: &VerdictInput<'_>) -> String {
    if v.totals.total() == 0 {
        return "Nothing was recorded.".into();
    }
    if !v.mode.traces_switches() {
        return on_cpu_only(v);
    }
    let mut active: Vec<&GroupRow> = v
        .groups
        .iter()
        .filter(|g| g.idle_threads < g.thread_count)
        .collect();
    // A group mostly waiting for work is not where the time goes when another is blocked on
    // something named (the JIT compiler's threads still compiling, ranked first by their CPU,
    // beside an event loop that sleeps in its handler): that one leads.
    if active.first().is_some_and(|g| mostly_waiting_for_work(g))
        && let Some(i) = active.iter().position(|g| {
            !mostly_waiting_for_work(g)
                && g.dominant_wait
                    .as_ref()
                    .is_some_and(|w| w.share_pct >= BLOCKED_PCT)
        })
    {
        let blocked = active.remove(i);
        active.insert(0, blocked);
    }
    let Some(first) = active.first() else {
        return all_idle(v);
    };
    let mut text = v.machine.map(saturated).unwrap_or_default();
    text.push_str(&group_sentence(first, v.run_queue));
    if let Some(next) = active
        .get(1)
        .filter(|g| g.work_s >= NEXT_GROUP_SHARE * first.work_s && g.work_s > 0.0)
    {
        text.push_str(" Next: ");
        text.push_str(&group_sentence(next, v.run_queue));
    }
    // Where a wait on another profiled process ends: the first chain, whole.
    if let Some(chain) = v.chains.first() {
        text.push_str(&format!(" Across processes: {}.", chain.sentence()));
    }
    let wait = first.dominant_wait.as_ref().map_or(0.0, |w| w.share_pct);
    if let Some(f) = hottest(v.functions)
        && first.running_pct + first.runnable_pct > wait
    {
        text.push_str(&format!(
            " Most CPU time of all threads is in {} ({:.0} % self, {:.0} % total).",
            f.function, f.self_pct, f.total_pct
        ));
    }
    text.push_str(&idle_sentence(v));
    text
}

/// `The 2 CPUs were 98 % busy (java 33 %, …) and the profiled threads that work waited for a
/// CPU 27 % of their time: the machine is CPU-bound. `, when it is.
fn saturated(m: &MachineRow) -> String {
    if !m.saturated {
        return String::new();
    }
    let users = machine_users(m);
    format!(
        "The {} were {:.0} % busy{} and the profiled threads that work waited for a CPU {:.0} % \
         of their time: the machine is CPU-bound. ",
        crate::render::count(u64::from(m.cpus), "CPU"),
        m.busy_pct,
        if users.is_empty() {
            String::new()
        } else {
            format!(" ({users})")
        },
        m.target_runnable_pct
    )
}

/// ` 12 of 40 threads were idle (…), 8 of them a pool waiting for work (…) and are listed
/// apart, not ranked.`
fn idle_sentence(v: &VerdictInput<'_>) -> String {
    let idle: usize = v.idle.iter().map(|i| i.thread_count).sum();
    if idle == 0 {
        return String::new();
    }
    let work = v
        .idle
        .iter()
        .filter(|i| i.kind == Some(WaitKind::Work))
        .max_by_key(|i| i.thread_count)
        .map(|i| {
            let site = i.site.as_deref().unwrap_or("?");
            format!(
                ", {} of them a pool waiting for work ({site})",
                i.thread_count
            )
        })
        .unwrap_or_default();
    format!(
        " {idle} of {} threads {} idle ({}){work} and {} listed apart, not ranked.",
        v.threads,
        if idle == 1 { "was" } else { "were" },
        idle_rule(IdleRuleWords::Brief),
        if idle == 1 { "is" } else { "are" }
    )
}

/// `X is on the CPU 60 % of the time; 32 % is spent in … (io, p99 0.20 ms, woken by …).`
fn group_sentence(g: &GroupRow, run_queue: &RunQueue) -> String {
    let mut parts = vec![subject(g)];
    let blocked_loop = g.loop_blocked.as_ref().map(loop_text);
    let wait = match &blocked_loop {
        Some(_) => None,
        None => dominant_wait(g),
    };
    parts.extend(blocked_loop);
    let runnable = run_queue_share(g, run_queue);
    match (wait, runnable) {
        (Some(w), Some(r)) if r.0 > w.0 => {
            parts.push(format!("{}: the CPU is the bottleneck", r.1));
            parts.push(w.1);
        }
        (None, Some(r)) if r.0 >= g.running_pct.min(g.idle_wait_pct) => {
            parts.push(format!("{}: the CPU is the bottleneck", r.1));
        }
        (w, r) => parts.extend(w.map(|w| w.1).into_iter().chain(r.map(|r| r.1))),
    }
    parts.extend(event_wait(g));
    parts.extend(work_text(g));
    format!("{}.", parts.join("; "))
}

/// The group and its share on the CPU.
fn subject(g: &GroupRow) -> String {
    let active = g.thread_count - g.idle_threads;
    if active > 1 {
        format!(
            "{}: its {active} active threads are on the CPU {:.0} % of their time",
            g.name, g.running_pct
        )
    } else {
        format!(
            "{} is on the CPU {:.0} % of the time",
            g.name, g.running_pct
        )
    }
}

/// The group's dominant wait, with its share (what it is weighed by).
fn dominant_wait(g: &GroupRow) -> Option<(f64, String)> {
    g.dominant_wait.as_ref().map(wait_text)
}

/// `32 % is spent in fsync ← f (io, p99 0.20 ms, woken by …)`; a lock's wait with what its
/// holders do with the lock. With its share, to rank it against the run queue.
fn wait_text(w: &GroupWait) -> (f64, String) {
    let mut detail = vec![w.state.to_string()];
    if let Some(p99) = w.p99_ms {
        detail.push(format!("p99 {}", ms_text(p99)));
    }
    if let Some(by) = &w.woken_by {
        detail.push(format!("woken by {by}"));
    }
    let what = match w.kind {
        WaitKind::Lock => "is spent queueing for a lock,",
        WaitKind::Connection => "is spent waiting for a pooled connection:",
        WaitKind::Reply => "is spent waiting for a downstream's reply:",
        WaitKind::File => "is spent in file I/O:",
        _ => "is spent in",
    };
    let mut text = format!(
        "{:.0} % {what} {} ({})",
        w.share_pct,
        w.site,
        detail.join(", ")
    );
    if let Some(held) = &w.holders_mostly {
        text.push_str(&format!(
            "; its holders spend the held time mostly in {held}"
        ));
    }
    (w.share_pct, text)
}

/// `it is an event loop that blocks: 52 % of its time is in Thread.sleep ← H.channelRead0
/// inside its handlers (sleep, p99 5.1 ms), and no other event is served meanwhile`.
fn loop_text(w: &GroupWait) -> String {
    let mut detail = vec![w.state.to_string()];
    if let Some(p99) = w.p99_ms {
        detail.push(format!("p99 {}", ms_text(p99)));
    }
    format!(
        "it is an event loop that blocks: {:.0} % of its time is in {} inside its handlers \
         ({}), and its other connections wait meanwhile",
        w.share_pct,
        w.site,
        detail.join(", ")
    )
}

/// A group's waits for work: mostly idle when they are most of its time and no other wait
/// blocks it much.
/// Most of the group's time waits for work, and no wait of its own is large enough to name.
fn mostly_waiting_for_work(g: &GroupRow) -> bool {
    let blocked = g
        .dominant_wait
        .as_ref()
        .is_some_and(|w| w.share_pct >= BLOCKED_PCT);
    g.idle_wait_pct >= MOSTLY_WAITING_FOR_WORK_PCT && !blocked
}

fn work_text(g: &GroupRow) -> Option<String> {
    if mostly_waiting_for_work(g) {
        Some(format!(
            "{:.0} % waiting for work: the pool is mostly idle, not the bottleneck",
            g.idle_wait_pct
        ))
    } else if g.idle_wait_pct >= RUNNABLE_NAMED_PCT {
        Some(format!(
            "{:.0} % waiting for work (idle waits)",
            g.idle_wait_pct
        ))
    } else {
        None
    }
}

/// The group's wait for a CPU, with its share, when it is large enough to name.
fn run_queue_share(g: &GroupRow, run_queue: &RunQueue) -> Option<(f64, String)> {
    (g.runnable_pct >= RUNNABLE_NAMED_PCT).then(|| {
        let p99 = |l: &Option<Latency>| {
            l.as_ref()
                .and_then(|l| l.p99_ms)
                .map_or("-".into(), ms_text)
        };
        (
            g.runnable_pct,
            format!(
                "{:.0} % waiting for a CPU (run-queue delay p99 {} after preemption, {} after wakeup)",
                g.runnable_pct,
                p99(&run_queue.preempted),
                p99(&run_queue.after_wakeup)
            ),
        )
    })
}

/// The group's event-loop wait, when it is large enough to name.
fn event_wait(g: &GroupRow) -> Option<String> {
    g.event_wait
        .as_ref()
        .filter(|w| w.share_pct >= RUNNABLE_NAMED_PCT)
        .map(|w| {
            let by = w
                .woken_by
                .as_ref()
                .map_or(String::new(), |by| format!(", woken by {by}"));
            format!(
                "{:.0} % waiting for events in {} ({}{by})",
                w.share_pct, w.site, w.state
            )
        })
}

fn ms_text(ms: f64) -> String {
    if ms >= 10.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

/// Every thread idle: where they waited.
fn all_idle(v: &VerdictInput<'_>) -> String {
    let share = v.totals.pct(v.totals.sleep);
    let mut text = format!(
        "Every thread was idle ({}): {share:.0} % of all thread time asleep",
        idle_rule(IdleRuleWords::Brief)
    );
    if let Some(i) = v.idle.iter().max_by(|a, b| a.sleep_s.total_cmp(&b.sleep_s))
        && let Some(site) = &i.site
    {
        text.push_str(&format!(
            ", most in {site} ({} thread{}, {:.0} % of all thread time)",
            i.thread_count,
            if i.thread_count == 1 { "" } else { "s" },
            i.share_pct
        ));
    }
    text.push('.');
    text
}

/// The function the most CPU time is in, passing over the kernel's points where interrupts
/// come back on: samples pile up there for time spent in their callers (a note says so).
/// None when that function holds less than `HOT_SELF_PCT` of it itself: an entry frame
/// such as `do_syscall_64` (all of it below, nothing itself) says nothing.
fn hottest(functions: &[FunctionRow]) -> Option<&FunctionRow> {
    first_sampled(functions).filter(|f| f.self_pct >= HOT_SELF_PCT)
}

/// The first function by self time that is not a point where interrupts come back on, nor a
/// JVM's own machinery (its JIT compiler's or GC's C++: the program's time is elsewhere).
fn first_sampled(functions: &[FunctionRow]) -> Option<&FunctionRow> {
    functions
        .iter()
        .find(|f| !enables_interrupts(&f.function) && !waits::is_jvm_internal(&f.function))
}

/// The least self share of CPU time for the verdict to name a function.
const HOT_SELF_PCT: f64 = 5.0;

/// `--mode cpu`: samples only.
fn on_cpu_only(v: &VerdictInput<'_>) -> String {
    let (whose, their) = if v.threads == 1 {
        ("The thread", "its")
    } else {
        ("Threads", "their")
    };
    match first_sampled(v.functions) {
        Some(f) => format!(
            "{whose} spent {their} sampled time on the CPU most in {} ({:.0} % of CPU time self, {:.0} % total); without off-CPU tracing no thread is classified idle.",
            f.function, f.self_pct, f.total_pct
        ),
        None => format!("{whose} were not seen on the CPU."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, running: f64, runnable: f64, wait: Option<(f64, &str)>) -> GroupRow {
        GroupRow {
            name: name.into(),
            process: "srv".into(),
            pattern: name.into(),
            thread_count: 1,
            idle_threads: 0,
            threads: vec![],
            running_pct: running,
            runnable_pct: runnable,
            sleep_pct: 0.0,
            io_pct: wait.map_or(0.0, |w| w.0),
            other_pct: 0.0,
            idle_wait_pct: 0.0,
            work_wait_pct: 0.0,
            event_wait: None,
            loop_blocked: None,
            busy_s: (running + runnable + wait.map_or(0.0, |w| w.0)) / 10.0,
            work_s: (running + runnable + wait.map_or(0.0, |w| w.0)) / 10.0,
            dominant_wait: wait.map(|(share, site)| GroupWait {
                state: "io",
                site: site.into(),
                share_pct: share,
                total_s: share / 10.0,
                p99_ms: Some(0.2),
                woken_by: Some("[interrupt] (97 %)".into()),
                kind: WaitKind::Io,
                holders_mostly: None,
            }),
        }
    }

    fn input<'a>(
        groups: &'a [GroupRow],
        idle: &'a [IdleRow],
        rq: &'a RunQueue,
    ) -> VerdictInput<'a> {
        VerdictInput {
            mode: Mode::Wall,
            threads: groups.len() + idle.iter().map(|i| i.thread_count).sum::<usize>(),
            totals: StateTimes {
                running: 1,
                ..StateTimes::default()
            },
            functions: &[],
            groups,
            idle,
            run_queue: rq,
            machine: None,
            chains: &[],
            goroutines: &[],
        }
    }

    fn rq() -> RunQueue {
        RunQueue {
            preempted_s: 0.0,
            preempted: None,
            after_wakeup_s: 0.0,
            after_wakeup: None,
        }
    }

    #[test]
    fn the_busiest_group_its_wait_and_the_idle_count() {
        let groups = [group(
            "redis-server (main thread)",
            60.0,
            2.0,
            Some((32.0, "fdatasync ← flushAppendOnlyFile")),
        )];
        let idle = [IdleRow {
            process: "redis-server".into(),
            pid: 1,
            state: Some("sleep"),
            site: Some("pthread_cond_wait ← bioProcessBackgroundJobs".into()),
            kind: Some(WaitKind::Condition),
            thread_count: 3,
            threads: vec![],
            sleep_s: 30.0,
            share_pct: 75.0,
        }];
        let rq = rq();
        assert_eq!(
            verdict(&input(&groups, &idle, &rq)),
            "redis-server (main thread) is on the CPU 60 % of the time; 32 % is spent in \
             fdatasync ← flushAppendOnlyFile (io, p99 0.20 ms, woken by [interrupt] (97 %)). \
             3 of 4 threads were idle (≤ 1 % on the CPU, ≤ 1 % in I/O, ≥ 90 % in idle waits) and are \
             listed apart, not ranked."
        );
    }

    #[test]
    fn a_lock_wait_names_the_lock_its_holders_and_the_idle_pool() {
        let mut pool = group(
            "java (pool-*-thread-* pool, 8 threads)",
            3.0,
            1.0,
            Some((75.0, "monitor enter ← Ledger$AuditLog.append")),
        );
        if let Some(w) = pool.dominant_wait.as_mut() {
            w.state = "sleep";
            w.kind = WaitKind::Lock;
            w.woken_by = None;
            w.holders_mostly =
                Some("fsync ← FileDescriptor.sync ← Ledger$AuditLog.append (io, 90 %)".into());
        }
        pool.idle_wait_pct = 15.0;
        let idle = [IdleRow {
            process: "java".into(),
            pid: 1,
            state: Some("sleep"),
            site: Some("LinkedBlockingQueue.take ← ThreadPoolExecutor.getTask".into()),
            kind: Some(WaitKind::Work),
            thread_count: 4,
            threads: vec![],
            sleep_s: 40.0,
            share_pct: 30.0,
        }];
        let rq = rq();
        let groups = [pool];
        let v = verdict(&input(&groups, &idle, &rq));
        assert_eq!(
            v,
            "java (pool-*-thread-* pool, 8 threads) is on the CPU 3 % of the time; 75 % is spent \
             queueing for a lock, monitor enter ← Ledger$AuditLog.append (sleep, p99 0.20 ms); \
             its holders spend the held time mostly in fsync ← FileDescriptor.sync ← \
             Ledger$AuditLog.append (io, 90 %); 15 % waiting for work (idle waits). 4 of 5 \
             threads were idle (≤ 1 % on the CPU, ≤ 1 % in I/O, ≥ 90 % in idle waits), 4 of them a \
             pool waiting for work (LinkedBlockingQueue.take ← ThreadPoolExecutor.getTask) and \
             are listed apart, not ranked."
        );
    }

    #[test]
    fn a_larger_run_queue_share_comes_first_and_says_so() {
        let groups = [group("w (spinner)", 40.0, 55.0, Some((5.0, "fsync ← f")))];
        let rq = rq();
        let v = verdict(&input(&groups, &[], &rq));
        assert!(
            v.starts_with(
                "w (spinner) is on the CPU 40 % of the time; 55 % waiting for a CPU (run-queue \
                 delay p99 - after preemption, - after wakeup): the CPU is the bottleneck; 5 % \
                 is spent in fsync ← f"
            ),
            "{v}"
        );
    }

    /// The JIT compiler still compiling outranks, by its CPU, an event loop that sleeps in its
    /// handler; the verdict leads with the one blocked on something named.
    #[test]
    fn a_group_mostly_waiting_for_work_does_not_lead_a_blocked_one() {
        let compiler = || GroupRow {
            idle_wait_pct: 94.0,
            work_s: 3.6,
            ..group("java (C* CompilerThre pool)", 6.0, 0.0, None)
        };
        let event_loop = GroupRow {
            work_s: 1.2,
            ..group(
                "java (nioEventLoopGro pool)",
                2.0,
                0.0,
                Some((97.0, "Thread.sleep ← QuoteHandler.channelRead0")),
            )
        };
        let groups = [compiler(), event_loop];
        let rq = rq();
        let v = verdict(&input(&groups, &[], &rq));
        assert!(
            v.starts_with("java (nioEventLoopGro pool) is on the CPU 2 %"),
            "{v}"
        );
        assert!(v.contains(" Next: java (C* CompilerThre pool)"), "{v}");
        // With nothing blocked elsewhere, the busiest group leads, mostly idle or not.
        let groups = [compiler(), group("b", 1.0, 0.0, Some((5.0, "read ← r")))];
        let v = verdict(&input(&groups, &[], &rq));
        assert!(v.starts_with("java (C* CompilerThre pool)"), "{v}");
    }

    #[test]
    fn the_next_group_is_named_when_it_is_busy_too() {
        let groups = [
            group("a (x)", 50.0, 0.0, Some((50.0, "fsync ← f"))),
            group("a (y)", 60.0, 0.0, Some((40.0, "nanosleep ← g"))),
            group("a (z)", 2.0, 0.0, None),
        ];
        let rq = rq();
        let v = verdict(&input(&groups, &[], &rq));
        assert!(v.contains(" Next: a (y) is on the CPU 60 %"), "{v}");
        assert!(!v.contains("a (z)"), "{v}");
    }

    #[test]
    fn the_hottest_function_is_not_where_interrupts_come_back_on() {
        let f = |name: &str, self_pct| FunctionRow {
            function: name.into(),
            self_pct,
            total_pct: self_pct,
            self_s: 0.0,
            total_s: 0.0,
        };
        let functions = [
            f("_raw_spin_unlock_irqrestore_[k]", 13.0),
            f("tcp_sendmsg_locked_[k]", 6.0),
        ];
        let groups = [group("nginx", 54.0, 44.0, None)];
        let rq = rq();
        let mut i = input(&groups, &[], &rq);
        i.functions = &functions;
        let v = verdict(&i);
        assert!(
            v.contains("Most CPU time of all threads is in tcp_sendmsg_locked_[k]"),
            "{v}"
        );
        // An entry frame with everything below it and little itself is not named.
        let functions = [f("do_syscall_64_[k]", 2.5)];
        i.functions = &functions;
        assert!(!verdict(&i).contains("Most CPU time"), "{}", verdict(&i));
    }
    #[test]
    fn a_saturated_machine_is_said_first_with_what_used_it() {
        use super::super::model::MachineUser;
        let groups = [group("w (spinner)", 40.0, 30.0, Some((5.0, "fsync ← f")))];
        let rq = rq();
        let user = |name: &str, cpu_pct, processes| MachineUser {
            name: name.into(),
            processes,
            cpu_pct,
            target: name == "w",
        };
        let machine = MachineRow {
            cpus: 2,
            busy_pct: 98.0,
            user_pct: 70.0,
            system_pct: 25.0,
            iowait_pct: 0.0,
            steal_pct: 3.0,
            top: vec![
                user("w", 33.0, 1),
                user("mariadbd", 30.0, 3),
                user("wrk", 24.0, 1),
            ],
            saturated: true,
            target_runnable_pct: 27.0,
        };
        let mut i = input(&groups, &[], &rq);
        i.machine = Some(&machine);
        let v = verdict(&i);
        assert!(
            v.starts_with(
                "The 2 CPUs were 98 % busy (w 33 %, mariadbd 30 % (3 processes), wrk 24 %) and \
                 the profiled threads that work waited for a CPU 27 % of their time: the \
                 machine is CPU-bound. w (spinner) is on the CPU 40 %"
            ),
            "{v}"
        );
        let calm = MachineRow {
            saturated: false,
            top: Vec::new(),
            ..machine
        };
        i.machine = Some(&calm);
        assert!(verdict(&i).starts_with("w (spinner)"));
    }
}
