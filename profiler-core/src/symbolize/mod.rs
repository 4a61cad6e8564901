//! Addresses → frame names.
//!
//! User frames: the mapping snapshot (`procmap`) turns an address into (file, file offset);
//! blazesym resolves it from `.symtab`/`.dynsym`, DWARF, detached debug files found by build
//! id or `.gnu_debuglink`, and demangles Rust and C++. One blazesym symbolizer serves the
//! whole capture, and each (file, offset) is looked up once over all processes, files known by
//! (device, inode): post-processing grows with the files and addresses captured, not with the
//! number of processes. JIT code resolves through the perf map; a compiled frame that inlined
//! methods is followed by them, marked `_[i]` (a JVM's own PcDescs, read by `hotspot`).
//! An address in a known mapping without a symbol becomes `libfoo.so+0x1a2b`. Kernel frames
//! come from kallsyms and carry inferno's `_[k]` suffix; the profiler's own plumbing
//! (BPF program and tracepoint trampolines) is cut off the top of kernel stacks.

use std::{
    collections::{BTreeSet, HashMap, HashSet, hash_map::Entry},
    io::Write as _,
    path::PathBuf,
    sync::Arc,
};

use blazesym::{
    MaybeDefault,
    symbolize::{
        Input, Symbolized, Symbolizer as Blaze,
        source::{Elf, Kernel, Source},
    },
};

use crate::{
    perfmap::PerfMap,
    procmap::{Mapping, MappingKind, ProcessMaps},
};

pub use crate::model::Name;
use crate::model::{FrameFile, Kind, NO_FILE, Profile, StackNames};
use profiler_common::NO_TABLE_GENERATION;

/// Marks kernel frames for inferno (and for readers).
pub const KERNEL_SUFFIX: &str = "_[k]";
/// Marks inlined frames, as async-profiler does: a method a JIT compiled into its caller,
/// shown as the caller's callee at the address (the perf map's `inlined_at`).
pub const INLINED_SUFFIX: &str = "_[i]";

