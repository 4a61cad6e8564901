//! The profiler as a library: one module per stage of the data path (see ARCHITECTURE.md).
//! The binary (`main.rs`) is a thin shell around [`app::run`]; the fuzz targets and tests use
//! the pure stages directly.

pub mod analysis;
pub mod app;
pub mod capture;
pub mod cli;
pub mod diff;
pub mod drain;
pub mod fold;
pub mod hotspot;
pub mod jvm;
pub mod kernel;
pub mod launch;
pub mod mmap_events;
pub mod model;
pub mod perfmap;
pub mod preflight;
pub mod probes;
pub mod procmap;
pub mod profile;
pub mod render;
pub mod snapshot;
pub mod symbolize;
pub mod targets;
pub mod unwind;
