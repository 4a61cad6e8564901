//! The target set: which processes a capture covers, and keeping the kernel's view of them
//! current. At the start: the listed processes (a thread id selects its process), their
//! descendants unless `--no-children`, every member of a cgroup v2 directory (and its
//! sub-directories). During the capture: processes the kernel side saw forked from targets,
//! processes that joined the cgroup, execs (the mappings are reloaded: new program, new
//! layout), libraries loaded (dlopen), exits. For each process the kernel gets a mapping
//! table over the one shared row array; each table layout is kept (by its generation) so a
//! stack is named with the files of the layout it was unwound under.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    io,
    path::{Path, PathBuf},
    sync::mpsc,
};

use crate::{
    kernel::probes::{ProbeError, Probes},
    process::{
        hotspot::HotSpot,
        late::{self, LateSamples, LateUnwound},
        mmap_events::{Event, MmapEvents, Task},
        uploads::Uploads,
    },
    run::preflight::{self, PreflightError},
};
use profiler_common::{Counter, unwind::ProcMappings};
use profiler_core::{
    model::{CaptureNote, NewStack, ProcessInfo, Profile},
    perfmap::PerfMap,
    post::{self, JavaProcess},
    procmap::{MappingKind, ProcessMaps},
    symbolize::{Spaces, lookup_addresses},
    unwind::tables::UnwindTables,
};

/// `CGROUP2_SUPER_MAGIC` (include/uapi/linux/magic.h).
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
/// Processes whose mappings are re-read per tick (for libraries loaded mid-capture) besides
/// new and exec'd ones, while the kernel's mapping records do not tell of each mapping: a
/// service of hundreds of processes is covered over a few seconds.
const REFRESHES_PER_TICK: usize = 16;

/// Ticks at which a JVM whose structures could not be read is tried again (5 s).
const JVM_ATTACH_RETRIES: u8 = 25;

/// What the user asked to profile.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub pids: Vec<u32>,
    pub cgroup: Option<PathBuf>,
    pub follow_children: bool,
}

/// One process of the set.
#[derive(Debug)]
pub struct Target {
    pub pid: u32,
    /// Its name (`comm`), updated after an exec.
    pub name: String,
    pub maps: ProcessMaps,
    /// The process that forked it during the capture.
    pub parent: Option<u32>,
    /// When it was forked (CLOCK_MONOTONIC ns), if during the capture.
    pub forked_ns: Option<u64>,
    /// When its last thread exited.
    pub exited_ns: Option<u64>,
    /// Execs: the most of the kernel's count and the exec records read.
    pub execs: u32,
    /// Exec records (perf `COMM` with the exec flag) read. Kept apart from `execs`: the
    /// kernel's count and the record of one exec arrive in either order, and one exec must
    /// not count twice.
    exec_records: u32,
    /// Ticks left in which `name` is read again: a forked child often names itself
    /// (`prctl(PR_SET_NAME)`, `pthread_setname_np`) just after the fork, after its first read.
    rename_checks: u8,
    /// Reaped: no longer in /proc.
    gone: bool,
    /// When (CLOCK_MONOTONIC) its entries in the kernel's process and mapping tables were
    /// freed: at the first tick that found it finished (`finished`).
    freed_ns: Option<u64>,
    /// Out of the kernel's target set (a tick after it was reaped).
    untargeted: bool,
    /// A HotSpot JVM's code cache, followed (found when its mappings show libjvm.so).
    pub hotspot: Option<HotSpot>,
    /// Maps libjvm.so, but its structures could not be read yet: tried again at this many
    /// more ticks.
    jvm_retries: u8,
}

impl Target {
    fn new(pid: u32) -> Self {
        Self {
            pid,
            // Empty until read: post-processing names a process gone before that by its
            // main thread's name in the kernel.
            name: comm(pid).unwrap_or_default(),
            maps: ProcessMaps::new(pid),
            parent: None,
            forked_ns: None,
            exited_ns: None,
            execs: 0,
            exec_records: 0,
            rename_checks: RENAME_CHECKS,
            gone: false,
            freed_ns: None,
            untargeted: false,
            hotspot: None,
            jvm_retries: 0,
        }
    }

    /// After its mappings were (re)read or recorded: a JVM is found; a JVM's code cache is
    /// read again when due (for its names even with `--unwind fp`). Whether its JIT rows
    /// changed (its mapping table must be uploaded).
    fn follow_jit(&mut self, uploads: &mut Uploads, mappings_new: bool, gaps_met: bool) -> bool {
        let retry = self.jvm_retries > 0;
        if (mappings_new || retry)
            && self.hotspot.is_none()
            && self.maps.mappings().iter().any(is_libjvm)
        {
            self.hotspot = HotSpot::attach(self.pid);
            // A JVM found while it maps its libraries may not have its structures yet: tried
            // again for a while (a mapping record comes once, a re-read of the maps may not
            // come again).
            self.jvm_retries = match (&self.hotspot, retry) {
                (Some(_), _) => 0,
                (None, false) => JVM_ATTACH_RETRIES,
                (None, true) => self.jvm_retries - 1,
            };
        }
        match self.hotspot.as_mut().and_then(|h| h.refresh(gaps_met)) {
            Some(update) => uploads.set_jit(self.pid, update.base, update.end, &update.rows),
            None => false,
        }
    }

