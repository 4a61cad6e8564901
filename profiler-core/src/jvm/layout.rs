//! Every offset the reader uses, resolved once from the JVM's vmStructs: the code cache and
//! its blobs, methods and symbols, the interpreter's frame — what differs between JDK builds.

use super::{
    debuginfo::DebugLayout,
    error::JvmError,
    memory::{MAX_CSTR, Memory},
    vmstructs::{Field, MAX_HEADER, VmStructs},
};

/// How a blob's code range is stored: JDK 17 keeps pointers, JDK 23+ offsets from the blob.
#[derive(Clone, Copy, Debug)]
pub(super) enum CodeRange {
    Pointers { begin: Field, end: Field },
    Offsets { code: Field, data: Field },
}

/// How nmethods are told apart from other blobs.
#[derive(Clone, Copy, Debug)]
pub(super) enum NmethodTest {
    /// JDK 23+: `CodeBlob::_kind` equals `CodeBlobKind::Nmethod`.
    Kind { kind: Field, nmethod: i64 },
    /// Before: the blob's name is "nmethod" (the name every nmethod is created with; the
    /// vtable symbols that would say it are not exported).
    Name,
}

/// Every offset this reader uses, resolved once from the tables.
#[derive(Debug)]
pub(super) struct Layout {
    /// `CodeCache::_heaps`: a `GrowableArray<CodeHeap*>*` variable.
    pub(super) heaps: u64,
    pub(super) array_len: Field,
    pub(super) array_data: Field,
    pub(super) heap_size: u64,
    pub(super) heap_memory: u64,
    pub(super) heap_segmap: u64,
    pub(super) heap_log2_segment: Field,
    pub(super) space_low_boundary: Field,
    pub(super) space_high: Field,
    pub(super) block_size: u64,
    pub(super) block_length: Field,
    pub(super) block_used: Field,
    pub(super) blob_name: Field,
    pub(super) blob_size: Field,
    pub(super) blob_frame_complete: Field,
    pub(super) blob_frame_size: Field,
    pub(super) blob_code: CodeRange,
    pub(super) nmethod_test: NmethodTest,
    /// `nmethod::_method` (JDK 17: `CompiledMethod::_method`).
    pub(super) nmethod_method: Field,
    /// Bytes of the header every blob has (an nmethod's `_method` lies beyond).
    pub(super) blob_header: u64,
    pub(super) method_const: Field,
    pub(super) const_constants: Field,
    pub(super) const_name_index: Field,
    pub(super) pool_holder: Field,
    pub(super) pool_length: Field,
    pub(super) pool_size: u64,
    pub(super) klass_name: Field,
    pub(super) symbol_length: Field,
    pub(super) symbol_body: u64,
    /// `AbstractInterpreter::_code`: a `StubQueue*` variable.
    pub(super) interpreter_code: u64,
    pub(super) queue_buffer: Field,
    pub(super) queue_limit: Field,
    pub(super) vm_release: Option<u64>,
    pub(super) interpreter_method_offset: i32,
    /// Where an interpreted frame keeps its caller's stack pointer, in words from rbp (0:
    /// not exported; the caller's sp is then taken as rbp + 16).
    pub(super) interpreter_sender_sp_offset: i32,
    /// Where an nmethod keeps its debug information; what the tables lack when they lack
    /// it (inlined frames are then not read, everything else is).
    pub(super) debug: Result<DebugLayout, String>,
}

impl Layout {
    /// `major`: the JDK's feature release (17), which says how its debug information is
    /// compressed.
    pub(super) fn resolve(
        pid: u32,
        vm: &VmStructs,
        major: Option<i64>,
    ) -> Result<Layout, JvmError> {
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
        if blob_header.max(nmethod_method.end()) > MAX_HEADER {
            return Err(JvmError::Invalid {
                pid,
                what: format!("a blob header of {blob_header} bytes"),
            });
        }
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
pub(super) fn major_version(mem: &Memory, vm: &VmStructs) -> Option<i64> {
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
