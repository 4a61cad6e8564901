//! Unwind tables for the in-kernel unwinder (`.eh_frame`, Go's `.debug_frame`): executable
//! files in, the [`UnwindRow`](profiler_common::unwind::UnwindRow)s the eBPF side searches
//! out.
//!
//! [`rows`] turns one ELF file into its sorted rows; it parses files of untrusted processes
//! as root, so it never panics and its time and memory are bounded by the input's size.

pub mod jit;
pub mod rows;
pub mod tables;
pub mod walk;

pub use rows::{MAX_ROWS, UnwindError, UnwindTable, build_rows, find_row};
