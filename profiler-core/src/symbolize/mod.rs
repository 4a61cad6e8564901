//! Addresses → frame names.
//!
//! User frames: the mapping snapshot (`procmap`) turns an address into (file, file offset);
//! blazesym resolves it from `.symtab`/`.dynsym`, DWARF, detached debug files found by build
//! id or `.gnu_debuglink`, and demangles Rust and C++. JIT code resolves through the perf map.
//! An address in a known mapping without a symbol becomes `libfoo.so+0x1a2b`. Kernel frames
//! come from kallsyms and carry inferno's `_[k]` suffix; the profiler's own plumbing
//! (BPF program and tracepoint trampolines) is cut off the top of kernel stacks.

use std::{
    collections::{BTreeMap, HashMap},
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
    procmap::{MappingKind, ProcessMaps},
};

pub use crate::model::Name;
use crate::model::{FrameFile, Kind, NO_FILE, Profile, StackNames};

/// Marks kernel frames for inferno (and for readers).
pub const KERNEL_SUFFIX: &str = "_[k]";

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
}

/// Names every stack the profile refers to (samples, waits and wakers).
pub fn name_stacks(profile: &Profile, spaces: &Spaces<'_>) -> StackNames {
    // Each user stack with a process it was seen in.
    let mut user_ids: HashMap<u64, u32> = HashMap::new();
    // Kernel stacks by id, and whether a wait refers to it (see Symbolizer::kernel_stacks).
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
    let mut groups: HashMap<Space, (u32, Vec<u64>)> = HashMap::new();
    for (&id, &pid) in &user_ids {
        if !profile.stacks.contains_key(&id) {
            continue;
        }
        let space = match profile.stack_generations.get(&id) {
            Some(g) if spaces.layouts.contains_key(g) => Space::Layout(*g),
            _ => Space::Process(pid),
        };
        groups.entry(space).or_insert((pid, Vec::new())).1.push(id);
    }
    let mut names = StackNames::default();
    let mut files = FileTable::default();
    let none = ProcessMaps::default();
    for (space, (pid, ids)) in groups {
        let maps = match space {
            Space::Layout(g) => &spaces.layouts[&g],
            Space::Process(p) => spaces.processes.get(&p).copied().unwrap_or(&none),
        };
        let mut perf_map = PerfMap::load(pid);
        if let Some(jit) = spaces.jit.get(&pid) {
            perf_map = perf_map.merged(jit.clone());
        }
        let symbolizer = Symbolizer::new(maps.clone(), perf_map);
        let stacks = ids
            .iter()
            .filter_map(|id| profile.stacks.get(id).map(|s| (*id, s.as_slice())));
        for (id, (frames, in_files)) in symbolizer.user_stacks_in_files(stacks, &mut files) {
            names.user.insert(id, frames);
            names.user_files.insert(id, in_files);
        }
    }
    names.files = files.files;
    let kernel = kernel_ids
        .iter()
        .filter_map(|(id, wait)| profile.stacks.get(id).map(|s| (*id, s.as_slice(), *wait)));
    names.kernel = Symbolizer::new(none, PerfMap::default()).kernel_stacks(kernel);
    names
}

pub struct Symbolizer {
    blaze: Blaze,
    maps: ProcessMaps,
    perf_map: PerfMap,
    /// The target's vDSO written to a file, for blazesym.
    vdso_file: Option<tempfile::NamedTempFile>,
    /// The kernel's scheduler text, trimmed from the leaf of wait stacks.
    sched_text: Option<(u64, u64)>,
}

impl Symbolizer {
    pub fn new(maps: ProcessMaps, perf_map: PerfMap) -> Self {
        let vdso_file = maps.vdso_image().and_then(|image| {
            let mut file = tempfile::Builder::new()
                .prefix("profiler-vdso-")
                .suffix(".so")
                .tempfile()
                .ok()?;
            file.write_all(image).ok()?;
            Some(file)
        });
        let blaze = Blaze::builder()
            .enable_code_info(false)
            .enable_inlined_fns(false)
            .enable_demangling(true)
            .build();
        Self {
            blaze,
            maps,
            perf_map,
            vdso_file,
            sched_text: sched_text_bounds(),
        }
    }

    /// Names for user stacks given leaf first, as root→leaf frame lists, by stack id.
    pub fn user_stacks<'a>(
        &self,
        stacks: impl IntoIterator<Item = (u64, &'a [u64])>,
    ) -> HashMap<u64, Vec<Name>> {
        self.user_stacks_in_files(stacks, &mut FileTable::default())
            .into_iter()
            .map(|(id, (frames, _))| (id, frames))
            .collect()
    }

