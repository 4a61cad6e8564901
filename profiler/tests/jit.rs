//! End-to-end, privileged: a JIT runtime. Stacks must cross from the JVM's own C++ frames
//! (unwound from `.eh_frame`) into interpreted and compiled Java frames and end in the right
//! Java method, on and off the CPU: on a stock JVM (frames and names from the JVM's own
//! structures) and on one run with `-XX:+PreserveFramePointer` whose perf map is written by
//! hand (`jcmd <pid> Compiler.perfmap`).

mod common;

use std::{process::Command, time::Duration};

use common::*;

const SECS: u64 = 4;
const WINDOW_US: f64 = SECS as f64 * 1e6;

/// Consecutive frames contain `chain`'s parts, one each: each frame the caller of the next.
/// (Java and C++ frames carry signatures: `void JitWork.leaf()`.)
fn has_chain_containing(line: &Line, chain: &[&str]) -> bool {
    !chain.is_empty()
        && line
            .frames
            .windows(chain.len())
            .any(|w| w.iter().zip(chain).all(|(f, c)| f.contains(c)))
}

/// Frames containing `wanted`'s parts appear in this order, with anything between them.
fn has_with_gaps_containing(line: &Line, wanted: &[&str]) -> bool {
    let mut frames = line.frames.iter();
    wanted.iter().all(|w| frames.any(|f| f.contains(w)))
}

/// Time per state of `lines`, for failure messages.
fn states<'a>(lines: &[&'a Line]) -> std::collections::BTreeMap<&'a str, u64> {
    let mut out = std::collections::BTreeMap::new();
    for l in lines {
        *out.entry(l.state().unwrap_or("on-cpu")).or_default() += l.count;
    }
    out
}

/// A JVM's perf map is named after its pid; removed when the test ends.
struct PerfMap(String);

impl Drop for PerfMap {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// With frame pointers kept in compiled code and the JVM's own perf map written by hand
/// during the window: what worked before the JVM's structures were read (and must go on
/// working).
#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn java_stacks_reach_thread_start_through_jit_and_interpreter_frames() {
    java_stacks(Jvm::FramePointersAndPerfMap);
}

/// A stock JVM: no flags that help a profiler, no perf map, no agent. Compiled frames unwind
/// by their code blob's frame size, interpreted frames by the interpreter's rbp chain and are
/// named by their `Method*`, JIT code by the code cache — all read from the JVM's vmStructs.
#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_stock_jvm_has_whole_named_java_stacks() {
    java_stacks(Jvm::Stock);
}

/// The same stock JVM with every method interpreted (`-Xint`): the interpreter's frames only.
#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_stock_jvm_interpreting_everything_has_whole_named_java_stacks() {
    java_stacks(Jvm::Interpreted);
}

/// The same stock JVM compiling with C1 only (`-XX:TieredStopAtLevel=1`, as a JVM tuned for
/// start-up runs): C1's frames, stubs and the interpreter.
#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_stock_jvm_with_c1_only_has_whole_named_java_stacks() {
    java_stacks(Jvm::C1Only);
}

/// A JVM the profiler launches (`-- java …`): libjvm.so is loaded after the exec, so the JVM
/// is found from the kernel's mapping records or the exec's re-read of its mappings, not from
/// a periodic re-read of every process's maps. Its Java frames are named like an attached
/// JVM's once found: most of the spinner's time on the CPU under spin → middle → leaf.
#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_jvm_the_profiler_launches_has_named_java_stacks() {
    require_root();
    let _serial = serial();
    // The window (5 s) ends before the JVM does (8 s). The spinner runs from ~0.3 s after the
    // exec; the first code-cache read comes within a tick of the JVM mapping libjvm.so.
    launched_jit_work_is_named("jit-launched", 5, 8, 2e6);
}

/// A JVM run under the profiler to its end (a build's `javac`, a batch job): its interpreted
/// and inlined methods are named while it runs, from the stacks drained at each tick, not
/// after the window, when there is no process left to read them from. Measured on
/// 2026-12-04 (AMD EPYC, 2 vCPUs): 0 % of the spinner's on-CPU time named under spin →
/// middle → leaf before that (names read after the window only).
#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_jvm_that_exits_inside_the_window_keeps_its_java_names() {
    require_root();
    let _serial = serial();
    launched_jit_work_is_named("jit-exits", 30, 4, 1.5e6);
}

