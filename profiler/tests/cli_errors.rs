//! End-to-end: what the user sees when something is wrong, and how a capture ends early.
//! Every refusal is one sentence, a non-zero exit, and comes before any capture starts.

mod common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use common::*;

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A refusal: failed, fast, and a single `profiler: ...` line on stderr.
fn assert_refused(out: &std::process::Output, took: Duration, needle: &str) {
    let err = stderr_of(out);
    assert!(
        !out.status.success(),
        "expected a failure, got success; stderr:\n{err}"
    );
    assert!(
        took < Duration::from_secs(3),
        "refusal took {took:?}: it must come before capturing"
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got:\n{err}");
    assert!(lines[0].starts_with("profiler: "), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in:\n{err}");
}

fn timed(args: &[&str]) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let out = profile(args);
    (out, started.elapsed())
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_pid_that_does_not_exist_is_refused() {
    require_root();
    let (out, took) = timed(&["--pid", "4194303", "--secs", "20"]);
    assert_refused(&out, took, "there is no process with PID 4194303");
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn one_missing_pid_in_a_list_is_named_and_nothing_is_attached() {
    require_root();
    let me = std::process::id().to_string();
    let list = format!("{me},4194302");
    let (out, took) = timed(&["--pid", &list, "--secs", "20"]);
    assert_refused(&out, took, "there is no process with PID 4194302");
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_path_that_is_not_a_cgroup_v2_directory_is_refused() {
    require_root();
    let dir = scratch_dir();
    let (out, took) = timed(&["--cgroup", dir.to_str().unwrap(), "--secs", "20"]);
    assert_refused(&out, took, "is not a cgroup v2 directory");
    let (out, took) = timed(&["--cgroup", "/nonexistent/cgroup", "--secs", "20"]);
    assert_refused(&out, took, "is not a cgroup v2 directory");
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_command_that_does_not_exist_is_refused_before_attaching() {
    require_root();
    let (out, took) = timed(&["--secs", "20", "--", "no-such-command-xyz", "--flag"]);
    assert_refused(&out, took, "command not found: no-such-command-xyz");
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_kernel_thread_is_refused() {
    require_root();
    let (out, took) = timed(&["--pid", "2", "--secs", "20"]);
    assert_refused(&out, took, "kernel thread");
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn an_unwritable_output_is_refused_before_attaching() {
    require_root();
    let me = std::process::id().to_string();
    let (out, took) = timed(&[
        "--pid",
        &me,
        "--secs",
        "20",
        "-o",
        "/nonexistent-dir/graph.svg",
    ]);
    assert_refused(
        &out,
        took,
        "cannot write the flame graph to /nonexistent-dir/graph.svg",
    );
    // A directory cannot be written to, even by root.
    let dir = scratch_dir();
    let (out, took) = timed(&[
        "--pid",
        &me,
        "--secs",
        "20",
        "--folded",
        dir.to_str().unwrap(),
    ]);
    assert_refused(
        &out,
        took,
        &format!("cannot write the folded stacks to {}", dir.display()),
    );
    let (out, took) = timed(&[
        "--pid",
        &me,
        "--secs",
        "20",
        "--pprof",
        "/nonexistent-dir/profile.pb.gz",
    ]);
    assert_refused(
        &out,
        took,
        "cannot write the pprof profile to /nonexistent-dir/profile.pb.gz",
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn without_privilege_the_user_is_told_to_use_root() {
    require_root();
    let me = std::process::id().to_string();
    let started = Instant::now();
    // Drop to nobody with no capabilities, as an ordinary user would run it.
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(PROFILER)
        .args(["--pid", &me, "--secs", "20", "-o", "/tmp/never-written.svg"])
        .output()
        .expect("run setpriv (util-linux)");
    assert_refused(&out, started.elapsed(), "needs root");
}

/// A value the parser refuses: clap's usage error (exit code 2, not the 1 of a failure after
/// parsing), before anything is loaded, its first line naming the flag and why.
fn assert_parser_refused(args: &[&str], first_line: &str) {
    let (out, took) = timed(args);
    let err = stderr_of(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: {}; stderr:\n{err}",
        out.status
    );
    assert!(
        took < Duration::from_secs(3),
        "{args:?}: refusal took {took:?}"
    );
    assert_eq!(
        err.lines().next(),
        Some(first_line),
        "{args:?}: stderr:\n{err}"
    );
    // Then only clap's hint: no loader or kernel error behind it.
    let rest: Vec<&str> = err.lines().skip(1).filter(|l| !l.is_empty()).collect();
    assert_eq!(
        rest,
        ["For more information, try '--help'."],
        "{args:?}: {err}"
    );
}

#[test]
fn bad_arguments_are_refused_by_the_parser() {
    let me = std::process::id().to_string();
    assert_parser_refused(
        &["--pid", &me, "--freq", "0"],
        "error: invalid value '0' for '--freq <HZ>': 0 is not in 1..=10000",
    );
    assert_parser_refused(
        &["--pid", &me, "--secs", "0"],
        "error: invalid value '0' for '--secs <SECONDS>': 0 is not in 1..=86400",
    );
    // The kernel would refuse maps of 0 entries, but only once loading had begun.
    for flag in ["--max-stacks", "--max-keys", "--max-threads"] {
        assert_parser_refused(
            &["--pid", &me, flag, "0"],
            &format!(
                "error: invalid value '0' for '{flag} <N>': an in-kernel table needs at least 1 entry"
            ),
        );
    }
    assert_parser_refused(
        &["--pid", &me, "--max-block-us", "0"],
        "error: invalid value '0' for '--max-block-us <US>': 0 would ignore every wait; \
         leave the flag out for no limit",
    );
}

/// Starts a capture of a spinning workload and returns once its window is open.
fn start_capture(name: &str, secs: &str) -> (Workload, Capturing, Outputs) {
    let workload = Workload::spawn(Build::FramePointers, &["spin"]);
    let out = outputs(name);
    let pid = workload.pid().to_string();
    let capturing = Capturing::start(&[
        "--pid",
        &pid,
        "--secs",
        secs,
        "--mode",
        "wall",
        "-o",
        out.svg.to_str().unwrap(),
        "--folded",
        out.folded.to_str().unwrap(),
    ]);
    (workload, capturing, out)
}

fn assert_output_written(out: &Outputs) {
    let svg = std::fs::read_to_string(&out.svg).expect("the SVG was written");
    assert!(svg.trim_end().ends_with("</svg>"));
    let lines = read_folded(&out.folded);
    assert!(
        sum(&lines, |l| l.has("cpu_leaf")) > 0,
        "the capture so far is in the output"
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_target_that_exits_mid_capture_ends_it_early_with_output() {
    require_root();
    let _serial = serial();
    let (mut workload, capturing, out) = start_capture("target-exits", "30");
    std::thread::sleep(Duration::from_millis(1000));
    let started = Instant::now();
    workload.child.kill().expect("kill the workload");
    let _ = workload.child.wait();
    let result = capturing.finish();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the capture did not end with the target"
    );
    assert_success(&result);
    assert!(
        stderr_of(&result).contains("the target exited"),
        "{}",
        stderr_of(&result)
    );
    assert_output_written(&out);
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn sigint_and_sigterm_end_the_capture_with_output() {
    require_root();
    let _serial = serial();
    for (sig, word) in [(libc::SIGINT, "Ctrl-C"), (libc::SIGTERM, "SIGTERM")] {
        let (_workload, capturing, out) = start_capture(&format!("signal-{sig}"), "30");
        std::thread::sleep(Duration::from_millis(1000));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(capturing.pid() as i32, sig) };
        let started = Instant::now();
        let result = capturing.finish();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_success(&result);
        assert!(stderr_of(&result).contains(word), "{}", stderr_of(&result));
        assert_output_written(&out);
    }
}
