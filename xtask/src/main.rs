//! `cargo xtask <command>`: the two commands of the README (`run`, `test`) and what they need.
//!
//! Before anything is built, [`toolchain::ensure`] makes sure the eBPF toolchain is present
//! (nightly with rust-src, and bpf-linker linked against that nightly's own LLVM), installing
//! what is missing and saying why. When everything is present the check costs a few
//! milliseconds. `bench` and `demo` live in their own crate (`bench/`); here they only run it.

use std::{
    env,
    ffi::OsString,
    path::Path,
    process::{Command, ExitCode},
};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use xtask::{build, cargo, fuzz, is_root, packages, status, toolchain, workspace_root};

#[derive(Parser, Debug)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Build the eBPF programs and the profiler (target/release/profiler).
    Build {
        /// A debug build (target/debug/profiler).
        #[arg(long)]
        debug: bool,
    },
    /// Build, then run the profiler with ARGS: cargo xtask run -- --pid 1234 --secs 20 (as root,
    /// through sudo when needed; `replay` and `diff` run as you).
    Run {
        /// Run a debug build.
        #[arg(long)]
        debug: bool,
        /// The profiler's arguments, after `--`.
        #[arg(last = true, value_name = "ARGS")]
        args: Vec<OsString>,
    },
    /// Format and lint checks, then every test, including the privileged end-to-end tests (run
    /// as root), then a short run of each fuzz target.
    Test {
        /// Passed to `cargo test`, after `--`.
        #[arg(last = true, value_name = "CARGO-TEST-ARGS")]
        args: Vec<OsString>,
    },
    /// Run each fuzz target for SECONDS.
    Fuzz {
        #[arg(default_value_t = 300, value_name = "SECONDS")]
        secs: u64,
    },
    /// Only check and install the eBPF toolchain.
    Toolchain,
    /// Overhead next to offcputime and perf on nginx under wrk (the bench crate; see `cargo
    /// xtask bench --help`).
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Profile a real service under load: nginx|postgres [SECONDS] (the bench crate; see
    /// `cargo xtask demo --help`).
    #[command(disable_help_flag = true)]
    Demo {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Cmd) -> Result<ExitCode> {
    let root = workspace_root();
    match command {
        Cmd::Build { debug } => build(&root, debug).map(|_| ExitCode::SUCCESS),
        Cmd::Run { debug, args } => {
            let binary = build(&root, debug)?;
            if needs_root(&args) {
                run_as_root(&binary, &args)
            } else {
                run_binary(Command::new(&binary), &binary, &args)
            }
        }
        Cmd::Test { args } => {
            toolchain::ensure()?;
            test(&root, &args)
        }
        Cmd::Fuzz { secs } => {
            build(&root, false)?;
            fuzz::run(&root, secs).map(|()| ExitCode::SUCCESS)
        }
        Cmd::Toolchain => toolchain::ensure().map(|()| ExitCode::SUCCESS),
        Cmd::Bench { args } => bench_crate(&root, "bench", &args),
        Cmd::Demo { args } => bench_crate(&root, "demo", &args),
    }
}

/// `cargo run --package bench -- <command> ARGS`, with its exit code.
fn bench_crate(root: &Path, command: &str, args: &[OsString]) -> Result<ExitCode> {
    let code = cargo()
        .current_dir(root)
        .args(["run", "--quiet", "--package", "bench", "--", command])
        .args(args)
        .status()
        .context("cannot start cargo run --package bench")?
        .code()
        .unwrap_or(1);
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// Recording loads eBPF programs; `replay` and `diff` only read saved captures.
fn needs_root(args: &[OsString]) -> bool {
    !matches!(
        args.first().and_then(|a| a.to_str()),
        Some("replay" | "diff" | "help" | "--help" | "-h" | "--version" | "-V")
    )
}

/// Runs the profiler directly when root, else through `sudo -E`.
fn run_as_root(binary: &Path, args: &[OsString]) -> Result<ExitCode> {
    let cmd = if is_root() {
        Command::new(binary)
    } else {
        eprintln!(
            "xtask: the profiler loads eBPF programs, which needs root: running it through sudo -E"
        );
        let mut sudo = Command::new("sudo");
        sudo.arg("-E").arg(binary);
        sudo
    };
    run_binary(cmd, binary, args)
}

fn run_binary(mut cmd: Command, binary: &Path, args: &[OsString]) -> Result<ExitCode> {
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
        packages::ensure_python(packages::TEST_PYTHON_PACKAGES)?;
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
    // The privileged tests are `#[ignore]`d with their reason, so a plain `cargo test` as a
    // user reports them skipped; here, as root, they all run.
    let (cargo_args, test_binary_args) = match test_args.iter().position(|a| a == "--") {
        Some(i) => (&test_args[..i], &test_args[i + 1..]),
        None => (test_args, &[][..]),
    };
    cmd.current_dir(root)
        .args(["test", "--workspace", "--release"])
        .args(cargo_args)
        .args(["--", "--include-ignored"])
        .args(left_out_tests())
        .args(test_binary_args);
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

/// The start of the name of every test that is a measurement rather than a check (each is
/// `#[ignore]`d with that reason): `cargo xtask test` runs them only with PROFILER_MEASURE=1.
const MEASUREMENT_PREFIX: &str = "measurement_";

/// Temurin's JDK 25, which the JDK 25 reader tests need and Debian 12 does not package.
const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";
/// The tests that need [`JDK25`] (profiler/tests/jvm_reader.rs); without it they fail.
const JDK25_TESTS: &[&str] = &["jvm_reader_jdk25", "jvm_reader_inlining_jdk25"];

/// `--skip` arguments for the tests this run leaves out, each group said: the measurements
/// unless PROFILER_MEASURE is set, the JDK 25 tests where no JDK 25 is installed.
fn left_out_tests() -> Vec<String> {
    let mut skip = Vec::new();
    if env::var_os("PROFILER_MEASURE").is_none() {
        eprintln!(
            "xtask: the measurements ({MEASUREMENT_PREFIX}*) are left out (PROFILER_MEASURE=1 runs them)"
        );
        skip.push(MEASUREMENT_PREFIX);
    }
    if !Path::new(JDK25).exists() {
        eprintln!(
            "xtask: no JDK 25 at {JDK25} (Debian 12 packages none): {} left out",
            JDK25_TESTS.join(", ")
        );
        skip.extend_from_slice(JDK25_TESTS);
    }
    skip.iter()
        .flat_map(|name| ["--skip".to_string(), name.to_string()])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cmd, clap::Error> {
        Cli::try_parse_from(std::iter::once("cargo xtask").chain(args.iter().copied()))
            .map(|c| c.command)
    }

    #[test]
    fn run_passes_everything_after_the_dashes_to_the_profiler() {
        let Cmd::Run { debug, args } = parse(&["run", "--", "--pid", "7", "--secs", "20"]).unwrap()
        else {
            panic!("not run");
        };
        assert!(!debug);
        assert_eq!(args, ["--pid", "7", "--secs", "20"]);
        assert!(matches!(
            parse(&["run", "--debug"]).unwrap(),
            Cmd::Run { debug: true, .. }
        ));
        // Without the dashes the profiler's options are not ours: refused, not dropped.
        assert!(parse(&["run", "--pid", "7"]).is_err());
    }

    #[test]
    fn only_recording_runs_as_root() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(needs_root(&args(&["--pid", "7"])));
        assert!(needs_root(&args(&["-p", "7", "--save", "diff"])));
        assert!(!needs_root(&args(&["diff", "a.capture", "b.capture"])));
        assert!(!needs_root(&args(&["replay", "a.capture"])));
    }

    #[test]
    fn test_fuzz_and_build_keep_their_defaults() {
        assert!(matches!(parse(&["test"]).unwrap(), Cmd::Test { args } if args.is_empty()));
        assert!(matches!(
            parse(&["test", "--", "--skip", "jit"]).unwrap(),
            Cmd::Test { args } if args == ["--skip", "jit"]
        ));
        assert!(matches!(parse(&["fuzz"]).unwrap(), Cmd::Fuzz { secs: 300 }));
        assert!(matches!(
            parse(&["fuzz", "60"]).unwrap(),
            Cmd::Fuzz { secs: 60 }
        ));
        assert!(parse(&["fuzz", "soon"]).is_err());
        assert!(matches!(
            parse(&["build"]).unwrap(),
            Cmd::Build { debug: false }
        ));
        assert!(parse(&["frobnicate"]).is_err());
    }

    #[test]
    fn bench_and_demo_hand_every_argument_on() {
        assert!(matches!(
            parse(&["bench", "--quick", "--only", "wall", "--help"]).unwrap(),
            Cmd::Bench { args } if args == ["--quick", "--only", "wall", "--help"]
        ));
        assert!(matches!(
            parse(&["demo", "nginx", "5"]).unwrap(),
            Cmd::Demo { args } if args == ["nginx", "5"]
        ));
    }

    /// The tests `left_out_tests` names by name are there, and every test ignored as a
    /// measurement has the prefix: a rename would otherwise run a JDK 25 test where there is
    /// no JDK 25, or a measurement in every run.
    #[test]
    fn the_tests_left_out_by_name_exist() {
        let tests = workspace_root().join("profiler/tests");
        let read = |name: &str| {
            std::fs::read_to_string(tests.join(name)).unwrap_or_else(|e| panic!("read {name}: {e}"))
        };
        let jvm_reader = read("jvm_reader.rs");
        assert!(jvm_reader.contains(&format!("const JDK25: &str = \"{JDK25}\";")));
        for name in JDK25_TESTS {
            assert!(jvm_reader.contains(&format!("fn {name}() {{")), "{name}");
        }
        let mut measurements = 0;
        for entry in std::fs::read_dir(&tests).expect("list profiler/tests") {
            let path = entry.expect("an entry").path();
            let Ok(source) = std::fs::read_to_string(&path) else {
                continue;
            };
            let mut lines = source.lines();
            while let Some(line) = lines.next() {
                if line.starts_with("#[ignore = \"measurement") {
                    let f = lines.next().unwrap_or_default();
                    assert!(
                        f.starts_with(&format!("fn {MEASUREMENT_PREFIX}")),
                        "{}: {f}",
                        path.display()
                    );
                    measurements += 1;
                }
            }
        }
        assert!(
            measurements >= 3,
            "{measurements} measurements in profiler/tests"
        );
    }
}