/// The same for a JVM the profiler attaches to by PID: the Java main thread, asleep in
/// `JitWork.main → Thread.sleep` since before the window, is seen only by the start snapshot;
/// that stack's methods are named at the first tick. Measured on 2026-12-04 (AMD EPYC, 2
/// vCPUs), `JitWork 5` attached at 1.5 s: 19 % of all the capture's time under an `[unmapped]`
/// frame before (that sleep among it), 0.01 % after (the exit's own new frames).
#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_jvm_attached_by_pid_that_exits_inside_the_window_keeps_its_java_names() {
    require_root();
    let _serial = serial();
    let dir = javac(None, "JitWork");
    let out = outputs("jit-attached-exits");
    let jvm = Workload {
        child: Command::new("/usr/bin/java")
            .args(["-XX:CompileCommand=quiet", "-cp"])
            .arg(&dir)
            .args(["JitWork", "5"])
            .spawn()
            .expect("start java"),
    };
    std::thread::sleep(Duration::from_millis(1500));
    let pid = jvm.child.id().to_string();
    let result = profile(&[
        "--pid",
        &pid,
        "--secs",
        "30",
        "--per-thread",
        "--folded",
        out.folded.to_str().unwrap(),
        "-o",
        out.svg.to_str().unwrap(),
    ]);
    assert_success(&result);
    let lines = read_folded(&out.folded);
    let total: u64 = lines.iter().map(|l| l.count).sum();
    let unmapped: u64 = lines
        .iter()
        .filter(|l| l.frames.iter().any(|f| f == "[unmapped]"))
        .map(|l| l.count)
        .sum();
    let main_asleep: u64 = lines
        .iter()
        .filter(|l| has_chain_containing(l, &["JitWork.main", "java.lang.Thread.sleep"]))
        .map(|l| l.count)
        .sum();
    eprintln!(
        "attached JVM exiting: {:.2} % under [unmapped], main asleep {:.1} s",
        100.0 * unmapped as f64 / total.max(1) as f64,
        main_asleep as f64 / 1e6
    );
    assert!(main_asleep > 2_000_000, "main asleep: {main_asleep} µs");
    assert!(
        (unmapped as f64) < 0.02 * total as f64,
        "{unmapped} of {total} µs under [unmapped]"
    );
}

