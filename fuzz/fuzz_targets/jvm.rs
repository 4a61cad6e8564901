//! Arbitrary bytes → the HotSpot reader (`jvm::Jvm`) over a recorded JVM: libjvm's variables,
//! the vmStructs tables they point at and everything the tables lead to (the code heaps, the
//! blobs, their debug information, methods and Symbols), as an untrusted process's memory may
//! hold them (the profiler reads it as root). Whatever the bytes say: an error or blobs,
//! names and inlining, never a panic, a hang or an allocation out of proportion to the input.
//! The seeds (`seeds/jvm/`) are the JDK 17 and JDK 25 JVMs the reader's unit tests read.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use profiler_core::jvm::{BlobKind, Jvm, recorded_jvm};

fuzz_target!(|data: &[u8]| {
    let (lib, memory) = recorded_jvm(data);
    let Ok(mut jvm) = Jvm::attach(1, Box::new(memory), &lib) else {
        return;
    };
    let _ = jvm.version();
    // Twice: the second walk reuses the buffers and the inlining read by the first.
    for _ in 0..2 {
        let Ok(mut blobs) = jvm.code_blobs() else {
            return;
        };
        let (low, high) = jvm.code_heaps();
        assert!(low <= high);
        jvm.read_inlining(&mut blobs, Duration::from_secs(1));
        for blob in &blobs {
            // What the unwind rows are built on.
            assert!(blob.start <= blob.frame_complete && blob.frame_complete <= blob.end);
            let BlobKind::Nmethod { method } = blob.kind else {
                continue;
            };
            let _ = jvm.method_name(method);
            let _ = jvm.pc_scopes(blob);
            for pc in [blob.start, blob.frame_complete, blob.end.saturating_sub(1)] {
                for &inlined in blob.inlined_at(pc).unwrap_or(&[]) {
                    let _ = jvm.method_name(inlined);
                }
            }
        }
    }
});
