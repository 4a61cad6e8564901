//! End-to-end, privileged: on-CPU sampling of a workload whose call chain and CPU use are
//! known.

mod common;

use common::*;

const FREQ: u64 = 99;
const SECS: u64 = 5;

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn on_cpu_samples_match_the_frequency_and_carry_the_call_chain() {
    require_root();
    let _serial = serial();
    let workload = Workload::spawn(Build::FramePointers, &["spin"]);
    let out = outputs("on-cpu-spin");
    let pid = workload.pid().to_string();
    let steal_before = machine_steal_s();
    let (result, before, after) = capture_with_schedstat(
        &[
            "--pid",
            &pid,
            "--secs",
            &SECS.to_string(),
            "--freq",
            &FREQ.to_string(),
            "--mode",
            "cpu",
            "-o",
            out.svg.to_str().unwrap(),
            "--folded",
            out.folded.to_str().unwrap(),
        ],
        workload.pid(),
        SECS,
    );
    let lines = read_folded(&out.folded);
    let total = sum(&lines, |_| true);

    let steal = machine_steal_s() - steal_before;

    // (a) One thread busy for the whole capture: frequency × its CPU time (the kernel's
    // account: on a loaded machine that is less than the window) samples, ±10 %. The
    // cpu-clock timer also runs while the hypervisor steals the CPU from the spinner, which
    // the kernel does not charge to it: at most the machine's steal over the window more.
    let tid = workload.pid();
    let cpu = after[&tid].0 - before[&tid].0;
    assert!(cpu > 0.3 * SECS as f64, "the spinner ran only {cpu} s");
    let expected = FREQ as f64 * cpu;
    let most = FREQ as f64 * (cpu + steal.min(SECS as f64));
    assert!(
        total as f64 >= 0.9 * expected && total as f64 <= 1.1 * most,
        "on-CPU samples: {total}, {expected:.0} expected from the kernel's CPU time \
         ({cpu:.3} s), at most {most:.0} with the {steal:.2} s the hypervisor stole"
    );

    // (b) ≥ 95 % of them carry the whole call chain, each frame the caller of the next:
    // process name first, then user frames from the root (__libc_start_call_main from libc's
    // detached debug file, not a mislabelled neighbour).
    let chain = [
        "workload",
        "_start",
        "__libc_start_main_impl",
        "__libc_start_call_main",
        "main",
        "cpu_outer",
        "cpu_middle",
        "cpu_leaf",
    ];
    let with_chain = sum(&lines, |l| l.has_chain(&chain));
    assert!(
        with_chain as f64 >= 0.95 * total as f64,
        "only {with_chain} of {total} samples carry {chain:?}; folded:\n{}",
        std::fs::read_to_string(&out.folded).unwrap()
    );
    assert!(lines.iter().all(|l| l.frames[0] == "workload"));

    check_svg(&out.svg, &pid);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(
        stdout.contains("lost     0"),
        "the summary prints the loss count:\n{stdout}"
    );
}

/// The SVG is well-formed XML and names the spinner's functions, its process and the
/// capture's frequency and losses.
fn check_svg(path: &std::path::Path, pid: &str) {
    let svg = std::fs::read_to_string(path).expect("read the SVG");
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let doc =
        roxmltree::Document::parse_with_options(&svg, opts).expect("the SVG is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    for f in ["cpu_outer", "cpu_middle", "cpu_leaf"] {
        assert!(svg.contains(f), "SVG does not name {f}");
    }
    assert!(svg.contains(&format!("PID {pid}")), "title names the pid");
    assert!(
        svg.contains(&format!("{FREQ} Hz")) && svg.contains("0 lost"),
        "subtitle"
    );
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn per_thread_puts_the_thread_second_and_sees_threads_started_mid_capture() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir();
    let workload = Workload::spawn(Build::FramePointers, &["mixed", dir.to_str().unwrap()]);
    let out = outputs("on-cpu-late-thread");
    let pid = workload.pid().to_string();
    let capturing = Capturing::start(&[
        "--pid",
        &pid,
        "--secs",
        "3",
        "--mode",
        "cpu",
        "--per-thread",
        "-o",
        out.svg.to_str().unwrap(),
        "--folded",
        out.folded.to_str().unwrap(),
    ]);
    // The thread is created while the capture runs.
    std::thread::sleep(std::time::Duration::from_millis(500));
    workload.signal(libc::SIGUSR1);
    let result = capturing.finish();
    assert_success(&result);
    let lines = read_folded(&out.folded);
    let threads = per_thread(&lines);
    assert!(
        threads.keys().any(|t| t == "late"),
        "no samples of the late thread: {threads:?}"
    );
    assert!(
        sum(&lines, |l| l.thread() == "late"
            && l.has_chain(&[
                "clone3",
                "start_thread",
                "late",
                "late_work"
            ]))
            > 20,
        "late thread samples lack late_work"
    );
    for l in &lines {
        let (name, tid) = l.frames[1]
            .rsplit_once('-')
            .expect("thread frame is name-tid");
        assert!(
            !name.is_empty() && tid.parse::<u32>().is_ok(),
            "bad thread frame {:?}",
            l.frames[1]
        );
    }
}

/// What (b) and every other chain check rest on: a frame between two that a chain names, or
/// a missing one, fails it; `has_with_gaps` would let both through.
#[test]
fn a_chain_is_consecutive_frames() {
    let line = |stack: &str| Line {
        frames: stack.split(';').map(str::to_string).collect(),
        count: 1,
    };
    let chain = ["main", "cpu_outer", "cpu_middle", "cpu_leaf"];
    let whole = line("workload;_start;main;cpu_outer;cpu_middle;cpu_leaf;irq_[k]");
    let bogus = line("workload;_start;main;cpu_outer;not_a_caller;cpu_middle;cpu_leaf");
    let skipped = line("workload;_start;main;cpu_middle;cpu_leaf");
    assert!(whole.has_chain(&chain));
    assert!(!bogus.has_chain(&chain) && bogus.has_with_gaps(&chain));
    assert!(!skipped.has_chain(&chain) && !skipped.has_with_gaps(&chain));
    assert!(!whole.has_chain(&["cpu_leaf", "cpu_middle"]));
    assert!(whole.has_chain(&["cpu_leaf"]) && !whole.has_chain(&[]));
}
