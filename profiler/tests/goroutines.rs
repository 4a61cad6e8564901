//! End-to-end, privileged: goroutine waits of Go services, followed through uprobes on the
//! target binary's runtime (`runtime.gopark`, `runtime.execute`), against workloads whose
//! goroutines' time is known by construction (`profiler-core/tests/fixtures/gowait`):
//! - a net/http service whose handler calls a 20 ms upstream with `http.Client.Get` and
//!   hashes for about a millisecond: its requests' goroutines wait for the upstream most of
//!   their time, which the OS threads' view calls idle;
//! - a mutex convoy (8 goroutines, each holding the lock 2 ms on the CPU): each waits for the
//!   lock about 7/8 of its time;
//! - a pipeline whose middle stage sleeps 10 ms per item: the producer blocks sending, the
//!   consumer waits for items (idle), the slow stage sleeps;
//! - a `time.Sleep` poller; an HTTP server nobody calls (idle); a stripped binary (the
//!   runtime found through `.gopclntab`).

mod common;

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
};

use common::*;
use serde_json::Value;

fn gowait() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_go("gowait", "gowait", &[]))
}

/// A gowait process, killed when dropped; `port` where it serves.
struct Go {
    child: Child,
    port: String,
}

impl Go {
    fn start(binary: &Path, args: &[&str]) -> Go {
        let mut child = Command::new(binary)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start gowait");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("read gowait's ready line");
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some("ready"), "gowait said {line:?}");
        let port = words.next().unwrap_or_default().to_string();
        Go { child, port }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }
}

impl Drop for Go {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A capture of `pid` for 4 s: the JSON report (checked against the schema) and the folded
/// lines.
fn capture(pid: &str, name: &str) -> (Value, Vec<Line>) {
    let dir = scratch_dir();
    let report = dir.join(format!("{name}.json"));
    let folded = dir.join(format!("{name}.folded"));
    let out = profile(&[
        "--pid",
        pid,
        "--secs",
        "4",
        "-o",
        dir.join(format!("{name}.svg")).to_str().expect("utf-8"),
        "--folded",
        folded.to_str().expect("utf-8"),
        "--report",
        report.to_str().expect("utf-8"),
        "--timeline",
        dir.join(format!("{name}.pftrace")).to_str().expect("utf-8"),
    ]);
    assert_success(&out);
    let report: Value = serde_json::from_slice(&std::fs::read(&report).expect("read the report"))
        .expect("JSON report");
    validate_against_schema(&report);
    (report, read_folded(&folded))
}

fn groups(report: &Value) -> &Vec<Value> {
    report["goroutines"]
        .as_array()
        .unwrap_or_else(|| panic!("no goroutine groups: {report:#}"))
}

/// The group of goroutines started with (or under) `function`.
fn group<'a>(report: &'a Value, function: &str) -> &'a Value {
    groups(report)
        .iter()
        .find(|g| g["entry"] == function || g["app"] == function)
        .unwrap_or_else(|| {
            panic!(
                "no goroutine group under {function}: {:#}",
                report["goroutines"]
            )
        })
}

fn top_site(g: &Value) -> &Value {
    &g["sites"][0]
}

fn pct(v: &Value) -> f64 {
    v.as_f64().expect("a number")
}

fn followed(report: &Value) {
    let procs = report["go_processes"].as_array().expect("go_processes");
    assert_eq!(procs.len(), 1, "{procs:?}");
    assert!(
        procs[0].get("unfollowed").is_none(),
        "goroutines not followed: {procs:?}"
    );
    assert!(
        procs[0]["version"]
            .as_str()
            .unwrap_or("")
            .starts_with("go1."),
        "{procs:?}"
    );
}

/// Goroutine lines of the flame graph: under `[goroutines]`, ending in `[go: reason]`.
fn goroutine_time(lines: &[Line], frame: &str) -> u64 {
    sum(lines, |l| {
        l.has("[goroutines]")
            && l.has(frame)
            && l.frames.last().is_some_and(|f| f.starts_with("[go: "))
    })
}

