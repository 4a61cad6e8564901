//! A HotSpot JVM's code cache → unwind rows, so compiled Java frames unwind without frame
//! pointers and interpreted ones are named by their method. The JVM's own structures say
//! where each piece of code is and how big its frame is (read by `crate::jvm`); here each
//! piece becomes rows in the same format as a file's `.eh_frame` rows, so the kernel needs
//! no HotSpot-specific search, only one rule for the interpreter.
//!
//! HotSpot's x86_64 frames (`frame_x86.cpp`, `sender_for_compiled_frame`):
//! - compiled code (nmethods, runtime stubs) builds a fixed-size frame in its prologue:
//!   `frame_size` words from the stack pointer to the caller's stack pointer, the return
//!   address in the last word and the caller's rbp in the one below it, whether or not
//!   `-XX:+PreserveFramePointer` also makes rbp a frame pointer. Before the frame is complete
//!   (the verified entry, the stack bang) only the return address is on the stack.
//! - the template interpreter links its frames through rbp, always, and keeps the `Method*`
//!   it runs at a fixed slot below rbp.
//! - vtable stubs only jump: no frame, the return address at rsp; so, for nearly all of
//!   their length, do the adapters between compiled and interpreted code.
//! - everything else (the call stub, buffer blobs with several stubs inside, most of which
//!   build an rbp frame) has no single rule: frame pointers, as for code without rows.

use profiler_common::unwind::{UnwindRow, cfa_kind, rbp_kind};

/// One piece of the code cache as the unwinder needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JitCode {
    pub start: u64,
    pub end: u64,
    pub frame: JitFrame,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JitFrame {
    /// A fixed frame of `size_words` words, complete from `complete` on.
    Fixed { complete: u64, size_words: u32 },
    /// The template interpreter: the `Method*` at rbp + `method_offset` bytes, the caller's
    /// stack pointer at rbp + `sender_sp_offset` bytes.
    Interpreter {
        method_offset: i32,
        sender_sp_offset: i16,
    },
    /// No frame at all: the return address at rsp (vtable stubs, which only jump; the
    /// adapters between compiled and interpreted code, nearly all of their length).
    Frameless,
    /// No rule: frame pointers.
    FramePointer,
}

/// Rows for `code` (any order; overlapping pieces are dropped), relative to the returned base,
/// covering `[base, end)`: the pieces and, where the cache's heaps are known (`heaps`: their
/// lowest and highest committed addresses, `(0, 0)` if not) and fit a row's pc, all of them. Space between
/// pieces is `JIT_GAP` (code the JIT compiles there after this read: the kernel counts the
/// frames it meets there, so the cache is read again soon); a piece without a rule is
/// `NO_INFO` (frame pointers, not counted). Empty when nothing has a rule or the span
/// exceeds a row's 32-bit pc.
pub fn jit_rows(code: &[JitCode], heaps: (u64, u64)) -> (u64, u64, Vec<UnwindRow>) {
    let mut code: Vec<&JitCode> = code.iter().filter(|c| c.end > c.start).collect();
    code.sort_by_key(|c| c.start);
    if !code.iter().any(|c| has_rule(c)) {
        return (0, 0, Vec::new());
    }
    let (Some(first), Some(last)) = (code.first(), code.iter().map(|c| c.end).max()) else {
        return (0, 0, Vec::new());
    };
    let fits = |(base, end): (u64, u64)| end - base <= u64::from(u32::MAX);
    let with_heaps = (first.start.min(heaps.0), last.max(heaps.1));
    let (base, end) = if heaps.1 > heaps.0 && fits(with_heaps) {
        with_heaps
    } else if fits((first.start, last)) {
        (first.start, last)
    } else {
        return (0, 0, Vec::new());
    };
    let mut rows = Vec::with_capacity(code.len() * 3 + 1);
    if base < first.start {
        rows.push(gap(0));
    }
    let mut covered_to = base;
    for c in code {
        if c.start < covered_to {
            // Overlaps the previous piece: the cache changed while it was read.
            continue;
        }
        piece_rows(c, base, &mut rows);
        covered_to = c.end;
    }
    (base, end, rows)
}

/// Whether a piece unwinds by a rule of its own (else by frame pointers).
fn has_rule(c: &JitCode) -> bool {
    match c.frame {
        JitFrame::Interpreter { .. } | JitFrame::Frameless => true,
        JitFrame::Fixed { size_words, .. } => frame_bytes(size_words).is_some(),
        JitFrame::FramePointer => false,
    }
}

/// A fixed frame's size in bytes: None beyond 2 GiB or without the two words of linkage
/// (not a frame).
fn frame_bytes(size_words: u32) -> Option<i32> {
    i32::try_from(u64::from(size_words) * 8)
        .ok()
        .filter(|&size| size >= 16)
}

/// Space the last read found no code in, from `pc` on.
fn gap(pc: u32) -> UnwindRow {
    row(pc, (cfa_kind::JIT_GAP, 0), (rbp_kind::UNCHANGED, 0))
}

