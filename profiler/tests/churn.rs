//! Privileged: threads and processes that come and go. A thread per request at hundreds a
//! second loses nothing and its process's CPU time agrees with the kernel's; a build under
//! `-- make` is named; a process that lives 40 ms is named and unwound from its first sample.

mod common;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use common::*;

/// `/proc/<pid>/stat` utime + stime, in seconds: the process's CPU time as the kernel reports
/// it, exited threads included.
fn process_cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    let after_name = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    // Fields 14 and 15 of proc(5), counted from the state (field 3) here.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn json_report(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read the JSON report"))
        .expect("the JSON report parses")
}

/// Each thread that exits leaves the kernel's process times (`__exit_signal`, which folds it
/// into the process's totals) a few microseconds before its last switch-out, the end of its
/// `sum_exec_runtime` that we count: 11–12 µs a thread measured here (a program that sums its
/// threads' CPU clocks and its own rusage, under `-- CMD`). /proc/PID/stat leaves that out.
const EXIT_TAIL_S: f64 = 20e-6;

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_thread_per_request_server_loses_nothing_and_its_cpu_time_is_the_kernels() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir().join("requests");
    std::fs::create_dir_all(&dir).unwrap();
    let rate = 600u32;
    let workload = Workload::spawn(
        Build::NoFramePointers,
        &["requests", dir.to_str().unwrap(), &rate.to_string()],
    );
    let secs = 20u64;
    let out = outputs("requests");
    let report = scratch_dir().join("requests.json");
    let pid = workload.pid().to_string();
    let secs_arg = secs.to_string();
    let mut args = capture_args(&pid, &secs_arg, &out);
    args.extend(["--report", report.to_str().unwrap()]);
    let capturing = Capturing::start(&args);
    let opened = Instant::now();
    let cpu_at_start = process_cpu_s(workload.pid());
    std::thread::sleep(Duration::from_secs(secs).saturating_sub(opened.elapsed()));
    let kernel_cpu = process_cpu_s(workload.pid()) - cpu_at_start;
    let result = capturing.finish();
    assert_success(&result);
    let r = json_report(&report);
    let capture = &r["capture"];
    assert_eq!(capture["lost_total"], 0, "losses: {}", capture["lost"]);
    for (name, value) in capture["counters"].as_object().unwrap() {
        if name.ends_with("_full") || name.ends_with("_lost") || name.ends_with("_failed") {
            assert_eq!(value, 0, "{name}");
        }
    }
    let threads = capture["threads"].as_u64().unwrap();
    assert!(
        threads as f64 > 0.9 * f64::from(rate) * secs as f64,
        "only {threads} threads seen in {secs} s at {rate} requests a second"
    );
    let process = &r["processes"][0];
    let ours = process["on_cpu_s"].as_f64().unwrap();
    let tail = threads as f64 * EXIT_TAIL_S;
    eprintln!(
        "{threads} threads; on-CPU {ours:.3} s, /proc/{}/stat {kernel_cpu:.3} s over the window \
         (+ at most {tail:.3} s of exit tails)",
        workload.pid()
    );
    assert!(
        ours <= kernel_cpu * 1.03 + tail && ours >= kernel_cpu * 0.97,
        "the process's on-CPU time {ours:.3} s is not within 3 % of its /proc/PID/stat CPU \
         time {kernel_cpu:.3} s (+ {tail:.3} s of exit tails)"
    );
    check_request_lives(&out.folded);
    check_short_lived_row(&r);
}

/// The forks a `forkserver` workload has made so far (it prints them on SIGUSR1).
fn forks_so_far(workload: &Workload, stdout: &mut impl std::io::BufRead) -> u64 {
    workload.signal(libc::SIGUSR1);
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read the fork count");
    line.trim()
        .strip_prefix("forks ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a fork count: {line:?}"))
}

