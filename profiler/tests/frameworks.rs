//! End-to-end, privileged: services on real frameworks, profiled the way a new user would
//! (issue 40). Debian's Tomcat 9 + Spring MVC calling a slow upstream, the same service's
//! database endpoint (a HikariCP pool of 4 under 32 connections, then a synchronized audit
//! log that fsyncs) profiled with its MariaDB, its endpoint that only appends to the audit
//! log (32 requests queueing on the lock), a Netty 4.1 event loop that sleeps in its handler,
//! and a C thread-per-request server calling the upstream; each under `wrk -t2 -c32`, warm
//! 8 s, captured 13 s on a stock JDK 17 (tests/common/frameworks.rs builds and runs them).
//!
//! Each test checks that the fixture did what it is built to do (wrk's requests without
//! errors, the service's own counters) and what the profiler already shows: the request
//! threads in the report, the framework's frames on their stacks. Its outputs (report.json,
//! profile.capture, profile.folded, summary.txt and truth.json: the window's ground truth)
//! stay in the scenario's scratch directory, printed with --nocapture.

mod common;

use common::{frameworks::*, *};

const WARM_S: u64 = 8;
const CAPTURE_S: u64 = 13;

/// Runs `scenario` and checks what every scenario must show: load served without errors,
/// the request threads in the report.
fn capture(scenario: Scenario, min_request_threads: usize) -> Captured {
    require_root();
    let _serial = serial();
    let c = run(scenario, WARM_S, CAPTURE_S);
    validate_against_schema(&c.report);
    assert!(
        c.wrk.requests > 0 && c.wrk.errors == 0,
        "wrk: {} requests, {} errors:\n{}",
        c.wrk.requests,
        c.wrk.errors,
        c.wrk.text
    );
    assert!(
        c.window.stats.get("requests").copied().unwrap_or(0) > 100,
        "the service served too few requests in the window: {:?}",
        c.window.stats
    );
    assert!(
        c.request_threads.len() >= min_request_threads,
        "{} threads ran {}, expected at least {min_request_threads}",
        c.request_threads.len(),
        scenario.load_frame()
    );
    let reported: Vec<u64> = c.report["threads"]
        .as_array()
        .expect("threads in the report")
        .iter()
        .filter_map(|t| t["tid"].as_u64())
        .collect();
    for tid in &c.request_threads {
        assert!(
            reported.contains(&u64::from(*tid)),
            "request thread {tid} is not in the report's threads"
        );
    }
    no_request_thread_is_idle(&c);
    no_label_in_two_rows(&c);
    c
}

/// A request thread waiting on a downstream, a pool or a lock is working (issue 40).
fn no_request_thread_is_idle(c: &Captured) {
    let threads = c.report["threads"].as_array().expect("threads");
    let idle: Vec<&serde_json::Value> = threads
        .iter()
        .filter(|t| {
            t["tid"]
                .as_u64()
                .is_some_and(|tid| c.request_threads.contains(&(tid as u32)))
                && t["class"] == "idle"
        })
        .collect();
    assert!(
        idle.is_empty(),
        "request threads counted idle: {idle:#?}\nverdict: {}",
        c.verdict
    );
}

/// One row per site: no two rows of the same state read alike.
fn no_label_in_two_rows(c: &Captured) {
    let sites = c.report["top_blocking_sites"].as_array().expect("sites");
    let mut seen = std::collections::BTreeSet::new();
    for s in sites {
        let key = (s["state"].to_string(), s["site"].to_string());
        assert!(
            seen.insert(key.clone()),
            "two rows read {key:?}: {sites:#?}"
        );
    }
}

/// The row whose label starts with `label`, its kind, and the verdict naming it with its
/// share: the row's time (with the run-queue wait after its wakeups, which the service's own
/// clock counts too) over the request threads' time within `tolerance` points of `truth` (%),
/// and the verdict's share (of the whole pool's active threads, the poller's included, and
/// without the run-queue wait) no further below it than `tolerance` points more.
fn verdict_names(c: &Captured, label: &str, kind: &str, truth: f64, tolerance: f64) {
    let sites = c.report["top_blocking_sites"].as_array().expect("sites");
    let row = sites
        .iter()
        .find(|s| s["site"].as_str().is_some_and(|l| l.starts_with(label)))
        .unwrap_or_else(|| panic!("no row `{label}…`: {sites:#?}"));
    let site = row["site"].as_str().unwrap_or_default();
    assert_eq!(row["kind"], kind, "{row:#}");
    assert_eq!(row["purpose"], "task", "{row:#}");
    let secs = row["total_s"].as_f64().unwrap_or(0.0)
        + row["runnable_after_wakeup_s"].as_f64().unwrap_or(0.0);
    let window = c.report["capture"]["duration_s"].as_f64().unwrap_or(1.0);
    let ours = 100.0 * secs / (window * c.request_threads.len() as f64);
    eprintln!(
        "{}: `{site}` {ours:.1} % of the request threads' time (ground truth {truth:.1} %); \
         verdict: {}",
        c.scenario.name(),
        c.verdict
    );
    assert!(
        (ours - truth).abs() <= tolerance,
        "`{site}`: {ours:.1} % of the request threads' time, the workload's own clock says \
         {truth:.1} %"
    );
    let at = c
        .verdict
        .find(site)
        .unwrap_or_else(|| panic!("the verdict does not name `{site}`: {}", c.verdict));
    let share = verdict_share_before(&c.verdict[..at]);
    assert!(
        share >= truth - 2.0 * tolerance && share <= truth + tolerance,
        "the verdict gives `{site}` {share:.0} %, the workload's own clock {truth:.1} %: {}",
        c.verdict
    );
}

