//! User-space twin of the eBPF unwinder, for stacks the kernel cannot walk for us: threads
//! already blocked when the capture starts (their saved registers come from the task
//! iterator; their memory is read through `/proc/<pid>/mem`). Same rows, same rules, same
//! fallback to frame pointers, so a blocking site looks the same whichever side unwound it.

use profiler_common::{
    MAX_STACK_DEPTH,
    unwind::{ProcMappings, cfa_kind, java_method_frame, rbp_kind},
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
    let Regs {
        mut ip,
        mut sp,
        mut bp,
    } = regs;
    let mut frames = Vec::new();
    if ip == 0 {
        return frames;
    }
    while frames.len() < MAX_STACK_DEPTH {
        frames.push(ip);
        let lookup = if frames.len() == 1 { ip } else { ip - 1 };
        let row = tables.and_then(|(t, m)| t.find_row(m, lookup));
        let cfa = match row.map(|r| (r.cfa_kind, r)) {
            Some((cfa_kind::END_OF_STACK, _)) => break,
            Some((cfa_kind::RSP, r)) => sp.wrapping_add(r.cfa_offset as i64 as u64),
            Some((cfa_kind::RBP, r)) => bp.wrapping_add(r.cfa_offset as i64 as u64),
            Some((cfa_kind::PLT, r)) => {
                sp + 8
                    + if (ip & 15) >= r.cfa_offset as u64 {
                        8
                    } else {
                        0
                    }
            }
            Some((cfa_kind::SIGNAL_FRAME, _)) => {
                let uc = sp;
                let (Some(i), Some(s), Some(b)) = (
                    read(uc.wrapping_add(UC_RIP)),
                    read(uc.wrapping_add(UC_RSP)),
                    read(uc.wrapping_add(UC_RBP)),
                ) else {
                    break;
                };
                if i == 0 {
                    break;
                }
                (ip, sp, bp) = (i, s, b);
                continue;
            }
            other => {
                // An interpreted Java frame is recorded as its method, as the kernel does,
                // and its caller's stack pointer is the sender sp it saved.
                let mut sender_sp = None;
                if let Some((cfa_kind::HOTSPOT_INTERPRETER, r)) = other {
                    if let Some(method) = read(bp.wrapping_add(r.cfa_offset as i64 as u64))
                        && method != 0
                        && let Some(last) = frames.last_mut()
                    {
                        *last = java_method_frame(method);
                    }
                    if r.rbp_offset != 0 {
                        sender_sp = read(bp.wrapping_add(r.rbp_offset as i64 as u64))
                            .filter(|&s| s >= bp + 16 && s - bp < 1 << 20);
                    }
                }
                // Frame pointers: [rbp] is the caller's rbp, [rbp + 8] the return address.
                if bp == 0 || bp & 7 != 0 || bp < sp {
                    break;
                }
                let (Some(next_bp), Some(ra)) = (read(bp), read(bp + 8)) else {
                    break;
                };
                if ra == 0 {
                    break;
                }
                (ip, sp, bp) = (ra, sender_sp.unwrap_or(bp + 16), next_bp);
                continue;
            }
        };
        let Some(r) = row else { break };
        let Some(ra) = read(cfa.wrapping_sub(8)) else {
            break;
        };
        if r.rbp_kind == rbp_kind::AT_CFA_OFFSET {
            match read(cfa.wrapping_add(r.rbp_offset as i64 as u64)) {
                Some(b) => bp = b,
                None => break,
            }
        }
        if ra == 0 || cfa <= sp {
            break;
        }
        (ip, sp) = (ra, cfa);
    }
    frames
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
