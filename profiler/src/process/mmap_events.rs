//! Every process's executable mappings, names, forks and exits as the kernel reports them
//! (`PERF_RECORD_MMAP2`, `COMM`, `FORK`, `EXIT`), the way `perf record` learns them: one
//! software dummy perf event per online CPU, system-wide, each with its own ring buffer.
//!
//! Reading `/proc/PID/maps` on a tick misses a process that lives less than a tick (a compiler
//! under `make -j2` lives ~10 ms; the tick is 200 ms). The kernel writes these records from
//! inside `mmap`, `execve`, `fork` and `exit`, so a process that lived 5 ms has all of them.
//! They arrive for every process on the machine: the caller keeps its targets' records.
//!
//! The records' bytes are parsed by profiler-core's `perf_records` (pure, fuzzed).
//!
//! Layouts are those of the kernel's `include/uapi/linux/perf_event.h` (checked against
//! torvalds/linux and the 6.1 header installed here, `/usr/include/linux/perf_event.h`); each
//! is quoted next to the code that relies on it.

use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
    ptr::NonNull,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use thiserror::Error;

pub use profiler_core::perf_records::{Comm, Event, Mmap2, Stats, Task};
use profiler_core::perf_records::{Unread, parse_cpu_list, parse_ring};

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
    use super::*;

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
}
