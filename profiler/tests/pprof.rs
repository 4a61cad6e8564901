//! `--pprof` files read back by the real `go tool pprof` (Debian's golang-go): `-top` totals
//! within 1 % of the JSON report's, the `state` label filter (`-tagfocus`) giving the report's
//! total of that state, and a known call chain in `-traces`. On the golden captures through
//! `profiler replay` (no root), and on a capture of the test workload (root).

mod common;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use common::*;
use serde_json::Value;

/// Runs `go tool pprof ARGS FILE` and returns what it printed.
fn go_pprof(args: &[&str], file: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        // Its own temporary files, not the caller's home.
        .env("PPROF_TMPDIR", scratch_dir())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `go tool pprof` ({e}): install Debian's golang-go \
                 (`apt-get install golang-go`; `cargo xtask test` installs it when missing)"
            )
        });
    assert!(
        out.status.success(),
        "go tool pprof {args:?} {} failed:\n{}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("pprof prints UTF-8")
}

/// `-top -unit=ns` with every node kept: the total of the samples the filters keep
/// ("Showing nodes accounting for 1519947015ns, 13.59% of 11183012050ns total") and each
/// function's flat value.
struct Top {
    kept: f64,
    flat: BTreeMap<String, f64>,
}

fn top(args: &[&str], file: &Path) -> Top {
    let mut all = vec!["-top", "-unit=ns", "-nodefraction=0", "-nodecount=1000000"];
    all.extend_from_slice(args);
    let text = go_pprof(&all, file);
    let kept = text
        .lines()
        .find_map(|l| {
            number(
                l.strip_prefix("Showing nodes accounting for ")?
                    .split(',')
                    .next()?,
            )
        })
        .unwrap_or_else(|| panic!("no total in -top:\n{text}"));
    let rows = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"));
    let flat = rows
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            // flat flat% sum% cum cum% name (a name may contain spaces)
            (cols.len() >= 6).then(|| (cols[5..].join(" "), number(cols[0]).unwrap_or(0.0)))
        })
        .collect();
    Top { kept, flat }
}

/// A value as `-unit=ns` prints it (`123ns`, or `0`), or a count.
fn number(s: &str) -> Option<f64> {
    s.trim().trim_end_matches("ns").parse().ok()
}

/// One sample of `-traces`: its labels and its frames, leaf first.
#[derive(Debug)]
struct Trace {
    labels: BTreeMap<String, String>,
    frames: Vec<String>,
}

/// `-traces` prints each sample as label lines (`%10s:  %s`) and frame lines (`%10s   %s`:
/// the value before the leaf only), between lines of dashes.
fn traces(file: &Path) -> Vec<Trace> {
    let text = go_pprof(&["-traces"], file);
    let mut out = Vec::new();
    for block in text.split("-----------+").skip(1) {
        let mut trace = Trace {
            labels: BTreeMap::new(),
            frames: Vec::new(),
        };
        for line in block.lines().skip(1) {
            match (line.get(..10), line.get(10..13), line.get(13..)) {
                (Some(key), Some(sep), Some(value)) if sep.starts_with(":  ") => {
                    trace
                        .labels
                        .insert(key.trim().to_string(), format!("{}{value}", &sep[3..]));
                }
                (Some(_), Some("   "), Some(frame)) => trace.frames.push(frame.to_string()),
                _ => {}
            }
        }
        out.push(trace);
    }
    assert!(!out.is_empty(), "no traces:\n{text}");
    out
}

/// What the JSON report says, in nanoseconds.
struct ReportTotals {
    mode: String,
    samples: f64,
    /// Per state label of the pprof file: on-cpu, sleep, io, runqueue, other.
    by_state: BTreeMap<&'static str, f64>,
    top_function: Option<(String, f64)>,
}

