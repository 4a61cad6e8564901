//! Every process's executable mappings, names, forks and exits as the kernel reports them
//! (`PERF_RECORD_MMAP2`, `COMM`, `FORK`, `EXIT`), the way `perf record` learns them: one
//! software dummy perf event per online CPU, system-wide, each with its own ring buffer.
//!
//! Reading `/proc/PID/maps` on a tick misses a process that lives less than a tick (a compiler
//! under `make -j2` lives ~10 ms; the tick is 200 ms). The kernel writes these records from
//! inside `mmap`, `execve`, `fork` and `exit`, so a process that lived 5 ms has all of them.
//! They arrive for every process on the machine: the caller keeps its targets' records.
//!
//! Layouts are those of the kernel's `include/uapi/linux/perf_event.h` (checked against
//! torvalds/linux and the 6.1 header installed here, `/usr/include/linux/perf_event.h`); each
//! is quoted next to the code that relies on it.

use std::{
    ffi::OsStr,
    io,
    os::{
        fd::{AsFd as _, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::PathBuf,
    ptr::NonNull,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use thiserror::Error;

// --- perf_event ABI (include/uapi/linux/perf_event.h) -----------------------------------

/// `enum perf_type_id`: `PERF_TYPE_SOFTWARE = 1`.
const PERF_TYPE_SOFTWARE: u32 = 1;
/// `enum perf_sw_ids`: `PERF_COUNT_SW_DUMMY = 9`, an event that counts nothing and exists
/// only to carry side-band records.
const PERF_COUNT_SW_DUMMY: u64 = 9;
/// `enum perf_event_sample_format`: `PERF_SAMPLE_TID = 1U << 1`, `PERF_SAMPLE_TIME = 1U << 2`.
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_TIME: u64 = 1 << 2;
/// `#define PERF_FLAG_FD_CLOEXEC (1UL << 3)`: a launched command must not inherit the fds.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `#define PERF_EVENT_IOC_ENABLE _IO('$', 0)`: `_IO(type, nr)` is `type << 8 | nr`.
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = (b'$' as libc::c_ulong) << 8;
/// `#define PERF_ATTR_SIZE_VER7 128 /* add: sig_data */`, the size of [`PerfEventAttr`].
const PERF_ATTR_SIZE_VER7: u32 = 128;

/// Bit positions in the `__u64` bitfield of `struct perf_event_attr` that follows
/// `read_format`, in declaration order (little-endian bitfields fill from bit 0):
/// `disabled:1, inherit:1, pinned:1, exclusive:1, exclude_user:1, exclude_kernel:1,
/// exclude_hv:1, exclude_idle:1, mmap:1, comm:1, freq:1, inherit_stat:1, enable_on_exec:1,
/// task:1, watermark:1, precise_ip:2, mmap_data:1, sample_id_all:1, exclude_host:1,
/// exclude_guest:1, exclude_callchain_kernel:1, exclude_callchain_user:1, mmap2:1,
/// comm_exec:1, use_clockid:1, …`
mod attr_bit {
    pub const DISABLED: u32 = 0;
    pub const MMAP: u32 = 8;
    pub const COMM: u32 = 9;
    pub const TASK: u32 = 13;
    pub const WATERMARK: u32 = 14;
    pub const SAMPLE_ID_ALL: u32 = 18;
    pub const MMAP2: u32 = 23;
    pub const COMM_EXEC: u32 = 24;
    pub const USE_CLOCKID: u32 = 25;
}

/// `struct perf_event_attr` up to `sig_data` (PERF_ATTR_SIZE_VER7). Newer kernels accept it
/// (the `size` field says which fields exist); older ones (≥ 5.13) know all of it.
///
/// ```c
/// struct perf_event_attr {
///     __u32 type; __u32 size; __u64 config;
///     union { __u64 sample_period; __u64 sample_freq; };
///     __u64 sample_type; __u64 read_format;
///     __u64 disabled : 1, inherit : 1, … /* attr_bit */;
///     union { __u32 wakeup_events; __u32 wakeup_watermark; };
///     __u32 bp_type;
///     union { __u64 bp_addr; __u64 kprobe_func; __u64 uprobe_path; __u64 config1; };
///     union { __u64 bp_len; __u64 kprobe_addr; __u64 probe_offset; __u64 config2; };
///     __u64 branch_sample_type; __u64 sample_regs_user; __u32 sample_stack_user;
///     __s32 clockid; __u64 sample_regs_intr; __u32 aux_watermark; __u16 sample_max_stack;
///     __u16 __reserved_2; __u32 aux_sample_size; __u32 __reserved_3; __u64 sig_data;
/// };
/// ```
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_watermark: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    reserved_3: u32,
    sig_data: u64,
}

// The offsets the kernel expects (PERF_ATTR_SIZE_VER0 = 64 ends after config1, VER4 = 104
// after sample_regs_intr): a field moved by a typo would be rejected or misread silently.
const _: () = {
    assert!(size_of::<PerfEventAttr>() == PERF_ATTR_SIZE_VER7 as usize);
    assert!(std::mem::offset_of!(PerfEventAttr, sample_type) == 24);
    assert!(std::mem::offset_of!(PerfEventAttr, flags) == 40);
    assert!(std::mem::offset_of!(PerfEventAttr, wakeup_watermark) == 48);
    assert!(std::mem::offset_of!(PerfEventAttr, config1) == 56);
    assert!(std::mem::offset_of!(PerfEventAttr, clockid) == 92);
    assert!(std::mem::offset_of!(PerfEventAttr, sample_regs_intr) == 96);
    assert!(std::mem::offset_of!(PerfEventAttr, sig_data) == 120);
};

/// Offsets in `struct perf_event_mmap_page` (the ring's first page): `version`,
/// `compat_version`, `lock`, `index`, `offset`, `time_enabled`, `time_running`,
/// `capabilities`, `pmc_width`, `time_shift`, `time_mult`, `time_offset`, `time_zero`,
/// `size`, `__reserved_1`, `time_cycles`, `time_mask` fill 96 bytes, then
/// `__u8 __reserved[116*8]; /* align to 1k. */`, then `__u64 data_head, data_tail,
/// data_offset, data_size`.
const PAGE_DATA_HEAD: usize = 1024;
const PAGE_DATA_TAIL: usize = 1032;
const PAGE_DATA_OFFSET: usize = 1040;
const PAGE_DATA_SIZE: usize = 1048;

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
    pub fn recorded(&self) -> profiler_core::procmap::RecordedMapping {
        profiler_core::procmap::RecordedMapping {
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
        self.prot & libc::PROT_EXEC as u32 != 0
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
struct Unread<'a> {
    first: &'a [u8],
    second: &'a [u8],
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
fn parse_ring(
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
                    stats.lost += count;
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
fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
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

// --- The kernel side ------------------------------------------------------------------

const ONLINE_CPUS: &str = "/sys/devices/system/cpu/online";

#[derive(Debug, Error)]
pub enum Error {
    #[error("reading the online CPUs from {ONLINE_CPUS}: {0}")]
    OnlineCpus(io::Error),
    #[error(
        "perf_event_open on CPU {cpu} was refused ({source}): following every process's \
         mappings needs root (CAP_PERFMON or CAP_SYS_ADMIN) or kernel.perf_event_paranoid \
         at 0 or below (it is {paranoid})"
    )]
    Privilege {
        cpu: u32,
        source: io::Error,
        paranoid: String,
    },
    #[error("perf_event_open of a dummy event on CPU {cpu}: {source}")]
    Open { cpu: u32, source: io::Error },
    #[error(
        "mapping the {bytes}-byte ring buffer of CPU {cpu}: {source} (over the locked-memory \
         limit: kernel.perf_event_mlock_kb, and CAP_IPC_LOCK to exceed it)"
    )]
    MemoryLock {
        cpu: u32,
        bytes: usize,
        source: io::Error,
    },
    #[error("mapping the {bytes}-byte ring buffer of CPU {cpu}: {source}")]
    Mmap {
        cpu: u32,
        bytes: usize,
        source: io::Error,
    },
    #[error("the ring buffer of CPU {cpu} has an unexpected layout: {what}")]
    Layout { cpu: u32, what: String },
    #[error("enabling the dummy event on CPU {cpu}: {source}")]
    Enable { cpu: u32, source: io::Error },
}

impl Error {
    /// The CPU whose event failed, if one did.
    pub fn cpu(&self) -> Option<u32> {
        match self {
            Error::OnlineCpus(_) => None,
            Error::Privilege { cpu, .. }
            | Error::Open { cpu, .. }
            | Error::MemoryLock { cpu, .. }
            | Error::Mmap { cpu, .. }
            | Error::Layout { cpu, .. }
            | Error::Enable { cpu, .. } => Some(*cpu),
        }
    }

    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::OnlineCpus(source)
            | Error::Privilege { source, .. }
            | Error::Open { source, .. }
            | Error::MemoryLock { source, .. }
            | Error::Mmap { source, .. }
            | Error::Enable { source, .. } => source.raw_os_error(),
            Error::Layout { .. } => None,
        }
    }
}

