//! A reader of a live HotSpot JVM's own structures, so that compiled and interpreted Java
//! frames can be unwound and named without `-XX:+PreserveFramePointer` or a perf map.
//!
//! Every offset comes from the tables the JVM exports for its serviceability agent
//! (`gHotSpotVMStructs`, `gHotSpotVMTypes`, `gHotSpotVMIntConstants`,
//! `gHotSpotVMLongConstants`), read from the target's memory at attach: layouts differ
//! between JDK builds, and these tables are the JVM's own description of the build that runs.
//! Only the sizes of fixed C types (a pointer is 8 bytes) are assumed.

use std::{
    collections::HashMap,
    fs::File,
    os::unix::fs::FileExt as _,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};
use thiserror::Error;

use crate::procmap::{MappingKind, parse_maps};

#[derive(Debug, Error)]
pub enum JvmError {
    #[error("{what} of process {pid}: {source}")]
    Io {
        pid: u32,
        what: String,
        source: std::io::Error,
    },
    #[error("{path}: {error}")]
    Elf { path: PathBuf, error: object::Error },
    #[error("libjvm.so of process {pid} exports no symbol `{symbol}`")]
    MissingSymbol { pid: u32, symbol: &'static str },
    /// The JVM's tables lack something this reader needs: a JDK it does not know.
    #[error("unsupported JVM in process {pid}: its vmStructs have no {what}")]
    Unsupported { pid: u32, what: String },
    /// What was read does not look like what the tables describe (the JVM changed it while
    /// we read, or it is not what we think).
    #[error("process {pid}: {what}")]
    Invalid { pid: u32, what: String },
}

/// Longest C string read from the target (type, field and blob names are short).
const MAX_CSTR: usize = 512;
/// Longest Symbol body accepted (class and method names).
const MAX_SYMBOL: usize = 4096;
const PAGE: u64 = 4096;

/// Where a JVM's memory is read from: the live process ([`LiveMemory`]), or, in a unit test,
/// a recorded image of the parts the parser reads.
trait TargetMemory: Send + Sync {
    fn read_at(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()>;

    /// Reads each `(address, length)` into consecutive parts of `buf`; whether each part was
    /// read. One by one, unless the source has a faster way.
    fn read_ranges(&self, ranges: &[(u64, usize)], buf: &mut Vec<u8>) -> Vec<bool> {
        buf.clear();
        buf.resize(ranges.iter().map(|r| r.1).sum(), 0);
        let mut offset = 0;
        ranges
            .iter()
            .map(|&(addr, len)| {
                let ok = self.read_at(addr, &mut buf[offset..offset + len]).is_ok();
                offset += len;
                ok
            })
            .collect()
    }
}

/// A live process's memory: `/proc/<pid>/mem`, and `process_vm_readv` for many ranges.
struct LiveMemory {
    pid: u32,
    file: File,
}

/// The target's memory as the parser reads it, with the pid its errors name.
struct Memory {
    pid: u32,
    source: Box<dyn TargetMemory>,
}

impl Memory {
    fn live(pid: u32, file: File) -> Self {
        Self {
            pid,
            source: Box::new(LiveMemory { pid, file }),
        }
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), JvmError> {
        self.source
            .read_at(addr, buf)
            .map_err(|source| JvmError::Io {
                pid: self.pid,
                what: format!("reading {} bytes at {addr:#x}", buf.len()),
                source,
            })
    }

    fn u64(&self, addr: u64) -> Result<u64, JvmError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// A NUL-terminated string of at most `max` bytes, read a page at a time so that a string
    /// ending just before an unmapped page is still read.
    fn cstr(&self, addr: u64, max: usize) -> Result<String, JvmError> {
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < max {
            let page_left = (PAGE - at % PAGE) as usize;
            let mut chunk = vec![0u8; page_left.min(max - out.len()).min(256)];
            self.read(at, &mut chunk)?;
            if let Some(nul) = chunk.iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..nul]);
                return String::from_utf8(out)
                    .map_err(|_| self.invalid(format!("the string at {addr:#x} is not UTF-8")));
            }
            out.extend_from_slice(&chunk);
            at += chunk.len() as u64;
        }
        Err(self.invalid(format!(
            "the string at {addr:#x} is longer than {max} bytes"
        )))
    }

    fn invalid(&self, what: String) -> JvmError {
        JvmError::Invalid {
            pid: self.pid,
            what,
        }
    }

    /// Reads each `(address, length)` into consecutive parts of `buf`; whether each part was
    /// read.
    fn read_ranges(&self, ranges: &[(u64, usize)], buf: &mut Vec<u8>) -> Vec<bool> {
        self.source.read_ranges(ranges, buf)
    }
}

impl TargetMemory for LiveMemory {
    fn read_at(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.file.read_exact_at(buf, addr)
    }

    /// With `process_vm_readv` (up to 1024 parts a call); a part it did not read is read
    /// alone through `/proc/PID/mem`.
    fn read_ranges(&self, ranges: &[(u64, usize)], buf: &mut Vec<u8>) -> Vec<bool> {
        const IOV_MAX: usize = 1024;
        let total: usize = ranges.iter().map(|r| r.1).sum();
        buf.clear();
        buf.resize(total, 0);
        let mut ok = vec![false; ranges.len()];
        let mut first = 0;
        let mut offset = 0;
        while first < ranges.len() {
            let batch = &ranges[first..ranges.len().min(first + IOV_MAX)];
            let want: usize = batch.iter().map(|r| r.1).sum();
            let mut rest = &mut buf[offset..];
            let mut parts = Vec::with_capacity(batch.len());
            for &(addr, len) in batch {
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len);
                parts.push((addr, piece));
                rest = tail;
            }
            let got = vm_readv(self.pid, &mut parts);
            // The call stops at the first part it cannot read (it never splits one): the
            // parts before it are whole, that one is read alone, and the rest is retried.
            let mut got = usize::try_from(got).unwrap_or(0).min(want);
            let mut done = 0;
            for &(_, len) in batch {
                if got < len && len > 0 {
                    break;
                }
                got -= len;
                ok[first + done] = true;
                offset += len;
                done += 1;
            }
            if done < batch.len() {
                let (addr, len) = batch[done];
                ok[first + done] = self.read_at(addr, &mut buf[offset..offset + len]).is_ok();
                offset += len;
                done += 1;
            }
            first += done;
        }
        ok
    }
}

/// One `process_vm_readv(2)` call: each `(address in the target, buffer)` read into its
/// buffer, in order. What the call returns: the bytes read, or -1.
fn vm_readv(pid: u32, parts: &mut [(u64, &mut [u8])]) -> isize {
    let mut local = Vec::with_capacity(parts.len());
    let mut remote = Vec::with_capacity(parts.len());
    for (addr, piece) in parts.iter_mut() {
        local.push(libc::iovec {
            iov_base: piece.as_mut_ptr().cast(),
            iov_len: piece.len(),
        });
        remote.push(libc::iovec {
            iov_base: *addr as *mut libc::c_void,
            iov_len: piece.len(),
        });
    }
    // SAFETY: every local iovec points into a buffer of `parts`, alive and exclusively
    // borrowed for the call, with its length; the remote ones are only read by the kernel
    // from the target.
    unsafe {
        libc::process_vm_readv(
            pid as libc::pid_t,
            local.as_ptr(),
            local.len() as libc::c_ulong,
            remote.as_ptr(),
            remote.len() as libc::c_ulong,
            0,
        )
    }
}

/// The little-endian integer of `size` (at most 8) bytes at `at`, if `buf` holds it.
fn le(buf: &[u8], at: usize, size: usize) -> Option<u64> {
    if size > 8 {
        return None;
    }
    let b = buf.get(at..at.checked_add(size)?)?;
    let mut v = [0u8; 8];
    v[..size].copy_from_slice(b);
    Some(u64::from_le_bytes(v))
}

/// One field as vmStructs describes it.
#[derive(Clone, Debug)]
struct FieldEntry {
    type_string: String,
    /// Offset in the object (non-static fields).
    offset: u64,
    /// Address of the variable (static fields).
    address: u64,
    is_static: bool,
}

/// The JVM's self-description: fields by (type, field), type sizes, constants.
#[derive(Debug, Default)]
struct VmStructs {
    fields: HashMap<(String, String), FieldEntry>,
    /// Size and unsignedness of each type.
    types: HashMap<String, (u64, bool)>,
    int_constants: HashMap<String, i64>,
    /// Read like the other tables (a JVM whose table cannot be read is not attached to).
    #[expect(dead_code, reason = "no long constant is used yet")]
    long_constants: HashMap<String, i64>,
}

/// The libjvm.so a process maps: its exported symbols' addresses in the target.
struct Libjvm {
    /// Symbol name → address in the target (load bias added).
    symbols: HashMap<String, u64>,
}

impl Libjvm {
    fn find(pid: u32) -> Result<Option<Libjvm>, JvmError> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|source| {
            JvmError::Io {
                pid,
                what: "reading /proc/PID/maps".into(),
                source,
            }
        })?;
        let Some((mapping, path)) = parse_maps(&maps).into_iter().find_map(|m| match &m.kind {
            MappingKind::File { path, .. }
                if path.file_name().is_some_and(|n| n == "libjvm.so") =>
            {
                let path = path.clone();
                Some((m, path))
            }
            _ => None,
        }) else {
            return Ok(None);
        };
        // The exact file mapped, also across mount namespaces.
        let candidates = [
            PathBuf::from(format!(
                "/proc/{pid}/map_files/{:x}-{:x}",
                mapping.start, mapping.end
            )),
            Path::new(&format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(&path)),
        ];
        let mut last = None;
        let file = candidates.iter().find_map(|p| match File::open(p) {
            Ok(f) => Some(f),
            Err(e) => {
                last = Some(e);
                None
            }
        });
        let Some(file) = file else {
            return Err(JvmError::Io {
                pid,
                what: format!("opening {}", path.display()),
                source: last.unwrap_or_else(|| std::io::Error::other("no path")),
            });
        };
        let cache = object::ReadCache::new(file);
        let elf_err = |error| JvmError::Elf {
            path: path.clone(),
            error,
        };
        let obj = object::File::parse(&cache).map_err(elf_err)?;
        // The segment holding the mapped file offset gives the load bias.
        let segment = obj
            .segments()
            .find(|s| {
                let (off, size) = s.file_range();
                off <= mapping.offset && mapping.offset < off + size
            })
            .ok_or_else(|| JvmError::Invalid {
                pid,
                what: format!(
                    "{}: no segment holds the mapped offset {:#x}",
                    path.display(),
                    mapping.offset
                ),
            })?;
        let vaddr = segment.address() + (mapping.offset - segment.file_range().0);
        let bias = mapping.start.wrapping_sub(vaddr);
        let symbols = obj
            .dynamic_symbols()
            .filter(|s| s.is_definition())
            .filter_map(|s| {
                let name = s.name().ok()?;
                name.starts_with("gHotSpot")
                    .then(|| (name.to_string(), s.address().wrapping_add(bias)))
            })
            .collect();
        Ok(Some(Libjvm { symbols }))
    }

    fn symbol(&self, pid: u32, name: &'static str) -> Result<u64, JvmError> {
        self.symbols
            .get(name)
            .copied()
            .ok_or(JvmError::MissingSymbol { pid, symbol: name })
    }
}

