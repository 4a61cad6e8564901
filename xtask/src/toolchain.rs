//! The eBPF toolchain: nightly Rust with `rust-src` (for `-Z build-std=core` on the BPF
//! target) and `bpf-linker` built against the LLVM library inside that nightly (Debian has no
//! LLVM as new as the nightly's, and prebuilt bpf-linker releases cannot be downloaded here).
//! Recipe: shared/BUILDING-EBPF.md.

use std::{
    env,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

use crate::cmd::status;

/// bpf-linker release known to work with aya 0.14 and the nightly's LLVM 22.
const BPF_LINKER_VERSION: &str = "0.13.0";

pub fn nightly_cargo() -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", "nightly", "cargo"])
        .env_remove("RUSTUP_TOOLCHAIN");
    cmd
}

/// Checks every piece and installs what is missing.
pub fn ensure() -> Result<()> {
    let started = Instant::now();
    put_cargo_bin_on_path();
    if which("rustup").is_none() {
        bail!("rustup is not on PATH: install Rust with rustup (https://rustup.rs) first");
    }
    let sysroot = match nightly_sysroot() {
        Some(s) => s,
        None => {
            say("the nightly toolchain is missing; the eBPF crate needs it for -Z build-std");
            status(
                Command::new("rustup").args([
                    "toolchain",
                    "install",
                    "nightly",
                    "--profile",
                    "minimal",
                    "--component",
                    "rust-src",
                ]),
                "rustup toolchain install nightly",
            )?;
            nightly_sysroot().context("nightly was installed but does not run")?
        }
    };
    if !sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        say("nightly has no rust-src; building `core` for the BPF target needs its sources");
        status(
            Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]),
            "rustup component add rust-src",
        )?;
    }
    if !bpf_linker_works() {
        install_bpf_linker(&sysroot)?;
        if !bpf_linker_works() {
            bail!(
                "bpf-linker was installed but does not run; is {} on PATH?",
                cargo_bin().display()
            );
        }
    }
    if env::var_os("XTASK_VERBOSE").is_some() {
        eprintln!("xtask: toolchain check took {:?}", started.elapsed());
    }
    Ok(())
}

/// `cargo install` puts bpf-linker in ~/.cargo/bin; rustc finds the linker through PATH.
fn put_cargo_bin_on_path() {
    let bin = cargo_bin();
    let paths = env::var_os("PATH").unwrap_or_default();
    if env::split_paths(&paths).any(|p| p == bin) {
        return;
    }
    let joined = env::join_paths(std::iter::once(bin).chain(env::split_paths(&paths)));
    if let Ok(joined) = joined {
        // SAFETY: called before any thread is started; child processes inherit it.
        unsafe { env::set_var("PATH", joined) };
    }
}

fn say(what: &str) {
    eprintln!("xtask: {what}");
}

fn nightly_sysroot() -> Option<PathBuf> {
    let out = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--print", "sysroot"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn cargo_bin() -> PathBuf {
    env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"))
        .join("bin")
}

/// Present and loadable: a bpf-linker whose nightly LLVM was replaced by a nightly update
/// fails to start and is rebuilt.
fn bpf_linker_works() -> bool {
    let Some(path) = which("bpf-linker") else {
        return false;
    };
    Command::new(path)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn install_bpf_linker(sysroot: &Path) -> Result<()> {
    let llvm_major = nightly_llvm_major().context("cannot tell which LLVM the nightly uses")?;
    let lib_dir = sysroot.join("lib");
    let llvm_lib = std::fs::read_dir(&lib_dir)
        .with_context(|| format!("cannot list {}", lib_dir.display()))?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .find(|n| n.starts_with("libLLVM-") && n.ends_with(".so") && n.contains("rust"))
        .and_then(|n| {
            n.strip_prefix("lib")
                .and_then(|n| n.strip_suffix(".so"))
                .map(str::to_string)
        })
        .with_context(|| format!("no libLLVM-*-rust-*.so in {}", lib_dir.display()))?;
    say(&format!(
        "bpf-linker is missing (it links the eBPF object); building bpf-linker {BPF_LINKER_VERSION} \
         against the nightly's own LLVM {llvm_major} ({llvm_lib}). This takes a few minutes, once."
    ));
    let rustflags = format!(
        "-L {lib} -l dylib={llvm_lib} -C link-arg=-Wl,-rpath,{lib}",
        lib = lib_dir.display()
    );
    status(
        nightly_cargo()
            .args([
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
                "--locked",
                "--no-default-features",
                "--features",
                &format!("llvm-{llvm_major},no-llvm-linking"),
            ])
            .env("RUSTFLAGS", rustflags)
            .env_remove("CARGO_TARGET_DIR"),
        "cargo install bpf-linker",
    )
}

fn nightly_llvm_major() -> Option<String> {
    let out = Command::new("rustup")
        .args(["run", "nightly", "rustc", "-vV"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .map(str::to_string)
}

fn which(name: &str) -> Option<PathBuf> {
    let paths = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&paths)
        .chain(std::iter::once(cargo_bin()))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
