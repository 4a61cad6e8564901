//! Goroutines: the Go runtime's parks of a Go target, as the uprobes measured them, → waits
//! per process, stack and reason (`collect`, beside `account`), and, once stacks are named,
//! → goroutine groups as a Go engineer reads them (`groups`): goroutines by the function they
//! were started with (the frame under `runtime.goexit`), each group's time on the CPU (the
//! on-CPU samples whose goroutine stack starts there) and its waits by site, labelled like
//! `select ← net/http.(*Client).Get ← main.fetchPrice`, and split into work and idle.
//!
//! Idle, not ranked: the runtime's own goroutines (GC workers, the sweeper, timers, the
//! finalizer), an accept loop, a server connection waiting for its client's next request,
//! an HTTP client connection's read and write loops (the request's own goroutine waits for
//! the reply), and a goroutine waiting on a channel in the function it was started with (a
//! worker or pipeline stage waiting for its next item: the work is elsewhere).
//!
//! A goroutine wait lasts from the park to the scheduler running the goroutine again, so it
//! includes its time in the Go run queue after it was readied. Waits that began before the
//! window are not seen (nothing parks then); those still parked at its end count up to it.

use std::collections::{BTreeMap, HashMap};

use crate::model::{
    GoroutineWait, Goroutines, Hist, Kind, Profile, RawGoroutines, StackNames, Window, stack_frames,
};

pub fn collect(raw: RawGoroutines, window: Window) -> Goroutines {
    let reasons: HashMap<u32, &[String]> = raw
        .processes
        .iter()
        .map(|p| (p.pid, p.reasons.as_slice()))
        .collect();
    let reason = |pid: u32, r: u32| reason_name(reasons.get(&pid).copied().unwrap_or(&[]), r);
    let mut waits: BTreeMap<(u32, u64, u32), GoroutineWait> = BTreeMap::new();
    fn slot<'a>(
        waits: &'a mut BTreeMap<(u32, u64, u32), GoroutineWait>,
        reason: &dyn Fn(u32, u32) -> String,
        (pid, stack, r): (u32, u64, u32),
    ) -> &'a mut GoroutineWait {
        waits
            .entry((pid, stack, r))
            .or_insert_with(|| GoroutineWait {
                pid,
                user_stack: stack,
                reason: reason(pid, r),
                total_ns: 0,
                ended_ns: 0,
                count: 0,
                open: 0,
                min_ns: u64::MAX,
                max_ns: 0,
                hist: Default::default(),
            })
    }
    for (k, v) in &raw.waits {
        let w = slot(&mut waits, &reason, (k.tgid, k.user_stack, k.reason));
        w.total_ns += v.total_ns;
        w.ended_ns += v.total_ns;
        w.count += v.count;
        w.min_ns = w.min_ns.min(v.min_ns);
        w.max_ns = w.max_ns.max(v.max_ns);
        for (a, b) in w.hist.buckets.iter_mut().zip(v.hist.buckets.iter()) {
            *a += b;
        }
    }
    for (_, p) in &raw.parked {
        if p.ts_ns >= window.stop_ns {
            continue;
        }
        let w = slot(&mut waits, &reason, (p.tgid, p.user_stack, p.reason));
        if p.end_ns == 0 || p.end_ns > window.stop_ns {
            w.total_ns += window.stop_ns - p.ts_ns.max(window.start_ns);
            w.open += 1;
        } else {
            let ns = p.end_ns.saturating_sub(p.ts_ns);
            w.total_ns += ns;
            w.ended_ns += ns;
            w.count += 1;
            w.min_ns = w.min_ns.min(ns);
            w.max_ns = w.max_ns.max(ns);
            if let Some(b) = w.hist.buckets.get_mut(profiler_common::hist_bucket(ns)) {
                *b += 1;
            }
        }
    }
    Goroutines {
        processes: raw.processes,
        waits: waits.into_values().collect(),
    }
}

