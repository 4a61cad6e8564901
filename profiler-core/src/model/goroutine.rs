//! Goroutine waits of Go targets, as the uprobes on their runtime measured them
//! (`profiler-ebpf/src/goroutine.rs`): raw from the drain, and per process, stack and wait
//! reason in the profile.

use profiler_common::{GoPark, GoWaitKey, GoWaitValue, WaitHist};
use serde::{Deserialize, Serialize};

/// A Go process of the target set, and whether its goroutines were followed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GoProcess {
    pub pid: u32,
    /// `go1.19.8`; empty when unreadable.
    pub version: String,
    /// Why its goroutines were not followed (its OS threads are profiled all the same); None:
    /// they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unfollowed: Option<String>,
    /// The runtime's names of its wait reasons, by `waitReason` (empty: not in the binary).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// What the drain took of the goroutine tables, with the capture side's Go processes.
#[derive(Debug, Default)]
pub struct RawGoroutines {
    pub processes: Vec<GoProcess>,
    pub waits: Vec<(GoWaitKey, GoWaitValue)>,
    /// Each goroutine's last wait when the window closed, by `g`: still parked (`end_ns`
    /// 0), or ended and not yet aggregated (its next park would have).
    pub parked: Vec<(u64, GoPark)>,
}

/// Goroutine waits of one process, park stack and reason, over the window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoroutineWait {
    pub pid: u32,
    pub user_stack: u64,
    /// The runtime's wait reason (`chan receive`, `IO wait`, `select` …), or `wait reason N`
    /// where the binary does not name them.
    pub reason: String,
    /// Their time in the window, the still-parked ones' up to its end.
    pub total_ns: u64,
    /// Of it, the waits that ended (the histogram's).
    #[serde(default)]
    pub ended_ns: u64,
    /// Waits that ended in the window (the histogram's), and those still parked at its end.
    pub count: u64,
    pub open: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub hist: WaitHist,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Goroutines {
    pub processes: Vec<GoProcess>,
    pub waits: Vec<GoroutineWait>,
}

impl Goroutines {
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty() && self.waits.is_empty()
    }
}
