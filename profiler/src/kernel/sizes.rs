//! How large the kernel's tables are: from the target set (its threads and processes when
//! the capture starts), unless a flag says otherwise. The tables of small entries (threads,
//! samples, waits, wakers) are preallocated (an insert from `sched_switch`, interrupts off,
//! cannot wait for memory), so their size is the kernel memory they hold for the whole
//! capture; the tables of large entries (stacks, site histograms, mapping tables) are
//! allocated as they fill, and their size is only a bound (profiler-ebpf maps.rs). The
//! aggregate tables are drained while the capture runs and hold two drain intervals' records,
//! not the window's; the drainer drains sooner when one fills (drain.rs), and what still does
//! not fit is a counted loss naming the flag.

/// What the command line says that the sizes depend on: each `Some` is a flag that wins over
/// the size from the target set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeOptions {
    /// `--max-keys`: samples, waits and wakers (and a site histogram table an eighth of it).
    pub max_keys: Option<u32>,
    pub max_stacks: Option<u32>,
    pub max_threads: Option<u32>,
    pub max_processes: Option<u32>,
    pub timeline_ring_kib: Option<u32>,
    /// Children are followed (no `--no-children`): they fork into the process table.
    pub follow_children: bool,
    /// On-CPU sampling frequency per CPU, in Hz.
    pub freq: u64,
}

/// Sizes of the tables a capture loads with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableSizes {
    pub threads: u32,
    pub processes: u32,
    pub stacks: u32,
    /// Waits and wakers.
    pub keys: u32,
    /// On-CPU samples: bounded by the samples taken between two drains, not by the threads.
    pub samples: u32,
    /// Blocking sites' histograms (3.3 KiB each).
    pub site_hists: u32,
    /// The unwinder's and the kernel stacks' memos (LRU: a forgotten memo costs an unwind).
    pub memos: u32,
    /// The timeline's ring buffer, in bytes (a power of two).
    pub timeline_ring: u32,
}

/// Threads a churning service creates and ends between two drains (800 threads a second
/// over two 200 ms intervals, as a thread-per-request server under wrk), beside those alive.
const THREAD_CHURN: u32 = 1_024;
/// Processes a build starts between two ticks (a `make -j2` of small files: ~120 a second).
const PROCESS_CHURN: u32 = 64;
/// The least room for processes when children are followed. A target that forks (a build, a
/// server forking per request) fills the table with its children until the tick after each
/// one exits, and a tick can be late: it builds unwind rows for a new large program first
/// (cc1: ~0.3 s under load) and competes for the CPUs. Sized from the processes at the start
/// (a `-- CMD` is one), 66 entries lost 7-90 forks of `make -j2`..`-j8` (issue 44); 4 096 hold
/// 8 s of a 500-forks-a-second server between two ticks. Cheap: the process table's 24-byte
/// entries are preallocated, 385 KiB at 4 096 (8.2 KiB at 66), and the mapping tables' index
/// grows by 62 KiB (fdinfo memlock, Linux 6.18); the mapping tables themselves are allocated
/// as they fill, 20 KiB per process the kernel holds.
const FOLLOWED_PROCESSES_MIN: u32 = 4_096;
/// The most processes sized from the target: without followed children (nothing forks into
/// the table), and with them (a large process tree with room for its children).
const MAX_PROCESSES: u32 = 4_096;
const MAX_PROCESSES_FOLLOWED: u32 = 16_384;
/// Distinct stacks and (thread, stack) keys per thread between two drains: a PostgreSQL
/// backend under pgbench used ~40 stacks and ~100 wait keys (11 processes: 420 and 1 061).
/// Keys are at least 4 096: a Python thread-per-request server (540 threads a second, each
/// handing the GIL on through futexes) came to 2 048 wait keys at one drain on a saturated
/// machine, where the drainer itself waits for a CPU.
const STACKS_PER_THREAD: u32 = 128;
const KEYS_PER_THREAD: u32 = 128;
/// Keys per thread of a target too large for `KEYS_PER_THREAD`: a thread between two drains
/// has a wait or two, each with a waker, in the drain epoch that ends and the one that
/// begins. A 5 000-thread JVM pool (each thread napping 200 ms) kept 16 384 keys with nothing
/// lost; a 5 000-thread Python process handing its GIL on 50 000 times a second filled them.
const KEYS_PER_THREAD_LARGE: u32 = 6;
/// The most keys sized from the target (~290 bytes each for waits and wakers together).
const MAX_KEYS: u32 = 65_536;
/// The most blocking sites' histograms sized from the keys (two drain epochs' sites).
const MAX_SITE_HISTS: u32 = 2_048;
/// Seconds of samples on every CPU the sample table holds: two drain epochs of 200 ms, with
/// room for a drainer starved of CPU for a second.
const SAMPLE_SECONDS: u32 = 2;

