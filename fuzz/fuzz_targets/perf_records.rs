//! Arbitrary bytes → a ring's unread side-band records (`PERF_RECORD_MMAP2`, `COMM`, `FORK`,
//! `EXIT`, `LOST`: the kernel writes them as any process on the machine maps, renames, forks
//! or exits, with names and paths the process chose): never a panic, every byte consumed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiler_core::perf_records::{Event, Stats, Unread, parse_ring};

fuzz_target!(|data: &[u8]| {
    // The first byte says where the unread bytes wrap around the ring's end.
    let Some((&wrap, bytes)) = data.split_first() else {
        return;
    };
    let (first, second) = bytes.split_at(usize::from(wrap) * bytes.len() / 256);
    let unread = Unread { first, second };
    let mut scratch = Vec::new();
    let mut stats = Stats::default();
    let consumed = parse_ring(3, &unread, &mut scratch, &mut stats, &mut |event| {
        let _ = event.time_ns();
        if let Event::Mmap2(m) = event {
            // What the target set makes of a mapping record.
            let _ = (m.is_exec(), m.end(), m.recorded());
        }
    });
    assert_eq!(consumed, bytes.len(), "the kernel publishes whole records only");
});
