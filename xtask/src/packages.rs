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
        why: "the whole-service and framework tests put their services under load",
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
    // The framework tests (profiler/tests/frameworks.rs) compile their services against
    // Debian's jars under /usr/share/java: each jar is checked by the one the fixtures use.
    Package {
        binary: "/usr/share/java/tomcat9-catalina.jar",
        name: "libtomcat9-java",
        why: "the framework tests embed Tomcat 9 (org.apache.catalina.startup.Tomcat)",
    },
    Package {
        binary: "/usr/share/java/spring3-core.jar",
        name: "libspring-core-java",
        why: "the framework tests run a Spring MVC service",
    },
    Package {
        binary: "/usr/share/java/spring3-beans.jar",
        name: "libspring-beans-java",
        why: "the framework tests run a Spring MVC service",
    },
    Package {
        binary: "/usr/share/java/spring3-context.jar",
        name: "libspring-context-java",
        why: "the framework tests configure their Spring context with annotations",
    },
    Package {
        binary: "/usr/share/java/spring3-web.jar",
        name: "libspring-web-java",
        why: "the framework tests' controller is a Spring @RestController",
    },
    Package {
        binary: "/usr/share/java/spring3-web.servlet.jar",
        name: "libspring-web-servlet-java",
        why: "the framework tests serve through Spring's DispatcherServlet",
    },
    Package {
        binary: "/usr/share/java/spring3-jdbc.jar",
        name: "libspring-jdbc-java",
        why: "the framework tests query MariaDB with Spring's JdbcTemplate",
    },
    Package {
        binary: "/usr/share/java/HikariCP.jar",
        name: "libhikaricp-java",
        why: "the framework tests' database pool is HikariCP",
    },
    Package {
        binary: "/usr/share/java/mariadb-java-client.jar",
        name: "libmariadb-java",
        why: "the framework tests reach MariaDB through MariaDB Connector/J",
    },
    Package {
        binary: "/usr/share/java/logback-classic.jar",
        name: "liblogback-java",
        why: "the framework tests' service logs with logback",
    },
    Package {
        binary: "/usr/share/java/slf4j-api.jar",
        name: "libslf4j-java",
        why: "the framework tests' service logs through SLF4J",
    },
    Package {
        binary: "/usr/share/java/netty-codec-http.jar",
        name: "libnetty-java",
        why: "the framework tests run a Netty 4.1 HTTP server",
    },
    Package {
        binary: "/usr/sbin/mariadbd",
        name: "mariadb-server",
        why: "the framework tests profile a service with its private MariaDB",
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

/// A Python package the tests import, installed with pip (for the invoking user) when missing.
pub struct PythonPackage {
    /// Importable when the package is installed.
    pub module: &'static str,
    pub name: &'static str,
    pub why: &'static str,
}

/// What the tests import in Python.
pub const TEST_PYTHON_PACKAGES: &[PythonPackage] = &[PythonPackage {
    module: "perfetto.protos.perfetto.trace.perfetto_trace_pb2",
    name: "perfetto",
    why: "the timeline tests read --timeline traces back with Perfetto's own protos \
          (profiler-core/tests/perfetto_decode.py)",
}];

/// Installs whichever of `packages` python3 cannot import (`pip install --user`; Debian's
/// Python refuses pip outside a virtualenv unless told the user site is meant).
pub fn ensure_python(packages: &[PythonPackage]) -> Result<()> {
    for p in packages {
        let present = Command::new("python3")
            .args(["-c", &format!("import {}", p.module)])
            .output()
            .is_ok_and(|o| o.status.success());
        if present {
            continue;
        }
        eprintln!(
            "xtask: the Python module {} is missing: installing {} with pip ({})",
            p.module, p.name, p.why
        );
        output(
            Command::new("python3").args([
                "-m",
                "pip",
                "install",
                "--user",
                "--break-system-packages",
                p.name,
            ]),
            "pip install",
        )?;
    }
    Ok(())
}
