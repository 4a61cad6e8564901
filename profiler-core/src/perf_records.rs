//! The kernel's side-band records (`PERF_RECORD_MMAP2`, `COMM`, `FORK`, `EXIT`, `LOST`) as
//! bytes → [`Event`]s: each record's layout (quoted from `include/uapi/linux/perf_event.h`),
//! and a ring's unread bytes walked record by record, one wrapping around the buffer's end
//! copied whole first. The capture side (`profiler` process/mmap_events.rs) opens the rings
//! and hands their bytes here. Pure: no syscall, no pointer; what is malformed is counted,
//! never trusted (the `perf_records` fuzz target).

use std::{ffi::OsStr, os::unix::ffi::OsStrExt as _, path::PathBuf};

/// `#define PROT_EXEC 0x4 /* page can be executed */` (include/uapi/asm-generic/mman-common.h).
const PROT_EXEC: u32 = 0x4;
/// `struct perf_event_header { __u32 type; __u16 misc; __u16 size; };`
const HEADER_LEN: usize = 8;
/// `enum perf_event_type`.
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_COMM: u32 = 3;
const PERF_RECORD_EXIT: u32 = 4;
const PERF_RECORD_FORK: u32 = 7;
const PERF_RECORD_MMAP2: u32 = 10;
/// `#define PERF_RECORD_MISC_COMM_EXEC (1 << 13)`: the name changed because of an exec.
const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;
/// `#define PERF_RECORD_MISC_MMAP_BUILD_ID (1 << 14)`: the MMAP2 union holds a build ID
/// instead of maj/min/ino (only with `attr.build_id`, which is not set here).
const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// `struct sample_id` with `sample_id_all` and `sample_type = TID | TIME`, at the end of
/// every record: `{ u32 pid, tid; } && PERF_SAMPLE_TID`, `{ u64 time; } && PERF_SAMPLE_TIME`.
const SAMPLE_ID_LEN: usize = 16;

// --- Events ---------------------------------------------------------------------------

/// A mapping created in a process (`PERF_RECORD_MMAP2`). With `attr.mmap_data` unset (as
/// here) the kernel reports only mappings that are executable (`VM_EXEC`, including an
/// `mprotect` that makes one so); `prot` says so all the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mmap2 {
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC, the clock of `bpf_ktime_get_ns`.
    pub time_ns: u64,
    pub addr: u64,
    pub len: u64,
    /// File offset of `addr`, in bytes (meaningless for memory without a file: there the
    /// kernel reports `addr` itself).
    pub pgoff: u64,
    /// The file's device and inode (zero for anonymous memory).
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    /// `PROT_READ | PROT_WRITE | PROT_EXEC` of the mapping.
    pub prot: u32,
    /// `MAP_SHARED` / `MAP_PRIVATE` and the other `MAP_*` flags of the mapping.
    pub flags: u32,
    /// The file's path as the mapping process sees it (from its root, ` (deleted)` appended
    /// to a deleted file), or the kernel's name for memory without a file: `[vdso]`,
    /// `[heap]`, `[stack]`, `//anon`.
    pub filename: PathBuf,
}

impl Mmap2 {
    /// The mapping as the pure stages keep it.
    pub fn recorded(&self) -> crate::procmap::RecordedMapping {
        crate::procmap::RecordedMapping {
            start: self.addr,
            end: self.end(),
            offset: self.pgoff,
            dev_major: self.maj,
            dev_minor: self.min,
            inode: self.ino,
            filename: self.filename.clone(),
        }
    }

    pub fn is_exec(&self) -> bool {
        self.prot & PROT_EXEC != 0
    }

    pub fn end(&self) -> u64 {
        self.addr.saturating_add(self.len)
    }
}

/// A thread's name set (`PERF_RECORD_COMM`): by an exec (`exec`), or by `prctl(PR_SET_NAME)`
/// / `pthread_setname_np`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comm {
    pub pid: u32,
    pub tid: u32,
    pub time_ns: u64,
    /// At most 15 bytes (`TASK_COMM_LEN`), the executable's base name after an exec.
    pub name: String,
    pub exec: bool,
}

