//! What a Perfetto trace draws: processes, each thread's slices, on-CPU samples and wakeups,
//! as trace.rs builds them from a capture's timeline.

/// A capture window's threads, their states over time, their on-CPU samples and wakeups.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tracks {
    pub processes: Vec<Process>,
    pub threads: Vec<ThreadTrack>,
    pub samples: Vec<Sample>,
    pub wakeups: Vec<Wakeup>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Process {
    pub pid: u32,
    pub name: String,
}

/// One thread's timeline. Slices may come in any order; they are drawn sorted by start, and a
/// slice starting before the previous one ended is cut to start at that end (dropped when
/// nothing is left), because slices on one track have to nest.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadTrack {
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    pub slices: Vec<Slice>,
}

/// `[start_ns, end_ns)` on CLOCK_MONOTONIC.
#[derive(Clone, Debug, PartialEq)]
pub struct Slice {
    pub start_ns: u64,
    pub end_ns: u64,
    pub state: State,
    /// The blocking site (`fdatasync ← flush_log`); empty: the state's label.
    pub name: String,
    /// Shown with the slice (Perfetto's "Arguments"): what a wait was on.
    pub args: Vec<(&'static str, String)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    Running,
    Runnable,
    Sleep,
    Io,
    Other,
}

impl State {
    /// The slice's category, in the report's words.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Runnable => "runnable",
            Self::Sleep => "sleep",
            Self::Io => "io",
            Self::Other => "other",
        }
    }
}

/// An on-CPU sample. A sample of a thread without a `ThreadTrack` is left out (its process is
/// unknown).
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub tid: u32,
    pub ts_ns: u64,
    /// Root first. Kernel frames end in `_[k]`, as in the folded output.
    pub frames: Vec<String>,
}

/// `waker_tid` woke `wakee_tid`. Drawn only when both threads have a `ThreadTrack`.
#[derive(Clone, Debug, PartialEq)]
pub struct Wakeup {
    pub waker_tid: u32,
    pub waker_ts_ns: u64,
    pub wakee_tid: u32,
    pub wakee_ts_ns: u64,
}
