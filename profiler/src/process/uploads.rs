//! What the kernel is told about the target set, with one owner: each process's bit in the
//! target set, its mapping table, and the unwind row array the tables point into. The target
//! set decides what changed (new processes, execs, mappings, JIT code); this module puts it
//! in the kernel in the order its readers need — rows before the tables that point at them —
//! and keeps every table layout by generation, so the symbolizer names a stack with the files
//! it was unwound under.

use std::collections::HashMap;

use profiler_common::unwind::ProcMappings;
use profiler_core::{procmap::ProcessMaps, unwind::tables::UnwindTables};

use crate::kernel::probes::{ProbeError, Probes};

/// The unwind tables (None with `--unwind fp`) and the layouts handed out.
#[derive(Debug, Default)]
pub struct Uploads {
    tables: Option<UnwindTables>,
    /// Every mapping-table layout handed to the kernel, by generation.
    pub layouts: HashMap<u32, ProcessMaps>,
    /// Tables not uploaded because their process had exec'd since their maps were read.
    pub held_back: u64,
}

impl Uploads {
    pub fn new(tables: Option<UnwindTables>) -> Self {
        Self {
            tables,
            layouts: HashMap::new(),
            held_back: 0,
        }
    }

    pub fn tables(&self) -> Option<&UnwindTables> {
        self.tables.as_ref()
    }

    /// Sizes the row array to what the kernel was loaded with.
    pub fn set_capacity(&mut self, chunks: Option<u32>) {
        if let (Some(tables), Some(chunks)) = (self.tables.as_mut(), chunks) {
            tables.set_capacity(chunks as usize);
        }
    }

    /// Rows for the files `maps` shows; when the kernel's array is full, the rows of files
    /// none of `live` maps make room first. Whether rows changed (an upload is due).
    pub fn rows_for<'a>(
        &mut self,
        maps: &ProcessMaps,
        live: impl Iterator<Item = &'a ProcessMaps>,
    ) -> bool {
        let Some(tables) = self.tables.as_mut() else {
            return false;
        };
        let mut changed = tables.update(maps);
        if tables.wants_room() && tables.evict_unused(live) {
            changed |= tables.update(maps);
        }
        changed
    }

    /// A JVM's code-cache rows replaced; whether its table must be uploaded again.
    pub fn set_jit(
        &mut self,
        pid: u32,
        base: u64,
        end: u64,
        rows: &[profiler_common::unwind::UnwindRow],
    ) -> bool {
        self.tables
            .as_mut()
            .is_some_and(|t| t.set_jit(pid, base, end, rows))
    }

    pub fn forget_jit(&mut self, pid: u32) {
        if let Some(tables) = self.tables.as_mut() {
            tables.forget_jit(pid);
        }
    }

    /// The mapping table of `maps` as the kernel would get it (the start snapshot walks the
    /// stacks of threads blocked before the capture with it).
    pub fn table_of(&mut self, maps: &ProcessMaps) -> Option<Box<ProcMappings>> {
        self.tables.as_mut().map(|t| t.proc_mappings(maps))
    }

    /// Puts `pid` in the target set.
    pub fn add_target(&self, probes: &mut Probes, pid: u32) -> Result<(), ProbeError> {
        probes.set_target(pid, true)
    }

    /// Rows not in the kernel yet, then the mapping table of each of `processes` (pid, maps,
    /// execs they were read after). Every table is tried; the first error is returned.
    ///
    /// A process the kernel saw exec more often than its maps know of is skipped: the exec
    /// took its old table away, and a table of the old program put back now would unwind the
    /// new one with rows of code no longer there, until the next tick learns of the exec (a
    /// child a build forks and execs at once, read between the two).
    pub fn publish<'a>(
        &mut self,
        probes: &mut Probes,
        processes: impl Iterator<Item = (u32, &'a ProcessMaps, u32)>,
    ) -> Result<(), ProbeError> {
        let Some(tables) = self.tables.as_mut() else {
            return Ok(());
        };
        let mut first_error = None;
        let chunks = tables.pending_chunks();
        if !chunks.is_empty() {
            match probes.upload_rows(&chunks) {
                Ok(()) => tables.mark_uploaded(),
                Err(e) => first_error = Some(e),
            }
        }
        for (pid, maps, execs) in processes {
            if probes
                .kernel_execs(pid)
                .is_some_and(|kernel| kernel > execs)
            {
                log::debug!("process {pid} exec'd since its maps were read: table held back");
                self.held_back += 1;
                continue;
            }
            let table = tables.proc_mappings(maps);
            self.layouts
                .entry(table.generation)
                .or_insert_with(|| maps.clone());
            if let Err(e) = probes.upload_mappings(pid, &table) {
                first_error.get_or_insert(e);
                continue;
            }
            // An exec between the check above and the upload removed the old program's
            // table before this one arrived, and this one would unwind the new program with
            // the old layout (a child a build forks and execs within microseconds: make's and
            // gcc's children showed `clone3 ← [unmapped]`). The kernel counts an exec before it
            // removes the table, so a count unchanged now means a later exec removes this one.
            if probes
                .kernel_execs(pid)
                .is_some_and(|kernel| kernel > execs)
            {
                log::debug!("process {pid} exec'd while its table was uploaded: table removed");
                probes.remove_mappings(pid);
                self.held_back += 1;
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A process that finished leaves the kernel's process and mapping tables (churn must
    /// not fill them).
    pub fn forget(&mut self, probes: &mut Probes, pid: u32) {
        probes.forget_process(pid);
        self.forget_jit(pid);
    }

    /// Takes a reaped process out of the target set.
    pub fn untarget(&self, probes: &mut Probes, pid: u32) {
        if let Err(e) = probes.set_target(pid, false) {
            log::debug!("process {pid} stays in the target set: {e}");
        }
    }
}
