//! The running kernel's type layouts from its BTF (`/sys/kernel/btf/vmlinux`), read for the
//! few types asked about: one pass notes where each type record starts; names are compared
//! in place, never copied.
//!
//! btf-rs (the crate this replaced here) builds every one of vmlinux's ~150 k types and
//! strings into hash maps first: 0.14-0.2 s of CPU on every start, a third of issue 25's
//! 0.4 s budget for everything before the window opens. This reads the same offsets in a few
//! milliseconds; a test checks it against btf-rs on the running kernel.
//!
//! Format: the kernel's `Documentation/bpf/btf.rst` (header, then `struct btf_type` records of
//! 12 bytes each followed by kind-specific data, then the string section).

/// BTF kinds (`BTF_KIND_*`) this reader looks into or must step over.
mod kind {
    pub const INT: u32 = 1;
    pub const ARRAY: u32 = 3;
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const ENUM: u32 = 6;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const FUNC_PROTO: u32 = 13;
    pub const VAR: u32 = 14;
    pub const DATASEC: u32 = 15;
    pub const DECL_TAG: u32 = 17;
    pub const TYPE_TAG: u32 = 18;
    pub const ENUM64: u32 = 19;
}

const MAGIC: u16 = 0xeb9f;
/// `struct btf_type`: name_off, info, size/type.
const TYPE_LEN: usize = 12;

/// A parsed BTF blob (little-endian, as every x86_64 kernel writes it).
pub struct Btf<'a> {
    types: &'a [u8],
    strings: &'a [u8],
    /// Where type `id`'s record starts in `types` (index `id - 1`; id 0 is void).
    starts: Vec<usize>,
}

/// One `struct btf_type` record.
#[derive(Clone, Copy, Debug)]
struct Record {
    name_off: u32,
    kind: u32,
    vlen: usize,
    kind_flag: bool,
    /// `size` or `type`, by kind.
    size_or_type: u32,
    /// Where the kind-specific data after the 12 bytes starts.
    data: usize,
}