/// The runtime's name of wait reason `r` (`wait reason N` where the binary names none).
pub fn reason_name(names: &[String], r: u32) -> String {
    names
        .get(r as usize)
        .filter(|n| !n.is_empty())
        .cloned()
        .unwrap_or_else(|| format!("wait reason {r}"))
}

/// A goroutine wait's label in process `pid` (the report's, the trace's slices).
pub fn wait_label(profile: &Profile, names: &StackNames, pid: u32, stack: u64, r: u32) -> String {
    let reasons = profile
        .goroutines
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .map_or(&[][..], |p| p.reasons.as_slice());
    let frames = stack_frames(stack, profiler_common::stack_id::EMPTY, names);
    label(&frames, &reason_name(reasons, r))
}

/// One site of a goroutine group: its waits with one label.
#[derive(Clone)]
pub struct GoSite {
    /// `select ← net/http.(*Client).Get ← main.fetchPrice`.
    pub label: String,
    /// What it waits for, in words (`a reply over HTTP`, `a lock`, `a channel` …).
    pub meaning: &'static str,
    pub reason: String,
    pub idle: bool,
    pub time_ns: u64,
    /// Ended waits' count, min, max, histogram; `open` those still parked at the end.
    pub hist: Hist,
    pub open: u64,
    /// The whole stack of its largest wait, root first.
    pub stack: Vec<String>,
}

/// Goroutines of one process started with one function.
#[derive(Clone)]
pub struct GoGroup {
    pub pid: u32,
    /// The function the goroutines were started with (`net/http.(*conn).serve`).
    pub entry: String,
    /// The application's outermost function in their waits and samples (`main.handleOrder`),
    /// when other than `entry`.
    pub app: Option<String>,
    pub on_cpu_ns: u64,
    /// Waits that are work (not idle), and idle ones.
    pub wait_ns: u64,
    pub idle_ns: u64,
    /// By time, largest first.
    pub sites: Vec<GoSite>,
}

impl GoGroup {
    /// Its time with work: on the CPU or in waits that are not idle.
    pub fn work_ns(&self) -> u64 {
        self.on_cpu_ns + self.wait_ns
    }

    /// `goroutines under main.handleOrder (net/http.(*conn).serve)`.
    pub fn subject(&self) -> String {
        match &self.app {
            Some(app) => format!("goroutines under {app} ({})", self.entry),
            None => format!("goroutines under {}", self.entry),
        }
    }
}

/// A goroutine wait with what the stages after it read of it.
pub struct Classified<'a> {
    pub wait: &'a GoroutineWait,
    /// Its stack, root first.
    pub frames: Vec<String>,
    /// Its group: the function its goroutine was started with.
    pub entry: String,
    pub idle: bool,
    pub label: String,
}

/// An on-CPU sample's time in a goroutine stack: (pid, time, frames root first).
type GoroutineCpu = (u32, u64, Vec<String>);

/// Each goroutine wait classified, and the on-CPU samples of goroutine stacks in the Go
/// processes.
fn classify<'a>(
    profile: &'a Profile,
    names: &StackNames,
) -> (Vec<Classified<'a>>, Vec<GoroutineCpu>, Entries) {
    let go = &profile.goroutines;
    let go_pids: std::collections::HashSet<u32> = go.waits.iter().map(|w| w.pid).collect();
    let wait_frames: Vec<Vec<String>> = go
        .waits
        .iter()
        .map(|w| stack_frames(w.user_stack, profiler_common::stack_id::EMPTY, names))
        .collect();
    let cpu: Vec<GoroutineCpu> = profile
        .entries
        .iter()
        .filter(|e| e.kind == Kind::OnCpu && go_pids.contains(&e.pid))
        .map(|e| {
            let f = stack_frames(e.user_stack, profiler_common::stack_id::EMPTY, names);
            (e.pid, e.time_ns, f)
        })
        // Only goroutine stacks: the runtime's own (the scheduler on g0, a signal) start
        // elsewhere.
        .filter(|(_, _, f)| f.first().map(String::as_str) == Some("runtime.goexit"))
        .collect();
    let entries = Entries::of(
        go.waits
            .iter()
            .zip(&wait_frames)
            .map(|(w, f)| (w.pid, f.as_slice()))
            .chain(cpu.iter().map(|(pid, _, f)| (*pid, f.as_slice()))),
    );
    let waits = go
        .waits
        .iter()
        .zip(wait_frames)
        .map(|(wait, frames)| {
            let entry = entries.entry(wait.pid, &frames);
            // A channel wait in the function the goroutine started with, or in the closure
            // that a `go f(x)` statement wraps `f` in.
            let idle = is_idle(&frames, &entry, &wait.reason)
                || is_idle(&frames, &entry_of(&frames), &wait.reason);
            let label = label(&frames, &wait.reason);
            Classified {
                wait,
                frames,
                entry,
                idle,
                label,
            }
        })
        .collect();
    (waits, cpu, entries)
}