    /// Whether this process can have made a record the kernel wrote at `ns`: it had not
    /// finished by then. A later record under its pid is another process's (a pid reused
    /// after it was reaped), not to be added to its mappings or followed as its child.
    fn live_at(&self, ns: u64) -> bool {
        self.freed_ns.is_none_or(|freed| ns < freed)
    }

    pub fn info(&self) -> ProcessInfo {
        ProcessInfo {
            name: self.name.clone(),
            parent: self.parent,
            forked_ns: self.forked_ns,
            exited_ns: self.exited_ns,
            execs: self.execs,
        }
    }
}

#[derive(Debug)]
pub struct TargetSet {
    pub processes: BTreeMap<u32, Target>,
    /// The one owner of what the kernel holds for the set: target bits, mapping tables, the
    /// unwind rows, and the layouts handed out (the files that name a stack unwound under
    /// each).
    pub uploads: Uploads,
    cgroup: Option<PathBuf>,
    follow_children: bool,
    next_refresh: usize,
    /// Re-reads of `/proc/<pid>/maps` still owed: with mapping records flowing, one round
    /// over the processes closes the gap between their first read and the records' start,
    /// and a round follows each loss of records; no more (a read of a large process's maps
    /// costs ~1 ms of kernel time, and on a PostgreSQL cluster re-reading each process every
    /// tick was a third of the profiler's CPU time). Without records, every tick owes some.
    refreshes_owed: usize,
    /// Processes whose mappings the records changed since the last tick.
    recorded: BTreeSet<u32>,
    /// The kernel's mapping records of every process (`mmap_events`): new processes'
    /// executables and libraries as they are mapped, so a process that lives 10 ms is
    /// unwound and named like one that lives an hour. None when they could not be opened
    /// (then `/proc/<pid>/maps`, read each tick, is all there is).
    events: Option<MmapEvents>,
    /// Mapping records the kernel dropped (its ring was full before it was read).
    pub mapping_records_lost: u64,
    /// The kernel's count of frames met in JIT code newer than its rows, at the last tick.
    jit_gap_frames: u64,
    /// Samples of processes the kernel had no table for, unwound here (with `--unwind
    /// dwarf`, once the capture runs).
    pub late: Option<LateSamples>,
    /// User stacks as the drainer first meets them: a JVM's interpreted and inlined methods
    /// in them are named at the next tick, while it runs (a JVM that exits inside the window
    /// cannot be read after it).
    pub new_stacks: Option<mpsc::Receiver<NewStack>>,
    /// JVMs' user stacks of the start snapshot (pid, frames leaf first), named at the first
    /// tick like the drained ones.
    seeded_java: Vec<(u32, Vec<u64>)>,
}

/// What `late.rs` unwinds with: each process's mapping table as the kernel would get it.
struct TargetTables<'a> {
    processes: &'a BTreeMap<u32, Target>,
    uploads: &'a mut Uploads,
}

impl late::Tables for TargetTables<'_> {
    fn table(&mut self, pid: u32) -> Option<Box<ProcMappings>> {
        let target = self.processes.get(&pid)?;
        self.uploads.table_of(&target.maps)
    }

    fn unwind_tables(&self) -> Option<&UnwindTables> {
        self.uploads.tables()
    }
}

impl TargetSet {
    /// The processes of `selection` right now. Refuses a PID that does not exist (naming it),
    /// a kernel thread, a path that is not a cgroup v2 directory, and an empty selection.
    pub fn resolve(selection: &Selection) -> Result<Self, PreflightError> {
        let mut pids = BTreeSet::new();
        for &pid in &selection.pids {
            pids.insert(preflight::resolve_target(pid)?.pid);
        }
        if let Some(dir) = &selection.cgroup {
            check_cgroup(dir)?;
            pids.extend(cgroup_members(dir));
        }
        if selection.follow_children {
            add_descendants(&mut pids);
        }
        if pids.is_empty() {
            return Err(PreflightError::EmptyCgroup(
                selection.cgroup.clone().unwrap_or_default(),
            ));
        }
        let mut processes = BTreeMap::new();
        for pid in pids {
            let mut target = Target::new(pid);
            match target.maps.refresh() {
                Ok(()) => {
                    processes.insert(pid, target);
                }
                // A descendant or cgroup member that exited since it was listed (a backend
                // that just served its connection) is simply not there to profile.
                Err(_) if !selection.pids.contains(&pid) && !alive(pid) => {}
                Err(error) => return Err(unreadable(pid, error)),
            }
        }
        if processes.is_empty() {
            return Err(PreflightError::EmptyCgroup(
                selection.cgroup.clone().unwrap_or_default(),
            ));
        }
        Ok(Self {
            processes,
            uploads: Uploads::default(),
            cgroup: selection.cgroup.clone(),
            follow_children: selection.follow_children,
            next_refresh: 0,
            refreshes_owed: 0,
            recorded: BTreeSet::new(),
            events: None,
            mapping_records_lost: 0,
            jit_gap_frames: 0,
            late: None,
            new_stacks: None,
            seeded_java: Vec::new(),
        })
    }

