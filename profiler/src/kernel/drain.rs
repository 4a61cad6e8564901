//! Drain: the in-kernel aggregates → plain Rust collections, while the capture runs.
//!
//! The tables hold what happens between two drains, not the whole window. Every key the
//! programs write carries the parity of the drain epoch (`Control::epoch`). A drain reads and
//! deletes the keys of the other parity — written during the previous epoch, which ended a
//! whole drain interval ago, so no program can still be writing them — merges them into the
//! totals kept here, and then bumps the epoch. Stacks are written once and never changed in
//! the kernel: each drain takes all of them (read and delete in one step); a stack seen again
//! is stored again. Threads that exited (their last switch-out is behind them) leave the
//! thread table one sweep after they were first seen gone (a drain sweeps the thread table
//! at most once a tick). After the window closes, one last drain takes everything.
//!
//! Reads and deletes go through the batch commands of `bpf(2)` (one system call per few
//! thousand entries, not three per entry).

use std::{
    collections::{BTreeMap, HashMap, HashSet, hash_map::Entry},
    io,
    marker::PhantomData,
    os::fd::{AsFd as _, AsRawFd as _},
    sync::{Arc, Mutex, PoisonError, mpsc},
    time::{Duration, Instant},
};

use aya::{
    Pod,
    maps::{HashMap as BpfHashMap, Map, MapData, PerCpuArray},
};
use profiler_common::{
    Counter, GoPark, GoWaitKey, GoWaitValue, NO_TABLE_GENERATION, ProcEvent, Resource,
    RunqueueHist, SampleKey, SampleValue, SiteKey, Stack, Thread, TimelineGoWait,
    WAIT_HIST_BUCKETS, WaitEntry, WaitHist, WaitKey, WaitValue, WakerKey, WakerValue,
    exit_overcount_ns, names, thread_flags, timeline_kind, unwind::ProcMappings,
};

use crate::kernel::{
    bpf_sys::{
        BPF_MAP_DELETE_BATCH, BPF_MAP_LOOKUP_AND_DELETE_BATCH, BPF_MAP_LOOKUP_BATCH, BatchAttr, bpf,
    },
    probes::{MapMemory, ProbeError, Probes, WindowSwitch},
    resources::{Listening, Namer},
    timeline::TimelineReader,
};
use profiler_core::model::{Drained, NamedResource, NewStack, RawGoroutines, SchedStat};

/// How often the tables are drained while the capture runs: the tick's pace. They must hold
/// two intervals' worth of keys (the epoch being written and the one waiting for its drain).
pub const DRAIN_INTERVAL: Duration = crate::run::capture::TICK;

/// The shortest drain interval: a table that fills within 25 ms holds more than 40 000 keys a
/// second, which a drain of a few milliseconds still keeps up with.
const MIN_DRAIN_INTERVAL: Duration = Duration::from_millis(25);

/// The first drain's interval.
const FIRST_DRAIN_INTERVAL: Duration = Duration::from_millis(50);

/// The next drain interval after a drain that found its fullest table `fill` full (0..1):
/// while a table is more than half full, short enough to bring it to a quarter at the rate
/// it filled (a full table may have overflowed at any rate: the shortest interval), since a
/// full table loses records and halving step by step lost them for several drains; back
/// towards [`DRAIN_INTERVAL`] while all are below an eighth.
fn next_interval(current: Duration, fill: f64) -> Duration {
    if fill >= 0.99 {
        MIN_DRAIN_INTERVAL
    } else if fill > 0.5 {
        current.mul_f64(0.25 / fill).max(MIN_DRAIN_INTERVAL)
    } else if fill < 0.125 {
        (current * 2).min(DRAIN_INTERVAL)
    } else {
        current
    }
}

thread_local! {
    /// The fullest table of the drain under way on this thread (0..1).
    static FILL: std::cell::Cell<f64> = const { std::cell::Cell::new(0.0) };
}

