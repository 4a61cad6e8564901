//! An nmethod's debug information: where its header says the PcDescs, the scopes data and
//! the metadata lie (each JDK keeps them elsewhere), and their decoding into the chains of
//! methods it inlined, by pc.

use std::collections::HashMap;

use super::{
    error::JvmError,
    memory::le,
    unsigned5::Unsigned5,
    vmstructs::{Field, MAX_HEADER, VmStructs},
};

/// Where an nmethod keeps its debug information — the PcDescs (pc offset → scope), the scopes
/// data (the compressed stream the scopes are encoded in) and the metadata section (the
/// `Method*`s the scopes name by index) — as fields of its header.
#[derive(Clone, Copy, Debug)]
pub(super) struct DebugLayout {
    /// `nmethod::_compile_id`: with the blob's address, names one compilation.
    compile_id: Field,
    sections: DebugSections,
    /// `sizeof(PcDesc)` and the two fields read of it (`pcDesc.hpp`).
    pc_desc_size: u64,
    pc_offset: Field,
    scope_offset: Field,
    /// How the scopes data is compressed.
    pub(super) stream: Unsigned5,
    /// Bytes of an nmethod's header that hold every field above.
    pub(super) header_end: u64,
}

#[derive(Clone, Copy, Debug)]
enum DebugSections {
    /// JDK 17 (`code/nmethod.hpp`: `metadata_begin()`, `metadata_end()`,
    /// `scopes_data_end()`, `scopes_pcs_begin()`, `scopes_pcs_end()`), and the releases after
    /// it until the nmethod's data left the code cache (the fields say which): the three lie
    /// one after the other in the blob, `header + _metadata_offset` up to
    /// `CompiledMethod::_scopes_data_begin`, then up to `header + _scopes_pcs_offset`, then
    /// up to `header + _dependencies_offset`.
    InBlob {
        metadata_offset: Field,
        scopes_data_begin: Field,
        scopes_pcs_offset: Field,
        dependencies_offset: Field,
    },
    /// JDK 25 (and the release or two before it that have `nmethod::_immutable_data`):
    /// PcDescs and scopes data in the nmethod's immutable data, outside the code cache
    /// (`code/nmethod.hpp`: `_immutable_data + _scopes_pcs_offset` up to
    /// `+ _scopes_data_offset`, then the scopes up to `+ _immutable_data_size` at most: JVMCI
    /// speculations, and in later JDKs a reference counter, may follow them).
    Immutable {
        immutable_data: Field,
        immutable_data_size: Field,
        scopes_pcs_offset: Field,
        scopes_data_offset: Field,
        metadata: MetadataSection,
    },
}

#[derive(Clone, Copy, Debug)]
enum MetadataSection {
    /// Before JDK 25, with immutable data (`data_begin() + _metadata_offset`,
    /// `CodeBlob::_data_offset`, as async-profiler reads it "since JDK 23"), up to the blob's
    /// end at most. Not tried: no such JDK was at hand.
    Data {
        data_offset: Field,
        metadata_offset: Field,
    },
    /// JDK 25 (`code/nmethod.hpp`, `metadata_begin()`: `mutable_data_begin() +
    /// _relocation_size`, up to `mutable_data_end()`, `CodeBlob::_mutable_data +
    /// _mutable_data_size`).
    Mutable {
        mutable_data: Field,
        relocation_size: Field,
        mutable_data_size: Field,
    },
}

impl DebugSections {
    /// Which of the layouts this JVM has, told by the fields its vmStructs names:
    /// `nmethod::_immutable_data` only exists since the debug information left the blob.
    fn resolve(pid: u32, vm: &VmStructs) -> Result<DebugSections, JvmError> {
        let f = |ty: &str, name: &str| vm.field(pid, ty, name);
        let nm = |name: &str| f("nmethod", name);
        match nm("_immutable_data") {
            Ok(immutable_data) => Ok(DebugSections::Immutable {
                immutable_data,
                immutable_data_size: nm("_immutable_data_size")?,
                scopes_pcs_offset: nm("_scopes_pcs_offset")?,
                scopes_data_offset: nm("_scopes_data_offset")?,
                metadata: match f("CodeBlob", "_mutable_data") {
                    Ok(mutable_data) => MetadataSection::Mutable {
                        mutable_data,
                        relocation_size: f("CodeBlob", "_relocation_size")?,
                        mutable_data_size: f("CodeBlob", "_mutable_data_size")?,
                    },
                    Err(_) => MetadataSection::Data {
                        data_offset: f("CodeBlob", "_data_offset")?,
                        metadata_offset: nm("_metadata_offset")?,
                    },
                },
            }),
            Err(_) => Ok(DebugSections::InBlob {
                metadata_offset: nm("_metadata_offset")?,
                scopes_data_begin: nm("_scopes_data_begin")
                    .or_else(|_| f("CompiledMethod", "_scopes_data_begin"))?,
                scopes_pcs_offset: nm("_scopes_pcs_offset")?,
                dependencies_offset: nm("_dependencies_offset")?,
            }),
        }
    }