/// Each goroutine wait classified (the flame graph's idle goroutines).
pub fn classified<'a>(profile: &'a Profile, names: &StackNames) -> Vec<Classified<'a>> {
    classify(profile, names).0
}

/// The goroutine groups of every Go process with goroutine waits, busiest first (work, then
/// idle time).
pub fn groups(profile: &Profile, names: &StackNames) -> Vec<GoGroup> {
    if profile.goroutines.waits.is_empty() {
        return Vec::new();
    }
    let (waits, cpu, entries) = classify(profile, names);
    let mut groups: BTreeMap<(u32, String), GoGroup> = BTreeMap::new();
    let mut apps: HashMap<(u32, String), HashMap<String, u64>> = HashMap::new();
    let mut sites: HashMap<(u32, String, String), GoSite> = HashMap::new();
    for c in waits {
        let Classified {
            wait: w,
            frames,
            entry,
            idle,
            label,
        } = c;
        let group = groups
            .entry((w.pid, entry.clone()))
            .or_insert_with(|| new_group(w.pid, &entry));
        if idle {
            group.idle_ns += w.total_ns;
        } else {
            group.wait_ns += w.total_ns;
            if let Some(app) = outermost_app(&frames) {
                *apps
                    .entry((w.pid, entry.clone()))
                    .or_default()
                    .entry(app)
                    .or_default() += w.total_ns;
            }
        }
        let site = sites
            .entry((w.pid, entry.clone(), label.clone()))
            .or_insert_with(|| GoSite {
                meaning: meaning(&frames, &w.reason),
                label,
                reason: w.reason.clone(),
                idle,
                time_ns: 0,
                hist: Hist::default(),
                open: 0,
                stack: Vec::new(),
            });
        let largest = site.stack.is_empty() || w.total_ns > site.time_ns / 2;
        site.time_ns += w.total_ns;
        site.open += w.open;
        site.hist.add_waits(w.count, w.ended_ns, w.min_ns, w.max_ns);
        site.hist.add_buckets(&w.hist);
        if largest {
            site.stack = frames;
        }
    }
    for (pid, time_ns, frames) in &cpu {
        let entry = entries.entry(*pid, frames);
        if let Some(group) = groups.get_mut(&(*pid, entry.clone())) {
            group.on_cpu_ns += time_ns;
            if let Some(app) = outermost_app(frames) {
                *apps
                    .entry((*pid, entry))
                    .or_default()
                    .entry(app)
                    .or_default() += time_ns;
            }
        }
    }
    for ((pid, entry, _), site) in sites {
        if let Some(g) = groups.get_mut(&(pid, entry)) {
            g.sites.push(site);
        }
    }
    let mut out: Vec<GoGroup> = groups
        .into_iter()
        .map(|(key, mut g)| {
            g.sites
                .sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then(a.label.cmp(&b.label)));
            g.app = apps
                .get(&key)
                .and_then(|a| a.iter().max_by_key(|(name, t)| (**t, name.as_str())))
                .map(|(name, _)| name.clone())
                .filter(|a| *a != g.entry);
            g
        })
        .collect();
    out.sort_by(|a, b| {
        (b.work_ns(), b.idle_ns)
            .cmp(&(a.work_ns(), a.idle_ns))
            .then(a.entry.cmp(&b.entry))
    });
    out
}

