//! Wire types shared by the eBPF programs (`profiler-ebpf`) and the loader (`profiler`).
//!
//! Everything here is `#[repr(C)]` with fixed-width fields and explicit padding: the same bytes
//! are written by the kernel side and read back by user space through BPF maps. Names of maps,
//! programs and load-time globals exist once, here (`names.rs`); the eBPF statics carry the
//! same names. One module per domain, each type's `Pod` impl beside it; everything is
//! re-exported here, so `profiler_common::X` names any of it.
#![no_std]

mod aggregates;
mod config;
mod counters;
mod cycle;
mod goroutine;
mod hist;
mod kernel;
mod late;
pub mod names;
mod procs;
mod resource;
mod stack;
mod state;
mod thread;
mod timeline;
pub mod unwind;

pub use aggregates::{
    SampleKey, SampleValue, SiteKey, WaitEntry, WaitKey, WaitValue, WakerKey, WakerValue,
};
pub use config::{Config, Control, IRQ_ENTRY_RANGES, config_flags};
pub use counters::{Counter, CounterKind, Table};
pub use cycle::{Cycle, CycleInput, UNCHARGED_MIN_NS, split_cycle};
pub use goroutine::{GO_MERGED_REASONS, GO_REPARK_NS, GoPark, GoWaitKey, GoWaitValue};
pub use hist::{
    HIST_MIN_LOG2, HIST_OCTAVES, HIST_SUB_BUCKETS, HIST_SUB_LOG2, RunqueueHist, WAIT_HIST_BUCKETS,
    WaitHist, hist_bucket, hist_bucket_bounds, log2_floor,
};
pub use kernel::{BPF_NOEXIST, COMM_LEN, EEXIST, task_state};
pub use late::{LATE_STACK_WORDS, LateSample};
pub use procs::{ProcEvent, target_bit};
pub use resource::{FdOffsets, Resource, file_type, resource_kind, syscall_fd_arg, syscall_polls};
pub use stack::{
    HASH_SEED, MAX_STACK_DEPTH, NO_TABLE_GENERATION, Stack, hash_finish, hash_step, stack_id,
};
pub use state::{WaitState, classify_switch, is_exiting, waker_context};
pub use thread::{
    TaskSnapshot, Thread, ThreadStats, WaitStart, exit_overcount_ns, thread_flags, wait_flags,
};
pub use timeline::{TimelineGoWait, TimelineSample, TimelineWait, timeline_kind};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_sizes_are_fixed() {
        use core::mem::size_of;
        assert_eq!(size_of::<Config>(), 160);
        assert_eq!(size_of::<Resource>(), 72);
        assert_eq!(size_of::<TimelineWait>(), 80);
        assert_eq!(size_of::<GoPark>(), 32);
        assert_eq!(size_of::<GoWaitKey>(), 16);
        assert_eq!(size_of::<GoWaitValue>(), 32 + size_of::<WaitHist>());
        assert_eq!(size_of::<TimelineSample>(), 32);
        assert_eq!(size_of::<TimelineGoWait>(), 48);
        assert_eq!(size_of::<SampleKey>(), 24);
        assert_eq!(size_of::<WaitKey>(), 32);
        assert_eq!(size_of::<WaitValue>(), 32);
        assert_eq!(size_of::<SiteKey>(), 24);
        assert_eq!(size_of::<WaitHist>(), 4 * WAIT_HIST_BUCKETS);
        assert_eq!(WAIT_HIST_BUCKETS % 2, 0);
        assert_eq!(size_of::<WaitStart>(), 96);
        assert_eq!(size_of::<WakerKey>(), 56);
        assert_eq!(size_of::<WakerValue>(), 32);
        assert_eq!(size_of::<ThreadStats>(), 96);
        assert_eq!(size_of::<Thread>(), 192);
        assert_eq!(size_of::<Stack>(), 8 * (MAX_STACK_DEPTH + 1));
        assert_eq!(size_of::<TaskSnapshot>(), 80 + 8 * MAX_STACK_DEPTH);
        assert_eq!(size_of::<unwind::UnwindRow>(), 12);
        assert_eq!(size_of::<unwind::RowChunk>(), 12 * unwind::ROWS_PER_CHUNK);
        assert_eq!(size_of::<unwind::ExecMapping>(), 40);
        assert_eq!(
            size_of::<unwind::ProcMappings>(),
            8 + 40 * unwind::MAX_MAPPINGS
        );
        assert_eq!(Counter::ALL.len(), Counter::COUNT as usize);
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }
}