    /// Every field the sections are read from, so the caller knows how much of the header
    /// must be at hand.
    fn fields(&self) -> Vec<Field> {
        match *self {
            DebugSections::InBlob {
                metadata_offset,
                scopes_data_begin,
                scopes_pcs_offset,
                dependencies_offset,
            } => vec![
                metadata_offset,
                scopes_data_begin,
                scopes_pcs_offset,
                dependencies_offset,
            ],
            DebugSections::Immutable {
                immutable_data,
                immutable_data_size,
                scopes_pcs_offset,
                scopes_data_offset,
                metadata,
            } => {
                let mut v = vec![
                    immutable_data,
                    immutable_data_size,
                    scopes_pcs_offset,
                    scopes_data_offset,
                ];
                match metadata {
                    MetadataSection::Data {
                        data_offset,
                        metadata_offset,
                    } => v.extend([data_offset, metadata_offset]),
                    MetadataSection::Mutable {
                        mutable_data,
                        relocation_size,
                        mutable_data_size,
                    } => v.extend([mutable_data, relocation_size, mutable_data_size]),
                }
                v
            }
        }
    }
}

impl DebugLayout {
    pub(super) fn resolve(
        pid: u32,
        vm: &VmStructs,
        major: Option<i64>,
    ) -> Result<DebugLayout, JvmError> {
        let f = |ty: &str, name: &str| vm.field(pid, ty, name);
        let sections = DebugSections::resolve(pid, vm)?;
        let compile_id = f("nmethod", "_compile_id")?;
        let pc_desc_size = vm.size_of(pid, "PcDesc")?;
        let pc_offset = f("PcDesc", "_pc_offset")?;
        let scope_offset = f("PcDesc", "_scope_decode_offset")?;
        if pc_desc_size == 0
            || pc_desc_size > 64
            || pc_offset.end() > pc_desc_size
            || scope_offset.end() > pc_desc_size
        {
            return Err(JvmError::Invalid {
                pid,
                what: format!("sizeof(PcDesc) {pc_desc_size}"),
            });
        }
        let major = major.ok_or_else(|| JvmError::Unsupported {
            pid,
            what: "major version (Abstract_VM_Version::_vm_major_version)".into(),
        })?;
        let fields = sections.fields();
        let header_end = fields
            .iter()
            .chain([&compile_id])
            .map(|f| f.end())
            .max()
            .unwrap_or(0);
        if header_end > MAX_HEADER {
            return Err(JvmError::Invalid {
                pid,
                what: format!("an nmethod header of {header_end} bytes"),
            });
        }
        Ok(DebugLayout {
            compile_id,
            sections,
            pc_desc_size,
            pc_offset,
            scope_offset,
            stream: Unsigned5::for_major(major),
            header_end,
        })
    }

