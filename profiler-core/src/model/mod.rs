//! The model: every type one stage hands another, in data-path order, with the rules that
//! belong to the data itself. Stages import from here and from earlier stages only.
//!
//! - [`raw`]: what the kernel side aggregated ([`Drained`]) and what the start snapshot
//!   recorded ([`Seeds`]), with the counters and the window.
//! - [`time`]: the accounted time model ([`Profile`]) that `account::account` builds.
//! - [`hist`]: merged waits of a site or of the run queue ([`Hist`]) and their percentiles.
//! - [`named`]: symbolized stacks ([`StackNames`]) and how stacks and wakers are named.
//! - [`timeline`]: when each thread waited where, and when each sample was taken
//!   ([`Timeline`]), built by `timeline::build`.
//! - [`machine`]: the machine's CPUs and processes over the window ([`Machine`]).
//! - [`saved`]: a capture as a file, replayable without root ([`SavedCapture`]).

pub mod goroutine;
pub mod hist;
pub mod machine;
pub mod named;
pub mod raw;
pub mod resource;
pub mod saved;
pub mod time;
pub mod timeline;

pub use goroutine::{GoProcess, GoroutineWait, Goroutines, RawGoroutines};
pub use hist::Hist;
pub use machine::{Machine, MachineProcess};
pub use named::{
    FrameFile, NO_FILE, Name, StackNames, WakerIdentity, stack_frames, waker_frames, waker_identity,
};
pub use raw::{Counters, Drained, NewStack, RawTimeline, SchedStat, Seeds, Window, comm_name};
pub use resource::{NamedResource, ResourceKind};
pub use saved::{CaptureMeta, CaptureNote, CaptureRange, PartialTime, SavedCapture};
pub use time::{Entry, Kind, ProcessInfo, ProcessTotals, Profile, StateTimes, ThreadTime, Waker};
pub use timeline::{GoroutineSlice, Segment, ThreadLine, TimedSample, TimedWait, Timeline};

use serde::{Deserialize, Serialize};

/// What a capture records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// On-CPU samples only; counts are samples.
    Cpu,
    /// Off-CPU waits only; counts are microseconds.
    Off,
    /// On-CPU and off-CPU in one graph; counts are microseconds.
    Wall,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Wall, Mode::Cpu, Mode::Off];

    /// The mode a name (`wall`, `cpu`, `off`) stands for.
    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Off => "off",
            Mode::Wall => "wall",
        }
    }
    pub fn samples_on_cpu(self) -> bool {
        matches!(self, Mode::Cpu | Mode::Wall)
    }
    pub fn traces_switches(self) -> bool {
        matches!(self, Mode::Off | Mode::Wall)
    }
}
