//! End-to-end, privileged: a Java service read the way a Java engineer reads it (issue 24).
//! A stock JVM's HTTP server (tests/fixtures/LockService.java) whose 8 workers queue on one
//! lock around a write and an fsync, driven by wrk, next to a pool with nothing to do. The
//! verdict must name the lock by its Java method (`monitor enter ← LockService$Journal.record`
//! for `synchronized`, `lock ← …recordLocked` for a ReentrantLock), say what its holders do
//! while holding it (fsync), call the spare pool idle, and name none of the JVM's own C++;
//! the monitor's waits must lie under the synchronized method's frame, inlined or not.

mod common;

use std::time::Duration;

use common::*;

/// Frame names of the JVM's own machinery that a Java engineer's verdict must not show.
const JVM_INTERNALS: &[&str] = &[
    "::",
    "ObjectMonitor",
    "PlatformEvent",
    "Parker",
    "_complete_monitor_locking",
    "futex",
    "pthread_",
    "Unsafe.park",
    "AbstractQueuedSynchronizer",
];

struct Captured {
    verdict: String,
    report: serde_json::Value,
    lines: Vec<Line>,
    svg: String,
}

/// The service under load with `lock` (`monitor` or `reentrant`), captured 4 s once warm.
fn capture_service(lock: &str) -> Captured {
    require_root();
    let _serial = serial();
    let dir = javac(None, "LockService");
    let journal = scratch_dir().join(format!("journal-{lock}-{}.log", std::process::id()));
    let journal_arg = format!("-Djournal={}", journal.display());
    let lock_arg = format!("-Dlock={lock}");
    let (jvm, line) = start_java(
        None,
        &[journal_arg.as_str(), lock_arg.as_str()],
        &dir,
        "LockService",
    );
    let port = ready_port(&line);
    let mut wrk = start_wrk(2, 32, 16, &format!("http://127.0.0.1:{port}/order"));
    // Warm, as a service is profiled: the JIT has compiled (and inlined) the request path.
    std::thread::sleep(Duration::from_secs(8));
    let pid = jvm.pid().to_string();
    let out = outputs(&format!("java-waits-{lock}"));
    let report_path = scratch_dir().join(format!("java-waits-{lock}.json"));
    let mut args = capture_args(&pid, "4", &out);
    args.extend(["--report", report_path.to_str().unwrap()]);
    let result = profile(&args);
    let _ = wrk.wait();
    let _ = std::fs::remove_file(&journal);
    assert_success(&result);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report_path).expect("read the JSON report"))
            .expect("the report is JSON");
    validate_against_schema(&report);
    let verdict = report["verdict"].as_str().expect("a verdict").to_string();
    eprintln!("{lock}: verdict: {verdict}");
    Captured {
        verdict,
        report,
        lines: read_folded(&out.folded),
        svg: std::fs::read_to_string(&out.svg).expect("read the SVG"),
    }
}

/// What every variant must show: the lock by its method, its holders' fsync, the spare pool
/// idle, no JVM internals in the verdict.
fn assert_read_as_java(c: &Captured, label: &str) {
    assert!(
        c.verdict.contains(&format!("queueing for a lock, {label}")),
        "the verdict does not name the lock `{label}`: {}",
        c.verdict
    );
    assert!(
        c.verdict
            .contains("its holders spend the held time mostly in fsync ← FileDescriptor.sync"),
        "the verdict does not name the holders' fsync: {}",
        c.verdict
    );
    for internal in JVM_INTERNALS {
        assert!(
            !c.verdict.contains(internal),
            "the verdict names the JVM's `{internal}`: {}",
            c.verdict
        );
    }
    let sites = c.report["top_blocking_sites"].as_array().expect("sites");
    let lock = sites
        .iter()
        .find(|s| s["site"].as_str().is_some_and(|l| l.starts_with(label)))
        .unwrap_or_else(|| panic!("no site `{label}`: {sites:#?}"));
    assert_eq!(lock["kind"], "lock", "{lock:#?}");
    let held = &lock["holders"]["held"][0];
    assert!(
        held["what"]
            .as_str()
            .is_some_and(|w| w.starts_with("fsync ← FileDescriptor.sync")),
        "the holders' largest use of the lock is not the fsync: {:#?}",
        lock["holders"]
    );
    // The spare pool: idle, waiting for work, said so.
    let idle = c.report["idle_threads"].as_array().expect("idle threads");
    let spare = idle
        .iter()
        .find(|i| {
            i["threads"].as_array().is_some_and(|t| {
                t.iter()
                    .all(|n| n.as_str().is_some_and(|n| n.starts_with("spare-")))
            })
        })
        .unwrap_or_else(|| panic!("the spare pool is not idle: {idle:#?}"));
    assert_eq!(
        (spare["thread_count"].as_u64(), &spare["kind"]),
        (Some(4), &serde_json::json!("work"))
    );
    assert!(
        c.verdict.contains("4 of them a pool waiting for work"),
        "the verdict does not call the spare pool idle: {}",
        c.verdict
    );
    // In the flame graph the spare pool's sleep is one frame (the folded stacks keep it all).
    assert!(
        c.svg
            .contains("[idle: 4 threads in LinkedBlockingQueue.take ← ThreadPoolExecutor.getTask]"),
        "no idle frame for the spare pool in the SVG"
    );
}

/// The workers' time blocked in the monitor (its C++ slow path), and of it the time under
/// `frame` (the synchronized method, `_[i]` when inlined).
fn monitor_wait_under(lines: &[Line], frame: &str) -> (u64, u64, bool) {
    let waits: Vec<&Line> = lines
        .iter()
        .filter(|l| l.thread().starts_with("pool-1-thread-") && l.state().is_some())
        .filter(|l| {
            l.frames
                .iter()
                .any(|f| f.starts_with("ObjectMonitor::enter"))
        })
        .collect();
    let total = waits.iter().map(|l| l.count).sum();
    let own = |f: &String| f == frame || f.strip_suffix("_[i]") == Some(frame);
    let under = waits
        .iter()
        .filter(|l| l.frames.iter().any(own))
        .map(|l| l.count)
        .sum();
    let inlined = waits
        .iter()
        .any(|l| l.frames.iter().any(|f| f == &format!("{frame}_[i]")));
    (total, under, inlined)
}

#[test]
#[ignore = "privileged: needs root and the kernel"]
fn a_synchronized_journal_reads_as_its_monitor_and_its_holders_fsync() {
    let c = capture_service("monitor");
    assert_read_as_java(&c, "monitor enter ← LockService$Journal.record");
    let (total, under, inlined) = monitor_wait_under(&c.lines, "LockService$Journal.record");
    eprintln!(
        "monitor waits: {:.1} % of {total} µs under LockService$Journal.record (inlined frame seen: {inlined})",
        100.0 * under as f64 / total.max(1) as f64
    );
    assert!(total > 1_000_000, "only {total} µs of monitor waits");
    assert!(
        under as f64 >= 0.95 * total as f64,
        "{under} of {total} µs of monitor waits under the synchronized method"
    );
    // C2 inlines the synchronized method into the handler: the frame is there, marked.
    assert!(inlined, "no inlined frame LockService$Journal.record_[i]");
}

#[test]
#[ignore = "privileged: needs root and the kernel"]
fn a_reentrant_lock_journal_reads_as_its_lock_and_its_holders_fsync() {
    let c = capture_service("reentrant");
    assert_read_as_java(&c, "lock ← LockService$Journal.recordLocked");
}
