//! The target set: a process's bit in TARGETS, and what happened to a target process during
//! the capture (PROCS).

/// Where process `tgid` is in the target bitmap: (word, bit mask).
#[inline(always)]
pub const fn target_bit(tgid: u32) -> (u32, u64) {
    (tgid >> 6, 1 << (tgid & 63))
}

/// Value of [`crate::names::MAP_PROCS`]: what happened to a target process during the capture.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcEvent {
    /// The target process that forked it (0: not forked during the capture).
    pub parent: u32,
    /// Execs since the capture began: each one replaces its mappings.
    pub execs: u32,
    /// When it was forked (CLOCK_MONOTONIC; 0: before the capture).
    pub forked_ns: u64,
    /// When its last thread exited (0: still running).
    pub exited_ns: u64,
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), u32 and u64 fields, no padding.
unsafe impl aya::Pod for ProcEvent {}
