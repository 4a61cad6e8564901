//! End-to-end, privileged: the timeline of a program whose events happen at known times
//! (tests/fixtures/stalls.c: a 300 ms stall every 2 s in one thread beside a steady one, each
//! stall's true start and end written by the program itself on CLOCK_MONOTONIC, the
//! profiler's clock). The stalls must be in the JSON report's intervals and in the Perfetto
//! trace (read back with Perfetto's own protos) within 5 ms of their true start and length,
//! the report must say when the stall site's time concentrated, and a replay of the capture
//! cut to the inside of one stall must hold the stall's stack and none of the work around it.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use common::*;
use serde_json::Value;

/// How far a recorded start or length may be from the truth.
const TOLERANCE_S: f64 = 0.005;
const STALLS: usize = 3;

/// Builds tests/fixtures/stalls.c once per test binary.
fn stalls_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            build_fixture(
                "stalls.c",
                "stalls",
                &[
                    "-O1",
                    "-g",
                    "-fno-omit-frame-pointer",
                    "-fno-inline",
                    "-pthread",
                    "-Wall",
                ],
            )
        })
        .clone()
}

/// One capture of the fixture with every timeline output.
struct Run {
    dir: PathBuf,
    /// (start, end) of each stall, CLOCK_MONOTONIC ns, as the program measured them.
    stalls: Vec<(u64, u64)>,
    report: Value,
    capture: PathBuf,
    trace: PathBuf,
}

fn run() -> Run {
    let dir = scratch_dir().join(format!("timeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let truth = dir.join("stalls.txt");
    let (report, capture, trace) = (
        dir.join("report.json"),
        dir.join("capture.json.gz"),
        dir.join("trace.pftrace"),
    );
    let bin = stalls_binary();
    let out = profile(&[
        "--per-thread",
        "-o",
        dir.join("all.svg").to_str().unwrap(),
        "--folded",
        dir.join("all.folded").to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
        "--save",
        capture.to_str().unwrap(),
        "--timeline",
        trace.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
        truth.to_str().unwrap(),
        &STALLS.to_string(),
    ]);
    assert_success(&out);
    let stalls: Vec<(u64, u64)> = std::fs::read_to_string(&truth)
        .expect("the fixture's stall times")
        .lines()
        .map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .map(|v| v.parse().unwrap())
                .collect();
            (f[0], f[1])
        })
        .collect();
    assert_eq!(stalls.len(), STALLS, "the fixture ran all its stalls");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).expect("JSON report");
    Run {
        dir,
        stalls,
        report,
        capture,
        trace,
    }
}

/// Each true stall has exactly one recorded wait (start, length in s from `origin_ns`) within
/// the tolerance of its start and length.
fn assert_matches(what: &str, truth: &[(u64, u64)], origin_ns: u64, found: &[(f64, f64)]) {
    assert_eq!(
        found.len(),
        truth.len(),
        "{what}: {found:?} for the stalls {truth:?}"
    );
    for &(start, end) in truth {
        let start_s = (start as f64 - origin_ns as f64) / 1e9;
        let len_s = (end - start) as f64 / 1e9;
        let hit = found
            .iter()
            .find(|(s, l)| (s - start_s).abs() <= TOLERANCE_S && (l - len_s).abs() <= TOLERANCE_S);
        assert!(
            hit.is_some(),
            "{what}: no wait within {TOLERANCE_S} s of the stall at {start_s:.4} s lasting \
             {len_s:.4} s; found {found:?}"
        );
    }
}

