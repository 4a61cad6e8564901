//! Fold: the time model with named stacks → folded lines
//! `<process>;[<thread>-<tid>;]<user root→leaf>;<kernel root→leaf>[;[off-cpu:<state>]] <count>`.
//! Counts are samples in `--mode cpu` and microseconds otherwise.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use profiler_common::WaitState;

use crate::model::{
    Kind, Mode, Profile, StackNames, named::sanitize, stack_frames, waker_frames, waker_identity,
};

#[derive(Clone, Debug)]
pub struct FoldOptions {
    /// The root frame of a process whose name is not known (a thread of no known process).
    pub process: String,
    /// `<name>-<pid>` as the root frame instead of the name: one tower per process rather
    /// than per program.
    pub per_process: bool,
    pub per_thread: bool,
    /// Threads whose sleep is left out (`--hide-idle`: the idle threads' waits for work).
    pub hide_sleep_of: BTreeSet<u32>,
    /// Threads whose sleep is one frame under their process, by tid: the flame graph's idle
    /// threads, one frame per process and wait (`[idle: 4 threads in …]`) unless
    /// `--show-idle`.
    pub collapse_sleep_of: HashMap<u32, String>,
    /// What each wait in a system call was on as a frame above the blocking call
    /// (`[on /var/lib/app/wal (ext4, vda)]`, `--resources`).
    pub resources: bool,
    /// Idle goroutines' waits (goroutines::Classified::idle): left out (`--hide-idle`), or
    /// one frame per process and site (`[idle goroutines: select ←
    /// net/http.(*persistConn).writeLoop]`, the flame graph's default).
    pub idle_goroutines: IdleGoroutines,
}

/// What the folding does with idle goroutines' waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdleGoroutines {
    /// With their stacks, as any other wait.
    #[default]
    Stacks,
    /// One frame per process and site.
    Collapse,
    /// Left out.
    Hide,
}

impl FoldOptions {
    /// The root frame of process `pid`'s stacks.
    fn root(&self, profile: &Profile, pid: u32) -> String {
        let name = profile
            .processes
            .get(&pid)
            .map(|p| p.name.as_str())
            .filter(|n| !n.is_empty())
            .unwrap_or(&self.process);
        if self.per_process {
            sanitize(&format!("{name}-{pid}"))
        } else {
            sanitize(name)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Samples,
    Micros,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Samples => "samples",
            Unit::Micros => "µs",
        }
    }
}

#[derive(Debug)]
pub struct Folded {
    pub unit: Unit,
    /// Folded stack → count, sorted (inferno wants sorted input).
    pub lines: BTreeMap<String, u64>,
    /// Per frame name: (on-CPU, off-CPU) counts of the lines it appears in, for colouring.
    pub frame_split: HashMap<String, (u64, u64)>,
    /// Sleep left out by `hide_sleep_of`, in nanoseconds, and of how many threads.
    pub hidden_ns: u64,
    pub hidden_threads: usize,
    /// Threads' sleep in the Go scheduler left out where their goroutines' waits are drawn.
    pub go_scheduler_sleep_ns: u64,
}

impl Folded {
    pub fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        for (stack, count) in &self.lines {
            writeln!(out, "{stack} {count}")?;
        }
        Ok(())
    }
}

/// The synthetic leaf frame of an off-CPU stack.
pub fn off_cpu_frame(kind: Kind) -> Option<String> {
    match kind {
        Kind::OnCpu => None,
        Kind::Off(state) => Some(format!("[off-cpu:{}]", state.label())),
    }
}

