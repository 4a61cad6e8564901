//! The BPF stack a program needs with every subprogram it can call, read from the object.
//!
//! The verifier gives a program and the subprograms it calls 512 bytes of stack together,
//! unless the kernel runs the larger ones on private stacks (6.13 on, and only where the JIT
//! and the program type allow it): `sched_switch` with its accounting and unwinding outgrew
//! 512 unnoticed on a host that used private stacks and was rejected on one that did not
//! ("combined stack size of 5 calls is 560"). Each function's depth here is what the
//! verifier counts: the lowest frame-pointer offset it touches, rounded up to 16 bytes (the
//! JIT's granularity).

use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SectionIndex, SymbolKind};

/// `MAX_BPF_STACK` (include/linux/filter.h).
pub const MAX_BPF_STACK: u64 = 512;

const INSN: usize = 8;
/// `BPF_JMP | BPF_CALL`, and `src_reg` of a call to a BPF function (`BPF_PSEUDO_CALL`).
const CALL: u8 = 0x85;
const PSEUDO_CALL: u8 = 1;
/// `BPF_LD | BPF_IMM | BPF_DW`: two instruction slots.
const LD_IMM64: u8 = 0x18;
/// `BPF_ALU64 | BPF_MOV | BPF_X` and `BPF_ALU64 | BPF_ADD | BPF_K`: `rX = r10; rX += -n`.
const MOV64_REG: u8 = 0xbf;
const ADD64_IMM: u8 = 0x07;
/// Instruction classes that access memory at `reg + off`: LDX reads through `src`, ST and
/// STX write through `dst`.
const CLASS_LDX: u8 = 0x01;
const CLASS_ST: u8 = 0x02;
const CLASS_STX: u8 = 0x03;
const FP: u8 = 10;

/// One function: where it is and what it calls.
#[derive(Debug)]
struct Function {
    name: String,
    depth: u64,
    calls: Vec<(SectionIndex, u64)>,
}

/// The deepest call chain of each program (an entry function outside `.text`): its bytes of
/// stack and the functions on it.
pub fn deepest_chains(elf: &[u8]) -> Result<Vec<(String, u64, Vec<String>)>, object::Error> {
    let file = object::File::parse(elf)?;
    let mut functions: HashMap<(SectionIndex, u64), Function> = HashMap::new();
    let mut entries = Vec::new();
    for symbol in file.symbols() {
        let Some(section_index) = symbol.section_index() else {
            continue;
        };
        if symbol.kind() != SymbolKind::Text || symbol.size() == 0 {
            continue;
        }
        let section = file.section_by_index(section_index)?;
        let data = section.data()?;
        let start = symbol.address() as usize;
        let Some(code) = data.get(start..start + symbol.size() as usize) else {
            continue;
        };
        // Calls that the linker left for the loader name their target by relocation.
        let mut relocated: HashMap<u64, (SectionIndex, u64)> = HashMap::new();
        for (offset, reloc) in section.relocations() {
            if let RelocationTarget::Symbol(index) = reloc.target()
                && let Ok(target) = file.symbol_by_index(index)
                && let Some(target_section) = target.section_index()
            {
                relocated.insert(offset, (target_section, target.address()));
            }
        }
        let name = symbol.name().unwrap_or("?").to_string();
        let function = scan(code, symbol.address(), section_index, &relocated, name);
        if section.name() != Ok(".text") {
            entries.push((section_index, symbol.address()));
        }
        functions.insert((section_index, symbol.address()), function);
    }
    let mut chains = Vec::new();
    for entry in entries {
        let (depth, path) = deepest(&functions, entry, &mut Vec::new());
        chains.push((functions[&entry].name.clone(), depth, path));
    }
    chains.sort();
    Ok(chains)
}

