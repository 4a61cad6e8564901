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
    // TODO(issue 40): no request thread counted idle — every tid of c.request_threads has
    // `class: "active"` in c.report["threads"] and appears in no c.report["idle_threads"].
    // TODO(issue 40): no label in two rows — the `site` of c.report["top_blocking_sites"]
    // are unique per `state`.
    c
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
    // TODO(issue 40): the verdict names the upstream wait (`reply ← HttpClient.send ←
    // OrderController.price`, kind reply) with the row's whole share within a few % of
    // derived "upstream_share_of_request_threads_pct"; the CompilerThreads and the
    // HttpClient selector are not what the verdict leads with.
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
    // TODO(issue 40): the verdict names `pooled connection ← HikariPool.getConnection ←
    // JdbcTemplate.query` (kind pool, not "a pool waiting for work") with its share within a
    // few % of derived "pool_wait_share_of_request_threads_pct"; the driver's read is one row
    // `socket read (MariaDB Connector/J) ← JdbcTemplate.query ← OrderController.list`; the
    // audit's `monitor enter ← AuditLog.append` is one row whose holders fsync.
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
    // TODO(issue 40): the verdict names `monitor enter ← AuditLog.append ←
    // OrderController.order` as one row (kind lock, its holders in fsync) with its share
    // within a few % of derived "audit_lock_wait_share_of_request_threads_pct".
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
    // TODO(issue 40): one row for `Thread.sleep ← QuoteHandler.channelRead0` (not four), its
    // share within a few % of derived "sleep_share_of_event_loops_pct"; the verdict names the
    // two loops as event loops that block, where, and for how much of their time.
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
    // TODO(issue 40): the verdict names the upstream reply (a socket read under
    // call_upstream ← handle_connection) with its share within a few % of derived
    // "upstream_share_of_request_threads_pct"; none of the 32 worker threads is idle.
}