fn report_totals(report: &Value) -> ReportTotals {
    let capture = &report["capture"];
    let mode = capture["mode"].as_str().expect("mode").to_string();
    let window_ns = capture["duration_s"].as_f64().expect("duration") * 1e9;
    let mut by_state: BTreeMap<&'static str, f64> = BTreeMap::new();
    for t in report["threads"].as_array().expect("threads") {
        let f = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("thread {k}"));
        // Off mode records waits only: its on-CPU time is in the thread table, not in stacks.
        if mode != "off" {
            *by_state.entry("on-cpu").or_default() += f("on_cpu_s") * 1e9;
        }
        if mode != "cpu" {
            for (state, key) in [
                ("runqueue", "runnable_pct"),
                ("sleep", "sleep_pct"),
                ("io", "io_pct"),
                ("other", "other_pct"),
            ] {
                *by_state.entry(state).or_default() += f(key) / 100.0 * window_ns;
            }
        }
    }
    let top_function = report["top_on_cpu_functions"]
        .as_array()
        .and_then(|f| f.first())
        .map(|f| {
            (
                f["function"].as_str().expect("function").to_string(),
                f["self_s"].as_f64().expect("self_s") * 1e9,
            )
        });
    ReportTotals {
        mode,
        samples: capture["samples"].as_f64().expect("samples"),
        by_state,
        top_function,
    }
}

/// `value` is within 1 % of `expected`, or within what the report's rounding can hide
/// (`slack_ns`: its percentages have one decimal, its seconds three).
fn assert_matches(what: &str, value: f64, expected: f64, slack_ns: f64) {
    let off = (value - expected).abs();
    eprintln!(
        "{what}: pprof {value:.0}, report {expected:.0} ({:+.3} %)",
        100.0 * (value - expected) / expected.max(1.0)
    );
    assert!(
        off <= 0.01 * expected || off <= slack_ns,
        "{what}: pprof says {value:.0}, the report {expected:.0} ({:.2} % off)",
        100.0 * off / expected.max(1.0)
    );
}

/// Reads `pprof_file` with `go tool pprof` and checks it against the JSON report: the
/// total, the total of one state through `-tagfocus`, the report's top on-CPU function, and
/// `chain` (caller → callee) in some trace of a thread named `thread`.
fn check_against_report(name: &str, pprof_file: &Path, report: &Value, chain: [&str; 2]) {
    let expected = report_totals(report);
    let threads = report["threads"].as_array().expect("threads").len() as f64;
    // One decimal of a percentage of the window, per thread and state.
    let window_ns = report["capture"]["duration_s"].as_f64().unwrap() * 1e9;
    let slack = threads * 4.0 * 0.0005 * window_ns;

    let all = top(&[], pprof_file);
    let total: f64 = expected.by_state.values().sum();
    assert_matches(&format!("{name}: total"), all.kept, total, slack);

    // The state filter: io if the capture has any worth checking, else sleep (on-cpu in
    // --mode cpu, where every sample is on the CPU).
    let state = if expected.mode == "cpu" {
        "on-cpu"
    } else if expected.by_state.get("io").copied().unwrap_or(0.0) > 0.05 * total {
        "io"
    } else {
        "sleep"
    };
    let focused = top(&[&format!("-tagfocus=state={state}")], pprof_file);
    assert_matches(
        &format!("{name}: -tagfocus=state={state}"),
        focused.kept,
        expected.by_state[state],
        slack,
    );
    assert!(focused.kept > 0.0, "{name}: nothing in state {state}");

    if expected.mode == "cpu" {
        let samples = top(&["-sample_index=samples"], pprof_file);
        assert_matches(
            &format!("{name}: samples"),
            samples.kept,
            expected.samples,
            0.0,
        );
    }

    // The report's top on-CPU function, self time = flat.
    if let Some((function, self_ns)) = &expected.top_function {
        let flat = all.flat.get(function).copied().unwrap_or_else(|| {
            panic!(
                "{name}: {function} is not in -top: {:?}",
                all.flat.keys().collect::<Vec<_>>()
            )
        });
        assert_matches(&format!("{name}: flat {function}"), flat, *self_ns, 0.5e6);
    }

    let traces = traces(pprof_file);
    let [caller, callee] = chain;
    let found = traces.iter().any(|t| {
        t.frames
            .windows(2)
            .any(|w| w[0] == callee && w[1] == caller)
            && t.labels.contains_key("thread")
            && t.labels.contains_key("tid")
            && t.labels.get("pid") == Some(&report["capture"]["pid"].to_string())
            && t.labels.contains_key("state")
    });
    assert!(
        found,
        "{name}: no trace with {caller} → {callee} and the thread, tid, pid and state labels: {:#?}",
        &traces[..traces.len().min(5)]
    );
    // Kernel frames are marked, off-CPU stacks end in their state.
    for t in &traces {
        if let Some(state) = t.labels.get("state")
            && state != "on-cpu"
        {
            assert_eq!(
                t.frames.first(),
                Some(&format!("[off-cpu:{state}]")),
                "{t:#?}"
            );
        }
    }
}

