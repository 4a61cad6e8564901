//! The JVM's self-description: libjvm.so's exported symbols, and the vmStructs, vmTypes and
//! constants tables they point at, read once at attach into fields by (type, field), type
//! sizes and constants; [`Field`]: where one field lies in its object and how it reads.

use std::{collections::HashMap, fs::File, path::Path};

use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};

use super::{
    error::JvmError,
    memory::{MAX_CSTR, Memory, le},
};
use crate::procmap::Mapping;

/// One field as vmStructs describes it.
#[derive(Clone, Debug)]
pub(super) struct FieldEntry {
    type_string: String,
    /// Offset in the object (non-static fields).
    pub(super) offset: u64,
    /// Address of the variable (static fields).
    address: u64,
    is_static: bool,
}

/// The JVM's self-description: fields by (type, field), type sizes, constants.
#[derive(Debug, Default)]
pub(super) struct VmStructs {
    fields: HashMap<(String, String), FieldEntry>,
    /// Size and unsignedness of each type.
    types: HashMap<String, (u64, bool)>,
    pub(super) int_constants: HashMap<String, i64>,
    /// Read like the other tables (a JVM whose table cannot be read is not attached to).
    #[expect(dead_code, reason = "no long constant is used yet")]
    long_constants: HashMap<String, i64>,
}

/// The largest offset of a field in its object believed (HotSpot's objects are far smaller):
/// a table that says more is not the JVM's.
const MAX_FIELD_OFFSET: u64 = 1 << 16;
/// The most bytes of a blob's header read for each block (the reader's fields of a CodeBlob
/// and an nmethod lie in its first few hundred bytes).
pub(super) const MAX_HEADER: u64 = 4096;

/// The variables libjvm.so exports that the reader reads (by their symbols): where the tables
/// lie, and how their entries are laid out.
pub const LIBJVM_VARIABLES: [&str; 21] = [
    "gHotSpotVMStructs",
    "gHotSpotVMStructEntryArrayStride",
    "gHotSpotVMStructEntryTypeNameOffset",
    "gHotSpotVMStructEntryFieldNameOffset",
    "gHotSpotVMStructEntryTypeStringOffset",
    "gHotSpotVMStructEntryIsStaticOffset",
    "gHotSpotVMStructEntryOffsetOffset",
    "gHotSpotVMStructEntryAddressOffset",
    "gHotSpotVMTypes",
    "gHotSpotVMTypeEntryArrayStride",
    "gHotSpotVMTypeEntryTypeNameOffset",
    "gHotSpotVMTypeEntrySizeOffset",
    "gHotSpotVMTypeEntryIsUnsignedOffset",
    "gHotSpotVMIntConstants",
    "gHotSpotVMIntConstantEntryArrayStride",
    "gHotSpotVMIntConstantEntryNameOffset",
    "gHotSpotVMIntConstantEntryValueOffset",
    "gHotSpotVMLongConstants",
    "gHotSpotVMLongConstantEntryArrayStride",
    "gHotSpotVMLongConstantEntryNameOffset",
    "gHotSpotVMLongConstantEntryValueOffset",
];

/// The libjvm.so a process maps: its exported symbols' addresses in the target.
pub struct Libjvm {
    /// Symbol name → address in the target (load bias added).
    symbols: HashMap<String, u64>,
}

impl Libjvm {
    /// The `gHotSpot*` symbols of the libjvm.so the target maps at `mapping`, at their
    /// addresses in the target: `file` is that file (opened by the caller, who sees the
    /// target's mount namespace), `path` its name in messages.
    pub fn from_elf(
        pid: u32,
        file: File,
        path: &Path,
        mapping: &Mapping,
    ) -> Result<Libjvm, JvmError> {
        let cache = object::ReadCache::new(file);
        let elf_err = |error| JvmError::Elf {
            path: path.to_path_buf(),
            error,
        };
        let obj = object::File::parse(&cache).map_err(elf_err)?;
        // The segment holding the mapped file offset gives the load bias.
        let segment = obj
            .segments()
            .find(|s| {
                let (off, size) = s.file_range();
                off <= mapping.offset && mapping.offset - off < size
            })
            .ok_or_else(|| JvmError::Invalid {
                pid,
                what: format!(
                    "{}: no segment holds the mapped offset {:#x}",
                    path.display(),
                    mapping.offset
                ),
            })?;
        let vaddr = segment
            .address()
            .wrapping_add(mapping.offset - segment.file_range().0);
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
        Ok(Libjvm { symbols })
    }