impl VmStructs {
    fn read(mem: &Memory, lib: &Libjvm) -> Result<VmStructs, JvmError> {
        let mut tables = Tables {
            mem,
            lib,
            strings: HashMap::new(),
        };
        Ok(VmStructs {
            fields: tables.fields()?,
            types: tables.types()?,
            int_constants: tables.constants(&VM_INT_CONSTANTS, 4)?,
            long_constants: tables.constants(&VM_LONG_CONSTANTS, 8)?,
        })
    }
}

/// One of the tables libjvm exports, by the exported variables that describe it: its address,
/// the stride of its entries, and where in an entry its name lies (a NULL name ends the
/// table); and, for constants, where the value lies.
struct Table {
    address: &'static str,
    stride: &'static str,
    name: &'static str,
    value: &'static str,
    /// The table's name in messages.
    what: &'static str,
}

const VM_STRUCTS: Table = Table {
    address: "gHotSpotVMStructs",
    stride: "gHotSpotVMStructEntryArrayStride",
    name: "gHotSpotVMStructEntryTypeNameOffset",
    value: "",
    what: "vmStructs",
};
const VM_TYPES: Table = Table {
    address: "gHotSpotVMTypes",
    stride: "gHotSpotVMTypeEntryArrayStride",
    name: "gHotSpotVMTypeEntryTypeNameOffset",
    value: "",
    what: "vmTypes",
};
const VM_INT_CONSTANTS: Table = Table {
    address: "gHotSpotVMIntConstants",
    stride: "gHotSpotVMIntConstantEntryArrayStride",
    name: "gHotSpotVMIntConstantEntryNameOffset",
    value: "gHotSpotVMIntConstantEntryValueOffset",
    what: "vm constant",
};
const VM_LONG_CONSTANTS: Table = Table {
    address: "gHotSpotVMLongConstants",
    stride: "gHotSpotVMLongConstantEntryArrayStride",
    name: "gHotSpotVMLongConstantEntryNameOffset",
    value: "gHotSpotVMLongConstantEntryValueOffset",
    what: "vm constant",
};

/// The tables as read from the target; their names are C strings, each read once.
struct Tables<'a> {
    mem: &'a Memory,
    lib: &'a Libjvm,
    strings: HashMap<u64, String>,
}

/// One entry of a table.
struct Entry<'a> {
    mem: &'a Memory,
    bytes: &'a [u8],
    what: &'static str,
    /// Its name (a C string's address).
    name: u64,
}

impl Entry<'_> {
    /// The `size`-byte value at `at`.
    fn get(&self, at: u64, size: usize) -> Result<u64, JvmError> {
        le(self.bytes, at as usize, size)
            .ok_or_else(|| self.mem.invalid(format!("{} entry layout", self.what)))
    }
}

impl Tables<'_> {
    /// An exported variable: its value in the target.
    fn var(&self, name: &'static str) -> Result<u64, JvmError> {
        self.mem.u64(self.lib.symbol(self.mem.pid, name)?)
    }

    fn string(&mut self, addr: u64) -> Result<String, JvmError> {
        if addr == 0 {
            return Ok(String::new());
        }
        if let Some(s) = self.strings.get(&addr) {
            return Ok(s.clone());
        }
        let s = self.mem.cstr(addr, MAX_CSTR)?;
        self.strings.insert(addr, s.clone());
        Ok(s)
    }

    /// Calls `f` with each entry of `table` in turn.
    fn each_entry(
        &mut self,
        table: &Table,
        mut f: impl FnMut(&mut Self, &Entry<'_>) -> Result<(), JvmError>,
    ) -> Result<(), JvmError> {
        let stride = self.var(table.stride)?;
        let name = self.var(table.name)?;
        let base = self.var(table.address)?;
        let mem = self.mem;
        for_each_entry(mem, base, stride, name, |bytes| {
            let mut entry = Entry {
                mem,
                bytes,
                what: table.what,
                name: 0,
            };
            entry.name = entry.get(name, 8)?;
            f(self, &entry)
        })
    }

    /// `gHotSpotVMStructs`: every field by (type, field).
    fn fields(&mut self) -> Result<HashMap<(String, String), FieldEntry>, JvmError> {
        let field_name = self.var("gHotSpotVMStructEntryFieldNameOffset")?;
        let type_string = self.var("gHotSpotVMStructEntryTypeStringOffset")?;
        let is_static = self.var("gHotSpotVMStructEntryIsStaticOffset")?;
        let offset = self.var("gHotSpotVMStructEntryOffsetOffset")?;
        let address = self.var("gHotSpotVMStructEntryAddressOffset")?;
        let mut fields = HashMap::new();
        self.each_entry(&VM_STRUCTS, |t, e| {
            let ty = t.string(e.name)?;
            let field = t.string(e.get(field_name, 8)?)?;
            let entry = FieldEntry {
                type_string: t.string(e.get(type_string, 8)?)?,
                offset: e.get(offset, 8)?,
                address: e.get(address, 8)?,
                is_static: e.get(is_static, 4)? != 0,
            };
            fields.insert((ty, field), entry);
            Ok(())
        })?;
        Ok(fields)
    }

    /// `gHotSpotVMTypes`: each type's size and unsignedness.
    fn types(&mut self) -> Result<HashMap<String, (u64, bool)>, JvmError> {
        let size = self.var("gHotSpotVMTypeEntrySizeOffset")?;
        let unsigned = self.var("gHotSpotVMTypeEntryIsUnsignedOffset")?;
        let mut types = HashMap::new();
        self.each_entry(&VM_TYPES, |t, e| {
            types.insert(
                t.string(e.name)?,
                (e.get(size, 8)?, e.get(unsigned, 4)? != 0),
            );
            Ok(())
        })?;
        Ok(types)
    }

    /// A table of constants of `width` bytes (int constants 4, long constants 8) by name.
    fn constants(&mut self, table: &Table, width: usize) -> Result<HashMap<String, i64>, JvmError> {
        let value = self.var(table.value)?;
        let mut constants = HashMap::new();
        self.each_entry(table, |t, e| {
            let name = t.string(e.name)?;
            let v = e.get(value, width)?;
            let v = if width == 4 {
                v as u32 as i32 as i64
            } else {
                v as i64
            };
            constants.insert(name, v);
            Ok(())
        })?;
        Ok(constants)
    }
}

/// Calls `f` on each entry of a table ending with an entry whose name pointer (at `name`) is
/// NULL; entries are read a batch at a time.
fn for_each_entry(
    mem: &Memory,
    base: u64,
    stride: u64,
    name: u64,
    mut f: impl FnMut(&[u8]) -> Result<(), JvmError>,
) -> Result<(), JvmError> {
    const BATCH: u64 = 64;
    // A table of tens of thousands of entries is not one of these: stop at a corrupt one.
    const MAX_ENTRIES: u64 = 100_000;
    if base == 0 || stride == 0 || stride > 1024 || name + 8 > stride {
        return Err(mem.invalid(format!(
            "implausible vmStructs table at {base:#x}, stride {stride}"
        )));
    }
    let mut buf = vec![0u8; (stride * BATCH) as usize];
    let mut index = 0;
    while index < MAX_ENTRIES {
        let at = base + index * stride;
        // The last batch may run past the table's end into unmapped memory: read less.
        if mem.read(at, &mut buf).is_err() {
            buf.truncate(stride as usize);
            mem.read(at, &mut buf)?;
        }
        for e in buf.chunks_exact(stride as usize) {
            if le(e, name as usize, 8) == Some(0) {
                return Ok(());
            }
            f(e)?;
            index += 1;
        }
    }
    Err(mem.invalid(format!("the vmStructs table at {base:#x} has no end")))
}

/// Where a field lies in its object and how to read it.
#[derive(Clone, Copy, Debug)]
struct Field {
    offset: u64,
    size: usize,
    signed: bool,
}

impl Field {
    /// The field of the object at `at` in `buf`, sign-extended when its type is signed.
    fn get(self, buf: &[u8], at: usize) -> Option<i64> {
        let v = le(buf, at.checked_add(self.offset as usize)?, self.size)?;
        let shift = 64 - 8 * self.size as u32;
        Some(if self.signed {
            ((v << shift) as i64) >> shift
        } else {
            v as i64
        })
    }

    fn end(self) -> u64 {
        self.offset + self.size as u64
    }
}

impl VmStructs {
    fn entry(&self, pid: u32, ty: &str, field: &str) -> Result<&FieldEntry, JvmError> {
        self.fields
            .get(&(ty.to_string(), field.to_string()))
            .ok_or_else(|| JvmError::Unsupported {
                pid,
                what: format!("field {ty}::{field}"),
            })
    }

