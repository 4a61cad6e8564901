//! The profiler's capture side: preflight, load and attach the eBPF programs, follow the
//! target set, drain the maps, and hand the pure stages (`profiler-core`) what the kernel
//! saw. The binary (`main.rs`) is a thin shell around [`run::app::run`].
//!
//! Three folders, bottom up: `kernel` (the programs and their maps), `process` (the target
//! processes, read from /proc and the kernel's records), `run` (the command line, the
//! checks before anything is attached, the window, the outputs).

pub mod kernel;
pub mod process;
pub mod run;