/// The last `N %` before `text`'s end: the share the verdict gives the wait it names next.
fn verdict_share_before(text: &str) -> f64 {
    text.rsplit(" % ")
        .nth(1)
        .and_then(|before| before.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no share before the wait in: {text}"))
}

/// The verdict leads with the request threads' group (after the machine's saturation, when it
/// says so), not the JIT compiler's threads or a selector.
fn verdict_leads_with(c: &Captured, group: &str) {
    let lead = c
        .verdict
        .split(": the machine is CPU-bound. ")
        .last()
        .unwrap_or_default();
    assert!(
        lead.starts_with(group),
        "the verdict does not lead with {group}: {}",
        c.verdict
    );
}

/// Whether some stack of a request thread has these frames in this order (anything between
/// them: the frameworks' plumbing varies with the JIT's inlining).
fn request_stack_has(c: &Captured, frames: &[&str]) -> bool {
    c.lines.iter().any(|l| {
        l.frames
            .get(1)
            .and_then(|t| t.rsplit_once('-')?.1.parse().ok())
            .is_some_and(|tid: u32| c.request_threads.contains(&tid))
            && {
                let mut it = l.frames.iter();
                frames.iter().all(|want| it.any(|f| is_frame(f, want)))
            }
    })
}

fn assert_request_stack(c: &Captured, frames: &[&str]) {
    assert!(
        request_stack_has(c, frames),
        "no request thread's stack has {frames:?} (outputs in {})",
        c.dir.display()
    );
}

/// The share (%) of the request threads' time in the scenario's request frame that the folded
/// stacks put under `frame`, on the CPU or off it.
fn folded_share(c: &Captured, frame: &str) -> f64 {
    let all = time_under(&c.lines, &c.request_threads, c.scenario.request_frame());
    100.0 * time_under(&c.lines, &c.request_threads, frame) as f64 / all.max(1) as f64
}

fn derived(c: &Captured, name: &str) -> f64 {
    c.truth["derived"][name]
        .as_f64()
        .unwrap_or_else(|| panic!("no {name} in the ground truth"))
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn tomcat_calling_a_slow_upstream() {
    let c = capture(Scenario::TomcatPrice, 16);
    // The fixture: each request waits for the upstream's 20 ms, and little else.
    let upstream_ms = derived(&c, "upstream_ms_per_request");
    assert!(
        (19.5..200.0).contains(&upstream_ms),
        "the upstream answered in {upstream_ms:.1} ms"
    );
    assert!(
        c.window.stats["upstream_ns"] as f64 >= 0.9 * c.window.stats["handler_ns"] as f64,
        "the handler does not mostly wait for the upstream: {:?}",
        c.window.stats
    );
    assert_request_stack(&c, &["OrderController.price", "HttpClientImpl.send"]);
    assert_request_stack(
        &c,
        &[
            "OrderController.price",
            "CompletableFuture.get",
            "CompletableFuture$Signaller.block",
        ],
    );
    eprintln!(
        "folded: {:.1} % of OrderController.price's time under HttpClientImpl.send",
        folded_share(&c, "HttpClientImpl.send")
    );
    verdict_leads_with(&c, "java (http-nio-");
    verdict_names(
        &c,
        "reply ← HttpClient.send ← OrderController.price",
        "reply",
        derived(&c, "upstream_share_of_request_threads_pct"),
        5.0,
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn tomcat_with_a_small_pool_and_an_fsynced_audit_log() {
    let c = capture(Scenario::TomcatList, 16);
    // The fixture: 32 requests in flight for 4 connections, most of their time in the pool.
    let pool = derived(&c, "pool_wait_ms_per_request");
    let query = derived(&c, "query_after_pool_ms_per_request");
    assert!(
        pool > 2.0 * query,
        "requests wait {pool:.1} ms for a connection and {query:.1} ms for the query: the pool is not the bottleneck"
    );
    assert!(
        c.window.stats["audit_held_ns"] > 0,
        "no audit: {:?}",
        c.window.stats
    );
    assert!(
        c.report["processes"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["name"] == "mariadbd")),
        "mariadbd is not among the report's processes"
    );
    assert_request_stack(
        &c,
        &[
            "OrderController.list",
            "JdbcTemplate.query",
            "HikariPool.getConnection",
            "SynchronousQueue.poll",
        ],
    );
    assert_request_stack(
        &c,
        &[
            "OrderController.list",
            "JdbcTemplate.query",
            "Socket$SocketInputStream.read",
        ],
    );
    assert_request_stack(&c, &["OrderController.list", "AuditLog.append", "fsync"]);
    for frame in ["HikariPool.getConnection", "AuditLog.append"] {
        eprintln!(
            "folded: {:.1} % of OrderController.list's time under {frame}",
            folded_share(&c, frame)
        );
    }
    verdict_leads_with(&c, "java (http-nio-");
    verdict_names(
        &c,
        "pooled connection ← HikariPool.getConnection ← JdbcTemplate.query ← \
         OrderController.list",
        "connection",
        derived(&c, "pool_wait_share_of_request_threads_pct"),
        5.0,
    );
    let sites = c.report["top_blocking_sites"].as_array().expect("sites");
    let read = sites
        .iter()
        .find(|s| {
            s["site"]
                == "socket read (MariaDB Connector/J) ← JdbcTemplate.query ← OrderController.list"
        })
        .unwrap_or_else(|| panic!("no row for the driver's read: {sites:#?}"));
    assert_eq!(read["kind"], "reply", "{read:#}");
    assert!(
        !c.verdict
            .contains("a pool waiting for work (SynchronousQueue"),
        "the connection pool's wait reads as idle: {}",
        c.verdict
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn tomcat_queueing_on_a_lock_whose_holder_fsyncs() {
    let c = capture(Scenario::TomcatOrder, 16);
    // The fixture: the requests spend most of their time waiting for the audit log's lock.
    let wait = derived(&c, "audit_lock_wait_ms_per_request");
    let held = derived(&c, "audit_held_ms_per_request");
    assert!(
        wait > 4.0 * held,
        "requests wait {wait:.2} ms for the lock held {held:.2} ms: the lock is not contended"
    );
    assert_request_stack(&c, &["OrderController.order", "AuditLog.append", "fsync"]);
    eprintln!(
        "folded: {:.1} % of OrderController.order's time under AuditLog.append",
        folded_share(&c, "AuditLog.append")
    );
    verdict_leads_with(&c, "java (http-nio-");
    verdict_names(
        &c,
        "monitor enter ← AuditLog.append",
        "lock",
        derived(&c, "audit_lock_wait_share_of_request_threads_pct"),
        5.0,
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn netty_event_loop_that_sleeps_in_its_handler() {
    let c = capture(Scenario::NettyBlocking, 2);
    assert_eq!(
        c.request_threads.len(),
        2,
        "the handler ran on other threads than the 2 event loops"
    );
    // The fixture: the loops spend most of their time in the handler's sleep.
    let sleep_ms = derived(&c, "sleep_ms_per_request");
    assert!(
        (5.0..20.0).contains(&sleep_ms),
        "the handler slept {sleep_ms:.1} ms a request"
    );
    assert_request_stack(&c, &["QuoteHandler.channelRead0", "Thread.sleep"]);
    eprintln!(
        "folded: {:.1} % of QuoteHandler.channelRead0's time under Thread.sleep",
        folded_share(&c, "Thread.sleep")
    );
    verdict_leads_with(&c, "java (nioEventLoopGro");
    assert!(
        c.verdict.contains("it is an event loop that blocks: "),
        "the verdict does not call the loops event loops that block: {}",
        c.verdict
    );
    verdict_names(
        &c,
        "Thread.sleep ← QuoteHandler.channelRead0",
        "sleep",
        derived(&c, "sleep_share_of_event_loops_pct"),
        5.0,
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn c_thread_per_request_server_calling_an_upstream() {
    let c = capture(Scenario::CThreadPerRequest, 30);
    let upstream_ms = derived(&c, "upstream_ms_per_request");
    assert!(
        (19.5..200.0).contains(&upstream_ms),
        "the upstream answered in {upstream_ms:.1} ms"
    );
    assert_request_stack(&c, &["handle_connection", "call_upstream", "read_head"]);
    eprintln!(
        "folded: {:.1} % of handle_connection's time under call_upstream",
        folded_share(&c, "call_upstream")
    );
    verdict_leads_with(&c, "tpr-server (worker");
    verdict_names(
        &c,
        "__libc_read ← read_head ← call_upstream",
        "io",
        derived(&c, "upstream_share_of_request_threads_pct"),
        5.0,
    );
}
