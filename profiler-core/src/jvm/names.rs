//! The names of what a JVM runs: `Class.method` of a `Method*` (through its ConstMethod, its
//! constant pool, its class and their Symbols) and the names of code blobs, each read once.

use std::collections::HashMap;

use super::{
    error::JvmError,
    layout::Layout,
    memory::{MAX_CSTR, Memory},
    vmstructs::Field,
};

/// Longest Symbol body accepted (class and method names).
const MAX_SYMBOL: usize = 4096;

/// The names read so far, by address.
#[derive(Default)]
pub(super) struct Names {
    /// Names of Java methods by `Method*`. A Method* can be reused after its class is
    /// unloaded; names are cached all the same, as the profiler attaches for seconds.
    methods: HashMap<u64, String>,
    /// Blob names by the address of their C string (they are static strings in libjvm).
    blob_names: HashMap<u64, String>,
}

impl Names {
    pub(super) fn blob_name(&mut self, mem: &Memory, ptr: u64) -> String {
        if ptr == 0 {
            return String::new();
        }
        if let Some(n) = self.blob_names.get(&ptr) {
            return n.clone();
        }
        let name = mem.cstr(ptr, MAX_CSTR).unwrap_or_default();
        self.blob_names.insert(ptr, name.clone());
        name
    }

    /// `Class.method` of a `Method*` ("JitWork.leaf", "java.lang.Thread.sleep"), checked to
    /// be a plausible name, cached per `Method*`.
    pub(super) fn method_name(
        &mut self,
        mem: &Memory,
        l: &Layout,
        method: u64,
    ) -> Result<String, JvmError> {
        if let Some(n) = self.methods.get(&method) {
            return Ok(n.clone());
        }
        let bad = |what: String| mem.invalid(format!("Method* {method:#x}: {what}"));
        let const_method = ptr(mem, method, l.method_const)?;
        let pool = ptr(mem, const_method, l.const_constants)?;
        let name_index = int(mem, const_method, l.const_name_index)?;
        let pool_length = int(mem, pool, l.pool_length)?;
        if name_index <= 0 || name_index >= pool_length {
            return Err(bad(format!(
                "name index {name_index} outside its constant pool of {pool_length}"
            )));
        }
        let entry = (name_index as u64)
            .checked_mul(8)
            .and_then(|e| e.checked_add(l.pool_size));
        let name = mem.u64(past(mem, pool, entry)?)?;
        let holder = ptr(mem, pool, l.pool_holder)?;
        let class = ptr(mem, holder, l.klass_name)?;
        let class = symbol(mem, l, class)?.replace('/', ".");
        let name = symbol(mem, l, name)?;
        let full = format!("{}.{name}", stable_class_name(&class));
        self.methods.insert(method, full.clone());
        Ok(full)
    }
}

/// A non-null pointer field of the object at `at`.
fn ptr(mem: &Memory, at: u64, f: Field) -> Result<u64, JvmError> {
    let v = int(mem, at, f)? as u64;
    if v == 0 || at == 0 {
        return Err(mem.invalid(format!("null pointer at {at:#x}+{}", f.offset)));
    }
    Ok(v)
}

fn int(mem: &Memory, at: u64, f: Field) -> Result<i64, JvmError> {
    if at == 0 {
        return Err(mem.invalid("null object".into()));
    }
    let mut buf = [0u8; 8];
    mem.read(past(mem, at, Some(f.offset))?, &mut buf[..f.size])?;
    // The field was read alone: it sits at 0 in the buffer.
    Field { offset: 0, ..f }
        .get(&buf, 0)
        .ok_or_else(|| mem.invalid("field layout".into()))
}

/// `by` bytes past `at` (None: more than an address holds).
fn past(mem: &Memory, at: u64, by: Option<u64>) -> Result<u64, JvmError> {
    by.and_then(|by| at.checked_add(by))
        .ok_or_else(|| mem.invalid(format!("an object at {at:#x} ends past the address space")))
}

/// A Symbol's text: bounded, valid UTF-8 and without control characters.
fn symbol(mem: &Memory, l: &Layout, sym: u64) -> Result<String, JvmError> {
    let len = int(mem, sym, l.symbol_length)?;
    if len <= 0 || len as usize > MAX_SYMBOL {
        return Err(mem.invalid(format!("Symbol at {sym:#x} has length {len}")));
    }
    let mut body = vec![0u8; len as usize];
    mem.read(past(mem, sym, Some(l.symbol_body))?, &mut body)?;
    match String::from_utf8(body) {
        Ok(s) if !s.chars().any(char::is_control) => Ok(s),
        _ => Err(mem.invalid(format!("Symbol at {sym:#x} is not a printable name"))),
    }
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
}