/// Timeline ring bytes per thread (records of ~64 bytes: 256 a thread between two drains, a
/// wait of at least the 1 ms resolution every 0.8 ms); 1 MiB at least (16 384 records per
/// drain), 4 MiB at most.
const RING_BYTES_PER_THREAD: u32 = 16 * 1024;

/// The sizes for the processes `pids` at the start (their threads read from /proc), sampled on
/// every online CPU; logged.
pub fn at_start(opts: &SizeOptions, pids: &[u32]) -> TableSizes {
    let threads = pids
        .iter()
        .map(|pid| std::fs::read_dir(format!("/proc/{pid}/task")).map_or(1, |d| d.count() as u32))
        .sum::<u32>()
        .max(1);
    let processes = (pids.len() as u32).max(1);
    // The sampling timer runs on every online CPU, whatever this process's affinity.
    let cpus = aya::util::online_cpus().map_or(1, |c| c.len() as u32);
    let sizes = table_sizes(opts, threads, processes, cpus);
    log::info!("{threads} threads in {processes} processes at start: tables {sizes:?}");
    sizes
}

/// The sizes for `threads` threads in `processes` processes at the start (a launched command
/// counts as one process with one thread: its build may start many more), sampled on `cpus`
/// CPUs.
pub fn table_sizes(args: &SizeOptions, threads: u32, processes: u32, cpus: u32) -> TableSizes {
    let threads_sized = threads.saturating_mul(2).saturating_add(THREAD_CHURN);
    let most_keys = threads
        .saturating_mul(KEYS_PER_THREAD_LARGE)
        .clamp(16_384, MAX_KEYS);
    let keys = args
        .max_keys
        .unwrap_or_else(|| clamp(threads.saturating_mul(KEYS_PER_THREAD), 4_096, most_keys));
    let freq = u32::try_from(args.freq).unwrap_or(u32::MAX);
    let samples = args.max_keys.unwrap_or_else(|| {
        clamp(
            cpus.saturating_mul(freq).saturating_mul(SAMPLE_SECONDS),
            1_024,
            keys,
        )
    });
    TableSizes {
        threads: args
            .max_threads
            .unwrap_or_else(|| clamp(threads_sized, 2_048, 65_536)),
        processes: args.max_processes.unwrap_or_else(|| {
            let (least, most) = if args.follow_children {
                (FOLLOWED_PROCESSES_MIN, MAX_PROCESSES_FOLLOWED)
            } else {
                (64, MAX_PROCESSES)
            };
            clamp(
                processes.saturating_mul(2).saturating_add(PROCESS_CHURN),
                least,
                most,
            )
        }),
        stacks: args
            .max_stacks
            .unwrap_or_else(|| clamp(threads.saturating_mul(STACKS_PER_THREAD), 2_048, 8_192)),
        keys,
        samples,
        // Allocated as they fill, but 3.3 KiB each: a 5 000-thread Python process whose GIL
        // hand-offs block at ever new sites filled 3 750 (12 MiB) at an eighth of its keys.
        // `--max-keys` asks for an eighth, whatever it comes to.
        site_hists: match args.max_keys {
            Some(_) => (keys / 8).max(64),
            None => clamp(keys / 8, 64, MAX_SITE_HISTS),
        },
        memos: clamp(threads.saturating_mul(4), 512, 8_192),
        timeline_ring: args.timeline_ring_kib.map_or_else(
            || {
                let bytes = threads.saturating_mul(RING_BYTES_PER_THREAD);
                clamp(bytes.next_power_of_two(), 1 << 20, 4 << 20)
            },
            |kib| kib.saturating_mul(1024),
        ),
    }
}

