//! `cargo xtask <build|run|test>`: the two commands of the README and what they need.
//!
//! Before anything is built, [`toolchain::ensure`] makes sure the eBPF toolchain is present
//! (nightly with rust-src, and bpf-linker linked against that nightly's own LLVM), installing
//! what is missing and saying why. When everything is present the check costs a few
//! milliseconds.

mod bench;
mod demo;
mod fuzz;
mod packages;
mod toolchain;

use std::{
    env,
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

use anyhow::{Context as _, Result, bail};

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  build [--debug]          build the eBPF programs and the profiler
  run [--debug] -- ARGS    build, then run the profiler as root with ARGS
                           (e.g. cargo xtask run -- --pid 1234 --secs 20)
  test [-- CARGO-TEST-ARGS]
                           format and lint checks, then every test, including the
                           privileged end-to-end tests (run as root)
  fuzz [SECONDS]            run each fuzz target for SECONDS (default 300)
  demo nginx|postgres [SECONDS]
                           profile a real service under load, next to the anchors
                           (the README's write-ups; outputs in target/demo/)
  toolchain                only check and install the eBPF toolchain
  bench [--rounds N] [--secs S] [--quick]
                           overhead and cost next to offcputime and perf on nginx under
                           wrk (as root; installs what it needs); writes
                           target/bench/latest.md. --quick: 1 round of 3 s
";

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<ExitCode> {
    let mut args = env::args_os().skip(1);
    let Some(command) = args.next() else {
        eprint!("{USAGE}");
        return Ok(ExitCode::FAILURE);
    };
    let rest: Vec<OsString> = args.collect();
    let root = workspace_root();
    match command.to_str() {
        Some("build") => {
            let debug = rest.iter().any(|a| a == "--debug");
            toolchain::ensure()?;
            build(&root, debug)?;
            Ok(ExitCode::SUCCESS)
        }
        Some("run") => {
            let (opts, profiler_args) = split_at_dashes(&rest);
            let debug = opts.iter().any(|a| a == "--debug");
            toolchain::ensure()?;
            let binary = build(&root, debug)?;
            run_as_root(&binary, profiler_args)
        }
        Some("test") => {
            let (_, test_args) = split_at_dashes(&rest);
            toolchain::ensure()?;
            test(&root, test_args)
        }
        Some("bench") => bench::run(&root, &rest),
        Some("demo") => {
            toolchain::ensure()?;
            demo::run(&root, &rest)
        }
        Some("fuzz") => {
            let secs = rest
                .first()
                .and_then(|s| s.to_str())
                .map(str::parse::<u64>)
                .transpose()
                .context("usage: cargo xtask fuzz [SECONDS]")?
                .unwrap_or(300);
            toolchain::ensure()?;
            build(&root, false)?;
            fuzz::run(&root, secs)?;
            Ok(ExitCode::SUCCESS)
        }
        Some("toolchain") => {
            toolchain::ensure()?;
            Ok(ExitCode::SUCCESS)
        }
        Some("help" | "-h" | "--help") => {
            print!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            eprint!(
                "xtask: unknown command {}\n\n{USAGE}",
                command.to_string_lossy()
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `[opts..] -- [rest..]`
fn split_at_dashes(args: &[OsString]) -> (&[OsString], &[OsString]) {
    match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[]),
    }
}

/// Builds the profiler (its build script builds the eBPF object) and returns the binary.
fn build(root: &Path, debug: bool) -> Result<PathBuf> {
    let mut cmd = cargo();
    cmd.current_dir(root)
        .args(["build", "--package", "profiler"]);
    if !debug {
        cmd.arg("--release");
    }
    status(&mut cmd, "cargo build")?;
    Ok(root
        .join("target")
        .join(if debug { "debug" } else { "release" })
        .join("profiler"))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc_geteuid() == 0 }
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// Runs the profiler directly when root, else through `sudo -E`.
fn run_as_root(binary: &Path, args: &[OsString]) -> Result<ExitCode> {
    let mut cmd = if is_root() {
        Command::new(binary)
    } else {
        eprintln!(
            "xtask: the profiler loads eBPF programs, which needs root: running it through sudo -E"
        );
        let mut sudo = Command::new("sudo");
        sudo.arg("-E").arg(binary);
        sudo
    };
    cmd.args(args);
    let code = cmd
        .status()
        .with_context(|| format!("cannot start {}", binary.display()))?
        .code()
        .unwrap_or(1);
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

fn test(root: &Path, test_args: &[OsString]) -> Result<ExitCode> {
    eprintln!("xtask: cargo fmt --check");
    status(
        cargo()
            .current_dir(root)
            .args(["fmt", "--all", "--", "--check"]),
        "cargo fmt --check (run `cargo fmt --all`)",
    )?;
    status(
        toolchain::nightly_cargo()
            .current_dir(root.join("profiler-ebpf"))
            .args(["fmt", "--", "--check"]),
        "cargo fmt --check in profiler-ebpf (run `cargo +nightly fmt` there)",
    )?;
    eprintln!("xtask: cargo clippy");
    status(
        cargo().current_dir(root).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--release",
            "--",
            "-D",
            "warnings",
        ]),
        "cargo clippy",
    )?;

    if is_root() {
        packages::ensure(packages::TEST_PACKAGES)?;
    }
    eprintln!("xtask: cargo test (privileged end-to-end tests included)");
    let mut cmd = if is_root() {
        cargo()
    } else {
        eprintln!(
            "xtask: the end-to-end tests load eBPF programs, which needs root: running cargo test through sudo -E"
        );
        let mut sudo = Command::new("sudo");
        sudo.arg("-E")
            .arg(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        sudo
    };
    cmd.current_dir(root)
        .args(["test", "--workspace", "--release"])
        .args(test_args);
    let ok = cmd.status().context("cannot start cargo test")?.success();
    if !ok {
        return Ok(ExitCode::FAILURE);
    }
    // The parsers that read files of untrusted processes, fuzzed briefly on every run
    // (`cargo xtask fuzz SECONDS` runs them longer).
    fuzz::run(root, CI_FUZZ_SECONDS)?;
    Ok(ExitCode::SUCCESS)
}

/// Seconds per fuzz target in `cargo xtask test`.
const CI_FUZZ_SECONDS: u64 = 20;

fn cargo() -> Command {
    Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

fn status(cmd: &mut Command, what: &str) -> Result<()> {
    let st = cmd
        .status()
        .with_context(|| format!("cannot start {what}"))?;
    if !st.success() {
        bail!("{what} failed");
    }
    Ok(())
}
