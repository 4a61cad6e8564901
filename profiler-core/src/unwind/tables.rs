//! The target's executable mappings → the in-kernel unwinder's tables: one global row array
//! (each file's rows once, however often it is mapped) and the per-process mapping table that
//! says which rows cover which addresses and with what bias.
//!
//! The kernel's row array has a fixed size (set at load). Files seen later in the capture
//! (dlopen, a new program's executable) go at the end while there is room, else into the
//! room of files no process of the set maps any more (evicted: a build's compilers come and
//! go); only the chunks that changed are uploaded again. A file that still does not fit is
//! unwound by frame pointers and counted (`not_loaded`), with the remedy in the report.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::Instant,
};

use object::{
    LittleEndian, elf,
    read::elf::{ElfFile64, ProgramHeader as _},
};
use profiler_common::unwind::{
    ExecMapping, MAX_MAPPINGS, ProcMappings, ROW_PAGE_SHIFT, ROWS_PER_CHUNK, RowChunk, UnwindRow,
};

use super::rows::{UnwindError, build_rows};
use crate::procmap::{Mapping, MappingKind, ProcessMaps};

/// Which file a mapping shows: (device, inode) for files, or the vDSO.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum FileKey {
    File(String, u64),
    Vdso,
}

/// A file's rows as built, before they are placed in the global array.
#[derive(Debug)]
struct BuiltFile {
    rows: Vec<UnwindRow>,
    /// The rows' page index ([`page_index`]), placed right after them.
    index: Vec<UnwindRow>,
    base: u64,
    segments: Vec<(u64, u64, u64)>,
}

/// A file's rows in the global array, and what it takes to place them at runtime.
#[derive(Clone, Debug)]
struct FileRows {
    first_row: u32,
    row_count: u32,
    /// Pages of the page index that follows the rows (`index_pages + 1` rows; 0: none).
    index_pages: u32,
    /// Table base: the lowest address any row covers (rows are relative to it).
    base: u64,
    /// PT_LOAD segments (file offset, vaddr, file size) to turn a mapping into a load bias.
    segments: Vec<(u64, u64, u64)>,
}

#[derive(Debug, Default)]
pub struct UnwindTables {
    files: HashMap<FileKey, FileRows>,
    rows: Vec<UnwindRow>,
    /// Rows the kernel's array holds (None until it is sized: before the programs load,
    /// everything is appended and the array is sized to fit).
    capacity: Option<usize>,
    /// Ranges of rows of evicted files, free for new ones: (first row, rows), by first row.
    free: Vec<(usize, usize)>,
    /// Rows built for files, kept when a file is evicted (a compiler run again by the next
    /// build step is placed again without being parsed again).
    built: HashMap<FileKey, Arc<BuiltFile>>,
    /// Files whose rows did not fit the kernel's array, by name, with their rows: unwound by
    /// frame pointers.
    pub not_loaded: BTreeMap<String, usize>,
    /// A file did not fit since the last eviction.
    room_wanted: bool,
    /// Rows already in the kernel; chunks from `uploaded / ROWS_PER_CHUNK` on are stale.
    uploaded: usize,
    /// Files that could not be read or parsed (frame pointers for them), with the reason.
    pub failures: Vec<(String, String)>,
    /// Time spent building rows.
    pub build_secs: f64,
    /// Generation of the last new mapping table handed out.
    generation: u32,
    /// Generations by table content: processes with the same layout (workers forked from one
    /// master) share one, so the kernel's per-CPU row cache and stack memos stay valid as
    /// their threads take turns on a CPU.
    layouts: HashMap<Vec<Placed>, u32>,
    /// JVMs' code caches, by pid.
    jit: HashMap<u32, JitRegion>,
    /// Chunks below `uploaded` rewritten since the last upload (JIT regions).
    dirty: BTreeSet<usize>,
    /// Bumped by every JIT rewrite: a table with new JIT rows is a new layout even when its
    /// entries look like an older one's (the two regions alternate).
    jit_version: u64,
}

/// A JVM's code-cache rows. The cache changes as the JIT compiles and frees code, so its rows
/// are rewritten rather than appended: into two regions of the global array in turn, the
/// kernel reading one (through the mapping table) while the other is rewritten, and the
/// table switching to it only once it is uploaded.
#[derive(Debug)]
struct JitRegion {
    first_rows: [u32; 2],
    capacity: u32,
    /// Region the current rows are in.
    active: usize,
    rows: u32,
    version: u64,
    /// Runtime address of row pc 0, and the end of the code covered.
    base: u64,
    end: u64,
}