    /// A non-static field, its width taken from its type's size in the type table.
    fn field(&self, pid: u32, ty: &str, name: &str) -> Result<Field, JvmError> {
        let e = self.entry(pid, ty, name)?;
        if e.is_static {
            return Err(JvmError::Unsupported {
                pid,
                what: format!("instance field {ty}::{name} (it is static)"),
            });
        }
        let t = e.type_string.as_str();
        let (size, signed) = if t.ends_with('*') || t == "address" {
            (8, false)
        } else {
            let &(size, unsigned) = self.types.get(t).ok_or_else(|| JvmError::Unsupported {
                pid,
                what: format!("size of type {t} (of {ty}::{name})"),
            })?;
            (size, !unsigned)
        };
        if !matches!(size, 1 | 2 | 4 | 8) {
            return Err(JvmError::Unsupported {
                pid,
                what: format!("integer type {t} of {ty}::{name} ({size} bytes)"),
            });
        }
        Ok(Field {
            offset: e.offset,
            size: size as usize,
            signed,
        })
    }

    /// The address of a static field.
    fn static_address(&self, pid: u32, ty: &str, name: &str) -> Result<u64, JvmError> {
        let e = self.entry(pid, ty, name)?;
        if !e.is_static || e.address == 0 {
            return Err(JvmError::Unsupported {
                pid,
                what: format!("static field {ty}::{name}"),
            });
        }
        Ok(e.address)
    }

    fn size_of(&self, pid: u32, ty: &str) -> Result<u64, JvmError> {
        self.types
            .get(ty)
            .map(|&(size, _)| size)
            .ok_or_else(|| JvmError::Unsupported {
                pid,
                what: format!("type {ty}"),
            })
    }
}

/// How a blob's code range is stored: JDK 17 keeps pointers, JDK 23+ offsets from the blob.
#[derive(Clone, Copy, Debug)]
enum CodeRange {
    Pointers { begin: Field, end: Field },
    Offsets { code: Field, data: Field },
}

/// How nmethods are told apart from other blobs.
#[derive(Clone, Copy, Debug)]
enum NmethodTest {
    /// JDK 23+: `CodeBlob::_kind` equals `CodeBlobKind::Nmethod`.
    Kind { kind: Field, nmethod: i64 },
    /// Before: the blob's name is "nmethod" (the name every nmethod is created with; the
    /// vtable symbols that would say it are not exported).
    Name,
}

/// Every offset this reader uses, resolved once from the tables.
#[derive(Debug)]
struct Layout {
    /// `CodeCache::_heaps`: a `GrowableArray<CodeHeap*>*` variable.
    heaps: u64,
    array_len: Field,
    array_data: Field,
    heap_size: u64,
    heap_memory: u64,
    heap_segmap: u64,
    heap_log2_segment: Field,
    space_low_boundary: Field,
    space_high: Field,
    block_size: u64,
    block_length: Field,
    block_used: Field,
    blob_name: Field,
    blob_size: Field,
    blob_frame_complete: Field,
    blob_frame_size: Field,
    blob_code: CodeRange,
    nmethod_test: NmethodTest,
    /// `nmethod::_method` (JDK 17: `CompiledMethod::_method`).
    nmethod_method: Field,
    /// Bytes of the header every blob has (an nmethod's `_method` lies beyond).
    blob_header: u64,
    method_const: Field,
    const_constants: Field,
    const_name_index: Field,
    pool_holder: Field,
    pool_length: Field,
    pool_size: u64,
    klass_name: Field,
    symbol_length: Field,
    symbol_body: u64,
    /// `AbstractInterpreter::_code`: a `StubQueue*` variable.
    interpreter_code: u64,
    queue_buffer: Field,
    queue_limit: Field,
    vm_release: Option<u64>,
    interpreter_method_offset: i32,
    /// Where an interpreted frame keeps its caller's stack pointer, in words from rbp (0:
    /// not exported; the caller's sp is then taken as rbp + 16).
    interpreter_sender_sp_offset: i32,
    /// Where an nmethod keeps its debug information; what the tables lack when they lack
    /// it (inlined frames are then not read, everything else is).
    debug: Result<DebugLayout, String>,
}

impl Layout {
    /// `major`: the JDK's feature release (17), which says how its debug information is
    /// compressed.
    fn resolve(pid: u32, vm: &VmStructs, major: Option<i64>) -> Result<Layout, JvmError> {
        let f = |ty: &str, name: &str| vm.field(pid, ty, name);
        let blob_code = CodeRange::resolve(pid, vm)?;
        let nmethod_test = NmethodTest::resolve(pid, vm);
        let (heap_size, block_size) = code_heap_sizes(pid, vm)?;
        let nmethod_method = f("nmethod", "_method").or_else(|_| f("CompiledMethod", "_method"))?;
        let blob_name = f("CodeBlob", "_name")?;
        let blob_size = f("CodeBlob", "_size")?;
        let blob_frame_complete = f("CodeBlob", "_frame_complete_offset")?;
        let blob_frame_size = f("CodeBlob", "_frame_size")?;
        let blob_header = blob_header(
            &[blob_name, blob_size, blob_frame_complete, blob_frame_size],
            blob_code,
            nmethod_test,
        );
        let (interpreter_method_offset, interpreter_sender_sp_offset) = interpreter_slots(pid, vm)?;
        let debug = DebugLayout::resolve(pid, vm, major).map_err(|e| e.to_string());
        if let Err(e) = &debug {
            log::debug!("process {pid}: inlined Java frames not read: {e}");
        }
        Ok(Layout {
            debug,
            interpreter_sender_sp_offset,
            heaps: vm.static_address(pid, "CodeCache", "_heaps")?,
            array_len: f("GrowableArrayBase", "_len")?,
            array_data: f("GrowableArray<int>", "_data")?,
            heap_size,
            heap_memory: vm.entry(pid, "CodeHeap", "_memory")?.offset,
            heap_segmap: vm.entry(pid, "CodeHeap", "_segmap")?.offset,
            heap_log2_segment: f("CodeHeap", "_log2_segment_size")?,
            space_low_boundary: f("VirtualSpace", "_low_boundary")?,
            space_high: f("VirtualSpace", "_high")?,
            block_size,
            block_length: shifted(
                f("HeapBlock::Header", "_length")?,
                vm.entry(pid, "HeapBlock", "_header")?.offset,
            ),
            block_used: shifted(
                f("HeapBlock::Header", "_used")?,
                vm.entry(pid, "HeapBlock", "_header")?.offset,
            ),
            blob_name,
            blob_size,
            blob_frame_complete,
            blob_frame_size,
            blob_code,
            nmethod_test,
            nmethod_method,
            blob_header,
            method_const: f("Method", "_constMethod")?,
            const_constants: f("ConstMethod", "_constants")?,
            const_name_index: f("ConstMethod", "_name_index")?,
            pool_holder: f("ConstantPool", "_pool_holder")?,
            pool_length: f("ConstantPool", "_length")?,
            pool_size: vm.size_of(pid, "ConstantPool")?,
            klass_name: f("Klass", "_name")?,
            symbol_length: f("Symbol", "_length")?,
            symbol_body: vm.entry(pid, "Symbol", "_body")?.offset,
            interpreter_code: vm.static_address(pid, "AbstractInterpreter", "_code")?,
            queue_buffer: f("StubQueue", "_stub_buffer")?,
            queue_limit: f("StubQueue", "_buffer_limit")?,
            vm_release: vm
                .static_address(pid, "Abstract_VM_Version", "_s_vm_release")
                .ok(),
            interpreter_method_offset,
        })
    }
}

impl CodeRange {
    fn resolve(pid: u32, vm: &VmStructs) -> Result<CodeRange, JvmError> {
        let f = |name: &str| vm.field(pid, "CodeBlob", name);
        Ok(match (f("_code_begin"), f("_code_end")) {
            (Ok(begin), Ok(end)) => CodeRange::Pointers { begin, end },
            _ => CodeRange::Offsets {
                code: f("_code_offset")?,
                data: f("_data_offset")?,
            },
        })
    }

    fn fields(self) -> [Field; 2] {
        match self {
            CodeRange::Pointers { begin, end } => [begin, end],
            CodeRange::Offsets { code, data } => [code, data],
        }
    }
}

impl NmethodTest {
    fn resolve(pid: u32, vm: &VmStructs) -> NmethodTest {
        match (
            vm.field(pid, "CodeBlob", "_kind"),
            vm.int_constants.get("CodeBlobKind::Nmethod"),
        ) {
            (Ok(kind), Some(&nmethod)) => NmethodTest::Kind { kind, nmethod },
            _ => NmethodTest::Name,
        }
    }
}

/// `sizeof(CodeHeap)` and `sizeof(HeapBlock)`, refused when implausible.
fn code_heap_sizes(pid: u32, vm: &VmStructs) -> Result<(u64, u64), JvmError> {
    let heap_size = vm.size_of(pid, "CodeHeap")?;
    let block_size = vm.size_of(pid, "HeapBlock")?;
    if heap_size > 64 << 10 || block_size > 64 {
        return Err(JvmError::Invalid {
            pid,
            what: format!("sizeof(CodeHeap) {heap_size}, sizeof(HeapBlock) {block_size}"),
        });
    }
    Ok((heap_size, block_size))
}

/// Bytes of the header every blob has: up to the end of the last of its fields read.
fn blob_header(fields: &[Field], code: CodeRange, test: NmethodTest) -> u64 {
    let kind = match test {
        NmethodTest::Kind { kind, .. } => Some(kind),
        NmethodTest::Name => None,
    };
    fields
        .iter()
        .chain(&code.fields())
        .chain(&kind)
        .map(|f| f.end())
        .max()
        .unwrap_or(0)
}

/// The interpreter frame's Method* and sender-sp slots, in words from rbp.
fn interpreter_slots(pid: u32, vm: &VmStructs) -> Result<(i32, i32), JvmError> {
    // x86_64 interpreter frames (frame_x86.hpp): below the saved rbp lie sender_sp (-1),
    // last_sp (-2), then the Method* (-3). JDK 17 and 25 export only the first two, so
    // the method's slot is derived from last_sp's when it is not exported itself.
    let interpreter_method_offset = match vm
        .int_constants
        .get("frame::interpreter_frame_method_offset")
    {
        Some(&v) => v,
        None => {
            vm.int_constants
                .get("frame::interpreter_frame_last_sp_offset")
                .copied()
                .ok_or_else(|| JvmError::Unsupported {
                    pid,
                    what: "constant frame::interpreter_frame_last_sp_offset".into(),
                })?
                - 1
        }
    } as i32;
    let interpreter_sender_sp_offset = vm
        .int_constants
        .get("frame::interpreter_frame_sender_sp_offset")
        .map_or(0, |&v| v as i32);
    Ok((interpreter_method_offset, interpreter_sender_sp_offset))
}