    /// Where the debug information of the nmethod at `addr` lies, from its header at the
    /// start of `buf` (`size`: the blob's size, `room`: bytes left in its block); None when it
    /// does not look whole.
    pub(super) fn locate(
        &self,
        addr: u64,
        buf: &[u8],
        size: u64,
        room: usize,
    ) -> Option<DebugInfoAt> {
        if self.header_end as usize > room {
            return None;
        }
        let h = HeaderFields(buf);
        let blob_end = addr.checked_add(size)?;
        let (metadata, scopes, pcs) = match self.sections {
            DebugSections::InBlob {
                metadata_offset,
                scopes_data_begin,
                scopes_pcs_offset,
                dependencies_offset,
            } => {
                let metadata = h.at(addr, metadata_offset, size)?;
                let scopes = h.get(scopes_data_begin)? as u64;
                let pcs = h.at(addr, scopes_pcs_offset, size)?;
                let pcs_end = h.at(addr, dependencies_offset, size)?;
                if !(metadata <= scopes && scopes <= pcs && pcs <= pcs_end && pcs_end <= blob_end) {
                    return None;
                }
                ((metadata, scopes), (scopes, pcs), (pcs, pcs_end))
            }
            DebugSections::Immutable {
                immutable_data,
                immutable_data_size,
                scopes_pcs_offset,
                scopes_data_offset,
                metadata,
            } => {
                let data = h.get(immutable_data)? as u64;
                let data_size = u64::try_from(h.get(immutable_data_size)?).ok()?;
                let data_end = data.checked_add(data_size)?;
                let pcs = h.at(data, scopes_pcs_offset, data_size)?;
                let scopes = h.at(data, scopes_data_offset, data_size)?;
                if pcs > scopes {
                    return None;
                }
                let metadata = metadata.locate(&h, addr, size)?;
                if metadata.0 > metadata.1 {
                    return None;
                }
                (metadata, (scopes, data_end), (pcs, scopes))
            }
        };
        Some(DebugInfoAt {
            compile_id: i32::try_from(h.get(self.compile_id)?).ok()?,
            metadata,
            scopes,
            pcs,
        })
    }
}

impl MetadataSection {
    /// Where the metadata of the nmethod at `addr` (`size` bytes) lies, from its header.
    fn locate(self, h: &HeaderFields<'_>, addr: u64, size: u64) -> Option<(u64, u64)> {
        Some(match self {
            MetadataSection::Data {
                data_offset,
                metadata_offset,
            } => {
                let data_begin = h.at(addr, data_offset, size)?;
                (
                    h.at(data_begin, metadata_offset, size)?,
                    addr.checked_add(size)?,
                )
            }
            MetadataSection::Mutable {
                mutable_data,
                relocation_size,
                mutable_data_size,
            } => {
                let mutable = h.get(mutable_data)? as u64;
                let mutable_size = u64::try_from(h.get(mutable_data_size)?).ok()?;
                (
                    h.at(mutable, relocation_size, mutable_size)?,
                    mutable.checked_add(mutable_size)?,
                )
            }
        })
    }
}

/// The fields of an nmethod's header, at the start of the bytes read of it.
struct HeaderFields<'a>(&'a [u8]);

impl HeaderFields<'_> {
    fn get(&self, f: Field) -> Option<i64> {
        f.get(self.0, 0)
    }

    /// An offset from `base` (the field `f`), within `[0, limit]`.
    fn at(&self, base: u64, f: Field, limit: u64) -> Option<u64> {
        let off = u64::try_from(self.get(f)?).ok()?;
        (off <= limit).then(|| base.checked_add(off))?
    }
}

/// Where one nmethod's debug information lies: `[begin, end)` of each part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DebugInfoAt {
    pub(super) compile_id: i32,
    metadata: (u64, u64),
    scopes: (u64, u64),
    pcs: (u64, u64),
}

impl DebugInfoAt {
    /// The three parts, as `(address, length)` for reading, bounded (a part above its bound
    /// is not believed: a torn header).
    pub(super) fn parts(&self) -> Option<[(u64, usize); 3]> {
        let part = |(begin, end): (u64, u64), max: u64| {
            let len = end.checked_sub(begin)?;
            (len <= max).then_some((begin, len as usize))
        };
        Some([
            part(self.pcs, MAX_PCS_BYTES)?,
            part(self.scopes, MAX_SCOPES_BYTES)?,
            part(self.metadata, MAX_METADATA_BYTES)?,
        ])
    }
}

/// Bounds on one nmethod's debug information: a header torn by the JVM writing it while it
/// is read can say anything, and what it says is not read above these.
const MAX_PCS_BYTES: u64 = 4 << 20;
const MAX_SCOPES_BYTES: u64 = 16 << 20;
const MAX_METADATA_BYTES: u64 = 1 << 20;
/// Deepest chain of scopes believed (C2 inlines 15 levels deep by default, `MaxInlineLevel`).
const MAX_SCOPE_DEPTH: usize = 256;

/// One scope of a PcDesc: a method, and the bytecode it was at (-1,
/// `InvocationEntryBci`, before its first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope {
    pub method: u64,
    pub bci: i32,
}

/// One PcDesc of an nmethod: the end of the instruction(s) it describes, as an offset from
/// the code's start, and its scopes, outermost (the nmethod's own method) first, innermost
/// last; empty for the PcDescs that record no scope (the sentinels at both ends).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcScopes {
    pub pc_offset: u32,
    pub scopes: Vec<Scope>,
}