/// Rows a JIT region holds at least (a JVM's cache grows after start-up: room for it).
const JIT_MIN_ROWS: usize = 16 * 1024;

/// One mapping of a table as the layout key sees it: start, end, bias, first row, rows.
type Placed = (u64, u64, u64, u32, u32);

impl UnwindTables {
    /// Builds rows for every file of `maps` not seen yet. Returns whether anything changed.
    pub fn update(&mut self, maps: &ProcessMaps) -> bool {
        let started = Instant::now();
        let mut changed = false;
        for mapping in maps.mappings() {
            let Some(key) = file_key(mapping) else {
                continue;
            };
            if self.files.contains_key(&key) {
                continue;
            }
            let built = match self.built.get(&key) {
                Some(built) => Some(Ok(Arc::clone(built))),
                None => match &mapping.kind {
                    MappingKind::Vdso => maps.vdso_image().map(build_file),
                    _ => maps
                        .readable_path(mapping)
                        .and_then(|path| map_file(&path))
                        .map(|bytes| build_file(&bytes)),
                },
            };
            if let Some(Ok(built)) = &built {
                log::debug!(
                    "unwind rows of {}: {} rows ready {:.1} ms after this update began",
                    mapping.display_name(),
                    built.rows.len(),
                    started.elapsed().as_secs_f64() * 1e3
                );
            }
            let rows = match built {
                Some(Ok(built)) => {
                    self.built.insert(key.clone(), Arc::clone(&built));
                    match self.place(&built, &mapping.display_name()) {
                        Some(rows) => rows,
                        // Not kept: tried again once room is made (`evict_unused`).
                        None => continue,
                    }
                }
                Some(Err(e)) => {
                    self.failures.push((mapping.display_name(), e.to_string()));
                    empty_file()
                }
                None => {
                    self.failures
                        .push((mapping.display_name(), "unreadable".into()));
                    empty_file()
                }
            };
            self.files.insert(key, rows);
            changed = true;
        }
        self.build_secs += started.elapsed().as_secs_f64();
        changed
    }

    /// Puts a file's rows into the global array: into the room of evicted files, else at
    /// the end. A file that fits nowhere is counted in `not_loaded` (until a later try
    /// places it) and unwinds by frame pointers meanwhile.
    fn place(&mut self, built: &BuiltFile, name: &str) -> Option<FileRows> {
        let placed: Vec<UnwindRow>;
        let all = if built.index.is_empty() {
            &built.rows
        } else {
            placed = [built.rows.as_slice(), built.index.as_slice()].concat();
            &placed
        };
        let count = all.len();
        let first = match self.free.iter().position(|&(_, len)| len >= count) {
            Some(i) if count > 0 => {
                let (first, len) = self.free[i];
                if len == count {
                    self.free.remove(i);
                } else {
                    self.free[i] = (first + count, len - count);
                }
                self.rows[first..first + count].copy_from_slice(all);
                self.mark_dirty(first, count);
                Some(first)
            }
            _ if self
                .capacity
                .is_none_or(|cap| self.rows.len() + count <= cap)
                && u32::try_from(self.rows.len() + count).is_ok() =>
            {
                let first = self.rows.len();
                self.rows.extend_from_slice(all);
                Some(first)
            }
            _ => None,
        };
        match first {
            Some(first) => {
                self.not_loaded.remove(name);
                Some(FileRows {
                    first_row: first as u32,
                    row_count: built.rows.len() as u32,
                    index_pages: built.index.len().saturating_sub(1) as u32,
                    base: built.base,
                    segments: built.segments.clone(),
                })
            }
            None => {
                self.not_loaded.insert(name.to_string(), count);
                self.room_wanted = true;
                None
            }
        }
    }

    /// A file did not fit since the last eviction: the caller should make room
    /// ([`Self::evict_unused`]) and update again.
    pub fn wants_room(&self) -> bool {
        self.room_wanted
    }

    /// Chunks below `uploaded` that rows were written into since.
    fn mark_dirty(&mut self, first: usize, count: usize) {
        if count > 0 && first < self.uploaded {
            let last = (first + count - 1).min(self.uploaded - 1);
            self.dirty
                .extend(first / ROWS_PER_CHUNK..=last / ROWS_PER_CHUNK);
        }
    }