/// A field of a member at `by` in the enclosing object.
fn shifted(f: Field, by: u64) -> Field {
    Field {
        offset: f.offset + by,
        ..f
    }
}

/// The JDK's feature release (17, 25): `Abstract_VM_Version::_vm_major_version`, else the
/// leading number of the release string.
fn major_version(mem: &Memory, vm: &VmStructs) -> Option<i64> {
    let pid = mem.pid;
    if let Ok(at) = vm.static_address(pid, "Abstract_VM_Version", "_vm_major_version") {
        let mut b = [0u8; 4];
        if mem.read(at, &mut b).is_ok() {
            let v = i64::from(i32::from_le_bytes(b));
            if v > 0 {
                return Some(v);
            }
        }
    }
    let var = vm
        .static_address(pid, "Abstract_VM_Version", "_s_vm_release")
        .ok()?;
    let release = mem.cstr(mem.u64(var).ok()?, MAX_CSTR).ok()?;
    let digits: String = release.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Where an nmethod keeps its debug information — the PcDescs (pc offset → scope), the scopes
/// data (the compressed stream the scopes are encoded in) and the metadata section (the
/// `Method*`s the scopes name by index) — as fields of its header.
#[derive(Clone, Copy, Debug)]
struct DebugLayout {
    /// `nmethod::_compile_id`: with the blob's address, names one compilation.
    compile_id: Field,
    sections: DebugSections,
    /// `sizeof(PcDesc)` and the two fields read of it (`pcDesc.hpp`).
    pc_desc_size: u64,
    pc_offset: Field,
    scope_offset: Field,
    /// How the scopes data is compressed.
    stream: Unsigned5,
    /// Bytes of an nmethod's header that hold every field above.
    header_end: u64,
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
    fn resolve(pid: u32, vm: &VmStructs, major: Option<i64>) -> Result<DebugLayout, JvmError> {
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
    fn locate(&self, addr: u64, buf: &[u8], size: u64, room: usize) -> Option<DebugInfoAt> {
        if self.header_end as usize > room {
            return None;
        }
        let get = |f: Field| f.get(buf, 0);
        // An offset from `base`, within `[0, limit]`.
        let at = |base: u64, f: Field, limit: u64| -> Option<u64> {
            let off = u64::try_from(get(f)?).ok()?;
            (off <= limit).then(|| base.checked_add(off))?
        };
        let blob_end = addr.checked_add(size)?;
        let (metadata, scopes, pcs) = match self.sections {
            DebugSections::InBlob {
                metadata_offset,
                scopes_data_begin,
                scopes_pcs_offset,
                dependencies_offset,
            } => {
                let metadata = at(addr, metadata_offset, size)?;
                let scopes = get(scopes_data_begin)? as u64;
                let pcs = at(addr, scopes_pcs_offset, size)?;
                let pcs_end = at(addr, dependencies_offset, size)?;
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
                let data = get(immutable_data)? as u64;
                let data_size = u64::try_from(get(immutable_data_size)?).ok()?;
                let data_end = data.checked_add(data_size)?;
                let pcs = at(data, scopes_pcs_offset, data_size)?;
                let scopes = at(data, scopes_data_offset, data_size)?;
                if pcs > scopes {
                    return None;
                }
                let metadata = match metadata {
                    MetadataSection::Data {
                        data_offset,
                        metadata_offset,
                    } => {
                        let data_begin = at(addr, data_offset, size)?;
                        (at(data_begin, metadata_offset, size)?, blob_end)
                    }
                    MetadataSection::Mutable {
                        mutable_data,
                        relocation_size,
                        mutable_data_size,
                    } => {
                        let mutable = get(mutable_data)? as u64;
                        let mutable_size = u64::try_from(get(mutable_data_size)?).ok()?;
                        (
                            at(mutable, relocation_size, mutable_size)?,
                            mutable.checked_add(mutable_size)?,
                        )
                    }
                };
                if metadata.0 > metadata.1 {
                    return None;
                }
                (metadata, (scopes, data_end), (pcs, scopes))
            }
        };
        Some(DebugInfoAt {
            compile_id: i32::try_from(get(self.compile_id)?).ok()?,
            metadata,
            scopes,
            pcs,
        })
    }
}

/// Where one nmethod's debug information lies: `[begin, end)` of each part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DebugInfoAt {
    compile_id: i32,
    metadata: (u64, u64),
    scopes: (u64, u64),
    pcs: (u64, u64),
}

impl DebugInfoAt {
    /// The three parts, as `(address, length)` for reading, bounded (a part above its bound
    /// is not believed: a torn header).
    fn parts(&self) -> Option<[(u64, usize); 3]> {
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

/// HotSpot's compressed unsigned integers, UNSIGNED5 from Pack200: one to five bytes, base-64
/// digits, least significant first. A byte below 192 is the last; a byte of 192 or more
/// carries six bits and more follow, up to the fifth byte, which is last whatever its value.
/// Each byte's digit is the byte less the count of excluded byte values: none up to JDK 19
/// (JDK 17 `code/compressedStream.cpp`, `CompressedReadStream::read_int_mb`: `sum += b[i] <<
/// 6*i`, with `L = 192` low codes), one since JDK 20 (JDK-8292758,
/// `utilities/unsigned5.hpp`: `X = 1`, `L = 191`, `sum += (b[i] - X) << 6*i`), which keeps
/// the byte 0 out of the stream. Both stop at a byte below `X + L = 192`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Unsigned5 {
    excluded: u8,
}

impl Unsigned5 {
    const UP_TO_JDK19: Unsigned5 = Unsigned5 { excluded: 0 };
    const SINCE_JDK20: Unsigned5 = Unsigned5 { excluded: 1 };

    fn for_major(major: i64) -> Unsigned5 {
        if major >= 20 {
            Self::SINCE_JDK20
        } else {
            Self::UP_TO_JDK19
        }
    }

    /// The number at `*pos` in `buf`, `*pos` moved past it; None when it runs past `buf` or
    /// holds an excluded byte.
    fn read(self, buf: &[u8], pos: &mut usize) -> Option<u32> {
        let mut sum = 0u32;
        for i in 0..5 {
            let b = *buf.get(pos.checked_add(i)?)?;
            let digit = u32::from(b.checked_sub(self.excluded)?);
            // The JVM sums in 32 bits: a fifth byte's high bits fall off.
            sum = sum.wrapping_add(digit << (6 * i));
            if b < 192 || i == 4 {
                *pos += i + 1;
                return Some(sum);
            }
        }
        None
    }
}

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
struct DebugInfo<'a> {
    /// The PcDesc array.
    pcs: &'a [u8],
    /// The scopes data, where scope decode offsets point.
    scopes: &'a [u8],
    /// The metadata array (`Metadata*`, 8 bytes each).
    metadata: &'a [u8],
    stream: Unsigned5,
    /// The nmethod's own `Method*`: every chain must end in it.
    method: u64,
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
    fn pc_scopes(&self, l: &DebugLayout) -> Result<Vec<PcScopes>, String> {
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
    fn inlining(&self, l: &DebugLayout) -> Result<Option<Inlining>, String> {
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

/// What one `Jvm::read_inlining` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InliningRead {
    /// Nmethods whose debug information was read and decoded now.
    pub decoded: usize,
    /// Of those, nmethods that inlined something.
    pub inlined: usize,
    /// Nmethods read before (cached).
    pub cached: usize,
    /// Nmethods left for a later call: the time budget ran out.
    pub deferred: usize,
    /// Nmethods whose debug information could not be read or did not decode (freed or
    /// being written while read); tried again next call.
    pub failed: usize,
    /// Bytes of debug information read from the target.
    pub bytes: usize,
}

/// What a code blob is, as far as unwinding cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobKind {
    /// The template interpreter's code: frames are rbp-based and hold their `Method*`.
    Interpreter,
    /// A compiled Java method.
    Nmethod { method: u64 },
    /// Anything else: stubs, adapters, runtime blobs.
    Stub,
}

/// One blob of the code cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeBlob {
    /// First instruction.
    pub start: u64,
    /// End of the instructions (exclusive).
    pub end: u64,
    /// First instruction at which the frame is complete (`_frame_complete_offset` counts
    /// from the code's start). Blobs whose frame is never complete get `end`.
    pub frame_complete: u64,
    /// Size of the blob's frame in 8-byte words, the return address included; 0 where the
    /// JVM records none (the interpreter, C1's frameless stubs).
    pub frame_size_words: u32,
    pub kind: BlobKind,
    /// The blob's name; for nmethods the Java method's (`JitWork.leaf`) when it could be read.
    pub name: String,
    /// For an nmethod: where its debug information lies, from its header.
    debug: Option<DebugInfoAt>,
    /// For an nmethod that inlined methods: their chains by pc, once `Jvm::read_inlining`
    /// has read them.
    pub inlining: Option<Arc<Inlining>>,
}

impl CodeBlob {
    /// The nmethod's compile id (with its start, it names one compilation); None for other
    /// blobs, or when the JVM's tables do not say where it lies.
    pub fn compile_id(&self) -> Option<i32> {
        self.debug.map(|d| d.compile_id)
    }

    /// The inlined methods at `addr`, an address inside an instruction of this blob (a
    /// sampled pc, or a return address minus one: what the symbolizer looks up), as
    /// `Method*`s from the nmethod's own method (first) to the innermost inlined one
    /// (last); None outside the blob, in an nmethod that inlined nothing, before
    /// `Jvm::read_inlining` read it, or where no scope is recorded. See `Inlining::at`.
    pub fn inlined_at(&self, addr: u64) -> Option<&[u64]> {
        if !(self.start..self.end).contains(&addr) {
            return None;
        }
        self.inlining.as_ref()?.at(addr - self.start)
    }
}

/// Segment-map value of a segment outside any block (`CodeHeap::free_sentinel`).
const FREE_SENTINEL: u8 = 0xFF;
/// Reads of the code heap are done in pieces of this size.
const READ_CHUNK: usize = 1 << 20;
/// A code heap's committed size above this is not believed.
const MAX_HEAP: u64 = 4 << 30;

/// Where the blocks of one CodeHeap lie.
struct HeapSpan {
    /// The heap's first byte in the target.
    low: u64,
    /// log2 of its segment size.
    log2: i64,
    /// Bytes from `low` to the end of the last used segment.
    used: usize,
    /// The last segment not free.
    last: usize,
    /// The segments up to `last` where a block may start.
    starts: Vec<usize>,
}

/// A JVM attached to: its memory and its resolved layout.
pub struct Jvm {
    pid: u32,
    mem: Memory,
    layout: Layout,
    interpreter: (u64, u64),
    /// Names of Java methods by `Method*`. A Method* can be reused after its class is
    /// unloaded; names are cached all the same, as the profiler attaches for seconds.
    methods: HashMap<u64, String>,
    /// Blob names by the address of their C string (they are static strings in libjvm).
    blob_names: HashMap<u64, String>,
    /// Buffers kept between calls to `code_blobs` (segment map; block headers or heap span).
    segmap: Vec<u8>,
    heap: Vec<u8>,
    /// The lowest and highest committed addresses of the code heaps at the last walk.
    heaps: (u64, u64),
    /// Inlining read per nmethod, by (code start, compile id): an installed nmethod's
    /// debug information never changes, so it is read once.
    inlining: HashMap<(u64, i32), ReadInlining>,
    inlining_calls: u64,
}

/// One nmethod's inlining as read (None: it inlined nothing), and the number of the last
/// `read_inlining` call that saw the nmethod (entries of nmethods gone are dropped).
struct ReadInlining {
    seen: u64,
    inlining: Option<Arc<Inlining>>,
}

/// A hidden class's name without the address the JVM appends to it (`JitWork$$Lambda+0x…`,
/// `Foo$$Lambda$12/0x…`): the same lambda is one frame name across runs and captures, so
/// `profiler diff` lines it up.
fn stable_class_name(class: &str) -> &str {
    for sep in ["+0x", ".0x"] {
        if let Some((head, tail)) = class.rsplit_once(sep)
            && !tail.is_empty()
            && tail.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return head;
        }
    }
    class
}

