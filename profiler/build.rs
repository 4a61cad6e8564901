//! Builds the eBPF object (`profiler-ebpf`, target bpfel-unknown-none) with the nightly
//! toolchain and hands its path to the crate as `PROFILER_EBPF_OBJECT`.
//!
//! A plain `cargo build` works once the eBPF toolchain is installed. Without it (a newcomer's
//! stable-only `cargo test`), the crate is built with no eBPF object: everything that does
//! not load programs (replay, diff, the unit tests) works, and a capture is refused in one
//! sentence naming `cargo xtask build`, which installs the toolchain. A toolchain that is
//! there but fails to build the programs still fails the build.

use std::{
    env,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// The eBPF global functions (`#[no_mangle]` in profiler-ebpf), kept global by bpf-linker: the
/// verifier checks each once, on its own, with its arguments unknown (see unwind.rs). rustc
/// also hands bpf-linker every `#[no_mangle]` symbol (`--export-symbols`), so a function left
/// off this list is global all the same: the unit test in `src/probes/exports.rs` checks that
/// the list is exactly the object's global functions.
const EXPORTS: &[&str] = &[
    "unwind_frame",
    "unwind_switch_user_stack",
    "kernel_memo_recognise",
    "kernel_memo_remember",
    "switch_account",
    "wait_resource",
];

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    let ebpf_dir = manifest_dir.join("../profiler-ebpf");
    let common_dir = manifest_dir.join("../profiler-common");
    for dir in [&ebpf_dir, &common_dir] {
        println!("cargo:rerun-if-changed={}", dir.join("src").display());
        println!(
            "cargo:rerun-if-changed={}",
            dir.join("Cargo.toml").display()
        );
    }
    println!(
        "cargo:rerun-if-changed={}",
        ebpf_dir.join("Cargo.lock").display()
    );
    println!("cargo:rerun-if-env-changed=PROFILER_EBPF_OBJECT_OVERRIDE");
    println!("cargo:rerun-if-env-changed=PATH");
    println!(
        "cargo:rustc-env=PROFILER_EBPF_EXPORTS={}",
        EXPORTS.join(",")
    );
    // Set when the crate is built without the eBPF programs: the tests that read the object
    // are then ignored, with that reason.
    println!("cargo:rustc-check-cfg=cfg(no_ebpf_object)");

    // An object built elsewhere (e.g. by the xtask for a cross build) can be supplied as is.
    if let Some(path) = env::var_os("PROFILER_EBPF_OBJECT_OVERRIDE") {
        println!(
            "cargo:rustc-env=PROFILER_EBPF_OBJECT={}",
            Path::new(&path).display()
        );
        return;
    }

    if let Err(missing) = check_toolchain() {
        // An empty object: `probes.rs` refuses to capture with it, naming the fix.
        let empty = out_dir.join("no-ebpf-object");
        if let Err(e) = std::fs::write(&empty, b"") {
            fail(&format!("cannot write {}: {e}", empty.display()));
        }
        println!(
            "cargo:warning=built without the eBPF programs ({missing}): captures are refused \
             until `cargo xtask build` installs the eBPF toolchain"
        );
        println!("cargo:rustc-env=PROFILER_EBPF_OBJECT={}", empty.display());
        println!("cargo:rustc-cfg=no_ebpf_object");
        // Cargo reruns a build script whose `rerun-if-changed` path does not exist: without
        // this, the toolchain installed afterwards (`cargo xtask build`) would leave the
        // programs out until a source file changed.
        println!(
            "cargo:rerun-if-changed={}",
            out_dir.join("recheck-the-ebpf-toolchain").display()
        );
        return;
    }

    let target_dir = out_dir.join("ebpf-target");
    let mut cmd = Command::new("rustup");
    cmd.current_dir(&ebpf_dir)
        .args(["run", "nightly", "cargo", "build", "--release", "--locked"])
        .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
        .arg("--target-dir")
        .arg(&target_dir)
        // Unit-separated flags, as cargo encodes them: BTF for the loader, debug info for BTF.
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            [
                "--cfg=bpf_target_arch=\"x86_64\"".to_string(),
                "-Cdebuginfo=2".to_string(),
                "-Clink-arg=--btf".to_string(),
                // Global functions stay global (the verifier checks each once): see EXPORTS.
                format!("-Clink-arg=--export={}", EXPORTS.join(",")),
            ]
            .join("\x1f"),
        )
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    // The outer cargo's toolchain choice must not leak into the nightly build.
    for key in [
        "RUSTC",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "RUSTUP_TOOLCHAIN",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        cmd.env_remove(key);
    }
    let status = cmd.status().unwrap_or_else(|e| {
        fail(&format!(
            "could not run `rustup run nightly cargo build` for profiler-ebpf: {e}"
        ))
    });
    if !status.success() {
        fail("building the eBPF programs (profiler-ebpf) failed; the compiler output is above");
    }
    let object = target_dir.join("bpfel-unknown-none/release/profiler-ebpf");
    println!("cargo:rustc-env=PROFILER_EBPF_OBJECT={}", object.display());
}

/// Says what is missing, in words a user can act on.
fn check_toolchain() -> Result<(), String> {
    let on_path = |name: &str| {
        env::var_os("PATH")
            .map(|paths| env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
            .unwrap_or(false)
    };
    if !on_path("rustup") {
        return Err("rustup is not on PATH (the eBPF crate needs the nightly toolchain)".into());
    }
    let nightly_src = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--print", "sysroot"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let Some(sysroot) = nightly_src else {
        return Err("the nightly Rust toolchain is not installed".into());
    };
    if !sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        return Err("the nightly toolchain has no rust-src component".into());
    }
    if !on_path("bpf-linker") {
        return Err("bpf-linker is not on PATH".into());
    }
    Ok(())
}

fn fail(message: &str) -> ! {
    // cargo shows a build script's stderr when it fails; keep the message first and alone.
    eprintln!("\nerror: {message}\n");
    std::process::exit(1);
}
