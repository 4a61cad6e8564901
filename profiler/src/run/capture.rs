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

    /// Waits out a capture window that opened at `started`, calling `tick` on `state` five
    /// times a second (new processes and mappings, progress counters), and a light one
    /// ([`TickKind::Mappings`]) a moment after `wake` becomes readable (the kernel reported
    /// a new process or mapping: a compiler that lives 20 ms gets its unwind tables within
    /// milliseconds of its exec). A tick runs on a blocking thread: one that builds unwind
    /// rows for a library just loaded, or reads a JVM's code cache, may take longer than a
    /// tick, and the window must still end on time and on Ctrl-C. `close` runs the moment the
    /// capture ends (it closes the window), before a tick still running is waited for; then
    /// `state` is handed back.
    pub async fn wait<S, E>(
        &mut self,
        started: Instant,
        secs: u64,
        state: S,
        wake: Option<OwnedFd>,
        tick: fn(&mut S, TickKind) -> Tick,
        close: impl FnOnce() -> E,
    ) -> (EndReason, E, S)
    where
        S: Send + 'static,
    {
        let total = Duration::from_secs(secs);
        let mut progress = Progress::new(secs);
        let mut interval = tokio::time::interval(TICK);
        let wake = wake.and_then(|fd| {
            // SAFETY: the AsyncFd owns the OwnedFd, which stays open until it is dropped.
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
        });
        let exited = readable(self.exited.as_ref());
        tokio::pin!(exited);
        let mut ticks = Ticks {
            idle: Some(state),
            running: None,
            tick,
        };
        let reason = loop {
            let left = total.saturating_sub(started.elapsed());
            let woken = async {
                readable(wake.as_ref()).await;
                // The rest of an exec's mappings (its libraries) come within a
                // millisecond or two: read them in one go.
                tokio::time::sleep(MAPPINGS_SETTLE).await;
            };
            tokio::select! {
                _ = tokio::time::sleep(left) => break EndReason::Elapsed,
                _ = self.sigint.recv() => break EndReason::Interrupted,
                _ = self.sigterm.recv() => break EndReason::Terminated,
                _ = &mut exited => break EndReason::TargetExited,
                _ = interval.tick(), if ticks.is_idle() => ticks.start(TickKind::Full),
                _ = woken, if ticks.is_idle() => ticks.start(TickKind::Mappings),
                done = ticks.running() => {
                    let t = ticks.finished(done);
                    if t.target_gone {
                        break EndReason::TargetExited;
                    }
                    // A mappings tick reads no counters.
                    if t.samples != 0 || t.switches != 0 {
                        progress.show(started.elapsed(), t.samples, t.switches);
                    }
                }
            }
        };
        let closed = close();
        progress.finish();
        (reason, closed, ticks.state().await)
    }
}