/// An nmethod's debug information as read from the target.
pub(super) struct DebugInfo<'a> {
    /// The PcDesc array.
    pub(super) pcs: &'a [u8],
    /// The scopes data, where scope decode offsets point.
    pub(super) scopes: &'a [u8],
    /// The metadata array (`Metadata*`, 8 bytes each).
    pub(super) metadata: &'a [u8],
    pub(super) stream: Unsigned5,
    /// The nmethod's own `Method*`: every chain must end in it.
    pub(super) method: u64,
}

impl DebugInfo<'_> {
    /// Each PcDesc's `(pc offset, scope decode offset)` in order, the leading sentinel (pc
    /// offset -1, `PcDesc::lower_offset_limit`) left out.
    fn pc_descs(&self, l: &DebugLayout) -> Result<Vec<(u32, u32)>, String> {
        let size = l.pc_desc_size as usize;
        if !self.pcs.len().is_multiple_of(size) {
            return Err(format!(
                "{} bytes of PcDescs of {size} bytes each",
                self.pcs.len()
            ));
        }
        let mut out = Vec::with_capacity(self.pcs.len() / size);
        let mut last = -1;
        for pc in self.pcs.chunks_exact(size) {
            let (Some(offset), Some(scope)) = (l.pc_offset.get(pc, 0), l.scope_offset.get(pc, 0))
            else {
                return Err("PcDesc layout".into());
            };
            // HotSpot binary-searches them (`PcDescContainer::find_pc_desc_internal`): sorted,
            // equal only where copies of the last fill a rounding gap (`copy_scopes_pcs`).
            if offset < last {
                return Err(format!("PcDescs out of order ({offset} after {last})"));
            }
            last = offset;
            if offset < 0 {
                continue;
            }
            let (Ok(offset), Ok(scope)) = (u32::try_from(offset), u32::try_from(scope)) else {
                return Err(format!("PcDesc at {offset} with scope offset {scope}"));
            };
            out.push((offset, scope));
        }
        Ok(out)
    }

    /// The scopes from the one at `offset` in the scopes data out to the outermost, pushed
    /// innermost first. Each scope starts with its sender's decode offset, its method's
    /// metadata index and its bci + 1, all UNSIGNED5 (JDK 17 `code/scopeDesc.cpp`,
    /// `ScopeDesc::decode_body`; `code/debugInfo.hpp`, `DebugInfoReadStream::read_method`,
    /// `read_bci`); the outermost has sender 0 (`DebugInformationRecorder::serialized_null`).
    fn chain(&self, mut offset: u32, out: &mut Vec<Scope>) -> Result<(), String> {
        let start = out.len();
        while offset != 0 {
            if out.len() - start == MAX_SCOPE_DEPTH {
                return Err(format!("scopes deeper than {MAX_SCOPE_DEPTH}"));
            }
            let mut pos = offset as usize;
            let mut next = || self.stream.read(self.scopes, &mut pos);
            let (Some(sender), Some(index), Some(bci)) = (next(), next(), next()) else {
                return Err(format!(
                    "the scope at {offset} runs past the scopes data ({} bytes)",
                    self.scopes.len()
                ));
            };
            let method = self
                .metadata_at(index)
                .ok_or_else(|| format!("the scope at {offset} names metadata {index}"))?;
            out.push(Scope {
                method,
                bci: (bci as i32).wrapping_sub(1),
            });
            offset = sender;
        }
        match out.last() {
            Some(s) if out.len() > start && s.method != self.method => Err(format!(
                "a scope chain ends in {:#x}, not in the nmethod's method {:#x}",
                s.method, self.method
            )),
            _ => Ok(()),
        }
    }

    /// The `Method*` at a metadata index: index 0 is NULL, index i is the (i-1)th entry
    /// (`nmethod::metadata_at`); None for NULL or a misaligned pointer.
    fn metadata_at(&self, index: u32) -> Option<u64> {
        let at = (index as usize).checked_sub(1)?.checked_mul(8)?;
        le(self.metadata, at, 8).filter(|&m| m != 0 && m.is_multiple_of(8))
    }

    /// Every PcDesc with its whole chain of scopes.
    pub(super) fn pc_scopes(&self, l: &DebugLayout) -> Result<Vec<PcScopes>, String> {
        let mut out = Vec::new();
        for (pc_offset, scope) in self.pc_descs(l)? {
            let mut scopes = Vec::new();
            self.chain(scope, &mut scopes)?;
            scopes.reverse();
            out.push(PcScopes { pc_offset, scopes });
        }
        Ok(out)
    }

    /// The inlining this nmethod records, compactly; None when it inlined nothing.
    pub(super) fn inlining(&self, l: &DebugLayout) -> Result<Option<Inlining>, String> {
        let pcs = self.pc_descs(l)?;
        // Scopes are shared between PcDescs (and chains between scopes): each decode offset
        // is decoded once, into `methods`, outermost first.
        let mut decoded: HashMap<u32, (u32, u32)> = HashMap::new();
        let mut methods: Vec<u64> = Vec::new();
        let mut scratch = Vec::new();
        let mut entries: Vec<PcChain> = Vec::with_capacity(pcs.len());
        let mut inlined = false;
        for (offset, scope) in pcs {
            let (start, len) = match decoded.get(&scope) {
                Some(&r) => r,
                None => {
                    scratch.clear();
                    self.chain(scope, &mut scratch)?;
                    let r = (methods.len() as u32, scratch.len() as u32);
                    methods.extend(scratch.iter().rev().map(|s| s.method));
                    decoded.insert(scope, r);
                    r
                }
            };
            inlined |= len > 1;
            let chain = PcChain { offset, start, len };
            // A lookup takes the first PcDesc after an address, so of a run of PcDescs with
            // the same chain only the last is needed.
            match entries.last_mut() {
                Some(last) if last.methods(&methods) == chain.methods(&methods) => {
                    last.offset = offset;
                }
                _ => entries.push(chain),
            }
        }
        if !inlined {
            return Ok(None);
        }
        // Keep only the chains still referenced, each once.
        let mut kept: HashMap<(u32, u32), u32> = HashMap::new();
        let mut compact = Vec::new();
        for e in &mut entries {
            let key = (e.start, e.len);
            e.start = match kept.get(&key) {
                Some(&s) => s,
                None => {
                    let s = compact.len() as u32;
                    compact.extend_from_slice(e.methods(&methods).unwrap_or(&[]));
                    kept.insert(key, s);
                    s
                }
            };
        }
        compact.shrink_to_fit();
        entries.shrink_to_fit();
        Ok(Some(Inlining {
            pcs: entries,
            methods: compact,
        }))
    }
}

