//! Checks that must pass before a capture starts (privilege, target, kernel BTF, outputs), each
//! failing with one sentence that says what to do, so a 20-second capture is never wasted.

use std::{
    fs::File,
    io,
    path::{Path, PathBuf},
};

use thiserror::Error;

use crate::kernel::facts::VMLINUX_BTF;

#[derive(Debug, Error)]
pub enum PreflightError {
    #[error(
        "loading eBPF programs needs root (or the CAP_BPF and CAP_PERFMON capabilities); \
         run with sudo, or through `cargo xtask run`, which does"
    )]
    NotPrivileged,
    #[error("there is no process with PID {0}")]
    NoSuchProcess(u32),
    #[error("PID {0} is a kernel thread, which has no user stacks to profile")]
    KernelThread(u32),
    #[error("cannot read the memory map of PID {pid} ({error}); is it protected from tracing?")]
    Unreadable { pid: u32, error: io::Error },
    #[error(
        "this kernel exposes no BTF ({VMLINUX_BTF} is missing): the profiler needs a kernel \
         built with CONFIG_DEBUG_INFO_BTF=y"
    )]
    NoBtf,
    #[error("command not found: {0}")]
    CommandNotFound(String),
    #[error("{0} is not a cgroup v2 directory ({1})")]
    NotCgroup(PathBuf, String),
    #[error("there is no process in {0} to profile")]
    EmptyCgroup(PathBuf),
    #[error("the report path {0} must end in .md (Markdown), .json or .html")]
    ReportExtension(PathBuf),
    // The io error is part of the sentence, not a `source`: the message stays one sentence.
    #[error("cannot write {what} to {path}: {error}")]
    Output {
        what: &'static str,
        path: PathBuf,
        error: io::Error,
    },
}

/// Capabilities that let a non-root user load and attach our programs.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Root, or CAP_SYS_ADMIN, or both CAP_BPF and CAP_PERFMON in the effective set.
pub fn check_privilege() -> Result<(), PreflightError> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u32| effective & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        Ok(())
    } else {
        Err(PreflightError::NotPrivileged)
    }
}

pub fn check_btf() -> Result<(), PreflightError> {
    if Path::new(VMLINUX_BTF).is_file() {
        Ok(())
    } else {
        Err(PreflightError::NoBtf)
    }
}

/// The process to profile.
#[derive(Clone, Debug)]
pub struct Target {
    /// Thread group id (what users call the PID).
    pub pid: u32,
    /// Process name (`comm`), the root frame of every stack.
    pub name: String,
    /// When the user named a thread, the tid they gave.
    pub given_tid: Option<u32>,
}