    /// The kernel's array holds `chunks` chunks: files placed from now on must fit in them.
    pub fn set_capacity(&mut self, chunks: usize) {
        self.capacity = Some(chunks * ROWS_PER_CHUNK);
    }

    /// Frees the rows of files no process in `live` maps (nor any JVM's code cache, which
    /// is not a file), so new files can take their place. Their built rows are kept. Returns
    /// whether any room was freed.
    pub fn evict_unused<'a>(&mut self, live: impl Iterator<Item = &'a ProcessMaps>) -> bool {
        self.room_wanted = false;
        let mut freed = false;
        let mut in_use = std::collections::HashSet::new();
        for maps in live {
            for mapping in maps.mappings() {
                if let Some(key) = file_key(mapping) {
                    in_use.insert(key);
                }
            }
        }
        let unused: Vec<FileKey> = self
            .files
            .keys()
            .filter(|k| !in_use.contains(*k))
            .cloned()
            .collect();
        for key in unused {
            if let Some(file) = self.files.remove(&key)
                && file.row_count > 0
            {
                freed = true;
                self.free
                    .push((file.first_row as usize, file.placed_rows()));
            }
        }
        if !freed {
            return false;
        }
        // Adjacent free ranges become one, so a large file fits where several small ones were.
        self.free.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (first, len) in self.free.drain(..) {
            match merged.last_mut() {
                Some((f, l)) if *f + *l == first => *l += len,
                _ => merged.push((first, len)),
            }
        }
        self.free = merged;
        true
    }

    pub fn row_count(&self) -> usize {
        self.rows.len()
    }

    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    /// Chunks the kernel array needs for the rows so far.
    pub fn chunks_needed(&self) -> usize {
        self.rows.len().div_ceil(ROWS_PER_CHUNK)
    }

    /// Chunks not yet uploaded (the last partial one included) or rewritten since, with
    /// their index.
    pub fn pending_chunks(&self) -> Vec<(u32, Box<RowChunk>)> {
        let appended = if self.uploaded == self.rows.len() {
            self.chunks_needed()
        } else {
            self.uploaded / ROWS_PER_CHUNK
        };
        let mut chunks: BTreeSet<usize> = (appended..self.chunks_needed()).collect();
        chunks.extend(self.dirty.iter().copied());
        chunks
            .into_iter()
            .map(|i| {
                let mut chunk = Box::new(RowChunk {
                    rows: [UnwindRow::default(); ROWS_PER_CHUNK],
                });
                let start = i * ROWS_PER_CHUNK;
                let end = (start + ROWS_PER_CHUNK).min(self.rows.len());
                chunk.rows[..end - start].copy_from_slice(&self.rows[start..end]);
                (i as u32, chunk)
            })
            .collect()
    }

    pub fn mark_uploaded(&mut self) {
        self.uploaded = self.rows.len();
        self.dirty.clear();
    }

    /// Replaces process `pid`'s code-cache rows (`unwind::jit`: rows relative to `base`,
    /// covering up to `end`). Returns whether the kernel's rows need an upload. The process's
    /// mapping table must be uploaded after the rows for the new ones to be used.
    pub fn set_jit(&mut self, pid: u32, base: u64, end: u64, rows: &[UnwindRow]) -> bool {
        if rows.is_empty() {
            return self.jit.remove(&pid).is_some();
        }
        let fits = self
            .jit
            .get(&pid)
            .is_some_and(|r| r.capacity as usize >= rows.len());
        if !fits {
            // A new pair of regions, twice the size needed: the old pair stays unused.
            let capacity = (rows.len() * 2).max(JIT_MIN_ROWS);
            let first = self.rows.len();
            if u32::try_from(first + 2 * capacity).is_err()
                || self.capacity.is_some_and(|cap| first + 2 * capacity > cap)
            {
                *self
                    .not_loaded
                    .entry(format!("JIT code of process {pid}"))
                    .or_default() = rows.len();
                return false;
            }
            self.rows.resize(first + 2 * capacity, UnwindRow::default());
            self.jit.insert(
                pid,
                JitRegion {
                    first_rows: [first as u32, (first + capacity) as u32],
                    capacity: capacity as u32,
                    // The first rows go into region 0.
                    active: 1,
                    rows: 0,
                    version: 0,
                    base,
                    end,
                },
            );
        }
        let Some(region) = self.jit.get(&pid) else {
            return false;
        };
        let next = 1 - region.active;
        let first = region.first_rows[next] as usize;
        self.rows[first..first + rows.len()].copy_from_slice(rows);
        self.mark_dirty(first, rows.len());
        self.jit_version += 1;
        let Some(region) = self.jit.get_mut(&pid) else {
            return false;
        };
        region.version = self.jit_version;
        region.active = next;
        region.rows = rows.len() as u32;
        region.base = base;
        region.end = end;
        true
    }

    /// Forgets a process's code-cache rows (the process is gone).
    pub fn forget_jit(&mut self, pid: u32) {
        self.jit.remove(&pid);
    }

    /// The mapping table for `maps`: every executable mapping, sorted, with its file's rows.
    /// A table with new content gets a new generation; the same content, the same one.
    pub fn proc_mappings(&mut self, maps: &ProcessMaps) -> Box<ProcMappings> {
        let mut table = Box::new(ProcMappings {
            count: 0,
            generation: 0,
            entries: [ExecMapping::default(); MAX_MAPPINGS],
        });
        let mut n = 0;
        for mapping in maps.mappings().iter().take(MAX_MAPPINGS) {
            let Some(key) = file_key(mapping) else {
                continue;
            };
            let Some(file) = self.files.get(&key) else {
                continue;
            };
            table.entries[n] = exec_mapping(mapping, file);
            n += 1;
        }
        if let Some(jit) = self.jit.get(&maps.pid())
            && n < MAX_MAPPINGS
        {
            // The code cache is anonymous memory, never overlapping a file's mapping.
            table.entries[n] = ExecMapping {
                start: jit.base,
                end: jit.end,
                bias: jit.base,
                first_row: jit.first_rows[jit.active],
                row_count: jit.rows,
                index_pages: 0,
                _pad: 0,
            };
            n += 1;
            table.entries[..n].sort_by_key(|e| e.start);
        }
        table.count = n as u32;
        let mut layout: Vec<Placed> = table.entries[..n]
            .iter()
            .map(|e| (e.start, e.end, e.bias, e.first_row, e.row_count))
            .collect();
        if let Some(jit) = self.jit.get(&maps.pid()) {
            layout.push((u64::MAX, jit.version, 0, 0, 0));
        }
        let next = self.generation.wrapping_add(1);
        // Exec churn gives every process a new (randomised) layout: forget old ones rather
        // than grow; a forgotten layout seen again just gets a fresh generation.
        if self.layouts.len() >= 4096 {
            self.layouts.clear();
        }
        table.generation = *self.layouts.entry(layout).or_insert(next);
        if table.generation == next {
            self.generation = next;
        }
        table
    }
}

