//! End-to-end, privileged: a profiler must not slow, break or lie when the target or the
//! machine misbehaves. (Early ends by Ctrl-C, SIGTERM or target exit are in cli_errors.rs.)

mod common;

use std::{
    io::Read,
    os::unix::process::ExitStatusExt as _,
    process::{Command, ExitStatus, Output, Stdio},
};

use common::*;

const WINDOW_US: f64 = 4e6;

fn assert_valid_svg(out: &Outputs) {
    let svg = std::fs::read_to_string(&out.svg).expect("the SVG was written");
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    roxmltree::Document::parse_with_options(&svg, opts).expect("the SVG is well-formed XML");
}

/// Peak RSS of one profiler run, in MiB.
struct PeakRss {
    /// `ru_maxrss` from `wait4` on the profiler's pid.
    profiler: f64,
    /// This process's `VmHWM` when it started the profiler. Linux starts a child's
    /// `ru_maxrss` at the peak RSS of the memory the child replaced at exec, which was this
    /// process's: the profiler's figure is never below this one.
    spawner: f64,
}

/// The `VmHWM` of this process, in MiB.
fn own_vm_hwm_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmHWM:")?
                .trim()
                .strip_suffix(" kB")?
                .parse::<f64>()
                .ok()
        })
        .expect("VmHWM in /proc/self/status")
        / 1024.0
}