/// Resolves a PID or TID to its process.
pub fn resolve_target(pid: u32) -> Result<Target, PreflightError> {
    if pid == 0 {
        return Err(PreflightError::NoSuchProcess(pid));
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|_| PreflightError::NoSuchProcess(pid))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    let tgid: u32 = field("Tgid:")
        .and_then(|v| v.parse().ok())
        .ok_or(PreflightError::NoSuchProcess(pid))?;
    if tgid == 0 {
        return Err(PreflightError::NoSuchProcess(pid));
    }
    // Kernel threads have no memory map: no user stacks, nothing of ours to symbolize.
    if field("VmSize:").is_none() && field("Kthread:").is_none_or(|k| k == "1") {
        return Err(PreflightError::KernelThread(pid));
    }
    let name = std::fs::read_to_string(format!("/proc/{tgid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| field("Name:").unwrap_or_else(|| format!("pid-{tgid}")));
    Ok(Target {
        pid: tgid,
        name,
        given_tid: (tgid != pid).then_some(pid),
    })
}

/// An output file, checked before the capture. A regular file (or a new one) is written to a
/// temporary file beside it, so an unwritable path is reported before anything is attached
/// and a run that fails leaves the user's previous file as it was; [`Output::commit`] renames
/// it into place. A path that exists and is not a regular file — a character device such as
/// `/dev/null`, a FIFO, `/dev/stdout` on a terminal or a pipe — is opened and written in place:
/// renaming over it would replace the device or pipe with a plain file (as root, `-o /dev/null`
/// once turned the machine's `/dev/null` into a regular file).
#[derive(Debug)]
pub struct Output {
    pub path: PathBuf,
    sink: Sink,
}

#[derive(Debug)]
enum Sink {
    Temp(tempfile::NamedTempFile),
    InPlace(File),
}

impl Output {
    pub fn file(&mut self) -> &mut File {
        match &mut self.sink {
            Sink::Temp(f) => f.as_file_mut(),
            Sink::InPlace(f) => f,
        }
    }

    /// Where the output is written until it is committed; None when it is written in place
    /// (nothing to remove if the run is abandoned).
    pub fn temp_path(&self) -> Option<&Path> {
        match &self.sink {
            Sink::Temp(f) => Some(f.path()),
            Sink::InPlace(_) => None,
        }
    }

    /// Renames a temporary file to its path, readable by all as a plain new file would be;
    /// an output written in place is only flushed.
    pub fn commit(self) -> io::Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt as _;
        match self.sink {
            Sink::Temp(file) => {
                file.as_file()
                    .set_permissions(std::fs::Permissions::from_mode(0o644))?;
                file.persist(&self.path).map_err(|e| e.error)?;
            }
            Sink::InPlace(mut file) => io::Write::flush(&mut file)?,
        }
        Ok(self.path)
    }
}

pub fn open_output(what: &'static str, path: &Path) -> Result<Output, PreflightError> {
    let error = |error| PreflightError::Output {
        what,
        path: path.to_path_buf(),
        error,
    };
    // Follows symbolic links: `/dev/stdout` is what fd 1 is.
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return Err(error(io::Error::from(io::ErrorKind::IsADirectory)));
        }
        Ok(meta) if !meta.is_file() => {
            return Ok(Output {
                path: path.to_path_buf(),
                sink: Sink::InPlace(open_in_place(path, &meta).map_err(error)?),
            });
        }
        _ => {}
    }
    // A symbolic link to a regular file: the file it names is replaced, not the link.
    let target = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_symlink())
        .and_then(|_| std::fs::canonicalize(path).ok())
        .unwrap_or_else(|| path.to_path_buf());
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned());
    let file = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.as_deref().unwrap_or("out")))
        .suffix(".partial")
        .tempfile_in(dir)
        .map_err(error)?;
    give_to_invoking_user(file.as_file());
    Ok(Output {
        path: target,
        sink: Sink::Temp(file),
    })
}

/// Opens an existing device, FIFO or pipe for writing, without truncating or replacing it.
/// A FIFO is opened without blocking, so a FIFO nobody reads is refused now (ENXIO) instead
/// of hanging after the capture; writes to it then block as usual. Block devices and sockets
/// are refused: a flame graph written over a disk is never what was meant.
fn open_in_place(path: &Path, meta: &std::fs::Metadata) -> io::Result<File> {
    use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
    let kind = meta.file_type();
    if kind.is_block_device() || kind.is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is a block device or a socket, not a file",
        ));
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => io::Error::new(e.kind(), "no process is reading the FIFO"),
            _ => e,
        })?;
    // Blocking writes from here on: a slow reader must not turn into a short write.
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: fcntl on an fd we own, with flags read from it.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Under `sudo` (`cargo xtask run` uses it when not root) an output belongs to the user who ran
/// sudo, not to root. As plain root, or when the chown fails, the file stays as it is.
fn give_to_invoking_user(file: &File) {
    let sudo = |name| std::env::var(name).ok();
    // SAFETY: geteuid has no preconditions.
    if let Some((uid, gid)) = invoking_user(sudo("SUDO_UID"), sudo("SUDO_GID"))
        && unsafe { libc::geteuid() } == 0
    {
        let _ = std::os::unix::fs::fchown(file, Some(uid), Some(gid));
    }
}

/// The user behind sudo, from its `SUDO_UID` and `SUDO_GID`; None unless both are numbers.
fn invoking_user(uid: Option<String>, gid: Option<String>) -> Option<(u32, u32)> {
    Some((uid?.parse().ok()?, gid?.parse().ok()?))
}

/// `profile-<name>-<pid>-<mode>.svg`, with the name reduced to characters safe in a file name.
pub fn default_output_name(target: &Target, mode: &str) -> PathBuf {
    let name = file_name_safe(&target.name);
    PathBuf::from(format!("profile-{name}-{}-{mode}.svg", target.pid))
}

