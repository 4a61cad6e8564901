//! Whole services: a process tree profiled by its parent's PID (children present, forked and
//! exec'd during the capture), a launched command, a cgroup, process churn, and nginx with its
//! workers by the master's PID. Ground truth: the workload's structure, /proc schedstat, and
//! the processes the test itself made.

mod common;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use common::*;
use serde_json::Value;

/// Builds `tests/fixtures/execd.c` (the program a workload child execs) as `execd`.
fn execd_binary() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/execd.c");
    let dir = scratch_dir().join(format!("execd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the execd build directory");
    let out = dir.join("execd");
    let status = Command::new("gcc")
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc failed to build {}", source.display());
    out
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read the JSON report {}: {e}", path.display()));
    serde_json::from_str(&text).expect("the JSON report parses")
}

fn processes(report: &Value) -> Vec<&Value> {
    report["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .collect()
}

/// The per-process root frame `<name>-<pid>` of a `--per-process` folded line.
fn root(line: &Line) -> &str {
    &line.frames[0]
}

/// Seconds of folded time (µs in wall mode) under a process's root.
fn process_secs(lines: &[Line], name: &str, pid: u64) -> f64 {
    let root_name = format!("{name}-{pid}");
    sum(lines, |l| root(l) == root_name) as f64 / 1e6
}

/// Functions that only the workload binary has: the exec'd program's stacks must name none.
const WORKLOAD_ONLY: &[&str] = &[
    "worker_loop",
    "worker_burn",
    "worker_nap",
    "write_and_sync",
    "procs_parent",
    "late_spin",
    "fork_named",
    "cpu_leaf",
    "spin_work",
    "sleeper_loop",
];

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_process_tree_by_its_parents_pid_with_children_forked_and_execd_during_the_capture() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir();
    let execd = execd_binary();
    let workload = Workload::spawn(
        Build::FramePointers,
        &["procs", dir.to_str().unwrap(), "2", execd.to_str().unwrap()],
    );
    let out = outputs("procs");
    let json = dir.join("procs.json");
    let pid = workload.pid().to_string();
    let capturing = Capturing::start(&[
        "--pid",
        &pid,
        "--secs",
        "6",
        "--per-process",
        "-o",
        out.svg.to_str().unwrap(),
        "--folded",
        out.folded.to_str().unwrap(),
        "--report",
        json.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_secs(2));
    workload.signal(libc::SIGUSR1);
    let result = capturing.finish();
    assert_success(&result);
    let report = read_json(&json);
    validate_against_schema(&report);
    let lines = read_folded(&out.folded);
    let window = report["capture"]["duration_s"].as_f64().unwrap();
    let procs = processes(&report);

    // The two workers, there from the start: every thread's time covered, the states where
    // the workload puts them, whole stacks.
    let workers = named(&procs, "worker");
    assert_eq!(workers.len(), 2, "{:#}", report["processes"]);
    for w in &workers {
        check_worker(w, &report, &lines, window);
    }

    // The parent's own wait.
    let parent = procs
        .iter()
        .find(|p| p["pid"] == workload.pid())
        .expect("the parent process");
    let parent_root = format!("{}-{}", parent["name"].as_str().unwrap(), workload.pid());
    let waiting = sum(&lines, |l| {
        root(l) == parent_root && l.has("procs_parent") && l.state() == Some("sleep")
    }) as f64
        / 1e6;
    assert!(waiting > 0.9 * window, "the parent waited {waiting} s");

    check_forked(&named(&procs, "late"), &report, &lines, workload.pid());
    check_execd(&named(&procs, "execd"), &report, &lines);
}

/// The processes of that name.
fn named<'a>(procs: &[&'a Value], name: &str) -> Vec<&'a Value> {
    procs
        .iter()
        .copied()
        .filter(|p| p["name"] == name)
        .collect()
}