/// A task created (`PERF_RECORD_FORK`) or gone (`PERF_RECORD_EXIT`). `pid`/`tid` are the
/// task's process and thread, `ppid`/`ptid` its creator's (for a fork) or parent's (for an
/// exit). A new thread has `pid == ppid`; a process ends with the exit of its last thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub pid: u32,
    pub ppid: u32,
    pub tid: u32,
    pub ptid: u32,
    pub time_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Mmap2(Mmap2),
    Comm(Comm),
    Fork(Task),
    Exit(Task),
    /// Records the kernel dropped on `cpu` because its ring was full (`PERF_RECORD_LOST`):
    /// which processes they were about is unknown, so a caller that needs them all falls back
    /// to `/proc/PID/maps` for its live targets.
    Lost {
        cpu: u32,
        count: u64,
    },
}

impl Event {
    /// When it happened (CLOCK_MONOTONIC), to order the events of different CPUs.
    pub fn time_ns(&self) -> Option<u64> {
        match self {
            Event::Mmap2(m) => Some(m.time_ns),
            Event::Comm(c) => Some(c.time_ns),
            Event::Fork(t) | Event::Exit(t) => Some(t.time_ns),
            Event::Lost { .. } => None,
        }
    }

    /// The process it is about.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Event::Mmap2(m) => Some(m.pid),
            Event::Comm(c) => Some(c.pid),
            Event::Fork(t) | Event::Exit(t) => Some(t.pid),
            Event::Lost { .. } => None,
        }
    }
}

/// What the reader has seen since [`MmapEvents::open`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records read, every type.
    pub records: u64,
    pub bytes: u64,
    /// Records the kernel dropped (the sum of `PERF_RECORD_LOST` counts).
    pub lost: u64,
    /// Records of a type this module does not parse (skipped by their size).
    pub skipped: u64,
    /// Records too short for their type, or a ring whose sizes made no sense (then the rest
    /// of that ring's unread bytes were skipped).
    pub malformed: u64,
}

// --- Parsing (pure) -------------------------------------------------------------------

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// A NUL-terminated string the kernel padded with NULs to 8 bytes.
fn c_string(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |end| &b[..end])
}

enum Parsed {
    Event(Event),
    /// A type this module does not read.
    Skipped,
    /// Shorter than its type's fixed part.
    Malformed,
}

/// One whole record (header included, `record.len()` = header size) read on `cpu`.
fn parse_record(cpu: u32, record: &[u8]) -> Parsed {
    let (Some(kind), Some(misc)) = (u32_at(record, 0), u16_at(record, 4)) else {
        return Parsed::Malformed;
    };
    let event = match kind {
        PERF_RECORD_MMAP2 => parse_mmap2(record, misc).map(Event::Mmap2),
        PERF_RECORD_COMM => parse_comm(record, misc).map(Event::Comm),
        PERF_RECORD_FORK => parse_task(record).map(Event::Fork),
        PERF_RECORD_EXIT => parse_task(record).map(Event::Exit),
        // struct { struct perf_event_header header; u64 id; u64 lost;
        //          struct sample_id sample_id; };
        PERF_RECORD_LOST => u64_at(record, 16).map(|count| Event::Lost { cpu, count }),
        _ => return Parsed::Skipped,
    };
    event.map_or(Parsed::Malformed, Parsed::Event)
}

/// The trailing `struct sample_id`: (pid, tid, time) of the task the record is about.
fn sample_id(record: &[u8], fixed: usize) -> Option<(&[u8], u64)> {
    let at = record.len().checked_sub(SAMPLE_ID_LEN)?;
    let variable = record.get(fixed..at)?;
    Some((variable, u64_at(record, at + 8)?))
}

