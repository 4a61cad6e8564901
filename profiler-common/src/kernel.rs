//! The kernel's own constants the programs rely on: `TASK_COMM_LEN`, the task state bits,
//! and the bpf(2) map flag and errno of an insert that lost a race.

/// `TASK_COMM_LEN` in the kernel.
pub const COMM_LEN: usize = 16;

/// `BPF_NOEXIST`: a map update that only creates (include/uapi/linux/bpf.h).
pub const BPF_NOEXIST: u64 = 1;

/// `EEXIST`, the errno of a map insert (`BPF_NOEXIST`) whose key another CPU inserted first;
/// helpers return it negated.
pub const EEXIST: i32 = 17;

/// Task state bits of `include/linux/sched.h` (stable since 5.14).
pub mod task_state {
    pub const RUNNING: u32 = 0x0000;
    pub const INTERRUPTIBLE: u32 = 0x0001;
    pub const UNINTERRUPTIBLE: u32 = 0x0002;
    pub const EXIT_DEAD: u32 = 0x0010;
    pub const EXIT_ZOMBIE: u32 = 0x0020;
    pub const DEAD: u32 = 0x0080;
    pub const NOLOAD: u32 = 0x0400;
    pub const RTLOCK_WAIT: u32 = 0x1000;
}