#[test]
#[ignore = "needs root, go; run with cargo xtask test"]
fn requests_waiting_on_an_upstream_are_read_by_their_goroutines() {
    require_root();
    let _serial = serial();
    let bin = gowait();
    let upstream = Go::start(bin, &["upstream"]);
    let service = Go::start(
        bin,
        &["service", &format!("http://127.0.0.1:{}/", upstream.port)],
    );
    let _load = Go::start(
        bin,
        &["load", &format!("http://127.0.0.1:{}/", service.port), "16"],
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (report, lines) = capture(&service.pid(), "go-service");
    followed(&report);
    let requests = group(&report, "net/http.(*conn).serve");
    assert_eq!(requests["app"], "main.handleOrder", "{requests:#}");
    let site = top_site(requests);
    let label = site["label"].as_str().unwrap_or("");
    // By construction: 20 ms upstream, ~1 ms of hashing per request.
    assert!(
        label.contains("net/http.(*Client).Get") && label.ends_with("main.fetchPrice"),
        "{site:#}"
    );
    assert_eq!(site["waiting_for"], "a reply over HTTP", "{site:#}");
    assert!(pct(&site["share_pct"]) >= 75.0, "{site:#}");
    let p50 = pct(&site["latency"]["p50_ms"]);
    assert!((19.0..60.0).contains(&p50), "p50 {p50} ms: {site:#}");
    assert!(pct(&requests["on_cpu_pct"]) < 20.0, "{requests:#}");
    let verdict = report["verdict"].as_str().unwrap_or("");
    assert!(
        verdict.starts_with("In gowait")
            && verdict.contains("requests (goroutines under main.handleOrder")
            && verdict.contains("waiting for a reply over HTTP")
            && verdict.contains("main.fetchPrice"),
        "{verdict}"
    );
    // The keep-alive connections' reads of their next request: idle, not ranked.
    assert!(
        requests["sites"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["idle"] == true && s["reason"] == "IO wait"),
        "{requests:#}"
    );
    // The Perfetto trace: a track per goroutine under the service, each wait for the
    // upstream a slice of about 20 ms named by its site.
    let trace = perfetto_summary(&scratch_dir().join("go-service.pftrace"));
    let mut upstream_ms: Vec<f64> = trace["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter(|t| {
            t["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("goroutine 0x"))
        })
        .flat_map(|t| t["slices"].as_array().cloned().unwrap_or_default())
        .filter(|s| s["name"] == label)
        .map(|s| s["dur"].as_f64().unwrap_or(0.0) / 1e6)
        .collect();
    upstream_ms.sort_by(f64::total_cmp);
    assert!(upstream_ms.len() > 100, "{} slices", upstream_ms.len());
    let median = upstream_ms[upstream_ms.len() / 2];
    assert!((19.0..60.0).contains(&median), "median {median} ms");
    // The flame graph: the waits under the handler's goroutine stacks, and the threads'
    // scheduler sleep not drawn beside them.
    assert!(
        goroutine_time(&lines, "main.fetchPrice") > 1_000_000,
        "{}",
        dump(&lines)
    );
    assert_eq!(
        sum(&lines, |l| l.has("runtime.findrunnable")
            && !l.has("[goroutines]")
            && l.state().is_some()),
        0
    );
}

#[test]
#[ignore = "needs root, go; run with cargo xtask test"]
fn a_mutex_convoy_waits_for_the_lock() {
    require_root();
    let _serial = serial();
    let convoy = Go::start(gowait(), &["convoy"]);
    let (report, _) = capture(&convoy.pid(), "go-convoy");
    followed(&report);
    let workers = group(&report, "main.convoyWorker");
    let site = top_site(workers);
    // `Lock`'s fast path is inlined: the call is its slow path.
    assert!(
        site["label"]
            .as_str()
            .is_some_and(|l| l.contains("sync.(*Mutex).") && l.ends_with(" ← main.convoyWorker")),
        "{site:#}"
    );
    assert_eq!(site["waiting_for"], "a lock");
    // 8 workers, one holds the lock at a time: 7/8 of their time waiting (fewer while the
    // holder waits for a CPU: 2 CPUs).
    let share = pct(&site["share_pct"]);
    assert!((60.0..95.0).contains(&share), "{site:#}");
    assert!(
        report["verdict"].as_str().is_some_and(|v| v
            .contains("goroutines under main.convoyWorker")
            && v.contains("a lock")),
        "{}",
        report["verdict"]
    );
}

#[test]
#[ignore = "needs root, go; run with cargo xtask test"]
fn a_pipeline_names_its_slow_stage() {
    require_root();
    let _serial = serial();
    let pipeline = Go::start(gowait(), &["pipeline"]);
    let (report, _) = capture(&pipeline.pid(), "go-pipeline");
    followed(&report);
    let slow = group(&report, "main.slowStage");
    let site = top_site(slow);
    assert!(
        site["label"] == "sleep ← time.Sleep ← main.slowStage",
        "{site:#}"
    );
    assert!(pct(&site["share_pct"]) >= 90.0, "{site:#}");
    let p50 = pct(&site["latency"]["p50_ms"]);
    assert!((10.0..20.0).contains(&p50), "{site:#}");
    // The producer is held back by the slow stage; the consumer waits for items: idle.
    let produce = top_site(group(&report, "main.produce"));
    assert!(
        produce["label"] == "chan send ← main.produce",
        "{produce:#}"
    );
    let consume = group(&report, "main.consume");
    assert!(
        consume["sites"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["idle"] == true),
        "{consume:#}"
    );
    // The verdict ends at the stage the others wait on.
    let verdict = report["verdict"].as_str().unwrap_or("");
    assert!(
        verdict.contains("goroutines under main.slowStage spend")
            && verdict.contains("sleep ← time.Sleep ← main.slowStage"),
        "{verdict}"
    );
}

#[test]
#[ignore = "needs root, go; run with cargo xtask test"]
fn a_poller_sleeps_and_an_unused_server_is_idle() {
    require_root();
    let _serial = serial();
    let poller = Go::start(gowait(), &["poller"]);
    let (report, _) = capture(&poller.pid(), "go-poller");
    let site = top_site(group(&report, "main.poll"));
    assert_eq!(site["label"], "sleep ← time.Sleep ← main.poll", "{site:#}");
    // 4 s of 50 ms sleeps: about 80 of them.
    let waits = site["waits"].as_u64().unwrap_or(0);
    assert!((60..=82).contains(&waits), "{site:#}");

    let idle = Go::start(gowait(), &["idle"]);
    let (report, _) = capture(&idle.pid(), "go-idle");
    let verdict = report["verdict"].as_str().unwrap_or("");
    assert!(!verdict.contains("requests"), "{verdict}");
    assert!(verdict.contains("idle"), "{verdict}");
    assert!(
        groups_or_empty(&report).iter().all(|g| g["idle"] == true),
        "{:#}",
        report["goroutines"]
    );
}

fn groups_or_empty(report: &Value) -> Vec<Value> {
    report["goroutines"].as_array().cloned().unwrap_or_default()
}

#[test]
#[ignore = "needs root, go; run with cargo xtask test"]
fn a_stripped_binary_is_followed_through_its_pclntab() {
    require_root();
    let _serial = serial();
    let bin = build_go("gowait", "gowait-stripped", &["-ldflags=-s -w"]);
    let convoy = Go::start(&bin, &["convoy"]);
    let (report, lines) = capture(&convoy.pid(), "go-stripped");
    followed(&report);
    // No symbol table: the waits are there, their reasons by number.
    assert!(
        sum(&lines, |l| l.has("[goroutines]")) > 1_000_000,
        "{}",
        dump(&lines)
    );
}

fn dump(lines: &[Line]) -> String {
    lines
        .iter()
        .filter(|l| l.has("[goroutines]"))
        .map(|l| format!("{} {}", l.frames.join(";"), l.count))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
#[ignore = "needs root, go; run with cargo xtask test"]
fn a_position_independent_binary_names_its_wait_reasons() {
    require_root();
    let _serial = serial();
    // Distributions build Go programs as PIE: the reasons' names sit behind relocations.
    let bin = build_go("gowait", "gowait-pie", &["-buildmode=pie"]);
    let poller = Go::start(&bin, &["poller"]);
    let (report, _) = capture(&poller.pid(), "go-pie");
    followed(&report);
    let site = top_site(group(&report, "main.poll"));
    assert_eq!(site["label"], "sleep ← time.Sleep ← main.poll", "{site:#}");
}
