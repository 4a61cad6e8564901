//! Late unwinding: on-CPU samples the kernel took of a process it had no mapping table for
//! yet (an exec moments ago) arrive whole in `LATE_SAMPLES` — registers and the top 4 KiB of
//! the stack — and are unwound here with the same rows and rules as the kernel's walk
//! (profiler-core's `walk`), once the process's table covers the sampled pc. A process that
//! lives 40 ms is then named from its first sample, not from its fourth.
//!
//! A sample is unwound only with mapping records read after it was taken (so its process's
//! mappings are those of the program it ran), and waits up to `WAIT_FOR_TABLE` for a table
//! covering its pc; after that, or when the capture ends, it is unwound with what there is.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use profiler_common::{
    HASH_SEED, LATE_STACK_WORDS, LateSample, SampleKey, SampleValue, hash_step, names, stack_id,
    unwind::ProcMappings,
};

use crate::kernel::probes::{ProbeError, Probes};
use profiler_core::unwind::walk::{Regs, walk};

/// How long a sample waits for its process's table to cover its pc (the records of a new
/// program's libraries come within milliseconds; a file's rows take up to ~0.3 s to build).
const WAIT_FOR_TABLE: Duration = Duration::from_secs(1);

/// Samples keyed as the kernel keys its own, and their user stacks (frames leaf first).
pub type LateUnwound = (Vec<(SampleKey, SampleValue)>, HashMap<u64, Vec<u64>>);

/// A sample read from the ring, waiting for its table.
struct Pending {
    sample: Box<LateSample>,
    read_at: Instant,
}

pub struct LateSamples {
    ring: RingBuf<MapData>,
    pending: Vec<Pending>,
    /// (tid, user stack, kernel stack) → count and period.
    samples: HashMap<(u32, u64, u64), SampleValue>,
    /// Frames (leaf first) by stack id, as the kernel's ids are made.
    stacks: HashMap<u64, Vec<u64>>,
    /// Samples unwound without a table covering their pc (their process gone, or the wait
    /// over).
    pub without_table: u64,
}

impl std::fmt::Debug for LateSamples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LateSamples")
            .field("pending", &self.pending.len())
            .field("samples", &self.samples.len())
            .finish()
    }
}

/// What the process of a sample offers its unwinding now: its mapping table, if any.
pub trait Tables {
    /// The table of `pid` (None: not a known process).
    fn table(&mut self, pid: u32) -> Option<Box<ProcMappings>>;
    fn unwind_tables(&self) -> Option<&profiler_core::unwind::tables::UnwindTables>;
}

impl LateSamples {
    /// Takes the ring out of `probes`.
    pub fn new(probes: &mut Probes) -> Result<Self, ProbeError> {
        let map = probes.take_map(names::MAP_LATE_SAMPLES)?;
        let ring = RingBuf::try_from(map).map_err(|source| ProbeError::Map {
            name: names::MAP_LATE_SAMPLES,
            source,
        })?;
        Ok(Self {
            ring,
            pending: Vec::new(),
            samples: HashMap::new(),
            stacks: HashMap::new(),
            without_table: 0,
        })
    }

    /// Reads the ring, then unwinds every sample taken before `records_read_ns` (when the
    /// mapping records were last read) whose table covers its pc, or that waited long enough;
    /// with `last`, every sample.
    pub fn unwind(&mut self, tables: &mut impl Tables, records_read_ns: u64, last: bool) {
        while let Some(item) = self.ring.next() {
            if let Some(sample) = parse(&item) {
                self.pending.push(Pending {
                    sample,
                    read_at: Instant::now(),
                });
            }
        }
        let mut waiting = Vec::new();
        for p in std::mem::take(&mut self.pending) {
            let s = &p.sample;
            if !last && s.time_ns >= records_read_ns {
                waiting.push(p);
                continue;
            }
            let table = tables.table(s.tgid);
            let covered = table.as_ref().is_some_and(|t| covers(t, s.ip));
            if !covered && !last && p.read_at.elapsed() < WAIT_FOR_TABLE {
                waiting.push(p);
                continue;
            }
            if !covered {
                self.without_table += 1;
            }
            let frames = walk(
                Regs {
                    ip: s.ip,
                    sp: s.sp,
                    bp: s.bp,
                },
                tables.unwind_tables().zip(table.as_deref()),
                |addr| stack_word(s, addr),
            );
            self.add(s, frames);
        }
        self.pending = waiting;
    }

