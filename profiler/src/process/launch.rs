//! `profiler -- CMD ARGS…`: the command is found before anything is attached, started held
//! (forked, then blocked before its exec until the capture window is open, so its first
//! instruction is inside the window), run as the user behind sudo when there is one, and its
//! exit status becomes the profiler's.

use std::{
    ffi::{OsStr, OsString},
    io::{self, Write as _},
    os::unix::{ffi::OsStrExt as _, fs::PermissionsExt as _, process::ExitStatusExt as _},
    path::{Path, PathBuf},
    process::ExitStatus,
};

use crate::run::preflight::PreflightError;

/// A command found on disk.
#[derive(Clone, Debug)]
pub struct Command {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// What the user typed, for messages.
    pub shown: String,
}

/// Finds the program like a shell would (a name with a `/` as is, else along `PATH`).
pub fn resolve(command: &[OsString]) -> Result<Command, PreflightError> {
    let Some((first, args)) = command.split_first() else {
        return Err(PreflightError::CommandNotFound(String::new()));
    };
    let shown = first.to_string_lossy().into_owned();
    let program = find_program(first, std::env::var_os("PATH").as_deref())
        .ok_or_else(|| PreflightError::CommandNotFound(shown.clone()))?;
    Ok(Command {
        program,
        args: args.to_vec(),
        shown: std::iter::once(first)
            .chain(args)
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
    })
}

fn find_program(name: &OsStr, path: Option<&OsStr>) -> Option<PathBuf> {
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.as_bytes().contains(&b'/') {
        let p = PathBuf::from(name);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(name))
        .find(|p| executable(p))
}

/// A launched command, held before its exec until [`Launched::release`].
pub struct Launched {
    pid: libc::pid_t,
    /// Writing a byte here lets the child exec; closing it without one makes it exit.
    release: Option<std::fs::File>,
    status: Option<i32>,
}

impl Command {
    /// Forks by hand: `std::process::Command::spawn` waits until the child has exec'd, and
    /// this child must not exec before the window opens.
    pub fn spawn_held(&self) -> io::Result<Launched> {
        // Everything the child needs is allocated before the fork: a forked copy of a
        // multi-threaded process may only make async-signal-safe calls.
        let cstring = |s: &OsStr| {
            std::ffi::CString::new(s.as_bytes()).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command")
            })
        };
        let program = cstring(self.program.as_os_str())?;
        let mut argv_owned = vec![program.clone()];
        for a in &self.args {
            argv_owned.push(cstring(a)?);
        }
        let mut argv: Vec<*const libc::c_char> = argv_owned.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let identity = invoking_user();
        // The profiler's start-up runs above the nice it was started with; the command not.
        let nice = crate::kernel::priority::original();

        let mut fds = [0i32; 2];
        // SAFETY: a valid array for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let [read_fd, write_fd] = fds;
        // SAFETY: fork has no preconditions; the child below only makes async-signal-safe
        // calls (setgroups, setgid, setuid, setpriority, read, execv, _exit) on memory prepared above.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let e = io::Error::last_os_error();
            // SAFETY: both descriptors are ours and closed once.
            unsafe {
                libc::close(read_fd);
                libc::close(write_fd);
            }
            return Err(e);
        }
        if pid == 0 {
            // SAFETY: the child: async-signal-safe calls only, and it never returns.
            unsafe {
                if let Some((uid, gid, groups)) = &identity
                    && (libc::setgroups(groups.len(), groups.as_ptr()) != 0
                        || libc::setgid(*gid) != 0
                        || libc::setuid(*uid) != 0)
                {
                    libc::_exit(126);
                }
                if let Some(nice) = nice {
                    libc::setpriority(libc::PRIO_PROCESS, 0, nice);
                }
                let mut byte = 0u8;
                if libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) != 1 {
                    // The profiler went away (or gave up) before the window opened.
                    libc::_exit(127);
                }
                libc::execv(argv[0], argv.as_ptr());
                libc::_exit(127);
            }
        }
        // SAFETY: the parent's copy of the read end is ours and closed once; the write end
        // becomes a File that owns it.
        let release = unsafe {
            libc::close(read_fd);
            use std::os::fd::FromRawFd as _;
            std::fs::File::from_raw_fd(write_fd)
        };
        Ok(Launched {
            pid,
            release: Some(release),
            status: None,
        })
    }
}

impl Launched {
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Lets the command exec.
    pub fn release(&mut self) -> io::Result<()> {
        match self.release.take() {
            Some(mut pipe) => pipe.write_all(b"x"),
            None => Ok(()),
        }
    }

    /// Passes a Ctrl-C or SIGTERM that ended the capture on to the command (from a terminal
    /// it got the Ctrl-C itself; sent to the profiler alone, it would run on).
    pub fn signal(&self, signal: i32) {
        if self.status.is_none() {
            // SAFETY: our own child, not yet reaped, so the pid cannot have been reused.
            unsafe { libc::kill(self.pid, signal) };
        }
    }

    /// Waits for the command and returns the status the profiler should exit with (a
    /// signal's death as 128 + its number, as a shell reports it).
    pub fn wait(&mut self) -> io::Result<i32> {
        self.release.take();
        if let Some(code) = self.status {
            return Ok(code);
        }
        let mut raw = 0i32;
        loop {
            // SAFETY: waits for our own child into a local status word.
            let r = unsafe { libc::waitpid(self.pid, &mut raw, 0) };
            if r == self.pid {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        let status = ExitStatus::from_raw(raw);
        let code = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        self.status = Some(code);
        Ok(code)
    }
}

/// The user behind sudo (uid, gid, groups) when running as root under it.
fn invoking_user() -> Option<(libc::uid_t, libc::gid_t, Vec<libc::gid_t>)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let uid: libc::uid_t = std::env::var("SUDO_UID").ok()?.parse().ok()?;
    let gid: libc::gid_t = std::env::var("SUDO_GID").ok()?.parse().ok()?;
    let user = std::ffi::CString::new(std::env::var("SUDO_USER").ok()?).ok()?;
    let mut groups = vec![0 as libc::gid_t; 256];
    let mut n = groups.len() as i32;
    // SAFETY: a valid user name, and a buffer of `n` groups for getgrouplist to fill.
    let ok = unsafe { libc::getgrouplist(user.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
    groups.truncate(if ok < 0 { 1 } else { n.max(0) as usize });
    if groups.is_empty() {
        groups.push(gid);
    }
    Some((uid, gid, groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_like_a_shell_finds_them() {
        assert_eq!(
            find_program(OsStr::new("sh"), Some(OsStr::new("/nonexistent:/bin"))),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(
            find_program(OsStr::new("/bin/sh"), None),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(
            find_program(OsStr::new("no-such-command-xyz"), Some(OsStr::new("/bin"))),
            None
        );
        // Not executable.
        assert_eq!(find_program(OsStr::new("/etc/passwd"), None), None);
        let err = resolve(&[OsString::from("no-such-command-xyz")]).unwrap_err();
        assert_eq!(err.to_string(), "command not found: no-such-command-xyz");
    }

    #[test]
    fn a_held_command_runs_only_once_released_and_its_status_is_kept() {
        let cmd = resolve(&["sh", "-c", "exit 3"].map(OsString::from)).unwrap();
        let mut launched = cmd.spawn_held().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        // Still held: the child is the forked copy, blocked before exec.
        let exe = std::fs::read_link(format!("/proc/{}/exe", launched.pid())).unwrap();
        assert_eq!(exe, std::env::current_exe().unwrap());
        launched.release().unwrap();
        assert_eq!(launched.wait().unwrap(), 3);
    }
}