    /// No process yet (a command is launched once the programs are attached).
    pub fn empty() -> Self {
        Self {
            processes: BTreeMap::new(),
            uploads: Uploads::default(),
            cgroup: None,
            follow_children: true,
            next_refresh: 0,
            refreshes_owed: 0,
            recorded: BTreeSet::new(),
            events: None,
            mapping_records_lost: 0,
            jit_gap_frames: 0,
            late: None,
            new_stacks: None,
            seeded_java: Vec::new(),
        }
    }

    /// A launched command, held before its exec: its mappings are read once it runs the
    /// program (the exec is seen like any other).
    pub fn add_launched(&mut self, pid: u32) {
        self.processes.insert(pid, Target::new(pid));
    }

    /// The first process of the set (the one the outputs are named after).
    pub fn first(&self) -> Option<&Target> {
        self.processes.values().next()
    }

    /// Unwinds with `tables`: builds the rows of every file the set maps now (before the
    /// programs load: their number sizes the kernel's row array).
    pub fn use_tables(&mut self, tables: UnwindTables) {
        self.uploads = Uploads::new(Some(tables));
        for target in self.processes.values_mut() {
            self.uploads.rows_for(&target.maps, std::iter::empty());
            target.follow_jit(&mut self.uploads, true, false);
        }
    }

    /// Starts receiving the kernel's mapping records (before a launched command execs, so
    /// its program's own mappings are among them). Without them the capture goes on with
    /// `/proc/<pid>/maps` alone, and says so.
    pub fn open_mapping_records(&mut self) {
        match MmapEvents::open() {
            Ok(events) => {
                self.events = Some(events);
                self.refreshes_owed = self.processes.len();
            }
            Err(e) => log::warn!(
                "mapping records unavailable ({e}): processes that exit within a tick are \
                 unwound by frame pointers and may stay unnamed"
            ),
        }
    }

    /// An fd that becomes readable when mapping records wait to be read.
    pub fn mapping_records_ready(&self) -> Option<std::os::fd::OwnedFd> {
        self.events.as_ref().and_then(|e| e.epoll().ok())
    }

    /// New processes, execs and mappings from the kernel's records, applied as they came:
    /// a fork's child starts with its parent's mappings, an exec drops them, a new
    /// executable mapping is added; then the rows and mapping tables that changed go to the
    /// kernel. Cheap enough to run within milliseconds of every exec.
    pub fn follow_mappings(&mut self, probes: &mut Probes) {
        let read_ns = crate::kernel::probes::monotonic_ns();
        self.apply_mapping_records(probes);
        if let Some(mut late) = self.late.take() {
            late.unwind(&mut self.tables(), read_ns, false);
            self.late = Some(late);
        }
    }

    /// Samples the kernel left to user space (`late.rs`), unwound after the window, and how
    /// many of them had no table covering their pc.
    pub fn finish_late(&mut self) -> Option<(LateUnwound, u64)> {
        let mut late = self.late.take()?;
        late.unwind(&mut self.tables(), u64::MAX, true);
        let without_table = late.without_table;
        Some((late.finish(), without_table))
    }

