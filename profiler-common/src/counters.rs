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
    /// Waits shorter or longer than the bounds set (`Config::min_block_ns`, `max_block_ns`).
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
    /// With [`crate::config_flags::VERIFY_MEMOS`]: stacks a memo recognised that a full unwind
    /// disagreed with (the unwound one is kept). Must stay 0.
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
    /// Set by user space: timeline records read beyond the cap on records kept, and dropped.
    TimelineDropped,
    /// Frames in a JVM's code cache where the last read of the cache found no code (JIT
    /// code compiled since, unwound by frame pointers until its rows are in).
    JitGapFrames,
    /// On-CPU samples written whole for user space to unwind (their process had no mapping
    /// table yet: an exec moments ago).
    LateSamples,
    /// Such samples the ring had no room for: unwound by frame pointers in the kernel.
    LateRingFull,
    /// Goroutine parks of Go targets (`runtime.gopark`).
    GoParks,
    /// Goroutine parks not kept: the table of parked goroutines was full (that wait is lost).
    GoParkedFull,
    /// Goroutine waits not aggregated: the goroutine wait table was full.
    GoWaitsFull,
}

/// What a counter counts: something lost (the user must see it, with what avoids it) or an
/// event (how the capture went).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterKind {
    Loss,
    Event,
}

/// A table whose filling loses something (see [`Counter::loss`]): which one filled. The side
/// that sizes the tables says what makes each larger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// [`crate::names::MAP_SAMPLES`].
    Samples,
    /// [`crate::names::MAP_WAITS`].
    Waits,
    /// [`crate::names::MAP_WAKERS`].
    Wakers,
    /// [`crate::names::MAP_SITE_HISTS`].
    SiteHists,
    /// [`crate::names::MAP_LOST_WAITS`].
    LostWaits,
    /// [`crate::names::MAP_THREADS`].
    Threads,
    /// [`crate::names::MAP_PROCS`].
    Procs,
    /// [`crate::names::MAP_UNWIND_ROWS`].
    UnwindRows,
    /// [`crate::names::MAP_STACKS`].
    Stacks,
    /// [`crate::names::MAP_TIMELINE`].
    TimelineRing,
    /// The timeline records user space keeps.
    TimelineRecords,
}

impl Table {
    pub const ALL: [Table; 11] = [
        Table::Samples,
        Table::Waits,
        Table::Wakers,
        Table::SiteHists,
        Table::LostWaits,
        Table::Threads,
        Table::Procs,
        Table::UnwindRows,
        Table::Stacks,
        Table::TimelineRing,
        Table::TimelineRecords,
    ];
}

impl Counter {
    pub const COUNT: u32 = 36;

    /// Every counter is one or the other: the match has no wildcard, so a new counter must be
    /// classified before it compiles.
    pub const fn kind(self) -> CounterKind {
        use Counter::*;
        match self {
            SamplesMapFull | UserStackFailed | KernelStackFailed | StackTableFull
            | WaitsMapFull | ThreadsFull | WakersMapFull | SiteHistsFull | ProcsFull
            | LostWaitsFull | MappingRecordsLost | UnwindRowsNotLoaded | TimelineRingFull
            | TimelineDropped | GoParkedFull | GoWaitsFull => CounterKind::Loss,
            Samples | SwitchesOut | Waits | WaitsFiltered | MissedSwitchIns | Wakeups
            | UnwindMemoHits | UnwindMemoMisses | UnwindFrames | RowCacheMisses
            | KernelMemoHits | KernelMemoMisses | MemoDisagreements | KernelMemoryBytes
            | Drains | TimelineRecords | JitGapFrames | LateSamples | LateRingFull | GoParks => {
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
            GoParks => "go_parks",
            GoParkedFull => "go_parked_full",
            GoWaitsFull => "go_waits_full",
        }
    }

    /// For a loss: what was lost, and the table that filled (None: no table did, or no
    /// larger one helps).
    pub const fn loss(self) -> Option<(&'static str, Option<Table>)> {
        use Counter::*;
        match self {
            SamplesMapFull => Some(("samples: sample table full", Some(Table::Samples))),
            WaitsMapFull => Some(("waits: wait table full", Some(Table::Waits))),
            WakersMapFull => Some(("wakers: waker table full", Some(Table::Wakers))),
            SiteHistsFull => Some((
                "wait latencies: site histogram table full",
                Some(Table::SiteHists),
            )),
            ThreadsFull => Some(("threads: thread table full", Some(Table::Threads))),
            ProcsFull => Some(("processes: process table full", Some(Table::Procs))),
            LostWaitsFull => Some(("lost wait time: its table full too", Some(Table::LostWaits))),
            MappingRecordsLost => Some(("mapping records: the kernel's ring was full", None)),
            UnwindRowsNotLoaded => Some((
                "files unwound by frame pointers: the unwind row array full",
                Some(Table::UnwindRows),
            )),
            StackTableFull => Some(("stacks: stack table full", Some(Table::Stacks))),
            TimelineRingFull => Some((
                "timeline records: ring buffer full",
                Some(Table::TimelineRing),
            )),
            TimelineDropped => Some((
                "timeline records: beyond the cap",
                Some(Table::TimelineRecords),
            )),
            GoParkedFull => Some((
                "goroutine waits: parked-goroutine table full",
                Some(Table::Waits),
            )),
            GoWaitsFull => Some(("goroutine waits: their table full", Some(Table::Waits))),
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
        Counter::GoParks,
        Counter::GoParkedFull,
        Counter::GoWaitsFull,
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
