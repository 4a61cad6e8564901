//! The eBPF object's global functions against build.rs's export list (`EXPORTS`, handed to
//! the crate as `PROFILER_EBPF_EXPORTS`): the same set both ways, so a `#[no_mangle]`
//! function added without being listed, or a listed one renamed or removed, fails here and
//! not at load time.

use std::collections::BTreeSet;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind, SymbolScope};

/// The functions of `.text` that are global with default visibility: those the verifier
/// checks on their own. Programs live in sections of their own; the compiler's memory
/// builtins (`memcpy`, `memset`, …) are hidden or weak, verified as static subprograms.
fn global_functions(elf: &[u8]) -> BTreeSet<String> {
    let file = object::File::parse(elf).expect("parse the eBPF object");
    let text = file
        .section_by_name(".text")
        .expect("the eBPF object has a .text section")
        .index();
    file.symbols()
        .filter(|s| {
            s.kind() == SymbolKind::Text
                && s.section_index() == Some(text)
                && s.scope() == SymbolScope::Dynamic
                && !s.is_weak()
        })
        .map(|s| s.name().expect("a symbol name").to_string())
        .collect()
}

#[test]
#[cfg_attr(
    no_ebpf_object,
    ignore = "built without the eBPF programs (no nightly eBPF toolchain; `cargo xtask build` installs it)"
)]
fn the_export_list_is_the_objects_global_functions() {
    let exports: BTreeSet<String> = env!("PROFILER_EBPF_EXPORTS")
        .split(',')
        .map(str::to_string)
        .collect();
    let globals = global_functions(super::EBPF_OBJECT);
    assert!(!globals.is_empty(), "no global function in the object");
    let unlisted: Vec<&String> = globals.difference(&exports).collect();
    let absent: Vec<&String> = exports.difference(&globals).collect();
    assert!(
        unlisted.is_empty() && absent.is_empty(),
        "global functions of the eBPF object not in build.rs's EXPORTS: {unlisted:?}; in \
         EXPORTS but not global functions of the object: {absent:?}"
    );
}
