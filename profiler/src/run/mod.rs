//! One run of the profiler: the command line, what is refused before anything is attached,
//! the stages in order, and the window they wait out.

pub mod app;
pub mod capture;
pub mod cli;
pub mod outputs;
pub mod preflight;
pub mod saved;