/// A `forkserver` at 500 forks a second profiled for `secs` seconds with `--report`;
/// `halfway` runs in the middle of the window. The report and the forks made in the window.
fn capture_fork_server(name: &str, secs: u64, halfway: impl FnOnce()) -> (serde_json::Value, u64) {
    let rate = 500u32;
    let mut workload = Workload::spawn(Build::NoFramePointers, &["forkserver", &rate.to_string()]);
    let mut stdout = std::io::BufReader::new(workload.child.stdout.take().expect("stdout"));
    let out = outputs(name);
    let report = scratch_dir().join(format!("{name}.json"));
    let pid = workload.pid().to_string();
    let secs_arg = secs.to_string();
    let mut args = capture_args(&pid, &secs_arg, &out);
    args.extend(["--report", report.to_str().unwrap()]);
    let capturing = Capturing::start(&args);
    let opened = Instant::now();
    let forks_at_start = forks_so_far(&workload, &mut stdout);
    std::thread::sleep(Duration::from_secs(secs / 2));
    halfway();
    std::thread::sleep(Duration::from_secs(secs).saturating_sub(opened.elapsed()));
    let forks = forks_so_far(&workload, &mut stdout) - forks_at_start;
    let result = capturing.finish();
    assert_success(&result);
    let r = json_report(&report);
    let capture = &r["capture"];
    eprintln!(
        "{forks} forks in {secs} s, {} processes in the report; lost_total {} {}; tables at \
         the end {}",
        r["processes"].as_array().unwrap().len(),
        capture["lost_total"],
        capture["lost"],
        capture["tables_at_end"]
    );
    assert_eq!(capture["lost_total"], 0, "losses: {}", capture["lost"]);
    for (name, value) in capture["counters"].as_object().unwrap() {
        if name.ends_with("_full") || name.ends_with("_lost") || name.ends_with("_failed") {
            assert_eq!(value, 0, "{name}");
        }
    }
    // Finished processes leave the kernel's tables within a tick or two: at ~500 forks a
    // second that is a few hundred entries, not the thousands that came and went.
    let procs = capture["tables_at_end"]["PROCS"].as_u64().unwrap();
    assert!(
        procs < 1_000,
        "{procs} process entries left after {forks} forks"
    );
    (r, forks)
}

/// Request handlers in the report forked during the capture whose pid passes `keep`.
fn handlers(r: &serde_json::Value, keep: impl Fn(&serde_json::Value) -> bool) -> u64 {
    r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "handler" && !p["forked_at_s"].is_null() && keep(p))
        .count() as u64
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_fork_per_request_server_loses_nothing() {
    require_root();
    let _serial = serial();
    let (r, forks) = capture_fork_server("forkserver", 30, || {});
    let seen = handlers(&r, |_| true);
    // Each named `handler` too, though most are reaped before a tick reads their name again.
    assert!(
        seen as f64 >= 0.9 * forks as f64,
        "{seen} handler processes seen of {forks} forked"
    );
}

/// `/proc/sys/kernel/ns_last_pid`: the pid this pid namespace handed out last. Writing it
/// makes the next forks take the pids after it again, free ones first (CRIU's knob).
const LAST_PID: &str = "/proc/sys/kernel/ns_last_pid";