/// The aggregate tables, taken out of the loaded object, and everything drained from them.
pub struct Drainer {
    samples: BatchMap<SampleKey, SampleValue>,
    waits: BatchMap<WaitKey, WaitEntry>,
    wakers: BatchMap<WakerKey, WakerValue>,
    site_hists: BatchMap<SiteKey, WaitHist>,
    stacks: BatchMap<u64, Stack>,
    threads: BatchMap<u32, Thread>,
    /// What waits are on, as the kernel first saw each: taken at every drain and named then
    /// (an fd closed moments later is still named from what the kernel read).
    resources: BatchMap<u64, Resource>,
    namer: Namer,
    listening: Listening,
    named: BTreeMap<u64, NamedResource>,
    window: Arc<Mutex<WindowSwitch>>,
    /// The timeline ring, read at every drain (when the timeline is recorded).
    timeline: Option<TimelineReader>,
    /// The epoch the programs write now.
    epoch: u64,
    /// Threads seen exited at the last sweep of the thread table: taken at the next one.
    exited: HashSet<u32>,
    /// When the thread table was last swept for exited threads.
    threads_swept: Option<Instant>,
    map_memory: MapMemory,
    totals: Totals,
    /// Where each user stack unwound under a table goes when first drained: the target set
    /// names a JVM's interpreted and inlined methods in it while the JVM still runs.
    new_stacks: Option<mpsc::Sender<NewStack>>,
    pub stats: DrainStats,
}

/// What the drains cost and how full the tables came to be.
#[derive(Clone, Copy, Debug, Default)]
pub struct DrainStats {
    pub drains: u64,
    /// Wall time of the drains.
    pub secs: f64,
    /// CPU time of the drains (the rest of `secs` is the drainer waiting for a CPU).
    pub cpu_secs: f64,
    /// The shortest interval the drains came to (the tables filled faster than
    /// [`DRAIN_INTERVAL`] allowed).
    pub shortest_interval: Option<Duration>,
    /// The most keys one drain found, per table (both epochs).
    pub peak_waits: usize,
    pub peak_samples: usize,
    pub peak_wakers: usize,
    pub peak_stacks: usize,
    pub peak_threads: usize,
    /// The most kernel memory the maps held at a drain (the tables of large entries grow
    /// with what they hold and shrink at each drain: the most is just before one).
    pub peak_kernel_memory: u64,
}

/// Everything drained so far, keys with the epoch cleared.
#[derive(Default)]
struct Totals {
    samples: HashMap<SampleKey, SampleValue>,
    waits: HashMap<WaitKey, WaitValue>,
    wakers: HashMap<WakerKey, WakerValue>,
    site_hists: HashMap<SiteKey, WaitHist>,
    /// Frames only: a kernel `Stack` is 1 KiB whatever its depth, and a table of thousands
    /// of them copied the lot at each of its growths (a fifth of the drainer's CPU time on
    /// a PostgreSQL cluster).
    stacks: HashMap<u64, StackTotal>,
    threads: HashMap<u32, Thread>,
}

/// A drained stack: the mapping-table generation it was unwound under, and its frames.
struct StackTotal {
    generation: u32,
    frames: Box<[u64]>,
}

impl Drainer {
    /// Takes the aggregate tables out of `probes` (after the start snapshot seeded the thread
    /// table: from here on only the drainer reads or writes them).
    pub fn new(
        probes: &mut Probes,
        window: Arc<Mutex<WindowSwitch>>,
        timeline: Option<TimelineReader>,
    ) -> Result<Self, ProbeError> {
        let epoch = lock(&window).epoch();
        Ok(Self {
            samples: BatchMap::take(probes, names::MAP_SAMPLES)?,
            waits: BatchMap::take(probes, names::MAP_WAITS)?,
            wakers: BatchMap::take(probes, names::MAP_WAKERS)?,
            site_hists: BatchMap::take(probes, names::MAP_SITE_HISTS)?,
            stacks: BatchMap::take(probes, names::MAP_STACKS)?,
            threads: BatchMap::take(probes, names::MAP_THREADS)?,
            resources: BatchMap::take(probes, names::MAP_RESOURCES)?,
            namer: Namer::default(),
            listening: Listening::take(probes)?,
            named: BTreeMap::new(),
            window,
            timeline,
            epoch,
            exited: HashSet::new(),
            threads_swept: None,
            map_memory: probes.map_memory().clone(),
            totals: Totals::default(),
            new_stacks: None,
            stats: DrainStats::default(),
        })
    }

