//! Load and attach: the eBPF object → programs in the kernel, plus the capture window switch.
//! The kernel's maps are written only through here (`uploads` asks); the others that talk to
//! the kernel: `drain` (the maps, with `bpf_sys`'s batch commands), `snapshot` (the task
//! iterator, through here), `timeline` and `late` (their ring buffers), `mmap_events` (perf's
//! MMAP2/COMM/FORK/EXIT records).

use std::{
    io::Read as _,
    os::fd::{AsFd as _, AsRawFd as _, RawFd},
};

use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, PerCpuArray},
    programs::{
        BtfTracePoint, Iter, PerfEvent, UProbe,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        uprobe::{UProbeAttachLocation, UProbeScope},
    },
    util::online_cpus,
};
use profiler_common::{
    BPF_NOEXIST, Config, Control, Counter, ProcEvent, TaskSnapshot, Thread, config_flags,
    names::{self, GLOBAL_CONFIG, GLOBAL_IRQ_ENTRY},
    unwind::{ProcMappings, RowChunk},
};
use thiserror::Error;

use crate::kernel::{
    bpf_sys::{BPF_MAP_DELETE_ELEM, BPF_MAP_UPDATE_ELEM, elem},
    facts::{PreemptCountPath, TaskOffsets},
    sizes::TableSizes,
};
use profiler_core::model::{Counters, Mode};

/// The eBPF object built by build.rs.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(env!("PROFILER_EBPF_OBJECT"));

