//! The machine the bench ran on, as the report states it: kernel, CPUs, memory, the
//! packages' versions, the profiler's revision.

use std::{fs, path::Path, process::Command, thread};

use xtask::output;

use crate::tools::PACKAGES;

pub struct Machine {
    pub(super) kernel: String,
    pub(super) cpus: usize,
    pub(super) cpu_model: String,
    pub(super) memory_gib: f64,
    pub(super) versions: String,
    pub(super) revision: String,
}

impl Machine {
    pub fn describe(root: &Path) -> Self {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let versions = PACKAGES
            .iter()
            .map(|p| format!("{} {}", p.name, package_version(p.name)))
            .collect::<Vec<_>>()
            .join(", ");
        let git = |args: &[&str]| {
            output(Command::new("git").current_dir(root).args(args), "git").unwrap_or_default()
        };
        let dirty = !git(&["status", "--porcelain"]).trim().is_empty();
        Machine {
            kernel: output(Command::new("uname").arg("-r"), "uname")
                .unwrap_or_default()
                .trim()
                .to_string(),
            cpus: thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
                .unwrap_or_else(|| "unknown CPU".to_string()),
            memory_gib: mem_kib / (1024.0 * 1024.0),
            versions,
            revision: format!(
                "{}{}",
                git(&["rev-parse", "--short", "HEAD"]).trim(),
                if dirty { " + uncommitted changes" } else { "" }
            ),
        }
    }

    /// Date, kernel, CPUs and their model, memory, the profiler's revision.
    pub(super) fn line(&self) -> String {
        let date = output(
            Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]),
            "date",
        )
        .unwrap_or_default();
        format!(
            "{} · Linux {} · {} CPUs ({}) · {:.1} GiB RAM · profiler at {}",
            date.trim(),
            self.kernel,
            self.cpus,
            self.cpu_model,
            self.memory_gib,
            self.revision,
        )
    }

    /// "2 CPUs, AMD EPYC 7B13, Linux 6.18.44": what the side-by-side ratios hold for.
    pub fn host(&self) -> String {
        format!(
            "{} CPUs, {}, Linux {}",
            self.cpus, self.cpu_model, self.kernel
        )
    }
}

fn package_version(name: &str) -> String {
    output(
        Command::new("dpkg-query").args(["-W", "-f", "${Version}", name]),
        "dpkg-query",
    )
    .unwrap_or_else(|_| "?".to_string())
}
