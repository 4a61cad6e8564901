//! End-to-end, without root: `profiler replay` and `profiler diff` on saved captures (the
//! golden captures of profiler-core's render tests), as the user runs them. What they render
//! is checked byte for byte by profiler-core's `golden` test; here, what only the binary does.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use common::PROFILER;

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../profiler-core/tests/golden")
        .join(format!("{name}.capture.json.gz"))
}

#[test]
fn a_file_that_is_not_a_capture_is_one_sentence() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bogus = dir.path().join("bogus.capture");
    std::fs::write(&bogus, "{\"format\": 99}").expect("write");
    let out = Command::new(PROFILER)
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

#[test]
fn a_diff_report_can_be_an_html_page() {
    let dir = tempfile::tempdir().expect("temp dir");
    let html = dir.path().join("d.html");
    let capture = golden("mixed-off");
    let out = Command::new(PROFILER)
        .arg("diff")
        .arg(&capture)
        .arg(&capture)
        .arg("-o")
        .arg(dir.path().join("d.svg"))
        .arg("--report")
        .arg(&html)
        .output()
        .expect("run profiler diff");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("wrote the report to"), "{err}");
    let page = std::fs::read_to_string(&html).expect("read the HTML diff report");
    for id in ["captures", "states", "diff-after", "diff-before"] {
        assert!(
            page.contains(&format!("id=\"{id}\"")),
            "no #{id} in the page"
        );
    }
    assert!(dir.path().join("d.svg").exists() && dir.path().join("d.before.svg").exists());
}