/// ```c
/// struct {
///     struct perf_event_header header;
///     u32 pid, tid;                       // 8
///     u64 addr; u64 len; u64 pgoff;        // 16, 24, 32
///     union {
///         struct { u32 maj; u32 min; u64 ino; u64 ino_generation; };   // 40, 44, 48, 56
///         struct { u8 build_id_size; u8 __reserved_1; u16 __reserved_2; u8 build_id[20]; };
///     };
///     u32 prot, flags;                    // 64, 68
///     char filename[];                    // 72, NUL-padded to 8 bytes
///     struct sample_id sample_id;
/// };
/// ```
fn parse_mmap2(record: &[u8], misc: u16) -> Option<Mmap2> {
    const FILENAME: usize = 72;
    let (filename, time_ns) = sample_id(record, FILENAME)?;
    let build_id = misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0;
    Some(Mmap2 {
        pid: u32_at(record, 8)?,
        tid: u32_at(record, 12)?,
        time_ns,
        addr: u64_at(record, 16)?,
        len: u64_at(record, 24)?,
        pgoff: u64_at(record, 32)?,
        maj: if build_id { 0 } else { u32_at(record, 40)? },
        min: if build_id { 0 } else { u32_at(record, 44)? },
        ino: if build_id { 0 } else { u64_at(record, 48)? },
        prot: u32_at(record, 64)?,
        flags: u32_at(record, 68)?,
        filename: PathBuf::from(OsStr::from_bytes(c_string(filename))),
    })
}

/// ```c
/// struct {
///     struct perf_event_header header;
///     u32 pid, tid;                       // 8
///     char comm[];                        // 16, NUL-padded to 8 bytes
///     struct sample_id sample_id;
/// };
/// ```
fn parse_comm(record: &[u8], misc: u16) -> Option<Comm> {
    let (name, time_ns) = sample_id(record, 16)?;
    Some(Comm {
        pid: u32_at(record, 8)?,
        tid: u32_at(record, 12)?,
        time_ns,
        name: String::from_utf8_lossy(c_string(name)).into_owned(),
        exec: misc & PERF_RECORD_MISC_COMM_EXEC != 0,
    })
}

/// `PERF_RECORD_FORK` and `PERF_RECORD_EXIT` share one layout:
/// ```c
/// struct {
///     struct perf_event_header header;
///     u32 pid, ppid;                      // 8, 12
///     u32 tid, ptid;                      // 16, 20
///     u64 time;                           // 24
///     struct sample_id sample_id;
/// };
/// ```
fn parse_task(record: &[u8]) -> Option<Task> {
    // The trailer must be there too: a shorter record is not what was asked for.
    sample_id(record, 32)?;
    Some(Task {
        pid: u32_at(record, 8)?,
        ppid: u32_at(record, 12)?,
        tid: u32_at(record, 16)?,
        ptid: u32_at(record, 20)?,
        time_ns: u64_at(record, 24)?,
    })
}

/// The unread bytes of one ring, in order: from the tail to the end of the buffer, then from
/// its start (`second` is empty unless they wrap around the end).
pub struct Unread<'a> {
    pub first: &'a [u8],
    pub second: &'a [u8],
}

impl Unread<'_> {
    fn len(&self) -> usize {
        self.first.len() + self.second.len()
    }

    /// `len` bytes from `at` if they do not wrap.
    fn contiguous(&self, at: usize, len: usize) -> Option<&[u8]> {
        if at + len <= self.first.len() {
            self.first.get(at..at + len)
        } else if at >= self.first.len() {
            let at = at - self.first.len();
            self.second.get(at..at + len)
        } else {
            None
        }
    }

    /// Copies `dst.len()` bytes from `at`, across the end of the buffer if need be.
    fn copy(&self, at: usize, dst: &mut [u8]) -> Option<()> {
        let mut at = at;
        let mut done = 0;
        while done < dst.len() {
            let (part, offset) = if at < self.first.len() {
                (self.first, at)
            } else {
                (self.second, at - self.first.len())
            };
            let from = part.get(offset..)?;
            let n = from.len().min(dst.len() - done);
            if n == 0 {
                return None;
            }
            dst[done..done + n].copy_from_slice(&from[..n]);
            done += n;
            at += n;
        }
        Some(())
    }
}