impl UnwindTables {
    /// The row covering runtime address `ip` under `mappings`, the lookup the eBPF unwinder
    /// does: the rows of `ip`'s page by the page index, then a binary search among them.
    pub fn find_row(&self, mappings: &ProcMappings, ip: u64) -> Option<UnwindRow> {
        let entries = &mappings.entries[..(mappings.count as usize).min(MAX_MAPPINGS)];
        let at = entries.partition_point(|m| m.start <= ip);
        let m = entries.get(at.checked_sub(1)?)?;
        if ip >= m.end || m.row_count == 0 || ip < m.bias {
            return None;
        }
        let pc = u32::try_from(ip - m.bias).ok()?;
        let first = m.first_row as usize;
        let count = m.row_count as usize;
        let (lo, hi) = if m.index_pages == 0 {
            (0, count)
        } else {
            let page = (pc >> ROW_PAGE_SHIFT) as usize;
            if page < m.index_pages as usize {
                let index = first + count + page;
                let entry = |i: usize| self.rows.get(i).map(|r| r.pc as usize);
                (entry(index)?, entry(index + 1)?)
            } else {
                (count, count)
            }
        };
        let rows = self.rows.get(first..first + count)?;
        let before = lo + rows.get(lo..hi)?.partition_point(|row| row.pc <= pc);
        rows.get(before.checked_sub(1)?).copied()
    }
}