/// One PcDesc kept: its offset, and its chain as a range of `Inlining::methods`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PcChain {
    offset: u32,
    start: u32,
    len: u32,
}

impl PcChain {
    fn methods(self, methods: &[u64]) -> Option<&[u64]> {
        methods.get(self.start as usize..(self.start as usize).checked_add(self.len as usize)?)
    }
}

/// The methods an nmethod inlined, by pc: for each of its PcDescs (those ending a run of
/// PcDescs with the same chain), the chain of `Method*`s from the nmethod's own method
/// (first) to the innermost inlined one (last). Read once per nmethod (`Jvm::read_inlining`)
/// and kept after it is freed, so frames are named after the capture.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inlining {
    pcs: Vec<PcChain>,
    methods: Vec<u64>,
}

impl Inlining {
    /// The chain of the instruction `offset` bytes into the code: that of the first PcDesc
    /// after `offset`. None where no scope is recorded.
    ///
    /// A PcDesc records the JVM state at the end of an instruction: a call's at its return
    /// address (C2 `PhaseOutput::Process_OopMap_Node` is given the offset after the call;
    /// a caller frame's scope is found there exactly, `nmethod::pc_desc_at(return pc)`),
    /// and with `-XX:+DebugNonSafepoints` the end of each run of instructions of one scope.
    /// So the instruction holding `offset` is described by the first PcDesc past it: for a
    /// return address looked up as `ret - 1` (as the symbolizer does), the one at `ret`; for
    /// a sampled pc, the first after it, as AsyncGetCallTrace picks (`forte.cpp`,
    /// `is_decipherable_compiled_frame`: `pc_desc_near(pc + 1)`; async-profiler takes the
    /// first at or after the pc, which differs only for a pc that ends a described
    /// instruction). Without `-XX:+DebugNonSafepoints` (the default) only calls and
    /// safepoint polls have PcDescs, so a sampled pc between them gets the chain of the
    /// next one, which may name a neighbouring inlined method: exact for callers' frames,
    /// approximate for a leaf.
    pub fn at(&self, offset: u64) -> Option<&[u64]> {
        let i = self.pcs.partition_point(|p| u64::from(p.offset) <= offset);
        let pc = self.pcs.get(i)?;
        pc.methods(&self.methods).filter(|m| !m.is_empty())
    }