    /// Names for user stacks, and the file of each frame (an index into `files`).
    pub fn user_stacks_in_files<'a>(
        &self,
        stacks: impl IntoIterator<Item = (u64, &'a [u64])>,
        files: &mut FileTable,
    ) -> HashMap<u64, (Vec<Name>, Vec<u32>)> {
        let stacks: Vec<(u64, &[u64])> = stacks.into_iter().collect();
        let names = self.user_names(stacks.iter().flat_map(|(_, s)| lookup_addresses(s)), files);
        stacks
            .iter()
            .map(|&(id, stack)| {
                let (frames, in_files) = lookup_addresses(stack)
                    .rev()
                    .map(|a| {
                        names
                            .get(&a)
                            .cloned()
                            .unwrap_or_else(|| (Arc::from("[unknown]"), NO_FILE))
                    })
                    .unzip();
                (id, (frames, in_files))
            })
            .collect()
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
        let stacks: Vec<(u64, &[u64], bool)> = stacks.into_iter().collect();
        let names = self.kernel_names(stacks.iter().flat_map(|(_, s, _)| lookup_addresses(s)));
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
                if wait && let Some((start, end)) = self.sched_text {
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

    fn user_names(
        &self,
        addrs: impl Iterator<Item = u64>,
        files: &mut FileTable,
    ) -> HashMap<u64, (Name, u32)> {
        // Group file offsets by the file that holds them: one blazesym call per file.
        // Per file: its index in `files`, and (address, file offset, display name) to name.
        type Wanted = (u32, Vec<(u64, u64, String)>);
        let mut by_file: BTreeMap<PathBuf, Wanted> = BTreeMap::new();
        let mut names: HashMap<u64, (Name, u32)> = HashMap::new();
        let mut seen = std::collections::HashSet::new();
        for addr in addrs {
            if !seen.insert(addr) {
                continue;
            }
            let Some(mapping) = self.maps.find(addr) else {
                if let Some(jit) = self.perf_map.find(addr) {
                    names.insert(addr, (Arc::from(jit), NO_FILE));
                } else {
                    names.insert(addr, (Arc::from("[unmapped]"), NO_FILE));
                }
                continue;
            };
            let display = mapping.display_name();
            let file_offset = mapping.file_offset(addr);
            let path = match &mapping.kind {
                MappingKind::File { .. } => self.maps.readable_path(mapping),
                MappingKind::Vdso => self.vdso_file.as_ref().map(|f| f.path().to_path_buf()),
                MappingKind::Anon { .. } => None,
            };
            let file = match &mapping.kind {
                MappingKind::File { path: mapped, .. } => {
                    files.index(&mapped.to_string_lossy(), path.as_deref())
                }
                MappingKind::Vdso => files.index("[vdso]", path.as_deref()),
                MappingKind::Anon { .. } => NO_FILE,
            };
            match path {
                Some(path) => by_file
                    .entry(path)
                    .or_insert_with(|| (file, Vec::new()))
                    .1
                    .push((addr, file_offset, display)),
                None => {
                    let name = match self.perf_map.find(addr) {
                        Some(jit) => jit.to_string(),
                        None => format!("{display}+{:#x}", addr - mapping.start),
                    };
                    names.insert(addr, (Arc::from(name), file));
                }
            }
        }
        for (path, (file, entries)) in by_file {
            let offsets: Vec<u64> = entries.iter().map(|e| e.1).collect();
            let results = self.symbolize_file(&path, &offsets);
            for (i, (addr, file_offset, display)) in entries.into_iter().enumerate() {
                let name = match results.get(i) {
                    Some(Some(sym)) => tidy(sym).to_string(),
                    _ => format!("{display}+{file_offset:#x}"),
                };
                names.insert(addr, (Arc::from(name), file));
            }
        }
        names
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

    fn kernel_names(&self, addrs: impl Iterator<Item = u64>) -> HashMap<u64, Name> {
        let mut unique: Vec<u64> = addrs.collect();
        unique.sort_unstable();
        unique.dedup();
        let source = Source::Kernel(Kernel {
            kallsyms: MaybeDefault::Default,
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

/// `[__sched_text_start, __sched_text_end)` from /proc/kallsyms.
fn sched_text_bounds() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let (mut start, mut end) = (None, None);
    for line in text.lines() {
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
fn lookup_addresses(stack: &[u64]) -> impl DoubleEndedIterator<Item = u64> + '_ {
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

#[cfg(test)]
mod tests {
    use super::*;

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
