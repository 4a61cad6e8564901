//! Per-CPU loss and event counters (COUNTERS): what each counts, its name in reports, and
//! for a loss what was lost.

/// Per-CPU loss and event counters, indexes of [`crate::names::MAP_COUNTERS`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// On-CPU samples of the target.
    Samples = 0,
    /// Samples dropped because the sample map was full.
    SamplesMapFull,
    /// User stacks the helper or unwinder failed to produce.
    UserStackFailed,
    /// Kernel stacks the helper failed to produce.
    KernelStackFailed,
    /// Stacks not stored because the stack table was full.
    StackTableFull,
    /// Context switches of target threads (out).
    SwitchesOut,
    /// Finished waits aggregated.
    Waits,
    /// Waits dropped because the wait map was full.
    WaitsMapFull,
    /// Waits outside `--min-block-us`/`--max-block-us`.
    WaitsFiltered,
    /// Threads not tracked because the thread table was full.
    ThreadsFull,
    /// Switch-ins the kernel did not report (seen on this machine for switches away from some
    /// tasks); recovered from the thread's CPU time, so nothing is lost.
    MissedSwitchIns,
    /// Wakeups of target threads.
    Wakeups,
    /// Waker records dropped because the waker map was full.
    WakersMapFull,
    /// Switch-outs whose user stack was recognised from the thread's last unwind (same
    /// registers, same stack words) instead of unwound again.
    UnwindMemoHits,
    /// Switch-outs unwound in full.
    UnwindMemoMisses,
    /// User frames the `.eh_frame` unwinder produced.
    UnwindFrames,
    /// Row lookups the per-CPU row cache did not answer (each a binary search).
    RowCacheMisses,
    /// Switch-outs to sleep whose kernel stack was recognised from the thread's last one in
    /// the same syscall (same return addresses at the same places) instead of unwound.
    KernelMemoHits,
    /// Switch-outs to sleep whose kernel stack was unwound.
    KernelMemoMisses,
    /// Waits left out of their site's latency histogram because the histogram table was full
    /// (their time and count still count).
    SiteHistsFull,
    /// Processes of the target set whose events could not be recorded (process table full):
    /// a new process may be missed.
    ProcsFull,
    /// With `--verify-memos`: stacks a memo recognised that a full unwind disagreed with (the
    /// unwound one is kept). Must stay 0.
    MemoDisagreements,
    /// Threads whose lost wait time could not be recorded (that table full too): their
    /// missing time shows as nothing at all.
    LostWaitsFull,
    /// Set by user space: the kernel's mapping records it dropped (their ring was full), so
    /// a process that exited unseen may be unnamed.
    MappingRecordsLost,
    /// Set by user space: files whose unwind rows did not fit the row array (unwound by
    /// frame pointers).
    UnwindRowsNotLoaded,
    /// Set by user space: kernel memory the capture's maps held (their `memlock`), in bytes.
    KernelMemoryBytes,
    /// Set by user space: drains of the tables during the capture.
    Drains,
    /// Timeline records (waits and samples) written to the ring.
    TimelineRecords,
    /// Timeline records the ring had no room for (user space reads it every drain): the
    /// timeline of their threads has a hole there.
    TimelineRingFull,
    /// Set by user space: timeline records read beyond `--timeline-max-records` and dropped.
    TimelineDropped,
    /// Frames in a JVM's code cache where the last read of the cache found no code (JIT
    /// code compiled since, unwound by frame pointers until its rows are in).
    JitGapFrames,
    /// On-CPU samples written whole for user space to unwind (their process had no mapping
    /// table yet: an exec moments ago).
    LateSamples,
    /// Such samples the ring had no room for: unwound by frame pointers in the kernel.
    LateRingFull,
}

/// What a counter counts: something lost (the user must see it, with the flag that avoids it)
/// or an event (how the capture went).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterKind {
    Loss,
    Event,
}

impl Counter {
    pub const COUNT: u32 = 33;

    /// Every counter is one or the other: the match has no wildcard, so a new counter must be
    /// classified before it compiles.
    pub const fn kind(self) -> CounterKind {
        use Counter::*;
        match self {
            SamplesMapFull | UserStackFailed | KernelStackFailed | StackTableFull
            | WaitsMapFull | ThreadsFull | WakersMapFull | SiteHistsFull | ProcsFull
            | LostWaitsFull | MappingRecordsLost | UnwindRowsNotLoaded | TimelineRingFull
            | TimelineDropped => CounterKind::Loss,
            Samples | SwitchesOut | Waits | WaitsFiltered | MissedSwitchIns | Wakeups
            | UnwindMemoHits | UnwindMemoMisses | UnwindFrames | RowCacheMisses
            | KernelMemoHits | KernelMemoMisses | MemoDisagreements | KernelMemoryBytes
            | Drains | TimelineRecords | JitGapFrames | LateSamples | LateRingFull => {
                CounterKind::Event
            }
        }
    }