fn scan(
    code: &[u8],
    base: u64,
    section: SectionIndex,
    relocated: &HashMap<u64, (SectionIndex, u64)>,
    name: String,
) -> Function {
    let mut depth = 0u64;
    let mut calls = Vec::new();
    // Registers that hold r10 (the frame pointer) copied and not yet changed otherwise.
    let mut holds_fp = [false; 11];
    let mut at = 0;
    while at + INSN <= code.len() {
        let insn = &code[at..at + INSN];
        let (opcode, dst, src) = (insn[0], insn[1] & 0x0f, insn[1] >> 4);
        let off = i16::from_le_bytes([insn[2], insn[3]]);
        let imm = i32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
        let offset = base + at as u64;
        let below_fp = |off: i64| if off < 0 { off.unsigned_abs() } else { 0 };
        match opcode & 0x07 {
            CLASS_LDX if src == FP => depth = depth.max(below_fp(off.into())),
            CLASS_ST | CLASS_STX if dst == FP => depth = depth.max(below_fp(off.into())),
            _ => {}
        }
        if opcode == ADD64_IMM && holds_fp[usize::from(dst.min(10))] {
            depth = depth.max(below_fp(imm.into()));
        } else if opcode == CALL && src == PSEUDO_CALL {
            // The target is `imm + 1` instructions on from the call: from the relocation's
            // symbol when there is one (0 for a call to `.text`'s section symbol plus `imm`),
            // else from the call itself.
            let (target_section, from) =
                relocated.get(&offset).copied().unwrap_or((section, offset));
            let target = from as i64 + (i64::from(imm) + 1) * INSN as i64;
            calls.push((target_section, target as u64));
        } else if opcode == LD_IMM64
            && let Some(&(target_section, from)) = relocated.get(&offset)
            && target_section == section
        {
            // A function's address (a `bpf_loop` callback): the verifier counts the callback's
            // stack on top of its caller's. The immediate is a byte offset from the symbol.
            let target = from as i64 + i64::from(imm);
            calls.push((target_section, target as u64));
        }
        let writes_dst = matches!(opcode & 0x07, 0x04 | 0x07 | CLASS_LDX) || opcode == LD_IMM64;
        if opcode == MOV64_REG {
            holds_fp[usize::from(dst.min(10))] = src == FP;
        } else if writes_dst && opcode != ADD64_IMM {
            holds_fp[usize::from(dst.min(10))] = false;
        }
        if opcode == CALL {
            // Helpers and functions clobber r0-r5.
            holds_fp[..6].fill(false);
        }
        at += if opcode == LD_IMM64 { 2 * INSN } else { INSN };
    }
    Function {
        name,
        depth: depth.div_ceil(16) * 16,
        calls,
    }
}

fn deepest(
    functions: &HashMap<(SectionIndex, u64), Function>,
    at: (SectionIndex, u64),
    path: &mut Vec<(SectionIndex, u64)>,
) -> (u64, Vec<String>) {
    let Some(function) = functions.get(&at) else {
        return (0, Vec::new());
    };
    if path.contains(&at) {
        // BPF has no recursion; the verifier would reject it anyway.
        return (0, Vec::new());
    }
    path.push(at);
    let mut best = (0, Vec::new());
    for &callee in &function.calls {
        let below = deepest(functions, callee, path);
        if below.0 > best.0 {
            best = below;
        }
    }
    path.pop();
    let mut names = vec![format!("{} ({} B)", function.name, function.depth)];
    names.extend(best.1);
    (function.depth + best.0, names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(
        no_ebpf_object,
        ignore = "built without the eBPF programs (no nightly eBPF toolchain; `cargo xtask build` installs it)"
    )]
    fn every_program_fits_the_stack_without_private_stacks() {
        let chains = deepest_chains(super::super::EBPF_OBJECT).expect("parse the eBPF object");
        let names: Vec<&str> = chains.iter().map(|c| c.0.as_str()).collect();
        // The check must see the programs and the subprograms they call, or it proves nothing.
        assert!(names.contains(&"sched_switch"), "{names:?}");
        let switch = chains.iter().find(|c| c.0 == "sched_switch").unwrap();
        assert!(
            switch.2.len() >= 3,
            "sched_switch calls nothing? {switch:?}"
        );
        for (name, depth, path) in &chains {
            eprintln!("{name}: {depth} B: {}", path.join(" → "));
            assert!(
                *depth <= MAX_BPF_STACK,
                "{name} needs {depth} bytes of stack with its subprograms: {}",
                path.join(" → ")
            );
        }
    }
}