/// Runs a `capture` of `workload` and returns, beside its output, the peak RSS of that one
/// profiler process: `wait4` on its pid, not `RUSAGE_CHILDREN`, which holds the largest peak
/// of every child this test process has reaped, whichever test started it.
fn capture_with_peak_rss(
    workload: &Workload,
    name: &str,
    secs: u64,
    extra: &[&str],
) -> (Output, Outputs, PeakRss) {
    let out = outputs(name);
    let pid = workload.pid().to_string();
    let secs = secs.to_string();
    let mut args = capture_args(&pid, &secs, &out);
    args.extend_from_slice(extra);
    let spawner = own_vm_hwm_mib();
    #[expect(
        clippy::zombie_processes,
        reason = "reaped below by wait4, which also returns its resource use"
    )]
    let mut child = Command::new(PROFILER)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the profiler");
    fn drain(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = from.read_to_end(&mut all);
            all
        })
    }
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let pid = i32::try_from(child.id()).expect("pid fits i32");
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 overwrites it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waits for our own child, which nothing else reaps (`child` is never waited
        // on), and writes only the status and usage it is given.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if reaped == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::Interrupted,
            "wait4 on the profiler: {err}"
        );
    }
    let result = Output {
        status: ExitStatus::from_raw(status),
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    };
    assert_success(&result);
    let peak = PeakRss {
        profiler: usage.ru_maxrss as f64 / 1024.0,
        spawner,
    };
    (result, out, peak)
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn thousands_of_short_threads_per_second_keep_maps_and_memory_bounded() {
    require_root();
    let _serial = serial();
    let workload = Workload::spawn(Build::FramePointers, &["churn"]);
    // A thread table far smaller than the threads the target will create.
    let (result, out, peak) = capture_with_peak_rss(
        &workload,
        "churn",
        4,
        &["--mode", "wall", "--max-threads", "2048"],
    );
    assert_valid_svg(&out);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(
        stdout.contains("thread table full (raise --max-threads)"),
        "full thread table not reported:\n{stdout}"
    );
    let lines = read_folded(&out.folded);
    let tids: std::collections::BTreeSet<&str> =
        lines.iter().map(|l| l.frames[1].as_str()).collect();
    assert!(tids.len() > 100, "only {} threads seen", tids.len());
    // The creating thread (its tid is the pid) is accounted for the whole capture.
    let main_frame = format!("workload-{}", workload.pid());
    let main = sum(&lines, |l| l.frames[1] == main_frame);
    assert_close("churning main thread", main as f64, WINDOW_US, 0.03);
    assert!(
        peak.profiler < 200.0,
        "the profiler's peak RSS is {:.0} MiB (at least this test process's {:.0} MiB when it \
         started the profiler)",
        peak.profiler,
        peak.spawner
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn tiny_maps_count_their_drops_and_still_give_valid_output() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir();
    let workload = Workload::spawn(Build::FramePointers, &["mixed", dir.to_str().unwrap()]);
    let (result, out) = capture(
        &workload,
        "tiny-maps",
        4,
        &[
            "--mode",
            "wall",
            "--max-stacks",
            "8",
            "--max-keys",
            "8",
            "--max-threads",
            "4",
        ],
    );
    assert_valid_svg(&out);
    let stdout = String::from_utf8_lossy(&result.stdout);
    let lost_line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("lost"))
        .expect("a lost line");
    assert!(!lost_line.contains("lost     0"), "{lost_line}");
    for flag in ["--max-stacks", "--max-keys", "--max-threads"] {
        assert!(lost_line.contains(flag), "{flag} missing from: {lost_line}");
    }
    // Stacks that did not fit keep their time under a frame that says so. Not asserted on the
    // capture above: with 8 keys, whether a lost stack's key finds room in an epoch depends on
    // which 8 keys came first (CI once saw none). With room for keys, it must be there.
    let (result, out) = capture(
        &workload,
        "tiny-stacks",
        3,
        &["--mode", "wall", "--max-stacks", "8"],
    );
    assert!(result.status.success());
    let lines = read_folded(&out.folded);
    let lost: u64 = lines
        .iter()
        .filter(|l| l.frames.iter().any(|f| f.contains("stack table full")))
        .map(|l| l.count)
        .sum();
    let total: u64 = lines.iter().map(|l| l.count).sum();
    assert!(
        lost > 0 && lost < total,
        "time under a 'stack table full' frame: {lost} of {total}"
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn two_profilers_on_the_same_process_are_both_right() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir();
    let workload = Workload::spawn(Build::FramePointers, &["mixed", dir.to_str().unwrap()]);
    let pid = workload.pid().to_string();
    let a = outputs("twin-a");
    let b = outputs("twin-b");
    let start = |o: &Outputs| {
        std::process::Command::new(PROFILER)
            .args([
                "--pid",
                &pid,
                "--secs",
                "4",
                "--per-thread",
                "--mode",
                "wall",
            ])
            .args([
                "-o",
                o.svg.to_str().unwrap(),
                "--folded",
                o.folded.to_str().unwrap(),
            ])
            .output()
    };
    let (ra, rb) = std::thread::scope(|s| {
        let ha = s.spawn(|| start(&a));
        let hb = s.spawn(|| start(&b));
        (ha.join().expect("join"), hb.join().expect("join"))
    });
    for (result, out) in [(ra.expect("run a"), &a), (rb.expect("run b"), &b)] {
        assert_success(&result);
        let threads = per_thread(&read_folded(&out.folded));
        for name in ["sleeper", "blocked", "spinner-0", "syncer"] {
            let us = *threads
                .get(name)
                .unwrap_or_else(|| panic!("{name} missing: {threads:?}"));
            assert_close(
                &format!("{name} in {}", out.folded.display()),
                us as f64,
                WINDOW_US,
                0.03,
            );
        }
    }
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn broken_elf_files_mapped_by_the_target_do_not_break_the_profiler() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir();
    let workload = Workload::spawn(Build::FramePointers, &["badelf", dir.to_str().unwrap()]);
    let (_, out) = capture(&workload, "badelf", 4, &["--mode", "cpu"]);
    assert_valid_svg(&out);
    let lines = read_folded(&out.folded);
    assert!(
        sum(&lines, |l| l.has_chain(&[
            "__libc_start_call_main",
            "main",
            "cpu_outer",
            "cpu_middle",
            "cpu_leaf"
        ])) > 100
    );
}
