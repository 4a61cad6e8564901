//! A Go binary's runtime, read from its ELF file: the Go version (`.go.buildinfo`), where
//! `runtime.gopark` and `runtime.execute` start (the symbol table, else `.gopclntab`, which
//! `go build -ldflags=-s` keeps), and the runtime's names of its wait reasons
//! (`runtime.waitReasonStrings`, when the symbol table is there). The capture side attaches
//! the goroutine-wait uprobes there (`profiler-ebpf/src/goroutine.rs`), and only for Go
//! versions whose register ABI those probes read: 1.17 and later on amd64.

use object::{Object as _, ObjectSection as _, ObjectSegment as _, ObjectSymbol as _};
use thiserror::Error;

/// The first Go release with the register ABI the probes read (`gopark`'s reason in rcx,
/// `execute`'s `gp` in rax, `g` in r14).
pub const MIN_MINOR: u32 = 17;

/// What the probes need of one Go binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoRuntime {
    /// `go1.19.8`.
    pub version: String,
    /// File offsets of `runtime.gopark` and `runtime.execute`.
    pub park_offset: u64,
    pub execute_offset: u64,
    /// `waitReason` → its name (`chan receive`, `IO wait` …); empty when the binary has no
    /// symbol table (the wait's meaning then comes from its stack alone).
    pub reasons: Vec<String>,
}