    fn tables(&mut self) -> TargetTables<'_> {
        TargetTables {
            processes: &self.processes,
            uploads: &mut self.uploads,
        }
    }

    /// The kernel's mapping records since the last read: new processes, execs, mappings.
    fn apply_mapping_records(&mut self, probes: &mut Probes) {
        let Some(events) = self.events.as_mut() else {
            return;
        };
        let mut batch = Vec::new();
        events.read(&mut |e| batch.push(e));
        // One CPU's records are in order; the CPUs' are merged by time.
        batch.sort_by_key(|e| e.time_ns().unwrap_or(0));
        let mut changed: BTreeSet<u32> = BTreeSet::new();
        for event in batch {
            log::trace!("mapping record {event:?}");
            match event {
                Event::Fork(t) if t.pid != t.ppid && self.follow_children => {
                    self.record_fork(probes, &t, &mut changed);
                }
                Event::Comm(c) if c.exec => {
                    let Some(target) = self
                        .processes
                        .get_mut(&c.pid)
                        .filter(|t| t.live_at(c.time_ns))
                    else {
                        continue;
                    };
                    // A new program: its own mappings follow. Counted here, so the kernel's
                    // exec count read at the next tick does not drop what follows; a count
                    // read first already holds this exec.
                    target.exec_records += 1;
                    target.name = c.name;
                    if target.exec_records <= target.execs {
                        // The kernel's count came first: the new program's mappings were
                        // read again from /proc then, whole.
                        continue;
                    }
                    target.execs = target.exec_records;
                    target.maps.exec();
                    target.hotspot = None;
                    target.rename_checks = RENAME_CHECKS;
                    self.uploads.forget_jit(c.pid);
                    changed.insert(c.pid);
                }
                Event::Mmap2(m) if m.is_exec() => {
                    let target = self.processes.get_mut(&m.pid);
                    if let Some(target) = target.filter(|t| t.live_at(m.time_ns)) {
                        target.maps.add_recorded(&m.recorded());
                        changed.insert(m.pid);
                    }
                }
                Event::Lost { count, .. } => {
                    self.mapping_records_lost = self.mapping_records_lost.saturating_add(count);
                    self.refreshes_owed = self.processes.len();
                }
                _ => {}
            }
        }
        self.recorded.extend(&changed);
        self.publish(probes, &changed);
    }

    /// A target's fork, as its record tells it: the child gets the parent's mappings and its
    /// bit, and joins `changed`.
    fn record_fork(&mut self, probes: &mut Probes, t: &Task, changed: &mut BTreeSet<u32>) {
        // A parent may have exited (and been forgotten by a tick) before this
        // record was read: its last mappings are still the child's.
        let Some(parent) = self.processes.get(&t.ppid).filter(|p| p.live_at(t.time_ns)) else {
            return;
        };
        let maps = parent.maps.forked(t.pid);
        // A record read late may tell of the fork of a process already freed; one
        // forked after that is a new process under a reused pid.
        let (target, _) = born(&mut self.processes, t.pid, |old| {
            old.freed_ns.is_some_and(|freed| t.time_ns > freed)
        });
        if target.maps.mappings().is_empty() {
            target.maps = maps;
        } else {
            // It exec'd before this record was read: its new program's maps are
            // known, its stacks from before the exec are in the parent's.
            log::debug!("process {} exec'd before its fork was read", t.pid);
            target.maps.inherit_earlier(&maps);
        }
        target.parent = Some(t.ppid);
        target.forked_ns = target.forked_ns.or(Some(t.time_ns));
        if target.freed_ns.is_some() {
            // Gone from the kernel's tables: its bit must not come back.
            return;
        }
        if let Err(e) = self.uploads.add_target(probes, t.pid) {
            log::warn!("process {}, forked from a target: {e}", t.pid);
        }
        changed.insert(t.pid);
    }

    /// Rows for the files of `pids` (room made from files no live process maps when the
    /// array is full), then their mapping tables, to the kernel.
    fn publish(&mut self, probes: &mut Probes, pids: &BTreeSet<u32>) {
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // Nor rows for a process the kernel no longer holds.
            if let Some(target) = self.processes.get(pid).filter(|t| t.freed_ns.is_none()) {
                let live = self.processes.values().filter(|t| !t.gone).map(|t| &t.maps);
                self.uploads.rows_for(&target.maps, live);
            }
        }
        // A process whose entries were freed gets no table again: nothing would free it.
        let changed = pids.iter().filter_map(|pid| {
            let t = self.processes.get(pid).filter(|t| t.freed_ns.is_none())?;
            Some((*pid, &t.maps, t.execs))
        });
        if let Err(e) = self.uploads.publish(probes, changed) {
            log::warn!("the kernel's tables were not all updated: {e}");
        }
    }

    /// Hands the kernel every process: its bit in the target set and its mapping table.
    pub fn install(&mut self, probes: &mut Probes) -> Result<(), ProbeError> {
        for &pid in self.processes.keys() {
            self.uploads.add_target(probes, pid)?;
        }
        let all = self
            .processes
            .iter()
            .map(|(&pid, t)| (pid, &t.maps, t.execs));
        self.uploads.publish(probes, all)
    }

    /// Once the fork tracepoint is attached: processes forked between `resolve` and now
    /// (while the programs loaded) were seen by neither; from here on the kernel adds them.
    pub fn catch_up(&mut self, probes: &mut Probes) {
        if !self.follow_children {
            return;
        }
        let mut pids: BTreeSet<u32> = self.processes.keys().copied().collect();
        add_descendants(&mut pids);
        let mut added = BTreeSet::new();
        for pid in pids {
            if self.processes.contains_key(&pid) {
                continue;
            }
            let mut target = Target::new(pid);
            if target.maps.refresh().is_err() {
                continue; // gone already
            }
            if let Err(e) = self.uploads.add_target(probes, pid) {
                log::warn!("process {pid} forked during start-up cannot be added: {e}");
                continue;
            }
            log::info!("process {pid} was forked while the programs loaded; added");
            self.processes.insert(pid, target);
            added.insert(pid);
        }
        self.publish(probes, &added);
    }

    /// What changed since the last tick: new processes (forked from targets, or joined the
    /// cgroup), execs, exits, libraries loaded. Returns the notes for the user (a process
    /// that ended) and whether every process is gone.
    pub fn tick(&mut self, probes: &mut Probes) -> Tick {
        let mut tick = Tick::default();
        self.follow_mappings(probes);
        self.name_java_methods();
        let mut reload: BTreeSet<u32> = BTreeSet::new();
        self.follow_events(probes, &mut tick, &mut reload);
        self.join_cgroup(probes, &mut reload);
        self.reload(probes, reload);
        self.follow_names();
        self.release_finished(probes);
        tick.all_gone = self.processes.values().all(|t| t.gone);
        tick
    }

    /// The Java methods of the start snapshot's stacks and of those drained since the last
    /// tick named now, while their JVM runs: a drained stack's by the process whose layout it
    /// was unwound under.
    fn name_java_methods(&mut self) {
        let mut stacks = std::mem::take(&mut self.seeded_java);
        if let Some(new_stacks) = &self.new_stacks {
            stacks.extend(new_stacks.try_iter().filter_map(|stack| {
                let pid = self.uploads.layouts.get(&stack.generation)?.pid();
                self.processes.get(&pid)?.hotspot.as_ref()?;
                Some((pid, stack.frames.into_vec()))
            }));
        }
        for (pid, frames) in stacks {
            if let Some(hotspot) = self
                .processes
                .get_mut(&pid)
                .and_then(|t| t.hotspot.as_mut())
            {
                hotspot.name_methods(lookup_addresses(&frames));
            }
        }
    }

    /// A user stack the start snapshot walked in `pid`: a JVM's are named at the first tick.
    pub fn seeded_stack(&mut self, pid: u32, frames: &[u64]) {
        if self
            .processes
            .get(&pid)
            .is_some_and(|t| t.hotspot.is_some())
        {
            self.seeded_java.push((pid, frames.to_vec()));
        }
    }

    /// Forks, execs and exits the kernel side recorded; the processes whose maps must be
    /// read again go in `reload`.
    fn follow_events(&mut self, probes: &mut Probes, tick: &mut Tick, reload: &mut BTreeSet<u32>) {
        for (pid, event) in probes.proc_events().unwrap_or_default() {
            // The entry of a process already freed was removed then: this one is a new
            // process under a reused pid.
            let (target, new) = born(&mut self.processes, pid, |old| old.freed_ns.is_some());
            if new {
                reload.insert(pid);
            }
            if reload.contains(&pid) && event.exited_ns == 0 {
                // The fork handler set its bit with a plain read-modify-write: two forks on
                // two CPUs into the same word can lose one. Setting it again repairs that.
                if let Err(e) = self.uploads.add_target(probes, pid) {
                    log::warn!("process {pid}, forked from a target, cannot be added: {e}");
                }
            }
            if event.parent != 0 {
                target.parent = Some(event.parent);
                target.forked_ns = target.forked_ns.or(Some(event.forked_ns));
            }
            if event.execs > target.execs {
                target.execs = event.execs;
                // A new program: its own layout, its own name.
                target.maps.exec();
                target.hotspot = None;
                self.uploads.forget_jit(pid);
                target.name = comm(pid).unwrap_or_else(|| target.name.clone());
                target.rename_checks = RENAME_CHECKS;
                reload.insert(pid);
            }
            if event.exited_ns != 0 && target.exited_ns.is_none() {
                target.exited_ns = Some(event.exited_ns);
                // Said on the terminal for processes there from the start; forked ones come
                // and go (a pool, churn) and are counted in the report.
                if target.forked_ns.is_none() {
                    tick.ended.push((pid, target.name.clone()));
                }
            }
        }
    }

    /// Processes that joined the cgroup since the last tick.
    fn join_cgroup(&mut self, probes: &mut Probes, reload: &mut BTreeSet<u32>) {
        if let Some(dir) = &self.cgroup {
            for pid in cgroup_members(dir) {
                // A member under the pid of a process reaped before is a new one.
                if born(&mut self.processes, pid, |old| old.gone).1 {
                    reload.insert(pid);
                    if let Err(e) = self.uploads.add_target(probes, pid) {
                        log::warn!("process {pid} joined the cgroup but cannot be added: {e}");
                    }
                }
            }
        }
    }

    /// Maps read again (`reload`, and a few processes per tick for libraries loaded), JVM
    /// code caches followed; rows and mapping tables uploaded where they changed.
    fn reload(&mut self, probes: &mut Probes, mut reload: BTreeSet<u32>) {
        // Besides those, a few processes per tick for libraries loaded (dlopen).
        let live: Vec<u32> = self
            .processes
            .values()
            .filter(|t| !t.gone)
            .map(|t| t.pid)
            .collect();
        let refreshes = if self.events.is_some() {
            REFRESHES_PER_TICK.min(self.refreshes_owed)
        } else {
            REFRESHES_PER_TICK
        };
        self.refreshes_owed = self.refreshes_owed.saturating_sub(refreshes);
        for i in 0..refreshes.min(live.len()) {
            reload.insert(live[(self.next_refresh + i) % live.len()]);
        }
        self.next_refresh = self.next_refresh.wrapping_add(refreshes);
        // A process gone since its event: its maps cannot be read, nothing to upload.
        reload.retain(|pid| {
            self.processes
                .get_mut(pid)
                .is_some_and(|t| t.freed_ns.is_none() && t.maps.refresh().is_ok())
        });
        // JVMs' code caches: new code unwinds once its rows are in, named from then on.
        let gaps_met = self.jit_gaps_met(probes);
        let recorded = std::mem::take(&mut self.recorded);
        for target in self.processes.values_mut().filter(|t| t.freed_ns.is_none()) {
            let mappings_new = reload.contains(&target.pid) || recorded.contains(&target.pid);
            if target.follow_jit(&mut self.uploads, mappings_new, gaps_met) {
                reload.insert(target.pid);
            }
        }
        self.publish(probes, &reload);
    }

    /// Whether the kernel met frames in a JVM's code compiled since its cache was last read,
    /// since the last tick (the count is over all JVMs: each reads sooner).
    fn jit_gaps_met(&mut self, probes: &Probes) -> bool {
        if self.processes.values().all(|t| t.hotspot.is_none()) {
            return false;
        }
        let Ok(frames) = probes.counter(Counter::JitGapFrames) else {
            return false;
        };
        let met = frames > self.jit_gap_frames;
        self.jit_gap_frames = frames;
        met
    }

    /// Names read again for processes seen (or exec'd) in the last ticks.
    fn follow_names(&mut self) {
        for target in self.processes.values_mut() {
            if !target.gone && target.rename_checks > 0 {
                target.rename_checks -= 1;
                match comm(target.pid) {
                    Some(name) => target.name = name,
                    // Reaped before its name was read again: the name read at its fork may
                    // be its parent's (a request handler forked at 500 a second names itself
                    // just after; 8 % of them kept `workload`). Post-processing names it as
                    // its main thread was named at its exit (account.rs).
                    None => target.name.clear(),
                }
            }
        }
    }

    /// Processes that ended leave the kernel's tables, so churn does not fill them: their
    /// process and mapping-table entries at the first tick that finds them finished, their
    /// bit in the target set a tick after they were reaped.
    ///
    /// Not at the exit the kernel noted: `sched_process_exit` fires before the exiting thread
    /// releases its memory and files (kernel/exit.c, `do_exit`), which can take milliseconds
    /// and sleep, and every thread still switches out once after it. That last switch-out
    /// closes the thread's time and frees its thread entry: it needs the bit, and a table
    /// until the memory is gone. Nothing writes the entries of a finished process again (its
    /// exec and exit are behind it), so a new entry under its pid is a new process (`born`).
    fn release_finished(&mut self, probes: &mut Probes) {
        let now = crate::kernel::probes::monotonic_ns();
        for target in self.processes.values_mut() {
            // Reaped at an earlier tick: its threads' last switch-outs, microseconds after
            // the reaping at most, are behind them.
            if target.gone && !target.untargeted {
                target.untargeted = true;
                self.uploads.untarget(probes, target.pid);
            }
            if !target.gone && !alive(target.pid) {
                target.gone = true;
            }
            let finished = target.gone || (target.exited_ns.is_some() && finished(target.pid));
            if target.freed_ns.is_none() && finished {
                target.freed_ns = Some(now);
                self.uploads.forget(probes, target.pid);
            }
        }
    }

    /// Names of JVMs' JIT code, of the Java methods in their interpreted frames and of the
    /// methods their compiled frames inlined, by process, for the symbolizer (read while the
    /// processes still run).
    pub fn jit_names(&mut self, profile: &Profile) -> HashMap<u32, PerfMap> {
        let mut methods: HashMap<u32, BTreeSet<u64>> = HashMap::new();
        let stacks_of = profile
            .entries
            .iter()
            .map(|e| (e.pid, e.user_stack))
            .chain(
                profile
                    .wakers
                    .iter()
                    .map(|w| (w.waker_pid, w.waker_user_stack)),
            )
            .chain(profile.wakers.iter().map(|w| {
                let wakee = profile.threads.get(&w.tid).map_or(0, |t| t.pid);
                (wakee, w.user_stack)
            }));
        for (pid, stack) in stacks_of {
            if self.processes.get(&pid).is_none_or(|t| t.hotspot.is_none()) {
                continue;
            }
            // Interpreted frames' methods, and compiled frames' addresses for what they
            // inlined, as the symbolizer looks them up.
            if let Some(frames) = profile.stacks.get(&stack) {
                methods
                    .entry(pid)
                    .or_default()
                    .extend(lookup_addresses(frames));
            }
        }
        self.processes
            .iter_mut()
            .filter_map(|(&pid, t)| {
                let hotspot = t.hotspot.as_mut()?;
                let names = hotspot.names(methods.remove(&pid).unwrap_or_default());
                log::info!(
                    "JVM {pid}: code cache read {} times ({:.3} s; {} sooner for frames in new code), {} code ranges reused{}",
                    hotspot.reads,
                    hotspot.read_secs,
                    hotspot.chased,
                    hotspot.reused,
                    hotspot
                        .error
                        .as_ref()
                        .map(|e| format!(", last read failed: {e}"))
                        .unwrap_or_default()
                );
                Some((pid, names))
            })
            .collect()
    }

    /// What the report must say about JVMs' JIT names (render words it).
    pub fn jit_notes(&self) -> Vec<CaptureNote> {
        let mut notes = Vec::new();
        for (pid, t) in &self.processes {
            let Some(h) = &t.hotspot else { continue };
            if h.reused > 0 {
                notes.push(CaptureNote::JitCodeReused {
                    process: t.name.clone(),
                    pid: *pid,
                    addresses: h.reused as u64,
                });
            }
            if let Some(e) = &h.error {
                notes.push(CaptureNote::CodeCacheUnreadable {
                    process: t.name.clone(),
                    pid: *pid,
                    error: e.clone(),
                });
            }
        }
        notes
    }

    /// After the window: the last look at each live process's mappings, for symbolization.
    pub fn finish(&mut self) {
        for target in self.processes.values_mut().filter(|t| !t.gone) {
            let _ = target.maps.refresh();
            // The name it has now (a process may rename itself at any time).
            if let Some(name) = comm(target.pid) {
                target.name = name;
            }
            if let Some(h) = target.hotspot.as_mut() {
                h.last_look();
            }
        }
    }
}

