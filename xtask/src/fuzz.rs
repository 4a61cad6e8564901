//! The cargo-fuzz targets in `fuzz/`: the `.eh_frame` row builder, the text parsers, the
//! kernel's mapping records and the HotSpot reader, which read what untrusted processes hand
//! the profiler (it runs as root). Installs cargo-fuzz when missing, seeds the corpus with real
//! files and recorded JVMs, runs each target for a time budget, and fails on any crash,
//! timeout or out-of-memory.

use std::{path::Path, process::Command};

use anyhow::{Context as _, Result, bail};

use crate::toolchain;

const TARGETS: [&str; 4] = ["eh_frame", "proc_text", "perf_records", "jvm"];

pub fn run(root: &Path, secs: u64) -> Result<()> {
    ensure_cargo_fuzz()?;
    let fuzz_dir = root.join("fuzz");
    let status = Command::new("sh")
        .arg(fuzz_dir.join("seed-corpus.sh"))
        .status()
        .context("cannot run fuzz/seed-corpus.sh")?;
    if !status.success() {
        bail!("fuzz/seed-corpus.sh failed");
    }
    for target in TARGETS {
        eprintln!("xtask: fuzzing {target} for {secs} s");
        let status = toolchain::nightly_cargo()
            .current_dir(&fuzz_dir)
            .args(["fuzz", "run", target])
            .arg(format!("corpus/{target}"))
            .args([
                "--",
                &format!("-max_total_time={secs}"),
                "-max_len=65536",
                "-rss_limit_mb=2048",
                "-timeout=10",
            ])
            .status()
            .with_context(|| format!("cannot start cargo fuzz run {target}"))?;
        if !status.success() {
            bail!(
                "fuzz target {target} found a crash, timeout or leak: see fuzz/artifacts/{target}"
            );
        }
    }
    Ok(())
}

fn ensure_cargo_fuzz() -> Result<()> {
    let present = toolchain::nightly_cargo()
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if present {
        return Ok(());
    }
    eprintln!("xtask: cargo-fuzz is missing (it runs the fuzz targets); installing it, once");
    let status = toolchain::nightly_cargo()
        .args(["install", "cargo-fuzz", "--locked"])
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .context("cannot start cargo install cargo-fuzz")?;
    if !status.success() {
        bail!("cargo install cargo-fuzz failed");
    }
    Ok(())
}
