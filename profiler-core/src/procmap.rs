//! The target's executable mappings, read from `/proc/<pid>/maps` while it lives and kept, with
//! an open handle on every mapped file, so that addresses stay resolvable after the target
//! exits or a library file is replaced on disk.

use std::{
    collections::HashMap,
    fs::File,
    io,
    os::unix::fs::FileExt as _,
    path::{Path, PathBuf},
    sync::Arc,
};

/// An executable mapping as the kernel reported it when it was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedMapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    /// The path the process mapped, or the kernel's name for memory without a file
    /// (`[vdso]`, `//anon`).
    pub filename: PathBuf,
}

/// One executable mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    pub kind: MappingKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappingKind {
    /// A file: its path as the target names it, and (device, inode).
    File {
        path: PathBuf,
        dev: String,
        inode: u64,
    },
    /// The vDSO the kernel maps into every process.
    Vdso,
    /// Anonymous executable memory (JIT code) or a special mapping (`[name]`).
    Anon { name: String },
}

impl Mapping {
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.offset
    }

    /// Short name used in frames that have no symbol: the file's base name.
    pub fn display_name(&self) -> String {
        match &self.kind {
            MappingKind::File { path, .. } => path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.display().to_string()),
            MappingKind::Vdso => "[vdso]".into(),
            MappingKind::Anon { name } if name.is_empty() => "[anon]".into(),
            MappingKind::Anon { name } => name.clone(),
        }
    }
}

/// Parses the executable lines of a `/proc/<pid>/maps` text.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    // start-end perms offset dev inode [path]; the path may contain spaces.
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let dev = fields.next()?;
    let inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim_start();
    if perms.as_bytes().get(2) != Some(&b'x') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let offset = u64::from_str_radix(offset, 16).ok()?;
    let inode: u64 = inode.parse().ok()?;
    if end <= start {
        return None;
    }
    let kind = if path == "[vdso]" {
        MappingKind::Vdso
    } else if inode != 0 && path.starts_with('/') {
        MappingKind::File {
            path: PathBuf::from(path.strip_suffix(" (deleted)").unwrap_or(path)),
            dev: dev.to_string(),
            inode,
        }
    } else {
        MappingKind::Anon {
            name: path.to_string(),
        }
    };
    Some(Mapping {
        start,
        end,
        offset,
        kind,
    })
}

/// This process's vDSO image (the kernel's, the same in every process).
fn own_vdso() -> Option<Vec<u8>> {
    static VDSO: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();
    VDSO.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/self/maps").ok()?;
        let vdso = parse_maps(&text)
            .into_iter()
            .find(|m| m.kind == MappingKind::Vdso)?;
        let mem = File::open("/proc/self/mem").ok()?;
        let mut buf = vec![0u8; (vdso.end - vdso.start) as usize];
        mem.read_exact_at(&mut buf, vdso.start).ok()?;
        Some(buf)
    })
    .clone()
}

fn find_in(sorted: &[Mapping], addr: u64) -> Option<&Mapping> {
    let at = sorted.partition_point(|m| m.start <= addr);
    let m = sorted.get(at.checked_sub(1)?)?;
    (addr < m.end).then_some(m)
}

/// Every executable mapping seen during the capture, with open handles on their files. Cheap
/// to clone (the handles are shared): a clone is a snapshot of one layout.
#[derive(Clone, Debug, Default)]
pub struct ProcessMaps {
    pid: u32,
    /// Sorted by start; ranges never overlap (a later remap of a range replaces the old one).
    mappings: Vec<Mapping>,
    /// Open files by (dev, inode): symbolization reads them through /proc/self/fd.
    files: HashMap<(String, u64), Arc<File>>,
    /// The vDSO image, copied out of the target.
    vdso: Option<Vec<u8>>,
    /// The executable mappings of the programs the process ran before its last exec: stacks
    /// taken during an exec (the old program's user stack, the new program's name) are
    /// named from them. Never uploaded: the kernel unwinds with `mappings` only.
    earlier: Vec<Mapping>,
}