    /// The counter's name in reports (snake case).
    pub const fn name(self) -> &'static str {
        use Counter::*;
        match self {
            Samples => "samples",
            SamplesMapFull => "samples_map_full",
            UserStackFailed => "user_stack_failed",
            KernelStackFailed => "kernel_stack_failed",
            StackTableFull => "stack_table_full",
            SwitchesOut => "switches_out",
            Waits => "waits",
            WaitsMapFull => "waits_map_full",
            WaitsFiltered => "waits_filtered",
            ThreadsFull => "threads_full",
            MissedSwitchIns => "missed_switch_ins",
            Wakeups => "wakeups",
            WakersMapFull => "wakers_map_full",
            UnwindMemoHits => "unwind_memo_hits",
            UnwindMemoMisses => "unwind_memo_misses",
            UnwindFrames => "unwind_frames",
            RowCacheMisses => "row_cache_misses",
            KernelMemoHits => "kernel_memo_hits",
            KernelMemoMisses => "kernel_memo_misses",
            SiteHistsFull => "site_hists_full",
            MemoDisagreements => "memo_disagreements",
            ProcsFull => "procs_full",
            LostWaitsFull => "lost_waits_full",
            MappingRecordsLost => "mapping_records_lost",
            UnwindRowsNotLoaded => "unwind_rows_not_loaded",
            KernelMemoryBytes => "kernel_memory_bytes",
            Drains => "drains",
            TimelineRecords => "timeline_records",
            TimelineRingFull => "timeline_ring_full",
            TimelineDropped => "timeline_dropped",
            JitGapFrames => "jit_gap_frames",
            LateSamples => "late_samples",
            LateRingFull => "late_ring_full",
        }
    }

    /// For a loss: what was lost, and the flag that enlarges the table that filled (None:
    /// no flag helps).
    pub const fn loss(self) -> Option<(&'static str, Option<&'static str>)> {
        use Counter::*;
        match self {
            SamplesMapFull => Some(("samples: sample table full", Some("--max-keys"))),
            WaitsMapFull => Some(("waits: wait table full", Some("--max-keys"))),
            WakersMapFull => Some(("wakers: waker table full", Some("--max-keys"))),
            SiteHistsFull => Some((
                "wait latencies: site histogram table full",
                Some("--max-keys"),
            )),
            ThreadsFull => Some(("threads: thread table full", Some("--max-threads"))),
            ProcsFull => Some(("processes: process table full", Some("--max-processes"))),
            LostWaitsFull => Some(("lost wait time: its table full too", Some("--max-keys"))),
            MappingRecordsLost => Some(("mapping records: the kernel's ring was full", None)),
            UnwindRowsNotLoaded => Some((
                "files unwound by frame pointers: the unwind row array full",
                Some("--unwind-chunks"),
            )),
            StackTableFull => Some(("stacks: stack table full", Some("--max-stacks"))),
            TimelineRingFull => Some((
                "timeline records: ring buffer full",
                Some("--timeline-ring-kib"),
            )),
            TimelineDropped => Some((
                "timeline records: beyond the cap",
                Some("--timeline-max-records"),
            )),
            UserStackFailed => Some(("user stacks: unwinding failed", None)),
            KernelStackFailed => Some(("kernel stacks: unwinding failed", None)),
            _ => None,
        }
    }

    pub const ALL: [Counter; Self::COUNT as usize] = [
        Counter::Samples,
        Counter::SamplesMapFull,
        Counter::UserStackFailed,
        Counter::KernelStackFailed,
        Counter::StackTableFull,
        Counter::SwitchesOut,
        Counter::Waits,
        Counter::WaitsMapFull,
        Counter::WaitsFiltered,
        Counter::ThreadsFull,
        Counter::MissedSwitchIns,
        Counter::Wakeups,
        Counter::WakersMapFull,
        Counter::UnwindMemoHits,
        Counter::UnwindMemoMisses,
        Counter::UnwindFrames,
        Counter::RowCacheMisses,
        Counter::KernelMemoHits,
        Counter::KernelMemoMisses,
        Counter::SiteHistsFull,
        Counter::ProcsFull,
        Counter::MemoDisagreements,
        Counter::LostWaitsFull,
        Counter::MappingRecordsLost,
        Counter::UnwindRowsNotLoaded,
        Counter::KernelMemoryBytes,
        Counter::Drains,
        Counter::TimelineRecords,
        Counter::TimelineRingFull,
        Counter::TimelineDropped,
        Counter::JitGapFrames,
        Counter::LateSamples,
        Counter::LateRingFull,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_loss_says_what_was_lost_and_no_event_does() {
        for c in Counter::ALL {
            assert_eq!(
                c.kind() == CounterKind::Loss,
                c.loss().is_some(),
                "{c:?} is classified as {:?} but its loss text is {:?}",
                c.kind(),
                c.loss()
            );
            assert!(!c.name().is_empty());
        }
        let names: [&str; Counter::COUNT as usize] = Counter::ALL.map(Counter::name);
        for (i, a) in names.iter().enumerate() {
            assert!(!names[i + 1..].contains(a), "{a} named twice");
        }
    }
}