/// A worker there from the start: its time covered, its on-CPU time the kernel's, whole
/// stacks in each of its states.
fn check_worker(w: &Value, report: &Value, lines: &[Line], window: f64) {
    let wpid = w["pid"].as_u64().unwrap();
    assert_eq!(w["parent"], Value::Null, "{w:#}");
    let covered = process_secs(lines, "worker", wpid);
    assert!(
        (covered - window).abs() <= 0.03 * window,
        "worker {wpid}: {covered} s covered of a {window} s window"
    );
    let thread = report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == wpid)
        .expect("the worker's thread");
    assert_eq!(thread["pid"], wpid);
    let kernel = thread["schedstat_on_cpu_s"].as_f64().expect("schedstat");
    let ours = thread["on_cpu_s"].as_f64().unwrap();
    assert!(
        (ours - kernel).abs() <= 0.03 * window,
        "worker {wpid}: on-CPU {ours} s, the kernel says {kernel} s"
    );
    let root_name = format!("worker-{wpid}");
    let of_worker = |l: &Line| root(l) == root_name;
    for (chain, state, what) in [
        (
            &["main", "fork_named", "worker_loop", "worker_burn"][..],
            None,
            "burning",
        ),
        (
            &["main", "fork_named", "worker_loop", "worker_nap"][..],
            Some("sleep"),
            "napping",
        ),
        (
            &["main", "fork_named", "worker_loop", "write_and_sync"][..],
            Some("io"),
            "fsync",
        ),
    ] {
        let t = sum(lines, |l| {
            of_worker(l) && l.has_chain(chain) && (state.is_none() || l.state() == state)
        });
        assert!(t > 0, "worker {wpid}: no whole {what} stack {chain:?}");
    }
    // 4 ms of CPU, then a 10 ms sleep: the sleep is the larger share unless the CPU is
    // starved, and both are there.
    assert!(w["sleep_pct"].as_f64().unwrap() > 10.0, "{w:#}");
}

/// Forked mid-capture by `parent`: covered from its fork.
fn check_forked(late: &[&Value], report: &Value, lines: &[Line], parent: u32) {
    let window = report["capture"]["duration_s"].as_f64().unwrap();
    assert_eq!(late.len(), 1, "{:#}", report["processes"]);
    let late = late[0];
    assert_eq!(late["parent"], parent);
    let forked = late["forked_at_s"]
        .as_f64()
        .expect("forked during the capture");
    assert!((1.0..5.0).contains(&forked), "{late:#}");
    let covered = process_secs(lines, "late", late["pid"].as_u64().unwrap());
    assert!(
        (covered - (window - forked)).abs() <= 0.03 * window,
        "late: {covered} s covered, alive {} s",
        window - forked
    );
}

