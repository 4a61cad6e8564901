//! A reader of a HotSpot JVM's own structures, so that compiled and interpreted Java frames
//! can be unwound and named without `-XX:+PreserveFramePointer` or a perf map.
//!
//! It reads the target through [`TargetMemory`] and never opens a process itself: the
//! capture side hands it the live process's memory and its libjvm.so's symbols
//! (`profiler/src/jvm_attach.rs`); unit tests and the fuzz target hand it a recorded image
//! ([`RecordedMemory`]). What it reads is untrusted (it runs as root): anything may fail to
//! read, nothing may panic or loop without bound.
//!
//! Every offset comes from the tables the JVM exports for its serviceability agent
//! (`gHotSpotVMStructs`, `gHotSpotVMTypes`, `gHotSpotVMIntConstants`,
//! `gHotSpotVMLongConstants`), read from the target's memory at attach: layouts differ
//! between JDK builds, and these tables are the JVM's own description of the build that runs.
//! Only the sizes of fixed C types (a pointer is 8 bytes) are assumed.
//!
//! Split as the OpenTelemetry eBPF profiler splits its HotSpot support: `memory.rs` (where
//! the target's memory is read from), `vmstructs.rs` (the tables → fields, types,
//! constants), `layout.rs` (every offset used, resolved once), `unsigned5.rs` and
//! `debuginfo.rs` (an nmethod's compressed debug information → inlined methods by pc),
//! `codecache.rs` (the code heaps' walk → blobs) and `instance.rs` (one attached JVM: its
//! names, its interpreter, the inlining read so far).

mod codecache;
mod debuginfo;
mod instance;
mod layout;
mod memory;
mod unsigned5;
mod vmstructs;

use std::path::PathBuf;

use thiserror::Error;

pub use codecache::{BlobKind, CodeBlob};
pub use debuginfo::{Inlining, PcScopes, Scope};
pub use instance::{InliningRead, Jvm};
pub use memory::{MAX_PARTS, RecordedMemory, TargetMemory};
pub use vmstructs::Libjvm;

#[derive(Debug, Error)]
pub enum JvmError {
    #[error("{what} of process {pid}: {source}")]
    Io {
        pid: u32,
        what: String,
        source: std::io::Error,
    },
    #[error("{path}: {error}")]
    Elf { path: PathBuf, error: object::Error },
    #[error("libjvm.so of process {pid} exports no symbol `{symbol}`")]
    MissingSymbol { pid: u32, symbol: &'static str },
    /// The JVM's tables lack something this reader needs: a JDK it does not know.
    #[error("unsupported JVM in process {pid}: its vmStructs have no {what}")]
    Unsupported { pid: u32, what: String },
    /// What was read does not look like what the tables describe (the JVM changed it while
    /// we read, or it is not what we think).
    #[error("process {pid}: {what}")]
    Invalid { pid: u32, what: String },
}
