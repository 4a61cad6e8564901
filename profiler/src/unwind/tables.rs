//! The target's executable mappings → the in-kernel unwinder's tables: one global row array
//! (each file's rows once, however often it is mapped) and the per-process mapping table that
//! says which rows cover which addresses and with what bias.
//!
//! Append-only: files seen later in the capture (dlopen, JIT-adjacent libraries) add rows at
//! the end, so only the chunks that changed are uploaded again.

use std::{collections::HashMap, time::Instant};

use object::{
    LittleEndian, elf,
    read::elf::{ElfFile64, ProgramHeader as _},
};
use profiler_common::unwind::{
    ExecMapping, MAX_MAPPINGS, ProcMappings, ROWS_PER_CHUNK, RowChunk, UnwindRow,
};

use super::rows::{UnwindError, build_rows};
use crate::symbolize::procmap::{Mapping, MappingKind, ProcessMaps};

/// Which file a mapping shows: (device, inode) for files, or the vDSO.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum FileKey {
    File(String, u64),
    Vdso,
}

/// A file's rows in the global array, and what it takes to place them at runtime.
#[derive(Clone, Debug)]
struct FileRows {
    first_row: u32,
    row_count: u32,
    /// Table base: the lowest address any row covers (rows are relative to it).
    base: u64,
    /// PT_LOAD segments (file offset, vaddr, file size) to turn a mapping into a load bias.
    segments: Vec<(u64, u64, u64)>,
}

#[derive(Debug, Default)]
pub struct UnwindTables {
    files: HashMap<FileKey, FileRows>,
    rows: Vec<UnwindRow>,
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
}

/// One mapping of a table as the layout key sees it: start, end, bias, first row, rows.
type Placed = (u64, u64, u64, u32, u32);

impl UnwindTables {
    /// Builds rows for every file of `maps` not seen yet. Returns whether anything changed.
    pub fn update(&mut self, maps: &ProcessMaps) -> bool {
        let started = Instant::now();
        let mut changed = false;
        for mapping in maps.mappings() {
            let key = match &mapping.kind {
                MappingKind::File { dev, inode, .. } => FileKey::File(dev.clone(), *inode),
                MappingKind::Vdso => FileKey::Vdso,
                MappingKind::Anon { .. } => continue,
            };
            if self.files.contains_key(&key) {
                continue;
            }
            let built = match &mapping.kind {
                MappingKind::Vdso => maps.vdso_image().map(|image| self.add_file(image)),
                _ => maps
                    .readable_path(mapping)
                    .and_then(|path| std::fs::read(path).ok())
                    .map(|bytes| self.add_file(&bytes)),
            };
            let rows = match built {
                Some(Ok(rows)) => rows,
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

    fn add_file(&mut self, bytes: &[u8]) -> Result<FileRows, UnwindError> {
        let table = build_rows(bytes)?;
        let segments = load_segments(bytes);
        let first_row = self.rows.len() as u32;
        let row_count = table.rows.len() as u32;
        self.rows.extend_from_slice(&table.rows);
        Ok(FileRows {
            first_row,
            row_count,
            base: table.base,
            segments,
        })
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

    /// Chunks not yet uploaded (the last partial one included), with their index.
    pub fn pending_chunks(&self) -> Vec<(u32, Box<RowChunk>)> {
        if self.uploaded == self.rows.len() {
            return Vec::new();
        }
        let first = self.uploaded / ROWS_PER_CHUNK;
        (first..self.chunks_needed())
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
            let key = match &mapping.kind {
                MappingKind::File { dev, inode, .. } => FileKey::File(dev.clone(), *inode),
                MappingKind::Vdso => FileKey::Vdso,
                MappingKind::Anon { .. } => continue,
            };
            let Some(file) = self.files.get(&key) else {
                continue;
            };
            table.entries[n] = exec_mapping(mapping, file);
            n += 1;
        }
        table.count = n as u32;
        let layout = table.entries[..n]
            .iter()
            .map(|e| (e.start, e.end, e.bias, e.first_row, e.row_count))
            .collect();
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
    /// does.
    pub fn find_row(&self, mappings: &ProcMappings, ip: u64) -> Option<UnwindRow> {
        let entries = &mappings.entries[..(mappings.count as usize).min(MAX_MAPPINGS)];
        let at = entries.partition_point(|m| m.start <= ip);
        let m = entries.get(at.checked_sub(1)?)?;
        if ip >= m.end || m.row_count == 0 || ip < m.bias {
            return None;
        }
        let pc = u32::try_from(ip - m.bias).ok()?;
        let first = m.first_row as usize;
        let rows = self.rows.get(first..first + m.row_count as usize)?;
        super::rows::find_row(rows, pc).copied()
    }
}

fn empty_file() -> FileRows {
    FileRows {
        first_row: 0,
        row_count: 0,
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
        },
        // No rows, or no segment for this offset: frame pointers for this range.
        _ => ExecMapping {
            start: mapping.start,
            end: mapping.end,
            bias: 0,
            first_row: 0,
            row_count: 0,
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

    #[test]
    fn a_mapping_gets_the_bias_of_its_segment() {
        let file = FileRows {
            first_row: 10,
            row_count: 5,
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
}