/// What post-processing (profiler-core) reads of the target set after the window.
impl post::Targets for TargetSet {
    fn java_processes(&self) -> Vec<JavaProcess<'_>> {
        self.processes
            .iter()
            .filter_map(|(&pid, t)| {
                Some(JavaProcess {
                    pid,
                    name: &t.name,
                    code_cache: t.hotspot.as_ref()?.code_cache(),
                    maps: &t.maps,
                })
            })
            .collect()
    }

    fn jit_names(&mut self, profile: &Profile) -> HashMap<u32, PerfMap> {
        TargetSet::jit_names(self, profile)
    }

    fn spaces(&self, jit: HashMap<u32, PerfMap>) -> Spaces<'_> {
        Spaces {
            jit,
            layouts: &self.uploads.layouts,
            processes: self
                .processes
                .iter()
                .map(|(&pid, t)| (pid, &t.maps))
                .collect(),
        }
    }
}

/// Ticks after a process is first seen (or execs) in which its name is read again.
const RENAME_CHECKS: u8 = 2;

/// What a tick found.
#[derive(Debug, Default)]
pub struct Tick {
    /// Processes whose last thread exited: (pid, name).
    pub ended: Vec<(u32, String)>,
    /// No process of the set is left.
    pub all_gone: bool,
}