#[test]
#[ignore = "privileged: needs root and the kernel"]
fn stalls_are_placed_where_and_when_they_happened() {
    require_root();
    let _serial = serial();
    let r = run();
    validate_against_schema(&r.report);
    let timeline = &r.report["timeline"];
    let window_start = timeline["window_start_ns"]
        .as_u64()
        .expect("window_start_ns");
    let threads = timeline["threads"].as_array().expect("timeline threads");
    // The stalling thread is the main thread.
    let main = threads
        .iter()
        .find(|t| Some(t["tid"].as_u64().unwrap()) == t["pid"].as_u64())
        .unwrap_or_else(|| panic!("no main thread in {threads:?}"));
    let tid = main["tid"].as_u64().unwrap();
    let long: Vec<(f64, f64)> = main["waits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["state"] == "sleep" && w["blocked_s"].as_f64().unwrap() >= 0.25)
        .map(|w| {
            let start = w["start_s"].as_f64().unwrap();
            (start, w["end_s"].as_f64().unwrap() - start)
        })
        .collect();
    assert_matches(
        "the JSON report's intervals",
        &r.stalls,
        window_start,
        &long,
    );
    for w in main["waits"].as_array().unwrap() {
        if w["blocked_s"].as_f64().unwrap() >= 0.25 {
            assert!(
                w["site"].as_str().unwrap().contains("stall"),
                "a stall's site names stall(): {w}"
            );
        }
    }

    // The report says when the stall site's time concentrated: in bursts at the stalls.
    let sites = r.report["top_blocking_sites"].as_array().unwrap();
    let site = sites
        .iter()
        .find(|s| s["site"].as_str().unwrap_or("").contains("stall"))
        .unwrap_or_else(|| panic!("no stall site among {sites:?}"));
    let when = &site["when"];
    let bursts = when["bursts"]
        .as_array()
        .unwrap_or_else(|| panic!("{site}"));
    assert_eq!(bursts.len(), STALLS, "one burst per stall: {when}");
    for b in bursts {
        let (from, to) = (b["from_s"].as_f64().unwrap(), b["to_s"].as_f64().unwrap());
        assert!(
            r.stalls.iter().any(|&(s, e)| {
                let (s, e) = (
                    (s - window_start) as f64 / 1e9,
                    (e - window_start) as f64 / 1e9,
                );
                from <= s + 0.02 && to >= e - 0.02
            }),
            "burst {from}–{to} s covers no stall: {when}"
        );
    }
    eprintln!("when: {}", when["summary"]);

    // The Perfetto trace, read back with Perfetto's own protos.
    let decoded = decode(&r.trace);
    assert_eq!(decoded["errors"], serde_json::json!([]), "{decoded}");
    let thread = decoded["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"].as_u64() == Some(tid))
        .expect("the stalling thread's track");
    let slices: Vec<(f64, f64)> = thread["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["state"] == "sleep" && s["dur"].as_u64().unwrap() >= 250_000_000)
        .map(|s| {
            (
                (s["start"].as_u64().unwrap() - window_start) as f64 / 1e9,
                // The sleep slice ends at the wakeup; the thread's runnable slice follows.
                s["dur"].as_u64().unwrap() as f64 / 1e9,
            )
        })
        .collect();
    // A stall's length is its sleep and then its wait for a CPU; the trace splits them.
    let runnable_after = |start_s: f64, dur_s: f64| -> f64 {
        thread["slices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["state"] == "runnable"
                    && ((s["start"].as_u64().unwrap() - window_start) as f64 / 1e9
                        - (start_s + dur_s))
                        .abs()
                        < 1e-6
            })
            .map_or(0.0, |s| s["dur"].as_u64().unwrap() as f64 / 1e9)
    };
    let whole: Vec<(f64, f64)> = slices
        .iter()
        .map(|&(s, d)| (s, d + runnable_after(s, d)))
        .collect();
    assert_matches(
        "the Perfetto trace's sleep slices",
        &r.stalls,
        window_start,
        &whole,
    );
    assert!(
        decoded["samples"].as_u64().unwrap() > 0,
        "the trace has on-CPU samples"
    );

    // A replay of the inside of the second stall: its stack only, in the stalling thread.
    let (s, e) = r.stalls[1];
    let from = (s - window_start) as f64 / 1e9 + 0.05;
    let to = (e - window_start) as f64 / 1e9 - 0.05;
    let folded = r.dir.join("range.folded");
    let out = profile(&[
        "replay",
        r.capture.to_str().unwrap(),
        "--from",
        &format!("{from:.3}"),
        "--to",
        &format!("{to:.3}"),
        "--per-thread",
        "-o",
        r.dir.join("range.svg").to_str().unwrap(),
        "--folded",
        folded.to_str().unwrap(),
    ]);
    assert_success(&out);
    let lines = read_folded(&folded);
    let stalling: Vec<&Line> = lines
        .iter()
        .filter(|l| {
            l.frames
                .get(1)
                .is_some_and(|f| f.ends_with(&format!("-{tid}")))
        })
        .collect();
    assert!(!stalling.is_empty(), "the stalling thread is in the range");
    for l in &stalling {
        assert!(
            l.has("stall") && !l.has("spin_between"),
            "inside a stall only the stall's stack: {l:?}"
        );
    }
    let stalled_us: u64 = stalling.iter().map(|l| l.count).sum();
    assert_close(
        "the stalling thread's time in the range (µs)",
        stalled_us as f64,
        (to - from) * 1e6,
        0.02,
    );
    // The whole capture has the work between the stalls too.
    let all = read_folded(&r.dir.join("all.folded"));
    assert!(all.iter().any(|l| l.has("spin_between")));

    html_heatmap(&r, window_start);
}

