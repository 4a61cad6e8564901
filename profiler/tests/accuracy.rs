//! End-to-end, privileged: the per-thread state split against the kernel's own accounting.
//! Every thread's CPU time and run-queue time are compared with the deltas of its
//! `/proc/<pid>/task/<tid>/schedstat`, read by this test (not the profiler) when the capture
//! window opens and `SECS` later; each must agree within 1 % of the window.
//!
//! The workloads are the hard cases for tracepoint timing: short synchronous I/O woken on an
//! idle CPU (`fsync`), the same beside CPU-bound threads, pipe and futex ping-pongs whose
//! wakeups race the wakee's own switch-out, and preempted spinners (`accuracy`).

mod common;

use std::{path::Path, time::Duration};

use common::*;
use serde_json::Value;

const SECS: u64 = 5;
const WINDOW_S: f64 = SECS as f64;
/// 1 % of the window.
const TOLERANCE_S: f64 = 0.01 * WINDOW_S;

/// Profiles `workload` in `mode` and compares every thread with its schedstat deltas.
/// Returns the report.
fn compare_with_schedstat(workload: &Workload, name: &str, mode: &str) -> Value {
    let report = scratch_dir().join(format!("{name}.json"));
    let out = outputs(name);
    let pid = workload.pid().to_string();
    let secs = SECS.to_string();
    let mut args = capture_args(&pid, &secs, &out);
    args.extend_from_slice(&["--mode", mode, "--report", report.to_str().unwrap()]);
    prompt();
    let capturing = Capturing::start(&args);
    let before = schedstat(workload.pid());
    std::thread::sleep(Duration::from_secs(SECS));
    let after = schedstat(workload.pid());
    let result = capturing.finish();
    assert_success(&result);
    let json = read_report(&report);

    let threads = json["threads"].as_array().expect("threads");
    assert!(!threads.is_empty(), "no threads in the report");
    let mut checked = Vec::new();
    for t in threads {
        let tid = t["tid"].as_u64().expect("tid") as u32;
        let name = t["name"].as_str().unwrap_or("?");
        let (Some(b), Some(a)) = (before.get(&tid), after.get(&tid)) else {
            continue;
        };
        let kernel_cpu = a.0 - b.0;
        let kernel_rq = a.1 - b.1;
        let pct = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("{k} of {name}"));
        let cpu = (pct("running_pct") + pct("profiler_pct")) / 100.0 * WINDOW_S;
        let rq = pct("runnable_pct") / 100.0 * WINDOW_S;
        let why = format!(
            "{name}-{tid} ({mode}): ours cpu {cpu:.3} s runnable {rq:.3} s; schedstat cpu \
             {kernel_cpu:.3} s runnable {kernel_rq:.3} s; row {t}\nstderr:\n{}",
            String::from_utf8_lossy(&result.stderr)
        );
        assert!((cpu - kernel_cpu).abs() <= TOLERANCE_S, "CPU time: {why}");
        if mode != "cpu" {
            assert!(
                (rq - kernel_rq).abs() <= TOLERANCE_S,
                "run-queue time: {why}"
            );
            let total: f64 = [
                "running_pct",
                "runnable_pct",
                "sleep_pct",
                "io_pct",
                "other_pct",
            ]
            .iter()
            .map(|k| pct(k))
            .sum::<f64>()
                + pct("profiler_pct");
            assert!(
                (total - 100.0).abs() <= 1.0,
                "states add to {total} %: {why}"
            );
        }
        checked.push(name.to_string());
    }
    eprintln!("{name}: checked {checked:?}");
    json
}

fn read_report(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read the report {}: {e}", path.display()));
    serde_json::from_str(&text).expect("the report is JSON")
}

fn row<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["threads"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == name))
        .unwrap_or_else(|| panic!("no thread {name} in {json}"))
}

#[test]
fn a_datasync_loop_alone_agrees_with_schedstat() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir();
    let workload = Workload::spawn(Build::NoFramePointers, &["fsync", dir.to_str().unwrap()]);
    let json = compare_with_schedstat(&workload, "accuracy-fsync", "wall");
    let t = row(&json, "workload");
    assert!(
        t["io_pct"].as_f64().unwrap() > 0.0,
        "no I/O wait at all: {t}"
    );
}

#[test]
fn threads_beside_spinners_and_racing_wakeups_agree_with_schedstat() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir();
    let workload = Workload::spawn(
        Build::NoFramePointers,
        &["accuracy", dir.to_str().unwrap(), "2"],
    );
    let json = compare_with_schedstat(&workload, "accuracy-mixed", "wall");
    for name in ["syncer", "ping", "pong", "racer-a", "racer-b", "spinner-0"] {
        row(&json, name);
    }
}

#[test]
fn cpu_mode_samples_agree_with_schedstat_or_say_why() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir();
    let workload = Workload::spawn(
        Build::NoFramePointers,
        &["accuracy", dir.to_str().unwrap(), "2"],
    );
    let report = scratch_dir().join("accuracy-cpu.json");
    let out = outputs("accuracy-cpu");
    let pid = workload.pid().to_string();
    let secs = SECS.to_string();
    let mut args = capture_args(&pid, &secs, &out);
    args.extend_from_slice(&[
        "--mode",
        "cpu",
        "-F",
        "999",
        "--report",
        report.to_str().unwrap(),
    ]);
    prompt();
    let capturing = Capturing::start(&args);
    let before = schedstat(workload.pid());
    std::thread::sleep(Duration::from_secs(SECS));
    let after = schedstat(workload.pid());
    let result = capturing.finish();
    assert_success(&result);
    let json = read_report(&report);
    let notes: Vec<String> = json["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    let mut checked = 0;
    for t in json["threads"].as_array().expect("threads") {
        let tid = t["tid"].as_u64().expect("tid") as u32;
        let name = t["name"].as_str().unwrap_or("?");
        let (Some(b), Some(a)) = (before.get(&tid), after.get(&tid)) else {
            continue;
        };
        let kernel_cpu = a.0 - b.0;
        if kernel_cpu < 1.0 {
            continue;
        }
        checked += 1;
        let sampled = t["on_cpu_s"].as_f64().expect("on_cpu_s");
        let off = (sampled - kernel_cpu).abs() / kernel_cpu;
        let explained = notes
            .iter()
            .any(|n| n.starts_with(&format!("{name}-{tid}:")));
        assert!(
            off <= 0.05 || explained,
            "{name}-{tid}: {sampled:.3} s sampled vs {kernel_cpu:.3} s schedstat ({:.1} % off) \
             and no note says why; notes: {notes:?}",
            off * 100.0
        );
    }
    assert!(checked >= 2, "no thread ran for a second: {json}");
}
