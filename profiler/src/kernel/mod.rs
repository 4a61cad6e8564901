//! What the capture asks of the kernel: the programs loaded with the running kernel's facts
//! (BTF offsets, table sizes), attached, and their maps drained while the window is open.

pub mod bpf_sys;
pub mod drain;
pub mod facts;
pub mod priority;
pub mod probes;
pub mod resources;
pub mod sizes;
pub mod timeline;
pub mod vmlinux_btf;