/// `profiler --secs <secs> -- java … JitWork <exit_after>`: the spinner was on the CPU more
/// than `min_on_us`, at least 70 % of it under spin → middle → leaf.
fn launched_jit_work_is_named(name: &str, secs: u32, exit_after: u32, min_on_us: f64) {
    let dir = javac(None, "JitWork");
    let out = outputs(name);
    // Debian's alternatives link (`cargo xtask test` installs openjdk-17-jdk-headless).
    let java = "/usr/bin/java";
    let (secs, exit_after) = (secs.to_string(), exit_after.to_string());
    let result = profile(&[
        "--secs",
        &secs,
        "--per-thread",
        "--folded",
        out.folded.to_str().unwrap(),
        "-o",
        out.svg.to_str().unwrap(),
        "--",
        java,
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=dontinline,JitWork::*",
        "-cp",
        dir.to_str().unwrap(),
        "JitWork",
        &exit_after,
    ]);
    assert_success(&result);
    let lines = read_folded(&out.folded);
    let spinner: Vec<&Line> = lines.iter().filter(|l| l.thread() == "spinner").collect();
    let on: u64 = spinner
        .iter()
        .filter(|l| l.state().is_none())
        .map(|l| l.count)
        .sum();
    let named = on_cpu_under_spin(&spinner);
    eprintln!(
        "{name}: spinner {:.1} s on the CPU, {:.1} % under spin → middle → leaf",
        on as f64 / 1e6,
        100.0 * named as f64 / on.max(1) as f64
    );
    assert!(on as f64 > min_on_us, "spinner: only {on} µs on the CPU");
    assert!(
        named as f64 >= 0.7 * on as f64,
        "spinner: {named} of {on} µs on the CPU under spin → middle → leaf: {:#?}",
        top(&spinner)
    );
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Jvm {
    FramePointersAndPerfMap,
    Stock,
    Interpreted,
    C1Only,
}

impl Jvm {
    /// Frames and names from the JVM's own structures, no help from the JVM.
    fn stock(self) -> bool {
        self != Jvm::FramePointersAndPerfMap
    }
}

fn java_stacks(kind: Jvm) {
    require_root();
    let _serial = serial();
    let lines = capture_jit_work(kind);
    check_spinner(kind, &lines);
    check_sleeper(kind, &lines);
    let threads = per_thread(&lines);
    for name in ["spinner", "sleeper"] {
        let us = *threads
            .get(name)
            .unwrap_or_else(|| panic!("no lines for thread {name}: {threads:?}"));
        assert_close(&format!("on+off of {name}"), us as f64, WINDOW_US, 0.03);
    }
}

/// JitWork on a JVM of `kind`, warmed up, captured: its folded lines.
fn capture_jit_work(kind: Jvm) -> Vec<Line> {
    let dir = javac(None, "JitWork");
    let mut args = vec![
        "-XX:CompileCommand=quiet",
        // Keep leaf() and middle() as frames of their own.
        "-XX:CompileCommand=dontinline,JitWork::*",
    ];
    match kind {
        Jvm::FramePointersAndPerfMap => args.push("-XX:+PreserveFramePointer"),
        Jvm::Stock => {}
        Jvm::Interpreted => args.push("-Xint"),
        Jvm::C1Only => args.push("-XX:TieredStopAtLevel=1"),
    }
    let (jvm, ready) = start_java(None, &args, &dir, "JitWork");
    assert_eq!(ready, "ready");
    let pid = jvm.pid().to_string();
    let _map = PerfMap(format!("/tmp/perf-{pid}.map"));

    // Warmed up as a service is: nap(), called 50 times a second, is compiled after its
    // 200th call (C1's invocation threshold, ~4 s after start). Compiled during the window,
    // its frame would unwind by frame pointers until the next read of the code cache (up to
    // 0.2 s; its interpreted caller, sleepLoop, missing from those stacks: README, Java).
    std::thread::sleep(Duration::from_secs(3));
    let out = outputs(&format!("jit-{kind:?}"));
    let secs = SECS.to_string();
    let capturing = Capturing::start(&capture_args(&pid, &secs, &out));
    // The map is written inside the window, so methods the JIT compiled or moved up to now
    // are in it when the profiler symbolizes at the end.
    std::thread::sleep(Duration::from_secs(1));
    if kind == Jvm::FramePointersAndPerfMap {
        let jcmd = Command::new("jcmd")
            .args([&pid, "Compiler.perfmap"])
            .output()
            .expect("run jcmd");
        assert!(
            jcmd.status.success(),
            "jcmd Compiler.perfmap failed: {}",
            String::from_utf8_lossy(&jcmd.stderr)
        );
    }
    let result = capturing.finish();
    assert_success(&result);
    read_folded(&out.folded)
}

/// The spinner: on the CPU in leaf() called by middle(), below the JVM's thread start.
fn check_spinner(kind: Jvm, lines: &[Line]) {
    // Between the thread's start and the Java code lie the JVM's own start-up frames
    // (thread_native_entry … JavaCalls::call_virtual), then the call stub and interpreted
    // frames (the thread's run(), spin(), sleepLoop(), nap()), which the perf map names only
    // `Interpreter`: gaps there are expected. A compiled method and its callee are adjacent.
    let spinner: Vec<&Line> = lines.iter().filter(|l| l.thread() == "spinner").collect();
    let on: u64 = spinner
        .iter()
        .filter(|l| l.state().is_none())
        .map(|l| l.count)
        .sum();
    // Time the hypervisor stole while the spinner held the CPU is its own frame, not
    // on-CPU time (a third of the window at times on this host's VM).
    let stolen: u64 = spinner
        .iter()
        .filter(|l| l.has(STEAL))
        .map(|l| l.count)
        .sum();
    assert!(
        (on + stolen) as f64 > 0.5 * WINDOW_US,
        "spinner: only {on} µs on the CPU and {stolen} µs stolen; µs per state: {:?}",
        states(&spinner)
    );
    // The spinner: on the CPU in leaf() called by middle(), below the JVM's thread start.
    let whole: u64 = spinner
        .iter()
        .filter(|l| {
            l.state().is_none()
                && has_with_gaps_containing(
                    l,
                    &["start_thread", "JavaCalls::call_helper", "JitWork.middle"],
                )
                && has_chain_containing(l, &["JitWork.middle", "JitWork.leaf"])
        })
        .map(|l| l.count)
        .sum();
    assert!(
        whole as f64 >= 0.95 * on as f64,
        "spinner: {whole} of {on} µs on the CPU under start_thread → … → middle → leaf"
    );
    // Read from the JVM itself, every Java frame has its name: spin() (interpreted, or
    // compiled on stack replacement) is the caller of middle().
    if kind.stock() {
        let named = on_cpu_under_spin(&spinner);
        eprintln!(
            "{kind:?}: spinner {:.1} % of its on-CPU time under spin → middle → leaf",
            100.0 * named as f64 / on as f64
        );
        assert!(
            named as f64 >= 0.95 * on as f64,
            "spinner: {named} of {on} µs on the CPU under spin → middle → leaf: {:#?}",
            top(&spinner)
        );
    }
}

/// The spinner's µs on the CPU under spin → middle → leaf, every Java frame named.
fn on_cpu_under_spin(spinner: &[&Line]) -> u64 {
    spinner
        .iter()
        .filter(|l| {
            l.state().is_none()
                && has_chain_containing(l, &["JitWork.spin", "JitWork.middle", "JitWork.leaf"])
        })
        .map(|l| l.count)
        .sum()
}

/// The sleeper: asleep in Thread.sleep, below the JVM's thread start.
fn check_sleeper(kind: Jvm, lines: &[Line]) {
    // The sleeper: asleep nearly all the time (20 ms at a stretch; what is not sleep is the
    // run queue after each wakeup, a few % here, more when other work loads the CPUs) ...
    let sleeper: Vec<&Line> = lines.iter().filter(|l| l.thread() == "sleeper").collect();
    let sleep: u64 = sleeper
        .iter()
        .filter(|l| l.state() == Some("sleep"))
        .map(|l| l.count)
        .sum();
    assert!(
        sleep as f64 > 0.7 * WINDOW_US,
        "sleeper: only {sleep} µs asleep of a {WINDOW_US} µs window; µs per state: {:?}",
        states(&sleeper)
    );
    // ... in Thread.sleep, a native method calling into the JVM, below the thread's start.
    let under: u64 = sleeper
        .iter()
        .filter(|l| {
            l.state() == Some("sleep")
                && has_with_gaps_containing(
                    l,
                    &[
                        "start_thread",
                        "JavaCalls::call_helper",
                        "java.lang.Thread.sleep",
                    ],
                )
                && has_chain_containing(l, &["java.lang.Thread.sleep", "JVM_Sleep"])
        })
        .map(|l| l.count)
        .sum();
    assert!(
        under as f64 >= 0.95 * sleep as f64,
        "sleeper: {under} of {sleep} µs asleep under start_thread → … → Thread.sleep → JVM_Sleep"
    );
    // sleepLoop() and nap() run interpreted (called 50 times a second, too few for the JIT):
    // named by the method in their interpreter frame.
    if kind.stock() {
        let named: u64 = sleeper
            .iter()
            .filter(|l| {
                l.state() == Some("sleep")
                    && has_chain_containing(
                        l,
                        &["JitWork.sleepLoop", "JitWork.nap", "java.lang.Thread.sleep"],
                    )
            })
            .map(|l| l.count)
            .sum();
        eprintln!(
            "{kind:?}: sleeper {:.1} % of its sleep under sleepLoop → nap → Thread.sleep",
            100.0 * named as f64 / sleep as f64
        );
        assert!(
            named as f64 >= 0.95 * sleep as f64,
            "sleeper: {named} of {sleep} µs asleep under sleepLoop → nap → Thread.sleep: {:#?}",
            top(&sleeper)
        );
    }
}

/// The heaviest lines, for failure messages.
fn top(lines: &[&Line]) -> Vec<(u64, String)> {
    let mut v: Vec<(u64, String)> = lines
        .iter()
        .map(|l| (l.count, l.frames.join(";")))
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.0));
    v.truncate(4);
    v
}