/// Exec'd mid-capture: named after the new program, its frames from the new binary.
fn check_execd(execd_proc: &[&Value], report: &Value, lines: &[Line]) {
    let window = report["capture"]["duration_s"].as_f64().unwrap();
    assert_eq!(execd_proc.len(), 1, "{:#}", report["processes"]);
    let execd_proc = execd_proc[0];
    assert_eq!(execd_proc["execs"], 1, "{execd_proc:#}");
    let epid = execd_proc["pid"].as_u64().unwrap();
    let eforked = execd_proc["forked_at_s"].as_f64().expect("forked");
    let ecovered = process_secs(lines, "execd", epid);
    assert!(
        (ecovered - (window - eforked)).abs() <= 0.03 * window,
        "execd: {ecovered} s covered, alive {} s",
        window - eforked
    );
    let eroot = format!("execd-{epid}");
    let spinning = sum(lines, |l| {
        root(l) == eroot && l.has_chain(&["main", "execd_spin"])
    }) as f64
        / 1e6;
    assert!(spinning > 0.0, "no execd_spin stack under {eroot}");
    let old_frames = sum(lines, |l| {
        root(l) == eroot && WORKLOAD_ONLY.iter().any(|f| l.has(f))
    }) as f64
        / 1e6;
    assert!(
        old_frames <= 0.02 * ecovered,
        "{old_frames} s of execd's {ecovered} s named from the old program"
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_command_is_profiled_from_its_start_and_its_exit_status_is_the_profilers() {
    require_root();
    let _serial = serial();
    let out = outputs("command");
    let workload = workload_binary(Build::FramePointers);
    let result = profile(&[
        "--folded",
        out.folded.to_str().unwrap(),
        "-o",
        out.svg.to_str().unwrap(),
        "--",
        workload.to_str().unwrap(),
        "exit3",
        "2",
    ]);
    assert_eq!(
        result.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let svg = std::fs::read_to_string(&out.svg).expect("the SVG was written");
    assert!(svg.trim_end().ends_with("</svg>"));
    let lines = read_folded(&out.folded);
    let total = sum(&lines, |_| true) as f64 / 1e6;
    let working = sum(&lines, |l| l.has_chain(&["main", "cpu_middle", "cpu_leaf"])) as f64 / 1e6;
    // What the hypervisor stole while it held the CPU is its own frame (up to half of it on
    // this host's VM at times).
    let stolen = sum(&lines, |l| l.has(STEAL)) as f64 / 1e6;
    assert!(
        (1.8..3.0).contains(&total),
        "{total} s recorded for a 2 s command"
    );
    assert!(
        working + stolen > 0.5 * total && working > 0.25 * total,
        "{working} s of {total} s in cpu_leaf, {stolen} s stolen"
    );

    // Ctrl-C ends the capture, the command is told too, the output is still written.
    let out = outputs("command-interrupted");
    let capturing = Capturing::start(&[
        "--folded",
        out.folded.to_str().unwrap(),
        "-o",
        out.svg.to_str().unwrap(),
        "--",
        workload.to_str().unwrap(),
        "spin",
    ]);
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(capturing.pid() as i32, libc::SIGINT) };
    let result = capturing.finish();
    assert_eq!(
        result.status.code(),
        Some(128 + libc::SIGINT),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let lines = read_folded(&out.folded);
    assert!(sum(&lines, |l| l.has("cpu_leaf")) > 0);
}

/// The cgroup2 mount (`/sys/fs/cgroup` on a pure v2 system, `/sys/fs/cgroup/unified` on a
/// hybrid one).
fn cgroup2_mount() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/mounts").expect("read /proc/mounts");
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .expect("a cgroup2 file system is mounted")
}

struct Cgroup(PathBuf);

impl Cgroup {
    fn add(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("move {pid} into {}: {e}", self.0.display()));
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Empty once its processes are gone (reaped by the Workload drops before this).
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_cgroup_selects_its_processes_and_those_that_join_it() {
    require_root();
    let _serial = serial();
    let group = Cgroup(cgroup2_mount().join(format!("profiler-test-{}", std::process::id())));
    std::fs::create_dir_all(&group.0).expect("create a cgroup");
    let inside = Workload::spawn(Build::FramePointers, &["spin"]);
    let outside = Workload::spawn(Build::FramePointers, &["spin"]);
    group.add(inside.pid());
    let json = scratch_dir().join("cgroup.json");
    let out = outputs("cgroup");
    let capturing = Capturing::start(&[
        "--cgroup",
        group.0.to_str().unwrap(),
        "--secs",
        "4",
        "--folded",
        out.folded.to_str().unwrap(),
        "-o",
        out.svg.to_str().unwrap(),
        "--report",
        json.to_str().unwrap(),
    ]);
    let joining = Workload::spawn(Build::FramePointers, &["spin"]);
    group.add(joining.pid());
    let result = capturing.finish();
    assert_success(&result);
    let report = read_json(&json);
    validate_against_schema(&report);
    let pids: Vec<u64> = processes(&report)
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert!(pids.contains(&(inside.pid() as u64)), "{pids:?}");
    assert!(pids.contains(&(joining.pid() as u64)), "{pids:?}");
    assert!(!pids.contains(&(outside.pid() as u64)), "{pids:?}");
    drop((inside, joining, outside));
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn process_churn_leaves_the_kernel_tables_bounded() {
    require_root();
    let _serial = serial();
    let workload = Workload::spawn(Build::FramePointers, &["forks"]);
    let json = scratch_dir().join("churn.json");
    let out = outputs("forks");
    let pid = workload.pid().to_string();
    let result = profile(&[
        "--pid",
        &pid,
        "--secs",
        "4",
        // Hundreds of processes pass through a table a quarter of their number.
        "--max-processes",
        "256",
        "-o",
        out.svg.to_str().unwrap(),
        "--report",
        json.to_str().unwrap(),
    ]);
    assert_success(&result);
    let report = read_json(&json);
    validate_against_schema(&report);
    let seen = report["capture"]["processes"].as_u64().unwrap();
    assert!(seen > 200, "only {seen} processes seen");
    let counters = &report["capture"]["counters"];
    for full in ["procs_full", "threads_full"] {
        assert_eq!(counters[full], 0, "{counters:#}");
    }
    let tables: BTreeMap<String, u64> =
        serde_json::from_value(report["capture"]["tables_at_end"].clone()).unwrap();
    assert_eq!(tables.len(), 3, "{tables:?}");
    for (map, n) in &tables {
        // The parent and the children of the last tick or so (entries are freed five times
        // a second: at ~500 forks a second that is ~100), not the thousands that came and
        // went; none was refused (procs_full, threads_full above).
        assert!(
            *n * 5 < seen,
            "{map}: {n} entries left after {seen} processes"
        );
    }
}

/// nginx with two workers under wrk, profiled by the master's PID.
#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn nginx_by_its_masters_pid_shows_both_workers() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir().join(format!("nginx-{}", std::process::id()));
    let nginx = common::services::Nginx::start(&dir);
    let (master, workers) = (nginx.master, nginx.workers.clone());
    let wrk = nginx.load(8);
    std::thread::sleep(Duration::from_millis(500));
    let steal_before = machine_steal_s();
    let json = dir.join("nginx.json");
    let out = outputs("nginx");
    let pid = master.to_string();
    let result = profile(&[
        "--pid",
        &pid,
        "--secs",
        "4",
        "--per-process",
        "--folded",
        out.folded.to_str().unwrap(),
        "-o",
        out.svg.to_str().unwrap(),
        "--report",
        json.to_str().unwrap(),
    ]);
    let steal = machine_steal_s() - steal_before;
    wrk.wait();
    assert_success(&result);
    let report = read_json(&json);
    validate_against_schema(&report);
    let lines = read_folded(&out.folded);
    for w in &workers {
        let root_name = format!("nginx-{w}");
        let handling = sum(&lines, |l| {
            root(l) == root_name && l.frames.iter().any(|f| f.starts_with("ngx_http_"))
        });
        let epoll = sum(&lines, |l| {
            root(l) == root_name && l.has("epoll_wait") && l.state() == Some("sleep")
        });
        assert!(
            handling > 0 && epoll > 0,
            "worker {w}: http {handling} µs, epoll_wait {epoll} µs"
        );
        let thread = report["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tid"] == *w)
            .expect("the worker's thread");
        let (ours, kernel) = (
            thread["on_cpu_s"].as_f64().unwrap(),
            thread["schedstat_on_cpu_s"].as_f64().expect("schedstat"),
        );
        let window = report["capture"]["duration_s"].as_f64().unwrap();
        assert!(
            (ours - kernel).abs() <= 0.03 * window,
            "worker {w}: on-CPU {ours} s, the kernel says {kernel} s (machine steal during \
             the run {steal:.2} s)"
        );
        let row = processes(&report)
            .into_iter()
            .find(|p| p["pid"] == *w)
            .expect("the worker's process row");
        assert!(
            (row["on_cpu_s"].as_f64().unwrap() - ours).abs() < 0.01,
            "{row:#}"
        );
    }
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_listed_process_that_exits_leaves_the_others_profiled_to_the_end() {
    require_root();
    let _serial = serial();
    let mut first = Workload::spawn(Build::FramePointers, &["spin"]);
    let second = Workload::spawn(Build::FramePointers, &["spin"]);
    let json = scratch_dir().join("two-pids.json");
    let out = outputs("two-pids");
    let list = format!("{},{}", first.pid(), second.pid());
    let capturing = Capturing::start(&[
        "--pid",
        &list,
        "--secs",
        "3",
        "-o",
        out.svg.to_str().unwrap(),
        "--report",
        json.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_secs(1));
    let _ = first.child.kill();
    let _ = first.child.wait();
    let result = capturing.finish();
    assert_success(&result);
    let report = read_json(&json);
    validate_against_schema(&report);
    let window = report["capture"]["duration_s"].as_f64().unwrap();
    assert!(window > 2.9, "the capture ended at {window} s");
    assert_eq!(report["capture"]["ended_early"], Value::Null);
    let gone = format!("workload-{} exited", first.pid());
    assert!(
        report["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().starts_with(&gone)),
        "{:#}",
        report["notes"]
    );
    let row = processes(&report)
        .into_iter()
        .find(|p| p["pid"] == second.pid())
        .expect("the other process");
    assert!(row["on_cpu_s"].as_f64().unwrap() > 0.5, "{row:#}");
    assert!(String::from_utf8_lossy(&result.stderr).contains("exited"));
}