/// The file mapped read-only: a compiler's 33 MB binary has 2.4 MB of `.eh_frame`, and
/// reading it whole (allocating, zeroing, copying) tripled the time its rows took.
fn map_file(path: &std::path::Path) -> Option<memmap2::Mmap> {
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: read-only and private. A file truncated while mapped would fault on access;
    // the files mapped here are ones a live process executes (their writers get ETXTBSY for
    // the main program; libraries are replaced by rename, not rewritten, by package
    // managers), the same bet blazesym's symbolization makes.
    unsafe { memmap2::Mmap::map(&file) }.ok()
}

fn build_file(bytes: &[u8]) -> Result<Arc<BuiltFile>, UnwindError> {
    let table = build_rows(bytes)?;
    Ok(Arc::new(BuiltFile {
        index: page_index(&table.rows),
        rows: table.rows,
        base: table.base,
        segments: load_segments(bytes),
    }))
}

/// The page index of `rows` (sorted by pc) as rows to place after them: entry `k` (its `pc`)
/// is the index of the first row whose pc is at or past `k << ROW_PAGE_SHIFT`, for every page
/// up to the last row's and one more (`rows.len()`). Empty for no rows.
fn page_index(rows: &[UnwindRow]) -> Vec<UnwindRow> {
    let Some(last) = rows.last() else {
        return Vec::new();
    };
    let pages = (last.pc >> ROW_PAGE_SHIFT) as usize + 1;
    let mut index = Vec::with_capacity(pages + 1);
    let mut next = 0;
    for page in 0..=pages {
        let start = (page as u64) << ROW_PAGE_SHIFT;
        while next < rows.len() && u64::from(rows[next].pc) < start {
            next += 1;
        }
        index.push(UnwindRow {
            pc: next as u32,
            ..UnwindRow::default()
        });
    }
    index
}

impl FileRows {
    /// Rows the file takes in the global array: its rows and its page index.
    fn placed_rows(&self) -> usize {
        let index = if self.index_pages == 0 {
            0
        } else {
            self.index_pages as usize + 1
        };
        self.row_count as usize + index
    }
}

/// The file a mapping shows, if any.
fn file_key(mapping: &Mapping) -> Option<FileKey> {
    match &mapping.kind {
        MappingKind::File { dev, inode, .. } => Some(FileKey::File(dev.clone(), *inode)),
        MappingKind::Vdso => Some(FileKey::Vdso),
        MappingKind::Anon { .. } => None,
    }
}

fn empty_file() -> FileRows {
    FileRows {
        first_row: 0,
        row_count: 0,
        index_pages: 0,
        base: 0,
        segments: Vec::new(),
    }
}

/// Where the mapping's rows apply: a runtime address minus `bias` is a row `pc`.
fn exec_mapping(mapping: &Mapping, file: &FileRows) -> ExecMapping {
    let load_bias = file
        .segments
        .iter()
        .find(|(offset, _, size)| {
            mapping.offset >= *offset && mapping.offset < offset + size.max(&1)
        })
        .map(|(offset, vaddr, _)| {
            let vaddr_at_start = vaddr.wrapping_add(mapping.offset - offset);
            mapping.start.wrapping_sub(vaddr_at_start)
        });
    match load_bias {
        Some(load_bias) if file.row_count > 0 => ExecMapping {
            start: mapping.start,
            end: mapping.end,
            bias: load_bias.wrapping_add(file.base),
            first_row: file.first_row,
            row_count: file.row_count,
            index_pages: file.index_pages,
            _pad: 0,
        },
        // No rows, or no segment for this offset: frame pointers for this range.
        _ => ExecMapping {
            start: mapping.start,
            end: mapping.end,
            bias: 0,
            first_row: 0,
            row_count: 0,
            index_pages: 0,
            _pad: 0,
        },
    }
}