fn new_group(pid: u32, entry: &str) -> GoGroup {
    GoGroup {
        pid,
        entry: entry.to_string(),
        app: None,
        on_cpu_ns: 0,
        wait_ns: 0,
        idle_ns: 0,
        sites: Vec::new(),
    }
}

/// The function a goroutine was started with: the frame above `runtime.goexit` (root
/// first), else the outermost frame (a stack cut short).
pub fn entry_of(frames: &[String]) -> String {
    match frames {
        [first, second, ..] if first == "runtime.goexit" => second.clone(),
        [first, ..] => first.clone(),
        [] => "?".into(),
    }
}

/// The frame inside the entry (`go f(x)`'s target under its wrapper).
fn inner_of(frames: &[String]) -> Option<&String> {
    match frames {
        [first, _, third, ..] if first == "runtime.goexit" => Some(third),
        _ => None,
    }
}

/// `main.pipeline.func1`: a closure (`go f(x)` compiles to one that calls `f`).
fn is_closure(frame: &str) -> bool {
    frame
        .rsplit_once(".func")
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
}

/// Entry functions per process, a `go f(x)` statement's wrapper closure replaced by `f`: a
/// closure whose every stack continues in one function is that wrapper (an anonymous
/// goroutine's own loop calls on into different functions, and stays the entry).
struct Entries {
    unwrapped: HashMap<(u32, String), String>,
}

impl<'a> Entries {
    fn of(stacks: impl Iterator<Item = (u32, &'a [String])>) -> Self {
        let mut inner: HashMap<(u32, String), Option<String>> = HashMap::new();
        let mut mixed: std::collections::HashSet<(u32, String)> = Default::default();
        for (pid, frames) in stacks {
            let entry = entry_of(frames);
            if !is_closure(&entry) {
                continue;
            }
            let next = inner_of(frames).cloned();
            match inner.entry((pid, entry)) {
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(next);
                }
                std::collections::hash_map::Entry::Occupied(o) => {
                    if *o.get() != next {
                        mixed.insert(o.key().clone());
                    }
                }
            }
        }
        let unwrapped = inner
            .into_iter()
            .filter(|(k, _)| !mixed.contains(k))
            .filter_map(|(k, next)| Some((k, next?)))
            .collect();
        Self { unwrapped }
    }

    fn entry(&self, pid: u32, frames: &[String]) -> String {
        let entry = entry_of(frames);
        self.unwrapped
            .get(&(pid, entry))
            .cloned()
            .unwrap_or_else(|| entry_of(frames))
    }
}

/// The package path of a Go function name: `net/http.(*conn).serve` → `net/http`.
fn package(frame: &str) -> &str {
    let last_slash = frame.rfind('/').map_or(0, |i| i + 1);
    match frame[last_slash..].find('.') {
        Some(dot) => &frame[..last_slash + dot],
        None => frame,
    }
}

/// The runtime's own frames: never a label's library call.
fn is_runtime(frame: &str) -> bool {
    let p = package(frame);
    p == "runtime" || p.starts_with("runtime/") || p.starts_with("internal/") || {
        // `sync.runtime_SemacquireMutex`, `internal/poll.runtime_pollWait`: linknamed
        // runtime functions under another package's name.
        frame.contains(".runtime_")
    }
}

/// The application's code: package `main`, or a module path (its first element has a dot,
/// as `github.com/…`); the standard library's packages have none.
fn is_app(frame: &str) -> bool {
    let p = package(frame);
    // The compiler's own: `type..hash.…`, `go.itab.…`, `go:…`.
    if frame.starts_with('[') || frame.starts_with("type.") || frame.starts_with("go.") {
        return false;
    }
    p == "main" || p.split('/').next().is_some_and(|first| first.contains('.'))
}