/// How the rings are sized and when a poller is woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Each CPU's ring holds `2^data_pages_log2` pages of records after its control page.
    pub data_pages_log2: u32,
    /// A poller is woken once this many bytes were written since the last wake-up (the
    /// kernel's `wakeup_watermark`). `attr.wakeup_events` would not do: the kernel counts it
    /// only for samples (`perf_output_sample`), never for these side-band records.
    ///
    /// A wake-up is an irq_work queued by the process whose mmap/exec/exit wrote the record:
    /// measured here (2 vCPUs, A/B rounds of `mmap(PROT_EXEC)` + `munmap` of a file), a
    /// record costs its writer ~1.0–1.4 µs with a 256 KiB watermark and ~2.1–3.0 µs with
    /// one byte; /bin/true writes 7 records.
    pub wakeup_bytes: u32,
}

impl Default for Config {
    /// 2^7 = 128 data pages (512 KiB) per CPU: with the control page that is exactly the
    /// default `kernel.perf_event_mlock_kb` (516 KiB, per CPU), so opening works without
    /// CAP_IPC_LOCK too. At ~1.5 KiB of records per short-lived dynamically linked process
    /// (600 bytes for /bin/true: fork, exec comm, 4 executable mappings, exit; 1.5 KiB a
    /// process over a `cc -O2` of hello.c) a CPU's ring holds ~300 processes: a reader late
    /// by a whole 200 ms tick during `make -j2` (121 processes a second over two CPUs) still
    /// loses nothing.
    ///
    /// One byte of watermark wakes a poller at every record, so a new process's mappings
    /// reach it at once (exec → read p50 0.5–0.7 ms measured on a loaded 2-vCPU machine):
    /// the caller wants them within a few ms. A reader that sleeps ~2 ms after each wake-up
    /// before reading batches them (reader cost 1.9 µs a record instead of 7.1, p50 1.3 ms);
    /// see `tests/mmap_events.rs`, `measurement_reader_cost_under_an_exec_storm`.
    fn default() -> Self {
        Self {
            data_pages_log2: 7,
            wakeup_bytes: 1,
        }
    }
}

