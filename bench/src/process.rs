//! Processes the bench starts and watches: a tool's [`Instance`] (stderr collected line by
//! line, reaped with its rusage), and what /proc says about processes (children, BPF programs
//! held, CPU time).

use std::{
    collections::HashSet,
    fs,
    io::{BufRead as _, BufReader},
    os::unix::process::ExitStatusExt as _,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Progress on stderr, with the bench's prefix.
pub fn say(what: &str) {
    eprintln!("bench: {what}");
}

/// How to tell that a tool is attached.
#[derive(Clone, Copy)]
pub enum Ready {
    /// It says so on stderr (ours: `profiler: capturing …`, printed after attach and start).
    StderrLine(&'static str),
    /// It holds a BPF link fd (offcputime prints nothing until the end).
    BpfLink,
    /// Its workload child has exec'd (perf forks `sleep` first and starts it only after the
    /// events are opened and enabled).
    ChildExec(&'static str),
}

/// A child process whose stderr is collected line by line, with the time each line arrived.
/// It is reaped with `wait4` (for its rusage); dropping a still-running one kills it.
pub struct Instance {
    pub what: String,
    child: Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    reader: Option<thread::JoinHandle<()>>,
    exit: Option<(ExitStatus, libc::rusage)>,
}

impl Instance {
    pub fn spawn(what: String, mut cmd: Command) -> Result<Self> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        let stderr = child.stderr.take().context("no stderr pipe")?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let reader = thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((Instant::now(), line));
            }
        });
        Ok(Instance {
            what,
            child,
            lines,
            reader: Some(reader),
            exit: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, l)| l.clone())
            .collect()
    }

    pub fn line_time(&self, prefix: &str) -> Option<Instant> {
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(_, l)| l.starts_with(prefix))
            .map(|(t, _)| *t)
    }

    pub fn wait_ready(&mut self, ready: Ready) -> Result<()> {
        let started = Instant::now();
        loop {
            if self.poll_exit() {
                self.join_reader();
                let status = self.exit.map(|(s, _)| s.to_string()).unwrap_or_default();
                bail!(
                    "{} exited before it was attached ({status}); its stderr ends with: {}",
                    self.what,
                    tail_of_lines(&self.lines())
                );
            }
            let ready_now = match ready {
                Ready::StderrLine(prefix) => self.line_time(prefix).is_some(),
                Ready::BpfLink => holds_bpf_link(self.pid()),
                Ready::ChildExec(comm) => children(self.pid()).iter().any(|(_, c)| c == comm),
            };
            if ready_now {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!(
                    "{} was not attached within {} s; its stderr ends with: {}",
                    self.what,
                    READY_TIMEOUT.as_secs(),
                    tail_of_lines(&self.lines())
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGINT: every tool here ends its capture and writes its output on it.
    pub fn interrupt(&self) {
        if self.exit.is_none() {
            signal(self.pid(), libc::SIGINT);
        }
    }

    /// Non-blocking `wait4`; true once the child has exited.
    fn poll_exit(&mut self) -> bool {
        if self.exit.is_some() {
            return true;
        }
        let mut status = 0;
        // SAFETY: rusage is plain data; wait4 fills it in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, with valid out-pointers.
        let r = unsafe {
            libc::wait4(
                self.pid() as libc::pid_t,
                &mut status,
                libc::WNOHANG,
                &mut usage,
            )
        };
        if r == self.pid() as libc::pid_t {
            self.exit = Some((ExitStatus::from_raw(status), usage));
        }
        self.exit.is_some()
    }

    /// Waits for the exit (killing the child after `timeout`), then for the last stderr lines.
    pub fn reap(&mut self, timeout: Duration) -> Result<(ExitStatus, libc::rusage)> {
        let started = Instant::now();
        while !self.poll_exit() {
            if started.elapsed() > timeout {
                signal(self.pid(), libc::SIGKILL);
                while !self.poll_exit() {
                    thread::sleep(Duration::from_millis(20));
                }
                self.join_reader();
                bail!(
                    "{} did not exit within {} s of being stopped; its stderr ends with: {}",
                    self.what,
                    timeout.as_secs(),
                    tail_of_lines(&self.lines())
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.join_reader();
        Ok(self.exit.expect("poll_exit returned true"))
    }

    fn join_reader(&mut self) {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if self.exit.is_none() {
            signal(self.pid(), libc::SIGKILL);
            while !self.poll_exit() {
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory effects; the pid is one of our children.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Direct children of `pid` as (pid, comm).
pub fn children(pid: u32) -> Vec<(u32, String)> {
    proc_stats()
        .into_iter()
        .filter(|(_, stat)| {
            stat.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u32>().ok())
                == Some(pid)
        })
        .map(|(child, _)| (child, proc_comm(child)))
        .collect()
}

/// Every process as (pid, the part of /proc/<pid>/stat after "(comm) ": state ppid …).
pub fn proc_stats() -> Vec<(u32, String)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // comm may hold spaces and parentheses: the fields start after the last ')'.
            let rest = stat.get(stat.rfind(')')? + 1..)?.trim_start().to_string();
            Some((pid, rest))
        })
        .collect()
}

fn proc_comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_default()
}

/// The programs a process holds: every bpf-prog and bpf_link fd's fdinfo names a `prog_id`.
/// (This is what `bpftool prog show` would print as "pids", which Debian's bpftool lacks.)
pub fn bpf_prog_ids(pid: u32) -> HashSet<u32> {
    fdinfos(pid)
        .iter()
        .flat_map(|info| info.lines())
        .filter_map(|l| l.strip_prefix("prog_id:"))
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

fn holds_bpf_link(pid: u32) -> bool {
    fdinfos(pid).iter().any(|info| info.contains("link_id:"))
}

fn fdinfos(pid: u32) -> Vec<String> {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| fs::read_to_string(e.path()).ok())
        .collect()
}

/// The last lines a tool wrote to stderr, as one line.
pub fn tail_of_lines(lines: &[String]) -> String {
    xtask::tail(&lines.join("\n"), 5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_that_dies_early_is_named_with_its_stderr() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo starting >&2; echo 'cannot attach: EPERM' >&2; exit 3",
        ]);
        let mut tool = Instance::spawn("profiler --mode wall (on nginx worker 1)".into(), cmd)
            .expect("sh starts");
        let err = tool
            .wait_ready(Ready::StderrLine("profiler: capturing"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "profiler --mode wall (on nginx worker 1) exited before it was attached \
             (exit status: 3); its stderr ends with: starting | cannot attach: EPERM"
        );
    }
}