    /// Reads the listening ports of the network namespaces of `pids` (the targets) too.
    pub fn watch_namespaces_of(mut self, pids: impl IntoIterator<Item = u32>) -> Self {
        self.listening.watch(pids);
        self
    }

    /// Hands each user stack unwound under a table, when first drained, to `to`.
    pub fn send_new_stacks(mut self, to: mpsc::Sender<NewStack>) -> Self {
        self.new_stacks = Some(to);
        self
    }

    /// One drain while the capture runs: the keys of the epoch before the current one, the
    /// stacks, the threads that exited; then the next epoch begins.
    /// Returns how full the fullest table was (0..1).
    pub fn drain(&mut self) -> Result<f64, ProbeError> {
        let started = Instant::now();
        let cpu_started = thread_cpu_secs();
        self.note_kernel_memory();
        FILL.with(|f| f.set(0.0));
        let old = ((self.epoch + 1) & 1) as u32;
        self.take(Some(old))?;
        self.listening.update();
        self.name_resources()?;
        // Exits need no faster pace than the tick's (the thread table has room for a tick's
        // churn), and a sweep reads every thread's entry: at 25 ms intervals, most of it
        // again and again on a target with thousands of threads.
        if self
            .threads_swept
            .is_none_or(|t| t.elapsed() >= DRAIN_INTERVAL)
        {
            self.take_exited_threads()?;
            self.threads_swept = Some(Instant::now());
        }
        if let Some(t) = &mut self.timeline {
            t.read();
        }
        self.epoch += 1;
        lock(&self.window).set_epoch(self.epoch)?;
        self.stats.drains += 1;
        self.stats.secs += started.elapsed().as_secs_f64();
        self.stats.cpu_secs += thread_cpu_secs() - cpu_started;
        Ok(FILL.with(std::cell::Cell::get))
    }

    /// After the window closed: everything left, live threads included.
    pub fn finish(
        mut self,
        probes: &Probes,
        pids: &[u32],
    ) -> Result<(Drained, DrainStats), ProbeError> {
        let started = Instant::now();
        let cpu_started = thread_cpu_secs();
        self.note_kernel_memory();
        self.take(None)?;
        self.name_resources()?;
        let threads_left = self.threads.read_all()?;
        let threads_at_end = threads_left.len() as u64;
        self.stats.peak_threads = self.stats.peak_threads.max(threads_left.len());
        for (tid, thread) in threads_left {
            add_thread(&mut self.totals.threads, tid, thread);
        }
        self.stats.secs += started.elapsed().as_secs_f64();
        self.stats.cpu_secs += thread_cpu_secs() - cpu_started;
        let Totals {
            samples,
            waits,
            wakers,
            site_hists,
            stacks,
            threads,
        } = self.totals;
        let stack_generations = stacks
            .iter()
            .filter(|(_, s)| s.generation != 0)
            .map(|(id, s)| (*id, s.generation))
            .collect();
        let ebpf = probes.ebpf();
        let read = |name: &'static str| ebpf.map(name).ok_or(ProbeError::MissingMap(name));
        let (timeline, timeline_dropped) = self
            .timeline
            .map(TimelineReader::finish)
            .unwrap_or_default();
        let mut counters = probes.counters()?;
        counters.set(Counter::TimelineDropped, timeline_dropped);
        let mut drained = Drained {
            samples: samples.into_iter().collect(),
            waits: waits.into_iter().collect(),
            wakers: wakers.into_iter().collect(),
            threads,
            stacks: stacks
                .into_iter()
                .map(|(id, stack)| (id, stack.frames.into_vec()))
                .collect(),
            stack_generations,
            counters,
            site_hists,
            runqueue_hists: runqueue_hists(read(names::MAP_RUNQUEUE_HISTS)?)?,
            lost_waits: BpfHashMap::<&MapData, u32, u64>::try_from(read(names::MAP_LOST_WAITS)?)
                .map_err(|source| ProbeError::Map {
                    name: names::MAP_LOST_WAITS,
                    source,
                })?
                .iter()
                .filter_map(Result::ok)
                .collect(),
            sched_at_start: HashMap::new(),
            sched_at_stop: sched_stats(pids),
            tables_at_end: [
                (
                    names::MAP_PROCS,
                    count::<ProcEvent>(read(names::MAP_PROCS)?),
                ),
                (
                    names::MAP_PROC_MAPPINGS,
                    count::<ProcMappings>(read(names::MAP_PROC_MAPPINGS)?),
                ),
                (names::MAP_THREADS, threads_at_end),
            ]
            .into_iter()
            .collect(),
            timeline,
            resources: self.named,
            goroutines: RawGoroutines {
                processes: Vec::new(),
                waits: entries::<GoWaitKey, GoWaitValue>(
                    read(names::MAP_GO_WAITS)?,
                    names::MAP_GO_WAITS,
                )?,
                parked: entries::<u64, GoPark>(read(names::MAP_GO_PARKED)?, names::MAP_GO_PARKED)?,
            },
        };
        // Each goroutine's last wait is in no record yet (its next park would have written
        // it): on the timeline too, an open one (`end_ns` 0) up to the window's end.
        if drained.timeline.enabled {
            for (g, p) in &drained.goroutines.parked {
                drained.timeline.go_waits.push(TimelineGoWait {
                    kind: timeline_kind::GO_WAIT,
                    tgid: p.tgid,
                    g: *g,
                    start_ns: p.ts_ns,
                    end_ns: p.end_ns,
                    user_stack: p.user_stack,
                    reason: p.reason,
                    _pad: 0,
                });
            }
        }
        Ok((drained, self.stats))
    }