/// The outermost application frame (root first): the handler or worker the time is for.
fn outermost_app(frames: &[String]) -> Option<String> {
    frames
        .iter()
        .enumerate()
        // Not a `go f(x)` statement's wrapper closure, under `runtime.goexit`.
        .find(|(i, f)| is_app(f) && !(*i == 1 && is_closure(f)))
        .map(|(_, f)| f.clone())
}

/// `reason ← library call ← application frame`: the innermost application frame (leaf
/// side) and the standard-library call it made (unless the runtime's: the reason says it);
/// without application frames, the innermost frame outside the runtime.
fn label(frames: &[String], reason: &str) -> String {
    let leaf_first: Vec<&String> = frames.iter().rev().collect();
    let mut parts = vec![reason.to_string()];
    match leaf_first.iter().position(|f| is_app(f)) {
        Some(i) => {
            // The library call: the outermost non-runtime frame between the park and the
            // application frame (`net/http.(*Client).Get`, not its inner `send`).
            if let Some(call) = leaf_first[..i].iter().rev().find(|f| !is_runtime(f)) {
                parts.push(call.to_string());
            }
            parts.push(leaf_first[i].to_string());
        }
        None => {
            // The innermost frame outside the runtime and its caller: `sync.(*Cond).Wait ←
            // net/http.(*connReader).abortPendingRead`.
            let mut outside = leaf_first
                .iter()
                .filter(|f| !is_runtime(f) && !is_closure(f));
            parts.extend(outside.by_ref().take(2).map(|f| f.to_string()));
        }
    }
    parts.join(" ← ")
}

/// A wait is idle (see the module's comment).
fn is_idle(frames: &[String], entry: &str, reason: &str) -> bool {
    const IDLE_FRAMES: &[&str] = &[
        // Accept loops.
        "net.(*netFD).accept",
        "net.(*TCPListener).Accept",
        "net.(*UnixListener).Accept",
        // A server connection waiting for its client's next request.
        "net/http.(*conn).readRequest",
        "net/http.(*connReader).backgroundRead",
        // An HTTP client connection's plumbing: the request's goroutine waits for the reply.
        "net/http.(*persistConn).readLoop",
        "net/http.(*persistConn).writeLoop",
        // os/signal's loop.
        "os/signal.signal_recv",
    ];
    if is_runtime(entry) || frames.iter().any(|f| IDLE_FRAMES.contains(&f.as_str())) {
        return true;
    }
    // A channel wait in the function the goroutine started with: its next item.
    let channel = matches!(
        reason,
        "chan receive" | "select" | "chan receive (nil chan)"
    ) || reason.starts_with("select");
    channel && innermost_non_runtime(frames) == Some(entry)
}

fn innermost_non_runtime(frames: &[String]) -> Option<&str> {
    frames
        .iter()
        .rev()
        .find(|f| !is_runtime(f))
        .map(String::as_str)
}