    /// Symbols known already, by name: a recorded JVM's.
    pub fn from_symbols(symbols: HashMap<String, u64>) -> Libjvm {
        Libjvm { symbols }
    }

    fn symbol(&self, pid: u32, name: &'static str) -> Result<u64, JvmError> {
        debug_assert!(
            LIBJVM_VARIABLES.contains(&name),
            "{name} is missing from LIBJVM_VARIABLES"
        );
        self.symbols
            .get(name)
            .copied()
            .ok_or(JvmError::MissingSymbol { pid, symbol: name })
    }
}

impl VmStructs {
    pub(super) fn read(mem: &Memory, lib: &Libjvm) -> Result<VmStructs, JvmError> {
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
    if base == 0 || stride == 0 || stride > 1024 || name.checked_add(8).is_none_or(|e| e > stride) {
        return Err(mem.invalid(format!(
            "implausible vmStructs table at {base:#x}, stride {stride}"
        )));
    }
    let mut buf = vec![0u8; (stride * BATCH) as usize];
    let mut index = 0;
    while index < MAX_ENTRIES {
        let Some(at) = base.checked_add(index * stride) else {
            break;
        };
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
pub(super) struct Field {
    pub(super) offset: u64,
    pub(super) size: usize,
    pub(super) signed: bool,
}

impl Field {
    /// The field of the object at `at` in `buf`, sign-extended when its type is signed.
    pub(super) fn get(self, buf: &[u8], at: usize) -> Option<i64> {
        let v = le(buf, at.checked_add(self.offset as usize)?, self.size)?;
        let shift = 64 - 8 * self.size as u32;
        Some(if self.signed {
            ((v << shift) as i64) >> shift
        } else {
            v as i64
        })
    }

    pub(super) fn end(self) -> u64 {
        self.offset + self.size as u64
    }
}

impl VmStructs {
    /// A field's entry; an instance field's offset is checked to be plausible.
    pub(super) fn entry(&self, pid: u32, ty: &str, field: &str) -> Result<&FieldEntry, JvmError> {
        let e = self
            .fields
            .get(&(ty.to_string(), field.to_string()))
            .ok_or_else(|| JvmError::Unsupported {
                pid,
                what: format!("field {ty}::{field}"),
            })?;
        if !e.is_static && e.offset > MAX_FIELD_OFFSET {
            return Err(JvmError::Invalid {
                pid,
                what: format!("field {ty}::{field} at offset {:#x}", e.offset),
            });
        }
        Ok(e)
    }

    /// A non-static field, its width taken from its type's size in the type table.
    pub(super) fn field(&self, pid: u32, ty: &str, name: &str) -> Result<Field, JvmError> {
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
    pub(super) fn static_address(&self, pid: u32, ty: &str, name: &str) -> Result<u64, JvmError> {
        let e = self.entry(pid, ty, name)?;
        if !e.is_static || e.address == 0 {
            return Err(JvmError::Unsupported {
                pid,
                what: format!("static field {ty}::{name}"),
            });
        }
        Ok(e.address)
    }

    pub(super) fn size_of(&self, pid: u32, ty: &str) -> Result<u64, JvmError> {
        self.types
            .get(ty)
            .map(|&(size, _)| size)
            .ok_or_else(|| JvmError::Unsupported {
                pid,
                what: format!("type {ty}"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