/// Resolves once `fd` is readable (its readiness cleared); never without one.
async fn readable(fd: Option<&AsyncFd<OwnedFd>>) {
    match fd {
        Some(fd) => {
            if let Ok(mut guard) = fd.readable().await {
                guard.clear_ready();
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// The state ticks run on: here while idle, on a blocking thread while a tick runs.
struct Ticks<S> {
    idle: Option<S>,
    running: Option<tokio::task::JoinHandle<(S, Tick)>>,
    tick: fn(&mut S, TickKind) -> Tick,
}

impl<S: Send + 'static> Ticks<S> {
    fn is_idle(&self) -> bool {
        self.idle.is_some()
    }

    /// Runs a tick on a blocking thread, if none is running.
    fn start(&mut self, kind: TickKind) {
        if let Some(mut s) = self.idle.take() {
            let tick = self.tick;
            self.running = Some(tokio::task::spawn_blocking(move || {
                let t = tick(&mut s, kind);
                (s, t)
            }));
        }
    }

    /// Resolves when the running tick ends; never while none runs.
    async fn running(&mut self) -> Result<(S, Tick), tokio::task::JoinError> {
        match self.running.as_mut() {
            Some(handle) => handle.await,
            None => std::future::pending().await,
        }
    }

    /// Takes the state back from a tick that ended; what it learned.
    fn finished(&mut self, done: Result<(S, Tick), tokio::task::JoinError>) -> Tick {
        self.running = None;
        let (s, t) = joined(done);
        self.idle = Some(s);
        t
    }

    /// The state, once a tick still running has ended.
    async fn state(self) -> S {
        match (self.idle, self.running) {
            (Some(s), _) => s,
            (None, Some(handle)) => joined(handle.await).0,
            // A tick is either idle or running.
            (None, None) => unreachable!("the tick state was lost"),
        }
    }
}

/// A tick's result; a tick that panicked panics here, as it would have inline.
fn joined<T>(done: Result<T, tokio::task::JoinError>) -> T {
    match done {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
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

/// The full tick's period: often enough that a library loaded mid-capture gets its unwind
/// rows within a few of its first waits; reading /proc/<pid>/maps costs well under a
/// millisecond.
pub const TICK: Duration = Duration::from_millis(200);

/// How long after the kernel reported a new mapping the mappings tick runs.
const MAPPINGS_SETTLE: Duration = Duration::from_millis(2);

/// Which tick runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TickKind {
    /// Everything the target set follows: processes, names, `/proc` mappings, JVM code.
    Full,
    /// Only the kernel's mapping records (new processes, execs, mappings).
    Mappings,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Signals go to the whole test process: one waiter at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    }

    /// A tick slower than one that builds the rows of a large library just loaded (1.5 s): so
    /// slow that a window held open by it is told from one that was not by seconds, not by
    /// the scheduling noise of a loaded machine.
    const SLOW_TICK: Duration = Duration::from_secs(3);
    fn slow_tick(ticks: &mut u32, _: TickKind) -> Tick {
        std::thread::sleep(SLOW_TICK);
        *ticks += 1;
        Tick::default()
    }

    /// Waits out a window of `secs` with slow ticks (one waiter at a time, on a runtime of
    /// its own), `hooked` called once the signals are hooked: why it ended, when it closed
    /// after it opened, the ticks run, and when the wait returned.
    fn wait_with_slow_ticks(
        secs: u64,
        hooked: impl FnOnce(),
    ) -> (EndReason, Duration, u32, Duration) {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        runtime().block_on(async {
            let mut waiter = Waiter::new().expect("signal handlers");
            hooked();
            let started = Instant::now();
            let (reason, closed_after, ticks) = waiter
                .wait(started, secs, 0u32, None, slow_tick, || started.elapsed())
                .await;
            (reason, closed_after, ticks, started.elapsed())
        })
    }

    #[test]
    fn a_slow_tick_does_not_hold_the_window_open() {
        let (reason, closed_after, ticks, returned_after) = wait_with_slow_ticks(1, || {});
        assert_eq!(reason, EndReason::Elapsed);
        assert!(
            closed_after < Duration::from_secs(2),
            "the window closed {closed_after:?} after it opened, asked 1 s"
        );
        // The tick that was running when the window closed finished and handed its state
        // back.
        assert_eq!(ticks, 1);
        assert!(returned_after >= SLOW_TICK);
    }

    #[test]
    fn ctrl_c_during_a_slow_tick_ends_the_capture_at_once() {
        let mut signaller = None;
        let (reason, closed_after, _, _) = wait_with_slow_ticks(30, || {
            signaller = Some(std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                // SAFETY: a signal to this process, whose SIGINT the waiter has hooked.
                unsafe { libc::kill(libc::getpid(), libc::SIGINT) };
            }));
        });
        if let Some(s) = signaller {
            s.join().expect("the signalling thread");
        }
        assert_eq!(reason, EndReason::Interrupted);
        assert!(
            closed_after < Duration::from_secs(2),
            "Ctrl-C at 0.3 s closed the window after {closed_after:?}"
        );
    }
}