impl<'a> Btf<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        if u16_at(bytes, 0) != Some(MAGIC) {
            return Err("not little-endian BTF (bad magic)".into());
        }
        let header = |at| u32_at(bytes, at).ok_or("truncated BTF header");
        let hdr_len = header(4)? as usize;
        let section = |off: usize, len: usize| -> Result<&'a [u8], String> {
            let start = hdr_len
                .checked_add(header(off)? as usize)
                .ok_or("overflow")?;
            let end = start.checked_add(header(len)? as usize).ok_or("overflow")?;
            bytes
                .get(start..end)
                .ok_or_else(|| "BTF section beyond the end of the file".into())
        };
        let types = section(8, 12)?;
        let strings = section(16, 20)?;
        let mut btf = Btf {
            types,
            strings,
            starts: Vec::new(),
        };
        let mut at = 0;
        while at < types.len() {
            let record = btf.record_at(at).ok_or("truncated BTF type")?;
            btf.starts.push(at);
            at = record.data + extra_len(&record);
        }
        Ok(btf)
    }

    fn record_at(&self, at: usize) -> Option<Record> {
        let info = u32_at(self.types, at + 4)?;
        let record = Record {
            name_off: u32_at(self.types, at)?,
            kind: (info >> 24) & 0x1f,
            vlen: (info & 0xffff) as usize,
            kind_flag: info >> 31 == 1,
            size_or_type: u32_at(self.types, at + 8)?,
            data: at + TYPE_LEN,
        };
        // The kind-specific data must be there too.
        self.types
            .get(record.data..record.data + extra_len(&record))?;
        Some(record)
    }

    fn record(&self, id: u32) -> Option<Record> {
        let at = *self.starts.get((id as usize).checked_sub(1)?)?;
        self.record_at(at)
    }

    fn name(&self, name_off: u32) -> &'a str {
        let tail = self.strings.get(name_off as usize..).unwrap_or_default();
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        std::str::from_utf8(&tail[..end]).unwrap_or_default()
    }

    /// The id of the struct named `name` that has members (not a forward declaration).
    pub fn find_struct(&self, name: &str) -> Option<u32> {
        self.ids()
            .find(|&(_, r)| r.kind == kind::STRUCT && r.vlen > 0 && self.name(r.name_off) == name)
            .map(|(id, _)| id)
    }

    fn ids(&self) -> impl Iterator<Item = (u32, Record)> + '_ {
        (1..=self.starts.len() as u32).filter_map(|id| Some((id, self.record(id)?)))
    }

    /// Through typedefs and qualifiers to the type they name.
    pub fn resolve(&self, mut id: u32) -> u32 {
        // A chain longer than this is malformed (a loop).
        for _ in 0..32 {
            match self.record(id) {
                Some(r)
                    if matches!(
                        r.kind,
                        kind::TYPEDEF
                            | kind::VOLATILE
                            | kind::CONST
                            | kind::RESTRICT
                            | kind::TYPE_TAG
                    ) =>
                {
                    id = r.size_or_type
                }
                _ => break,
            }
        }
        id
    }

    /// Byte offset and type id of member `name` of struct or union `id`, looking through
    /// anonymous struct and union members (where the kernel keeps many task_struct fields).
    pub fn member(&self, id: u32, name: &str) -> Option<(u32, u32)> {
        self.member_within(id, name, 0)
    }

    fn member_within(&self, id: u32, name: &str, depth: u32) -> Option<(u32, u32)> {
        let r = self.record(self.resolve(id))?;
        if !matches!(r.kind, kind::STRUCT | kind::UNION) || depth > 8 {
            return None;
        }
        for i in 0..r.vlen {
            let at = r.data + i * 12;
            let (name_off, ty, offset) = (
                u32_at(self.types, at)?,
                u32_at(self.types, at + 4)?,
                u32_at(self.types, at + 8)?,
            );
            // With kind_flag, the low 24 bits are the bit offset (the high 8 a bitfield size).
            let bits = if r.kind_flag {
                offset & 0xff_ffff
            } else {
                offset
            };
            let member_name = self.name(name_off);
            if member_name == name {
                return Some((bits / 8, ty));
            }
            if member_name.is_empty()
                && let Some((inner, t)) = self.member_within(ty, name, depth + 1)
            {
                return Some((bits / 8 + inner, t));
            }
        }
        None
    }

    /// Offsets of the named variables in the data section `section` (e.g. `.data..percpu`),
    /// in the order asked; None unless all are there.
    pub fn section_offsets<const N: usize>(
        &self,
        section: &str,
        names: &[&str; N],
    ) -> Option<[u32; N]> {
        let (_, sec) = self
            .ids()
            .find(|&(_, r)| r.kind == kind::DATASEC && self.name(r.name_off) == section)?;
        let mut found = [None; N];
        for i in 0..sec.vlen {
            let at = sec.data + i * 12;
            let (var, offset) = (u32_at(self.types, at)?, u32_at(self.types, at + 4)?);
            let Some(v) = self.record(var).filter(|v| v.kind == kind::VAR) else {
                continue;
            };
            let name = self.name(v.name_off);
            if let Some(k) = names.iter().position(|n| *n == name) {
                found[k] = Some(offset);
            }
        }
        let mut offsets = [0; N];
        for (o, f) in offsets.iter_mut().zip(found) {
            *o = f?;
        }
        Some(offsets)
    }

    #[cfg(test)]
    fn type_count(&self) -> usize {
        self.starts.len()
    }
}