impl Jvm {
    /// Reads the JVM's tables and resolves the offsets used. `Ok(None)` when the process
    /// maps no libjvm.so.
    pub fn attach(pid: u32) -> Result<Option<Jvm>, JvmError> {
        let Some(lib) = Libjvm::find(pid)? else {
            return Ok(None);
        };
        let file = File::open(format!("/proc/{pid}/mem")).map_err(|source| JvmError::Io {
            pid,
            what: "opening /proc/PID/mem".into(),
            source,
        })?;
        let mem = Memory::live(pid, file);
        let vm = VmStructs::read(&mem, &lib)?;
        let layout = Layout::resolve(pid, &vm, major_version(&mem, &vm))?;
        let mut jvm = Jvm {
            pid,
            mem,
            layout,
            interpreter: (0, 0),
            methods: HashMap::new(),
            blob_names: HashMap::new(),
            segmap: Vec::new(),
            heap: Vec::new(),
            heaps: (0, 0),
            inlining: HashMap::new(),
            inlining_calls: 0,
        };
        // A JVM still starting has no interpreter yet: `code_blobs` tries again.
        jvm.interpreter = jvm.read_interpreter().unwrap_or((0, 0));
        Ok(Some(jvm))
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The VM's release string ("17.0.15+6-Debian-1deb12u1"), if the JVM exports it.
    pub fn version(&self) -> Option<String> {
        let var = self.layout.vm_release?;
        let s = self.mem.u64(var).ok()?;
        (s != 0).then(|| self.mem.cstr(s, MAX_CSTR).ok())?
    }

    /// The template interpreter's code `[start, end)`; `(0, 0)` until the JVM generated it.
    pub fn interpreter(&self) -> (u64, u64) {
        self.interpreter
    }

    /// Where an interpreted frame keeps its `Method*`: this many words from its rbp (-3 on
    /// x86_64).
    pub fn interpreter_method_offset_words(&self) -> i32 {
        self.layout.interpreter_method_offset
    }

    /// Where an interpreted frame keeps its caller's stack pointer (the "sender sp", which an
    /// adapter between compiled code and the interpreter may have moved below rbp + 16), in
    /// words from its rbp; 0 when the JVM does not export it.
    pub fn interpreter_sender_sp_offset_words(&self) -> i32 {
        self.layout.interpreter_sender_sp_offset
    }

    fn read_interpreter(&self) -> Result<(u64, u64), JvmError> {
        let l = &self.layout;
        let queue = self.mem.u64(l.interpreter_code)?;
        if queue == 0 {
            return Err(self
                .mem
                .invalid("the interpreter is not generated yet".into()));
        }
        let mut buf = [0u8; 64];
        let need = l.queue_buffer.end().max(l.queue_limit.end()) as usize;
        let buf = buf
            .get_mut(..need)
            .ok_or_else(|| self.mem.invalid("StubQueue layout".into()))?;
        self.mem.read(queue, buf)?;
        let start = l.queue_buffer.get(buf, 0).unwrap_or(0) as u64;
        let limit = l.queue_limit.get(buf, 0).unwrap_or(0);
        if start == 0 || limit <= 0 {
            return Err(self
                .mem
                .invalid(format!("implausible interpreter StubQueue at {queue:#x}")));
        }
        Ok((start, start + limit as u64))
    }

    /// Every blob in the code cache now. The JVM changes the cache while it is read: blobs
    /// that do not look whole are left out rather than failing the walk.
    pub fn code_blobs(&mut self) -> Result<Vec<CodeBlob>, JvmError> {
        if self.interpreter == (0, 0) {
            self.interpreter = self.read_interpreter().unwrap_or((0, 0));
        }
        let l = &self.layout;
        let array = self.mem.u64(l.heaps)?;
        if array == 0 {
            // The code cache is not initialised yet.
            return Ok(Vec::new());
        }
        let mut buf = [0u8; 32];
        let need = l.array_len.end().max(l.array_data.end()) as usize;
        let buf = buf
            .get_mut(..need)
            .ok_or_else(|| self.mem.invalid("GrowableArray layout".into()))?;
        self.mem.read(array, buf)?;
        let len = l.array_len.get(buf, 0).unwrap_or(0);
        let data = l.array_data.get(buf, 0).unwrap_or(0) as u64;
        if !(0..=64).contains(&len) || (len > 0 && data == 0) {
            return Err(self
                .mem
                .invalid(format!("implausible CodeCache::_heaps ({len} heaps)")));
        }
        let mut heaps = vec![0u8; len as usize * 8];
        self.mem.read(data, &mut heaps)?;
        self.heaps = (u64::MAX, 0);
        let mut blobs = Vec::new();
        for heap in heaps.chunks_exact(8) {
            let heap = le(heap, 0, 8).unwrap_or(0);
            if heap != 0 {
                self.heap_blobs(heap, &mut blobs)?;
            }
        }
        Ok(blobs)
    }

    /// Where the code heaps lay at the last `code_blobs` (their lowest and highest committed
    /// addresses): all the space the JIT can put code in until the next walk. `(0, 0)`
    /// before a walk found any.
    pub fn code_heaps(&self) -> (u64, u64) {
        if self.heaps.1 > self.heaps.0 {
            self.heaps
        } else {
            (0, 0)
        }
    }

    /// The used blocks of one CodeHeap. Its segment map (a byte per segment) says where
    /// blocks may start; the headers there are gathered with a few `process_vm_readv` calls
    /// (a thousand headers each), or, if that fails, read with the whole used span of the
    /// heap. Each header's length then says where the next block starts.
    fn heap_blobs(&mut self, heap: u64, blobs: &mut Vec<CodeBlob>) -> Result<(), JvmError> {
        let Some(span) = self.heap_span(heap)? else {
            return Ok(());
        };
        let l = &self.layout;
        // Bytes read per block: the block header, the blob header, an nmethod's `_method`
        // and the fields that locate its debug information.
        let debug_end = l.debug.as_ref().map_or(0, |d| d.header_end);
        let header = (l.block_size + l.blob_header.max(l.nmethod_method.end()).max(debug_end))
            .next_multiple_of(8) as usize;
        let mut buf = std::mem::take(&mut self.heap);
        let gathered = self.gather(&span, header, &mut buf);
        if !gathered {
            buf.resize(span.used, 0);
            for (i, chunk) in buf.chunks_mut(READ_CHUNK).enumerate() {
                if let Err(e) = self.mem.read(span.low + (i * READ_CHUNK) as u64, chunk) {
                    self.heap = buf;
                    return Err(e);
                }
            }
        }
        self.decode_blocks(&span, &buf, gathered.then_some(header), blobs);
        self.heap = buf;
        Ok(())
    }

    /// Where the blocks of the CodeHeap at `heap` lie, from its header and its segment map
    /// (read into `self.segmap`); None when no block is in use.
    fn heap_span(&mut self, heap: u64) -> Result<Option<HeapSpan>, JvmError> {
        let l = &self.layout;
        let mut h = vec![0u8; l.heap_size as usize];
        self.mem.read(heap, &mut h)?;
        let space = |at: u64| -> Option<(u64, u64)> {
            let at = at as usize;
            Some((
                l.space_low_boundary.get(&h, at)? as u64,
                l.space_high.get(&h, at)? as u64,
            ))
        };
        let bad = |what: &str| self.mem.invalid(format!("CodeHeap at {heap:#x}: {what}"));
        let (low, high) = space(l.heap_memory).ok_or_else(|| bad("layout"))?;
        let (map_low, map_high) = space(l.heap_segmap).ok_or_else(|| bad("layout"))?;
        let log2 = l
            .heap_log2_segment
            .get(&h, 0)
            .ok_or_else(|| bad("layout"))?;
        if !(4..=16).contains(&log2) || high < low || high - low > MAX_HEAP || map_high < map_low {
            return Err(bad("implausible bounds"));
        }
        self.heaps = (self.heaps.0.min(low), self.heaps.1.max(high));
        let segments = ((high - low) >> log2).min(map_high - map_low) as usize;
        self.segmap.resize(segments, 0);
        self.mem.read(map_low, &mut self.segmap)?;
        // Segments past the last block are free: read no further.
        let Some(last) = self.segmap.iter().rposition(|&s| s != FREE_SENTINEL) else {
            return Ok(None);
        };
        Ok(Some(HeapSpan {
            low,
            log2,
            used: ((last as u64 + 1) << log2) as usize,
            last,
            // A block starts where the map holds 0 (a large block may hold more zeros
            // inside: its header's length skips them).
            starts: (0..=last).filter(|&s| self.segmap[s] == 0).collect(),
        }))
    }

    /// The blobs of the used blocks of `span`, from `buf`: the used span of the heap as it
    /// lies, or, when `gathered` is the size of the pieces, each block start's piece one
    /// after the other.
    fn decode_blocks(
        &mut self,
        span: &HeapSpan,
        buf: &[u8],
        gathered: Option<usize>,
        blobs: &mut Vec<CodeBlob>,
    ) {
        let l = &self.layout;
        let (block_length, block_used, block_size) = (l.block_length, l.block_used, l.block_size);
        let mut next = 0usize;
        for (k, &seg) in span.starts.iter().enumerate() {
            if seg < next {
                // Inside the previous block.
                continue;
            }
            let at = seg << span.log2;
            let block = match gathered {
                Some(header) => &buf[k * header..(k + 1) * header],
                None => &buf[at..span.used],
            };
            let length = block_length.get(block, 0).unwrap_or(0) as usize;
            let in_use = block_used.get(block, 0).unwrap_or(0) != 0;
            if length == 0 || seg + length > span.last + 1 {
                // Torn by the JVM changing the heap: look at the next start.
                continue;
            }
            next = seg + length;
            if in_use {
                let addr = span.low + (at as u64) + block_size;
                if let Some(room) = (length << span.log2).checked_sub(block_size as usize)
                    && let Some(b) = block.get(block_size as usize..)
                    && let Some(blob) = self.decode_blob(addr, b, room)
                {
                    blobs.push(blob);
                }
            }
        }
    }

    /// Reads `header` bytes at each block start (a segment index) into `buf`, one after the
    /// other, with `process_vm_readv` (up to 1024 pieces a call). False if a call fails or
    /// reads short: the caller falls back to reading the whole span.
    fn gather(&self, span: &HeapSpan, header: usize, buf: &mut Vec<u8>) -> bool {
        const IOV_MAX: usize = 1024;
        let HeapSpan {
            low,
            log2,
            used,
            ref starts,
            ..
        } = *span;
        buf.clear();
        buf.resize(starts.len() * header, 0);
        for (batch, chunk) in starts.chunks(IOV_MAX).zip(buf.chunks_mut(IOV_MAX * header)) {
            let mut parts = Vec::with_capacity(batch.len());
            let mut want = 0;
            for (&seg, piece) in batch.iter().zip(chunk.chunks_mut(header)) {
                let at = seg << log2;
                // The last block may end closer than `header`: never read past the span.
                let len = header.min(used - at);
                parts.push((low + at as u64, &mut piece[..len]));
                want += len;
            }
            let got = vm_readv(self.pid, &mut parts);
            if got < 0 || got as usize != want {
                return false;
            }
        }
        true
    }

    /// The blob at `addr`, its header at the start of `buf`, `room` bytes left in its block;
    /// None if it does not fit its block.
    fn decode_blob(&mut self, addr: u64, buf: &[u8], room: usize) -> Option<CodeBlob> {
        let l = &self.layout;
        if l.blob_header as usize > room {
            return None;
        }
        let size = l.blob_size.get(buf, 0)?;
        if size <= 0 || size as usize > room {
            return None;
        }
        let (start, end) = match l.blob_code {
            CodeRange::Pointers { begin, end } => {
                (begin.get(buf, 0)? as u64, end.get(buf, 0)? as u64)
            }
            CodeRange::Offsets { code, data } => (
                addr.checked_add(code.get(buf, 0)? as u64)?,
                addr.checked_add(data.get(buf, 0)? as u64)?,
            ),
        };
        if start < addr || end < start || end > addr + size as u64 {
            return None;
        }
        let complete = l.blob_frame_complete.get(buf, 0)?;
        let frame_complete = if complete >= 0 {
            (start + complete as u64).min(end)
        } else {
            end
        };
        // C1's frameless runtime stubs record -1.
        let frame_size_words = u32::try_from(l.blob_frame_size.get(buf, 0)?).unwrap_or(0);
        let name_ptr = l.blob_name.get(buf, 0)? as u64;
        let is_nmethod_kind = match l.nmethod_test {
            NmethodTest::Kind { kind, nmethod } => Some(kind.get(buf, 0)? == nmethod),
            NmethodTest::Name => None,
        };
        let method_field = l.nmethod_method;
        let blob_name = self.blob_name(name_ptr);
        // JDK 17 names compiled Java methods "nmethod" and native method wrappers
        // "native nmethod"; both are nmethods with a Method*.
        let is_nmethod = is_nmethod_kind
            .unwrap_or_else(|| blob_name == "nmethod" || blob_name == "native nmethod");
        // Only nmethods have the field, beyond the header every blob has.
        let method = match method_field.get(buf, 0) {
            Some(m) if is_nmethod && method_field.end() as usize <= room => m as u64,
            _ => 0,
        };
        let (kind, name) = if is_nmethod && method != 0 {
            // A method whose name cannot be read (being unloaded) keeps the blob's name.
            let name = self.method_name(method).unwrap_or(blob_name);
            (BlobKind::Nmethod { method }, name)
        } else if start >= self.interpreter.0 && end <= self.interpreter.1 && start < end
            || blob_name == "Interpreter"
        {
            (BlobKind::Interpreter, blob_name)
        } else {
            (BlobKind::Stub, blob_name)
        };
        let debug = match (&kind, &self.layout.debug) {
            (BlobKind::Nmethod { .. }, Ok(d)) => d.locate(addr, buf, size as u64, room),
            _ => None,
        };
        Some(CodeBlob {
            start,
            end,
            frame_complete,
            frame_size_words,
            kind,
            name,
            debug,
            inlining: None,
        })
    }

    /// Sets `inlining` of the nmethods among `blobs` (all the blobs of one `code_blobs`
    /// call: entries for nmethods not among them are dropped). An nmethod's debug
    /// information is read once (keyed by its code start and compile id) and reused; new
    /// nmethods are read a batch at a time until `budget` is spent, the rest on the next
    /// call.
    pub fn read_inlining(&mut self, blobs: &mut [CodeBlob], budget: Duration) -> InliningRead {
        let started = Instant::now();
        self.inlining_calls += 1;
        let call = self.inlining_calls;
        let mut read = InliningRead::default();
        let pending = self.reuse_inlining(blobs, call, &mut read);
        let mut buf = Vec::new();
        let mut rest = &pending[..];
        while !rest.is_empty() {
            // The first batch is read whatever the budget, so every call makes progress.
            if rest.len() < pending.len() && started.elapsed() >= budget {
                read.deferred = rest.len();
                break;
            }
            let parts = Self::next_inlining_batch(blobs, rest);
            let (batch, tail) = rest.split_at(parts.len());
            rest = tail;
            let ranges: Vec<(u64, usize)> = parts.iter().flatten().flatten().copied().collect();
            let ok = self.mem.read_ranges(&ranges, &mut buf);
            for (&i, bytes) in batch.iter().zip(Self::cut_parts(&parts, &buf, &ok)) {
                match bytes {
                    Some(bytes) => self.decode_inlining(&mut blobs[i], bytes, call, &mut read),
                    None => read.failed += 1,
                }
            }
        }
        self.inlining.retain(|_, r| r.seen == call);
        read
    }

    /// Gives the blobs whose nmethod was read on an earlier call their inlining again
    /// (marking the entry seen by `call`, so it is kept); returns the indices in `blobs` of
    /// the nmethods still to read.
    fn reuse_inlining(
        &mut self,
        blobs: &mut [CodeBlob],
        call: u64,
        read: &mut InliningRead,
    ) -> Vec<usize> {
        let mut pending = Vec::new();
        for (i, b) in blobs.iter_mut().enumerate() {
            let Some(at) = b.debug else { continue };
            match self.inlining.get_mut(&(b.start, at.compile_id)) {
                Some(known) => {
                    known.seen = call;
                    b.inlining = known.inlining.clone();
                    read.cached += 1;
                }
                None => pending.push(i),
            }
        }
        pending
    }

    /// The parts (PcDescs, scopes, metadata) of the next batch of `rest` (indices in
    /// `blobs`): as many nmethods as one `process_vm_readv` and one look at the clock are
    /// for, the first one whatever its size. None for an nmethod whose parts are not known.
    fn next_inlining_batch(blobs: &[CodeBlob], rest: &[usize]) -> Vec<Option<[(u64, usize); 3]>> {
        // Nmethods read per `process_vm_readv` (three parts each), and between two looks at
        // the clock; and the bytes a batch may hold beyond its first nmethod's.
        const BATCH: usize = 64;
        const BATCH_BYTES: usize = 4 << 20;
        let mut parts: Vec<Option<[(u64, usize); 3]>> = Vec::with_capacity(BATCH);
        let mut batch_bytes = 0;
        for &i in rest.iter().take(BATCH) {
            let p = blobs[i].debug.and_then(|d| d.parts());
            let len: usize = p.iter().flatten().map(|r| r.1).sum();
            if !parts.is_empty() && batch_bytes + len > BATCH_BYTES {
                break;
            }
            batch_bytes += len;
            parts.push(p);
        }
        parts
    }

    /// Each nmethod's three parts cut out of `buf`, which holds the ranges of `parts` one
    /// after the other as `read_ranges` left them (`ok`: which were read). None for an
    /// nmethod whose parts were not known or not all read: its information is not whole.
    fn cut_parts<'a>(
        parts: &[Option<[(u64, usize); 3]>],
        buf: &'a [u8],
        ok: &[bool],
    ) -> Vec<Option<[&'a [u8]; 3]>> {
        let mut next = 0;
        let mut part = 0;
        parts
            .iter()
            .map(|parts| {
                // Not known: no ranges were asked for, so `next` and `part` stay.
                let parts = parts.as_ref()?;
                let mut bytes: [&[u8]; 3] = [&[]; 3];
                let mut whole = true;
                for (k, &(_, len)) in parts.iter().enumerate() {
                    bytes[k] = &buf[next..next + len];
                    whole &= ok[part];
                    next += len;
                    part += 1;
                }
                whole.then_some(bytes)
            })
            .collect()
    }

