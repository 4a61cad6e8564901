//! The timeline: waits and on-CPU samples of target threads with their times, one record
//! each in a ring buffer (`TIMELINE`) that user space reads every drain. Only waits of at
//! least `Config::timeline_min_ns` (`--timeline-resolution-us`) are written; shorter ones are
//! in the aggregates only, and user space spreads them over the stretches between the long
//! ones (their length is known there: the thread's CPU time before each long wait is in the
//! record). A record the ring has no room for is counted (`TimelineRingFull`), never waited
//! for.
//!
//! Both writers are out of line (BPF subprograms): `sched_switch` is near the verifier's
//! budget, and a subprogram is verified once per call with its own frame, so the record's
//! fields, the reservation's two outcomes and the helper calls add a few dozen instructions
//! to what the verifier walks, not a multiple of the caller's paths.

use aya_ebpf::{macros::map, maps::RingBuf};
use profiler_common::{
    Counter, GoPark, TimelineGoWait, TimelineSample, TimelineWait, WaitStart, timeline_kind,
};

use crate::maps::count;

/// Sized by the loader (`--timeline-ring-kib`; `--timeline-resolution-us` decides how much
/// goes in); one page when the timeline is off.
#[map]
pub static TIMELINE: RingBuf = RingBuf::with_byte_size(4 << 20, 0);

/// Writes the wait `slot` that a switch-out just closed: blocked for `blocked_ns`, then
/// runnable for `runnable_ns`, with `cpu_before_ns` of CPU time in the window before it.
#[inline(never)]
pub fn record_wait(
    tid: u32,
    slot: &WaitStart,
    blocked_ns: u64,
    runnable_ns: u64,
    cpu_before_ns: u64,
) {
    let Some(mut entry) = TIMELINE.reserve::<TimelineWait>(0) else {
        count(Counter::TimelineRingFull);
        return;
    };
    entry.write(TimelineWait {
        kind: timeline_kind::WAIT,
        tid,
        start_ns: slot.ts_ns,
        blocked_ns,
        runnable_ns,
        user_stack: slot.user_stack,
        kernel_stack: slot.kernel_stack,
        cpu_before_ns,
        state: slot.state as u16,
        flags: slot.flags as u16,
        waker_tid: slot.waker_tid,
        waking_ns: slot.wake_ts_ns,
        resource: slot.resource,
    });
    entry.submit(0);
    count(Counter::TimelineRecords);
}

/// Writes an on-CPU sample of thread `tid`, taken at `ts_ns`, with its stacks.
#[inline(never)]
pub fn record_sample(tid: u32, ts_ns: u64, user_stack: u64, kernel_stack: u64) {
    let Some(mut entry) = TIMELINE.reserve::<TimelineSample>(0) else {
        count(Counter::TimelineRingFull);
        return;
    };
    entry.write(TimelineSample {
        kind: timeline_kind::SAMPLE,
        tid,
        ts_ns,
        user_stack,
        kernel_stack,
    });
    entry.submit(0);
    count(Counter::TimelineRecords);
}

/// Writes the goroutine wait `park` of goroutine `g`, which ended at `park.end_ns`.
#[inline(never)]
pub fn record_go_wait(g: u64, park: &GoPark) {
    let Some(mut entry) = TIMELINE.reserve::<TimelineGoWait>(0) else {
        count(Counter::TimelineRingFull);
        return;
    };
    entry.write(TimelineGoWait {
        kind: timeline_kind::GO_WAIT,
        tgid: park.tgid,
        g,
        start_ns: park.ts_ns,
        end_ns: park.end_ns,
        user_stack: park.user_stack,
        reason: park.reason,
        _pad: 0,
    });
    entry.submit(0);
    count(Counter::TimelineRecords);
}