/// Bytes of kind-specific data after a record's 12.
fn extra_len(r: &Record) -> usize {
    match r.kind {
        kind::INT | kind::VAR | kind::DECL_TAG => 4,
        kind::ARRAY => 12,
        kind::STRUCT | kind::UNION | kind::DATASEC | kind::ENUM64 => 12 * r.vlen,
        kind::ENUM | kind::FUNC_PROTO => 8 * r.vlen,
        _ => 0,
    }
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob of `types` (records with their data) and `strings`.
    fn blob(types: &[u8], strings: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&[1, 0]);
        for v in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(types);
        b.extend_from_slice(strings);
        b
    }

    fn record(name_off: u32, kind: u32, vlen: u32, flag: bool, size: u32) -> Vec<u8> {
        let info = (u32::from(flag) << 31) | (kind << 24) | vlen;
        [name_off, info, size]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn members_through_anonymous_unions_typedefs_and_bitfields() {
        // Strings: 1 "int", 5 "outer", 11 "a", 13 "b", 15 "t", 17 "flags".
        let strings = b"\0int\0outer\0a\0b\0t\0flags\0";
        let mut types = Vec::new();
        // 1: int (4 bytes).
        types.extend(record(1, kind::INT, 0, false, 4));
        types.extend(words(&[32]));
        // 2: anonymous union { int b; } .
        types.extend(record(0, kind::UNION, 1, false, 4));
        types.extend(words(&[13, 1, 0]));
        // 3: typedef t = 2.
        types.extend(record(15, kind::TYPEDEF, 0, false, 2));
        // 4: struct outer { int a @0; <anon t> @64 bits; int flags:3 @96 bits } (bitfields).
        types.extend(record(5, kind::STRUCT, 3, true, 16));
        types.extend(words(&[11, 1, 0, 0, 3, 64, 17, 1, (3 << 24) | 96]));
        let bytes = blob(&types, strings);
        let btf = Btf::parse(&bytes).unwrap();
        assert_eq!(btf.type_count(), 4);
        let outer = btf.find_struct("outer").unwrap();
        assert_eq!(outer, 4);
        assert_eq!(btf.member(outer, "a"), Some((0, 1)));
        assert_eq!(
            btf.member(outer, "b"),
            Some((8, 1)),
            "through the typedef'd union"
        );
        assert_eq!(btf.member(outer, "flags"), Some((12, 1)), "bitfield offset");
        assert_eq!(btf.member(outer, "missing"), None);
        assert_eq!(btf.resolve(3), 2);
    }

    #[test]
    fn garbage_and_truncated_input_is_refused_without_panicking() {
        assert!(Btf::parse(b"").is_err());
        assert!(Btf::parse(&[0x9f, 0xeb, 1, 0, 24, 0, 0]).is_err());
        let types = record(0, kind::STRUCT, 1000, false, 4);
        assert!(
            Btf::parse(&blob(&types, b"\0")).is_err(),
            "members beyond the end"
        );
        let mut bytes = blob(&record(1, kind::INT, 0, false, 4), b"\0x\0");
        bytes.truncate(bytes.len() - 1);
        assert!(Btf::parse(&bytes).is_err());
    }

    /// The offsets the profiler uses, against btf-rs on the running kernel.
    #[test]
    fn agrees_with_btf_rs_on_this_kernel() {
        let path = "/sys/kernel/btf/vmlinux";
        let Ok(bytes) = std::fs::read(path) else {
            eprintln!("skipping: no {path}");
            return;
        };
        let ours = Btf::parse(&bytes).unwrap();
        let theirs = btf_rs::Btf::from_bytes(&bytes).unwrap();
        let task = ours.find_struct("task_struct").unwrap();
        let btf_rs::Type::Struct(their_task) = theirs
            .resolve_types_by_name("task_struct")
            .unwrap()
            .into_iter()
            .find(|t| matches!(t, btf_rs::Type::Struct(s) if !s.members.is_empty()))
            .unwrap()
        else {
            unreachable!()
        };
        for name in [
            "pid",
            "tgid",
            "comm",
            "__state",
            "on_cpu",
            "se",
            "sched_info",
        ] {
            let member = their_task
                .members
                .iter()
                .find(|m| theirs.resolve_name(*m).unwrap_or_default() == name);
            let Some(member) = member else {
                continue; // inside an anonymous member: covered by the offsets test
            };
            assert_eq!(
                ours.member(task, name).map(|(o, _)| o),
                Some(member.bit_offset() / 8),
                "{name}"
            );
        }
    }
}