    /// Names the resources the kernel met since the last drain (each once: the kernel puts
    /// a taken one back when a wait meets it again).
    fn name_resources(&mut self) -> Result<(), ProbeError> {
        let new: Vec<(u64, Resource)> = self
            .resources
            .take_all()?
            .into_iter()
            .filter(|(id, _)| !self.named.contains_key(id))
            .collect();
        if !new.is_empty() {
            self.named.extend(self.namer.name_all(&new));
        }
        Ok(())
    }

    fn note_kernel_memory(&mut self) {
        let (bytes, _) = self.map_memory.read();
        self.stats.peak_kernel_memory = self.stats.peak_kernel_memory.max(bytes);
    }

    /// Merges the keys of `parity` (all keys with `None`) into the totals and deletes them.
    fn take(&mut self, parity: Option<u32>) -> Result<(), ProbeError> {
        let keep = |epoch: u32| parity.is_none_or(|p| p == epoch);
        let t = &mut self.totals;
        let found = self.waits.take_where(|k| keep(u32::from(k.epoch)))?;
        self.stats.peak_waits = self.stats.peak_waits.max(found.seen);
        for (mut key, entry) in found.taken {
            key.epoch = 0;
            for (key, value) in entry.split(key) {
                merge_wait(t.waits.entry(key).or_default(), &value);
            }
        }
        let found = self.samples.take_where(|k| keep(k.epoch))?;
        self.stats.peak_samples = self.stats.peak_samples.max(found.seen);
        for (mut key, value) in found.taken {
            key.epoch = 0;
            let total = t.samples.entry(key).or_default();
            total.count += value.count;
            total.period_ns += value.period_ns;
        }
        let found = self.wakers.take_where(|k| keep(k.epoch))?;
        self.stats.peak_wakers = self.stats.peak_wakers.max(found.seen);
        for (mut key, value) in found.taken {
            key.epoch = 0;
            let total = t.wakers.entry(key).or_insert(WakerValue {
                waker_comm: value.waker_comm,
                ..WakerValue::default()
            });
            total.count += value.count;
            total.total_ns += value.total_ns;
        }
        for (mut key, hist) in self.site_hists.take_where(|k| keep(k.epoch))?.taken {
            key.epoch = 0;
            let total = t.site_hists.entry(key).or_default();
            for (sum, n) in total.buckets.iter_mut().zip(hist.buckets) {
                *sum = sum.saturating_add(n);
            }
        }
        let stacks = self.stacks.take_all()?;
        self.stats.peak_stacks = self.stats.peak_stacks.max(stacks.len());
        for (id, stack) in stacks {
            // The kernel stores a stack again each time it recurs after a drain took it: its
            // id (a hash of its frames and generation) is then already here.
            let Entry::Vacant(slot) = t.stacks.entry(id) else {
                continue;
            };
            let generation = stack.generation();
            let frames: Box<[u64]> = stack.frames().into();
            let sent = match &self.new_stacks {
                Some(to) if generation != 0 && generation != NO_TABLE_GENERATION => to
                    .send(NewStack {
                        generation,
                        frames: frames.clone(),
                    })
                    .is_ok(),
                _ => true,
            };
            if !sent {
                // The receiver is gone (the window closed): nobody names from here on.
                self.new_stacks = None;
            }
            slot.insert(StackTotal { generation, frames });
        }
        Ok(())
    }

