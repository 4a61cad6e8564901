//! The profiler's pure stages, the part of the data path after the kernel: account the
//! drained aggregates into time per thread and stack, name the stacks, analyse, fold and
//! render. Nothing here loads a program or reads a map, so everything builds and tests on the
//! stable toolchain without root; `profiler replay` and `profiler diff` are this crate alone.
//! The capture side (`profiler`) hands it [`model::Drained`] and the targets' mappings.
//!
//! Stage order (each module imports only `model` and the stages before it):
//! `procmap`, `perf_records`, `perfmap`, `jvm` → `unwind` → `account` → `symbolize` → `waits` → `site` →
//! `holders` → `analysis` → `timeline` → `post` → `fold` → `diff` → `render`.

pub mod account;
pub mod analysis;
pub mod chain;
pub mod diff;
pub mod fold;
pub mod gobin;
pub mod goroutines;
pub mod holders;
pub mod jvm;
pub mod model;
pub mod perf_records;
pub mod perfmap;
pub mod post;
pub mod procmap;
pub mod render;
pub mod site;
pub mod symbolize;
pub mod timeline;
pub mod unwind;
pub mod waits;