/// Parses every record in `unread` and returns how many bytes were consumed (all of them:
/// the kernel publishes `data_head` only after whole records). A record that wraps around
/// the end of the buffer is copied into `scratch` first.
pub fn parse_ring(
    cpu: u32,
    unread: &Unread<'_>,
    scratch: &mut Vec<u8>,
    stats: &mut Stats,
    out: &mut impl FnMut(Event),
) -> usize {
    let total = unread.len();
    let mut at = 0;
    while at < total {
        let mut header = [0u8; HEADER_LEN];
        let size = unread
            .copy(at, &mut header)
            .and_then(|()| u16_at(&header, 6))
            .map_or(0, usize::from);
        // A size below a header's, or past what the kernel published, cannot come from the
        // kernel's writer; reading on from it would be reading garbage, and waiting would
        // stall this ring for good. Drop the rest: the next read starts at the head.
        if size < HEADER_LEN || at + size > total {
            stats.malformed += 1;
            return total;
        }
        let record = match unread.contiguous(at, size) {
            Some(record) => record,
            None => {
                scratch.clear();
                scratch.resize(size, 0);
                if unread.copy(at, scratch).is_none() {
                    stats.malformed += 1;
                    return total;
                }
                scratch.as_slice()
            }
        };
        stats.records += 1;
        stats.bytes += size as u64;
        match parse_record(cpu, record) {
            Parsed::Event(event) => {
                if let Event::Lost { count, .. } = event {
                    // The count is the record's: saturated, so two absurd ones cannot wrap
                    // the sum to a small loss (found by the perf_records fuzz target).
                    stats.lost = stats.lost.saturating_add(count);
                }
                out(event);
            }
            Parsed::Skipped => stats.skipped += 1,
            Parsed::Malformed => stats.malformed += 1,
        }
        at += size;
    }
    at
}

