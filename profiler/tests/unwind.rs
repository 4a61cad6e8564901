//! End-to-end, privileged: user stacks unwound from `.eh_frame` in the kernel, on and off the
//! CPU, for code built without frame pointers (what distributions ship), and the callers that
//! frame-pointer walking loses.

mod common;

use common::*;

/// Share of `lines` (by count) whose stacks hold `chain` as consecutive frames.
fn share_with(lines: &[&Line], chain: &[&str]) -> f64 {
    share_where(lines, |l| l.has_chain(chain))
}

/// Share of `lines` (by count) that `keep` keeps.
fn share_where(lines: &[&Line], keep: impl Fn(&Line) -> bool) -> f64 {
    let total: u64 = lines.iter().map(|l| l.count).sum();
    let with: u64 = lines.iter().filter(|l| keep(l)).map(|l| l.count).sum();
    assert!(total > 0, "no lines to check");
    with as f64 / total as f64
}

// glibc 2.36 (Debian 12), the libc these tests run against: `main` is called by
// `__libc_start_call_main`, and `nanosleep` is `__nanosleep`, which calls `__clock_nanosleep`.
// Both are real frames, so the chains below name them.

fn capture_build(build: Build, workload_args: &[&str], name: &str, extra: &[&str]) -> Vec<Line> {
    let workload = Workload::spawn(build, workload_args);
    let (_, out) = capture(&workload, name, 4, extra);
    read_folded(&out.folded)
}