pub fn fold(profile: &Profile, names: &StackNames, opts: &FoldOptions) -> Folded {
    let unit = if profile.mode == Mode::Cpu {
        Unit::Samples
    } else {
        Unit::Micros
    };
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    let mut frame_split: HashMap<String, (u64, u64)> = HashMap::new();
    let mut frames: Vec<String> = Vec::with_capacity(64);
    let mut hidden_ns = 0;
    let mut hidden: BTreeSet<u32> = BTreeSet::new();
    let mut go_sleep_ns = 0;
    let go_pids: BTreeSet<u32> = profile.goroutines.waits.iter().map(|w| w.pid).collect();
    for entry in &profile.entries {
        let sleep = entry.kind == Kind::Off(WaitState::Sleep);
        // Where a process's goroutine waits are drawn, its threads' sleep in the scheduler
        // is what those waits left them: drawn twice otherwise.
        if sleep
            && go_pids.contains(&entry.pid)
            && go_scheduler_sleep(&stack_frames(entry.user_stack, entry.kernel_stack, names))
        {
            go_sleep_ns += entry.time_ns;
            continue;
        }
        if sleep && opts.hide_sleep_of.contains(&entry.tid) {
            hidden_ns += entry.time_ns;
            hidden.insert(entry.tid);
            continue;
        }
        let count = match unit {
            Unit::Samples => entry.samples,
            Unit::Micros => (entry.time_ns + 500) / 1_000,
        };
        if count == 0 {
            continue;
        }
        if let Some(idle) = opts.collapse_sleep_of.get(&entry.tid).filter(|_| sleep) {
            let line = format!("{};{}", opts.root(profile, entry.pid), sanitize(idle));
            frame_split.entry(idle.clone()).or_default().1 += count;
            *lines.entry(line).or_default() += count;
            continue;
        }
        frames.clear();
        frames.push(opts.root(profile, entry.pid));
        if opts.per_thread {
            let thread = profile
                .threads
                .get(&entry.tid)
                .map(|t| t.name.as_str())
                .unwrap_or("?");
            frames.push(sanitize(&format!("{thread}-{}", entry.tid)));
        }
        frames.extend(stack_frames(entry.user_stack, entry.kernel_stack, names));
        if opts.resources
            && let Some(r) = profile.resources.get(&entry.resource)
        {
            frames.push(sanitize(&format!("[on {}]", r.text)));
        }
        if let Some(leaf) = off_cpu_frame(entry.kind) {
            frames.push(leaf);
        }
        for f in &frames[1..] {
            let split = frame_split.entry(f.clone()).or_default();
            match entry.kind {
                Kind::OnCpu => split.0 += count,
                Kind::Off(_) => split.1 += count,
            }
        }
        *lines.entry(frames.join(";")).or_default() += count;
    }
    if unit == Unit::Micros {
        fold_goroutines(profile, names, opts, &mut lines, &mut frame_split);
    }
    Folded {
        unit,
        lines,
        frame_split,
        hidden_ns,
        hidden_threads: hidden.len(),
        go_scheduler_sleep_ns: go_sleep_ns,
    }
}

/// Goroutine waits under their goroutine stacks: `<process>;[goroutines];<stack root→leaf>;
/// [go: <reason>] µs`. Each goroutine is its own line of time, so a process's goroutine waits
/// can add up to more than its threads' window.
fn fold_goroutines(
    profile: &Profile,
    names: &StackNames,
    opts: &FoldOptions,
    lines: &mut BTreeMap<String, u64>,
    frame_split: &mut HashMap<String, (u64, u64)>,
) {
    for c in crate::goroutines::classified(profile, names) {
        let w = c.wait;
        let count = (w.total_ns + 500) / 1_000;
        if count == 0 {
            continue;
        }
        let mut frames = vec![opts.root(profile, w.pid), "[goroutines]".to_string()];
        match (c.idle, opts.idle_goroutines) {
            (true, IdleGoroutines::Hide) => continue,
            (true, IdleGoroutines::Collapse) => {
                frames.push(sanitize(&format!("[idle goroutines: {}]", c.label)));
            }
            _ => {
                frames.extend(c.frames);
                frames.push(sanitize(&format!("[go: {}]", w.reason)));
            }
        }
        for f in &frames[1..] {
            frame_split.entry(f.clone()).or_default().1 += count;
        }
        *lines.entry(frames.join(";")).or_default() += count;
    }
}

/// An OS thread of a Go process asleep in the runtime's scheduler (no goroutine to run): the
/// time its goroutines' waits stand for, where those are recorded.
pub fn go_scheduler_sleep(frames: &[String]) -> bool {
    frames.iter().any(|f| {
        matches!(
            f.as_str(),
            "runtime.findrunnable" | "runtime.findRunnable" | "runtime.stopm" | "runtime.mPark"
        )
    })
}

