//! The capture window: wait for the requested time, Ctrl-C, SIGTERM or the target's exit,
//! whichever comes first, while showing progress and keeping the target's mappings current.

use std::{
    io::{IsTerminal as _, Write as _},
    os::fd::{FromRawFd as _, OwnedFd},
    time::{Duration, Instant},
};

use tokio::{
    io::unix::AsyncFd,
    signal::unix::{SignalKind, signal},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    Elapsed,
    Interrupted,
    Terminated,
    TargetExited,
}

impl EndReason {
    pub fn note(self) -> Option<&'static str> {
        match self {
            EndReason::Elapsed => None,
            EndReason::Interrupted => Some("capture ended early by Ctrl-C"),
            EndReason::Terminated => Some("capture ended early by SIGTERM"),
            EndReason::TargetExited => Some("the target exited; capture ended early"),
        }
    }
}

/// Waits out the capture. Signals are hooked before the window opens so a Ctrl-C during the
/// capture never kills the profiler before it writes its output.
pub struct Waiter {
    sigint: tokio::signal::unix::Signal,
    sigterm: tokio::signal::unix::Signal,
    exited: Option<AsyncFd<OwnedFd>>,
}

impl Waiter {
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            sigint: signal(SignalKind::interrupt())?,
            sigterm: signal(SignalKind::terminate())?,
            exited: None,
        })
    }

    /// Ends the capture the moment `pid` exits (a launched command), not at the next tick.
    pub fn watch(&mut self, pid: u32) {
        self.exited = pidfd(pid).and_then(|fd| {
            // SAFETY: the AsyncFd owns the OwnedFd, which stays open until it is dropped.
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
        });
    }

    /// Waits out the capture, calling `tick` five times a second (to pick up new mappings and
    /// to read progress counters).
    /// Waits out a capture window that opened at `started`.
    pub async fn wait(
        &mut self,
        started: Instant,
        secs: u64,
        mut tick: impl FnMut() -> Tick,
    ) -> EndReason {
        let total = Duration::from_secs(secs);
        let mut progress = Progress::new(secs);
        // Often enough that a library loaded mid-capture gets its unwind rows within a few
        // of its first waits; reading /proc/<pid>/maps costs well under a millisecond.
        let mut interval = tokio::time::interval(Duration::from_millis(200));
        let exited = async {
            match &self.exited {
                Some(fd) => {
                    let _ = fd.readable().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::pin!(exited);
        let reason = loop {
            let left = total.saturating_sub(started.elapsed());
            tokio::select! {
                _ = tokio::time::sleep(left) => break EndReason::Elapsed,
                _ = self.sigint.recv() => break EndReason::Interrupted,
                _ = self.sigterm.recv() => break EndReason::Terminated,
                _ = &mut exited => break EndReason::TargetExited,
                _ = interval.tick() => {
                    let t = tick();
                    if t.target_gone {
                        break EndReason::TargetExited;
                    }
                    progress.show(started.elapsed(), t.samples, t.switches);
                }
            }
        };
        progress.finish();
        reason
    }
}

impl Waiter {
    /// Resolves at the next Ctrl-C or SIGTERM (after the window: to abandon post-processing).
    pub async fn interrupted(&mut self) {
        tokio::select! {
            _ = self.sigint.recv() => {}
            _ = self.sigterm.recv() => {}
        }
    }
}

/// What the periodic tick learned.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tick {
    pub samples: u64,
    pub switches: u64,
    pub target_gone: bool,
}

/// A pidfd becomes readable when the process exits: no polling of /proc needed.
fn pidfd(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just gave us this fd and nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// One live line on a terminal; nothing when stderr is a file or pipe (logs stay clean).
struct Progress {
    secs: u64,
    live: bool,
    shown: bool,
}

impl Progress {
    fn new(secs: u64) -> Self {
        Self {
            secs,
            live: std::io::stderr().is_terminal(),
            shown: false,
        }
    }

    fn show(&mut self, elapsed: Duration, samples: u64, switches: u64) {
        if !self.live {
            return;
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2K  {:>5.1} s / {} s   {} samples   {} switches",
            elapsed.as_secs_f64(),
            self.secs,
            samples,
            switches
        );
        let _ = err.flush();
        self.shown = true;
    }

    fn finish(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }
}