fn last_pid() -> Option<u32> {
    std::fs::read_to_string(LAST_PID).ok()?.trim().parse().ok()
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_fork_per_request_server_that_reuses_pids_loses_nothing() {
    require_root();
    let _serial = serial();
    let Some(first) = last_pid() else {
        eprintln!("skipping: {LAST_PID} cannot be read (a kernel without checkpoint/restore)");
        return;
    };
    // Halfway, the next forks are sent back to the pids the first half used: each reused
    // pid names a new process, whose entries must be freed like the first's (500 forks a
    // second go through the default pid_max of 32 768 in about a minute; a set that kept
    // the first process of a pid filled the process table and 80 MiB of mapping tables in
    // 90 s, losing 17 557 events).
    let mut reused_from = 0;
    let (r, forks) = capture_fork_server("forkserver-reused", 20, || {
        reused_from = last_pid().expect("read ns_last_pid");
        std::fs::write(LAST_PID, first.to_string()).expect("write ns_last_pid");
    });
    // Handlers of the second half under pids of the first half: the report keeps the last
    // process of each pid.
    // The first half's pids, wrapped past pid_max when the suite had used pids up to it.
    let (first, reused_from) = (u64::from(first), u64::from(reused_from));
    let first_half = |pid: u64| {
        if reused_from >= first {
            pid > first && pid <= reused_from
        } else {
            pid > first || pid <= reused_from
        }
    };
    let reused = handlers(&r, |p| {
        let pid = p["pid"].as_u64().unwrap();
        first_half(pid) && p["forked_at_s"].as_f64() >= Some(10.0)
    });
    eprintln!("{reused} processes forked under pids of the first half");
    assert!(
        reused as f64 >= 0.3 * forks as f64,
        "only {reused} of {forks} forks reused a pid"
    );
}

/// Every request thread is accounted for its own short life, never for the window.
fn check_request_lives(folded: &Path) {
    let mut per_tid: std::collections::HashMap<String, u64> = Default::default();
    for line in read_folded(folded) {
        if line.frames[1].starts_with("req-") {
            *per_tid.entry(line.frames[1].clone()).or_default() += line.count;
        }
    }
    let mut lives: Vec<u64> = per_tid.into_values().collect();
    lives.sort_unstable();
    let median = lives[lives.len() / 2];
    assert!(
        (2_000..20_000).contains(&median),
        "median request thread life {median} µs (each sleeps 2 ms and works 0.2 ms)"
    );
    let longest = *lives.last().unwrap();
    assert!(
        longest < 2_000_000,
        "a request thread accounted for {longest} µs: more than it lived"
    );
}

/// Readable under churn: the request threads are one row of the thread tables, with their
/// count and median life; the JSON keeps every thread.
fn check_short_lived_row(r: &serde_json::Value) {
    let groups = r["short_lived"].as_array().expect("short_lived");
    let requests = groups
        .iter()
        .max_by_key(|g| g["thread_count"].as_u64())
        .expect("a short-lived group");
    let count = requests["thread_count"].as_u64().unwrap();
    assert!(
        count >= 10_000,
        "{count} request threads in one row: {requests}"
    );
    let median_ms = requests["median_life_ms"].as_f64().unwrap();
    assert!(
        (2.0..20.0).contains(&median_ms),
        "the row's median life {median_ms} ms"
    );
    assert!(r["threads"].as_array().unwrap().len() as u64 > count);
    let verdict = r["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("req pool"),
        "the verdict speaks of the request threads as a group: {verdict}"
    );
}

/// C files the make test compiles.
const BUILD_FILES: usize = 100;
/// Its `make -jN`: the machine's CPUs × 4 on the 2-CPU hosts CI runs on, the bar.
const BUILD_JOBS: &str = "-j8";

/// Writes `BUILD_FILES` one-function C files and a Makefile that compiles each (no link).
fn build_tree(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..BUILD_FILES {
        std::fs::write(
            dir.join(format!("f{i}.c")),
            format!(
                "int f{i}(int x) {{ int s = 0; for (int i = 0; i < x; i++) s += i * {i}; \
                 return s; }}\n"
            ),
        )
        .unwrap();
    }
    std::fs::write(
        dir.join("Makefile"),
        "SRCS := $(wildcard f*.c)\nall: $(SRCS:.c=.o)\n%.o: %.c\n\tcc -O2 -c $< -o $@\n",
    )
    .unwrap();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "o") {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
}

/// Sampled on-CPU time (µs) of `lines`, and the part whose stack has no `[unmapped]` frame
/// and whose innermost user frame is a symbol or a file (`cc1+0x…`), not a bare address.
fn named_share(lines: &[Line]) -> (u64, u64) {
    let placeholders = [
        "[on-cpu: between samples]",
        "[on-cpu: switching in]",
        "[profiler overhead]",
    ];
    let sampled: Vec<&Line> = lines
        .iter()
        .filter(|l| l.state().is_none())
        .filter(|l| !placeholders.contains(&l.frames.last().map_or("", String::as_str)))
        .collect();
    let total = sampled.iter().map(|l| l.count).sum();
    let named = sampled
        .iter()
        .filter(|l| !l.frames.iter().any(|f| f == "[unmapped]"))
        .map(|l| l.count)
        .sum();
    (total, named)
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_build_under_make_is_named_process_by_process() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir().join("make-tree");
    build_tree(&dir);
    // Two spinning processes, not profiled: the build's ticks and drains compete for the
    // CPUs as they do on a loaded CI host, where a one-in-three flake shows (issue 44).
    let _busy = [
        Workload::spawn(Build::FramePointers, &["spin"]),
        Workload::spawn(Build::FramePointers, &["spin"]),
    ];
    let out = outputs("make");
    let report = scratch_dir().join("make.json");
    let result = profile(&[
        "-v",
        "--secs",
        "120",
        "-o",
        out.svg.to_str().unwrap(),
        "--folded",
        out.folded.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
        "--",
        "make",
        BUILD_JOBS,
        "-C",
        dir.to_str().unwrap(),
    ]);
    assert_success(&result);
    let stderr = String::from_utf8_lossy(&result.stderr);
    let post = stderr
        .lines()
        .find(|l| l.contains("post-processing took"))
        .expect("the post-processing time is printed with -v");
    eprintln!("{post}");
    let lines = read_folded(&out.folded);
    let (total, named) = named_share(&lines);
    let share = named as f64 / total as f64;
    // Off-CPU stacks of a process that has just exec'd (or was forked before its parent's
    // table was published) are walked without a table, by frame pointers: what the process's
    // mappings cannot place is cut, not shown.
    let off_cpu = |unmapped: bool| -> u64 {
        lines
            .iter()
            .filter(|l| l.state().is_some())
            .filter(|l| !unmapped || l.frames.iter().any(|f| f == "[unmapped]"))
            .map(|l| l.count)
            .sum()
    };
    let unmapped_share = off_cpu(true) as f64 / off_cpu(false) as f64;
    let r = json_report(&report);
    let processes = r["processes"].as_array().unwrap().len();
    // Every figure first, so a failing run says all it measured.
    eprintln!(
        "{total} µs of sampled on-CPU time, {:.1} % named; {:.2} % of off-CPU time [unmapped]; \
         {processes} processes; lost_total {} {}",
        share * 100.0,
        unmapped_share * 100.0,
        r["capture"]["lost_total"],
        r["capture"]["lost"]
    );
    // Issue 23's goal: 95 %. Measured on 2026-12-02 (2 vCPUs, other builds beside it):
    // 95.0-100 % over ten runs (most 98-99.8 %) since a child forked by an exited gcc
    // driver keeps its mappings, exec stacks keep the old program's and clone3's parent its
    // frame; 84.6-94.4 % before. What is left is the first process of a large new binary
    // (cc1: 478 k rows) sampled before its rows are built (~0.1-0.3 s under this load).
    assert!(share >= 0.95, "only {:.1} % named", share * 100.0);
    assert!(
        lines
            .iter()
            .any(|l| l.frames[0] == "cc1" && l.has("toplev::main(int, char**)")),
        "cc1's own functions are not in the graph"
    );
    // Measured on 2026-12-04 (AMD EPYC, 2 vCPUs, -j2 over 40 files): 0-0.19 % over four
    // runs; 0.9 % before the cut, with a verdict naming `_dl_lookup_symbol_x ← [unmapped]`.
    // CI then failed at 0.55 % (AMD) and 0.81 % (Intel Xeon): a child of make or gcc unwound
    // with its parent's layout (its table uploaded as it exec'd: `clone3 ← [unmapped]`), and
    // a child whose fork record was read after its exec, whose stacks from before it had no
    // names. With both fixed, 0-0.03 % over six runs on the Intel Xeon host
    // (`bench/scripts/make_unmapped.sh target/release/profiler 6`).
    assert!(
        unmapped_share < 0.005,
        "{:.2} % of off-CPU time has an [unmapped] frame",
        unmapped_share * 100.0
    );
    let verdict = r["verdict"].as_str().unwrap();
    assert!(!verdict.contains("[unmapped]"), "verdict: {verdict}");
    // The process table holds the build's churn (issue 44: a `-- CMD` target is one process
    // when the tables are sized, and 66 entries once lost 7 forks of a `-j2` build).
    assert_eq!(r["capture"]["lost_total"], 0, "{}", r["capture"]["lost"]);
    assert!(
        processes >= 3 * BUILD_FILES,
        "{processes} processes (make, {BUILD_FILES} × cc, cc1, as)"
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_process_that_lives_40_ms_is_named_from_its_first_sample() {
    require_root();
    let _serial = serial();
    let workload = workload_binary(Build::NoFramePointers);
    let out = outputs("short-process");
    // A shell forks the workload once the capture runs; it spins 40 ms in cpu_middle and
    // exits, long before any 200 ms tick could read its /proc/PID/maps.
    let script = format!("sleep 0.3; {} exit3 0.04; sleep 0.2", workload.display());
    let result = profile(&[
        "-F",
        "997",
        "-o",
        out.svg.to_str().unwrap(),
        "--folded",
        out.folded.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(
        result.status.code() == Some(0),
        "profiler: {}\n{}",
        result.status,
        String::from_utf8_lossy(&result.stderr)
    );
    let lines: Vec<Line> = read_folded(&out.folded)
        .into_iter()
        .filter(|l| l.frames[0] == "workload" && l.state().is_none())
        .collect();
    let (total, named) = named_share(&lines);
    assert!(total > 0, "no sample of the short-lived process");
    // Every sample named: those the kernel took before the process's table was in (its
    // first milliseconds: ld.so, then `main`) came to user space whole and were unwound
    // there with the same rows (`late.rs`). Before that, 1-3 of them had [unmapped] callers.
    assert!(
        total == named,
        "{} µs of samples with [unmapped] frames: {lines:#?}",
        total - named
    );
    let whole = sum(&lines, |l| l.has_chain(&["main", "cpu_middle", "cpu_leaf"]));
    eprintln!(
        "{total} µs sampled in the 40 ms process, {:.1} % under main → cpu_middle → cpu_leaf",
        whole as f64 * 100.0 / total as f64
    );
    assert!(
        whole as f64 >= 0.8 * total as f64,
        "only {whole} of {total} µs unwound to main → cpu_middle → cpu_leaf"
    );
}