    /// Threads whose last switch-out is behind them leave the table, one sweep after they
    /// were first seen exited: a program that read the entry just before the exit was marked
    /// (a sample of the exiting thread) has long finished by then.
    fn take_exited_threads(&mut self) -> Result<(), ProbeError> {
        let all = self.threads.read_all()?;
        self.stats.peak_threads = self.stats.peak_threads.max(all.len());
        let mut gone = Vec::new();
        let mut exited = HashSet::new();
        for (tid, thread) in all {
            if thread.stats.flags & thread_flags::EXITED == 0 {
                continue;
            }
            if self.exited.contains(&tid) {
                gone.push(tid);
                add_thread(&mut self.totals.threads, tid, thread);
            } else {
                exited.insert(tid);
            }
        }
        self.threads.delete(&gone)?;
        self.exited = exited;
        Ok(())
    }
}

/// A drainer at work on a thread of its own: a tick of the target set may take longer than
/// a drain interval (unwind rows for a large library, a JVM's code cache), and the tables
/// must not wait for it.
pub struct Background {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Drainer>,
}

impl Drainer {
    pub fn start(mut self) -> Background {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            // See `priority`: a starved drainer loses records on a saturated machine.
            crate::kernel::priority::boost_this_thread("the drainer");
            let mut warned = false;
            // The first drains come early: a table sized from the thread count may fill
            // within the first interval, before any drain could measure its pace; the
            // intervals double back to the tick's while the tables stay nearly empty.
            let mut interval = FIRST_DRAIN_INTERVAL;
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(interval)
            {
                match self.drain() {
                    Ok(fill) => {
                        let next = next_interval(interval, fill);
                        // Only a filling table shortens it (not the early start).
                        if next < interval {
                            let shortest = self.stats.shortest_interval.get_or_insert(next);
                            *shortest = (*shortest).min(next);
                        }
                        interval = next;
                    }
                    Err(e) if !warned => {
                        log::warn!("draining the tables during the capture failed: {e}");
                        warned = true;
                    }
                    Err(_) => {}
                }
            }
            self
        });
        Background { stop, thread }
    }
}