impl ProcessMaps {
    pub fn new(pid: u32) -> Self {
        Self {
            pid,
            ..Self::default()
        }
    }

    /// Reads the current mappings and merges them in. Fails only if the process is gone.
    pub fn refresh(&mut self) -> io::Result<()> {
        let text = std::fs::read_to_string(format!("/proc/{}/maps", self.pid))?;
        for mapping in parse_maps(&text) {
            self.add(mapping);
        }
        Ok(())
    }

    /// Adds an executable mapping the kernel reported as it was made (a `PERF_RECORD_MMAP2`,
    /// read by the capture side): a process that exits before its `/proc/<pid>/maps` is read
    /// is still known from these.
    pub fn add_recorded(&mut self, m: &RecordedMapping) {
        if m.end <= m.start {
            return;
        }
        let name = m.filename.to_string_lossy();
        let kind = if name == "[vdso]" {
            MappingKind::Vdso
        } else if m.inode != 0 && name.starts_with('/') {
            MappingKind::File {
                path: PathBuf::from(name.strip_suffix(" (deleted)").unwrap_or(&name)),
                // As /proc/<pid>/maps prints them (`%02x:%02x`), so a file read both ways is
                // one file.
                dev: format!("{:02x}:{:02x}", m.dev_major, m.dev_minor),
                inode: m.inode,
            }
        } else {
            MappingKind::Anon {
                name: name.into_owned(),
            }
        };
        self.add(Mapping {
            start: m.start,
            end: m.end,
            offset: m.offset,
            kind,
        });
    }

    /// The mappings of a child just forked from this process: the same address space (a
    /// fork reports no mapping of its own), its own pid.
    pub fn forked(&self, pid: u32) -> Self {
        Self {
            pid,
            ..self.clone()
        }
    }

    /// The parent's mappings, for a child whose fork is learnt after its own program's
    /// mappings (it exec'd before the fork record was read, and /proc showed the new
    /// program): its stacks from before the exec point into the parent's layout, named from
    /// it as an exec keeps the old program's (`earlier`). A range the child's own earlier
    /// programs mapped keeps theirs.
    pub fn inherit_earlier(&mut self, parent: &ProcessMaps) {
        for m in &parent.mappings {
            if self
                .earlier
                .iter()
                .any(|e| e.start < m.end && m.start < e.end)
            {
                continue;
            }
            let at = self.earlier.partition_point(|e| e.start < m.start);
            self.earlier.insert(at, m.clone());
        }
        for (key, file) in &parent.files {
            self.files
                .entry(key.clone())
                .or_insert_with(|| Arc::clone(file));
        }
    }

    fn add(&mut self, mapping: Mapping) {
        if let Some(existing) = self
            .mappings
            .iter()
            .find(|m| m.start == mapping.start && m.end == mapping.end)
            && *existing == mapping
        {
            return;
        }
        match &mapping.kind {
            MappingKind::File { path, dev, inode } => {
                let key = (dev.clone(), *inode);
                if !self.files.contains_key(&key)
                    && let Some(file) = self.open_mapped_file(&mapping, path)
                {
                    self.files.insert(key, Arc::new(file));
                }
            }
            MappingKind::Vdso if self.vdso.is_none() => {
                // Every process maps the same kernel's vDSO: ours stands in for a target
                // that is gone before its own could be copied.
                self.vdso = self
                    .read_memory(mapping.start, mapping.end - mapping.start)
                    .ok()
                    .or_else(own_vdso);
            }
            _ => {}
        }
        self.mappings
            .retain(|m| m.end <= mapping.start || m.start >= mapping.end);
        let at = self.mappings.partition_point(|m| m.start < mapping.start);
        self.mappings.insert(at, mapping);
    }

