//! The target's memory as the reader sees it: a source behind a trait (the live process, read
//! by the capture side, or a recorded image), read as bytes, integers, C strings or many
//! ranges at once.

use super::error::JvmError;

/// Longest C string read from the target (type, field and blob names are short).
pub(super) const MAX_CSTR: usize = 512;
const PAGE: u64 = 4096;

/// Most parts one [`TargetMemory::read_parts`] call is given (`IOV_MAX`, what one
/// `process_vm_readv(2)` call takes).
pub const MAX_PARTS: usize = 1024;

/// Where a JVM's memory is read from: the live process (the capture side's reader of
/// `/proc/PID/mem`), or a recorded image ([`RecordedMemory`]: unit tests, the fuzz target).
pub trait TargetMemory: Send + Sync {
    /// Reads `buf.len()` bytes at `addr`: all of them, or an error.
    fn read_at(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()>;

    /// Reads each `(address, buffer)` of `parts` (at most [`MAX_PARTS`]) into its buffer, in
    /// order, as `process_vm_readv(2)` does: the bytes read, which stop at the first part
    /// that could not be read (the parts before it whole); an error when none could be. One
    /// `read_at` a part, unless the source has a faster way.
    fn read_parts(&self, parts: &mut [(u64, &mut [u8])]) -> std::io::Result<usize> {
        let mut done = 0;
        for (addr, buf) in parts.iter_mut() {
            match self.read_at(*addr, buf) {
                Ok(()) => done += buf.len(),
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(done)
    }
}

/// A recorded image of a target's memory: `(address, bytes)` pieces, each read within itself.
#[derive(Clone, Debug, Default)]
pub struct RecordedMemory {
    pieces: Vec<(u64, Vec<u8>)>,
}

impl RecordedMemory {
    pub fn new(pieces: Vec<(u64, Vec<u8>)>) -> Self {
        Self { pieces }
    }
}

impl TargetMemory for RecordedMemory {
    fn read_at(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let piece = self.pieces.iter().find_map(|(start, bytes)| {
            let at = usize::try_from(addr.checked_sub(*start)?).ok()?;
            bytes.get(at..at.checked_add(buf.len())?)
        });
        let piece = piece.ok_or(std::io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(piece);
        Ok(())
    }
}

/// The target's memory as the parser reads it, with the pid its errors name.
pub(super) struct Memory {
    pub(super) pid: u32,
    pub(super) source: Box<dyn TargetMemory>,
}

impl Memory {
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

    /// Reads each `(address, buffer)` in one go where the source can; see
    /// [`TargetMemory::read_parts`].
    pub(super) fn read_parts(&self, parts: &mut [(u64, &mut [u8])]) -> std::io::Result<usize> {
        self.source.read_parts(parts)
    }

    /// Reads each `(address, length)` into consecutive parts of `buf`; whether each part was
    /// read. [`MAX_PARTS`] at a time with `read_parts`; a part it did not read is read alone.
    pub(super) fn read_ranges(&self, ranges: &[(u64, usize)], buf: &mut Vec<u8>) -> Vec<bool> {
        let total: usize = ranges.iter().map(|r| r.1).sum();
        buf.clear();
        buf.resize(total, 0);
        let mut ok = vec![false; ranges.len()];
        let mut first = 0;
        let mut offset = 0;
        while first < ranges.len() {
            let batch = &ranges[first..ranges.len().min(first + MAX_PARTS)];
            let want: usize = batch.iter().map(|r| r.1).sum();
            let mut rest = &mut buf[offset..];
            let mut parts = Vec::with_capacity(batch.len());
            for &(addr, len) in batch {
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len);
                parts.push((addr, piece));
                rest = tail;
            }
            let got = self.source.read_parts(&mut parts);
            // A read stops at the first part it cannot read (it never splits one): the
            // parts before it are whole, that one is read alone, and the rest is retried.
            let mut got = got.unwrap_or(0).min(want);
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
                ok[first + done] = self
                    .source
                    .read_at(addr, &mut buf[offset..offset + len])
                    .is_ok();
                offset += len;
                done += 1;
            }
            first += done;
        }
        ok
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
        let base = 0x7f00_0000_0000u64;
        let data: Vec<u8> = (0..=255).collect();
        let mem = Memory {
            pid: 4242,
            source: Box::new(RecordedMemory::new(vec![(base, data.clone())])),
        };
        let at = |i: usize| base + i as u64;
        // Address 8 is not in the image; nor is the end of the last range.
        let ranges = [
            (at(0), 4),
            (8, 16),
            (at(10), 0),
            (at(100), 3),
            (at(250), 6),
            (at(254), 4),
        ];
        let mut buf = Vec::new();
        assert_eq!(
            mem.read_ranges(&ranges, &mut buf),
            vec![true, false, true, true, true, false]
        );
        assert_eq!(buf.len(), 33);
        assert_eq!(&buf[..4], &data[..4]);
        assert_eq!(&buf[20..23], &data[100..103]);
        assert_eq!(&buf[23..29], &data[250..]);
        // More parts than one call takes.
        let many: Vec<(u64, usize)> = (0..3000).map(|i| (at(i % 256), 1)).collect();
        assert!(mem.read_ranges(&many, &mut buf).iter().all(|&ok| ok));
        assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 256) as u8));
    }

    #[test]
    fn parts_are_read_up_to_the_first_that_cannot_be() {
        let mem = RecordedMemory::new(vec![(0x1000, vec![7; 64])]);
        let (mut a, mut b, mut c) = ([0u8; 8], [0u8; 8], [0u8; 8]);
        let mut parts = [
            (0x1000, &mut a[..]),
            (0x2000, &mut b[..]),
            (0x1008, &mut c[..]),
        ];
        assert_eq!(mem.read_parts(&mut parts).ok(), Some(8));
        assert_eq!((a, c), ([7; 8], [0; 8]));
        let mut parts = [(0x2000, &mut b[..])];
        assert!(mem.read_parts(&mut parts).is_err());
    }
}