fn clamp(v: u32, lo: u32, hi: u32) -> u32 {
    v.clamp(lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bare command line's: nothing given, children followed, 99 Hz.
    const BARE: SizeOptions = SizeOptions {
        max_keys: None,
        max_stacks: None,
        max_threads: None,
        max_processes: None,
        timeline_ring_kib: None,
        follow_children: true,
        freq: 99,
    };
    const NO_CHILDREN: SizeOptions = SizeOptions {
        follow_children: false,
        ..BARE
    };

    #[test]
    fn a_small_process_gets_small_tables_and_a_large_one_larger() {
        let small = table_sizes(&BARE, 2, 1, 2);
        assert_eq!(small.threads, 2_048);
        assert_eq!(small.stacks, 2_048);
        // Followed children get room for a build's or a forking server's churn (issue 44):
        // 66 lost forks of `make -j8`; alone, the process is one entry and 64 of churn.
        assert_eq!(small.processes, 4_096);
        assert_eq!(table_sizes(&NO_CHILDREN, 2, 1, 2).processes, 66);
        assert_eq!(table_sizes(&BARE, 2, 3_000, 2).processes, 6_064);
        assert_eq!(table_sizes(&BARE, 2, 30_000, 2).processes, 16_384);
        assert_eq!(table_sizes(&NO_CHILDREN, 2, 3_000, 2).processes, 4_096);
        assert_eq!((small.keys, small.samples), (4_096, 1_024));
        let pool = table_sizes(&BARE, 200, 1, 2);
        assert_eq!(pool.keys, 16_384);
        let jvm = table_sizes(&BARE, 5_000, 1, 2);
        assert_eq!(jvm.threads, 11_024);
        assert_eq!(jvm.stacks, 8_192);
        assert_eq!(jvm.keys, 30_000);
        assert_eq!(jvm.samples, 1_024);
        assert_eq!(jvm.site_hists, 2_048);
        assert_eq!(jvm.memos, 8_192);
        assert_eq!(small.timeline_ring, 1 << 20);
        assert_eq!(jvm.timeline_ring, 4 << 20);
        // Samples follow the CPUs and the frequency, never past the keys.
        let big_host = table_sizes(&SizeOptions { freq: 999, ..BARE }, 5_000, 1, 64);
        assert_eq!(big_host.samples, 30_000);
        assert_eq!(table_sizes(&BARE, 5_000, 1, 64).samples, 12_672);
        let huge = table_sizes(&BARE, 60_000, 1, 2);
        assert_eq!(huge.keys, 65_536);
    }

    #[test]
    fn a_flag_wins() {
        let s = table_sizes(
            &SizeOptions {
                max_threads: Some(7),
                max_keys: Some(800),
                ..BARE
            },
            5_000,
            1,
            2,
        );
        assert_eq!((s.threads, s.keys, s.site_hists), (7, 800, 100));
        let big = table_sizes(
            &SizeOptions {
                max_keys: Some(100_000),
                ..BARE
            },
            2,
            1,
            2,
        );
        assert_eq!(
            (big.keys, big.samples, big.site_hists),
            (100_000, 100_000, 12_500)
        );
        assert_eq!(s.samples, 800);
    }
}
