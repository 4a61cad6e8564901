//! The profiler's capture side: preflight, load and attach the eBPF programs, follow the
//! target set, drain the maps, and hand the pure stages (`profiler-core`) what the kernel
//! saw. The binary (`main.rs`) is a thin shell around [`app::run`].

pub mod app;
pub mod bpf_sys;
pub mod capture;
pub mod cli;
pub mod drain;
pub mod hotspot;
pub mod jvm_attach;
pub mod kernel;
pub mod late;
pub mod launch;
pub mod machine;
pub mod mmap_events;
pub mod preflight;
pub mod priority;
pub mod probes;
pub mod resources;
pub mod sizes;
pub mod snapshot;
pub mod targets;
pub mod timeline;
pub mod uploads;
pub mod vmlinux_btf;