/// (file offset, vaddr, file size) of every PT_LOAD segment.
fn load_segments(bytes: &[u8]) -> Vec<(u64, u64, u64)> {
    let Ok(file) = ElfFile64::<LittleEndian>::parse(bytes) else {
        return Vec::new();
    };
    let endian = LittleEndian;
    file.elf_program_headers()
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .map(|ph| (ph.p_offset(endian), ph.p_vaddr(endian), ph.p_filesz(endian)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::jit::{JitCode, JitFrame, jit_rows};

    #[test]
    fn jit_rows_alternate_between_two_regions_and_each_rewrite_is_a_new_layout() {
        let mut tables = UnwindTables::default();
        let maps = ProcessMaps::new(4242);
        let code = |size_words| {
            jit_rows(
                &[JitCode {
                    start: 0x7000_0000,
                    end: 0x7000_0100,
                    frame: JitFrame::Fixed {
                        complete: 0x7000_0010,
                        size_words,
                    },
                }],
                (0, 0),
            )
        };
        let (base, end, rows) = code(4);
        assert!(tables.set_jit(4242, base, end, &rows));
        let first = tables.proc_mappings(&maps);
        assert_eq!(first.count, 1);
        let e = first.entries[0];
        assert_eq!(
            (e.start, e.end, e.bias),
            (0x7000_0000, 0x7000_0100, 0x7000_0000)
        );
        let row = tables.find_row(&first, 0x7000_0020).expect("a row");
        assert_eq!(row.cfa_offset, 32);
        tables.mark_uploaded();
        assert!(tables.pending_chunks().is_empty());

        // The cache changed: the other region is written (and its chunk re-uploaded) while
        // the kernel may still read the first; the new table points at it.
        let (base, end, rows) = code(6);
        assert!(tables.set_jit(4242, base, end, &rows));
        assert_eq!(tables.pending_chunks().len(), 1);
        let second = tables.proc_mappings(&maps);
        assert_ne!(second.entries[0].first_row, e.first_row);
        assert_ne!(second.generation, first.generation);
        assert_eq!(
            tables
                .find_row(&first, 0x7000_0020)
                .expect("old")
                .cfa_offset,
            32
        );
        assert_eq!(
            tables
                .find_row(&second, 0x7000_0020)
                .expect("new")
                .cfa_offset,
            48
        );
        // Back to the first region's rows, yet a new layout: cached lookups of the old one
        // must not be used.
        let (base, end, rows) = code(4);
        tables.set_jit(4242, base, end, &rows);
        let third = tables.proc_mappings(&maps);
        assert_eq!(third.entries[0].first_row, e.first_row);
        assert_ne!(third.generation, first.generation);
        tables.forget_jit(4242);
        assert_eq!(tables.proc_mappings(&maps).count, 0);
    }

    #[test]
    fn a_mapping_gets_the_bias_of_its_segment() {
        let file = FileRows {
            first_row: 10,
            row_count: 5,
            index_pages: 0,
            base: 0x1000,
            // Text segment: file offset 0x1000 at vaddr 0x1000, 0x5000 bytes.
            segments: vec![(0, 0, 0x800), (0x1000, 0x1000, 0x5000)],
        };
        let mapping = Mapping {
            start: 0x5555_0000_1000,
            end: 0x5555_0000_6000,
            offset: 0x1000,
            kind: MappingKind::Anon {
                name: String::new(),
            },
        };
        let m = exec_mapping(&mapping, &file);
        // Load bias 0x5555_0000_0000; rows are relative to base 0x1000.
        assert_eq!(m.bias, 0x5555_0000_1000);
        let ip = 0x5555_0000_1234;
        assert_eq!(ip - m.bias, 0x234);
        assert_eq!((m.first_row, m.row_count), (10, 5));
    }

    #[test]
    fn own_process_tables_cover_our_code() {
        let mut maps = ProcessMaps::new(std::process::id());
        maps.refresh().unwrap();
        let mut tables = UnwindTables::default();
        assert!(tables.update(&maps));
        assert!(
            !tables.update(&maps),
            "a second update with no new files changes nothing"
        );
        assert!(tables.row_count() > 1000, "{} rows", tables.row_count());
        let procs = tables.proc_mappings(&maps);
        assert_eq!(
            tables.proc_mappings(&maps).generation,
            procs.generation,
            "the same layout keeps its generation (forked workers share one)"
        );
        let here = own_code as *const () as u64;
        let m = procs.entries[..procs.count as usize]
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .expect("our own code is mapped");
        assert!(m.row_count > 0);
        let rows = &tables.rows[m.first_row as usize..(m.first_row + m.row_count) as usize];
        let row = super::super::rows::find_row(rows, (here - m.bias) as u32).expect("a row");
        assert_ne!(row.cfa_kind, profiler_common::unwind::cfa_kind::NO_INFO);
        let pending = tables.pending_chunks();
        assert_eq!(pending.len(), tables.chunks_needed());
        tables.mark_uploaded();
        assert!(tables.pending_chunks().is_empty());
    }

    #[inline(never)]
    fn own_code() {}

    #[test]
    fn the_page_index_finds_the_rows_a_search_of_all_finds() {
        let mut maps = ProcessMaps::new(std::process::id());
        maps.refresh().unwrap();
        let mut tables = UnwindTables::default();
        tables.update(&maps);
        let procs = tables.proc_mappings(&maps);
        let mut checked = 0;
        for m in &procs.entries[..procs.count as usize] {
            if m.row_count == 0 {
                continue;
            }
            assert!(m.index_pages > 0, "a file's rows come with their index");
            let first = m.first_row as usize;
            let rows = &tables.rows[first..first + m.row_count as usize];
            let index = &tables.rows[first + rows.len()..][..m.index_pages as usize + 1];
            assert_eq!(index.last().map(|e| e.pc as usize), Some(rows.len()));
            for ip in (m.start..m.end).step_by(61) {
                let Some(pc) = ip.checked_sub(m.bias) else {
                    assert_eq!(tables.find_row(&procs, ip), None);
                    continue;
                };
                let pc = pc as u32;
                let all = super::super::rows::find_row(rows, pc).copied();
                assert_eq!(tables.find_row(&procs, ip), all, "ip {ip:#x}");
                checked += 1;
            }
        }
        assert!(checked > 10_000, "{checked} addresses");
    }

    #[test]
    fn a_page_index_points_at_each_pages_first_row() {
        let rows: Vec<UnwindRow> = [0x10, 0x20, 0x1000, 0x3ff0, 0x4000]
            .into_iter()
            .map(|pc| UnwindRow {
                pc,
                ..UnwindRow::default()
            })
            .collect();
        let index: Vec<u32> = page_index(&rows).iter().map(|e| e.pc).collect();
        // Pages 0-4, then the end: page 2 has no row (its rows start where page 3's do).
        assert_eq!(index, [0, 2, 3, 3, 4, 5]);
        assert!(page_index(&[]).is_empty());
    }

    fn built(n: usize, cfa_offset: i32) -> BuiltFile {
        BuiltFile {
            rows: (0..n)
                .map(|i| UnwindRow {
                    pc: i as u32,
                    cfa_offset,
                    ..UnwindRow::default()
                })
                .collect(),
            index: Vec::new(),
            base: 0,
            segments: Vec::new(),
        }
    }

    fn file(path: &str, inode: u64) -> Mapping {
        Mapping {
            start: inode << 20,
            end: (inode << 20) + 0x1000,
            offset: 0,
            kind: MappingKind::File {
                path: path.into(),
                dev: "fd:01".into(),
                inode,
            },
        }
    }

    #[test]
    fn files_no_process_maps_make_room_for_new_ones_and_the_rest_is_counted() {
        let mut tables = UnwindTables::default();
        tables.set_capacity(1);
        let half = ROWS_PER_CHUNK / 2;
        let a = tables.place(&built(half, 8), "cc1").unwrap();
        tables
            .files
            .insert(file_key(&file("/cc1", 1)).unwrap(), a.clone());
        let b = tables.place(&built(half, 16), "as").unwrap();
        tables
            .files
            .insert(file_key(&file("/as", 2)).unwrap(), b.clone());
        tables.mark_uploaded();
        assert_eq!((a.first_row, b.first_row), (0, half as u32));
        // Full: a third file gets no rows and is counted.
        assert!(tables.place(&built(half, 24), "ld").is_none());
        assert_eq!(tables.not_loaded.get("ld"), Some(&half));
        assert!(tables.wants_room());
        // Only `as` is still mapped: cc1's room is freed and taken, its chunk re-uploaded.
        let live = ProcessMaps::from_mappings(vec![file("/as", 2)]);
        assert!(tables.evict_unused(std::iter::once(&live)));
        let c = tables.place(&built(half, 24), "ld").unwrap();
        assert_eq!((c.first_row, c.row_count), (0, half as u32));
        assert!(
            tables.not_loaded.is_empty(),
            "placed at last: no longer a loss"
        );
        assert_eq!(tables.rows[0].cfa_offset, 24);
        assert_eq!(tables.rows[half].cfa_offset, 16, "as kept its rows");
        assert_eq!(tables.pending_chunks().len(), 1);
        assert!(
            !tables.evict_unused(std::iter::once(&live)),
            "nothing left to evict"
        );
    }
}