/// Kernel frames that belong to the profiler itself, not to the target: the BPF program and
/// the tracepoint/perf trampolines that called it. Only ever removed from the leaf end.
fn is_probe_plumbing(name: &str) -> bool {
    const PREFIXES: [&str; 7] = [
        "bpf_prog_",
        "bpf_trace_run",
        "__bpf_trace_",
        "__traceiter_",
        "bpf_get_stack",
        "bpf_overflow_handler",
        "trace_call_bpf",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whose files name a user stack: the layout it was unwound under (a mapping-table
/// generation: processes forked from one parent share one), else its process's mappings.
pub struct Spaces<'a> {
    pub layouts: &'a HashMap<u32, ProcessMaps>,
    pub processes: HashMap<u32, &'a ProcessMaps>,
    /// JIT code named from JVMs' own structures (`hotspot`), by process.
    pub jit: HashMap<u32, PerfMap>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Space {
    Layout(u32),
    Process(u32),
    /// Walked without any table (generation 0: an exec moments ago, a child forked before its
    /// parent's table was published): by frame pointers alone, named by the process's mappings.
    Bare(u32),
}

/// Names every stack the profile refers to (samples, waits and wakers).
pub fn name_stacks(profile: &Profile, spaces: &Spaces<'_>) -> StackNames {
    let started = std::time::Instant::now();
    let (user_ids, kernel_ids) = stack_ids(profile);
    let groups = user_groups(profile, spaces, &user_ids);
    let none = ProcessMaps::default();
    let perf_maps: Vec<PerfMap> = groups
        .keys()
        .map(|(_, pid)| {
            let perf_map = PerfMap::load(*pid);
            match spaces.jit.get(pid) {
                Some(jit) => perf_map.merged(jit.clone()),
                None => perf_map,
            }
        })
        .collect();
    let processes: Vec<UserStacks<'_>> = groups
        .iter()
        .zip(&perf_maps)
        .map(|((space, ids), perf_map)| UserStacks {
            maps: match space {
                (Space::Layout(g), _) => &spaces.layouts[g],
                (Space::Process(p) | Space::Bare(p), _) => {
                    spaces.processes.get(p).copied().unwrap_or(&none)
                }
            },
            // A layout was published while the process's records were still coming in (an
            // exec's table before its libraries' mappings reached us): what it lacks, the
            // process's mappings at the end know. Images of two programs one process ran
            // do not share addresses (ASLR), so this names no frame wrongly in practice.
            fallback: match space {
                (Space::Layout(_), pid) => spaces.processes.get(pid).copied(),
                (Space::Process(_) | Space::Bare(_), _) => None,
            },
            // A frame-pointer walk through code built without them reads on into garbage,
            // and the leaf of a stack taken mid-exec is the previous program's: what the
            // process's mappings cannot place is not a frame of it, nor is anything above.
            // (Unless nothing of the process is known: then every frame is `[unmapped]`.)
            cut_at_unmapped: match space {
                (Space::Bare(p), _) => spaces
                    .processes
                    .get(p)
                    .is_some_and(|m| !m.mappings().is_empty()),
                _ => false,
            },
            perf_map,
            stacks: ids
                .iter()
                .filter_map(|id| profile.stacks.get(id).map(|s| (*id, s.as_slice())))
                .collect(),
        })
        .collect();
    let mut symbolizer = Symbolizer::new();
    let mut names = StackNames::default();
    let mut files = FileTable::default();
    for (id, (frames, in_files)) in symbolizer.user_stacks_in_files(&processes, &mut files) {
        names.user.insert(id, frames);
        names.user_files.insert(id, in_files);
    }
    names.files = files.files;
    let kernel = kernel_ids
        .iter()
        .filter_map(|(id, wait)| profile.stacks.get(id).map(|s| (*id, s.as_slice(), *wait)));
    names.kernel = symbolizer.kernel_stacks(kernel);
    let stats = symbolizer.stats();
    log::info!(
        "symbolization: {} user stacks of {} processes ({} files, {} file offsets), {} kernel \
         stacks, in {:.3} s",
        names.user.len(),
        processes.len(),
        stats.files,
        stats.offsets,
        names.kernel.len(),
        started.elapsed().as_secs_f64()
    );
    names
}

/// The stacks the profile refers to: each user stack with a process it was seen in, and each
/// kernel stack with whether a wait refers to it (see `Symbolizer::kernel_stacks`).
fn stack_ids(profile: &Profile) -> (HashMap<u64, u32>, HashMap<u64, bool>) {
    let mut user_ids: HashMap<u64, u32> = HashMap::new();
    let mut kernel_ids: HashMap<u64, bool> = HashMap::new();
    for e in &profile.entries {
        user_ids.entry(e.user_stack).or_insert(e.pid);
        *kernel_ids.entry(e.kernel_stack).or_default() |= matches!(e.kind, Kind::Off(_));
    }
    for w in &profile.wakers {
        let wakee = profile.threads.get(&w.tid).map_or(0, |t| t.pid);
        user_ids.entry(w.user_stack).or_insert(wakee);
        user_ids.entry(w.waker_user_stack).or_insert(w.waker_pid);
        kernel_ids.insert(w.kernel_stack, true);
        kernel_ids.entry(w.waker_kernel_stack).or_default();
    }
    for g in &profile.goroutines.waits {
        user_ids.entry(g.user_stack).or_insert(g.pid);
    }
    (user_ids, kernel_ids)
}

/// The user stacks recorded, by the address space they were unwound in (a published layout,
/// else the process's mappings) and by process too: a layout's gaps are filled from that
/// process's own mappings.
fn user_groups(
    profile: &Profile,
    spaces: &Spaces<'_>,
    user_ids: &HashMap<u64, u32>,
) -> HashMap<(Space, u32), Vec<u64>> {
    let mut groups: HashMap<(Space, u32), Vec<u64>> = HashMap::new();
    for (&id, &pid) in user_ids {
        if !profile.stacks.contains_key(&id) {
            continue;
        }
        let space = match profile.stack_generations.get(&id) {
            Some(g) if spaces.layouts.contains_key(g) => Space::Layout(*g),
            Some(&NO_TABLE_GENERATION) => Space::Bare(pid),
            _ => Space::Process(pid),
        };
        groups.entry((space, pid)).or_default().push(id);
    }
    groups
}

/// One process's user stacks to name: the mappings they were unwound under, and its JIT names.
pub struct UserStacks<'a> {
    pub maps: &'a ProcessMaps,
    /// Where to look for an address `maps` does not have.
    pub fallback: Option<&'a ProcessMaps>,
    /// Whether the stacks were walked without a table: their frames from the first address
    /// no mapping places (leaf side) up are dropped, not shown as `[unmapped]`.
    pub cut_at_unmapped: bool,
    pub perf_map: &'a PerfMap,
    /// (stack id, frames leaf first).
    pub stacks: Vec<(u64, &'a [u64])>,
}

/// What a symbolizer has read so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Files looked up (one blazesym call each, however many processes map them).
    pub files: usize,
    /// Distinct (file, offset) pairs looked up.
    pub offsets: usize,
}

/// Names addresses of any number of processes. One blazesym symbolizer serves them all, and
/// addresses are looked up by (file, offset) over every process at once: a file that 120
/// compiler processes map (cc1; libc and its detached debug file) is parsed and searched
/// once, not once per process (a blazesym symbolizer and its parse of libc's debug file per
/// process cost ~120 ms each, most of 9 s after `make -j2` of 40 files).
pub struct Symbolizer {
    blaze: Blaze,
    /// vDSO images written to files for blazesym, each distinct image once (every process of
    /// one kernel has the same); `None` where writing failed.
    vdso_files: HashMap<Vec<u8>, Option<(usize, tempfile::NamedTempFile)>>,
    stats: Stats,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

/// A file as the lookups share it: a mapped file by identity, not by the path a process
/// named it by, or one of the distinct vDSO images.
#[derive(Clone, PartialEq, Eq, Hash)]
enum FileKey {
    Mapped { dev: String, inode: u64 },
    Vdso(usize),
}

/// Where a user address lies, before any file is read.
enum Place {
    /// Named without reading a file: (name, index in the file table).
    Named(Name, u32),
    /// In none of the process's mappings, nor JIT code it announced.
    Unmapped(Name),
    /// At `offset` in the `wanted`th file looked up.
    InFile {
        wanted: usize,
        offset: u64,
        display: Arc<str>,
        file: u32,
    },
}

/// The files to look up over all processes: one entry per file, with a path to read it by
/// and the offsets wanted in it.
#[derive(Default)]
struct Wanted {
    index: HashMap<FileKey, usize>,
    files: Vec<WantedFile>,
}

impl Wanted {
    /// The file's index, added with the path to read it by if it is new.
    fn file(&mut self, key: FileKey, path: PathBuf, display: &Arc<str>) -> usize {
        let files = &mut self.files;
        *self.index.entry(key).or_insert_with(|| {
            files.push(WantedFile {
                path,
                display: display.clone(),
                offsets: BTreeSet::new(),
            });
            files.len() - 1
        })
    }
}

struct WantedFile {
    path: PathBuf,
    /// For the log (`path` is often /proc/self/fd/N).
    display: Arc<str>,
    offsets: BTreeSet<u64>,
}

/// What the addresses of one mapping share.
struct InMapping {
    display: Arc<str>,
    file: u32,
    wanted: Option<usize>,
}

impl Symbolizer {
    pub fn new() -> Self {
        let blaze = Blaze::builder()
            .enable_code_info(false)
            .enable_inlined_fns(false)
            .enable_demangling(true)
            .build();
        Self {
            blaze,
            vdso_files: HashMap::new(),
            stats: Stats::default(),
        }
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Names for one process's user stacks given leaf first, as root→leaf frame lists, by
    /// stack id.
    pub fn user_stacks<'a>(
        &mut self,
        maps: &ProcessMaps,
        perf_map: &PerfMap,
        stacks: impl IntoIterator<Item = (u64, &'a [u64])>,
    ) -> HashMap<u64, Vec<Name>> {
        let process = UserStacks {
            maps,
            fallback: None,
            cut_at_unmapped: false,
            perf_map,
            stacks: stacks.into_iter().collect(),
        };
        self.user_stacks_in_files(&[process], &mut FileTable::default())
            .into_iter()
            .map(|(id, (frames, _))| (id, frames))
            .collect()
    }

    /// Names for the user stacks of several processes, and the file of each frame (an index
    /// into `files`), by stack id.
    pub fn user_stacks_in_files(
        &mut self,
        processes: &[UserStacks<'_>],
        files: &mut FileTable,
    ) -> HashMap<u64, (Vec<Name>, Vec<u32>)> {
        let mut wanted = Wanted::default();
        let places: Vec<HashMap<u64, Place>> = processes
            .iter()
            .map(|p| self.places(p, files, &mut wanted))
            .collect();
        // Symbol names by (wanted file, offset); absent where the file has none there.
        let mut found: HashMap<(usize, u64), Name> = HashMap::new();
        for (i, wanted) in wanted.files.iter().enumerate() {
            let offsets: Vec<u64> = wanted.offsets.iter().copied().collect();
            self.stats.files += 1;
            self.stats.offsets += offsets.len();
            let looked_up = std::time::Instant::now();
            let results = self.symbolize_file(&wanted.path, &offsets);
            log::debug!(
                "symbolized {} offsets in {} in {:.1} ms",
                offsets.len(),
                wanted.display,
                looked_up.elapsed().as_secs_f64() * 1e3
            );
            for (&offset, result) in offsets.iter().zip(results) {
                if let Some(sym) = result {
                    found.insert((i, offset), Arc::from(tidy(&sym)));
                }
            }
        }
        let mut named = HashMap::new();
        for (p, places) in processes.iter().zip(places) {
            let (names, unmapped) = place_names(places, &found);
            for &(id, stack) in &p.stacks {
                let stack = if p.cut_at_unmapped {
                    placed_part(stack, &unmapped)
                } else {
                    stack
                };
                let (frames, in_files) = lookup_addresses(stack)
                    .rev()
                    .flat_map(|a| {
                        let (name, file) = names
                            .get(&a)
                            .cloned()
                            .unwrap_or_else(|| (Arc::from("[unknown]"), NO_FILE));
                        let inlined = p
                            .perf_map
                            .inlined_at(a)
                            .iter()
                            .map(move |m| (Arc::from(format!("{m}{INLINED_SUFFIX}")), file));
                        std::iter::once((name, file)).chain(inlined)
                    })
                    .unzip();
                named.insert(id, (frames, in_files));
            }
        }
        named
    }

    /// Names for kernel stacks given leaf first, as root→leaf frame lists with `_[k]`, the
    /// profiler's own frames removed, by stack id.
    ///
    /// Stacks marked as waits also lose their leaf-side scheduler frames (`.sched.text`:
    /// `__schedule`, `schedule`, `do_nanosleep`, …): the kernel leaves those out of the
    /// stacks of blocked tasks (the start snapshot), so both kinds of stack of one blocking
    /// site must end at the same frame to be one site.
    pub fn kernel_stacks<'a>(
        &self,
        stacks: impl IntoIterator<Item = (u64, &'a [u64], bool)>,
    ) -> HashMap<u64, Vec<Name>> {
        let started = std::time::Instant::now();
        let stacks: Vec<(u64, &[u64], bool)> = stacks.into_iter().collect();
        if stacks.is_empty() {
            return HashMap::new();
        }
        // The kernel formats /proc/kallsyms anew at every read (~0.1 s of CPU): it is read
        // once, and blazesym reads a copy.
        let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        let sched_text = sched_text_bounds(&kallsyms);
        let copy = (!kallsyms.is_empty())
            .then(|| {
                let mut file = tempfile::Builder::new()
                    .prefix("profiler-kallsyms-")
                    .tempfile()
                    .ok()?;
                file.write_all(kallsyms.as_bytes()).ok()?;
                Some(file)
            })
            .flatten();
        drop(kallsyms);
        let names = self.kernel_names(
            stacks.iter().flat_map(|(_, s, _)| lookup_addresses(s)),
            copy.as_ref().map(|f| f.path()),
        );
        log::debug!(
            "kernel symbols of {} stacks in {:.1} ms",
            stacks.len(),
            started.elapsed().as_secs_f64() * 1e3
        );
        stacks
            .iter()
            .map(|&(id, stack, wait)| {
                let mut leaf_first: Vec<(u64, Name)> = lookup_addresses(stack)
                    .map(|a| {
                        let name = names
                            .get(&a)
                            .cloned()
                            .unwrap_or_else(|| Arc::from("[unknown]_[k]"));
                        (a, name)
                    })
                    .collect();
                strip_probe_plumbing(&mut leaf_first);
                if wait && let Some((start, end)) = sched_text {
                    let sched = leaf_first
                        .iter()
                        .take_while(|(a, _)| (start..end).contains(a))
                        .count();
                    leaf_first.drain(..sched);
                }
                let root_first = leaf_first.into_iter().rev().map(|(_, n)| n).collect();
                (id, root_first)
            })
            .collect()
    }

    /// Where each of a process's user addresses lies; the offsets in files are added to
    /// `wanted`, to be looked up with every other process's.
    fn places(
        &mut self,
        process: &UserStacks<'_>,
        files: &mut FileTable,
        wanted: &mut Wanted,
    ) -> HashMap<u64, Place> {
        let UserStacks {
            maps,
            fallback,
            perf_map,
            ..
        } = process;
        let mut places: HashMap<u64, Place> = HashMap::new();
        // Per mapping (by layout and start), what its addresses share: worked out once, not
        // per address.
        let mut mapped: HashMap<(bool, u64), InMapping> = HashMap::new();
        for addr in process.stacks.iter().flat_map(|(_, s)| lookup_addresses(s)) {
            if places.contains_key(&addr) {
                continue;
            }
            let found = maps.find(addr).map(|m| (false, *maps, m)).or_else(|| {
                let fallback = (*fallback)?;
                fallback.find(addr).map(|m| (true, fallback, m))
            });
            let Some((in_fallback, maps, mapping)) = found else {
                let place = match perf_map.find(addr) {
                    Some(jit) => Place::Named(Arc::from(jit), NO_FILE),
                    None => Place::Unmapped(Arc::from("[unmapped]")),
                };
                log::trace!(
                    "process {}: {addr:#x} is in none of its {} known mappings",
                    maps.pid(),
                    maps.mappings().len()
                );
                places.insert(addr, place);
                continue;
            };
            let info = match mapped.entry((in_fallback, mapping.start)) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => e.insert(self.in_mapping(maps, mapping, files, wanted)),
            };
            let offset = mapping.file_offset(addr);
            let place = match info.wanted {
                Some(w) => {
                    wanted.files[w].offsets.insert(offset);
                    Place::InFile {
                        wanted: w,
                        offset,
                        display: info.display.clone(),
                        file: info.file,
                    }
                }
                None => {
                    let name = match perf_map.find(addr) {
                        Some(jit) => jit.to_string(),
                        None => format!("{}+{:#x}", info.display, addr - mapping.start),
                    };
                    Place::Named(Arc::from(name), info.file)
                }
            };
            places.insert(addr, place);
        }
        places
    }

    /// A mapping's display name, its index in the file table, and the file to look its
    /// offsets up in (none where it cannot be read).
    fn in_mapping(
        &mut self,
        maps: &ProcessMaps,
        mapping: &Mapping,
        files: &mut FileTable,
        wanted: &mut Wanted,
    ) -> InMapping {
        let display = Arc::from(mapping.display_name());
        let (file, wanted) = match &mapping.kind {
            MappingKind::File { path, dev, inode } => {
                let readable = maps.readable_path(mapping);
                let file = files.index(&path.to_string_lossy(), readable.as_deref());
                let key = FileKey::Mapped {
                    dev: dev.clone(),
                    inode: *inode,
                };
                (file, readable.map(|p| wanted.file(key, p, &display)))
            }
            MappingKind::Vdso => {
                let readable = self.vdso_file(maps);
                let file = files.index("[vdso]", readable.as_ref().map(|(_, p)| p.as_path()));
                (
                    file,
                    readable.map(|(i, p)| wanted.file(FileKey::Vdso(i), p, &display)),
                )
            }
            MappingKind::Anon { .. } => (NO_FILE, None),
        };
        InMapping {
            display,
            file,
            wanted,
        }
    }

    /// The process's vDSO as a file blazesym can read, written once per distinct image.
    fn vdso_file(&mut self, maps: &ProcessMaps) -> Option<(usize, PathBuf)> {
        let image = maps.vdso_image()?;
        if !self.vdso_files.contains_key(image) {
            let n = self.vdso_files.len();
            let written = tempfile::Builder::new()
                .prefix("profiler-vdso-")
                .suffix(".so")
                .tempfile()
                .ok()
                .and_then(|mut file| file.write_all(image).ok().map(|()| (n, file)));
            self.vdso_files.insert(image.to_vec(), written);
        }
        let (n, file) = self.vdso_files.get(image)?.as_ref()?;
        Some((*n, file.path().to_path_buf()))
    }

    /// Symbol names for file offsets in one file. Debug information is tried first (DWARF and
    /// detached debug files); if reading it fails, the file's own symbol tables still answer.
    fn symbolize_file(&self, path: &std::path::Path, offsets: &[u64]) -> Vec<Option<String>> {
        let mut elf = Elf::new(path);
        let first = self
            .blaze
            .symbolize(&Source::Elf(elf.clone()), Input::FileOffset(offsets));
        let results = match first {
            Ok(results) => results,
            Err(e) => {
                log::debug!(
                    "debug symbols of {} unusable ({e:#}); using its symbol table",
                    path.display()
                );
                elf.debug_syms = false;
                match self
                    .blaze
                    .symbolize(&Source::Elf(elf), Input::FileOffset(offsets))
                {
                    Ok(results) => results,
                    Err(e) => {
                        log::warn!("cannot read symbols of {}: {e:#}", path.display());
                        Vec::new()
                    }
                }
            }
        };
        results
            .into_iter()
            .map(|r| match r {
                Symbolized::Sym(sym) => Some(sym.name.into_owned()),
                Symbolized::Unknown(_) => None,
            })
            .collect()
    }

    /// `kallsyms`: a copy of /proc/kallsyms, else blazesym reads the original.
    fn kernel_names(
        &self,
        addrs: impl Iterator<Item = u64>,
        kallsyms: Option<&std::path::Path>,
    ) -> HashMap<u64, Name> {
        let mut unique: Vec<u64> = addrs.collect();
        unique.sort_unstable();
        unique.dedup();
        let source = Source::Kernel(Kernel {
            kallsyms: kallsyms.map_or(MaybeDefault::Default, |p| {
                MaybeDefault::Some(p.to_path_buf())
            }),
            // A vmlinux search costs seconds on some machines and adds nothing kallsyms lacks
            // for function names.
            vmlinux: MaybeDefault::None,
            debug_syms: false,
            ..Kernel::default()
        });
        let results = self
            .blaze
            .symbolize(&source, Input::AbsAddr(&unique))
            .unwrap_or_else(|e| {
                log::warn!("cannot symbolize kernel addresses: {e:#}");
                Vec::new()
            });
        unique
            .iter()
            .enumerate()
            .map(|(i, &addr)| {
                let name = match results.get(i) {
                    Some(Symbolized::Sym(sym)) => format!("{}{KERNEL_SUFFIX}", sym.name),
                    _ => format!("[unknown]{KERNEL_SUFFIX}"),
                };
                (addr, Arc::from(name))
            })
            .collect()
    }
}

/// The files user frames lie in, each once, with its build ID (read once per file).
#[derive(Default)]
pub struct FileTable {
    files: Vec<FrameFile>,
    index: HashMap<String, u32>,
}

impl FileTable {
    /// `path` as the process mapped it; `readable`, where its bytes can be read now.
    fn index(&mut self, path: &str, readable: Option<&std::path::Path>) -> u32 {
        if let Some(&i) = self.index.get(path) {
            return i;
        }
        let i = u32::try_from(self.files.len()).unwrap_or(NO_FILE);
        self.files.push(FrameFile {
            path: path.to_string(),
            build_id: readable.and_then(build_id).unwrap_or_default(),
        });
        self.index.insert(path.to_string(), i);
        i
    }
}

/// A file's GNU build ID in hex, reading only its headers and notes.
fn build_id(path: &std::path::Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    let id = object::Object::build_id(&elf).ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// glibc's internal aliases (`__GI___clock_nanosleep`) read better under their real names.
fn tidy(name: &str) -> &str {
    name.strip_prefix("__GI_").unwrap_or(name)
}

/// Removes the profiler's own frames from the leaf end of a kernel stack (leaf first): the
/// BPF program (whose symbol is gone once it is unloaded, so it may resolve to any neighbour)
/// and the trampoline that called it, always within the first few frames; nothing deeper (an
/// interrupted BPF syscall further down is the target's business).
fn strip_probe_plumbing(leaf_first: &mut Vec<(u64, Name)>) {
    let is_trampoline = |n: &str| {
        let n = n.trim_end_matches(KERNEL_SUFFIX);
        is_probe_plumbing(n) && !n.starts_with("bpf_prog_")
    };
    // The chain is short (program, bpf_trace_runN, __bpf_trace_X, __traceiter_X): look no
    // deeper than that for its last frame.
    let cut = match leaf_first
        .iter()
        .take(6)
        .rposition(|(_, n)| is_trampoline(n))
    {
        Some(i) => i + 1,
        None => leaf_first
            .iter()
            .take_while(|(_, n)| is_probe_plumbing(n.trim_end_matches(KERNEL_SUFFIX)))
            .count(),
    };
    leaf_first.drain(..cut);
}

/// `[__sched_text_start, __sched_text_end)` from the text of /proc/kallsyms.
fn sched_text_bounds(kallsyms: &str) -> Option<(u64, u64)> {
    let (mut start, mut end) = (None, None);
    for line in kallsyms.lines() {
        let mut parts = line.split_whitespace();
        let (Some(addr), Some(_), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        match name {
            "__sched_text_start" => start = u64::from_str_radix(addr, 16).ok(),
            "__sched_text_end" => end = u64::from_str_radix(addr, 16).ok(),
            _ => continue,
        }
        if let (Some(s), Some(e)) = (start, end) {
            return (s != 0 && s < e).then_some((s, e));
        }
    }
    None
}

/// The addresses to look up for a leaf-first stack: every frame but the leaf is a return
/// address, which points after the call and may already belong to the next function (calls
/// to noreturn functions end a function). Looking up `ret - 1` lands inside the call.
pub fn lookup_addresses(stack: &[u64]) -> impl DoubleEndedIterator<Item = u64> + '_ {
    stack
        .iter()
        .enumerate()
        // A Java method recorded for an interpreted frame is a name's key, not a pc.
        .map(|(i, &a)| {
            if i == 0 || profiler_common::unwind::java_method_of(a).is_some() {
                a
            } else {
                a.saturating_sub(1)
            }
        })
}

/// A process's addresses named (name, index in the file table) from their places and the
/// symbols `found` in files; and the addresses no mapping places.
fn place_names(
    places: HashMap<u64, Place>,
    found: &HashMap<(usize, u64), Name>,
) -> (HashMap<u64, (Name, u32)>, HashSet<u64>) {
    let mut unmapped: HashSet<u64> = HashSet::new();
    let names = places
        .into_iter()
        .map(|(addr, place)| {
            let name = match place {
                Place::Named(name, file) => (name, file),
                Place::Unmapped(name) => {
                    unmapped.insert(addr);
                    (name, NO_FILE)
                }
                Place::InFile {
                    wanted,
                    offset,
                    display,
                    file,
                } => match found.get(&(wanted, offset)) {
                    Some(name) => (name.clone(), file),
                    None => (Arc::from(format!("{display}+{offset:#x}")), file),
                },
            };
            (addr, name)
        })
        .collect();
    (names, unmapped)
}

/// The frames of `stack` (leaf first) below the first one in `unmapped`.
fn placed_part<'s>(stack: &'s [u64], unmapped: &HashSet<u64>) -> &'s [u64] {
    let placed = lookup_addresses(stack)
        .take_while(|a| !unmapped.contains(a))
        .count();
    &stack[..placed]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compiled_frame_is_followed_by_the_methods_it_inlined() {
        let inlined = [(0x1fff, vec!["Journal.record".to_string()])].into();
        let perf_map =
            PerfMap::parse("1000 2000 Chain.doFilter\n5000 100 stub\n").with_inlined(inlined);
        let stack = [0x5010, 0x2000];
        let named =
            Symbolizer::new().user_stacks(&ProcessMaps::default(), &perf_map, [(7, &stack[..])]);
        let frames: Vec<&str> = named[&7].iter().map(|n| &**n).collect();
        assert_eq!(frames, ["Chain.doFilter", "Journal.record_[i]", "stub"]);
    }

    #[test]
    fn a_stack_walked_without_a_table_stops_before_what_no_mapping_places() {
        let maps = ProcessMaps::from_mappings(crate::procmap::parse_maps(
            "400000-500000 r-xp 00000000 00:00 0 [anon:code]\n",
        ));
        let perf_map = PerfMap::default();
        // Leaf first: a placed leaf, a garbage caller from a frame-pointer walk, more above.
        let garbage_above = [0x401000, 0x9999, 0x402000];
        let garbage_leaf = [0x9999, 0x402000];
        let stacks = |cut_at_unmapped| UserStacks {
            maps: &maps,
            fallback: None,
            cut_at_unmapped,
            perf_map: &perf_map,
            stacks: vec![(1, &garbage_above[..]), (2, &garbage_leaf[..])],
        };
        let names = |cut| {
            let named =
                Symbolizer::new().user_stacks_in_files(&[stacks(cut)], &mut FileTable::default());
            let frames =
                |id: u64| -> Vec<String> { named[&id].0.iter().map(|n| n.to_string()).collect() };
            (frames(1), frames(2))
        };
        let (above, leaf) = names(true);
        assert_eq!(above, ["[anon:code]+0x1000"]);
        assert!(leaf.is_empty(), "{leaf:?}");
        // A walk with a table keeps what it found: JIT code the perf map does not know yet.
        let (above, leaf) = names(false);
        assert_eq!(
            above,
            ["[anon:code]+0x1fff", "[unmapped]", "[anon:code]+0x1000"]
        );
        assert_eq!(leaf, ["[anon:code]+0x1fff", "[unmapped]"]);
    }

    #[test]
    fn return_addresses_are_looked_up_inside_the_call() {
        let got: Vec<u64> = lookup_addresses(&[0x1000, 0x2000, 0x3000]).collect();
        assert_eq!(got, vec![0x1000, 0x1fff, 0x2fff]);
    }

    #[test]
    fn plumbing_is_cut_from_the_leaf_end_only() {
        let names = |v: &[&str]| {
            v.iter()
                .map(|s| (0u64, Arc::from(*s)))
                .collect::<Vec<(u64, Name)>>()
        };
        let mut stack = names(&[
            "__stop_runtime_ptr_USER_PTR_MAX_[k]",
            "bpf_trace_run4_[k]",
            "__traceiter_sched_switch_[k]",
            "__schedule_[k]",
            "schedule_[k]",
            "do_nanosleep_[k]",
        ]);
        strip_probe_plumbing(&mut stack);
        assert_eq!(
            stack,
            names(&["__schedule_[k]", "schedule_[k]", "do_nanosleep_[k]"])
        );
        let mut clean = names(&["__schedule_[k]", "schedule_[k]"]);
        strip_probe_plumbing(&mut clean);
        assert_eq!(clean.len(), 2);
    }

    #[test]
    fn plumbing_names_are_recognised() {
        assert!(is_probe_plumbing("bpf_prog_6deef7357e7b4530_sched_switch"));
        assert!(is_probe_plumbing("bpf_trace_run4"));
        assert!(is_probe_plumbing("__bpf_trace_sched_switch"));
        assert!(!is_probe_plumbing("__schedule"));
        assert!(!is_probe_plumbing("bpf_check"));
    }
}