/// `name` with every character a file name might not take replaced by `_`.
pub fn file_name_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_resolves_with_its_name() {
        let me = std::process::id();
        let target = resolve_target(me).unwrap();
        assert_eq!(target.pid, me);
        assert!(!target.name.is_empty());
        assert_eq!(target.given_tid, None);
    }

    #[test]
    fn a_thread_id_resolves_to_its_process() {
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
        });
        let tid = rx.recv().unwrap();
        let target = resolve_target(tid).unwrap();
        assert_eq!(target.pid, std::process::id());
        assert_eq!(target.given_tid, Some(tid));
        handle.join().unwrap();
    }

    #[test]
    fn missing_pid_is_one_clear_sentence() {
        let err = resolve_target(u32::MAX - 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("there is no process with PID {}", u32::MAX - 1)
        );
        assert!(resolve_target(0).is_err());
    }

    #[test]
    fn kernel_threads_are_refused() {
        // kthreadd is PID 2 on every Linux system.
        assert!(matches!(
            resolve_target(2),
            Err(PreflightError::KernelThread(2))
        ));
    }

    #[test]
    fn unwritable_output_is_refused_with_the_path() {
        let err = open_output("the flame graph", Path::new("/nonexistent-dir/x.svg")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("cannot write the flame graph to /nonexistent-dir/x.svg"),
            "{text}"
        );
    }

    #[test]
    fn an_output_replaces_the_old_file_only_when_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profile.svg");
        std::fs::write(&path, "previous").unwrap();
        // A run that fails after the outputs were opened: the old file stays.
        let out = open_output("the flame graph", &path).unwrap();
        drop(out);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "previous");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // A run that succeeds replaces it.
        let mut out = open_output("the flame graph", &path).unwrap();
        std::io::Write::write_all(out.file(), b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn dev_null_is_written_in_place_and_stays_a_device() {
        use std::os::unix::fs::FileTypeExt as _;
        let null = Path::new("/dev/null");
        assert!(
            std::fs::metadata(null)
                .unwrap()
                .file_type()
                .is_char_device()
        );
        let mut out = open_output("the flame graph", null).unwrap();
        assert!(out.temp_path().is_none(), "nothing to remove if abandoned");
        std::io::Write::write_all(out.file(), b"<svg/>").unwrap();
        assert_eq!(out.commit().unwrap(), null);
        let meta = std::fs::metadata(null).unwrap();
        assert!(meta.file_type().is_char_device(), "/dev/null was replaced");
        assert_eq!(
            std::fs::read(null).unwrap(),
            b"",
            "/dev/null kept what was written"
        );
    }

    #[test]
    fn a_fifo_is_written_in_place_and_refused_without_a_reader() {
        use std::{io::Read as _, os::unix::fs::FileTypeExt as _};
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("graph.fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = open_output("the flame graph", &fifo)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no process is reading the FIFO"), "{err}");
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                let mut text = String::new();
                std::fs::File::open(fifo)
                    .unwrap()
                    .read_to_string(&mut text)
                    .unwrap();
                text
            })
        };
        // The reader's open blocks until a writer comes; retry until it is there.
        let mut out = loop {
            match open_output("the flame graph", &fifo) {
                Ok(out) => break out,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        };
        std::io::Write::write_all(out.file(), b"folded 1\n").unwrap();
        out.commit().unwrap();
        assert_eq!(reader.join().unwrap(), "folded 1\n");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file"
        );
    }

    #[test]
    fn a_symlink_to_a_file_replaces_the_file_not_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.svg");
        let link = dir.path().join("link.svg");
        std::fs::write(&real, "old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut out = open_output("the flame graph", &link).unwrap();
        std::io::Write::write_all(out.file(), b"new").unwrap();
        out.commit().unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
    }

    #[test]
    fn a_directory_is_not_an_output() {
        let dir = tempfile::tempdir().unwrap();
        assert!(open_output("the flame graph", dir.path()).is_err());
    }

    #[test]
    fn outputs_go_to_the_user_behind_sudo_only() {
        let ids = |uid: Option<&str>, gid: Option<&str>| {
            invoking_user(uid.map(String::from), gid.map(String::from))
        };
        assert_eq!(ids(Some("1000"), Some("1001")), Some((1000, 1001)));
        assert_eq!(ids(None, None), None, "plain root: left as it is");
        assert_eq!(ids(Some("1000"), None), None);
        assert_eq!(ids(Some(""), Some("1000")), None);
        assert_eq!(ids(Some("-1"), Some("1000")), None);
    }

    #[test]
    fn default_name_is_file_system_safe() {
        let target = Target {
            pid: 42,
            name: "nginx: worker/1".into(),
            given_tid: None,
        };
        assert_eq!(
            default_output_name(&target, "wall"),
            PathBuf::from("profile-nginx__worker_1-42-wall.svg")
        );
    }
}
