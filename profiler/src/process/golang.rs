//! Go targets: which target processes run a Go binary (read once, before the programs load,
//! with `profiler_core::gobin`), and the goroutine uprobes attached to each one's runtime
//! (`Probes::attach_go`). A Go binary the probes cannot read (too old a Go, another
//! architecture, no `runtime.gopark` found) is profiled at the OS-thread level, with a note
//! saying why; nothing is written into the target.

use std::{collections::HashMap, os::unix::fs::MetadataExt as _, path::PathBuf};

use profiler_core::{
    gobin::{self, GoRuntime},
    model::GoProcess,
};

use crate::kernel::probes::Probes;

/// A target process whose executable is a Go binary.
#[derive(Debug)]
pub struct GoTarget {
    pub pid: u32,
    /// The executable the probes attach to.
    pub exe: PathBuf,
    /// What the probes need, or why they cannot follow its goroutines.
    pub runtime: Result<GoRuntime, String>,
    pub version: String,
}

/// The Go binaries among processes `pids` (their `/proc/PID/exe`), each file read once
/// however many processes run it.
pub fn find(pids: impl IntoIterator<Item = u32>) -> Vec<GoTarget> {
    let mut seen: HashMap<(u64, u64), Option<Result<GoRuntime, String>>> = HashMap::new();
    let mut out = Vec::new();
    for pid in pids {
        let exe = PathBuf::from(format!("/proc/{pid}/exe"));
        if let Some(t) = find_one(pid, exe, &mut seen) {
            out.push(t);
        }
    }
    out
}

/// A launched command's program (its process has not exec'd it yet).
pub fn find_program(pid: u32, program: PathBuf) -> Option<GoTarget> {
    find_one(pid, program, &mut HashMap::new())
}

fn find_one(
    pid: u32,
    exe: PathBuf,
    seen: &mut HashMap<(u64, u64), Option<Result<GoRuntime, String>>>,
) -> Option<GoTarget> {
    // A process gone or a kernel thread: nothing to read, nothing to say.
    let meta = std::fs::metadata(&exe).ok()?;
    let read = seen
        .entry((meta.dev(), meta.ino()))
        .or_insert_with(|| match gobin::read_path(&exe) {
            Ok(None) => None,
            Ok(Some(rt)) => Some(Ok(rt)),
            Err(e) => Some(Err(e.to_string())),
        })
        .clone()?;
    let version = match &read {
        Ok(rt) => rt.version.clone(),
        Err(_) => String::new(),
    };
    Some(GoTarget {
        pid,
        exe,
        runtime: read,
        version,
    })
}

/// The bits of the binary's reasons whose re-park continues a wait (none where the binary
/// does not name its reasons: every park is then a wait).
fn merged_reasons(reasons: &[String]) -> u64 {
    reasons
        .iter()
        .enumerate()
        .take(64)
        .filter(|(_, r)| profiler_common::GO_MERGED_REASONS.contains(&r.as_str()))
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

/// Attaches the goroutine probes to each Go target; what the report says of each.
pub fn attach(probes: &mut Probes, targets: &[GoTarget]) -> Vec<GoProcess> {
    targets
        .iter()
        .map(|t| {
            let unfollowed = match &t.runtime {
                Ok(rt) => probes
                    .set_go_merge(t.pid, merged_reasons(&rt.reasons))
                    .and_then(|()| {
                        probes.attach_go(t.pid, &t.exe, rt.park_offset, rt.execute_offset)
                    })
                    .err()
                    .map(|e| format!("its runtime's probes did not attach ({e})")),
                Err(why) => Some(why.clone()),
            };
            match &unfollowed {
                None => log::info!(
                    "goroutines of process {} ({}) followed through its runtime",
                    t.pid,
                    t.version
                ),
                Some(why) => log::info!("goroutines of process {} not followed: {why}", t.pid),
            }
            GoProcess {
                pid: t.pid,
                version: t.version.clone(),
                unfollowed,
                reasons: t
                    .runtime
                    .as_ref()
                    .map(|rt| rt.reasons.clone())
                    .unwrap_or_default(),
            }
        })
        .collect()
}
