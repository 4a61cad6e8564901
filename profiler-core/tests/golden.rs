//! Golden files, without root: saved captures (`tests/golden/<name>.capture.json.gz`, written
//! by `profiler --save` on the test workloads) rendered through the render stage's API, as
//! `profiler replay` renders them, and every output compared with
//! `tests/golden/<name>.<output>` byte for byte: folded stacks (with and without a frame per
//! thread), the SVG, the Markdown and JSON report, and the end-of-run text (summary and
//! report; the binary's `wrote …` lines are its own). The kernel side is covered by the
//! privileged tests in profiler/tests.
//!
//! After an intended change: `BLESS=1 cargo test --release -p profiler-core --test golden`,
//! then read the diff of the expected files before committing them.

#[path = "support/schema.rs"]
mod support;

use std::path::{Path, PathBuf};

use profiler_core::{
    model::SavedCapture,
    render::{self, RenderOptions, ReportTexts},
};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn captures() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(golden_dir())
        .expect("read tests/golden")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".capture.json.gz").map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// The first line where two texts differ, for the failure message.
fn first_difference(expected: &str, actual: &str) -> String {
    for (i, (e, a)) in expected.lines().zip(actual.lines()).enumerate() {
        if e != a {
            return format!("line {}:\n  expected: {e}\n  actual:   {a}", i + 1);
        }
    }
    format!(
        "lengths differ: expected {} lines, got {}",
        expected.lines().count(),
        actual.lines().count()
    )
}

fn check(name: &str, output: &str, actual: &str) {
    let path = golden_dir().join(format!("{name}.{output}"));
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, actual).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "read {} ({e}); run with BLESS=1 to create it",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "{} differs from the render, {}\n(BLESS=1 rewrites it after an intended change)",
        path.display(),
        first_difference(&expected, actual)
    );
}

fn load(name: &str) -> SavedCapture {
    let path = golden_dir().join(format!("{name}.capture.json.gz"));
    SavedCapture::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn render(name: &str, saved: &SavedCapture, opts: &RenderOptions) -> render::Rendered {
    render::render(saved, opts).unwrap_or_else(|e| panic!("{name}: render: {e}"))
}

#[test]
fn saved_captures_render_as_before() {
    let names = captures();
    assert!(names.len() >= 3, "golden captures missing: {names:?}");
    for name in &names {
        let saved = load(name);
        let text = |what: &str, t: std::io::Result<String>| {
            t.unwrap_or_else(|e| panic!("{name}: {what}: {e}"))
        };
        let per_thread = RenderOptions {
            per_thread: true,
            ..RenderOptions::default()
        };
        let r = render(name, &saved, &per_thread);
        check(name, "per-thread.folded", &text("folded", r.folded_text()));
        check(name, "svg", &r.svg);
        check(name, "md", &text("markdown", r.markdown()));
        check(name, "txt", &text("terminal", r.terminal()));
        let r = render(name, &saved, &RenderOptions::default());
        check(name, "folded", &text("folded", r.folded_text()));
        let json = text("json", r.json());
        conforms_to_the_schema(name, &json);
        check(name, "json", &json);
    }
}

/// The JSON report validates against docs/report.schema.json and carries every counter.
fn conforms_to_the_schema(name: &str, json: &str) {
    let report: serde_json::Value = serde_json::from_str(json).expect("the report is JSON");
    let errors = support::schema_errors("report.schema.json", &report);
    assert!(errors.is_empty(), "{name}: {errors:#?}");
    let counters = report["capture"]["counters"]
        .as_object()
        .expect("capture.counters");
    for c in profiler_common::Counter::ALL {
        assert!(
            counters.contains_key(c.name()),
            "{name}: counter {} missing from the report",
            c.name()
        );
    }
}

/// A capture made with `--no-wakers` (here: a golden off-CPU capture with its wakers taken
/// out and the flag set) says so once — a note in every format and `wakers_recorded: false`
/// in the JSON — and nowhere an empty "woken by" column or a verdict that names a waker.
#[test]
fn a_capture_without_wakers_says_so_once() {
    let mut saved = load("mixed-off");
    assert!(
        !saved.profile.wakers.is_empty(),
        "the golden capture has wakers to take out"
    );
    saved.profile.wakers.clear();
    saved.profile.wakers_recorded = false;
    let r = render("mixed-off", &saved, &RenderOptions::default());
    let json = r.json().expect("json");
    conforms_to_the_schema("mixed-off without wakers", &json);
    let report: serde_json::Value = serde_json::from_str(&json).expect("the report is JSON");
    assert_eq!(report["capture"]["wakers_recorded"], false);
    let sites = report["top_blocking_sites"].as_array().expect("sites");
    assert!(!sites.is_empty(), "the capture has blocking sites");
    for s in sites {
        assert_eq!(s["wakers"], serde_json::json!([]), "{s}");
    }
    for g in report["groups"].as_array().expect("groups") {
        assert!(g["dominant_wait"]["woken_by"].is_null(), "{g}");
    }
    let said = "Wakers were not recorded (--no-wakers)";
    let notes = report["notes"].as_array().expect("notes");
    assert_eq!(
        notes
            .iter()
            .filter(|n| n.as_str().is_some_and(|n| n.starts_with(said)))
            .count(),
        1,
        "{notes:?}"
    );
    let verdict = report["verdict"].as_str().expect("verdict");
    assert!(!verdict.contains("woken by"), "{verdict}");
    for (what, text) in [
        ("markdown", r.markdown().expect("markdown")),
        ("terminal", r.terminal().expect("terminal")),
        ("html", r.html().expect("html")),
    ] {
        assert_eq!(text.matches(said).count(), 1, "{what}:\n{text}");
        for empty in ["woken by", "Woken by", "No wakeup was seen"] {
            assert!(!text.contains(empty), "{what} says {empty:?}:\n{text}");
        }
    }
    // The same capture with wakers still names them (the test above is not vacuous).
    let with = render("mixed-off", &load("mixed-off"), &RenderOptions::default());
    assert!(with.markdown().expect("markdown").contains("woken by"));
}