fn is_libjvm(mapping: &profiler_core::procmap::Mapping) -> bool {
    matches!(&mapping.kind, MappingKind::File { path, .. }
        if path.file_name().is_some_and(|n| n == "libjvm.so"))
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The target `pid` names now, and whether it is new to the set: a process the set knew
/// under that pid is replaced when `reused` says the pid now names another one (a server
/// forking 500 times a second goes through the default pid_max of 32 768 in a minute; the
/// old process's stacks keep their layouts, `Uploads::layouts`).
fn born(
    processes: &mut BTreeMap<u32, Target>,
    pid: u32,
    reused: impl FnOnce(&Target) -> bool,
) -> (&mut Target, bool) {
    match processes.entry(pid) {
        std::collections::btree_map::Entry::Vacant(v) => (v.insert(Target::new(pid)), true),
        std::collections::btree_map::Entry::Occupied(o) => {
            let target = o.into_mut();
            let new = reused(target);
            if new {
                log::debug!("pid {pid} names a new process");
                *target = Target::new(pid);
            }
            (target, new)
        }
    }
}

/// Whether a process whose last thread the kernel saw exit is finished: reaped, or a zombie
/// whose other threads are released (`/proc/PID/stat`: state Z or X, one thread). Its
/// threads have then left `do_exit` but for the last switch-out, and their memory is gone.
fn finished(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |stat| parse_finished(&stat).unwrap_or(false))
}

