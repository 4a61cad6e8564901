//! End-to-end, privileged: a JIT runtime. Stacks must cross from the JVM's own C++ frames
//! (unwound from `.eh_frame`) into interpreted and compiled Java frames and end in the right
//! Java method, on and off the CPU: on a stock JVM (frames and names from the JVM's own
//! structures) and on one run with `-XX:+PreserveFramePointer` whose perf map is written by
//! hand (`jcmd <pid> Compiler.perfmap`).

mod common;

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

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
fn java_stacks_reach_thread_start_through_jit_and_interpreter_frames() {
    java_stacks(Jvm::FramePointersAndPerfMap);
}

/// A stock JVM: no flags that help a profiler, no perf map, no agent. Compiled frames unwind
/// by their code blob's frame size, interpreted frames by the interpreter's rbp chain and are
/// named by their `Method*`, JIT code by the code cache — all read from the JVM's vmStructs.
#[test]
fn a_stock_jvm_has_whole_named_java_stacks() {
    java_stacks(Jvm::Stock);
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Jvm {
    FramePointersAndPerfMap,
    Stock,
}

fn java_stacks(kind: Jvm) {
    require_root();
    let _serial = serial();
    assert!(
        Path::new("/usr/bin/javac").exists(),
        "javac not found: `cargo xtask test` installs openjdk-17-jdk-headless when run as root"
    );
    let dir = scratch_dir().join(format!("jit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the Java build directory");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/JitWork.java");
    let status = Command::new("javac")
        .arg("-d")
        .arg(&dir)
        .arg(&source)
        .status()
        .expect("run javac");
    assert!(status.success(), "javac failed on {}", source.display());

    let mut java = Command::new("java");
    if kind == Jvm::FramePointersAndPerfMap {
        java.arg("-XX:+PreserveFramePointer");
    }
    let mut child = java
        .args([
            "-XX:CompileCommand=quiet",
            // Keep leaf() and middle() as frames of their own.
            "-XX:CompileCommand=dontinline,JitWork::*",
            "-cp",
        ])
        .arg(&dir)
        .arg("JitWork")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start java");
    let stdout = child.stdout.take().expect("piped stdout");
    let jvm = Workload { child };
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the JVM's ready line");
    assert_eq!(line.trim(), "ready");
    let pid = jvm.pid().to_string();
    let _map = PerfMap(format!("/tmp/perf-{pid}.map"));

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
    let lines = read_folded(&out.folded);
    let threads = per_thread(&lines);

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
    assert!(
        on as f64 > 0.5 * WINDOW_US,
        "spinner: only {on} µs on the CPU; µs per state: {:?}",
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
    if kind == Jvm::Stock {
        let named: u64 = spinner
            .iter()
            .filter(|l| {
                l.state().is_none()
                    && has_chain_containing(l, &["JitWork.spin", "JitWork.middle", "JitWork.leaf"])
            })
            .map(|l| l.count)
            .sum();
        assert!(
            named as f64 >= 0.9 * on as f64,
            "spinner: {named} of {on} µs on the CPU under spin → middle → leaf: {:#?}",
            top(&spinner)
        );
    }

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
    if kind == Jvm::Stock {
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
        assert!(
            named as f64 >= 0.9 * sleep as f64,
            "sleeper: {named} of {sleep} µs asleep under sleepLoop → nap → Thread.sleep: {:#?}",
            top(&sleeper)
        );
    }
    for name in ["spinner", "sleeper"] {
        let us = *threads
            .get(name)
            .unwrap_or_else(|| panic!("no lines for thread {name}: {threads:?}"));
        assert_close(&format!("on+off of {name}"), us as f64, WINDOW_US, 0.03);
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