impl Background {
    /// Stops draining (a drain under way finishes first) and hands the drainer back.
    pub fn stop(self) -> Drainer {
        let _ = self.stop.send(());
        match self.thread.join() {
            Ok(drainer) => drainer,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// Adds a thread's entry to the drained ones. A tid the kernel gave again to a new thread
/// (pid_max is 32 768 on small machines: a thread per request wraps it within a minute)
/// adds its time to the earlier thread's, as the kernel side does while both are in its
/// table; the later entry's bookkeeping (name, last cycle, open wait) is kept.
fn add_thread(threads: &mut HashMap<u32, Thread>, tid: u32, mut thread: Thread) {
    if let Some(earlier) = threads.get(&tid) {
        let (s, e) = (&mut thread.stats, &earlier.stats);
        s.on_cpu_ns += e.on_cpu_ns;
        s.traced_on_ns += e.traced_on_ns;
        s.overhead_ns += e.overhead_ns;
        s.uncharged_ns += e.uncharged_ns;
        s.switches += e.switches;
        if s.flags & e.flags & thread_flags::EXITED != 0 {
            // Both ended: their overcounts add up (`exit_overcount_ns`).
            s.last_exec_ns = exit_overcount_ns(s) + exit_overcount_ns(e);
        }
    }
    threads.insert(tid, thread);
}

fn lock(window: &Mutex<WindowSwitch>) -> std::sync::MutexGuard<'_, WindowSwitch> {
    window.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Adds one drained wait record to the total of its key.
fn merge_wait(total: &mut WaitValue, value: &WaitValue) {
    // Records with no wait of their own (preemptions on the way to a sleep) carry
    // min u64::MAX and max 0, which leave a total's as they are.
    if total.count == 0 && total.total_ns == 0 {
        total.min_ns = u64::MAX;
    }
    total.total_ns += value.total_ns;
    total.count += value.count;
    total.max_ns = total.max_ns.max(value.max_ns);
    total.min_ns = total.min_ns.min(value.min_ns);
}

/// Entries of a hash map keyed by pid or tid.
fn count<V: Pod>(map: &Map) -> u64 {
    BpfHashMap::<&MapData, u32, V>::try_from(map)
        .map_or(0, |h| h.keys().filter(Result::is_ok).count() as u64)
}

fn runqueue_hists(map: &Map) -> Result<[WaitHist; RunqueueHist::COUNT as usize], ProbeError> {
    let name = names::MAP_RUNQUEUE_HISTS;
    let array: PerCpuArray<&MapData, WaitHist> =
        PerCpuArray::try_from(map).map_err(|source| ProbeError::Map { name, source })?;
    let mut out = [WaitHist::default(); RunqueueHist::COUNT as usize];
    for (i, hist) in out.iter_mut().enumerate() {
        let per_cpu = array
            .get(&(i as u32), 0)
            .map_err(|source| ProbeError::Map { name, source })?;
        for cpu in per_cpu.iter() {
            for b in 0..WAIT_HIST_BUCKETS {
                hist.buckets[b] = hist.buckets[b].saturating_add(cpu.buckets[b]);
            }
        }
    }
    Ok(out)
}

/// Every live thread's `/proc/<pid>/task/<tid>/schedstat`, for each process.
pub fn sched_stats(pids: &[u32]) -> HashMap<u32, SchedStat> {
    let mut all = HashMap::new();
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        all.extend(tasks.filter_map(Result::ok).filter_map(|entry| {
            let tid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let text = std::fs::read_to_string(entry.path().join("schedstat")).ok()?;
            Some((tid, parse_schedstat(&text)?))
        }));
    }
    all
}

/// `<on-cpu ns> <run-queue ns> <timeslices>`.
fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    Some(SchedStat {
        exec_ns: fields.next()?.ok()?,
        delay_ns: fields.next()?.ok()?,
    })
}

/// A BPF hash map read and emptied with the batch commands of `bpf(2)`.
struct BatchMap<K, V> {
    name: &'static str,
    data: MapData,
    /// Entries per batch call, and the buffers the kernel fills (kept from drain to drain:
    /// zeroing fresh megabytes five times a second was most of a drain's cost).
    batch: usize,
    keys: Vec<K>,
    values: Vec<V>,
    /// The table's `max_entries`.
    capacity: usize,
    _types: PhantomData<(K, V)>,
}

/// What one pass over a table found.
struct Found<K, V> {
    /// Entries in the table when it was read.
    seen: usize,
    taken: Vec<(K, V)>,
}

/// Bytes of keys and values asked for per batch call: a few hundred entries of the larger
/// values (a stack is 1 KiB, a site histogram 3.3 KiB), far more than a hash bucket holds.
const BATCH_BYTES: usize = 256 * 1024;

/// `enum bpf_cmd` (include/uapi/linux/bpf.h).
impl<K: Pod, V: Pod> BatchMap<K, V> {
    fn take(probes: &mut Probes, name: &'static str) -> Result<Self, ProbeError> {
        match probes.take_map(name)? {
            Map::HashMap(data) | Map::LruHashMap(data) => {
                let batch = (BATCH_BYTES / (size_of::<K>() + size_of::<V>())).max(16);
                let capacity = data.info().map_or(0, |i| i.max_entries() as usize);
                Ok(Self {
                    name,
                    data,
                    batch,
                    keys: vec![zeroed(); batch],
                    values: vec![zeroed(); batch],
                    capacity,
                    _types: PhantomData,
                })
            }
            _ => Err(ProbeError::MissingMap(name)),
        }
    }