/// The attributes of a CPU's dummy event: no samples, only the side-band records (mmap,
/// comm, fork/exit) with their tid and time, on the clock the rest of the capture uses.
fn dummy_event_attr(config: &Config) -> PerfEventAttr {
    let mut attr = PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: PERF_ATTR_SIZE_VER7,
        config: PERF_COUNT_SW_DUMMY,
        sample_type: PERF_SAMPLE_TID | PERF_SAMPLE_TIME,
        wakeup_watermark: config.wakeup_bytes.max(1),
        clockid: libc::CLOCK_MONOTONIC,
        ..PerfEventAttr::default()
    };
    // Disabled until the ring is mapped: records written before would be lost anyway.
    for bit in [
        attr_bit::DISABLED,
        attr_bit::MMAP,
        attr_bit::COMM,
        attr_bit::TASK,
        attr_bit::WATERMARK,
        attr_bit::SAMPLE_ID_ALL,
        attr_bit::MMAP2,
        attr_bit::COMM_EXEC,
        attr_bit::USE_CLOCKID,
    ] {
        attr.flags |= 1 << bit;
    }
    attr
}

/// Opens `attr` system-wide on `cpu`. A refusal for want of privilege is told apart (with
/// `perf_event_paranoid`, which decides it) so the caller can say what to change.
fn open_dummy_event(cpu: u32, attr: &PerfEventAttr) -> Result<OwnedFd, Error> {
    // SAFETY: `attr` is a valid perf_event_attr of the size it declares, alive for the
    // call; pid -1 with a CPU is a system-wide event on that CPU; group fd -1 is none.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            -1 as libc::pid_t,
            cpu as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        let source = io::Error::last_os_error();
        return Err(match source.raw_os_error() {
            Some(libc::EACCES | libc::EPERM) => Error::Privilege {
                cpu,
                source,
                paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                    .map_or_else(|_| "unknown".into(), |s| s.trim().to_string()),
            },
            _ => Error::Open { cpu, source },
        });
    }
    // SAFETY: perf_event_open returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Maps `map_len` bytes of the event's ring (control page first). EPERM here means the