/// From a `/proc/PID/stat` line: state (field 3) Z or X and num_threads (field 20) 1.
fn parse_finished(stat: &str) -> Option<bool> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let dead = matches!(*fields.first()?, "Z" | "X");
    let threads: u32 = fields.get(17)?.parse().ok()?;
    Some(dead && threads <= 1)
}

fn unreadable(pid: u32, error: io::Error) -> PreflightError {
    if alive(pid) {
        PreflightError::Unreadable { pid, error }
    } else {
        PreflightError::NoSuchProcess(pid)
    }
}

fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// A cgroup v2 directory: a directory with `cgroup.procs` on a cgroup2 file system.
fn check_cgroup(dir: &Path) -> Result<(), PreflightError> {
    let not = |why: &str| PreflightError::NotCgroup(dir.to_path_buf(), why.to_string());
    if !dir.is_dir() {
        return Err(not("no such directory"));
    }
    if !dir.join("cgroup.procs").is_file() {
        return Err(not("it has no cgroup.procs"));
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| not("the path has a NUL byte"))?;
    // SAFETY: a valid C string and a statfs buffer for the call to fill.
    let magic = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 {
            return Err(not("statfs failed"));
        }
        st.f_type as i64
    };
    if magic != CGROUP2_SUPER_MAGIC {
        return Err(not("it is on a cgroup v1 hierarchy; give the cgroup2 one"));
    }
    Ok(())
}