    fn error(&self, what: &str, error: io::Error) -> ProbeError {
        ProbeError::Batch {
            name: self.name,
            what: what.to_string(),
            error,
        }
    }

    /// Every entry.
    fn read_all(&mut self) -> Result<Vec<(K, V)>, ProbeError> {
        self.batches(BPF_MAP_LOOKUP_BATCH)
            .map_err(|e| self.error("reading", e))
    }

    /// Every entry, each deleted as it is read.
    fn take_all(&mut self) -> Result<Vec<(K, V)>, ProbeError> {
        let all = self
            .batches(BPF_MAP_LOOKUP_AND_DELETE_BATCH)
            .map_err(|e| self.error("taking", e))?;
        self.note_fill(all.len());
        Ok(all)
    }

    /// Remembers how full the table was at this read (the fullest table of a drain sets
    /// the pace of the next ones).
    fn note_fill(&self, entries: usize) {
        if self.capacity > 0 {
            FILL.with(|f| f.set(f.get().max(entries as f64 / self.capacity as f64)));
        }
    }

    /// The entries whose key `pick` selects, deleted from the table.
    fn take_where(&mut self, pick: impl Fn(&K) -> bool) -> Result<Found<K, V>, ProbeError> {
        let all = self.read_all()?;
        let seen = all.len();
        self.note_fill(seen);
        let taken: Vec<(K, V)> = all.into_iter().filter(|(k, _)| pick(k)).collect();
        let keys: Vec<K> = taken.iter().map(|(k, _)| *k).collect();
        self.delete(&keys)?;
        Ok(Found { seen, taken })
    }

    fn batches(&mut self, cmd: libc::c_long) -> io::Result<Vec<(K, V)>> {
        let mut out = Vec::new();
        let batch = self.batch;
        let (keys, values) = (&mut self.keys, &mut self.values);
        // The position token of a hash map is its next bucket's index (a u32); room for more.
        let mut token = [0u64; 2];
        let mut next = [0u64; 2];
        let mut first = true;
        loop {
            let mut attr = BatchAttr {
                in_batch: if first { 0 } else { token.as_ptr() as u64 },
                out_batch: next.as_mut_ptr() as u64,
                keys: keys.as_mut_ptr() as u64,
                values: values.as_mut_ptr() as u64,
                count: batch as u32,
                map_fd: self.data.fd().as_fd().as_raw_fd() as u32,
                ..BatchAttr::default()
            };
            // SAFETY: the keys and values buffers hold `count` of the map's keys and values
            // and outlive the call.
            let result = unsafe { bpf(cmd, &mut attr) };
            let n = (attr.count as usize).min(batch);
            out.extend(keys[..n].iter().copied().zip(values[..n].iter().copied()));
            match result {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(out),
                Err(e) => return Err(e),
            }
            token = next;
            first = false;
        }
    }

    /// Deletes `keys`; keys already gone are skipped.
    fn delete(&self, keys: &[K]) -> Result<(), ProbeError> {
        let mut rest = keys;
        while !rest.is_empty() {
            let mut attr = BatchAttr {
                keys: rest.as_ptr() as u64,
                count: rest.len().min(u32::MAX as usize) as u32,
                map_fd: self.data.fd().as_fd().as_raw_fd() as u32,
                ..BatchAttr::default()
            };
            // SAFETY: `keys` holds `count` of the map's keys and outlives the call.
            let result = unsafe { bpf(BPF_MAP_DELETE_BATCH, &mut attr) };
            let done = (attr.count as usize).min(rest.len());
            match result {
                Ok(()) => return Ok(()),
                // The key at `done` was not there: skip it and go on.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    rest = &rest[(done + 1).min(rest.len())..];
                }
                Err(e) => return Err(self.error("deleting", e)),
            }
        }
        Ok(())
    }
}

