//! Golden files, without root: saved captures (`tests/golden/<name>.capture.json.gz`, written
//! by `profiler --save` on the test workloads) replayed with `profiler replay`, and every
//! output compared with `tests/golden/<name>.<output>` byte for byte. The rendering stages
//! (fold, SVG, Markdown and JSON report, summary) are covered this way; the kernel side is
//! covered by the privileged tests.
//!
//! After an intended change: `BLESS=1 cargo test --release -p profiler --test golden`, then
//! read the diff of the expected files before committing them.

mod common;

use std::path::{Path, PathBuf};

use common::PROFILER;

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
        "{} differs from the replay, {}\n(BLESS=1 rewrites it after an intended change)",
        path.display(),
        first_difference(&expected, actual)
    );
}

fn replay(capture: &Path, dir: &Path, extra: &[&str]) -> std::process::Output {
    let out = std::process::Command::new(PROFILER)
        .arg("replay")
        .arg(capture)
        .arg("-o")
        .arg(dir.join("graph.svg"))
        .arg("--folded")
        .arg(dir.join("stacks.folded"))
        .args(extra)
        .output()
        .expect("run profiler replay");
    assert!(
        out.status.success(),
        "profiler replay {} failed: {}",
        capture.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn replayed_captures_render_as_before() {
    let names = captures();
    assert!(names.len() >= 3, "golden captures missing: {names:?}");
    for name in &names {
        let capture = golden_dir().join(format!("{name}.capture.json.gz"));
        let dir = tempfile::tempdir().expect("temp dir");
        let read = |f: &str| {
            std::fs::read_to_string(dir.path().join(f))
                .unwrap_or_else(|e| panic!("{name}: read {f}: {e}"))
        };
        let md = dir.path().join("report.md");
        let out = replay(
            &capture,
            dir.path(),
            &["--per-thread", "--report", md.to_str().unwrap()],
        );
        check(name, "per-thread.folded", &read("stacks.folded"));
        check(name, "svg", &read("graph.svg"));
        check(name, "md", &read("report.md"));
        let text = String::from_utf8_lossy(&out.stdout)
            .replace(dir.path().to_str().expect("utf-8 temp dir"), "<dir>");
        check(name, "txt", &text);
        let json = dir.path().join("report.json");
        replay(&capture, dir.path(), &["--report", json.to_str().unwrap()]);
        check(name, "folded", &read("stacks.folded"));
        let json = read("report.json");
        conforms_to_the_schema(name, &json);
        check(name, "json", &json);
    }
}

/// The JSON report validates against docs/report.schema.json and carries every counter.
fn conforms_to_the_schema(name: &str, json: &str) {
    let report: serde_json::Value = serde_json::from_str(json).expect("the report is JSON");
    let schema_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/report.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).expect("read the schema"))
            .expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&report)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
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

#[test]
fn a_file_that_is_not_a_capture_is_one_sentence() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bogus = dir.path().join("bogus.capture");
    std::fs::write(&bogus, "{\"format\": 99}").expect("write");
    let out = std::process::Command::new(PROFILER)
        .arg("replay")
        .arg(&bogus)
        .arg("-o")
        .arg(dir.path().join("x.svg"))
        .output()
        .expect("run profiler replay");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("format 99"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!dir.path().join("x.svg").exists());
}