    /// Each PcDesc kept: its pc offset and chain (outermost first; empty: no scope).
    pub fn chains(&self) -> impl Iterator<Item = (u32, &[u64])> {
        self.pcs
            .iter()
            .map(|p| (p.offset, p.methods(&self.methods).unwrap_or(&[])))
    }

    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.pcs.capacity() * size_of::<PcChain>() + self.methods.capacity() * 8
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::{super::unsigned5::encode, *};

    /// An nmethod's debug information as HotSpot records it, built by hand: the PcDescs
    /// (16 bytes: `_pc_offset`, `_scope_decode_offset`, `_obj_decode_offset`, `_flags`), the
    /// scopes data and the metadata.
    pub(crate) struct Recorded {
        pub(crate) pcs: Vec<u8>,
        pub(crate) scopes: Vec<u8>,
        pub(crate) metadata: Vec<u8>,
    }

    pub(crate) const OUTER: u64 = 0x7f00_0000_1000;
    pub(crate) const INNER: u64 = 0x7f00_0000_2000;
    pub(crate) const LEAF: u64 = 0x7f00_0000_3000;

    /// A 4-byte signed field.
    fn int(offset: u64) -> Field {
        Field {
            offset,
            size: 4,
            signed: true,
        }
    }

    /// A pointer field.
    fn ptr(offset: u64) -> Field {
        Field {
            offset,
            size: 8,
            signed: false,
        }
    }

    pub(crate) fn pc_layout(stream: Unsigned5) -> DebugLayout {
        DebugLayout {
            compile_id: int(0),
            sections: DebugSections::InBlob {
                metadata_offset: int(0),
                scopes_data_begin: int(0),
                scopes_pcs_offset: int(0),
                dependencies_offset: int(0),
            },
            pc_desc_size: 16,
            pc_offset: int(0),
            scope_offset: int(4),
            stream,
            header_end: 0,
        }
    }

    /// Scopes: OUTER@5 (top), INNER@7 called from it, LEAF@-1 called from INNER, and
    /// OUTER@9; PcDescs at 10 (OUTER@5), 20 and 30 (INNER), 35 (LEAF), 40 (OUTER@9), with
    /// the sentinels: -1 before, 101 (`content_size() + 1`) after, no scope.
    pub(crate) fn recorded(f: Unsigned5) -> (Recorded, [u32; 4]) {
        // `DebugInformationRecorder`'s constructor writes one byte so that no scope starts at
        // 0, the offset meaning "none".
        let mut scopes = vec![0xff];
        let mut scope = |sender: u32, method_index: u32, bci: i32| -> u32 {
            let at = scopes.len() as u32;
            // sender, method, bci + 1, then the locals, expressions and monitors offsets.
            for v in [sender, method_index, (bci + 1) as u32, 0, 0, 0] {
                scopes.extend(encode(v, f));
            }
            at
        };
        let outer = scope(0, 1, 5);
        let inner = scope(outer, 2, 7);
        let leaf = scope(inner, 3, -1);
        let outer9 = scope(0, 1, 9);
        let mut pcs = Vec::new();
        for (pc, scope) in [
            (-1i32, 0u32),
            (10, outer),
            (20, inner),
            (30, inner),
            (35, leaf),
            (40, outer9),
            (101, 0),
        ] {
            pcs.extend(pc.to_le_bytes());
            pcs.extend(scope.to_le_bytes());
            pcs.extend([0u8; 8]);
        }
        let metadata = [OUTER, INNER, LEAF]
            .iter()
            .flat_map(|m| m.to_le_bytes())
            .collect();
        (
            Recorded {
                pcs,
                scopes,
                metadata,
            },
            [outer, inner, leaf, outer9],
        )
    }

