//! `profiler diff`: two real captures of a workload whose second run moves a known share of
//! CPU time from one function to another (root), and, without root, the refusals and a
//! capture compared with itself (small captures built here with the library's own types).

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::Arc,
};

use common::{Build, PROFILER, Workload, assert_success, require_root, scratch_dir, serial};
use profiler_common::{WaitState, stack_id};
use profiler_core::model::{
    CaptureMeta, Entry, Kind, Mode, Name, Profile, SavedCapture, StackNames, StateTimes,
    ThreadTime, Window, saved::SAVED_FORMAT,
};

fn run_diff(before: &Path, after: &Path, dir: &Path, extra: &[&str]) -> Output {
    Command::new(PROFILER)
        .arg("diff")
        .arg(before)
        .arg(after)
        .arg("-o")
        .arg(dir.join("diff.svg"))
        .args(extra)
        .output()
        .expect("run profiler diff")
}

/// A one-thread capture of 2 s in `mode`, saved under `dir`: 1 s in `main;spin`, and in
/// `--mode wall|off` 100 waits of 10 ms in `main;nap` (a sleep).
fn synthetic(mode: Mode, dir: &Path) -> PathBuf {
    const MS: u64 = 1_000_000;
    let n = |v: &[&str]| v.iter().map(|s| Arc::from(*s)).collect::<Vec<Name>>();
    let mut names = StackNames::default();
    names.user.insert(1, n(&["main", "spin"]));
    names.user.insert(2, n(&["main", "nap"]));
    names.kernel.insert(3, n(&["do_nanosleep_[k]"]));
    let mut entries = vec![Entry {
        samples: 100,
        time_ns: 1000 * MS,
        ..Entry::new(7, 7, 1, stack_id::EMPTY, Kind::OnCpu)
    }];
    if mode != Mode::Cpu {
        let mut nap = Entry::new(7, 7, 2, 3, Kind::Off(WaitState::Sleep));
        nap.time_ns = 1000 * MS;
        for _ in 0..100 {
            nap.finished(10 * MS);
        }
        entries.push(nap);
    }
    let thread = ThreadTime {
        pid: 7,
        name: "app".into(),
        time: StateTimes {
            running: 1000 * MS,
            ..StateTimes::default()
        },
        ..ThreadTime::default()
    };
    let capture = SavedCapture {
        format: SAVED_FORMAT,
        meta: CaptureMeta {
            target: "app".into(),
            pid: 7,
            ..CaptureMeta::default()
        },
        profile: Profile {
            entries,
            threads: [(7, thread)].into_iter().collect(),
            ..Profile::empty(
                mode,
                Window {
                    start_ns: 0,
                    stop_ns: 2000 * MS,
                },
                10 * MS,
            )
        },
        names,
    };
    let path = dir.join(format!("app-{}.capture", mode.name()));
    let file = std::fs::File::create(&path).expect("create the capture");
    capture.write_to(file).expect("write the capture");
    path
}

/// Records `workload shift <a_pct>` for `secs` seconds and saves the capture.
fn capture_shift(a_pct: u32, secs: u32, dir: &Path) -> PathBuf {
    let workload = Workload::spawn(Build::FramePointers, &["shift", &a_pct.to_string()]);
    let saved = dir.join(format!("shift-{a_pct}.capture"));
    let out = common::profile(&[
        "--pid",
        &workload.pid().to_string(),
        "--secs",
        &secs.to_string(),
        "-o",
        dir.join(format!("shift-{a_pct}.svg")).to_str().unwrap(),
        "--save",
        saved.to_str().unwrap(),
    ]);
    assert_success(&out);
    saved
}

/// inferno's SVGs carry a DOCTYPE.
fn parse_svg(text: &str) -> Result<roxmltree::Document<'_>, roxmltree::Error> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    roxmltree::Document::parse_with_options(text, opts)
}

/// The SVG parses as XML; returns the fill of the first frame whose title starts with
/// `function ` (inferno writes `<g><title>…</title><rect … fill="rgb(…)"/>…</g>`).
fn well_formed_fill(svg: &Path, function: &str) -> Option<(u8, u8, u8)> {
    let text = std::fs::read_to_string(svg).unwrap_or_else(|e| panic!("read {svg:?}: {e}"));
    let doc = parse_svg(&text)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", svg.display()));
    let g = doc.descendants().find(|n| {
        n.has_tag_name("g")
            && n.children().any(|c| {
                c.has_tag_name("title")
                    && c.text()
                        .is_some_and(|t| t.starts_with(&format!("{function} (")))
            })
    })?;
    let fill = g
        .children()
        .find(|c| c.has_tag_name("rect"))?
        .attribute("fill")?;
    let rgb: Vec<u8> = fill
        .strip_prefix("rgb(")?
        .strip_suffix(')')?
        .split(',')
        .map(|v| v.trim().parse().ok())
        .collect::<Option<_>>()?;
    Some((rgb[0], rgb[1], rgb[2]))
}

fn function<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .find(|f| f["function"] == name)
        .unwrap_or_else(|| panic!("{name} missing from {:#}", report["functions"]))
}

fn conforms_to_the_schema(json: &serde_json::Value) {
    let errors = common::schema_errors("diff.schema.json", json);
    assert!(errors.is_empty(), "{errors:#?}");
}