    /// The exact file the target maps, even if it was deleted or lives in another mount
    /// namespace: `map_files` first, then the path seen from the target's root, then as is.
    fn open_mapped_file(&self, mapping: &Mapping, path: &Path) -> Option<File> {
        let pid = self.pid;
        let map_file = format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            mapping.start, mapping.end
        );
        let rooted =
            Path::new(&format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(path));
        [PathBuf::from(map_file), rooted, path.to_path_buf()]
            .iter()
            .find_map(|p| File::open(p).ok())
    }

    fn read_memory(&self, addr: u64, len: u64) -> io::Result<Vec<u8>> {
        if self.pid == 0 {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        let mem = File::open(format!("/proc/{}/mem", self.pid))?;
        let mut buf = vec![0u8; len as usize];
        mem.read_exact_at(&mut buf, addr)?;
        Ok(buf)
    }

    /// The mapping `addr` lies in: the current program's, else one a program before the last
    /// exec had (ASLR keeps two programs' images apart, so the two rarely compete).
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        find_in(&self.mappings, addr).or_else(|| find_in(&self.earlier, addr))
    }

    /// The process exec'd: a new program with none of its mappings yet. The old program's
    /// stay for naming (see `earlier`), their open files with them.
    pub fn exec(&mut self) {
        let old = std::mem::take(&mut self.mappings);
        for m in old {
            self.earlier
                .retain(|e| e.end <= m.start || e.start >= m.end);
            let at = self.earlier.partition_point(|e| e.start < m.start);
            self.earlier.insert(at, m);
        }
    }

    /// A path through which the mapping's file can be read now.
    pub fn readable_path(&self, mapping: &Mapping) -> Option<PathBuf> {
        let MappingKind::File { path, dev, inode } = &mapping.kind else {
            return None;
        };
        match self.files.get(&(dev.clone(), *inode)) {
            Some(file) => {
                use std::os::fd::AsRawFd as _;
                Some(PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())))
            }
            None => path.exists().then(|| path.clone()),
        }
    }

    /// The process these are the mappings of.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Every executable mapping seen, sorted by start.
    pub fn mappings(&self) -> &[Mapping] {
        &self.mappings
    }

    pub fn vdso_image(&self) -> Option<&[u8]> {
        self.vdso.as_deref()
    }

    #[cfg(test)]
    pub fn from_mappings(mappings: Vec<Mapping>) -> Self {
        let mut maps = Self::default();
        for m in mappings {
            maps.add(m);
        }
        maps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
556bb0ab4000-556bb0ab6000 r--p 00000000 fe:00 247030                     /usr/bin/cat
556bb0ab6000-556bb0abb000 r-xp 00002000 fe:00 247030                     /usr/bin/cat
556bed4cb000-556bed4ec000 rw-p 00000000 00:00 0                          [heap]
7f740490d000-7f7404a63000 r-xp 00026000 fe:00 326279                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f7404b00000-7f7404b10000 r-xp 00000000 00:00 0 
7f7404c00000-7f7404c10000 r-xp 00001000 fe:00 42                         /tmp/my lib.so (deleted)
7ffd5a3f1000-7ffd5a3f3000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn keeps_only_executable_mappings_and_classifies_them() {
        let maps = parse_maps(MAPS);
        assert_eq!(maps.len(), 5);
        assert_eq!(maps[0].start, 0x556bb0ab6000);
        assert_eq!(maps[0].offset, 0x2000);
        assert_eq!(maps[0].display_name(), "cat");
        assert_eq!(maps[1].display_name(), "libc.so.6");
        assert_eq!(
            maps[2].kind,
            MappingKind::Anon {
                name: String::new()
            }
        );
        assert_eq!(maps[2].display_name(), "[anon]");
        assert_eq!(
            maps[3].kind,
            MappingKind::File {
                path: PathBuf::from("/tmp/my lib.so"),
                dev: "fe:00".into(),
                inode: 42
            }
        );
        assert_eq!(maps[4].kind, MappingKind::Vdso);
    }

    #[test]
    fn finds_the_mapping_and_file_offset_of_an_address() {
        let maps = ProcessMaps::from_mappings(parse_maps(MAPS));
        let libc = maps.find(0x7f740490d000 + 0x10).unwrap();
        assert_eq!(libc.display_name(), "libc.so.6");
        assert_eq!(libc.file_offset(0x7f740490d000 + 0x10), 0x26010);
        assert!(maps.find(0x7f7404a63000).is_none(), "end is exclusive");
        assert!(maps.find(0x1000).is_none());
        assert!(maps.find(u64::MAX).is_none());
    }

    #[test]
    fn a_remapped_range_replaces_the_old_one() {
        let mut maps = ProcessMaps::from_mappings(parse_maps(MAPS));
        maps.add(Mapping {
            start: 0x7f7404b00000,
            end: 0x7f7404b08000,
            offset: 0,
            kind: MappingKind::Anon { name: "jit".into() },
        });
        assert_eq!(maps.find(0x7f7404b00010).unwrap().display_name(), "jit");
        assert!(maps.find(0x7f7404b09000).is_none());
    }

    #[test]
    fn after_an_exec_the_old_program_still_names_its_addresses_but_is_not_uploaded() {
        let mut maps = ProcessMaps::from_mappings(parse_maps(MAPS));
        maps.exec();
        assert!(
            maps.mappings().is_empty(),
            "the new program maps nothing yet"
        );
        assert_eq!(maps.find(0x556bb0ab6010).unwrap().display_name(), "cat");
        // The new program's mapping wins where the two overlap.
        maps.add(Mapping {
            start: 0x556bb0ab6000,
            end: 0x556bb0ab7000,
            offset: 0,
            kind: MappingKind::Anon { name: "new".into() },
        });
        assert_eq!(maps.mappings().len(), 1);
        assert_eq!(maps.find(0x556bb0ab6010).unwrap().display_name(), "new");
        assert_eq!(maps.find(0x556bb0ab7010).unwrap().display_name(), "cat");
        // A second exec keeps both earlier programs' mappings, the later one winning.
        maps.exec();
        assert_eq!(maps.find(0x556bb0ab6010).unwrap().display_name(), "new");
        assert_eq!(
            maps.find(0x7f740490d010).unwrap().display_name(),
            "libc.so.6"
        );
    }

    #[test]
    fn a_child_whose_fork_is_learnt_after_its_exec_names_its_old_stacks_from_the_parent() {
        let parent = ProcessMaps::from_mappings(parse_maps(MAPS));
        let mut child = ProcessMaps::new(4243);
        child.add(Mapping {
            start: 0x556bb0ab6000,
            end: 0x556bb0ab7000,
            offset: 0,
            kind: MappingKind::Anon { name: "new".into() },
        });
        child.inherit_earlier(&parent);
        assert_eq!(child.mappings().len(), 1, "the parent's are never uploaded");
        assert_eq!(child.find(0x556bb0ab6010).unwrap().display_name(), "new");
        assert_eq!(
            child.find(0x7f740490d010).unwrap().display_name(),
            "libc.so.6"
        );
        // What the child's own earlier program mapped keeps its name.
        let mut other = ProcessMaps::new(4244);
        other.add(Mapping {
            start: 0x7f740490d000,
            end: 0x7f740490e000,
            offset: 0,
            kind: MappingKind::Anon { name: "own".into() },
        });
        other.exec();
        other.inherit_earlier(&parent);
        assert_eq!(other.find(0x7f740490d010).unwrap().display_name(), "own");
    }

    #[test]
    fn own_process_maps_are_read_with_open_files_and_vdso() {
        let mut maps = ProcessMaps::new(std::process::id());
        maps.refresh().unwrap();
        let here = own_code_address();
        let m = maps.find(here).expect("own code is mapped");
        assert!(maps.readable_path(m).is_some());
        assert!(maps.vdso_image().is_some_and(|v| v.starts_with(b"\x7fELF")));
    }

    fn own_code_address() -> u64 {
        own_code_address as *const () as u64
    }
}
