//! profiler-core's HotSpot reader attached to a live JVM: the libjvm.so it maps (found in
//! `/proc/PID/maps`, opened as the target sees it) and its memory (`/proc/PID/mem`, and
//! `process_vm_readv` for many ranges at once), behind the core's `TargetMemory`.

use std::{
    fs::File,
    os::unix::fs::FileExt as _,
    path::{Path, PathBuf},
};

use profiler_core::{
    jvm::{Jvm, JvmError, Libjvm, TargetMemory},
    procmap::{MappingKind, parse_maps},
};

/// Reads the JVM's tables and resolves the offsets used. `Ok(None)` when the process maps no
/// libjvm.so.
pub fn attach(pid: u32) -> Result<Option<Jvm>, JvmError> {
    let Some(lib) = find_libjvm(pid)? else {
        return Ok(None);
    };
    let file = File::open(format!("/proc/{pid}/mem")).map_err(|source| JvmError::Io {
        pid,
        what: "opening /proc/PID/mem".into(),
        source,
    })?;
    Jvm::attach(pid, Box::new(LiveMemory { pid, file }), &lib).map(Some)
}

/// The libjvm.so process `pid` maps, with its symbols; None when it maps none.
fn find_libjvm(pid: u32) -> Result<Option<Libjvm>, JvmError> {
    let maps =
        std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|source| JvmError::Io {
            pid,
            what: "reading /proc/PID/maps".into(),
            source,
        })?;
    let Some((mapping, path)) = parse_maps(&maps).into_iter().find_map(|m| match &m.kind {
        MappingKind::File { path, .. } if path.file_name().is_some_and(|n| n == "libjvm.so") => {
            let path = path.clone();
            Some((m, path))
        }
        _ => None,
    }) else {
        return Ok(None);
    };
    // The exact file mapped, also across mount namespaces.
    let candidates = [
        PathBuf::from(format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            mapping.start, mapping.end
        )),
        Path::new(&format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(&path)),
    ];
    let mut last = None;
    let file = candidates.iter().find_map(|p| match File::open(p) {
        Ok(f) => Some(f),
        Err(e) => {
            last = Some(e);
            None
        }
    });
    let Some(file) = file else {
        return Err(JvmError::Io {
            pid,
            what: format!("opening {}", path.display()),
            source: last.unwrap_or_else(|| std::io::Error::other("no path")),
        });
    };
    Libjvm::from_elf(pid, file, &path, &mapping).map(Some)
}

/// A live process's memory: `/proc/<pid>/mem`, and `process_vm_readv` for many ranges.
struct LiveMemory {
    pid: u32,
    file: File,
}

impl TargetMemory for LiveMemory {
    fn read_at(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.file.read_exact_at(buf, addr)
    }

    /// One `process_vm_readv(2)` call.
    fn read_parts(&self, parts: &mut [(u64, &mut [u8])]) -> std::io::Result<usize> {
        let got = vm_readv(self.pid, parts);
        usize::try_from(got).map_err(|_| std::io::Error::last_os_error())
    }
}

/// One `process_vm_readv(2)` call: each `(address in the target, buffer)` read into its
/// buffer, in order. What the call returns: the bytes read, or -1.
fn vm_readv(pid: u32, parts: &mut [(u64, &mut [u8])]) -> isize {
    let mut local = Vec::with_capacity(parts.len());
    let mut remote = Vec::with_capacity(parts.len());
    for (addr, piece) in parts.iter_mut() {
        local.push(libc::iovec {
            iov_base: piece.as_mut_ptr().cast(),
            iov_len: piece.len(),
        });
        remote.push(libc::iovec {
            iov_base: *addr as *mut libc::c_void,
            iov_len: piece.len(),
        });
    }
    // SAFETY: every local iovec points into a buffer of `parts`, alive and exclusively
    // borrowed for the call, with its length; the remote ones are only read by the kernel
    // from the target.
    unsafe {
        libc::process_vm_readv(
            pid as libc::pid_t,
            local.as_ptr(),
            local.len() as libc::c_ulong,
            remote.as_ptr(),
            remote.len() as libc::c_ulong,
            0,
        )
    }
}

#[cfg(test)]
mod tests {
    use profiler_core::jvm::MAX_PARTS;

    use super::*;

    #[test]
    fn a_process_without_libjvm_is_no_jvm() {
        let attached = attach(std::process::id()).expect("read our own maps");
        assert!(attached.is_none());
    }

    #[test]
    fn parts_are_read_up_to_the_first_that_cannot_be() {
        let mem = LiveMemory {
            pid: std::process::id(),
            file: File::open("/proc/self/mem").expect("open our own memory"),
        };
        let data: Vec<u8> = (0..=255).collect();
        let at = |i: usize| data.as_ptr() as u64 + i as u64;
        let (mut a, mut b, mut c) = ([0u8; 4], [0u8; 16], [0u8; 6]);
        // Address 8 is never mapped: the call stops there.
        let mut parts = [(at(0), &mut a[..]), (8, &mut b[..]), (at(250), &mut c[..])];
        assert_eq!(mem.read_parts(&mut parts).ok(), Some(4));
        assert_eq!(&a[..], &data[..4]);
        let mut parts = [(8, &mut b[..])];
        assert!(mem.read_parts(&mut parts).is_err());
        // As many parts as one call takes.
        let mut bytes = vec![0u8; MAX_PARTS];
        let mut parts: Vec<(u64, &mut [u8])> = bytes
            .chunks_mut(1)
            .enumerate()
            .map(|(i, b)| (at(i % 256), b))
            .collect();
        assert_eq!(mem.read_parts(&mut parts).ok(), Some(MAX_PARTS));
        assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 256) as u8));
        let mut buf = [0u8; 3];
        mem.read_at(at(100), &mut buf).expect("read");
        assert_eq!(&buf[..], &data[100..103]);
    }
}