/// The wakeup chains: `<process>;[<thread>-<tid>;]<blocked stack root→leaf>;--;<waker
/// stack leaf→root>;<waker>-<tid>` weighted by the blocked time each waker ended, in µs
/// (offwaketime's layout: the two stacks meet at `--`, where the wakeup happened).
pub fn fold_wakers(profile: &Profile, names: &StackNames, opts: &FoldOptions) -> Folded {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for w in &profile.wakers {
        let count = (w.time_ns + 500) / 1_000;
        if count == 0 {
            continue;
        }
        let pid = profile.threads.get(&w.tid).map_or(0, |t| t.pid);
        let mut frames = vec![opts.root(profile, pid)];
        if opts.per_thread {
            let thread = profile.threads.get(&w.tid).map_or("?", |t| t.name.as_str());
            frames.push(sanitize(&format!("{thread}-{}", w.tid)));
        }
        frames.extend(stack_frames(w.user_stack, w.kernel_stack, names));
        frames.push(format!("[off-cpu:{}]", w.state.label()));
        frames.push("--".into());
        let who = waker_identity(w, names);
        let mut waker = waker_frames(w, &who, names);
        waker.reverse();
        frames.extend(waker);
        frames.push(if who.interrupt {
            who.name
        } else {
            sanitize(&format!("{}-{}", who.name, who.tid))
        });
        *lines.entry(frames.join(";")).or_default() += count;
    }
    Folded {
        unit: Unit::Micros,
        lines,
        frame_split: HashMap::new(),
        hidden_ns: 0,
        hidden_threads: 0,
        go_scheduler_sleep_ns: 0,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use profiler_common::WaitState;

    use super::*;

    use profiler_common::stack_id;

    use crate::model::{Entry, Name, ThreadTime, Window};

    fn entry(tid: u32, user: u64, kernel: u64, kind: Kind, samples: u64, time_ns: u64) -> Entry {
        Entry {
            pid: 0,
            tid,
            user_stack: user,
            kernel_stack: kernel,
            kind,
            samples,
            time_ns,
            waits: 0,
            min_ns: 0,
            max_ns: 0,
            resource: 0,
        }
    }

    fn profile(mode: Mode, entries: Vec<Entry>) -> Profile {
        let mut threads = std::collections::BTreeMap::new();
        threads.insert(
            11,
            ThreadTime {
                name: "worker".into(),
                ..ThreadTime::default()
            },
        );
        let window = Window {
            start_ns: 0,
            stop_ns: 1,
        };
        Profile {
            entries,
            threads,
            ..Profile::empty(mode, window, 10_101_010)
        }
    }

    fn names() -> StackNames {
        let n = |v: &[&str]| v.iter().map(|s| Arc::from(*s)).collect::<Vec<Name>>();
        let mut names = StackNames::default();
        names.user.insert(1, n(&["main", "work", "spin"]));
        names.user.insert(2, n(&["main", "nap", "clock_nanosleep"]));
        names.user.insert(3, n(&["main", "LFoo;::bar"]));
        names.kernel.insert(
            9,
            n(&["entry_SYSCALL_64_[k]", "do_nanosleep_[k]", "schedule_[k]"]),
        );
        names
    }

    /// Options with nothing hidden or collapsed.
    fn options(process: &str, per_thread: bool) -> FoldOptions {
        FoldOptions {
            per_process: false,
            process: process.into(),
            per_thread,
            hide_sleep_of: BTreeSet::new(),
            collapse_sleep_of: HashMap::new(),
            resources: false,
            idle_goroutines: IdleGoroutines::Stacks,
        }
    }

    /// A Go process: a handler goroutine waiting on an upstream, an HTTP client connection's
    /// write loop (idle), and an OS thread asleep in the scheduler.
    #[test]
    fn goroutine_waits_are_drawn_under_their_goroutine_stacks_once() {
        use crate::model::{GoroutineWait, Goroutines};
        let wait = |user_stack, reason: &str, total_ns| GoroutineWait {
            pid: 0,
            user_stack,
            reason: reason.into(),
            total_ns,
            ended_ns: total_ns,
            count: 1,
            open: 0,
            min_ns: total_ns,
            max_ns: total_ns,
            hist: Default::default(),
        };
        let mut p = profile(
            Mode::Wall,
            vec![entry(11, 22, 9, Kind::Off(WaitState::Sleep), 0, 3_000_000)],
        );
        p.goroutines = Goroutines {
            processes: Vec::new(),
            waits: vec![wait(20, "select", 2_000_000), wait(21, "select", 5_000_000)],
        };
        let mut names = names();
        let n = |v: &[&str]| v.iter().map(|s| Arc::from(*s)).collect::<Vec<Name>>();
        names.user.insert(
            20,
            n(&[
                "runtime.goexit",
                "net/http.(*conn).serve",
                "main.handle",
                "net/http.(*Client).Get",
                "runtime.selectgo",
                "runtime.gopark",
            ]),
        );
        names.user.insert(
            21,
            n(&[
                "runtime.goexit",
                "net/http.(*persistConn).writeLoop",
                "runtime.selectgo",
                "runtime.gopark",
            ]),
        );
        names.user.insert(
            22,
            n(&["runtime.mstart", "runtime.schedule", "runtime.findrunnable"]),
        );
        let f = fold(&p, &names, &options("api", false));
        assert_eq!(
            f.lines.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "api;[goroutines];runtime.goexit;net/http.(*conn).serve;main.handle;net/http.(*Client).Get;runtime.selectgo;runtime.gopark;[go: select]",
                "api;[goroutines];runtime.goexit;net/http.(*persistConn).writeLoop;runtime.selectgo;runtime.gopark;[go: select]",
            ]
        );
        assert_eq!(f.go_scheduler_sleep_ns, 3_000_000);
        let collapsed = FoldOptions {
            idle_goroutines: IdleGoroutines::Collapse,
            ..options("api", false)
        };
        let f = fold(&p, &names, &collapsed);
        assert_eq!(
            f.lines.get(
                "api;[goroutines];[idle goroutines: select ← net/http.(*persistConn).writeLoop]"
            ),
            Some(&5_000)
        );
        let hidden = FoldOptions {
            idle_goroutines: IdleGoroutines::Hide,
            ..options("api", false)
        };
        assert_eq!(fold(&p, &names, &hidden).lines.len(), 1);
    }

    #[test]
    fn cpu_lines_are_root_to_leaf_with_sample_counts() {
        let p = profile(Mode::Cpu, vec![entry(11, 1, 0, Kind::OnCpu, 42, 420)]);
        let f = fold(&p, &names(), &options("app", false));
        assert_eq!(f.unit, Unit::Samples);
        assert_eq!(
            f.lines.into_iter().collect::<Vec<_>>(),
            vec![("app;main;work;spin".into(), 42)]
        );
    }

    #[test]
    fn off_cpu_lines_end_in_exactly_one_state_frame_and_count_microseconds() {
        let p = profile(
            Mode::Wall,
            vec![
                entry(11, 2, 9, Kind::Off(WaitState::Sleep), 0, 2_000_400),
                entry(11, 2, 9, Kind::Off(WaitState::RunqueueWoken), 0, 1_499),
                entry(11, 1, 0, Kind::OnCpu, 3, 30_000_000),
            ],
        );
        let f = fold(&p, &names(), &options("app", true));
        let lines: Vec<(String, u64)> = f.lines.into_iter().collect();
        assert_eq!(
            lines,
            vec![
                ("app;worker-11;main;nap;clock_nanosleep;entry_SYSCALL_64_[k];do_nanosleep_[k];schedule_[k];[off-cpu:runqueue]".into(), 1),
                ("app;worker-11;main;nap;clock_nanosleep;entry_SYSCALL_64_[k];do_nanosleep_[k];schedule_[k];[off-cpu:sleep]".into(), 2000),
                ("app;worker-11;main;work;spin".into(), 30_000),
            ]
        );
        assert_eq!(f.frame_split["main"], (30_000, 2001));
    }

    #[test]
    fn reserved_stack_ids_say_what_happened() {
        let p = profile(
            Mode::Wall,
            vec![
                entry(11, stack_id::LOST_TABLE_FULL, 0, Kind::OnCpu, 1, 1_000),
                entry(11, stack_id::UNSAMPLED, 0, Kind::OnCpu, 0, 2_000),
                entry(11, 3, stack_id::LOST_FETCH, Kind::OnCpu, 1, 3_000),
            ],
        );
        let f = fold(&p, &names(), &options("a;b", false));
        let keys: Vec<&str> = f.lines.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            vec![
                "a:b;[on-cpu: between samples]",
                "a:b;[user stack lost: stack table full]",
                "a:b;main;LFoo:::bar;[kernel stack unavailable]",
            ]
        );
    }

    #[test]
    fn hidden_threads_lose_their_sleep_only() {
        let p = profile(
            Mode::Wall,
            vec![
                entry(11, 2, 9, Kind::Off(WaitState::Sleep), 0, 2_000_000),
                entry(11, 2, 9, Kind::Off(WaitState::RunqueueWoken), 0, 3_000),
                entry(11, 1, 0, Kind::OnCpu, 1, 4_000),
                entry(12, 2, 9, Kind::Off(WaitState::Sleep), 0, 5_000),
            ],
        );
        let f = fold(
            &p,
            &names(),
            &FoldOptions {
                hide_sleep_of: [11].into_iter().collect(),
                ..options("app", false)
            },
        );
        assert_eq!((f.hidden_ns, f.hidden_threads), (2_000_000, 1));
        let total: u64 = f.lines.values().sum();
        assert_eq!(total, 3 + 4 + 5, "{:?}", f.lines);
    }

    #[test]
    fn idle_threads_sleep_is_one_frame_under_their_process_their_other_time_kept() {
        let p = profile(
            Mode::Wall,
            vec![
                entry(11, 2, 9, Kind::Off(WaitState::Sleep), 0, 2_000_000),
                entry(11, 1, 0, Kind::OnCpu, 1, 4_000),
                entry(12, 2, 9, Kind::Off(WaitState::Sleep), 0, 5_000),
            ],
        );
        let idle = "[idle: 2 threads in pthread_cond_wait ← park]".to_string();
        let f = fold(
            &p,
            &names(),
            &FoldOptions {
                collapse_sleep_of: [(11, idle.clone()), (12, idle.clone())].into(),
                ..options("app", true)
            },
        );
        assert_eq!(f.lines[&format!("app;{idle}")], 2_000 + 5);
        assert!(f.lines.keys().any(|l| l.starts_with("app;worker-11;")));
        assert_eq!(f.lines.len(), 2, "{:?}", f.lines);
    }
}
