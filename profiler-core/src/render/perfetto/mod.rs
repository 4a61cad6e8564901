//! Perfetto: per-thread timelines → a protobuf `Trace` that ui.perfetto.dev opens (what
//! `--timeline PATH` is to write).
//!
//! - One process track per process and one thread track per thread (a `TrackDescriptor` with a
//!   `ThreadDescriptor`), so the UI groups each thread under its process.
//! - Each slice of a thread's timeline is a `TYPE_SLICE_BEGIN` / `TYPE_SLICE_END` pair on its
//!   thread's track (Perfetto has no complete-slice event: track_event.proto), named by its
//!   blocking site or its state, with its state (`running`, `runnable`, `sleep`, `io`,
//!   `other`) as its category.
//! - A wakeup is a flow: it leaves an instant event (`wakes <thread>-<tid>`, category `wakeup`)
//!   on the waker's track and ends on the wakee's first slice from the wakeup on.
//! - On-CPU samples are `PerfSample`s (what Linux perf traces carry), so the UI lists them under
//!   each thread as callstack samples and draws a flame graph of a selected range; functions,
//!   frames and callstacks are interned.
//! - Timestamps are CLOCK_MONOTONIC nanoseconds: the first packet is a `ClockSnapshot` naming
//!   MONOTONIC the trace's clock, and the sequence's defaults put every packet on it.
//!
//! Everything is one packet sequence. Its first packet clears the incremental state; interned
//! entries are sent in the first packet that refers to them, and every packet that refers to
//! one says it needs the incremental state.
//!
//! [`Tracks`] (tracks.rs) is what the trace draws; plan.rs lays the trace out before anything
//! is written (one track per thread, each wakeup a flow, every event in the order it is
//! written); writer.rs encodes that plan, packet by packet, with the messages of proto.rs.

mod plan;
pub mod proto;
mod tracks;
mod writer;

#[cfg(test)]
mod tests;

pub use tracks::{Process, Sample, Slice, State, ThreadTrack, Tracks, Wakeup};
pub use writer::{SEQUENCE_ID, WAKEUP_CATEGORY, write};
