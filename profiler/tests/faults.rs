//! End-to-end, privileged: a profiler must not slow, break or lie when the target or the
//! machine misbehaves. (Early ends by Ctrl-C, SIGTERM or target exit are in cli_errors.rs.)

mod common;

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

/// Peak RSS of the children this test process has waited for, in MiB.
fn children_peak_rss_mib() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    usage.ru_maxrss as f64 / 1024.0
}

#[test]
fn thousands_of_short_threads_per_second_keep_maps_and_memory_bounded() {
    require_root();
    let _serial = serial();
    let workload = Workload::spawn(Build::FramePointers, &["churn"]);
    // A thread table far smaller than the threads the target will create.
    let (result, out) = capture(
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
        children_peak_rss_mib() < 200.0,
        "peak RSS {} MiB",
        children_peak_rss_mib()
    );
}

#[test]
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
    // Stacks that did not fit keep their time under a frame that says so.
    let lines = read_folded(&out.folded);
    assert!(
        lines
            .iter()
            .any(|l| l.frames.iter().any(|f| f.contains("stack table full")))
    );
}

#[test]
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
fn broken_elf_files_mapped_by_the_target_do_not_break_the_profiler() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir();
    let workload = Workload::spawn(Build::FramePointers, &["badelf", dir.to_str().unwrap()]);
    let (_, out) = capture(&workload, "badelf", 4, &["--mode", "cpu"]);
    assert_valid_svg(&out);
    let lines = read_folded(&out.folded);
    assert!(
        sum(&lines, |l| l.has_in_order(&[
            "main",
            "cpu_outer",
            "cpu_middle",
            "cpu_leaf"
        ])) > 100
    );
}