/// Pushes the rows of one piece (pcs relative to `base`), ending with a gap at its end.
fn piece_rows(c: &JitCode, base: u64, rows: &mut Vec<UnwindRow>) {
    let pc = |addr: u64| (addr - base) as u32;
    let frame_pointers = row(
        pc(c.start),
        (cfa_kind::NO_INFO, 0),
        (rbp_kind::UNCHANGED, 0),
    );
    match c.frame {
        JitFrame::Interpreter {
            method_offset,
            sender_sp_offset,
        } => rows.push(row(
            pc(c.start),
            (cfa_kind::HOTSPOT_INTERPRETER, method_offset),
            (rbp_kind::UNCHANGED, sender_sp_offset),
        )),
        JitFrame::Fixed {
            complete,
            size_words,
        } => match frame_bytes(size_words) {
            Some(size) => {
                if complete > c.start {
                    rows.push(return_address_at_rsp(pc(c.start)));
                }
                if complete < c.end {
                    rows.push(row(
                        pc(complete.max(c.start)),
                        (cfa_kind::RSP, size),
                        (rbp_kind::AT_CFA_OFFSET, -16),
                    ));
                }
            }
            None => rows.push(frame_pointers),
        },
        JitFrame::Frameless => rows.push(return_address_at_rsp(pc(c.start))),
        JitFrame::FramePointer => rows.push(frame_pointers),
    }
    rows.push(gap(pc(c.end)));
}

/// A row from `pc` on: its CFA rule and offset, its rbp rule and offset.
fn row(pc: u32, (cfa_kind, cfa_offset): (u8, i32), (rbp_kind, rbp_offset): (u8, i16)) -> UnwindRow {
    UnwindRow {
        pc,
        cfa_offset,
        rbp_offset,
        cfa_kind,
        rbp_kind,
    }
}

/// No frame (yet): the return address at rsp, rbp the caller's.
fn return_address_at_rsp(pc: u32) -> UnwindRow {
    row(pc, (cfa_kind::RSP, 8), (rbp_kind::UNCHANGED, 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::find_row;

    #[test]
    fn compiled_code_gets_its_frame_after_the_prologue_and_gaps_fall_back() {
        let code = [
            JitCode {
                start: 0x2000,
                end: 0x2100,
                frame: JitFrame::Interpreter {
                    method_offset: -24,
                    sender_sp_offset: -8,
                },
            },
            JitCode {
                start: 0x1000,
                end: 0x1080,
                frame: JitFrame::Fixed {
                    complete: 0x1010,
                    size_words: 6,
                },
            },
            JitCode {
                start: 0x1100,
                end: 0x1200,
                frame: JitFrame::FramePointer,
            },
        ];
        let (base, end, rows) = jit_rows(&code, (0, 0));
        assert_eq!((base, end), (0x1000, 0x2100));
        let at = |addr: u64| *find_row(&rows, (addr - base) as u32).expect("row");
        assert_eq!(
            (at(0x1000).cfa_kind, at(0x1000).cfa_offset),
            (cfa_kind::RSP, 8)
        );
        let body = at(0x1040);
        assert_eq!((body.cfa_kind, body.cfa_offset), (cfa_kind::RSP, 48));
        assert_eq!(
            (body.rbp_kind, body.rbp_offset),
            (rbp_kind::AT_CFA_OFFSET, -16)
        );
        // Between pieces: space the JIT may fill before the next read; a piece without a
        // rule: frame pointers.
        assert_eq!(at(0x1080).cfa_kind, cfa_kind::JIT_GAP);
        assert_eq!(at(0x1150).cfa_kind, cfa_kind::NO_INFO);
        assert_eq!(at(0x1200).cfa_kind, cfa_kind::JIT_GAP);
        // The heaps known: the rows cover all of them, gaps at both ends.
        let (base, end, rows) = jit_rows(&code, (0x800, 0x4000));
        assert_eq!((base, end), (0x800, 0x4000));
        let at = |addr: u64| *find_row(&rows, (addr - base) as u32).expect("row");
        assert_eq!(at(0x900).cfa_kind, cfa_kind::JIT_GAP);
        assert_eq!(at(0x1040).cfa_offset, 48);
        assert_eq!(at(0x3000).cfa_kind, cfa_kind::JIT_GAP);
        let interp = at(0x20f0);
        assert_eq!(
            (interp.cfa_kind, interp.cfa_offset, interp.rbp_offset),
            (cfa_kind::HOTSPOT_INTERPRETER, -24, -8)
        );
    }

    #[test]
    fn overlapping_or_frameless_pieces_are_left_to_frame_pointers() {
        let fixed = |start, end, size_words| JitCode {
            start,
            end,
            frame: JitFrame::Fixed {
                complete: start,
                size_words,
            },
        };
        let none = (0, 0);
        let (_, _, rows) = jit_rows(&[fixed(0x1000, 0x1100, 4), fixed(0x1080, 0x1200, 4)], none);
        assert_eq!(rows.len(), 2, "{rows:?}");
        let (_, _, rows) = jit_rows(&[fixed(0x1000, 0x1100, 1)], none);
        assert!(rows.is_empty());
        let (_, _, rows) = jit_rows(
            &[fixed(0x1000, 0x1000 + (1 << 33), 4), fixed(0, 8, 4)],
            none,
        );
        assert!(rows.is_empty());
        // Heaps too large for a row's pc: the pieces alone.
        let (base, end, _) = jit_rows(&[fixed(0x1000, 0x1100, 4)], (0x1000, 1 << 34));
        assert_eq!((base, end), (0x1000, 0x1100));
    }
}
