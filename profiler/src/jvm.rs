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

/// The target's memory, read through `/proc/<pid>/mem`.
struct Memory {
    pid: u32,
    file: File,
}

impl Memory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), JvmError> {
        self.file
            .read_exact_at(buf, addr)
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
        let pid = mem.pid;
        // An exported variable: its value in the target.
        let var = |name: &'static str| -> Result<u64, JvmError> { mem.u64(lib.symbol(pid, name)?) };
        let mut strings: HashMap<u64, String> = HashMap::new();
        let mut string = |addr: u64| -> Result<String, JvmError> {
            if addr == 0 {
                return Ok(String::new());
            }
            if let Some(s) = strings.get(&addr) {
                return Ok(s.clone());
            }
            let s = mem.cstr(addr, MAX_CSTR)?;
            strings.insert(addr, s.clone());
            Ok(s)
        };
        let mut out = VmStructs::default();

        let stride = var("gHotSpotVMStructEntryArrayStride")?;
        let type_name = var("gHotSpotVMStructEntryTypeNameOffset")?;
        let field_name = var("gHotSpotVMStructEntryFieldNameOffset")?;
        let type_string = var("gHotSpotVMStructEntryTypeStringOffset")?;
        let is_static = var("gHotSpotVMStructEntryIsStaticOffset")?;
        let offset = var("gHotSpotVMStructEntryOffsetOffset")?;
        let address = var("gHotSpotVMStructEntryAddressOffset")?;
        let base = var("gHotSpotVMStructs")?;
        for_each_entry(mem, base, stride, type_name, |e| {
            let get = |at: u64, size: usize| {
                le(e, at as usize, size).ok_or_else(|| mem.invalid("vmStructs entry layout".into()))
            };
            let ty = string(get(type_name, 8)?)?;
            let field = string(get(field_name, 8)?)?;
            let entry = FieldEntry {
                type_string: string(get(type_string, 8)?)?,
                offset: get(offset, 8)?,
                address: get(address, 8)?,
                is_static: get(is_static, 4)? != 0,
            };
            out.fields.insert((ty, field), entry);
            Ok(())
        })?;

        let stride = var("gHotSpotVMTypeEntryArrayStride")?;
        let type_name = var("gHotSpotVMTypeEntryTypeNameOffset")?;
        let size = var("gHotSpotVMTypeEntrySizeOffset")?;
        let unsigned = var("gHotSpotVMTypeEntryIsUnsignedOffset")?;
        let base = var("gHotSpotVMTypes")?;
        for_each_entry(mem, base, stride, type_name, |e| {
            let get = |at: u64, size: usize| {
                le(e, at as usize, size).ok_or_else(|| mem.invalid("vmTypes entry layout".into()))
            };
            let ty = string(get(type_name, 8)?)?;
            out.types
                .insert(ty, (get(size, 8)?, get(unsigned, 4)? != 0));
            Ok(())
        })?;

        for (table, stride, name, value, into) in [
            (
                "gHotSpotVMIntConstants",
                "gHotSpotVMIntConstantEntryArrayStride",
                "gHotSpotVMIntConstantEntryNameOffset",
                "gHotSpotVMIntConstantEntryValueOffset",
                &mut out.int_constants,
            ),
            (
                "gHotSpotVMLongConstants",
                "gHotSpotVMLongConstantEntryArrayStride",
                "gHotSpotVMLongConstantEntryNameOffset",
                "gHotSpotVMLongConstantEntryValueOffset",
                &mut out.long_constants,
            ),
        ] {
            let stride = var(stride)?;
            let name = var(name)?;
            let value = var(value)?;
            let base = var(table)?;
            // Int constants are 32-bit values, long constants 64-bit.
            let width = if table.contains("Int") { 4 } else { 8 };
            for_each_entry(mem, base, stride, name, |e| {
                let get = |at: u64, size: usize| {
                    le(e, at as usize, size)
                        .ok_or_else(|| mem.invalid("vm constant entry layout".into()))
                };
                let n = string(get(name, 8)?)?;
                let v = get(value, width)?;
                let v = if width == 4 {
                    v as u32 as i32 as i64
                } else {
                    v as i64
                };
                into.insert(n, v);
                Ok(())
            })?;
        }
        Ok(out)
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
}