/// 75 % of the thread's CPU time in `shift_a` for 6 s, then 25 % for 9 s: the diff shows
/// shift_a's share fall by 50 points and shift_b's rise by 50, each within 5, and draws
/// shift_a blue (shrank) and shift_b red (grew) in both graphs.
#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn time_moved_from_one_function_to_another_shows_within_five_points() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir().join(format!("diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let before = capture_shift(75, 6, &dir);
    let after = capture_shift(25, 9, &dir);
    let json_path = dir.join("diff.json");
    let out = run_diff(
        &before,
        &after,
        &dir,
        &["--report", json_path.to_str().unwrap()],
    );
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("shift_a") && text.contains("shift_b"),
        "{text}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    conforms_to_the_schema(&report);
    assert_eq!(report["mode"], "wall");
    let secs = |side: &str| report[side]["duration_s"].as_f64().unwrap();
    // A loaded machine can close a window a little late; what matters is that they differ.
    assert!(
        (secs("before") - 6.0).abs() < 0.5 && (secs("after") - 9.0).abs() < 0.5,
        "{} s and {} s",
        secs("before"),
        secs("after")
    );

    // Total, not self: a thread preempted on a busy machine returns from the interrupt with
    // kernel frames (`irqentry_exit_to_user_mode`) above the function it was running.
    let share = |f: &str, when: &str| function(&report, f)["total_pct"][when].as_f64().unwrap();
    let close = |what: &str, value: f64, expected: f64| {
        assert!(
            (value - expected).abs() <= 5.0,
            "{what}: {value:.1} % where {expected} % ± 5 was expected\n{text}"
        );
    };
    close("shift_a before", share("shift_a", "before"), 75.0);
    close("shift_a after", share("shift_a", "after"), 25.0);
    close("shift_a change", share("shift_a", "change"), -50.0);
    close("shift_b before", share("shift_b", "before"), 25.0);
    close("shift_b after", share("shift_b", "after"), 75.0);
    close("shift_b change", share("shift_b", "change"), 50.0);
    // The two functions moved most: they lead the table.
    let first_two: Vec<&str> = report["functions"].as_array().unwrap()[..2]
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    assert!(
        first_two.contains(&"shift_a") && first_two.contains(&"shift_b"),
        "{first_two:?}"
    );

    // Red grew, blue shrank, in the graph drawn on each capture.
    for svg in [dir.join("diff.svg"), dir.join("diff.before.svg")] {
        let a = well_formed_fill(&svg, "shift_a").unwrap_or_else(|| panic!("shift_a in {svg:?}"));
        let b = well_formed_fill(&svg, "shift_b").unwrap_or_else(|| panic!("shift_b in {svg:?}"));
        assert!(a.2 == 255 && a.0 < 255, "shift_a shrank: blue, not {a:?}");
        assert!(b.0 == 255 && b.2 < 255, "shift_b grew: red, not {b:?}");
    }
}

/// A wall and an off capture, and a wall and a cpu capture, are refused in one sentence, and
/// nothing is written.
#[test]
fn captures_of_different_modes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let captures = tempfile::tempdir().unwrap();
    let wall = synthetic(Mode::Wall, captures.path());
    let out = run_diff(
        &wall,
        &synthetic(Mode::Off, captures.path()),
        dir.path(),
        &[],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("--mode wall") && err.contains("--mode off") && err.contains("same --mode"),
        "{err}"
    );
    let out = run_diff(
        &synthetic(Mode::Cpu, captures.path()),
        &wall,
        dir.path(),
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--mode cpu (on-CPU samples only)"), "{err}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
}

/// A folded file or an SVG carries no capture length or mode: refused, saying so.
#[test]
fn folded_stacks_and_svgs_are_not_captures() {
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("before.folded");
    std::fs::write(&folded, "app;main;spin 42\n").unwrap();
    let svg = dir.path().join("after.svg");
    std::fs::write(&svg, "<?xml version=\"1.0\"?>\n<svg></svg>\n").unwrap();
    let wall = synthetic(Mode::Wall, dir.path());
    for (file, what) in [
        (&folded, "a file of folded stacks"),
        (&svg, "an SVG flame graph"),
    ] {
        let out = run_diff(file, &wall, dir.path(), &[]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(what) && err.contains("--save"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// A capture compared with itself moved nothing, and both graphs are well-formed.
#[test]
fn a_capture_against_itself_moved_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let capture = synthetic(Mode::Wall, dir.path());
    let json = dir.path().join("d.json");
    let md = dir.path().join("d.md");
    let out = run_diff(
        &capture,
        &capture,
        dir.path(),
        &["--report", json.to_str().unwrap()],
    );
    assert_success(&out);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    conforms_to_the_schema(&report);
    for table in ["states", "functions", "sites"] {
        for row in report[table].as_array().unwrap() {
            let key = if table == "functions" {
                "self_ms_per_s"
            } else {
                "ms_per_s"
            };
            assert_eq!(row[key]["change"], 0.0, "{row}");
        }
    }
    assert!(!report["sites"].as_array().unwrap().is_empty());
    for svg in ["diff.svg", "diff.before.svg"] {
        let text = std::fs::read_to_string(dir.path().join(svg)).unwrap();
        parse_svg(&text).unwrap_or_else(|e| panic!("{svg}: {e}"));
    }
    let out = run_diff(
        &capture,
        &capture,
        dir.path(),
        &["--report", md.to_str().unwrap()],
    );
    assert_success(&out);
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.contains("## Blocking sites that moved most"), "{md}");
}
