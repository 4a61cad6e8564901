//! A large synthetic capture for the HTML page's size tests: a JVM-like service of 100
//! threads over 20 s (deep Java stacks with long names, request workers waiting on a
//! downstream, client workers waiting 1–4 ms thousands of times, idle pools, runtime threads),
//! about 200 000 timeline waits and 4 000 samples — the shape of the Tomcat capture whose page
//! was 15.8 MB. Deterministic: its own small generator, no clock, no randomness of the host.

use std::collections::BTreeMap;

use profiler_common::WaitState;

use crate::model::{
    Entry, Kind, Mode, Profile, SavedCapture, StackNames, StateTimes, ThreadLine, ThreadTime,
    TimedSample, TimedWait, Timeline, Window,
};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const START: u64 = 7_000 * MS;
const WINDOW: u64 = 20_000 * MS;
const PERIOD: u64 = 10_101_010;

/// xorshift64*: the same numbers on every host.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// In `[lo, hi)`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

/// Java-like frames: a shared root part (thread start, pool, framework) then an application
/// part that differs per stack.
fn user_stacks(rng: &mut Rng, names: &mut StackNames) -> Vec<u64> {
    let root: Vec<String> = [
        "java/lang/Thread.run",
        "org/apache/tomcat/util/threads/TaskThread$WrappingRunnable.run",
        "java/util/concurrent/ThreadPoolExecutor$Worker.run",
        "java/util/concurrent/ThreadPoolExecutor.runWorker",
        "org/apache/tomcat/util/net/SocketProcessorBase.run",
        "org/apache/tomcat/util/net/NioEndpoint$SocketProcessor.doRun",
        "org/apache/coyote/AbstractProtocol$ConnectionHandler.process",
        "org/apache/coyote/AbstractProcessorLight.process",
        "org/apache/coyote/http11/Http11Processor.service",
        "org/apache/catalina/connector/CoyoteAdapter.service",
        "org/apache/catalina/core/StandardEngineValve.invoke",
        "org/apache/catalina/core/StandardHostValve.invoke",
        "org/apache/catalina/core/StandardContextValve.invoke",
        "org/apache/catalina/core/StandardWrapperValve.invoke",
        "org/apache/catalina/core/ApplicationFilterChain.doFilter",
        "org/apache/catalina/core/ApplicationFilterChain.internalDoFilter",
        "org/springframework/web/servlet/FrameworkServlet.service",
        "org/springframework/web/servlet/DispatcherServlet.doDispatch",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Call sites of a Spring service: each stack is a path down a tree of 25 to 50
    // application frames, up to three ways at a level, so stacks share their upper parts as
    // a real service's do.
    let ids: Vec<u64> = (1..=200).collect();
    for &id in &ids {
        let mut frames: Vec<_> = root[..rng.range(8, root.len() as u64) as usize].to_vec();
        let mut node = 0u64;
        for depth in 0..rng.range(25, 50) {
            node = (node * 4 + rng.range(0, 4) % (1 + depth % 3)) % 1_000_003;
            frames.push(format!(
                "com/example/shop/module{}/OrderService{}$$SpringCGLIB$$0.handle{}",
                depth,
                node % 29,
                node % 13
            ));
        }
        let frames = frames.into_iter().map(Into::into).collect();
        names.user.insert(id, frames);
    }
    ids
}

fn kernel_stacks(names: &mut StackNames) -> Vec<u64> {
    let base = [
        "entry_SYSCALL_64_after_hwframe_[k]",
        "do_syscall_64_[k]",
        "__x64_sys_futex_[k]",
        "do_futex_[k]",
        "futex_wait_[k]",
        "futex_wait_queue_[k]",
        "schedule_[k]",
    ];
    (0..20u64)
        .map(|i| {
            let id = 1_000_000 + i;
            let mut frames: Vec<crate::model::Name> = base.iter().map(|&f| f.into()).collect();
            frames.insert(4, format!("futex_variant_{i}_[k]").into());
            names.kernel.insert(id, frames);
            id
        })
        .collect()
}

/// One thread's kind: its name, the waits it makes and how long it runs between them.
struct Kind3 {
    name: &'static str,
    count: u32,
    wait_us: (u64, u64),
    run_us: (u64, u64),
}

const KINDS: [Kind3; 4] = [
    Kind3 {
        name: "http-nio-8080-exec",
        count: 40,
        wait_us: (40_000, 80_000),
        run_us: (500, 2_500),
    },
    Kind3 {
        name: "HttpClient-1-Worker",
        count: 30,
        wait_us: (1_000, 4_000),
        run_us: (20, 200),
    },
    Kind3 {
        name: "pool-2-thread",
        count: 20,
        wait_us: (2_000_000, 5_000_000),
        run_us: (10, 50),
    },
    Kind3 {
        name: "C2 CompilerThread",
        count: 10,
        wait_us: (5_000, 200_000),
        run_us: (1_000, 20_000),
    },
];

/// The large capture, with its timeline.
pub fn capture() -> SavedCapture {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut names = StackNames::default();
    let user = user_stacks(&mut rng, &mut names);
    let kernel = kernel_stacks(&mut names);
    let window = Window {
        start_ns: START,
        stop_ns: START + WINDOW,
    };
    let mut profile = Profile::empty(Mode::Wall, window, PERIOD);
    let mut timeline = Timeline {
        resolution_ns: MS,
        ..Timeline::default()
    };
    let mut tid = 7_000;
    for kind in &KINDS {
        // Each thread of a kind waits in a few stacks of its own share of them.
        let share = &user[rng.range(0, 140) as usize..][..60];
        for i in 0..kind.count {
            tid += 1;
            let line = thread_line(&mut rng, kind, share, &kernel);
            add_thread(&mut profile, tid, format!("{}-{i}", kind.name), &line);
            timeline.threads.insert(tid, line);
        }
    }
    timeline.samples = samples(&mut rng, &timeline, &user);
    SavedCapture::of_app(profile, names, Some(timeline))
}

fn thread_line(rng: &mut Rng, kind: &Kind3, share: &[u64], kernel: &[u64]) -> ThreadLine {
    let mut at = START + rng.range(0, 50 * MS);
    let (mut cpu, mut waits) = (0, Vec::new());
    let stacks: Vec<(u64, u64)> = (0..8)
        .map(|_| {
            let user = share[rng.range(0, share.len() as u64) as usize];
            (user, kernel[user as usize % 3 + rng.range(0, 2) as usize])
        })
        .collect();
    loop {
        let run = rng.range(kind.run_us.0, kind.run_us.1) * US;
        let blocked = rng.range(kind.wait_us.0, kind.wait_us.1) * US;
        let runnable = rng.range(0, 300) * US;
        if at + run + blocked + runnable > START + WINDOW {
            break;
        }
        cpu += run;
        let stack = stacks[rng.range(0, stacks.len() as u64) as usize];
        let state = match rng.range(0, 20) {
            0 => WaitState::RunqueuePreempted,
            1 => WaitState::Io,
            _ => WaitState::Sleep,
        };
        waits.push(TimedWait {
            start_ns: at + run,
            blocked_ns: if state == WaitState::RunqueuePreempted {
                0
            } else {
                blocked
            },
            runnable_ns: runnable,
            state,
            user_stack: stack.0,
            kernel_stack: stack.1,
            waker_tid: 0,
            cpu_before_ns: cpu,
            waking_ns: 0,
            resource: 0,
        });
        at += run + blocked + runnable;
    }
    ThreadLine {
        from_ns: START,
        to_ns: START + WINDOW,
        cpu_ns: cpu + (START + WINDOW - at),
        waits,
    }
}

/// The thread's time by state and its report entries (one per stack and state), from its
/// line.
fn add_thread(profile: &mut Profile, tid: u32, name: String, line: &ThreadLine) {
    let mut time = StateTimes {
        running: line.cpu_ns,
        ..StateTimes::default()
    };
    let mut entries: BTreeMap<(u64, u64, u8), Entry> = BTreeMap::new();
    for w in &line.waits {
        time.runnable += w.runnable_ns;
        match w.state {
            WaitState::Io => time.io += w.blocked_ns,
            WaitState::Sleep => time.sleep += w.blocked_ns,
            _ => {}
        }
        let state = if w.runqueue() {
            WaitState::RunqueuePreempted
        } else {
            w.state
        };
        let ns = w.blocked_ns.max(w.runnable_ns);
        entries
            .entry((w.user_stack, w.kernel_stack, state as u8))
            .or_insert_with(|| Entry::new(1, tid, w.user_stack, w.kernel_stack, Kind::Off(state)))
            .finished(ns);
        if let Some(e) = entries.get_mut(&(w.user_stack, w.kernel_stack, state as u8)) {
            e.time_ns += ns;
        }
    }
    let mut cpu = Entry::new(1, tid, 0, 0, Kind::OnCpu);
    cpu.time_ns = line.cpu_ns;
    profile.entries.extend(entries.into_values());
    profile.entries.push(cpu);
    profile.threads.insert(
        tid,
        ThreadTime {
            pid: 1,
            name,
            time,
            on_cpu_exact: true,
            ..ThreadTime::default()
        },
    );
}

/// On-CPU samples at 99 Hz on 2 CPUs, each on a random thread.
fn samples(rng: &mut Rng, timeline: &Timeline, user: &[u64]) -> Vec<TimedSample> {
    let tids: Vec<u32> = timeline.threads.keys().copied().collect();
    let mut out = Vec::new();
    let mut at = START;
    while at < START + WINDOW {
        for _ in 0..2 {
            out.push(TimedSample {
                tid: tids[rng.range(0, tids.len() as u64) as usize],
                ts_ns: at + rng.range(0, 100) * US,
                user_stack: user[rng.range(0, user.len() as u64) as usize],
                kernel_stack: 0,
            });
        }
        at += PERIOD;
    }
    out.sort_by_key(|s| s.ts_ns);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{
        RenderOptions, html, packed::tests::unpack, render, timeline_data, timeline_html,
    };

    /// The most a page of this capture may weigh: what a ticket or a write-up takes.
    const PAGE_BUDGET: usize = 3_000_000;

    /// The page of the large capture, as `--report x.html` writes it. The report is built
    /// without the timeline's `when` sentences (a few words per site, but minutes of a debug
    /// build over 232 000 waits); the timeline section is the page's own.
    /// The page, and the flame graph's SVG.
    fn page(saved: &SavedCapture) -> (String, String) {
        let timeline = saved.timeline.as_ref().expect("a timeline");
        let mut without = capture();
        without.timeline = None;
        let rendered = render(&without, &RenderOptions::default()).expect("render");
        let section = timeline_html::section(&saved.profile, &saved.names, timeline);
        let mut page = Vec::new();
        html::write_html(
            &html::HtmlInput {
                report: &rendered.report,
                title: &rendered.title,
                subtitle: &rendered.subtitle,
                flame_graph: &rendered.svg,
                timeline: Some(&section),
            },
            &mut page,
        )
        .expect("write the page");
        (String::from_utf8(page).expect("UTF-8"), rendered.svg)
    }

    #[test]
    fn a_100_thread_20_s_capture_makes_a_page_to_attach_that_carries_every_event() {
        let saved = capture();
        let timeline = saved.timeline.as_ref().expect("a timeline");
        let waits: usize = timeline.threads.values().map(|l| l.waits.len()).sum();
        assert!(
            waits > 200_000 && timeline.samples.len() > 3_900 && timeline.threads.len() == 100,
            "the capture is as large as meant: {waits} waits, {} samples",
            timeline.samples.len()
        );
        let (page, svg) = page(&saved);
        // Its JSON timeline made this page 22 MB (18.3 MB of it the events' JSON).
        assert!(
            page.len() <= PAGE_BUDGET,
            "the page is {} bytes, over {PAGE_BUDGET}",
            page.len()
        );
        let columns = timeline_data::tests::from_bytes(&unpack(&page, "tl-data"));
        timeline_data::tests::assert_same_events(&columns, &saved.profile, &saved.names, timeline);
        // The flame graph is inferno's, whole.
        let doc = String::from_utf8(unpack(&page, "flamegraph-doc")).expect("UTF-8");
        let svg = &svg[svg.find("<svg").expect("an SVG")..];
        assert!(doc.contains(svg), "the frame's document holds the SVG");
    }
}
