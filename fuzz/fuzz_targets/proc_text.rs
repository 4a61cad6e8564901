//! Arbitrary bytes → the text parsers of the symbolize stage (`/proc/<pid>/maps` and
//! `/tmp/perf-<pid>.map`, both written by or about the target process): never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiler_core::{perfmap::PerfMap, procmap::parse_maps};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for mapping in parse_maps(&text) {
        // What every frame without a symbol shows.
        let _ = mapping.display_name();
    }
    let _ = PerfMap::parse(&text);
});