/// locked-memory limit, which has an error of its own.
fn map_ring(cpu: u32, fd: &OwnedFd, map_len: usize) -> Result<NonNull<u8>, Error> {
    // Writable, so that the kernel honours data_tail and never overwrites unread records
    // (it drops new ones and reports how many in PERF_RECORD_LOST).
    // SAFETY: a fresh shared mapping of the perf fd; the kernel checks the length.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        let source = io::Error::last_os_error();
        return Err(if source.raw_os_error() == Some(libc::EPERM) {
            Error::MemoryLock {
                cpu,
                bytes: map_len,
                source,
            }
        } else {
            Error::Mmap {
                cpu,
                bytes: map_len,
                source,
            }
        });
    }
    NonNull::new(base.cast::<u8>()).ok_or_else(|| Error::Layout {
        cpu,
        what: "mapped at address 0".into(),
    })
}

/// One CPU's dummy event and its mapped ring.
struct Ring {
    cpu: u32,
    fd: OwnedFd,
    /// Start of the mapping: the control page (`struct perf_event_mmap_page`).
    base: NonNull<u8>,
    map_len: usize,
    data_offset: usize,
    /// A power of two.
    data_size: usize,
}

// SAFETY: the ring owns its mapping and fd; nothing in it is tied to the thread that opened
// it, and reading needs `&mut self`, so one thread at a time touches the buffer.
unsafe impl Send for Ring {}

impl Ring {
    /// Opens the CPU's dummy event and maps its ring. The steps are separate functions so
    /// each keeps its own SAFETY argument next to its one system call.
    fn open(cpu: u32, config: &Config, page_size: usize) -> Result<Ring, Error> {
        let fd = open_dummy_event(cpu, &dummy_event_attr(config))?;
        let data_pages = 1usize.checked_shl(config.data_pages_log2).unwrap_or(0);
        let map_len = data_pages.saturating_add(1).saturating_mul(page_size);
        if data_pages == 0 || map_len == usize::MAX {
            return Err(Error::Layout {
                cpu,
                what: format!("2^{} data pages", config.data_pages_log2),
            });
        }
        let base = map_ring(cpu, &fd, map_len)?;
        let mut ring = Ring {
            cpu,
            fd,
            base,
            map_len,
            data_offset: page_size,
            data_size: data_pages * page_size,
        };
        // Past this point a failure drops `ring`, which unmaps it.
        ring.locate_data()?;
        Ok(ring)
    }

    /// Kernels since 4.1 say where the data is; older ones put it after the first page (the
    /// layout `open` assumed).
    fn locate_data(&mut self) -> Result<(), Error> {
        let (offset, size) = (
            self.page_u64(PAGE_DATA_OFFSET),
            self.page_u64(PAGE_DATA_SIZE),
        );
        if offset != 0 || size != 0 {
            let (offset, size) = (offset as usize, size as usize);
            if !size.is_power_of_two() || offset.saturating_add(size) > self.map_len {
                return Err(Error::Layout {
                    cpu: self.cpu,
                    what: format!(
                        "data at {offset} size {size} in a {}-byte mapping",
                        self.map_len
                    ),
                });
            }
            (self.data_offset, self.data_size) = (offset, size);
        }
        Ok(())
    }