    /// Decodes the inlining of the nmethod `b` from its parts, read whole, and keeps it for
    /// the next calls (a failure is not kept: the nmethod is read again next time).
    fn decode_inlining(
        &mut self,
        b: &mut CodeBlob,
        bytes: [&[u8]; 3],
        call: u64,
        read: &mut InliningRead,
    ) {
        read.bytes += bytes.iter().map(|b| b.len()).sum::<usize>();
        let BlobKind::Nmethod { method } = b.kind else {
            return;
        };
        let Ok(layout) = &self.layout.debug else {
            return;
        };
        let info = DebugInfo {
            pcs: bytes[0],
            scopes: bytes[1],
            metadata: bytes[2],
            stream: layout.stream,
            method,
        };
        match info.inlining(layout) {
            Ok(inlining) => {
                let inlining = inlining.map(Arc::new);
                read.decoded += 1;
                read.inlined += usize::from(inlining.is_some());
                if let Some(at) = b.debug {
                    self.inlining.insert(
                        (b.start, at.compile_id),
                        ReadInlining {
                            seen: call,
                            inlining: inlining.clone(),
                        },
                    );
                }
                b.inlining = inlining;
            }
            Err(e) => {
                log::debug!(
                    "process {}: the debug information of {} at {:#x} did not decode: {e}",
                    self.pid,
                    b.name,
                    b.start
                );
                read.failed += 1;
            }
        }
    }

