//! Debian packages the bench, the demos and the tests run: each is checked by one path (well
//! under a second when all are present) and installed with apt-get when missing, saying why.

use std::{path::Path, process::Command};

use anyhow::{Result, bail};

use crate::cmd::output;

pub struct Package {
    /// Present when the package is installed.
    pub binary: &'static str,
    pub name: &'static str,
    pub why: &'static str,
}

/// What the end-to-end tests run besides the profiler and the C fixtures.
pub const TEST_PACKAGES: &[Package] = &[
    Package {
        binary: "/usr/bin/javac",
        name: "openjdk-17-jdk-headless",
        why: "the JIT test builds and profiles a Java program",
    },
    Package {
        binary: "/usr/bin/go",
        name: "golang-go",
        why: "the Go tests build a Go program, which has .debug_frame and no .eh_frame; \
              the pprof tests read --pprof files with `go tool pprof`",
    },
    Package {
        binary: "/usr/sbin/nginx",
        name: "nginx",
        why: "the whole-service test profiles an nginx master and its workers by the master's PID",
    },
    Package {
        binary: "/usr/bin/wrk",
        name: "wrk",
        why: "the whole-service test puts nginx under load",
    },
    Package {
        // Debian's versioned server packages install under this directory (pgbench with the
        // server since PostgreSQL 15).
        binary: "/usr/lib/postgresql",
        name: "postgresql",
        why: "the accuracy test compares PostgreSQL backends under pgbench with schedstat",
    },
    Package {
        binary: "/usr/bin/chromium",
        name: "chromium",
        why: "the HTML report test opens --report x.html in headless Chromium",
    },
];

/// Installs whichever of `packages` is missing.
pub fn ensure(packages: &[Package]) -> Result<()> {
    let missing: Vec<&Package> = packages
        .iter()
        .filter(|p| !Path::new(p.binary).exists())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    for p in &missing {
        eprintln!(
            "xtask: {} is missing: installing the Debian package {} ({})",
            p.binary, p.name, p.why
        );
    }
    output(Command::new("apt-get").arg("update"), "apt-get update")?;
    output(
        Command::new("apt-get")
            .args(["install", "-y"])
            .args(missing.iter().map(|p| p.name))
            .env("DEBIAN_FRONTEND", "noninteractive"),
        "apt-get install",
    )?;
    for p in &missing {
        if !Path::new(p.binary).exists() {
            bail!("{} was installed but {} is not there", p.name, p.binary);
        }
    }
    Ok(())
}