    fn add(&mut self, s: &LateSample, frames: Vec<u64>) {
        let user = if frames.is_empty() {
            stack_id::EMPTY
        } else {
            stack_id::from_hash(frames.iter().fold(HASH_SEED, |h, &f| hash_step(h, f)))
        };
        if user != stack_id::EMPTY {
            self.stacks.entry(user).or_insert(frames);
        }
        let value = self
            .samples
            .entry((s.tid, user, s.kernel_stack))
            .or_default();
        value.count += 1;
        value.period_ns += s.period_ns;
    }

    /// The samples unwound, keyed as the kernel keys its own, and their user stacks.
    pub fn finish(self) -> LateUnwound {
        let samples = self
            .samples
            .into_iter()
            .map(|((tid, user_stack, kernel_stack), value)| {
                let key = SampleKey {
                    tid,
                    epoch: 0,
                    user_stack,
                    kernel_stack,
                };
                (key, value)
            })
            .collect();
        (samples, self.stacks)
    }
}

/// Whether `table` has rows for the mapping holding `ip`.
fn covers(table: &ProcMappings, ip: u64) -> bool {
    let count = (table.count as usize).min(table.entries.len());
    table.entries[..count]
        .iter()
        .any(|m| m.start <= ip && ip < m.end && m.row_count > 0)
}

/// The stack word at `addr`, if the sample copied it.
fn stack_word(s: &LateSample, addr: u64) -> Option<u64> {
    let offset = usize::try_from(addr.checked_sub(s.sp)?).ok()?;
    let len = (s.len as usize).min(LATE_STACK_WORDS * 8);
    if offset.checked_add(8)? > len {
        return None;
    }
    let (word, within) = (offset / 8, offset % 8);
    if within == 0 {
        return s.stack.get(word).copied();
    }
    // An unaligned word straddles two copied ones.
    let lo = *s.stack.get(word)?;
    let hi = *s.stack.get(word + 1)?;
    let shift = within as u32 * 8;
    Some((lo >> shift) | (hi << (64 - shift)))
}

/// A record of the ring, if it is one whole `LateSample`.
fn parse(item: &[u8]) -> Option<Box<LateSample>> {
    if item.len() < std::mem::size_of::<LateSample>() {
        return None;
    }
    // SAFETY: the kernel wrote a whole `LateSample` (repr(C), integers only) here; the read
    // is unaligned-safe.
    let sample = unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<LateSample>()) };
    Some(Box::new(sample))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(sp: u64, words: &[u64]) -> LateSample {
        let mut stack = [0u64; LATE_STACK_WORDS];
        stack[..words.len()].copy_from_slice(words);
        LateSample {
            tid: 1,
            tgid: 1,
            time_ns: 0,
            kernel_stack: 0,
            period_ns: 1,
            ip: 0,
            sp,
            bp: 0,
            len: (words.len() * 8) as u64,
            stack,
        }
    }

    #[test]
    fn words_are_read_from_the_copy_only() {
        let s = sample(0x1000, &[0x1111_2222_3333_4444, 0x5555_6666_7777_8888]);
        assert_eq!(stack_word(&s, 0x1000), Some(0x1111_2222_3333_4444));
        assert_eq!(stack_word(&s, 0x1008), Some(0x5555_6666_7777_8888));
        assert_eq!(stack_word(&s, 0x1004), Some(0x7777_8888_1111_2222));
        // Below sp, or past what was copied: not known.
        assert_eq!(stack_word(&s, 0xff8), None);
        assert_eq!(stack_word(&s, 0x1010), None);
        assert_eq!(stack_word(&s, 0x100c), None);
    }

    #[test]
    fn a_record_shorter_than_a_sample_is_refused() {
        assert!(parse(&[0u8; 64]).is_none());
        let s = sample(0x2000, &[7]);
        // SAFETY: reading the bytes of a plain repr(C) value.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&s as *const LateSample).cast::<u8>(),
                std::mem::size_of::<LateSample>(),
            )
        };
        let back = parse(bytes).expect("a whole record");
        assert_eq!((back.sp, back.len, back.stack[0]), (0x2000, 8, 7));
    }
}