#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("loading the eBPF object failed: {0}")]
    Load(#[source] aya::EbpfError),
    #[error("the eBPF object has no program `{0}`")]
    MissingProgram(&'static str),
    #[error("the eBPF object has no map `{0}`")]
    MissingMap(&'static str),
    #[error("filling the allocator cache of map `{name}` on CPU {cpu} failed: {error}")]
    Warm {
        name: &'static str,
        cpu: u32,
        error: std::io::Error,
    },
    #[error("{what} failed: {source}")]
    Program {
        what: String,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("map `{name}`: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("cannot list online CPUs ({0}): {1}")]
    Cpus(&'static str, std::io::Error),
    #[error("reading kernel BTF failed: {0}")]
    Btf(#[from] aya::BtfError),
    #[error("running the task iterator failed: {0}")]
    Iterator(String),
    #[error("the unwind row array ({0} chunks) is full")]
    UnwindRowsFull(u32),
    #[error(
        "this profiler was built without its eBPF programs (the nightly toolchain or \
         bpf-linker was missing): build it with `cargo xtask build`"
    )]
    NotBuilt,
    #[error("process {0} is beyond pid_max as read at start")]
    PidBeyondPidMax(u32),
    #[error("map `{name}`: {what} it failed: {error}")]
    Batch {
        name: &'static str,
        what: String,
        error: std::io::Error,
    },
}

/// The timeline ring when the timeline is off: a page, the least a ring buffer can be.
const TIMELINE_RING_OFF_BYTES: u32 = 4096;
/// Samples of processes without a table yet (`late.rs`): 64 of 4 KiB, read every tick and 2 ms
/// after each mapping record; a process needs it only until its table is in.
const LATE_RING_BYTES: u32 = 256 << 10;

/// Everything the programs need to know before they load.
#[derive(Clone, Debug)]
pub struct ProbeConfig {
    /// Words of the target bitmap: process ids up to `64 * target_words` (from pid_max).
    pub target_words: u32,
    /// A target's new processes join the target set.
    pub follow_children: bool,
    /// Sizes of the tables (`sizes.rs`).
    pub sizes: TableSizes,
    pub offsets: TaskOffsets,
    pub mode: Mode,
    pub period_ns: u64,
    pub min_block_ns: u64,
    pub max_block_ns: u64,
    pub kernel_stacks: bool,
    /// Take wakers' stacks too (`--wakers`).
    pub waker_stacks: bool,
    /// Record who woke each wait (not with `--no-wakers`: then `sched_waking` is neither
    /// verified nor attached, and `WAKERS` is one entry).
    pub wakers: bool,
    /// Name what waits in system calls are on (not with `--no-resources`).
    pub resources: bool,
    /// Unwind user stacks from `.eh_frame` rows; the row array gets this many chunks.
    pub dwarf_chunks: Option<u32>,
    /// Unwind even recognised stacks and count disagreements (`--verify-memos`).
    pub verify_memos: bool,
    /// Write the timeline: waits of at least this long one by one, and every sample.
    pub timeline_min_ns: Option<u64>,
    pub verbose: u8,
    /// Interrupt entry text, from [`crate::kernel::facts::interrupt_entry_ranges`].
    pub irq_entry: [u64; 2 * profiler_common::IRQ_ENTRY_RANGES],
    /// A target runs Go: the goroutine uprobes are loaded (`Probes::attach_go` attaches them
    /// per process) and their tables sized; otherwise neither.
    pub go: bool,
}

fn flags(cfg: &ProbeConfig) -> u32 {
    let mut flags = config_flags::USER_STACKS;
    if cfg.kernel_stacks {
        flags |= config_flags::KERNEL_STACKS;
    }
    if cfg.waker_stacks {
        flags |= config_flags::WAKER_STACKS;
    }
    if cfg.dwarf_chunks.is_some() {
        flags |= config_flags::DWARF_UNWIND;
    }
    if cfg.offsets.preempt_count.is_some() {
        flags |= config_flags::PREEMPT_COUNT;
    }
    if cfg.mode.traces_switches() {
        flags |= config_flags::SWITCHES;
    }
    if cfg.verify_memos {
        flags |= config_flags::VERIFY_MEMOS;
    }
    if cfg.follow_children {
        flags |= config_flags::FOLLOW_CHILDREN;
    }
    if cfg.timeline_min_ns.is_some() {
        flags |= config_flags::TIMELINE;
    }
    if !cfg.wakers {
        flags |= config_flags::NO_WAKERS;
    }
    if cfg.resources && cfg.offsets.fd.is_some() {
        flags |= config_flags::RESOURCES;
    }
    flags
}

/// Loaded (and, after [`Probes::attach`], attached) programs with their maps. Dropping it
/// detaches everything.
pub struct Probes {
    ebpf: Ebpf,
    mode: Mode,
    period_ns: u64,
    /// `sched_waking` was loaded (wakers are recorded).
    wakers: bool,
    attached_cpus: usize,
    /// What `TABLES_EPOCH` holds.
    tables_epoch: u32,
    map_memory: MapMemory,
}

impl Probes {
    /// Whether the eBPF programs were built into this binary (see build.rs).
    pub fn built() -> bool {
        !EBPF_OBJECT.is_empty()
    }

    pub fn load(cfg: &ProbeConfig) -> Result<Self, ProbeError> {
        if !Self::built() {
            return Err(ProbeError::NotBuilt);
        }
        let config = kernel_config(cfg);
        // aya-log's level lives in the kernel too: off unless asked, so logging costs nothing.
        let log_level: u8 = match cfg.verbose {
            0 => 0,
            1 => aya_log::Level::Debug as u8,
            _ => aya_log::Level::Trace as u8,
        };
        let mut loader = EbpfLoader::new();
        loader
            .override_global(GLOBAL_CONFIG, &config, true)
            .override_global(GLOBAL_IRQ_ENTRY, &cfg.irq_entry, true)
            .override_global(aya_log::LEVEL, &log_level, false);
        size_maps(&mut loader, cfg);
        let started = std::time::Instant::now();
        let mut ebpf = loader.load(EBPF_OBJECT).map_err(ProbeError::Load)?;
        log::debug!("maps created in {:.3} s", started.elapsed().as_secs_f64());
        if cfg.verbose > 0 {
            start_ebpf_logger(&mut ebpf);
        }
        load_programs(&mut ebpf, cfg.mode, cfg.wakers)?;
        if cfg.go && cfg.mode.traces_switches() {
            for name in [names::PROG_GO_PARK, names::PROG_GO_EXECUTE] {
                let prog: &mut UProbe = program(&mut ebpf, name)?;
                timed(name, || prog.load()).map_err(|source| ProbeError::Program {
                    what: format!("loading {name}"),
                    source,
                })?;
            }
        }
        // The verifier's work is most of the start-up's CPU time: name it per program.
        for (name, prog) in ebpf.programs() {
            if let Some(n) = prog
                .info()
                .ok()
                .and_then(|i| i.verified_instruction_count())
            {
                log::debug!("program {name}: {n} instructions verified");
            }
        }
        Ok(Self {
            ebpf,
            mode: cfg.mode,
            period_ns: cfg.period_ns,
            wakers: cfg.wakers,
            attached_cpus: 0,
            tables_epoch: 0,
            map_memory: MapMemory::find(),
        })
    }

    /// Attaches the sampler on every online CPU and the scheduler tracepoint. Programs do not
    /// record anything until [`Probes::start`].
    pub fn attach(&mut self) -> Result<(), ProbeError> {
        self.warm_allocators()?;
        for name in [names::PROG_FORK, names::PROG_EXEC, names::PROG_EXIT] {
            let prog: &mut BtfTracePoint = program(&mut self.ebpf, name)?;
            prog.attach().map_err(|source| ProbeError::Program {
                what: format!("attaching to {name}"),
                source,
            })?;
        }
        if self.mode.samples_on_cpu() {
            let cpus = online_cpus().map_err(|(what, e)| ProbeError::Cpus(what, e))?;
            let period_ns = self.period_ns;
            let prog: &mut PerfEvent = program(&mut self.ebpf, names::PROG_SAMPLE)?;
            for &cpu in &cpus {
                // cpu-clock is a software timer: it exists in VMs without a PMU, and with a
                // fixed period in nanoseconds every sample stands for the same CPU time.
                prog.attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Period(period_ns),
                    false,
                )
                .map_err(|source| ProbeError::Program {
                    what: format!("attaching the cpu-clock sampler on CPU {cpu}"),
                    source,
                })?;
            }
            self.attached_cpus = cpus.len();
        }
        if self.mode.traces_switches() {
            for name in switch_programs(self.wakers) {
                let prog: &mut BtfTracePoint = program(&mut self.ebpf, name)?;
                prog.attach().map_err(|source| ProbeError::Program {
                    what: format!("attaching to {name}"),
                    source,
                })?;
            }
        }
        log::debug!("programs attached: {}", self.attached().join(", "));
        Ok(())
    }

    /// Fills every CPU's allocator cache of the tables whose entries are allocated as they
    /// are inserted (profiler-ebpf maps.rs): a CPU's cache starts with one element, and a
    /// switch-out's second stack in the same program run would be lost as if the table were
    /// full. An entry inserted and deleted on a CPU goes back to that CPU's cache.
    fn warm_allocators(&self) -> Result<(), ProbeError> {
        let cpus = online_cpus().map_err(|(what, e)| ProbeError::Cpus(what, e))?;
        let mut tables = Vec::new();
        for name in [names::MAP_STACKS, names::MAP_SITE_HISTS] {
            let Some(aya::maps::Map::HashMap(data)) = self.ebpf.map(name) else {
                return Err(ProbeError::MissingMap(name));
            };
            let info = data
                .info()
                .map_err(|source| ProbeError::Map { name, source })?;
            tables.push(WarmTable {
                name,
                fd: data.fd().as_fd().as_raw_fd(),
                key_size: info.key_size() as usize,
                value_size: info.value_size() as usize,
            });
        }
        let started = std::time::Instant::now();
        std::thread::scope(|scope| {
            let workers: Vec<_> = cpus
                .iter()
                .map(|&cpu| {
                    let tables = &tables;
                    scope.spawn(move || warm_cpu(cpu, tables))
                })
                .collect();
            workers
                .into_iter()
                .try_for_each(|w| w.join().unwrap_or(Ok(())))
        })?;
        log::debug!(
            "allocator caches filled on {} CPUs in {:.3} s",
            cpus.len(),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// The programs [`Probes::attach`] attaches for this capture's mode and options.
    fn attached(&self) -> Vec<&'static str> {
        let mut all = vec![names::PROG_FORK, names::PROG_EXEC, names::PROG_EXIT];
        if self.mode.samples_on_cpu() {
            all.push(names::PROG_SAMPLE);
        }
        if self.mode.traces_switches() {
            all.extend(switch_programs(self.wakers));
        }
        all
    }

    /// Attaches the goroutine uprobes to process `pid`'s Go runtime (its executable, at the
    /// file offsets `gobin` found), for that process only.
    pub fn attach_go(
        &mut self,
        pid: u32,
        exe: &std::path::Path,
        park_offset: u64,
        execute_offset: u64,
    ) -> Result<(), ProbeError> {
        let scope = match std::num::NonZeroU32::new(pid) {
            Some(p) => UProbeScope::OneProcess(p),
            None => return Ok(()),
        };
        // The kernel resolves the path to the file's inode: `/proc/PID/exe` is the
        // process's own executable, however it was started (a replaced binary too).
        for (name, offset) in [
            (names::PROG_GO_PARK, park_offset),
            (names::PROG_GO_EXECUTE, execute_offset),
        ] {
            let prog: &mut UProbe = program(&mut self.ebpf, name)?;
            prog.attach(UProbeAttachLocation::AbsoluteOffset(offset), exe, scope)
                .map_err(|source| ProbeError::Program {
                    what: format!("attaching {name} to process {pid} at {offset:#x}"),
                    source,
                })?;
        }
        Ok(())
    }

    /// The wait reasons (a bit each) whose re-park continues a wait in process `pid`.
    pub fn set_go_merge(&mut self, pid: u32, mask: u64) -> Result<(), ProbeError> {
        let name = names::MAP_GO_MERGE;
        let map = self
            .ebpf
            .map_mut(name)
            .ok_or(ProbeError::MissingMap(name))?;
        let mut map = HashMap::<&mut MapData, u32, u64>::try_from(map)
            .map_err(|source| ProbeError::Map { name, source })?;
        map.insert(pid, mask, 0)
            .map_err(|source| ProbeError::Map { name, source })
    }

    pub fn attached_cpus(&self) -> usize {
        self.attached_cpus
    }

    /// The capture window's switch, taken out of the programs' maps so that the window can
    /// be closed on time while a tick (which may be building unwind rows for a library just
    /// loaded) holds the rest.
    pub fn window_switch(&mut self) -> Result<WindowSwitch, ProbeError> {
        let map = self
            .ebpf
            .take_map(names::MAP_CONTROL)
            .ok_or(ProbeError::MissingMap(names::MAP_CONTROL))?;
        let control = Array::try_from(map).map_err(|source| ProbeError::Map {
            name: names::MAP_CONTROL,
            source,
        })?;
        Ok(WindowSwitch {
            control,
            now: Control::default(),
        })
    }

    /// Takes a map out of the loaded object, for a stage that owns it from then on (the
    /// drainer).
    pub fn take_map(&mut self, name: &'static str) -> Result<aya::maps::Map, ProbeError> {
        self.ebpf.take_map(name).ok_or(ProbeError::MissingMap(name))
    }

    /// Writes chunks of the unwind row array (index, rows).
    pub fn upload_rows(&mut self, chunks: &[(u32, Box<RowChunk>)]) -> Result<(), ProbeError> {
        let map = self
            .ebpf
            .map_mut(names::MAP_UNWIND_ROWS)
            .ok_or(ProbeError::MissingMap(names::MAP_UNWIND_ROWS))?;
        let mut rows: Array<&mut MapData, RowChunk> =
            Array::try_from(map).map_err(|source| ProbeError::Map {
                name: names::MAP_UNWIND_ROWS,
                source,
            })?;
        let capacity = rows.len();
        for (index, chunk) in chunks {
            if *index >= capacity {
                // The tables place rows within the capacity they were given; this would be a
                // bug, not a full array.
                return Err(ProbeError::UnwindRowsFull(capacity));
            }
            rows.set(*index, **chunk, 0)
                .map_err(|source| ProbeError::Map {
                    name: names::MAP_UNWIND_ROWS,
                    source,
                })?;
        }
        Ok(())
    }

    /// Sets (replaces) process `tgid`'s mapping table.
    pub fn upload_mappings(&mut self, tgid: u32, table: &ProcMappings) -> Result<(), ProbeError> {
        let name = names::MAP_PROC_MAPPINGS;
        let map = self
            .ebpf
            .map_mut(name)
            .ok_or(ProbeError::MissingMap(name))?;
        let mut hash: HashMap<&mut MapData, u32, ProcMappings> =
            HashMap::try_from(map).map_err(|source| ProbeError::Map { name, source })?;
        hash.insert(tgid, *table, 0)
            .map_err(|source| ProbeError::Map { name, source })?;
        self.bump_tables_epoch()
    }

    /// Takes a process's mapping table out of the kernel (stale: it exec'd): its stacks are
    /// walked by frame pointers until the new program's table is uploaded.
    pub fn remove_mappings(&mut self, tgid: u32) {
        let name = names::MAP_PROC_MAPPINGS;
        if let Some(map) = self.ebpf.map_mut(name)
            && let Ok(mut hash) = HashMap::<&mut MapData, u32, ProcMappings>::try_from(map)
        {
            let _ = hash.remove(&tgid);
        }
        let _ = self.bump_tables_epoch();
    }

    /// Tells the unwinder that a mapping table changed: its memos recorded before are stale.
    fn bump_tables_epoch(&mut self) -> Result<(), ProbeError> {
        let name = names::MAP_TABLES_EPOCH;
        let map = self
            .ebpf
            .map_mut(name)
            .ok_or(ProbeError::MissingMap(name))?;
        let mut epoch: Array<&mut MapData, u32> =
            Array::try_from(map).map_err(|source| ProbeError::Map { name, source })?;
        self.tables_epoch = self.tables_epoch.wrapping_add(1);
        epoch
            .set(0, self.tables_epoch, 0)
            .map_err(|source| ProbeError::Map { name, source })
    }

    /// Puts process `tgid` in the target set (`true`) or takes it out.
    pub fn set_target(&mut self, tgid: u32, target: bool) -> Result<(), ProbeError> {
        let name = names::MAP_TARGETS;
        let map = self
            .ebpf
            .map_mut(name)
            .ok_or(ProbeError::MissingMap(name))?;
        let mut bits: Array<&mut MapData, u64> =
            Array::try_from(map).map_err(|source| ProbeError::Map { name, source })?;
        let (word, bit) = profiler_common::target_bit(tgid);
        if word >= bits.len() {
            return Err(ProbeError::PidBeyondPidMax(tgid));
        }
        let old = bits
            .get(&word, 0)
            .map_err(|source| ProbeError::Map { name, source })?;
        let new = if target { old | bit } else { old & !bit };
        bits.set(word, new, 0)
            .map_err(|source| ProbeError::Map { name, source })
    }

    /// What the kernel side noted about target processes: new ones (forked from targets),
    /// execs, exits.
    pub fn proc_events(&self) -> Result<Vec<(u32, ProcEvent)>, ProbeError> {
        let name = names::MAP_PROCS;
        let map = self.ebpf.map(name).ok_or(ProbeError::MissingMap(name))?;
        let hash: HashMap<&MapData, u32, ProcEvent> =
            HashMap::try_from(map).map_err(|source| ProbeError::Map { name, source })?;
        Ok(hash.iter().filter_map(Result::ok).collect())
    }

    /// The kernel's count of `tgid`'s execs since the capture began (None: none recorded).
    pub fn kernel_execs(&self, tgid: u32) -> Option<u32> {
        let map = self.ebpf.map(names::MAP_PROCS)?;
        let hash: HashMap<&MapData, u32, ProcEvent> = HashMap::try_from(map).ok()?;
        hash.get(&tgid, 0).ok().map(|e| e.execs)
    }

    /// Forgets a process that finished: its event and its mapping table (the tables would
    /// otherwise fill with process churn). Its bit in the target set is the caller's.
    pub fn forget_process(&mut self, tgid: u32) {
        for name in [names::MAP_PROCS, names::MAP_PROC_MAPPINGS] {
            if let Some(map) = self.ebpf.map_mut(name) {
                if name == names::MAP_PROCS {
                    if let Ok(mut h) = HashMap::<&mut MapData, u32, ProcEvent>::try_from(map) {
                        let _ = h.remove(&tgid);
                    }
                } else if let Ok(mut h) = HashMap::<&mut MapData, u32, ProcMappings>::try_from(map)
                {
                    let _ = h.remove(&tgid);
                }
            }
        }
        // A later process may get this one's thread ids.
        let _ = self.bump_tables_epoch();
    }

    /// Sums the per-CPU counters.
    pub fn counters(&self) -> Result<Counters, ProbeError> {
        let array = self.counter_array()?;
        let mut counters = Counters::default();
        for counter in Counter::ALL {
            counters.set(counter, sum_counter(&array, counter)?);
        }
        Ok(counters)
    }

    /// One counter, summed over the CPUs.
    pub fn counter(&self, counter: Counter) -> Result<u64, ProbeError> {
        sum_counter(&self.counter_array()?, counter)
    }

    fn counter_array(&self) -> Result<PerCpuArray<&MapData, u64>, ProbeError> {
        let map = self
            .ebpf
            .map(names::MAP_COUNTERS)
            .ok_or(ProbeError::MissingMap(names::MAP_COUNTERS))?;
        PerCpuArray::try_from(map).map_err(|source| ProbeError::Map {
            name: names::MAP_COUNTERS,
            source,
        })
    }

    /// Runs the task iterator once: the state and stacks of every target thread right now.
    pub fn snapshot_tasks(&mut self) -> Result<Vec<TaskSnapshot>, ProbeError> {
        let prog: &mut Iter = program(&mut self.ebpf, names::PROG_SNAPSHOT)?;
        let link_id = prog.attach().map_err(|source| ProbeError::Program {
            what: "attaching the task iterator".into(),
            source,
        })?;
        let link = prog
            .take_link(link_id)
            .map_err(|source| ProbeError::Program {
                what: "taking the task iterator link".into(),
                source,
            })?;
        let mut file = link
            .into_file()
            .map_err(|e| ProbeError::Iterator(e.to_string()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| ProbeError::Iterator(e.to_string()))?;
        Ok(parse_snapshots(&bytes))
    }

    /// Seeds the entry of a thread found by the start snapshot (its name, its scheduler
    /// counters, and the wait it is in), unless a program has recorded the thread since (then
    /// the kernel's own record is better).
    pub fn seed_thread(&mut self, tid: u32, thread: &Thread) -> Result<SeedOutcome, ProbeError> {
        let map = self
            .ebpf
            .map_mut(names::MAP_THREADS)
            .ok_or(ProbeError::MissingMap(names::MAP_THREADS))?;
        let mut hash: HashMap<&mut MapData, u32, Thread> =
            HashMap::try_from(map).map_err(|source| ProbeError::Map {
                name: names::MAP_THREADS,
                source,
            })?;
        let thread = *thread;
        match hash.insert(tid, thread, BPF_NOEXIST) {
            Ok(()) => Ok(SeedOutcome::Seeded),
            Err(aya::maps::MapError::SyscallError(e))
                if e.io_error.raw_os_error() == Some(libc::EEXIST) =>
            {
                Ok(SeedOutcome::AlreadyRecorded)
            }
            Err(aya::maps::MapError::SyscallError(e))
                if e.io_error.raw_os_error() == Some(libc::E2BIG) =>
            {
                Ok(SeedOutcome::TableFull)
            }
            Err(source) => Err(ProbeError::Map {
                name: names::MAP_THREADS,
                source,
            }),
        }
    }

    pub(crate) fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// The kernel memory of the maps, readable after they were taken out (by the drainer).
    pub fn map_memory(&self) -> &MapMemory {
        &self.map_memory
    }
}

/// A table whose entries the kernel allocates as they are inserted.
struct WarmTable {
    name: &'static str,
    fd: RawFd,
    key_size: usize,
    value_size: usize,
}

/// Entries inserted and deleted per table and CPU: above the fullest cache's high mark (22
/// elements of a 1 KiB stack; a site histogram's is 7).
const WARM_ENTRIES: u32 = 24;

/// `enum bpf_cmd` (include/uapi/linux/bpf.h).
/// On CPU `cpu` (this thread pinned there), inserts [`WARM_ENTRIES`] entries into each table
/// and deletes them: the CPU's cache then holds them. No program is attached yet, so no
/// real entry can be among the keys. Keys are at least 8 bytes (a stack id).
fn warm_cpu(cpu: u32, tables: &[WarmTable]) -> Result<(), ProbeError> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it.
    let pinned = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) == 0
    };
    if !pinned {
        // A CPU this process may not run on: its cache stays as the kernel made it.
        return Ok(());
    }
    for t in tables {
        let mut key = vec![0u8; t.key_size.max(8)];
        let value = vec![0u8; t.value_size];
        // Each CPU's keys its own: the workers run at once, and one's delete must not find
        // its key taken by another's.
        key[4..8].copy_from_slice(&cpu.to_ne_bytes());
        let mut inserted = 0;
        while inserted < WARM_ENTRIES {
            key[..4].copy_from_slice(&inserted.to_ne_bytes());
            if let Err(error) = elem(BPF_MAP_UPDATE_ELEM, t.fd, &key, Some(&value)) {
                // A table a flag made smaller than every CPU's entries (E2BIG): as warm as
                // it can be.
                log::debug!("{} on CPU {cpu}: {inserted} entries ({error})", t.name);
                break;
            }
            inserted += 1;
        }
        for i in 0..inserted {
            key[..4].copy_from_slice(&i.to_ne_bytes());
            elem(BPF_MAP_DELETE_ELEM, t.fd, &key, None).map_err(|error| ProbeError::Warm {
                name: t.name,
                cpu,
                error,
            })?;
        }
    }
    Ok(())
}

/// The programs' read-only configuration (`GLOBAL_CONFIG`).
fn kernel_config(cfg: &ProbeConfig) -> Config {
    let preempt = cfg.offsets.preempt_count.unwrap_or(PreemptCountPath {
        task_cfs_rq: 0,
        cfs_rq_rq: 0,
        percpu_runqueues: 0,
        percpu_preempt_count: 0,
    });
    Config {
        target_words: cfg.target_words,
        task_pid_offset: cfg.offsets.pid,
        task_tgid_offset: cfg.offsets.tgid,
        task_comm_offset: cfg.offsets.comm,
        task_state_offset: cfg.offsets.state,
        task_exec_offset: cfg.offsets.exec,
        task_cfs_rq_offset: preempt.task_cfs_rq,
        cfs_rq_rq_offset: preempt.cfs_rq_rq,
        percpu_runqueues: preempt.percpu_runqueues,
        percpu_preempt_count: preempt.percpu_preempt_count,
        task_run_delay_offset: cfg.offsets.run_delay,
        task_on_cpu_offset: cfg.offsets.on_cpu,
        flags: flags(cfg),
        min_block_ns: cfg.min_block_ns,
        max_block_ns: cfg.max_block_ns,
        timeline_min_ns: cfg.timeline_min_ns.unwrap_or(u64::MAX),
        task_start_time_offset: cfg.offsets.start_time,
        fd: cfg.offsets.fd.unwrap_or_default(),
    }
}

/// Every table's size (`sizes.rs`): what the kernel allocates for the capture.
fn size_maps(loader: &mut EbpfLoader<'_>, cfg: &ProbeConfig) {
    let sizes = &cfg.sizes;
    loader
        .map_max_entries(names::MAP_STACKS, sizes.stacks)
        .map_max_entries(names::MAP_SAMPLES, sizes.samples)
        .map_max_entries(names::MAP_WAITS, sizes.keys)
        // One entry with `--no-wakers`: nothing inserts into it, and the kernel memory goes.
        .map_max_entries(names::MAP_WAKERS, if cfg.wakers { sizes.keys } else { 1 })
        .map_max_entries(names::MAP_SITE_HISTS, sizes.site_hists)
        .map_max_entries(names::MAP_KERNEL_MEMO, sizes.memos)
        .map_max_entries(names::MAP_UNWIND_MEMO, sizes.memos)
        .map_max_entries(names::MAP_UNWIND_ROWS, cfg.dwarf_chunks.unwrap_or(1).max(1))
        .map_max_entries(names::MAP_THREADS, sizes.threads)
        .map_max_entries(names::MAP_TARGETS, cfg.target_words.max(1))
        .map_max_entries(names::MAP_PROCS, sizes.processes)
        .map_max_entries(names::MAP_PROC_MAPPINGS, sizes.processes)
        // One entry each without a Go target: nothing inserts, and the memory goes.
        .map_max_entries(
            names::MAP_GO_PARKED,
            if cfg.go { sizes.threads.max(65_536) } else { 1 },
        )
        .map_max_entries(
            names::MAP_GO_WAITS,
            if cfg.go { sizes.keys.max(4_096) } else { 1 },
        )
        // Samples are written there only when the kernel unwinds by rows.
        .map_max_entries(
            names::MAP_LATE_SAMPLES,
            if cfg.dwarf_chunks.is_some() {
                LATE_RING_BYTES
            } else {
                TIMELINE_RING_OFF_BYTES
            },
        )
        // One page when the timeline is off: nothing is written to it.
        .map_max_entries(
            names::MAP_TIMELINE,
            if cfg.timeline_min_ns.is_some() {
                sizes.timeline_ring
            } else {
                TIMELINE_RING_OFF_BYTES
            },
        );
}

/// The scheduler tracepoints an off-CPU capture attaches: `sched_waking` only when wakers
/// are recorded. `sched_wakeup_new` always: it starts a new thread's first cycle (its time
/// from creation to first run, and the counters' baseline), which the time split needs.
fn switch_programs(wakers: bool) -> &'static [&'static str] {
    if wakers {
        &[
            names::PROG_SWITCH,
            names::PROG_WAKEUP,
            names::PROG_WAKEUP_NEW,
        ]
    } else {
        &[names::PROG_SWITCH, names::PROG_WAKEUP_NEW]
    }
}

/// Loads (verifies) the programs `mode` needs (and `sched_waking` only when wakers are
/// recorded); the others are never loaded, so the verifier never walks them.
fn load_programs(ebpf: &mut Ebpf, mode: Mode, wakers: bool) -> Result<(), ProbeError> {
    let started = std::time::Instant::now();
    let btf = Btf::from_sys_fs()?;
    log::debug!(
        "kernel BTF read in {:.3} s",
        started.elapsed().as_secs_f64()
    );
    let loading = |name: &str| {
        let what = format!("loading {name}");
        move |source| ProbeError::Program { what, source }
    };
    // Tracepoint programs share their tracepoint's name.
    for name in [names::PROG_FORK, names::PROG_EXEC, names::PROG_EXIT] {
        let prog: &mut BtfTracePoint = program(ebpf, name)?;
        timed(name, || prog.load(name, &btf)).map_err(loading(name))?;
    }
    if mode.samples_on_cpu() {
        let prog: &mut PerfEvent = program(ebpf, names::PROG_SAMPLE)?;
        timed(names::PROG_SAMPLE, || prog.load()).map_err(loading(names::PROG_SAMPLE))?;
    }
    if mode.traces_switches() {
        for &name in switch_programs(wakers) {
            let prog: &mut BtfTracePoint = program(ebpf, name)?;
            timed(name, || prog.load(name, &btf)).map_err(loading(name))?;
        }
        let prog: &mut Iter = program(ebpf, names::PROG_SNAPSHOT)?;
        timed(names::PROG_SNAPSHOT, || prog.load("task", &btf))
            .map_err(loading(names::PROG_SNAPSHOT))?;
    }
    Ok(())
}

/// Loads one program, naming the time its verification took at `-v`.
fn timed<T>(name: &str, load: impl FnOnce() -> T) -> T {
    let started = std::time::Instant::now();
    let loaded = load();
    log::debug!(
        "program {name} loaded in {:.3} s",
        started.elapsed().as_secs_f64()
    );
    loaded
}

fn program<'a, T>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut T, ProbeError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let prog = ebpf
        .program_mut(name)
        .ok_or(ProbeError::MissingProgram(name))?;
    prog.try_into().map_err(|source| ProbeError::Program {
        what: format!("program {name} has an unexpected type"),
        source,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedOutcome {
    Seeded,
    /// A program recorded the thread since: the kernel's record wins.
    AlreadyRecorded,
    /// The thread table is full (`--max-threads`).
    TableFull,
}

/// Splits the iterator's output into records. A torn last record (cannot happen with
/// `bpf_seq_write` of whole records, but costs nothing to guard) is dropped.
fn parse_snapshots(bytes: &[u8]) -> Vec<TaskSnapshot> {
    let size = std::mem::size_of::<TaskSnapshot>();
    bytes
        .chunks_exact(size)
        .map(|chunk| {
            // SAFETY: TaskSnapshot is repr(C) plain integers; any bit pattern is valid and
            // read_unaligned copes with the Vec's alignment.
            unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast::<TaskSnapshot>()) }
        })
        .collect()
}

/// `CONTROL`: the programs record only between its `start_ns` and `stop_ns`, and key what
/// they aggregate by its epoch's parity.
pub struct WindowSwitch {
    control: Array<MapData, Control>,
    /// What the map holds.
    now: Control,
}

impl WindowSwitch {
    /// Opens the capture window; returns its start on the BPF clock (CLOCK_MONOTONIC).
    pub fn open(&mut self) -> Result<u64, ProbeError> {
        let start_ns = monotonic_ns();
        self.set(Control {
            start_ns,
            ..self.now
        })?;
        Ok(start_ns)
    }

    /// Closes the capture window: after this the maps no longer change.
    pub fn close(&mut self) -> Result<u64, ProbeError> {
        let stop_ns = monotonic_ns();
        self.set(Control {
            stop_ns,
            ..self.now
        })?;
        Ok(stop_ns)
    }

    /// The drain epoch the programs key their records with.
    pub fn epoch(&self) -> u64 {
        self.now.epoch
    }

    /// Begins drain epoch `epoch` (a closed window stays closed).
    pub fn set_epoch(&mut self, epoch: u64) -> Result<(), ProbeError> {
        self.set(Control { epoch, ..self.now })
    }

    fn set(&mut self, control: Control) -> Result<(), ProbeError> {
        self.control
            .set(0, control, 0)
            .map_err(|source| ProbeError::Map {
                name: names::MAP_CONTROL,
                source,
            })?;
        self.now = control;
        Ok(())
    }
}

fn sum_counter(array: &PerCpuArray<&MapData, u64>, counter: Counter) -> Result<u64, ProbeError> {
    let values = array
        .get(&(counter as u32), 0)
        .map_err(|source| ProbeError::Map {
            name: names::MAP_COUNTERS,
            source,
        })?;
    Ok(values.iter().sum())
}

/// Kernel memory held by the BPF maps this process has open: the sum of their `memlock` in
/// /proc/self/fdinfo (what `bpftool map show` reports per map). The maps are found once, after
/// the load (they all live until the end), and only those whose entries are allocated as they
/// are inserted (`BPF_F_NO_PREALLOC`) are read again: the drainer reads this at every drain,
/// and finding the maps anew (a path lookup per open fd) was a quarter of its CPU time.
#[derive(Clone, Debug, Default)]
pub struct MapMemory {
    /// What the preallocated maps hold: fixed at their creation.
    fixed: u64,
    fixed_maps: usize,
    /// `/proc/self/fdinfo/<fd>` of each map that grows and shrinks.
    growing: Vec<String>,
}

impl MapMemory {
    /// The maps this process has open now.
    pub fn find() -> Self {
        let mut found = Self::default();
        let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
            return found;
        };
        for fd in fds.filter_map(Result::ok) {
            let is_map = std::fs::read_link(fd.path())
                .is_ok_and(|target| target.as_os_str() == "anon_inode:bpf-map");
            if !is_map {
                continue;
            }
            let path = format!("/proc/self/fdinfo/{}", fd.file_name().to_string_lossy());
            let Some((memlock, flags)) = map_fdinfo(&path) else {
                continue;
            };
            if flags & BPF_F_NO_PREALLOC != 0 {
                found.growing.push(path);
            } else {
                found.fixed += memlock;
                found.fixed_maps += 1;
            }
        }
        found
    }

    /// Bytes the maps hold now, and how many maps answered.
    pub fn read(&self) -> (u64, usize) {
        let mut bytes = self.fixed;
        let mut maps = self.fixed_maps;
        for (memlock, _) in self.growing.iter().filter_map(|p| map_fdinfo(p)) {
            bytes += memlock;
            maps += 1;
        }
        (bytes, maps)
    }
}