    /// Every PcDesc of an nmethod with its whole chain of scopes (bcis included), read now.
    pub fn pc_scopes(&self, blob: &CodeBlob) -> Result<Vec<PcScopes>, JvmError> {
        let layout = self
            .layout
            .debug
            .as_ref()
            .map_err(|what| JvmError::Unsupported {
                pid: self.pid,
                what: what.clone(),
            })?;
        let bad = |what: String| {
            self.mem
                .invalid(format!("nmethod at {:#x}: {what}", blob.start))
        };
        let BlobKind::Nmethod { method } = blob.kind else {
            return Err(bad("not an nmethod".into()));
        };
        let parts = blob
            .debug
            .and_then(|d| d.parts())
            .ok_or_else(|| bad("its debug information cannot be located".into()))?;
        let mut bytes: [Vec<u8>; 3] = Default::default();
        for (b, &(addr, len)) in bytes.iter_mut().zip(&parts) {
            b.resize(len, 0);
            self.mem.read(addr, b)?;
        }
        DebugInfo {
            pcs: &bytes[0],
            scopes: &bytes[1],
            metadata: &bytes[2],
            stream: layout.stream,
            method,
        }
        .pc_scopes(layout)
        .map_err(bad)
    }

    fn blob_name(&mut self, ptr: u64) -> String {
        if ptr == 0 {
            return String::new();
        }
        if let Some(n) = self.blob_names.get(&ptr) {
            return n.clone();
        }
        let name = self.mem.cstr(ptr, MAX_CSTR).unwrap_or_default();
        self.blob_names.insert(ptr, name.clone());
        name
    }

    /// `Class.method` of a `Method*` ("JitWork.leaf", "java.lang.Thread.sleep"), checked to
    /// be a plausible name, cached per `Method*`.
    pub fn method_name(&mut self, method: u64) -> Result<String, JvmError> {
        if let Some(n) = self.methods.get(&method) {
            return Ok(n.clone());
        }
        let l = &self.layout;
        let bad = |what: String| self.mem.invalid(format!("Method* {method:#x}: {what}"));
        let const_method = self.ptr(method, l.method_const)?;
        let pool = self.ptr(const_method, l.const_constants)?;
        let name_index = self.int(const_method, l.const_name_index)?;
        let pool_length = self.int(pool, l.pool_length)?;
        if name_index <= 0 || name_index >= pool_length {
            return Err(bad(format!(
                "name index {name_index} outside its constant pool of {pool_length}"
            )));
        }
        let name = self.mem.u64(pool + l.pool_size + name_index as u64 * 8)?;
        let holder = self.ptr(pool, l.pool_holder)?;
        let class = self.ptr(holder, l.klass_name)?;
        let class = self.symbol(class)?.replace('/', ".");
        let name = self.symbol(name)?;
        let full = format!("{}.{name}", stable_class_name(&class));
        self.methods.insert(method, full.clone());
        Ok(full)
    }

    /// A non-null pointer field of the object at `at`.
    fn ptr(&self, at: u64, f: Field) -> Result<u64, JvmError> {
        let v = self.int(at, f)? as u64;
        if v == 0 || at == 0 {
            return Err(self
                .mem
                .invalid(format!("null pointer at {at:#x}+{}", f.offset)));
        }
        Ok(v)
    }

    fn int(&self, at: u64, f: Field) -> Result<i64, JvmError> {
        if at == 0 {
            return Err(self.mem.invalid("null object".into()));
        }
        let mut buf = [0u8; 8];
        self.mem.read(at + f.offset, &mut buf[..f.size])?;
        // The field was read alone: it sits at 0 in the buffer.
        Field { offset: 0, ..f }
            .get(&buf, 0)
            .ok_or_else(|| self.mem.invalid("field layout".into()))
    }