/// The HTML report of the replayed capture: the blocked heatmap's full cells (20 ms blocked
/// of 20 ms: the stalling thread asleep, the steady one's naps are shorter than the timeline's
/// resolution) lie in the stalls and cover them; the page loads nothing from elsewhere, and in
/// headless Chromium its script draws the whole window's flame graph with the stall in it.
fn html_heatmap(r: &Run, window_start: u64) {
    let html_path = r.dir.join("report.html");
    let out = profile(&[
        "replay",
        r.capture.to_str().unwrap(),
        "-o",
        r.dir.join("replay.svg").to_str().unwrap(),
        "--report",
        html_path.to_str().unwrap(),
    ]);
    assert_success(&out);
    let html = std::fs::read_to_string(&html_path).unwrap();
    for remote in [
        "src=\"http",
        "href=\"http",
        "url(http",
        "fetch(",
        "XMLHttpRequest",
    ] {
        assert!(!html.contains(remote), "the page loads {remote}…");
    }
    let blocked = &html[html.find("id=\"tl-blocked\"").expect("the blocked heatmap")..];
    let blocked = &blocked[..blocked.find("</svg>").unwrap()];
    let full: Vec<f64> = blocked
        .split("<rect ")
        .filter_map(|rect| {
            let attr = |name: &str| -> Option<f64> {
                let at = rect.find(&format!("{name}=\""))? + name.len() + 2;
                rect[at..].split('"').next()?.parse().ok()
            };
            (attr("data-v")? >= 19.0).then(|| attr("data-t")).flatten()
        })
        .collect();
    let stalls_s: Vec<(f64, f64)> = r
        .stalls
        .iter()
        .map(|&(s, e)| {
            (
                (s - window_start) as f64 / 1e9,
                (e - window_start) as f64 / 1e9,
            )
        })
        .collect();
    for t in &full {
        assert!(
            stalls_s
                .iter()
                .any(|&(s, e)| *t >= s - 0.021 && *t + 0.02 <= e + 0.021),
            "a full blocked cell at {t} s outside the stalls {stalls_s:?}"
        );
    }
    for &(s, e) in &stalls_s {
        let inside = full.iter().filter(|&&t| t >= s - 0.021 && t < e).count();
        // 300 ms: 14 whole cells at least, 16 at most.
        assert!(
            (14..=16).contains(&inside),
            "{inside} full cells in the stall {s:.3}–{e:.3} s: {full:?}"
        );
    }

    let dom = Command::new("/usr/bin/chromium")
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
        ])
        .arg(format!("file://{}", html_path.display()))
        .output()
        .expect("run chromium (`cargo xtask test` installs it)");
    let dom = String::from_utf8_lossy(&dom.stdout);
    let flame = &dom[dom.find("id=\"tl-flame\"").expect("the range flame graph")..];
    let flame = &flame[..flame.find("</div></div>").unwrap_or(flame.len())];
    assert!(
        flame.contains("data-from=\"0.00\"") && flame.contains(">stall<"),
        "the script drew the whole window's flame graph with stall() in it: {}",
        &flame[..flame.len().min(2000)]
    );
}

/// The trace summarised by profiler-core/tests/perfetto_decode.py (PyPI `perfetto`).
fn decode(trace: &Path) -> Value {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiler-core/tests/perfetto_decode.py");
    let python = std::env::var_os("PERFETTO_PYTHON").unwrap_or_else(|| "python3".into());
    let out = Command::new(&python)
        .arg(&script)
        .arg(trace)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "perfetto_decode.py failed (the `perfetto` Python package: `cargo xtask test` \
         installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the decoder's JSON")
}
