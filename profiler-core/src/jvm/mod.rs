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
//! the target's memory is read from), `vmstructs.rs` (libjvm's tables → fields, types,
//! constants), `layout.rs` (every offset used, resolved once), `unsigned5.rs` and
//! `debuginfo.rs` (an nmethod's compressed debug information → inlined methods by pc),
//! `codecache.rs` (the code heaps' walk → blobs), `names.rs` (methods' and blobs' names) and
//! `instance.rs` (one attached JVM); `error.rs` what they report, `recorded.rs` a JVM recorded
//! as one byte string (the unit tests' and the fuzz target's).

mod codecache;
mod debuginfo;
mod error;
mod instance;
mod layout;
mod memory;
mod names;
mod recorded;
mod unsigned5;
mod vmstructs;

pub use codecache::{BlobKind, CodeBlob};
pub use debuginfo::{Inlining, PcScopes, Scope};
pub use error::JvmError;
pub use instance::{InliningRead, Jvm};
pub use memory::{MAX_PARTS, RecordedMemory, TargetMemory};
pub use recorded::{IMAGE_BASE, recorded_jvm};
pub use vmstructs::{LIBJVM_VARIABLES, Libjvm};