    /// A Symbol's text: bounded, valid UTF-8 and without control characters.
    fn symbol(&self, sym: u64) -> Result<String, JvmError> {
        let l = &self.layout;
        let len = self.int(sym, l.symbol_length)?;
        if len <= 0 || len as usize > MAX_SYMBOL {
            return Err(self
                .mem
                .invalid(format!("Symbol at {sym:#x} has length {len}")));
        }
        let mut body = vec![0u8; len as usize];
        self.mem.read(sym + l.symbol_body, &mut body)?;
        match String::from_utf8(body) {
            Ok(s) if !s.chars().any(char::is_control) => Ok(s),
            _ => Err(self
                .mem
                .invalid(format!("Symbol at {sym:#x} is not a printable name"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_classes_lose_their_address() {
        assert_eq!(
            stable_class_name("JitWork$$Lambda+0x0000000054040210"),
            "JitWork$$Lambda"
        );
        assert_eq!(
            stable_class_name("Foo$$Lambda$12.0x00007f00"),
            "Foo$$Lambda$12"
        );
        assert_eq!(stable_class_name("java.lang.Thread"), "java.lang.Thread");
        assert_eq!(stable_class_name("a.b+0xzz"), "a.b+0xzz");
    }

    #[test]
    fn jvm_not_a_jvm_is_none() {
        let attached = Jvm::attach(std::process::id()).expect("read our own maps");
        assert!(attached.is_none());
    }

    /// UNSIGNED5 written from its definition (JDK 17 `CompressedWriteStream::write_int_mb`,
    /// JDK 20+ `UNSIGNED5::write_uint`): while the rest is not below `L` (and fewer than four
    /// bytes were written), write the high code `X + L + (rest - L) % 64` and go on with
    /// `(rest - L) / 64`; end with the low code `X + rest`.
    fn encode(value: u32, format: Unsigned5) -> Vec<u8> {
        let x = u32::from(format.excluded);
        let l = 256 - 64 - x;
        let mut out = Vec::new();
        let mut rest = value;
        for i in 0..5 {
            if rest < l || i == 4 {
                out.push(u8::try_from(x + rest).expect("a byte"));
                break;
            }
            rest -= l;
            out.push(u8::try_from(x + l + rest % 64).expect("a byte"));
            rest >>= 6;
        }
        out
    }

    fn decode_all(bytes: &[u8], format: Unsigned5) -> Option<Vec<u32>> {
        let mut pos = 0;
        let mut out = Vec::new();
        while pos < bytes.len() {
            out.push(format.read(bytes, &mut pos)?);
        }
        Some(out)
    }

    #[test]
    fn unsigned5_as_jdk17_writes_it() {
        let f = Unsigned5::UP_TO_JDK19;
        // One byte up to 191; 192 + 64 * (the rest) after that (L = 192, H = 64, X = 0).
        let cases: &[(&[u8], u32)] = &[
            (&[0x00], 0),
            (&[0x05], 5),
            (&[0xbf], 191),
            (&[0xc0, 0x00], 192),
            (&[0xff, 0x00], 255),
            (&[0xc0, 0x01], 256),
            (&[0xff, 0xbf], 255 + 191 * 64),
            (&[0xc0, 0xc0, 0x00], 256 + 191 * 64),
            // 255 + 252 * 64 + 252 * 64^2 + 252 * 64^3 + 252 * 64^4
            (&[0xff, 0xfc, 0xfc, 0xfc, 0xfc], u32::MAX),
        ];
        for &(bytes, value) in cases {
            assert_eq!(decode_all(bytes, f), Some(vec![value]), "{bytes:x?}");
            assert_eq!(encode(value, f), bytes, "{value}");
        }
        // The JVM sums in 32 bits: what no writer writes wraps.
        assert_eq!(
            f.read(&[0xff; 5], &mut 0),
            Some((255u64 * (1 + 64 + 64 * 64 + 64 * 64 * 64 + 64 * 64 * 64 * 64)) as u32)
        );
        // Runs past the end: a high byte last.
        assert_eq!(f.read(&[0xc0], &mut 0), None);
        assert_eq!(f.read(&[0x10, 0xc5], &mut 1), None);
        // A fifth byte ends the number whatever its value.
        let mut pos = 0;
        assert_eq!(
            f.read(&[0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0x07], &mut pos),
            Some(192 + (192 << 6) + (192 << 12) + (192 << 18) + (192 << 24))
        );
        assert_eq!(pos, 5);
    }

    #[test]
    fn unsigned5_as_jdk20_writes_it() {
        let f = Unsigned5::SINCE_JDK20;
        // Every digit is one less than its byte (X = 1), so no byte is 0 (L = 191).
        let cases: &[(&[u8], u32)] = &[
            (&[0x01], 0),
            (&[0xbf], 190),
            (&[0xc0, 0x01], 191),
            (&[0xff, 0x01], 254),
            (&[0xc0, 0x02], 255),
        ];
        for &(bytes, value) in cases {
            assert_eq!(decode_all(bytes, f), Some(vec![value]), "{bytes:x?}");
            assert_eq!(encode(value, f), bytes, "{value}");
        }
        assert_eq!(f.read(&[0x00], &mut 0), None, "0 is excluded");
        assert_eq!(f.read(&[0xc0, 0x00], &mut 0), None, "0 is excluded");
    }

    #[test]
    fn unsigned5_round_trips() {
        let mut values: Vec<u32> = (0..70_000).collect();
        for shift in 0..32 {
            let v = 1u32 << shift;
            values.extend([v - 1, v, v + 1]);
        }
        values.extend([
            u32::MAX - 1,
            u32::MAX,
            0x8000_0000,
            0x0208_2080,
            0x0308_207f,
        ]);
        for f in [Unsigned5::UP_TO_JDK19, Unsigned5::SINCE_JDK20] {
            let mut stream = Vec::new();
            for &v in &values {
                let bytes = encode(v, f);
                assert!((1..=5).contains(&bytes.len()));
                stream.extend(bytes);
            }
            assert_eq!(
                decode_all(&stream, f).as_deref(),
                Some(&values[..]),
                "{f:?}"
            );
        }
    }

    /// An nmethod's debug information as HotSpot records it, built by hand: the PcDescs
    /// (16 bytes: `_pc_offset`, `_scope_decode_offset`, `_obj_decode_offset`, `_flags`), the
    /// scopes data and the metadata.
    struct Recorded {
        pcs: Vec<u8>,
        scopes: Vec<u8>,
        metadata: Vec<u8>,
    }

    const OUTER: u64 = 0x7f00_0000_1000;
    const INNER: u64 = 0x7f00_0000_2000;
    const LEAF: u64 = 0x7f00_0000_3000;

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

    fn pc_layout(stream: Unsigned5) -> DebugLayout {
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
    fn recorded(f: Unsigned5) -> (Recorded, [u32; 4]) {
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

    fn info(r: &Recorded, stream: Unsigned5) -> DebugInfo<'_> {
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

        let blob = CodeBlob {
            start: 0x1000,
            end: 0x1100,
            frame_complete: 0x1010,
            frame_size_words: 4,
            kind: BlobKind::Nmethod { method: OUTER },
            name: "Outer.outer".into(),
            debug: None,
            inlining: Some(Arc::new(inlining)),
        };
        assert_eq!(blob.inlined_at(0x1000 + 29), Some(&[OUTER, INNER][..]));
        assert_eq!(blob.inlined_at(0xfff), None);
        assert_eq!(blob.inlined_at(0x1100), None);
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

    /// A recorded image of a target's memory: (address, bytes) pieces.
    struct Image(Vec<(u64, Vec<u8>)>);

    impl TargetMemory for Image {
        fn read_at(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
            let piece = self.0.iter().find_map(|(start, bytes)| {
                let at = usize::try_from(addr.checked_sub(*start)?).ok()?;
                bytes.get(at..at.checked_add(buf.len())?)
            });
            let piece = piece.ok_or(std::io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(piece);
            Ok(())
        }
    }

    /// Lays out libjvm's exported variables, tables and strings in one piece of memory.
    struct ImageWriter {
        base: u64,
        bytes: Vec<u8>,
        symbols: HashMap<String, u64>,
    }

    impl ImageWriter {
        fn alloc(&mut self, len: usize) -> u64 {
            self.bytes
                .resize(self.bytes.len().next_multiple_of(8) + len, 0);
            self.base + (self.bytes.len() - len) as u64
        }

        fn put(&mut self, addr: u64, value: u64, width: usize) {
            let at = (addr - self.base) as usize;
            self.bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        }

        fn string(&mut self, s: &str) -> u64 {
            let at = self.alloc(s.len() + 1);
            self.bytes[(at - self.base) as usize..][..s.len()].copy_from_slice(s.as_bytes());
            at
        }

        fn var(&mut self, name: &str, value: u64) {
            let at = self.alloc(8);
            self.put(at, value, 8);
            self.symbols.insert(name.into(), at);
        }
    }

    /// libjvm's tables as a JDK lays them out: two vmStructs fields (one static), two
    /// vmTypes, one int constant, no long constant.
    fn recorded_tables() -> ImageWriter {
        let mut w = ImageWriter {
            base: 0x7f00_0000_0000,
            bytes: Vec::new(),
            symbols: HashMap::new(),
        };
        let s = |w: &mut ImageWriter, text: &str| w.string(text);
        let (klass, name, symbol) = (s(&mut w, "Klass"), s(&mut w, "_name"), s(&mut w, "Symbol*"));
        let (universe, heap, heap_t) = (
            s(&mut w, "Universe"),
            s(&mut w, "_collectedHeap"),
            s(&mut w, "CollectedHeap*"),
        );
        let (u2, native) = (s(&mut w, "u2"), s(&mut w, "Method::_native"));
        // vmStructs: type name 0, field name 8, type string 16, is static 24, offset 32,
        // address 40.
        let structs = w.alloc(48 * 3);
        for (i, e) in [
            [klass, name, symbol, 0, 16, 0],
            [universe, heap, heap_t, 1, 0, 0x1234],
        ]
        .iter()
        .enumerate()
        {
            for (k, &v) in e.iter().enumerate() {
                let width = if k == 3 { 4 } else { 8 };
                w.put(structs + i as u64 * 48 + k as u64 * 8, v, width);
            }
        }
        w.var("gHotSpotVMStructs", structs);
        for (var, v) in [
            ("ArrayStride", 48),
            ("TypeNameOffset", 0),
            ("FieldNameOffset", 8),
            ("TypeStringOffset", 16),
            ("IsStaticOffset", 24),
            ("OffsetOffset", 32),
            ("AddressOffset", 40),
        ] {
            w.var(&format!("gHotSpotVMStructEntry{var}"), v);
        }
        // vmTypes: name 0, size 16, is unsigned 24; int constants: name 0, value 8 (4 bytes).
        let types_table = w.alloc(32 * 3);
        w.var("gHotSpotVMTypes", types_table);
        for (i, (n, size, unsigned)) in [(klass, 200, 0), (u2, 2, 1)].into_iter().enumerate() {
            let e = types_table + i as u64 * 32;
            w.put(e, n, 8);
            w.put(e + 16, size, 8);
            w.put(e + 24, unsigned, 4);
        }
        for (var, v) in [
            ("ArrayStride", 32),
            ("TypeNameOffset", 0),
            ("SizeOffset", 16),
        ] {
            w.var(&format!("gHotSpotVMTypeEntry{var}"), v);
        }
        w.var("gHotSpotVMTypeEntryIsUnsignedOffset", 24);
        let ints = w.alloc(16 * 2);
        w.put(ints, native, 8);
        w.put(ints + 8, (-5i32) as u32 as u64, 4);
        w.var("gHotSpotVMIntConstants", ints);
        let longs = w.alloc(16);
        w.var("gHotSpotVMLongConstants", longs);
        for kind in ["Int", "Long"] {
            w.var(&format!("gHotSpotVM{kind}ConstantEntryArrayStride"), 16);
            w.var(&format!("gHotSpotVM{kind}ConstantEntryNameOffset"), 0);
            w.var(&format!("gHotSpotVM{kind}ConstantEntryValueOffset"), 8);
        }

        w
    }

    #[test]
    fn vm_structs_are_read_from_a_recorded_image() {
        let w = recorded_tables();
        let lib = Libjvm {
            symbols: w.symbols.clone(),
        };
        let mem = Memory {
            pid: 4242,
            source: Box::new(Image(vec![(w.base, w.bytes.clone())])),
        };
        let vm = VmStructs::read(&mem, &lib).expect("read the recorded tables");
        let field = &vm.fields[&("Klass".to_string(), "_name".to_string())];
        assert_eq!((field.offset, field.type_string.as_str()), (16, "Symbol*"));
        assert!(!field.is_static);
        let heap = &vm.fields[&("Universe".to_string(), "_collectedHeap".to_string())];
        assert!(heap.is_static);
        assert_eq!(heap.address, 0x1234);
        assert_eq!(vm.types["Klass"], (200, false));
        assert_eq!(vm.types["u2"], (2, true));
        assert_eq!(vm.int_constants["Method::_native"], -5);

        // An image without one exported variable names it, and nothing panics.
        let mut symbols = w.symbols.clone();
        symbols.remove("gHotSpotVMTypeEntrySizeOffset");
        let Err(err) = VmStructs::read(&mem, &Libjvm { symbols }) else {
            panic!("tables without gHotSpotVMTypeEntrySizeOffset were read");
        };
        assert!(
            err.to_string().contains("gHotSpotVMTypeEntrySizeOffset"),
            "{err}"
        );
    }

    #[test]
    fn ranges_are_read_around_one_that_cannot_be() {
        let mem = Memory::live(
            std::process::id(),
            File::open("/proc/self/mem").expect("open our own memory"),
        );
        let data: Vec<u8> = (0..=255).collect();
        let at = |i: usize| data.as_ptr() as u64 + i as u64;
        // Address 8 is never mapped.
        let ranges = [(at(0), 4), (8, 16), (at(10), 0), (at(100), 3), (at(250), 6)];
        let mut buf = Vec::new();
        assert_eq!(
            mem.read_ranges(&ranges, &mut buf),
            vec![true, false, true, true, true]
        );
        assert_eq!(buf.len(), 29);
        assert_eq!(&buf[..4], &data[..4]);
        assert_eq!(&buf[20..23], &data[100..103]);
        assert_eq!(&buf[23..], &data[250..]);
        // More parts than one call takes.
        let many: Vec<(u64, usize)> = (0..3000).map(|i| (at(i % 256), 1)).collect();
        assert!(mem.read_ranges(&many, &mut buf).iter().all(|&ok| ok));
        assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 256) as u8));
    }

    #[test]
    fn jvm_field_sign_extends() {
        let f = Field {
            offset: 1,
            size: 2,
            signed: true,
        };
        assert_eq!(f.get(&[9, 0xff, 0xff], 0), Some(-1));
        let u = Field { signed: false, ..f };
        assert_eq!(u.get(&[9, 0xff, 0xff], 0), Some(0xffff));
        assert_eq!(u.get(&[9, 0xff], 0), None);
    }
}