/// `BPF_F_NO_PREALLOC` (include/uapi/linux/bpf.h): `BPF_F_NO_PREALLOC = (1U << 0)`.
const BPF_F_NO_PREALLOC: u64 = 1;

/// `memlock` and `map_flags` (printed in hex) of a map's fdinfo.
fn map_fdinfo(path: &str) -> Option<(u64, u64)> {
    let info = std::fs::read_to_string(path).ok()?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let memlock = field("memlock:")?.parse::<u64>().ok()?;
    let flags = field("map_flags:")
        .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    Some((memlock, flags))
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn start_ebpf_logger(ebpf: &mut Ebpf) {
    match aya_log::EbpfLogger::init(ebpf) {
        Ok(logger) => {
            // SAFETY: the AsyncFd owns the logger, whose ring buffer fd lives as long as it.
            let fd = match unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(
                    logger,
                    tokio::io::Interest::READABLE,
                )
            } {
                Ok(fd) => fd,
                Err(e) => {
                    log::warn!("eBPF log reader unavailable: {e}");
                    return;
                }
            };
            tokio::spawn(async move {
                let mut fd = fd;
                loop {
                    let Ok(mut guard) = fd.readable_mut().await else {
                        return;
                    };
                    guard.get_inner_mut().flush();
                    guard.clear_ready();
                }
            });
        }
        Err(e) => log::warn!("eBPF log reader unavailable: {e}"),
    }
}

#[cfg(test)]
mod exports;
#[cfg(test)]
mod stack_budget;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_wakers_sched_waking_is_neither_loaded_nor_attached() {
        let with = switch_programs(true);
        let without = switch_programs(false);
        for needed in [names::PROG_SWITCH, names::PROG_WAKEUP_NEW] {
            assert!(
                with.contains(&needed) && without.contains(&needed),
                "{needed}"
            );
        }
        assert!(with.contains(&names::PROG_WAKEUP));
        assert!(!without.contains(&names::PROG_WAKEUP));
    }
}