/// The calling thread's CPU time so far (0 where the clock cannot be read).
fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn zeroed<T: Pod>() -> T {
    // SAFETY: Pod types are plain integers and arrays of them: all zeros is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Every entry of a table read once, after the window (the goroutine tables: their entries
/// live across drains).
fn entries<K: Pod, V: Pod>(map: &Map, name: &'static str) -> Result<Vec<(K, V)>, ProbeError> {
    Ok(BpfHashMap::<&MapData, K, V>::try_from(map)
        .map_err(|source| ProbeError::Map { name, source })?
        .iter()
        .filter_map(Result::ok)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filling_table_shortens_the_interval_and_an_emptied_one_restores_it() {
        // A full table goes straight to the shortest interval; a half-full one to where it
        // would be a quarter full.
        assert_eq!(next_interval(DRAIN_INTERVAL, 1.0), MIN_DRAIN_INTERVAL);
        assert_eq!(next_interval(DRAIN_INTERVAL, 0.625), DRAIN_INTERVAL * 2 / 5);
        let mut interval = DRAIN_INTERVAL;
        for _ in 0..10 {
            interval = next_interval(interval, 0.9);
        }
        assert_eq!(interval, MIN_DRAIN_INTERVAL);
        assert_eq!(next_interval(interval, 0.3), MIN_DRAIN_INTERVAL);
        for _ in 0..10 {
            interval = next_interval(interval, 0.01);
        }
        assert_eq!(interval, DRAIN_INTERVAL);
    }

    #[test]
    fn schedstat_lines_parse() {
        assert_eq!(
            parse_schedstat("38362476452 770639017 1873083\n"),
            Some(SchedStat {
                exec_ns: 38_362_476_452,
                delay_ns: 770_639_017
            })
        );
        assert_eq!(parse_schedstat("0 0 0"), Some(SchedStat::default()));
        assert_eq!(parse_schedstat("12"), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    #[test]
    fn a_reused_tid_adds_its_time_to_the_earlier_threads() {
        let mut threads = HashMap::new();
        let mut first = Thread::default();
        first.stats.on_cpu_ns = 5;
        first.stats.switches = 2;
        first.stats.flags = thread_flags::EXITED;
        add_thread(&mut threads, 7, first);
        let mut second = Thread::default();
        second.stats.on_cpu_ns = 3;
        second.stats.switches = 1;
        second.stats.comm[0] = b'x';
        add_thread(&mut threads, 7, second);
        let t = threads[&7];
        assert_eq!((t.stats.on_cpu_ns, t.stats.switches), (8, 3));
        assert_eq!(t.stats.comm[0], b'x', "the later thread's name");
        assert_eq!(t.stats.flags, 0, "the later thread's bookkeeping");
    }

    #[test]
    fn drained_waits_add_up_and_keep_their_extremes() {
        let mut total = WaitValue::default();
        merge_wait(
            &mut total,
            &WaitValue {
                total_ns: 10,
                count: 2,
                max_ns: 7,
                min_ns: 3,
            },
        );
        // A record of preemption time only (no wait of its own).
        merge_wait(
            &mut total,
            &WaitValue {
                total_ns: 5,
                count: 0,
                max_ns: 0,
                min_ns: u64::MAX,
            },
        );
        merge_wait(
            &mut total,
            &WaitValue {
                total_ns: 20,
                count: 1,
                max_ns: 20,
                min_ns: 20,
            },
        );
        assert_eq!(
            total,
            WaitValue {
                total_ns: 35,
                count: 3,
                max_ns: 20,
                min_ns: 3
            }
        );
    }
}
