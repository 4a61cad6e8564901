//! The target's memory as the reader sees it: a source behind a trait (the live process, or a
//! recorded image in a unit test), read as bytes, integers, C strings or many ranges at once.

use std::{fs::File, os::unix::fs::FileExt as _};

use super::JvmError;

/// Longest C string read from the target (type, field and blob names are short).
pub(super) const MAX_CSTR: usize = 512;
const PAGE: u64 = 4096;

/// Where a JVM's memory is read from: the live process ([`LiveMemory`]), or, in a unit test,
/// a recorded image of the parts the parser reads.
pub(super) trait TargetMemory: Send + Sync {
    fn read_at(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()>;

    /// Reads each `(address, length)` into consecutive parts of `buf`; whether each part was
    /// read. One by one, unless the source has a faster way.
    fn read_ranges(&self, ranges: &[(u64, usize)], buf: &mut Vec<u8>) -> Vec<bool> {
        buf.clear();
        buf.resize(ranges.iter().map(|r| r.1).sum(), 0);
        let mut offset = 0;
        ranges
            .iter()
            .map(|&(addr, len)| {
                let ok = self.read_at(addr, &mut buf[offset..offset + len]).is_ok();
                offset += len;
                ok
            })
            .collect()
    }
}

/// A live process's memory: `/proc/<pid>/mem`, and `process_vm_readv` for many ranges.
pub(super) struct LiveMemory {
    pid: u32,
    file: File,
}

/// The target's memory as the parser reads it, with the pid its errors name.
pub(super) struct Memory {
    pub(super) pid: u32,
    pub(super) source: Box<dyn TargetMemory>,
}

impl Memory {
    pub(super) fn live(pid: u32, file: File) -> Self {
        Self {
            pid,
            source: Box::new(LiveMemory { pid, file }),
        }
    }

    pub(super) fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), JvmError> {
        self.source
            .read_at(addr, buf)
            .map_err(|source| JvmError::Io {
                pid: self.pid,
                what: format!("reading {} bytes at {addr:#x}", buf.len()),
                source,
            })
    }

    pub(super) fn u64(&self, addr: u64) -> Result<u64, JvmError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// A NUL-terminated string of at most `max` bytes, read a page at a time so that a string
    /// ending just before an unmapped page is still read.
    pub(super) fn cstr(&self, addr: u64, max: usize) -> Result<String, JvmError> {
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < max {
            let page_left = (PAGE - at % PAGE) as usize;
            let mut chunk = vec![0u8; page_left.min(max - out.len()).min(256)];
            self.read(at, &mut chunk)?;
            if let Some(nul) = chunk.iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..nul]);
                return String::from_utf8(out)
                    .map_err(|_| self.invalid(format!("the string at {addr:#x} is not UTF-8")));
            }
            out.extend_from_slice(&chunk);
            at += chunk.len() as u64;
        }
        Err(self.invalid(format!(
            "the string at {addr:#x} is longer than {max} bytes"
        )))
    }

    pub(super) fn invalid(&self, what: String) -> JvmError {
        JvmError::Invalid {
            pid: self.pid,
            what,
        }
    }

    /// Reads each `(address, length)` into consecutive parts of `buf`; whether each part was
    /// read.
    pub(super) fn read_ranges(&self, ranges: &[(u64, usize)], buf: &mut Vec<u8>) -> Vec<bool> {
        self.source.read_ranges(ranges, buf)
    }
}

impl TargetMemory for LiveMemory {
    fn read_at(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.file.read_exact_at(buf, addr)
    }

    /// With `process_vm_readv` (up to 1024 parts a call); a part it did not read is read
    /// alone through `/proc/PID/mem`.
    fn read_ranges(&self, ranges: &[(u64, usize)], buf: &mut Vec<u8>) -> Vec<bool> {
        const IOV_MAX: usize = 1024;
        let total: usize = ranges.iter().map(|r| r.1).sum();
        buf.clear();
        buf.resize(total, 0);
        let mut ok = vec![false; ranges.len()];
        let mut first = 0;
        let mut offset = 0;
        while first < ranges.len() {
            let batch = &ranges[first..ranges.len().min(first + IOV_MAX)];
            let want: usize = batch.iter().map(|r| r.1).sum();
            let mut rest = &mut buf[offset..];
            let mut parts = Vec::with_capacity(batch.len());
            for &(addr, len) in batch {
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len);
                parts.push((addr, piece));
                rest = tail;
            }
            let got = vm_readv(self.pid, &mut parts);
            // The call stops at the first part it cannot read (it never splits one): the
            // parts before it are whole, that one is read alone, and the rest is retried.
            let mut got = usize::try_from(got).unwrap_or(0).min(want);
            let mut done = 0;
            for &(_, len) in batch {
                if got < len && len > 0 {
                    break;
                }
                got -= len;
                ok[first + done] = true;
                offset += len;
                done += 1;
            }
            if done < batch.len() {
                let (addr, len) = batch[done];
                ok[first + done] = self.read_at(addr, &mut buf[offset..offset + len]).is_ok();
                offset += len;
                done += 1;
            }
            first += done;
        }
        ok
    }
}

/// One `process_vm_readv(2)` call: each `(address in the target, buffer)` read into its
/// buffer, in order. What the call returns: the bytes read, or -1.
pub(super) fn vm_readv(pid: u32, parts: &mut [(u64, &mut [u8])]) -> isize {
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

/// The little-endian integer of `size` (at most 8) bytes at `at`, if `buf` holds it.
pub(super) fn le(buf: &[u8], at: usize, size: usize) -> Option<u64> {
    if size > 8 {
        return None;
    }
    let b = buf.get(at..at.checked_add(size)?)?;
    let mut v = [0u8; 8];
    v[..size].copy_from_slice(b);
    Some(u64::from_le_bytes(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_around_one_that_cannot_be() {
        let mem = Memory::live(
            std::process::id(),
            File::open("/proc/self/mem").expect("open our own memory"),
        );
        let data: Vec<u8> = (0..=255).collect();
        let at = |i: usize| data.as_ptr() as u64 + i as u64;
        // Address 8 is never mapped.
        let ranges = [(at(0), 4), (8, 16), (at(10), 0), (at(100), 3), (at(250), 6)];
        let mut buf = Vec::new();
        assert_eq!(
            mem.read_ranges(&ranges, &mut buf),
            vec![true, false, true, true, true]
        );
        assert_eq!(buf.len(), 29);
        assert_eq!(&buf[..4], &data[..4]);
        assert_eq!(&buf[20..23], &data[100..103]);
        assert_eq!(&buf[23..], &data[250..]);
        // More parts than one call takes.
        let many: Vec<(u64, usize)> = (0..3000).map(|i| (at(i % 256), 1)).collect();
        assert!(mem.read_ranges(&many, &mut buf).iter().all(|&ok| ok));
        assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 256) as u8));
    }
}