/// A Java service under load, as users run it: the JDK's HTTP server with a pool of 8
/// workers on a stock JVM, driven by wrk. The pool threads' time — on the CPU in compiled
/// handler code, runtime stubs and the JVM's own C++, off it in locks and the pool's queue —
/// must be whole stacks (reaching the thread's start) and the handler's frames named.
#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_java_service_under_load_has_whole_stacks() {
    require_root();
    let _serial = serial();
    let lines = capture_service_under_load();
    let pool: Vec<&Line> = lines
        .iter()
        .filter(|l| l.thread().starts_with("pool-1-thread-"))
        .collect();
    let (on_us, whole, handler) = check_pool_on_cpu(&pool);
    let (off_us, off_whole) = check_pool_off_cpu(&pool);
    // The measure: of all the pool threads' time with a stack, on and off the CPU.
    let all_whole = (whole + off_whole) as f64 / (on_us + off_us) as f64;
    assert!(
        all_whole >= 0.9,
        "pool threads: {:.1} % of their time reaches start_thread",
        100.0 * all_whole
    );
    eprintln!(
        "pool threads: on the CPU {on_us} µs with a stack, {:.1} % whole, {:.1} % under the handler; off it {off_us} µs, {:.1} % whole",
        100.0 * whole as f64 / on_us as f64,
        100.0 * handler as f64 / on_us as f64,
        100.0 * off_whole as f64 / off_us.max(1) as f64
    );
}

