//! The target processes: which ones the capture covers, what they map (from /proc and the
//! kernel's mapping records), their JVMs, and what the kernel holds for them.

pub mod golang;
pub mod hotspot;
pub mod jvm_attach;
pub mod late;
pub mod launch;
pub mod machine;
pub mod mmap_events;
pub mod snapshot;
pub mod targets;
pub mod uploads;
