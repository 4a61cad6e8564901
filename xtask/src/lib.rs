//! What the `cargo xtask` commands and the bench crate (`bench/`) share, once: the eBPF
//! toolchain bootstrap, the Debian package installer, the fuzz runs, building the profiler,
//! and running commands so that a failure is one sentence.

mod cmd;
pub mod fuzz;
pub mod packages;
pub mod toolchain;

pub use cmd::{cargo, output, status, tail};

use std::path::{Path, PathBuf};

use anyhow::Result;

/// The workspace root: the parent of this crate's directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Makes sure the eBPF toolchain is there ([`toolchain::ensure`]), builds the profiler (its
/// build script builds the eBPF object) and returns the binary.
pub fn build(root: &Path, debug: bool) -> Result<PathBuf> {
    toolchain::ensure()?;
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

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
