//! User-space twin of the eBPF unwinder, for stacks the kernel cannot walk for us: threads
//! already blocked when the capture starts (their saved registers come from the task
//! iterator; their memory is read through `/proc/<pid>/mem`). Same rows, same rules, same
//! fallback to frame pointers, so a blocking site looks the same whichever side unwound it.

use profiler_common::{
    MAX_STACK_DEPTH,
    unwind::{ProcMappings, UnwindRow, cfa_kind, java_method_frame, rbp_kind},
};

use super::{
    rows::{UC_RBP, UC_RIP, UC_RSP},
    tables::UnwindTables,
};

/// Registers where user code stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// Walks a user stack, leaf first. Without tables (`--unwind fp`), frame pointers only.
pub fn walk(
    regs: Regs,
    tables: Option<(&UnwindTables, &ProcMappings)>,
    read: impl Fn(u64) -> Option<u64>,
) -> Vec<u64> {
    let mut frames = Vec::new();
    if regs.ip == 0 {
        return frames;
    }
    let mut regs = regs;
    while frames.len() < MAX_STACK_DEPTH {
        frames.push(regs.ip);
        let lookup = if frames.len() == 1 {
            regs.ip
        } else {
            regs.ip - 1
        };
        let row = tables.and_then(|(t, m)| t.find_row(m, lookup));
        let caller = match row.map(|r| (r.cfa_kind, r)) {
            Some((cfa_kind::END_OF_STACK, _)) => None,
            Some((cfa_kind::RSP | cfa_kind::RBP | cfa_kind::PLT, r)) => by_cfa(regs, r, &read),
            Some((cfa_kind::SIGNAL_FRAME, _)) => signal_frame(regs.sp, &read),
            Some((cfa_kind::HOTSPOT_INTERPRETER, r)) => {
                // An interpreted Java frame is recorded as its method, as the kernel does,
                // and its caller's stack pointer is the sender sp it saved.
                if let Some(method) = read(regs.bp.wrapping_add(r.cfa_offset as i64 as u64))
                    && method != 0
                    && let Some(last) = frames.last_mut()
                {
                    *last = java_method_frame(method);
                }
                by_frame_pointer(regs, sender_sp(regs.bp, r, &read), &read)
            }
            _ => by_frame_pointer(regs, None, &read),
        };
        match caller {
            Some(caller) => regs = caller,
            None => break,
        }
    }
    frames
}

/// The caller's registers by a CFI row: the CFA from rsp, rbp or the PLT rule, the return
/// address just below it, rbp saved at an offset from it or left as it is. None where the
/// walk ends: a word that cannot be read, a return address of 0, a CFA that does not move
/// up the stack.
fn by_cfa(regs: Regs, r: UnwindRow, read: &impl Fn(u64) -> Option<u64>) -> Option<Regs> {
    let Regs { ip, sp, mut bp } = regs;
    let cfa = match r.cfa_kind {
        cfa_kind::RSP => sp.wrapping_add(r.cfa_offset as i64 as u64),
        cfa_kind::RBP => bp.wrapping_add(r.cfa_offset as i64 as u64),
        cfa_kind::PLT => {
            sp + 8
                + if (ip & 15) >= r.cfa_offset as u64 {
                    8
                } else {
                    0
                }
        }
        _ => return None,
    };
    let ra = read(cfa.wrapping_sub(8))?;
    if r.rbp_kind == rbp_kind::AT_CFA_OFFSET {
        bp = read(cfa.wrapping_add(r.rbp_offset as i64 as u64))?;
    }
    (ra != 0 && cfa > sp).then_some(Regs {
        ip: ra,
        sp: cfa,
        bp,
    })
}

/// The registers a signal handler's frame saved in its `ucontext` at `uc` (the handler's
/// stack pointer): where the interrupted code was. None if unreadable or with ip 0.
fn signal_frame(uc: u64, read: &impl Fn(u64) -> Option<u64>) -> Option<Regs> {
    let ip = read(uc.wrapping_add(UC_RIP))?;
    let sp = read(uc.wrapping_add(UC_RSP))?;
    let bp = read(uc.wrapping_add(UC_RBP))?;
    (ip != 0).then_some(Regs { ip, sp, bp })
}

/// The stack pointer an interpreted frame (rbp `bp`) saved for its caller, where its row
/// says it keeps one and the value is plausible (above the frame, within 1 MiB).
fn sender_sp(bp: u64, r: UnwindRow, read: &impl Fn(u64) -> Option<u64>) -> Option<u64> {
    if r.rbp_offset == 0 {
        return None;
    }
    read(bp.wrapping_add(r.rbp_offset as i64 as u64)).filter(|&s| s >= bp + 16 && s - bp < 1 << 20)
}

/// The caller's registers by frame pointers: [rbp] is the caller's rbp, [rbp + 8] the
/// return address, and the caller's sp `sender_sp` or else just above them.
fn by_frame_pointer(
    regs: Regs,
    sender_sp: Option<u64>,
    read: &impl Fn(u64) -> Option<u64>,
) -> Option<Regs> {
    let Regs { sp, bp, .. } = regs;
    if bp == 0 || bp & 7 != 0 || bp < sp {
        return None;
    }
    let next_bp = read(bp)?;
    let ra = read(bp + 8)?;
    (ra != 0).then_some(Regs {
        ip: ra,
        sp: sender_sp.unwrap_or(bp + 16),
        bp: next_bp,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn without_tables_it_walks_frame_pointers() {
        // bp 0x1000 → (next 0x1100, ret 0xa1); 0x1100 → (next 0, ret 0xa2).
        let mem: HashMap<u64, u64> = [
            (0x1000, 0x1100),
            (0x1008, 0xa1),
            (0x1100, 0),
            (0x1108, 0xa2),
        ]
        .into();
        let regs = Regs {
            ip: 0xa0,
            sp: 0xff0,
            bp: 0x1000,
        };
        assert_eq!(
            walk(regs, None, |a| mem.get(&a).copied()),
            vec![0xa0, 0xa1, 0xa2]
        );
    }

    #[test]
    fn a_chain_that_goes_backwards_or_is_unreadable_ends_the_walk() {
        let mem: HashMap<u64, u64> = [(0x1000, 0x800), (0x1008, 0xa1)].into();
        let regs = Regs {
            ip: 0xa0,
            sp: 0xff0,
            bp: 0x1000,
        };
        assert_eq!(walk(regs, None, |a| mem.get(&a).copied()), vec![0xa0, 0xa1]);
        let regs = Regs {
            ip: 0xa0,
            sp: 0,
            bp: 0x2000,
        };
        assert_eq!(walk(regs, None, |_| None), vec![0xa0]);
        assert!(
            walk(
                Regs {
                    ip: 0,
                    sp: 0,
                    bp: 0
                },
                None,
                |_| None
            )
            .is_empty()
        );
    }

    #[test]
    fn a_self_referencing_chain_terminates() {
        let mem: HashMap<u64, u64> = [(0x1000, 0x1000), (0x1008, 0xa1)].into();
        let regs = Regs {
            ip: 0xa0,
            sp: 0xff0,
            bp: 0x1000,
        };
        assert!(walk(regs, None, |a| mem.get(&a).copied()).len() <= MAX_STACK_DEPTH);
    }
}