/// What the wait is for, in words: by the library call where it tells (an HTTP client, a
/// database driver, a lock), else by the runtime's reason.
fn meaning(frames: &[String], reason: &str) -> &'static str {
    let has = |s: &str| frames.iter().any(|f| f.contains(s));
    if has("net/http.(*Client).") || has("net/http.(*Transport).roundTrip") {
        return "a reply over HTTP";
    }
    if has("database/sql.") {
        return "the database";
    }
    if has("sync.(*Mutex).") || has("sync.(*RWMutex).") {
        return "a lock";
    }
    if has("sync.(*WaitGroup).Wait") {
        return "other goroutines to finish";
    }
    if has("sync.(*Cond).Wait") {
        return "a condition";
    }
    match reason {
        "IO wait" => "the network",
        "sleep" => "a timer (a sleep)",
        "chan receive" | "chan send" | "chan receive (nil chan)" | "chan send (nil chan)" => {
            "a channel"
        }
        r if r.starts_with("select") => "a select",
        r if r.starts_with("sync.") || r.starts_with("semacquire") => "a lock",
        r if r.starts_with("GC") || r.starts_with("garbage collection") => "the GC",
        _ => "the runtime",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(s: &[&str]) -> Vec<String> {
        s.iter().map(|f| f.to_string()).collect()
    }

    #[test]
    fn labels_name_the_library_call_and_the_application_frame() {
        let http = frames(&[
            "runtime.goexit",
            "net/http.(*conn).serve",
            "net/http.serverHandler.ServeHTTP",
            "main.handle",
            "main.fetchPrice",
            "net/http.(*Client).Get",
            "net/http.(*Client).do",
            "net/http.(*persistConn).roundTrip",
            "runtime.selectgo",
            "runtime.gopark",
        ]);
        assert_eq!(
            label(&http, "select"),
            "select ← net/http.(*Client).Get ← main.fetchPrice"
        );
        assert_eq!(meaning(&http, "select"), "a reply over HTTP");
        assert_eq!(entry_of(&http), "net/http.(*conn).serve");
        assert_eq!(outermost_app(&http).as_deref(), Some("main.handle"));
        assert!(!is_idle(&http, "net/http.(*conn).serve", "select"));

        let mutex = frames(&[
            "runtime.goexit",
            "main.worker",
            "sync.(*Mutex).Lock",
            "sync.(*Mutex).lockSlow",
            "sync.runtime_SemacquireMutex",
            "runtime.semacquire1",
            "runtime.gopark",
        ]);
        assert_eq!(
            label(&mutex, "semacquire"),
            "semacquire ← sync.(*Mutex).Lock ← main.worker"
        );
        assert_eq!(meaning(&mutex, "semacquire"), "a lock");
        assert!(!is_idle(&mutex, "main.worker", "semacquire"));
    }

    #[test]
    fn next_items_accepts_and_the_runtime_are_idle() {
        let stage = frames(&[
            "runtime.goexit",
            "main.stage",
            "runtime.chanrecv2",
            "runtime.chanrecv",
            "runtime.gopark",
        ]);
        assert!(is_idle(&stage, "main.stage", "chan receive"));
        assert_eq!(label(&stage, "chan receive"), "chan receive ← main.stage");
        let accept = frames(&[
            "runtime.main",
            "main.main",
            "net/http.(*Server).Serve",
            "net.(*TCPListener).Accept",
            "net.(*netFD).accept",
            "internal/poll.(*FD).Accept",
            "internal/poll.runtime_pollWait",
            "runtime.netpollblock",
            "runtime.gopark",
        ]);
        assert!(is_idle(&accept, "runtime.main", "IO wait"));
        let gc = frames(&["runtime.goexit", "runtime.gcBgMarkWorker", "runtime.gopark"]);
        assert!(is_idle(&gc, "runtime.gcBgMarkWorker", "GC worker (idle)"));
        // A channel wait deeper in the goroutine's work is not its next item.
        let fan_in = frames(&[
            "runtime.goexit",
            "main.handle",
            "main.gather",
            "runtime.chanrecv1",
            "runtime.gopark",
        ]);
        assert!(!is_idle(&fan_in, "main.handle", "chan receive"));
    }

    #[test]
    fn packages() {
        assert_eq!(package("net/http.(*conn).serve"), "net/http");
        assert_eq!(package("github.com/x/y.F"), "github.com/x/y");
        assert_eq!(package("main.main"), "main");
        assert!(is_app("github.com/x/y.F"));
        assert!(!is_app("net/http.(*conn).serve"));
        assert!(is_runtime("internal/poll.runtime_pollWait"));
        assert!(is_runtime("sync.runtime_SemacquireMutex"));
        assert!(!is_runtime("sync.(*Mutex).Lock"));
    }
}
