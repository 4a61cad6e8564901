//! The profiler's eBPF side: probes → in-kernel aggregates, drained by user space while the
//! capture runs (every key carries the drain epoch's parity, `Control::epoch`).
//!
//! Programs:
//! - `sample::on_cpu_sample`: perf_event (cpu-clock) on every CPU → on-CPU samples per (tid,
//!   stacks).
//! - `switch::sched_switch` (tp_btf): a thread's cycles split by the scheduler's own
//!   counters → on-CPU time per thread, waits per (tid, stacks, state), site histograms,
//!   wakers; the wait a switch-out begins, in the thread's entry.
//! - `wakeup::sched_waking`, `wakeup::sched_wakeup_new` (tp_btf): when and by whom a waiting
//!   thread was made runnable; a new thread's first cycle.
//! - `targets::sched_process_fork`, `sched_process_exec`, `sched_process_exit` (tp_btf): the
//!   target set follows a process tree; execs and exits noted for user space.
//! - `snapshot::snapshot_tasks` (iter/task): state, registers and kernel stack of every target
//!   thread at capture start (a thread already blocked has no switch-out to learn it from).
//!
//! With the timeline on, `switch` and `sample` also write each long wait and each sample with
//! its time to a ring buffer (`timeline`), which user space reads every drain.
//!
//! Shared pieces: `stack` turns "the current task's stack" into a stack id; `unwind` walks
//! user stacks from `.eh_frame` rows; `kstack` recognises a sleeping thread's kernel stack;
//! `task` reads task_struct fields; `maps` holds the maps and counters.
//!
//! Every program filters foreign processes first with one comparison, aggregates in maps, and
//! counts each loss in `COUNTERS`. Nothing else is sent per event to user space.
#![no_std]
#![no_main]
// `atomic_xadd`: the BPF target has no atomic types with read-modify-write (see `switch.rs`).
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod goroutine;
mod kstack;
mod late;
mod maps;
mod resource;
mod sample;
mod snapshot;
mod stack;
mod switch;
mod targets;
mod task;
mod timeline;
mod unwind;
mod wakeup;

use aya_ebpf::Global;
use profiler_common::{Config, FdOffsets};

/// Load-time configuration, written by the loader with `override_global`.
#[unsafe(no_mangle)]
static CONFIG: Global<Config> = Global::new(Config {
    target_words: 0,
    task_pid_offset: 0,
    task_tgid_offset: 0,
    task_comm_offset: 0,
    task_state_offset: 0,
    task_exec_offset: 0,
    task_cfs_rq_offset: 0,
    cfs_rq_rq_offset: 0,
    percpu_runqueues: 0,
    percpu_preempt_count: 0,
    task_run_delay_offset: 0,
    task_on_cpu_offset: 0,
    flags: 0,
    task_start_time_offset: 0,
    min_block_ns: 0,
    max_block_ns: u64::MAX,
    timeline_min_ns: u64::MAX,
    fd: FdOffsets {
        task_files: 0,
        files_fdt: 0,
        fdt_max_fds: 0,
        fdt_fd: 0,
        file_inode: 0,
        file_private: 0,
        inode_mode: 0,
        inode_ino: 0,
        inode_sb: 0,
        sb_dev: 0,
        socket_sk: 0,
        sk_family: 0,
        sk_daddr: 0,
        sk_saddr: 0,
        sk_dport: 0,
        sk_num: 0,
        sk_v6_daddr: 0,
        sk_v6_saddr: 0,
        sk_protocol: 0,
        _pad: 0,
    },
});

/// The load-time configuration, read in place. Each field is read where it is used: a copy
/// of the whole struct (what `Global::load` makes) took ~100 bytes of the BPF stack in every
/// program that read it, and `sched_switch` with the subprograms it calls must fit 512 bytes
/// together on kernels without private BPF stacks (before 6.13, or where the JIT declines
/// them: seen on an Intel Xeon host with 6.18).
#[inline(always)]
fn config() -> &'static Config {
    // The address laundered through `black_box`: through a plain reference the compiler would
    // fold the compile-time defaults above in place of the loader's values.
    let config = core::hint::black_box(core::ptr::from_ref(&CONFIG).cast::<Config>());
    // SAFETY: `Global` is `repr(transparent)` over the value, initialised and frozen at load.
    unsafe { &*config }
}

/// `CONFIG.task_tgid_offset` alone, for the PID filter that every event on the machine runs:
/// one volatile load. A volatile copy of the whole struct (`Global::load`: ~20 loads and
/// spills), which [`config`] once was, made foreign events, the great majority, pay for one
/// field; [`config`] now reads each field in place too.
#[inline(always)]
fn tgid_offset() -> u32 {
    // `Global` is `repr(transparent)` over the value.
    let config = core::ptr::from_ref(&CONFIG).cast::<Config>();
    // SAFETY: a field of the initialised, load-time-frozen global; a volatile read like
    // `Global::load`, so the loader's value is read, not the compile-time default.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*config).task_tgid_offset)) }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Unreachable in a program the verifier accepted: a reachable panic is a rejected loop.
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
