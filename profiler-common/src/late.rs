//! A sample of a process the kernel has no mapping table for yet, written whole to the
//! LATE_SAMPLES ring for user space to unwind.

/// Words of user stack a [`LateSample`] carries (4 KiB: a process's first moments, the
/// dynamic loader and `main`'s first calls, are shallow).
pub const LATE_STACK_WORDS: usize = 512;

/// An on-CPU sample of a process the kernel has no mapping table for yet (an exec moments ago),
/// written whole to [`crate::names::MAP_LATE_SAMPLES`] instead of aggregated: its registers and the
/// top of its stack, unwound by user space with the same rows once the table exists.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LateSample {
    pub tid: u32,
    pub tgid: u32,
    /// When it was taken (CLOCK_MONOTONIC): user space unwinds it only with mapping records
    /// read after that.
    pub time_ns: u64,
    pub kernel_stack: u64,
    pub period_ns: u64,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Bytes of `stack` copied from `sp` (0: none could be read).
    pub len: u64,
    pub stack: [u64; LATE_STACK_WORDS],
}