/// `/sys/devices/system/cpu/online`: `0-3,5,7-8`.
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt as _;

    use super::*;

    /// `PROT_READ 0x1` (mman-common.h), `MAP_PRIVATE 0x02` (mman.h).
    const PROT_READ: u32 = 0x1;
    const MAP_PRIVATE: u32 = 0x2;

    /// Builds a record as the kernel lays it out: header, body, sample_id.
    fn record(kind: u32, misc: u16, body: &[u8], pid: u32, tid: u32, time: u64) -> Vec<u8> {
        let size = HEADER_LEN + body.len() + SAMPLE_ID_LEN;
        assert!(size.is_multiple_of(8), "records are 8-byte aligned");
        let mut r = Vec::with_capacity(size);
        r.extend_from_slice(&kind.to_ne_bytes());
        r.extend_from_slice(&misc.to_ne_bytes());
        r.extend_from_slice(&(size as u16).to_ne_bytes());
        r.extend_from_slice(body);
        r.extend_from_slice(&pid.to_ne_bytes());
        r.extend_from_slice(&tid.to_ne_bytes());
        r.extend_from_slice(&time.to_ne_bytes());
        r
    }

    /// A string NUL-terminated and padded to 8 bytes, as perf_event_mmap_event() does.
    fn padded(s: &[u8]) -> Vec<u8> {
        let mut v = s.to_vec();
        v.push(0);
        while !v.len().is_multiple_of(8) {
            v.push(0);
        }
        v
    }

    fn mmap2_record(pid: u32, filename: &[u8], time: u64) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&pid.to_ne_bytes());
        body.extend_from_slice(&(pid + 1).to_ne_bytes());
        body.extend_from_slice(&0x7f00_0000_1000u64.to_ne_bytes());
        body.extend_from_slice(&0x2000u64.to_ne_bytes());
        body.extend_from_slice(&0x3000u64.to_ne_bytes());
        body.extend_from_slice(&254u32.to_ne_bytes());
        body.extend_from_slice(&1u32.to_ne_bytes());
        body.extend_from_slice(&326279u64.to_ne_bytes());
        body.extend_from_slice(&7u64.to_ne_bytes()); // ino_generation
        body.extend_from_slice(&(PROT_READ | PROT_EXEC).to_ne_bytes());
        body.extend_from_slice(&(MAP_PRIVATE).to_ne_bytes());
        body.extend_from_slice(&padded(filename));
        record(PERF_RECORD_MMAP2, 2, &body, pid, pid + 1, time)
    }

    fn comm_record(pid: u32, name: &[u8], exec: bool, time: u64) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&pid.to_ne_bytes());
        body.extend_from_slice(&pid.to_ne_bytes());
        body.extend_from_slice(&padded(name));
        let misc = if exec { PERF_RECORD_MISC_COMM_EXEC } else { 0 };
        record(PERF_RECORD_COMM, misc, &body, pid, pid, time)
    }

    fn task_record(kind: u32, t: &Task) -> Vec<u8> {
        let mut body = Vec::new();
        for v in [t.pid, t.ppid, t.tid, t.ptid] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        body.extend_from_slice(&t.time_ns.to_ne_bytes());
        record(kind, 0, &body, t.pid, t.tid, t.time_ns)
    }

    fn lost_record(count: u64) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&42u64.to_ne_bytes());
        body.extend_from_slice(&count.to_ne_bytes());
        record(PERF_RECORD_LOST, 0, &body, 0, 0, 0)
    }

    fn parse_all(bytes: &[u8]) -> (Vec<Event>, Stats, usize) {
        let unread = Unread {
            first: bytes,
            second: &[],
        };
        let mut events = Vec::new();
        let mut stats = Stats::default();
        let consumed = parse_ring(3, &unread, &mut Vec::new(), &mut stats, &mut |e| {
            events.push(e)
        });
        (events, stats, consumed)
    }

    #[test]
    fn parses_an_mmap2_record() {
        let bytes = mmap2_record(100, b"/usr/lib/x86_64-linux-gnu/libc.so.6", 5_000);
        let (events, stats, consumed) = parse_all(&bytes);
        assert_eq!(consumed, bytes.len());
        assert_eq!(stats.records, 1);
        assert_eq!(
            events,
            [Event::Mmap2(Mmap2 {
                pid: 100,
                tid: 101,
                time_ns: 5_000,
                addr: 0x7f00_0000_1000,
                len: 0x2000,
                pgoff: 0x3000,
                maj: 254,
                min: 1,
                ino: 326279,
                prot: PROT_READ | PROT_EXEC,
                flags: MAP_PRIVATE,
                filename: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
            })]
        );
        let Event::Mmap2(m) = &events[0] else {
            unreachable!()
        };
        assert!(m.is_exec());
        assert_eq!(m.end(), 0x7f00_0000_3000);
    }

    #[test]
    fn a_filename_of_exactly_eight_bytes_keeps_its_padding_out() {
        // 7 characters + NUL fill the 8 bytes: no padding after; 8 characters need 16.
        for name in [&b"/bin/sh"[..], b"/bin/cat", b"[vdso]", b"//anon"] {
            let (events, ..) = parse_all(&mmap2_record(1, name, 1));
            let Event::Mmap2(m) = &events[0] else {
                panic!("{events:?}")
            };
            assert_eq!(m.filename.as_os_str().as_bytes(), name);
        }
    }

    #[test]
    fn parses_comm_records_with_and_without_exec() {
        let mut bytes = comm_record(7, b"cc1", true, 10);
        bytes.extend(comm_record(7, b"worker-thread-1", false, 11));
        let (events, ..) = parse_all(&bytes);
        assert_eq!(
            events,
            [
                Event::Comm(Comm {
                    pid: 7,
                    tid: 7,
                    time_ns: 10,
                    name: "cc1".into(),
                    exec: true
                }),
                Event::Comm(Comm {
                    pid: 7,
                    tid: 7,
                    time_ns: 11,
                    name: "worker-thread-1".into(),
                    exec: false
                }),
            ]
        );
    }

    #[test]
    fn absurd_loss_counts_saturate_instead_of_wrapping() {
        let mut bytes = lost_record(u64::MAX - 1);
        bytes.extend(lost_record(5));
        let (events, stats, consumed) = parse_all(&bytes);
        assert_eq!((events.len(), consumed), (2, bytes.len()));
        assert_eq!(stats.lost, u64::MAX);
    }

    #[test]
    fn parses_fork_exit_and_lost() {
        let fork = Task {
            pid: 20,
            ppid: 10,
            tid: 20,
            ptid: 11,
            time_ns: 100,
        };
        let exit = Task {
            pid: 20,
            ppid: 10,
            tid: 20,
            ptid: 10,
            time_ns: 200,
        };
        let mut bytes = task_record(PERF_RECORD_FORK, &fork);
        bytes.extend(lost_record(17));
        bytes.extend(task_record(PERF_RECORD_EXIT, &exit));
        let (events, stats, _) = parse_all(&bytes);
        assert_eq!(
            events,
            [
                Event::Fork(fork),
                Event::Lost { cpu: 3, count: 17 },
                Event::Exit(exit)
            ]
        );
        assert_eq!(stats.lost, 17);
        assert_eq!(events[0].time_ns(), Some(100));
        assert_eq!(events[0].pid(), Some(20));
    }

    #[test]
    fn unknown_types_are_skipped_by_their_size() {
        // PERF_RECORD_SWITCH_CPU_WIDE (15) and a type from the future, between two known ones.
        let mut bytes = comm_record(1, b"a", true, 1);
        bytes.extend(record(15, 0, &[0u8; 8], 1, 1, 2));
        bytes.extend(record(999, 0, &[0xffu8; 40], 1, 1, 3));
        bytes.extend(comm_record(1, b"b", false, 4));
        let (events, stats, consumed) = parse_all(&bytes);
        assert_eq!(consumed, bytes.len());
        assert_eq!(stats.skipped, 2);
        assert_eq!(stats.records, 4);
        let names: Vec<_> = events
            .iter()
            .map(|e| match e {
                Event::Comm(c) => c.name.as_str(),
                _ => "?",
            })
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn a_record_shorter_than_its_type_is_malformed_not_a_panic() {
        // An MMAP2 header claiming 24 bytes: no room for its fixed part or its sample_id.
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&PERF_RECORD_MMAP2.to_ne_bytes());
        bytes.extend_from_slice(&0u16.to_ne_bytes());
        bytes.extend_from_slice(&24u16.to_ne_bytes());
        bytes.extend_from_slice(&[0u8; 16]);
        bytes.extend(comm_record(1, b"next", true, 1));
        let (events, stats, consumed) = parse_all(&bytes);
        assert_eq!(stats.malformed, 1);
        assert_eq!(events.len(), 1, "the next record is still read");
        assert_eq!(consumed, bytes.len());
    }

    #[test]
    fn a_size_that_cannot_be_drops_the_rest_of_the_ring() {
        for size in [0u16, 4, 4096] {
            let mut bytes = comm_record(1, b"first", true, 1);
            bytes.extend_from_slice(&PERF_RECORD_COMM.to_ne_bytes());
            bytes.extend_from_slice(&0u16.to_ne_bytes());
            bytes.extend_from_slice(&size.to_ne_bytes());
            bytes.extend(comm_record(1, b"unreachable", true, 2));
            let (events, stats, consumed) = parse_all(&bytes);
            assert_eq!(events.len(), 1, "size {size}");
            assert_eq!(stats.malformed, 1);
            assert_eq!(consumed, bytes.len(), "resynchronised at the head");
        }
    }

    /// Lays `records` into a ring of `size` bytes starting at `tail`, wrapping at the end,
    /// and returns the unread region as the reader sees it.
    fn ring_with(size: usize, tail: usize, records: &[u8]) -> (Vec<u8>, usize, usize) {
        let mut ring = vec![0xaau8; size];
        for (i, b) in records.iter().enumerate() {
            ring[(tail + i) % size] = *b;
        }
        let start = tail % size;
        let first_len = records.len().min(size - start);
        (ring, start, first_len)
    }

    #[test]
    fn a_record_that_wraps_the_end_of_the_ring_is_read_whole() {
        let mmap = mmap2_record(300, b"/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30", 9);
        let comm = comm_record(300, b"cc1plus", true, 8);
        let mut records = comm.clone();
        records.extend(&mmap);
        // Every 8-byte-aligned split of the MMAP2 record across the end, header included
        // (the kernel's headers never split: sizes and the buffer are multiples of 8).
        for split in (0..mmap.len()).step_by(8) {
            let size = 1024;
            let tail = size - comm.len() - split;
            let (ring, start, first_len) = ring_with(size, tail + 3 * size, &records);
            let unread = Unread {
                first: &ring[start..start + first_len],
                second: &ring[..records.len() - first_len],
            };
            let mut events = Vec::new();
            let mut stats = Stats::default();
            let mut scratch = Vec::new();
            let consumed = parse_ring(0, &unread, &mut scratch, &mut stats, &mut |e| {
                events.push(e)
            });
            assert_eq!(consumed, records.len(), "split {split}");
            assert_eq!(stats.malformed, 0, "split {split}");
            let (direct, ..) = parse_all(&records);
            assert_eq!(events, direct, "split {split}");
        }
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}