    pub(crate) fn info(r: &Recorded, stream: Unsigned5) -> DebugInfo<'_> {
        DebugInfo {
            pcs: &r.pcs,
            scopes: &r.scopes,
            metadata: &r.metadata,
            stream,
            method: OUTER,
        }
    }

    #[test]
    fn scope_chains_decode_from_recorded_debug_info() {
        for f in [Unsigned5::UP_TO_JDK19, Unsigned5::SINCE_JDK20] {
            let (r, _) = recorded(f);
            let l = pc_layout(f);
            let pcs = info(&r, f).pc_scopes(&l).expect("decode");
            let s = |method, bci| Scope { method, bci };
            assert_eq!(
                pcs,
                vec![
                    PcScopes {
                        pc_offset: 10,
                        scopes: vec![s(OUTER, 5)]
                    },
                    PcScopes {
                        pc_offset: 20,
                        scopes: vec![s(OUTER, 5), s(INNER, 7)]
                    },
                    PcScopes {
                        pc_offset: 30,
                        scopes: vec![s(OUTER, 5), s(INNER, 7)]
                    },
                    PcScopes {
                        pc_offset: 35,
                        scopes: vec![s(OUTER, 5), s(INNER, 7), s(LEAF, -1)]
                    },
                    PcScopes {
                        pc_offset: 40,
                        scopes: vec![s(OUTER, 9)]
                    },
                    PcScopes {
                        pc_offset: 101,
                        scopes: vec![]
                    },
                ],
                "{f:?}"
            );
        }
    }

    #[test]
    fn inlining_takes_the_first_pc_desc_after_an_address() {
        let f = Unsigned5::UP_TO_JDK19;
        let (r, _) = recorded(f);
        let inlining = info(&r, f)
            .inlining(&pc_layout(f))
            .expect("decode")
            .expect("something inlined");
        // The run 20, 30 is kept as 30; 10 and 40 have the same methods (OUTER at different
        // bcis) but are not one run.
        let chains: Vec<(u32, Vec<u64>)> =
            inlining.chains().map(|(o, c)| (o, c.to_vec())).collect();
        assert_eq!(
            chains,
            vec![
                (10, vec![OUTER]),
                (30, vec![OUTER, INNER]),
                (35, vec![OUTER, INNER, LEAF]),
                (40, vec![OUTER]),
                (101, vec![]),
            ]
        );
        let at = |o| inlining.at(o).map(<[u64]>::to_vec);
        assert_eq!(at(0), Some(vec![OUTER]));
        // A return address at 10, looked up as 9.
        assert_eq!(at(9), Some(vec![OUTER]));
        // A pc at 10 is the instruction after the one the PcDesc at 10 ends.
        assert_eq!(at(10), Some(vec![OUTER, INNER]));
        assert_eq!(at(19), Some(vec![OUTER, INNER]));
        assert_eq!(at(29), Some(vec![OUTER, INNER]));
        assert_eq!(at(34), Some(vec![OUTER, INNER, LEAF]));
        assert_eq!(at(35), Some(vec![OUTER]));
        assert_eq!(at(39), Some(vec![OUTER]));
        // Past the last PcDesc with a scope: the sentinel records none.
        assert_eq!(at(40), None);
        assert_eq!(at(100), None);
        assert_eq!(at(101), None);
        assert_eq!(at(1 << 40), None);
    }

    #[test]
    fn an_nmethod_that_inlined_nothing_keeps_nothing() {
        let f = Unsigned5::UP_TO_JDK19;
        let (mut r, [outer, ..]) = recorded(f);
        // Every PcDesc in the top scope.
        for pc in r.pcs.chunks_exact_mut(16) {
            if pc[4..8] != [0; 4] {
                pc[4..8].copy_from_slice(&outer.to_le_bytes());
            }
        }
        assert_eq!(info(&r, f).inlining(&pc_layout(f)), Ok(None));
    }

    #[test]
    fn debug_info_that_does_not_fit_is_refused() {
        let f = Unsigned5::UP_TO_JDK19;
        let l = pc_layout(f);
        let (r, [outer, inner, ..]) = recorded(f);
        // PcDescs out of order.
        let mut swapped = r.pcs.clone();
        swapped[16..20].copy_from_slice(&50i32.to_le_bytes());
        // A scope that is its own sender never ends.
        let mut looped = r.scopes.clone();
        let at = inner as usize;
        assert_eq!(looped[at] as u32, outer);
        looped[at] = u8::try_from(inner).expect("a small offset");
        let (pcs, scopes, meta) = (&r.pcs[..], &r.scopes[..], &r.metadata[..]);
        // What is read of each: its PcDescs, scopes and metadata, its method and format.
        let refused: [(&str, [&[u8]; 3], u64, Unsigned5); 7] = [
            (
                "a chain not ending in the nmethod's method",
                [pcs, scopes, meta],
                INNER,
                f,
            ),
            (
                "the other format: other numbers",
                [pcs, scopes, meta],
                OUTER,
                Unsigned5::SINCE_JDK20,
            ),
            (
                "a scope cut short",
                [pcs, &scopes[..inner as usize + 2], meta],
                OUTER,
                f,
            ),
            (
                "metadata index 0 (NULL) or past the metadata",
                [pcs, scopes, &meta[..8]],
                OUTER,
                f,
            ),
            ("PcDescs out of order", [&swapped, scopes, meta], OUTER, f),
            (
                "not a whole number of PcDescs",
                [&pcs[..20], scopes, meta],
                OUTER,
                f,
            ),
            (
                "a scope that is its own sender",
                [pcs, &looped, meta],
                OUTER,
                f,
            ),
        ];
        for (what, [pcs, scopes, metadata], method, stream) in refused {
            let info = DebugInfo {
                pcs,
                scopes,
                metadata,
                stream,
                method,
            };
            assert!(info.pc_scopes(&l).is_err(), "{what}: pc_scopes");
            assert!(info.inlining(&l).is_err(), "{what}: inlining");
        }
    }

    /// An nmethod header, written a field at a time: each field its value at its offset.
    struct Header(Vec<u8>);

    impl Header {
        fn new() -> Header {
            Header(vec![0u8; 64])
        }

        fn put(&mut self, f: Field, bytes: &[u8]) -> Field {
            let at = f.offset as usize;
            self.0[at..at + bytes.len()].copy_from_slice(bytes);
            f
        }

        fn int(&mut self, offset: u64, v: i32) -> Field {
            self.put(int(offset), &v.to_le_bytes())
        }

        fn ptr(&mut self, offset: u64, v: u64) -> Field {
            self.put(ptr(offset), &v.to_le_bytes())
        }
    }

    #[test]
    fn debug_info_is_located_from_a_jdk17_nmethod_header() {
        let addr = 0x7f00_0000_0000u64;
        // Metadata at +200, scopes data from addr + 300, PcDescs +400 to +480.
        let mut h = Header::new();
        let jdk17 = DebugLayout {
            sections: DebugSections::InBlob {
                metadata_offset: h.int(0, 200),
                scopes_data_begin: h.ptr(8, addr + 300),
                scopes_pcs_offset: h.int(16, 400),
                dependencies_offset: h.int(20, 480),
            },
            compile_id: h.int(24, 77),
            header_end: 28,
            ..pc_layout(Unsigned5::UP_TO_JDK19)
        };
        let header = h.0;
        let at = jdk17.locate(addr, &header, 1000, 1000).expect("located");
        assert_eq!(
            at,
            DebugInfoAt {
                compile_id: 77,
                metadata: (addr + 200, addr + 300),
                scopes: (addr + 300, addr + 400),
                pcs: (addr + 400, addr + 480),
            }
        );
        // Past the blob, or the parts out of order: a torn header.
        assert_eq!(jdk17.locate(addr, &header, 450, 1000), None);
        assert_eq!(jdk17.locate(addr, &header, 1000, 20), None);
        let mut torn = header.clone();
        torn[8..16].copy_from_slice(&(addr + 450).to_le_bytes());
        assert_eq!(jdk17.locate(addr, &torn, 1000, 1000), None);
    }

    #[test]
    fn debug_info_is_located_from_a_jdk25_nmethod_header() {
        // PcDescs and scopes in the immutable data, metadata after the relocations in the
        // mutable data.
        let (immutable, mutable) = (0x5500_0000_0000u64, 0x5600_0000_0000u64);
        let mut h = Header::new();
        let jdk25 = DebugLayout {
            compile_id: h.int(40, 5),
            header_end: 44,
            sections: DebugSections::Immutable {
                immutable_data: h.ptr(0, immutable),
                immutable_data_size: h.int(8, 900),
                scopes_pcs_offset: h.int(12, 100),
                scopes_data_offset: h.int(16, 260),
                metadata: MetadataSection::Mutable {
                    mutable_data: h.ptr(24, mutable),
                    relocation_size: h.int(32, 40),
                    mutable_data_size: h.int(36, 64),
                },
            },
            ..pc_layout(Unsigned5::UP_TO_JDK19)
        };
        assert_eq!(
            jdk25.locate(0x7f00_0000_0000, &h.0, 1000, 1000),
            Some(DebugInfoAt {
                compile_id: 5,
                metadata: (mutable + 40, mutable + 64),
                scopes: (immutable + 260, immutable + 900),
                pcs: (immutable + 100, immutable + 260),
            })
        );
    }
}