    /// A `__u64` of the control page as an atomic: the kernel writes `data_head` while we
    /// read it.
    fn page_atomic(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is one of the PAGE_* fields, inside the first page of a live
        // mapping and 8-byte aligned (the mapping is page aligned); AtomicU64 has u64's
        // layout, and the kernel only accesses these words with single aligned accesses.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn page_u64(&self, offset: usize) -> u64 {
        self.page_atomic(offset).load(Ordering::Relaxed)
    }

    fn enable(&self) -> Result<(), Error> {
        // SAFETY: ENABLE takes no argument pointer; the fd is a live perf event.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), PERF_EVENT_IOC_ENABLE as _, 0) } < 0 {
            return Err(Error::Enable {
                cpu: self.cpu,
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Parses every record published so far and hands them back to the kernel.
    fn drain(&mut self, scratch: &mut Vec<u8>, stats: &mut Stats, out: &mut impl FnMut(Event)) {
        // Acquire pairs with the kernel's smp_wmb() before it stores data_head
        // (perf_output_put_handle): the records below the head are visible once it is.
        let head = self.page_atomic(PAGE_DATA_HEAD).load(Ordering::Acquire);
        // Only this reader writes the tail.
        let tail = self.page_atomic(PAGE_DATA_TAIL).load(Ordering::Relaxed);
        let unread = head.wrapping_sub(tail);
        if unread == 0 {
            return;
        }
        let size = self.data_size as u64;
        let consumed = if unread > size {
            // The kernel never gets more than a buffer ahead of the tail it honours.
            stats.malformed += 1;
            unread
        } else {
            let start = (tail & (size - 1)) as usize;
            let first_len = (unread as usize).min(self.data_size - start);
            // SAFETY: [tail, head) lies inside the data area (start + first_len <=
            // data_size, the rest from its start), was written completely before data_head
            // was published (see the Acquire above), and the kernel does not write it again
            // until data_tail moves past it, below, after these slices are gone.
            let unread = unsafe {
                let data = self.base.as_ptr().add(self.data_offset);
                Unread {
                    first: std::slice::from_raw_parts(data.add(start), first_len),
                    second: std::slice::from_raw_parts(data, unread as usize - first_len),
                }
            };
            parse_ring(self.cpu, &unread, scratch, stats, out) as u64
        };
        // Release: our reads of the records happen before the kernel may overwrite them
        // (the smp_mb() the header asks for before the tail store; the kernel's tools do
        // smp_store_release, tools/include/linux/ring_buffer.h).
        self.page_atomic(PAGE_DATA_TAIL)
            .store(tail.wrapping_add(consumed), Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `open` with this length and nothing borrows it
        // past `&mut self`; the fd closes after this (OwnedFd).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

/// Every online CPU's dummy event and ring. Dropping it unmaps the rings and closes the fds.
pub struct MmapEvents {
    rings: Vec<Ring>,
    scratch: Vec<u8>,
    stats: Stats,
}

impl std::fmt::Debug for MmapEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmapEvents")
            .field("cpus", &self.rings.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl MmapEvents {
    /// Opens and enables the events on every online CPU with the default [`Config`].
    pub fn open() -> Result<Self, Error> {
        Self::open_with(Config::default())
    }

    pub fn open_with(config: Config) -> Result<Self, Error> {
        let cpus = std::fs::read_to_string(ONLINE_CPUS).map_err(Error::OnlineCpus)?;
        let cpus = parse_cpu_list(&cpus).ok_or_else(|| {
            Error::OnlineCpus(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not a CPU list: {cpus:?}"),
            ))
        })?;
        // SAFETY: sysconf has no preconditions.
        let page_size = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            n if n > 0 => n as usize,
            _ => 4096,
        };
        // On an error the rings opened so far drop here: unmapped and closed.
        let rings = cpus
            .into_iter()
            .map(|cpu| Ring::open(cpu, &config, page_size))
            .collect::<Result<Vec<_>, _>>()?;
        // Enabled together, once every ring can take records.
        for ring in &rings {
            ring.enable()?;
        }
        Ok(Self {
            rings,
            scratch: Vec::new(),
            stats: Stats::default(),
        })
    }

    /// Hands every record published so far, CPU by CPU, to `out`, and returns how many
    /// events it got. Events of different CPUs interleave: sort by [`Event::time_ns`] where
    /// order matters (one CPU's events are in order).
    pub fn read(&mut self, out: &mut impl FnMut(Event)) -> usize {
        let mut delivered = 0;
        let mut count = |event| {
            delivered += 1;
            out(event)
        };
        for ring in &mut self.rings {
            ring.drain(&mut self.scratch, &mut self.stats, &mut count);
        }
        delivered
    }

    /// Waits until a ring has records to read or `timeout` passes (`poll(2)` on every fd);
    /// true when one was ready. Readiness is edge-like: the kernel reports it once per
    /// wake-up, so read everything after it says so.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut fds: Vec<libc::pollfd> = self
            .rings
            .iter()
            .map(|r| libc::pollfd {
                fd: r.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let timeout_ms = timeout.as_millis().min(libc::c_int::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a live array of `fds.len()` pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        match n {
            n if n > 0 => Ok(true),
            0 => Ok(false),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Each CPU and its event's fd, readable when its ring was written to (for an epoll or
    /// `tokio::io::unix::AsyncFd` of the caller's).
    pub fn fds(&self) -> impl Iterator<Item = (u32, BorrowedFd<'_>)> {
        self.rings.iter().map(|r| (r.cpu, r.fd.as_fd()))
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// An epoll instance watching every ring: readable when any ring was written to, one
    /// descriptor for an async runtime to wait on.
    pub fn epoll(&self) -> io::Result<OwnedFd> {
        // SAFETY: epoll_create1 takes flags and returns a new fd or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd nobody else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        for ring in &self.rings {
            let mut event = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: u64::from(ring.cpu),
            };
            // SAFETY: both fds are open; `event` is a valid epoll_event.
            let r = unsafe {
                libc::epoll_ctl(
                    epoll.as_raw_fd(),
                    libc::EPOLL_CTL_ADD,
                    ring.fd.as_raw_fd(),
                    &mut event,
                )
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(epoll)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt as _;

    use super::*;

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
        body.extend_from_slice(&((libc::PROT_READ | libc::PROT_EXEC) as u32).to_ne_bytes());
        body.extend_from_slice(&(libc::MAP_PRIVATE as u32).to_ne_bytes());
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
    fn attr_bits_match_the_header_bitfield() {
        // Counted from the header's declaration order (see attr_bit): a shifted bit would
        // ask the kernel for something else, usually without an error.
        let names = [
            "disabled",
            "inherit",
            "pinned",
            "exclusive",
            "exclude_user",
            "exclude_kernel",
            "exclude_hv",
            "exclude_idle",
            "mmap",
            "comm",
            "freq",
            "inherit_stat",
            "enable_on_exec",
            "task",
            "watermark",
            "precise_ip",
            "precise_ip",
            "mmap_data",
            "sample_id_all",
            "exclude_host",
            "exclude_guest",
            "exclude_callchain_kernel",
            "exclude_callchain_user",
            "mmap2",
            "comm_exec",
            "use_clockid",
        ];
        let bit = |name: &str| names.iter().position(|n| *n == name).unwrap() as u32;
        assert_eq!(attr_bit::DISABLED, bit("disabled"));
        assert_eq!(attr_bit::MMAP, bit("mmap"));
        assert_eq!(attr_bit::COMM, bit("comm"));
        assert_eq!(attr_bit::TASK, bit("task"));
        assert_eq!(attr_bit::WATERMARK, bit("watermark"));
        assert_eq!(attr_bit::SAMPLE_ID_ALL, bit("sample_id_all"));
        assert_eq!(attr_bit::MMAP2, bit("mmap2"));
        assert_eq!(attr_bit::COMM_EXEC, bit("comm_exec"));
        assert_eq!(attr_bit::USE_CLOCKID, bit("use_clockid"));
        assert_eq!(PERF_EVENT_IOC_ENABLE, 0x2400);
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
                prot: (libc::PROT_READ | libc::PROT_EXEC) as u32,
                flags: libc::MAP_PRIVATE as u32,
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
