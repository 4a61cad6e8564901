//! Arbitrary bytes → `unwind::rows::build_rows` (`.eh_frame`, `.debug_frame`, compressed or
//! not): an error or a well-formed table, never a panic, a hang or an allocation out of
//! proportion to the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiler_core::unwind::rows::{MAX_ROWS, build_rows, find_row};

fuzz_target!(|data: &[u8]| {
    let Ok(table) = build_rows(data) else {
        return;
    };
    // The invariants the eBPF binary search relies on.
    assert!(table.rows.len() <= MAX_ROWS);
    for pair in table.rows.windows(2) {
        assert!(pair[0].pc < pair[1].pc);
    }
    if let Some(last) = table.rows.last() {
        assert_eq!(find_row(&table.rows, last.pc), Some(last));
        assert_eq!(find_row(&table.rows, u32::MAX), Some(last));
    }
});