/// Every process in a cgroup and its descendant cgroups.
fn cgroup_members(dir: &Path) -> BTreeSet<u32> {
    let mut pids = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        if let Ok(text) = std::fs::read_to_string(d.join("cgroup.procs")) {
            pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                // Sub-cgroups are the directories in it.
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    todo.push(e.path());
                }
            }
        }
    }
    pids
}

/// Every user process's children, from `/proc/<pid>/stat` (kernel threads left out).
/// Adds every live descendant of `pids` (from /proc).
fn add_descendants(pids: &mut BTreeSet<u32>) {
    let children = children_by_parent();
    let mut todo: Vec<u32> = pids.iter().copied().collect();
    while let Some(pid) = todo.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            if pids.insert(child) {
                todo.push(child);
            }
        }
    }
}

fn children_by_parent() -> HashMap<u32, Vec<u32>> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return children;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        if let Some((ppid, flags)) = parse_stat(&stat)
            && flags & PF_KTHREAD == 0
        {
            children.entry(ppid).or_default().push(pid);
        }
    }
    children
}

/// `PF_KTHREAD` (include/linux/sched.h).
const PF_KTHREAD: u64 = 0x0020_0000;

/// Parent pid and flags from a `/proc/<pid>/stat` line. The name (field 2) may hold spaces
/// and parentheses, so fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<(u32, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state (3), ppid (4), …, flags (9).
    let ppid = fields.get(1)?.parse().ok()?;
    let flags = fields.get(6)?.parse().ok()?;
    Some((ppid, flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_finished_once_a_zombie_with_its_threads_released() {
        let stat = |state: &str, threads: u32| {
            format!(
                "42 (a (b) c) {state} 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 {threads} 0 9 0 0"
            )
        };
        assert_eq!(parse_finished(&stat("Z", 1)), Some(true));
        assert_eq!(parse_finished(&stat("X", 1)), Some(true));
        // The leader exited first; another thread still runs `do_exit`.
        assert_eq!(parse_finished(&stat("Z", 2)), Some(false));
        assert_eq!(parse_finished(&stat("R", 1)), Some(false));
        assert_eq!(parse_finished(&stat("D", 1)), Some(false));
        assert_eq!(parse_finished("42 (x"), None);
        // Our own process runs.
        assert!(!finished(std::process::id()));
    }

    #[test]
    fn stat_lines_give_the_parent_even_with_odd_names() {
        let stat = "1234 (my (odd) name) S 77 1234 1234 0 -1 4194560 10 0 0 0";
        assert_eq!(parse_stat(stat), Some((77, 4_194_560)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn our_own_process_is_found_below_its_parent() {
        let children = children_by_parent();
        let me = std::process::id();
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        assert!(children.get(&parent).is_some_and(|c| c.contains(&me)));
    }

    #[test]
    fn a_plain_directory_is_not_a_cgroup() {
        let dir = tempfile::tempdir().unwrap();
        let err = check_cgroup(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is not a cgroup v2 directory"), "{err}");
        let err = check_cgroup(Path::new("/nonexistent"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no such directory"), "{err}");
    }

    #[test]
    fn a_name_taken_before_the_child_renamed_itself_is_read_again() {
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .expect("start sleep");
        let pid = child.id();
        // Until it has exec'd, the child bears the name of the thread that forked it.
        for _ in 0..500 {
            if comm(pid).as_deref() == Some("sleep") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(comm(pid).as_deref(), Some("sleep"));
        let mut set = TargetSet::empty();
        set.add_launched(pid);
        let name = |set: &TargetSet| set.processes[&pid].name.clone();
        // As if read between the fork and the child's prctl(PR_SET_NAME).
        let stale =
            |set: &mut TargetSet| set.processes.get_mut(&pid).unwrap().name = "parent".into();
        for _ in 0..RENAME_CHECKS {
            stale(&mut set);
            set.follow_names();
            assert_eq!(name(&set), "sleep");
        }
        // Then no more reads per tick (a cgroup of a thousand processes) ...
        stale(&mut set);
        set.follow_names();
        assert_eq!(name(&set), "parent");
        // ... but the name it has at the window's end.
        set.finish();
        assert_eq!(name(&set), "sleep");
        let _ = child.kill();
        let _ = child.wait();
    }
}
