//! Stacks: a stack's id (a hash of its frames, or a reserved id saying why it is not in the
//! stack table) and a stack as STACKS stores it.

/// Deepest stack the kernel helpers and our stack table keep (the kernel's
/// `PERF_MAX_STACK_DEPTH` default is 127 as well).
pub const MAX_STACK_DEPTH: usize = 127;

/// Stack ids. A real stack's id is a 63-bit hash of its frames; ids with the top bit set are
/// reserved for stacks that are not in the stack table, so the sample or wait that carries one
/// still counts (its time is never dropped) while the reason shows in the flame graph.
pub mod stack_id {
    /// No frames (a sample taken in user mode has no kernel stack, a kernel thread no user
    /// stack).
    pub const EMPTY: u64 = 0;
    /// Top bit: not a hash.
    pub const RESERVED: u64 = 1 << 63;
    /// The kernel helper or the unwinder failed to produce the stack.
    pub const LOST_FETCH: u64 = RESERVED | 1;
    /// The stack table was full.
    pub const LOST_TABLE_FULL: u64 = RESERVED | 2;
    /// Used by user space only: on-CPU time measured at context switches that no sample fell
    /// into (short bursts between samples).
    pub const UNSAMPLED: u64 = RESERVED | 3;
    /// Used by user space only: the user stack of a thread of another process (a waker),
    /// which the target's symbols cannot name.
    pub const FOREIGN: u64 = RESERVED | 4;
    /// Used by user space only: CPU time the scheduler charged to a woken thread before it
    /// was switched in (its CPU leaving idle, or finishing the task it preempted).
    pub const SWITCHING_IN: u64 = RESERVED | 5;
    /// Used by user space only: the profiler's own programs, run on the thread's CPU time.
    pub const PROFILER: u64 = RESERVED | 6;
    /// Used by user space only: time a thread held its CPU that the kernel charged neither
    /// as CPU time nor as run-queue wait (steal on a virtual machine).
    pub const UNCHARGED: u64 = RESERVED | 7;
    /// Used by user space only: time of a thread's waits that the wait table had no room
    /// for (its state unknown: shown as lost, never as time on the CPU).
    pub const LOST_WAITS: u64 = RESERVED | 8;
    /// `SNAPSHOT | i`: the stack user space recorded for thread snapshot `i` at capture start
    /// (a thread already blocked when the capture began has no switch-out event).
    pub const SNAPSHOT: u64 = RESERVED | (1 << 32);

    /// Turns a frame hash into a stack id: never 0 and never reserved.
    #[inline(always)]
    pub const fn from_hash(hash: u64) -> u64 {
        let id = hash & !RESERVED;
        if id == EMPTY { 1 } else { id }
    }

    /// The snapshot index carried by a snapshot id.
    pub const fn snapshot_index(id: u64) -> Option<u32> {
        if id & SNAPSHOT == SNAPSHOT {
            Some(id as u32)
        } else {
            None
        }
    }
}

/// 64-bit frame hash (FNV-1a over 8-byte words, then a final avalanche). Shared so that the
/// eBPF side and the tests agree on ids.
#[inline(always)]
pub const fn hash_step(hash: u64, word: u64) -> u64 {
    (hash ^ word).wrapping_mul(0x0000_0100_0000_01b3)
}

/// Starting value of [`hash_step`].
pub const HASH_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// Final mix (murmur3's fmix64) so that stacks differing only in the last frame spread over
/// the whole id space.
#[inline(always)]
pub const fn hash_finish(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The generation of a user stack walked while its process had no mapping table (an exec
/// moments ago, or a child forked before its parent's table was published): by frame pointers
/// alone, which in code built without them read on into garbage. Never a table's generation
/// (uploads count up from 1).
pub const NO_TABLE_GENERATION: u32 = u32::MAX;

/// One stack, as stored in [`crate::names::MAP_STACKS`]: frames leaf first, the low 32 bits of
/// `len` of them valid, the rest zero. The high 32 bits of `len` hold the mapping-table generation
/// a user stack was unwound under (0 for kernel stacks and helper-fetched user stacks,
/// [`NO_TABLE_GENERATION`] for a walk whose process had no table): which layout's files name its
/// addresses.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Stack {
    pub len: u64,
    pub frames: [u64; MAX_STACK_DEPTH],
}

impl Stack {
    pub const fn frames(&self) -> &[u64] {
        let len = (self.len & 0xffff_ffff) as usize;
        let len = if len < MAX_STACK_DEPTH {
            len
        } else {
            MAX_STACK_DEPTH
        };
        self.frames.split_at(len).0
    }

    pub const fn generation(&self) -> u32 {
        (self.len >> 32) as u32
    }
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only u64 fields.
unsafe impl aya::Pod for Stack {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_ids_never_collide_with_reserved_ones() {
        assert_eq!(stack_id::from_hash(0), 1);
        assert_eq!(stack_id::from_hash(stack_id::RESERVED), 1);
        assert_eq!(stack_id::from_hash(u64::MAX) & stack_id::RESERVED, 0);
        assert_eq!(stack_id::snapshot_index(stack_id::SNAPSHOT | 7), Some(7));
        assert_eq!(stack_id::snapshot_index(stack_id::LOST_FETCH), None);
        assert_eq!(stack_id::snapshot_index(12345), None);
    }
}