impl Layout {
    fn resolve(pid: u32, vm: &VmStructs) -> Result<Layout, JvmError> {
        let f = |ty: &str, name: &str| vm.field(pid, ty, name);
        let blob_code = match (f("CodeBlob", "_code_begin"), f("CodeBlob", "_code_end")) {
            (Ok(begin), Ok(end)) => CodeRange::Pointers { begin, end },
            _ => CodeRange::Offsets {
                code: f("CodeBlob", "_code_offset")?,
                data: f("CodeBlob", "_data_offset")?,
            },
        };
        let nmethod_test = match (
            f("CodeBlob", "_kind"),
            vm.int_constants.get("CodeBlobKind::Nmethod"),
        ) {
            (Ok(kind), Some(&nmethod)) => NmethodTest::Kind { kind, nmethod },
            _ => NmethodTest::Name,
        };
        let heap_size = vm.size_of(pid, "CodeHeap")?;
        let block_size = vm.size_of(pid, "HeapBlock")?;
        if heap_size > 64 << 10 || block_size > 64 {
            return Err(JvmError::Invalid {
                pid,
                what: format!("sizeof(CodeHeap) {heap_size}, sizeof(HeapBlock) {block_size}"),
            });
        }
        let nmethod_method = f("nmethod", "_method").or_else(|_| f("CompiledMethod", "_method"))?;
        let blob_name = f("CodeBlob", "_name")?;
        let blob_size = f("CodeBlob", "_size")?;
        let blob_frame_complete = f("CodeBlob", "_frame_complete_offset")?;
        let blob_frame_size = f("CodeBlob", "_frame_size")?;
        let mut blob_header = [blob_name, blob_size, blob_frame_complete, blob_frame_size]
            .iter()
            .map(|f| f.end())
            .max()
            .unwrap_or(0);
        blob_header = blob_header.max(match blob_code {
            CodeRange::Pointers { begin, end } => begin.end().max(end.end()),
            CodeRange::Offsets { code, data } => code.end().max(data.end()),
        });
        if let NmethodTest::Kind { kind, .. } = nmethod_test {
            blob_header = blob_header.max(kind.end());
        }
        let (interpreter_method_offset, interpreter_sender_sp_offset) = interpreter_slots(pid, vm)?;
        Ok(Layout {
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
}

/// Segment-map value of a segment outside any block (`CodeHeap::free_sentinel`).
const FREE_SENTINEL: u8 = 0xFF;
/// Reads of the code heap are done in pieces of this size.
const READ_CHUNK: usize = 1 << 20;
/// A code heap's committed size above this is not believed.
const MAX_HEAP: u64 = 4 << 30;

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
        let mem = Memory { pid, file };
        let vm = VmStructs::read(&mem, &lib)?;
        let layout = Layout::resolve(pid, &vm)?;
        let mut jvm = Jvm {
            pid,
            mem,
            layout,
            interpreter: (0, 0),
            methods: HashMap::new(),
            blob_names: HashMap::new(),
            segmap: Vec::new(),
            heap: Vec::new(),
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
        let mut blobs = Vec::new();
        for heap in heaps.chunks_exact(8) {
            let heap = le(heap, 0, 8).unwrap_or(0);
            if heap != 0 {
                self.heap_blobs(heap, &mut blobs)?;
            }
        }
        Ok(blobs)
    }

    /// The used blocks of one CodeHeap. Its segment map (a byte per segment) says where
    /// blocks may start; the headers there are gathered with a few `process_vm_readv` calls
    /// (a thousand headers each), or, if that fails, read with the whole used span of the
    /// heap. Each header's length then says where the next block starts.
    fn heap_blobs(&mut self, heap: u64, blobs: &mut Vec<CodeBlob>) -> Result<(), JvmError> {
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
        let segments = ((high - low) >> log2).min(map_high - map_low) as usize;
        self.segmap.resize(segments, 0);
        self.mem.read(map_low, &mut self.segmap)?;
        // Segments past the last block are free: read no further.
        let Some(last) = self.segmap.iter().rposition(|&s| s != FREE_SENTINEL) else {
            return Ok(());
        };
        let used = ((last as u64 + 1) << log2) as usize;
        // A block starts where the map holds 0 (a large block may hold more zeros inside:
        // its header's length skips them).
        let starts: Vec<usize> = (0..=last).filter(|&s| self.segmap[s] == 0).collect();
        let (block_length, block_used, block_size) = (l.block_length, l.block_used, l.block_size);
        // Bytes read per block: the block header, the blob header, an nmethod's `_method`.
        let header =
            (block_size + l.blob_header.max(l.nmethod_method.end())).next_multiple_of(8) as usize;

        let mut buf = std::mem::take(&mut self.heap);
        let gathered = self.gather(low, log2, used, &starts, header, &mut buf);
        if !gathered {
            buf.resize(used, 0);
            for (i, chunk) in buf.chunks_mut(READ_CHUNK).enumerate() {
                if let Err(e) = self.mem.read(low + (i * READ_CHUNK) as u64, chunk) {
                    self.heap = buf;
                    return Err(e);
                }
            }
        }
        let mut next = 0usize;
        for (k, &seg) in starts.iter().enumerate() {
            if seg < next {
                // Inside the previous block.
                continue;
            }
            let at = seg << log2;
            let block = if gathered {
                &buf[k * header..(k + 1) * header]
            } else {
                &buf[at..used]
            };
            let length = block_length.get(block, 0).unwrap_or(0) as usize;
            let in_use = block_used.get(block, 0).unwrap_or(0) != 0;
            if length == 0 || seg + length > last + 1 {
                // Torn by the JVM changing the heap: look at the next start.
                continue;
            }
            next = seg + length;
            if in_use {
                let addr = low + (at as u64) + block_size;
                if let Some(room) = (length << log2).checked_sub(block_size as usize)
                    && let Some(b) = block.get(block_size as usize..)
                    && let Some(blob) = self.decode_blob(addr, b, room)
                {
                    blobs.push(blob);
                }
            }
        }
        self.heap = buf;
        Ok(())
    }

    /// Reads `header` bytes at each block start (a segment index) into `buf`, one after the
    /// other, with `process_vm_readv` (up to 1024 pieces a call). False if a call fails or
    /// reads short: the caller falls back to reading the whole span.
    fn gather(
        &self,
        low: u64,
        log2: i64,
        used: usize,
        starts: &[usize],
        header: usize,
        buf: &mut Vec<u8>,
    ) -> bool {
        const IOV_MAX: usize = 1024;
        buf.clear();
        buf.resize(starts.len() * header, 0);
        for (batch, chunk) in starts.chunks(IOV_MAX).zip(buf.chunks_mut(IOV_MAX * header)) {
            let mut local = Vec::with_capacity(batch.len());
            let mut remote = Vec::with_capacity(batch.len());
            let mut want = 0;
            for (&seg, piece) in batch.iter().zip(chunk.chunks_mut(header)) {
                let at = seg << log2;
                // The last block may end closer than `header`: never read past the span.
                let len = header.min(used - at);
                local.push(libc::iovec {
                    iov_base: piece.as_mut_ptr().cast(),
                    iov_len: len,
                });
                remote.push(libc::iovec {
                    iov_base: (low + at as u64) as *mut libc::c_void,
                    iov_len: len,
                });
                want += len;
            }
            // SAFETY: every local iovec points into `chunk`, alive and exclusively borrowed
            // for the call; the remote ones are only read by the kernel from the target.
            let got = unsafe {
                libc::process_vm_readv(
                    self.pid as libc::pid_t,
                    local.as_ptr(),
                    local.len() as libc::c_ulong,
                    remote.as_ptr(),
                    remote.len() as libc::c_ulong,
                    0,
                )
            };
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
        Some(CodeBlob {
            start,
            end,
            frame_complete,
            frame_size_words,
            kind,
            name,
        })
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