/// The golden captures live with the render stage's golden tests (profiler-core).
fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiler-core/tests/golden")
}

#[test]
#[ignore = "needs `go tool pprof` (Debian's golang-go; cargo xtask test installs it and runs this)"]
fn golden_captures_read_back_by_go_tool_pprof_match_their_reports() {
    let cases = [
        ("accuracy-cpu", ["spin_loop", "spin_work"]),
        ("latency-wall", ["sleeper_loop", "sleep_20ms"]),
        ("mixed-off", ["sleeper_loop", "sleep_20ms"]),
    ];
    for (name, chain) in cases {
        let dir = tempfile::tempdir().expect("temp dir");
        let pprof = dir.path().join(format!("{name}.pb.gz"));
        let report = dir.path().join(format!("{name}.json"));
        let out = Command::new(PROFILER)
            .arg("replay")
            .arg(golden_dir().join(format!("{name}.capture.json.gz")))
            .arg("-o")
            .arg(dir.path().join("graph.svg"))
            .arg("--report")
            .arg(&report)
            .arg("--pprof")
            .arg(&pprof)
            .output()
            .expect("run profiler replay");
        assert_success(&out);
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(&report).expect("read the report"))
                .expect("the report is JSON");
        check_against_report(name, &pprof, &report, chain);
    }
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_wall_capture_read_back_by_go_tool_pprof_matches_its_report() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir();
    let workload = Workload::spawn(Build::FramePointers, &["mixed", dir.to_str().unwrap()]);
    let out = outputs("pprof-mixed");
    let pprof = out.svg.with_extension("pb.gz");
    let report = out.svg.with_extension("json");
    let _ = std::fs::remove_file(&pprof);
    capture(
        &workload,
        "pprof-mixed",
        5,
        &[
            "--mode",
            "wall",
            "--report",
            report.to_str().unwrap(),
            "--pprof",
            pprof.to_str().unwrap(),
        ],
    );
    drop(workload);
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("read the report"))
            .expect("the report is JSON");
    check_against_report(
        "mixed, wall",
        &pprof,
        &report,
        ["sleeper_loop", "sleep_20ms"],
    );
    // The syncer's fsync waits are its io state.
    let traces = traces(&pprof);
    assert!(
        traces
            .iter()
            .any(|t| t.labels.get("state").map(String::as_str) == Some("io")
                && t.labels.get("thread").map(String::as_str) == Some("syncer")
                && t.frames.windows(2).any(|w| w[1] == "write_and_sync")),
        "no io trace of the syncer under write_and_sync"
    );
    // User frames lie in their files' mappings, with the build IDs the files' ELF notes hold.
    let raw = go_pprof(&["-raw"], &pprof);
    let exe = workload_binary(Build::FramePointers);
    let data = std::fs::read(&exe).expect("read the workload binary");
    let id: String = object::Object::build_id(&object::File::parse(&*data).expect("an ELF file"))
        .expect("its notes")
        .expect("gcc gives it a build ID")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mappings = raw
        .split("Mappings")
        .nth(1)
        .expect("-raw lists the mappings");
    assert!(
        mappings
            .lines()
            .any(|l| l.contains(exe.to_str().unwrap()) && l.contains(&id)),
        "no mapping of {} with build ID {id}:\n{mappings}",
        exe.display()
    );
    assert!(
        mappings.lines().any(|l| l.contains("/libc.so.6")),
        "no mapping of libc:\n{mappings}"
    );
}

#[test]
fn an_unwritable_pprof_path_is_refused_before_anything_else() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(PROFILER)
        .arg("replay")
        .arg(golden_dir().join("latency-wall.capture.json.gz"))
        .arg("-o")
        .arg(dir.path().join("graph.svg"))
        .arg("--pprof")
        .arg(dir.path().join("no/such/dir/x.pb.gz"))
        .output()
        .expect("run profiler replay");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pprof"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!dir.path().join("graph.svg").exists());
}