fn dump(lines: &[&Line]) -> String {
    lines
        .iter()
        .map(|l| format!("{} {}", l.frames.join(";"), l.count))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn without_frame_pointers_every_cpu_sample_has_its_whole_call_chain() {
    require_root();
    let _serial = serial();
    let lines = capture_build(
        Build::NoFramePointers,
        &["spin"],
        "unwind-spin-nofp",
        &["--mode", "cpu"],
    );
    let all: Vec<&Line> = lines.iter().collect();
    let chain = [
        "_start",
        "__libc_start_main_impl",
        "__libc_start_call_main",
        "main",
        "cpu_outer",
        "cpu_middle",
        "cpu_leaf",
    ];
    let share = share_with(&all, &chain);
    assert!(
        share >= 0.99,
        "{:.1} % of samples carry {chain:?}:\n{}",
        share * 100.0,
        dump(&all)
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn without_frame_pointers_every_wait_has_its_whole_call_chain() {
    require_root();
    let _serial = serial();
    let lines = capture_build(
        Build::NoFramePointers,
        &["latency"],
        "unwind-latency-nofp",
        &["--mode", "wall"],
    );
    // From the thread's start through its own functions into the blocking libc call.
    for (thread, chain) in [
        (
            "sleeper",
            &[
                "clone3",
                "start_thread",
                "sleeper",
                "sleeper_loop",
                "sleep_20ms",
                "__nanosleep",
                "__clock_nanosleep",
            ][..],
        ),
        (
            "reader",
            &[
                "clone3",
                "start_thread",
                "pipe_reader",
                "pipe_reader_loop",
                "read_token",
                "__libc_read",
            ][..],
        ),
        (
            "writer",
            &["clone3", "start_thread", "pipe_writer", "pipe_writer_loop"][..],
        ),
        (
            "workload",
            &[
                "_start",
                "__libc_start_main_impl",
                "__libc_start_call_main",
                "main",
                "__libc_pause",
            ][..],
        ),
    ] {
        let off: Vec<&Line> = lines
            .iter()
            .filter(|l| l.thread() == thread && l.state().is_some())
            .collect();
        let share = share_with(&off, chain);
        assert!(
            share >= 0.99,
            "{thread}: {:.2} % of off-CPU time under {chain:?}:\n{}",
            share * 100.0,
            dump(&off)
        );
    }
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn dwarf_unwinding_finds_the_caller_that_frame_pointers_skip() {
    require_root();
    let _serial = serial();
    // Built with frame pointers, but libc has none: walking frame pointers from inside
    // nanosleep skips the function that called it (and `__nanosleep`).
    let chain = [
        "sleeper_loop",
        "sleep_20ms",
        "__nanosleep",
        "__clock_nanosleep",
    ];
    let sleeper_off = |lines: &[Line]| -> Vec<Line> {
        lines
            .iter()
            .filter(|l| l.thread() == "sleeper" && l.state() == Some("sleep"))
            .cloned()
            .collect()
    };
    let fp = sleeper_off(&capture_build(
        Build::FramePointers,
        &["latency"],
        "unwind-fp",
        &["--mode", "off", "--unwind", "fp"],
    ));
    let fp_refs: Vec<&Line> = fp.iter().collect();
    assert!(
        share_where(&fp_refs, |l| l.has("sleep_20ms")) < 0.01,
        "frame pointers unexpectedly found sleep_20ms:\n{}",
        dump(&fp_refs)
    );
    assert!(
        share_with(&fp_refs, &["sleeper_loop", "__clock_nanosleep"]) > 0.99,
        "frame pointers did not go from __clock_nanosleep straight to sleeper_loop:\n{}",
        dump(&fp_refs)
    );

    let dwarf = sleeper_off(&capture_build(
        Build::FramePointers,
        &["latency"],
        "unwind-dwarf",
        &["--mode", "off"],
    ));
    let dwarf_refs: Vec<&Line> = dwarf.iter().collect();
    let share = share_with(&dwarf_refs, &chain);
    assert!(
        share >= 0.99,
        "{:.2} % with sleep_20ms:\n{}",
        share * 100.0,
        dump(&dwarf_refs)
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_library_loaded_during_the_capture_is_unwound_from_its_eh_frame() {
    require_root();
    let _serial = serial();
    let lib = plugin_library();
    let workload = Workload::spawn(Build::FramePointers, &["dlopen", lib.to_str().unwrap()]);
    let out = outputs("unwind-dlopen");
    let pid = workload.pid().to_string();
    let capturing = Capturing::start(&[
        "--pid",
        &pid,
        "--secs",
        "4",
        "--per-thread",
        "--mode",
        "off",
        "-o",
        out.svg.to_str().unwrap(),
        "--folded",
        out.folded.to_str().unwrap(),
    ]);
    workload.signal(libc::SIGUSR1);
    let result = capturing.finish();
    assert_success(&result);
    let lines = read_folded(&out.folded);
    let plugin: Vec<&Line> = lines
        .iter()
        .filter(|l| l.thread() == "plugin" && l.state() == Some("sleep"))
        .collect();
    // plugin_nap calls nanosleep from a library without frame pointers: only its .eh_frame
    // rows, uploaded when the library appeared, find it. The first waits may come before the
    // next mapping refresh.
    let share = share_with(
        &plugin,
        &[
            "start_thread",
            "plugin",
            "plugin_loop",
            "plugin_nap",
            "__nanosleep",
            "__clock_nanosleep",
        ],
    );
    assert!(
        share >= 0.85,
        "{:.1} % of the plugin's sleep under plugin_nap:\n{}",
        share * 100.0,
        dump(&plugin)
    );
}

/// A thread that stops at the same place (same ip, same sp) from two callers: the kernel
/// recognises a repeated stop from a memo of the words its last unwind used, and those
/// include the return address into the caller, so each wait still lands under its own caller.
/// With frame pointers the frames are based on rbp, so the memo must check it too.
#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_repeated_stop_is_recognised_only_with_the_same_callers() {
    require_root();
    let _serial = serial();
    for (build, name) in [
        (Build::NoFramePointers, "unwind-callers-nofp"),
        (Build::FramePointers, "unwind-callers-fp"),
    ] {
        let workload = Workload::spawn(build, &["callers"]);
        let (result, out) = capture(&workload, name, 4, &["--mode", "off", "-v"]);
        let lines = read_folded(&out.folded);
        let naps: Vec<&Line> = lines
            .iter()
            .filter(|l| l.state() == Some("sleep") && l.has("nap"))
            .collect();
        let from_a = share_with(
            &naps,
            &[
                "main",
                "callers_loop",
                "nap_from_a",
                "nap",
                "__nanosleep",
                "__clock_nanosleep",
            ],
        );
        let from_b = share_with(
            &naps,
            &[
                "main",
                "callers_loop",
                "nap_from_b",
                "nap",
                "__nanosleep",
                "__clock_nanosleep",
            ],
        );
        // One nap in four comes from nap_from_a.
        assert!(
            (0.20..=0.30).contains(&from_a) && from_a + from_b >= 0.99,
            "{name}: {:.1} % of the naps from nap_from_a, {:.1} % from nap_from_b:\n{}",
            from_a * 100.0,
            from_b * 100.0,
            dump(&naps)
        );
        // The memo was in play: the stops from nap_from_b that follow one from nap_from_b (half
        // of all stops) were recognised, not walked.
        let stderr = String::from_utf8_lossy(&result.stderr);
        let counter = |name: &str| -> u64 {
            stderr
                .lines()
                .find_map(|l| l.split_once(&format!("counter {name}: "))?.1.parse().ok())
                .unwrap_or_else(|| panic!("no {name} counter in:\n{stderr}"))
        };
        let (hits, misses) = (counter("UnwindMemoHits"), counter("UnwindMemoMisses"));
        assert!(
            hits * 3 > hits + misses,
            "{name}: {hits} memo hits, {misses} misses"
        );
    }
}