#[derive(Debug, Error)]
pub enum GoBinError {
    #[error("cannot read it: {0}")]
    Io(std::io::Error),
    #[error("cannot read it as ELF: {0}")]
    Elf(#[from] object::Error),
    #[error("not an x86-64 binary (the goroutine probes read amd64 registers)")]
    NotAmd64,
    #[error("built with {0}: the goroutine probes read Go's register ABI, Go 1.17 and later")]
    TooOld(String),
    #[error("its Go version is unreadable ({0})")]
    Version(&'static str),
    #[error("`{0}` is in neither its symbol table nor its .gopclntab")]
    Missing(&'static str),
    #[error("malformed .gopclntab ({0})")]
    Pclntab(&'static str),
}

/// [`read`] of a file, mapped rather than read: most target binaries are not Go, and some
/// are hundreds of MiB.
pub fn read_path(path: &std::path::Path) -> Result<Option<GoRuntime>, GoBinError> {
    let file = std::fs::File::open(path).map_err(GoBinError::Io)?;
    // SAFETY: read-only mapping of an executable; a file changed under a running process
    // (which its loader also maps) is outside what any profiler can vouch for.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(GoBinError::Io)?;
    read(&map)
}

/// `None`: not a Go binary (no `.go.buildinfo`).
pub fn read(data: &[u8]) -> Result<Option<GoRuntime>, GoBinError> {
    let file = object::File::parse(data)?;
    let Some(buildinfo) = file.section_by_name(".go.buildinfo") else {
        return Ok(None);
    };
    if file.architecture() != object::Architecture::X86_64 {
        return Err(GoBinError::NotAmd64);
    }
    let version = build_version(&file, buildinfo.data()?)?;
    match minor_of(&version) {
        Some(m) if m >= MIN_MINOR => {}
        Some(_) => return Err(GoBinError::TooOld(version)),
        None => return Err(GoBinError::Version("not go1.N")),
    }
    let mut park = None;
    let mut execute = None;
    let mut reasons_at = None;
    for sym in file.symbols() {
        match sym.name() {
            Ok("runtime.gopark") => park = Some(sym.address()),
            Ok("runtime.execute") => execute = Some(sym.address()),
            Ok("runtime.waitReasonStrings") => reasons_at = Some((sym.address(), sym.size())),
            _ => {}
        }
    }
    if park.is_none() || execute.is_none() {
        let table = file
            .section_by_name(".gopclntab")
            .ok_or(GoBinError::Missing("runtime.gopark"))?;
        let funcs = pclntab_funcs(table.data()?, &["runtime.gopark", "runtime.execute"])?;
        park = park.or(funcs[0]);
        execute = execute.or(funcs[1]);
    }
    let park = park.ok_or(GoBinError::Missing("runtime.gopark"))?;
    let execute = execute.ok_or(GoBinError::Missing("runtime.execute"))?;
    let reasons = reasons_at
        .map(|(at, size)| wait_reasons(&file, at, size))
        .unwrap_or_default();
    Ok(Some(GoRuntime {
        version,
        park_offset: file_offset(&file, park).ok_or(GoBinError::Missing("runtime.gopark"))?,
        execute_offset: file_offset(&file, execute)
            .ok_or(GoBinError::Missing("runtime.execute"))?,
        reasons,
    }))
}

/// `go1.19.8` → 19; `devel go1.24-abc…` → 24.
pub fn minor_of(version: &str) -> Option<u32> {
    let rest = &version[version.find("go1.")? + 4..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The version string of `.go.buildinfo`: inline since Go 1.18 (flag 2), else behind two
/// pointers to Go string headers.
fn build_version(file: &object::File<'_>, info: &[u8]) -> Result<String, GoBinError> {
    const MAGIC: &[u8] = b"\xff Go buildinf:";
    if info.len() < 32 || !info.starts_with(MAGIC) {
        return Err(GoBinError::Version("no buildinfo header"));
    }
    let ptr_size = usize::from(info[14]);
    let flags = info[15];
    if flags & 2 != 0 {
        let (len, n) = uvarint(&info[32..]).ok_or(GoBinError::Version("bad length"))?;
        let start = 32 + n;
        let end = start
            .checked_add(usize::try_from(len).map_err(|_| GoBinError::Version("bad length"))?)
            .filter(|&e| e <= info.len())
            .ok_or(GoBinError::Version("bad length"))?;
        return Ok(String::from_utf8_lossy(&info[start..end]).into_owned());
    }
    if ptr_size != 8 {
        return Err(GoBinError::Version("not 64-bit"));
    }
    let header = le_u64(info, 16).ok_or(GoBinError::Version("short"))?;
    go_string(file, header, &Default::default()).ok_or(GoBinError::Version("unreadable string"))
}

/// A Go string (pointer, length) at virtual address `at`. In a position-independent binary
/// the pointer is a relative relocation's addend (`relocated`), the file's word 0.
fn go_string(
    file: &object::File<'_>,
    at: u64,
    relocated: &std::collections::HashMap<u64, u64>,
) -> Option<String> {
    let header = bytes_at(file, at, 16)?;
    let (ptr, len) = (le_u64(header, 0)?, le_u64(header, 8)?);
    let ptr = relocated.get(&at).copied().unwrap_or(ptr);
    if len > 4096 {
        return None;
    }
    Some(String::from_utf8_lossy(bytes_at(file, ptr, len)?).into_owned())
}

/// `runtime.waitReasonStrings`, an array of Go strings (a non-PIE binary holds the pointers
/// as linked, a PIE one as relative relocations; an entry that does not resolve is left
/// empty).
fn wait_reasons(file: &object::File<'_>, at: u64, size: u64) -> Vec<String> {
    let relocated: std::collections::HashMap<u64, u64> = file
        .dynamic_relocations()
        .into_iter()
        .flatten()
        .filter(|(offset, _)| (at..at + size).contains(offset))
        .filter(|(_, r)| {
            matches!(r.flags(), object::RelocationFlags::Elf { r_type }
                if r_type == object::elf::R_X86_64_RELATIVE)
        })
        .map(|(offset, r)| (offset, r.addend() as u64))
        .collect();
    (0..size / 16)
        .map(|i| go_string(file, at + 16 * i, &relocated).unwrap_or_default())
        .collect()
}

/// `len` bytes of the file at virtual address `at`, if a loaded segment holds them.
fn bytes_at<'a>(file: &object::File<'a>, at: u64, len: u64) -> Option<&'a [u8]> {
    file.segments().find_map(|s| {
        let off = at.checked_sub(s.address())?;
        let data = s.data().ok()?;
        let end = off.checked_add(len)?;
        (end <= data.len() as u64).then(|| &data[off as usize..end as usize])
    })
}

/// The file offset of virtual address `at` (what a uprobe is attached at).
fn file_offset(file: &object::File<'_>, at: u64) -> Option<u64> {
    file.segments().find_map(|s| {
        let off = at.checked_sub(s.address())?;
        let (start, size) = s.file_range();
        (off < size).then_some(start + off)
    })
}

/// The entry addresses of `names` in a `.gopclntab` (Go 1.18+ layout, magic 0xfffffff0/1; Go
/// 1.16–1.17, 0xfffffffa).
pub fn pclntab_funcs(tab: &[u8], names: &[&str]) -> Result<Vec<Option<u64>>, GoBinError> {
    let bad = GoBinError::Pclntab;
    let magic = le_u32(tab, 0).ok_or(bad("short"))?;
    if tab.get(7) != Some(&8) {
        return Err(bad("not 64-bit"));
    }
    let word = |i: usize| le_u64(tab, 8 + 8 * i).ok_or(bad("short header"));
    let (new, nfunc, text_start, funcname, pcln) = match magic {
        0xffff_fff0 | 0xffff_fff1 => (true, word(0)?, word(2)?, word(3)?, word(7)?),
        0xffff_fffa => (false, word(0)?, 0, word(2)?, word(6)?),
        _ => return Err(bad("unknown magic")),
    };
    let as_usize = |v: u64| usize::try_from(v).map_err(|_| bad("offset"));
    let (funcname, pcln) = (as_usize(funcname)?, as_usize(pcln)?);
    let nfunc = as_usize(nfunc)?;
    if nfunc > tab.len() {
        return Err(bad("function count"));
    }
    let mut found = vec![None; names.len()];
    for i in 0..nfunc {
        let (entry, funcoff) = if new {
            let at = pcln + 8 * i;
            (
                u64::from(le_u32(tab, at).ok_or(bad("functab"))?) + text_start,
                le_u32(tab, at + 4).ok_or(bad("functab"))? as usize,
            )
        } else {
            let at = pcln + 16 * i;
            (
                le_u64(tab, at).ok_or(bad("functab"))?,
                as_usize(le_u64(tab, at + 8).ok_or(bad("functab"))?)?,
            )
        };
        // `_func`: the entry (u32 offset, or a pointer before 1.18), then `nameOff` (i32).
        let name_at = pcln + funcoff + if new { 4 } else { 8 };
        let name_off = le_u32(tab, name_at).ok_or(bad("_func"))? as usize;
        let name = c_str(tab, funcname + name_off).ok_or(bad("function name"))?;
        if let Some(k) = names.iter().position(|n| n.as_bytes() == name) {
            found[k] = Some(entry);
            if found.iter().all(Option::is_some) {
                break;
            }
        }
    }
    Ok(found)
}

fn c_str(data: &[u8], at: usize) -> Option<&[u8]> {
    let rest = data.get(at..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    Some(&rest[..end])
}

fn le_u32(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

fn le_u64(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?))
}

fn uvarint(data: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in data.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minor_versions() {
        assert_eq!(minor_of("go1.19.8"), Some(19));
        assert_eq!(minor_of("go1.22rc1"), Some(22));
        assert_eq!(minor_of("devel go1.24-1a2b3c Tue"), Some(24));
        assert_eq!(minor_of("weekly"), None);
    }

    #[test]
    fn not_elf_is_an_error_and_a_c_binary_is_not_go() {
        assert!(read(b"not an elf").is_err());
        let me = std::fs::read("/proc/self/exe").unwrap();
        assert_eq!(read(&me).unwrap(), None);
    }

    /// A 1.18-layout table with two functions, names in its funcname table.
    #[test]
    fn pclntab_names_are_found() {
        let mut tab = vec![0u8; 8 + 8 * 8];
        tab[..4].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        tab[6] = 1;
        tab[7] = 8;
        let funcname = tab.len();
        let names = b"main.main\0runtime.gopark\0";
        let pcln = funcname + names.len();
        let header = [2u64, 0, 0x40_1000, funcname as u64, 0, 0, 0, pcln as u64];
        for (i, v) in header.iter().enumerate() {
            tab[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        tab.extend_from_slice(names);
        // functab: (entryoff, funcoff) × 2, then the two _func records (entryoff, nameoff).
        let funcs = 16u32;
        for (entry, func) in [(0x10u32, funcs), (0x80, funcs + 8)] {
            tab.extend_from_slice(&entry.to_le_bytes());
            tab.extend_from_slice(&func.to_le_bytes());
        }
        for (entry, name) in [(0x10u32, 0u32), (0x80, 10)] {
            tab.extend_from_slice(&entry.to_le_bytes());
            tab.extend_from_slice(&name.to_le_bytes());
        }
        assert_eq!(
            pclntab_funcs(&tab, &["runtime.gopark", "main.main", "x"]).unwrap(),
            [Some(0x40_1080), Some(0x40_1010), None]
        );
        assert!(pclntab_funcs(&tab[..20], &["x"]).is_err());
    }
}