/// JavaService under wrk's load, warm, captured for 4 s: its folded lines.
fn capture_service_under_load() -> Vec<Line> {
    let dir = javac(None, "JavaService");
    // Inlining decides which frames exist at all (C2 may fold handle() into the HTTP
    // server's filter chain): keep the handler's own methods frames of their own.
    let (jvm, line) = start_java(
        None,
        &[
            "-XX:CompileCommand=quiet",
            "-XX:CompileCommand=dontinline,JavaService::*",
        ],
        &dir,
        "JavaService",
    );
    let port = ready_port(&line);
    let mut wrk = start_wrk(1, 16, 14, &format!("http://127.0.0.1:{port}/item"));
    // The JIT compiles the request path in the first seconds of load; code compiled since the
    // last read of the code cache (0.2 s) unwinds by frame pointers until the next one, so
    // during that warm-up 3–9 % of the pool's CPU time has partial stacks (C2 still compiles
    // the request path 4 s into the load; 100 % whole once warm). A service is profiled warm:
    // so is this one.
    std::thread::sleep(Duration::from_secs(8));
    let pid = jvm.pid().to_string();
    let out = outputs("jit-service");
    let result = profile(&capture_args(&pid, "4", &out));
    let _ = wrk.wait();
    assert_success(&result);
    read_folded(&out.folded)
}

/// Lines' time, in µs.
fn time_of<'a, 'b: 'a>(lines: impl Iterator<Item = &'a &'b Line>) -> u64 {
    lines.map(|l| l.count).sum()
}

/// The pool threads on the CPU: whole stacks, the handler's frames named and chained. Their
/// time with a stack, of it whole, of it under the handler (µs).
fn check_pool_on_cpu(pool: &[&Line]) -> (u64, u64, u64) {
    // Time with a stack: on the CPU between samples, switching in and the profiler's own
    // overhead have none.
    let stacked = |l: &&&Line| {
        !l.frames
            .iter()
            .any(|f| f.starts_with("[on-cpu") || f == "[profiler overhead]")
    };
    let on: Vec<&Line> = pool
        .iter()
        .copied()
        .filter(|l| l.state().is_none())
        .filter(|l| stacked(&l))
        .collect();
    let on_us = time_of(on.iter());
    assert!(
        on_us > 100_000,
        "pool threads: only {on_us} µs on the CPU with a stack: {:#?}",
        top(pool)
    );
    let whole = time_of(
        on.iter()
            .filter(|l| l.frames.iter().any(|f| f == "start_thread")),
    );
    // Whole for 92–100 % of it over repeated runs (8 s into the load): what is left is code
    // C2 compiled since the last read of the code cache, and StubRoutines stubs that build no
    // rbp frame; `--unwind fp` on this JVM reaches start_thread for 44 %.
    assert!(
        whole as f64 >= 0.85 * on_us as f64,
        "pool threads: {whole} of {on_us} µs on the CPU reach start_thread: {:#?}",
        top(&on
            .iter()
            .copied()
            .filter(|l| !l.frames.iter().any(|f| f == "start_thread"))
            .collect::<Vec<_>>())
    );
    let handler = time_of(on.iter().filter(|l| {
        has_with_gaps_containing(
            l,
            &[
                "start_thread",
                "ThreadPoolExecutor.runWorker",
                "JavaService.handle",
                "JavaService.render",
            ],
        )
    }));
    // How much of it is the handler's own work depends on the machine (wrk, the JDK's HTTP
    // plumbing and the kernel's network stack take most; 23–37 % seen here): what matters is
    // that compiled handler frames are there, named and chained.
    assert!(
        handler as f64 >= 0.1 * on_us as f64,
        "pool threads: {handler} of {on_us} µs on the CPU under runWorker → handle → render: {:#?}",
        top(&on)
    );
    (on_us, whole, handler)
}

/// The pool threads off the CPU: whole stacks. Their time, of it whole (µs).
fn check_pool_off_cpu(pool: &[&Line]) -> (u64, u64) {
    let off: Vec<&Line> = pool
        .iter()
        .copied()
        .filter(|l| l.state().is_some())
        .collect();
    let off_us = time_of(off.iter());
    let off_whole = time_of(
        off.iter()
            .filter(|l| l.frames.iter().any(|f| f == "start_thread")),
    );
    assert!(
        off_whole as f64 >= 0.99 * off_us as f64,
        "pool threads: {off_whole} of {off_us} µs off the CPU reach start_thread: {:#?}",
        top(&off
            .iter()
            .copied()
            .filter(|l| !l.frames.iter().any(|f| f == "start_thread"))
            .collect::<Vec<_>>())
    );
    (off_us, off_whole)
}
