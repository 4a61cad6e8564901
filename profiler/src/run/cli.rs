//! Command line → [`Args`]. Defaults are named constants so tests and docs can reuse them.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::kernel::sizes::SizeOptions;

pub use profiler_core::model::Mode;

/// Default sampling frequency: 99 Hz avoids lockstep with 100 Hz timers in the target.
pub const DEFAULT_FREQ_HZ: u64 = 99;
/// Default capture length.
pub const DEFAULT_SECS: u64 = 20;
/// Default `--min-block-us`.
pub const DEFAULT_MIN_BLOCK_US: u64 = 1;

/// Default rows of each `profiler diff` table (functions, blocking sites).
pub const DEFAULT_DIFF_TOP: u64 = 10;
/// Default `--timeline-resolution-us`: waits shorter than 1 ms are not on the timeline one by
/// one (their time is, spread over the stretches around them).
pub const DEFAULT_TIMELINE_RESOLUTION_US: u64 =
    profiler_core::model::timeline::DEFAULT_RESOLUTION_NS / 1_000;
/// Default `--timeline-max-records`: waits and samples kept in user space (about 64 bytes
/// each: 64 MiB at most).
pub const DEFAULT_TIMELINE_MAX_RECORDS: u64 = 1_000_000;

/// How user stacks are walked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Unwind {
    /// Frame pointers only (what BCC and perf's fp mode do).
    Fp,
    /// `.eh_frame` (or `.debug_frame`: Go) wherever a file has it, frame pointers elsewhere
    /// (JIT code, files without unwind tables).
    Dwarf,
}

/// Where every thread of a process, a process tree or a cgroup spends its time: on the CPU, asleep, in I/O, or waiting
/// for a CPU, as one flame graph.
#[derive(Debug, Parser)]
#[command(
    name = "profiler",
    version,
    about,
    long_about = None,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub record: Args,

    /// Show eBPF-side diagnostics (aya-log) and more detail; repeat for more.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Render a capture saved with `--save` again: the same outputs, without root and
    /// without the target.
    Replay(ReplayArgs),
    /// Compare two captures saved with `--save` (before, after), per second of capture: a
    /// differential flame graph drawn both ways (red grew, blue shrank) and the functions and
    /// blocking sites that moved most. Without root.
    Diff(DiffArgs),
}

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The capture before the change (written by `--save`).
    #[arg(value_name = "BEFORE")]
    pub before: PathBuf,

    /// The capture after the change (written by `--save`).
    #[arg(value_name = "AFTER")]
    pub after: PathBuf,

    /// The differential flame graph, drawn on the after capture (what grew or is new); the
    /// one drawn on the before capture (what shrank or disappeared) goes next to it as
    /// `<output>.before.svg` [default: diff-<name>-<mode>.svg].
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,

    /// Also write the folded stacks with both counts (`frame;frame;… before after`, µs per
    /// second of capture) here.
    #[arg(long, value_name = "PATH")]
    pub folded: Option<PathBuf>,

    /// Write the report here too: Markdown (`.md`), JSON (`.json`, schema in
    /// docs/diff.schema.json) or one HTML page with both graphs (`.html`).
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,

    /// How many functions and sites the tables show.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_DIFF_TOP,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub top: u64,

    #[command(flatten)]
    pub range: RangeArgs,
}

/// A time range of a saved capture (`replay`, `diff`): every output covers it only.
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct RangeArgs {
    /// Only the part of the capture from this many seconds after its start (needs a capture
    /// saved with its timeline).
    #[arg(long, value_name = "S", value_parser = seconds)]
    pub from: Option<f64>,

    /// Only the part of the capture up to this many seconds after its start.
    #[arg(long, value_name = "S", value_parser = seconds)]
    pub to: Option<f64>,
}

impl RangeArgs {
    /// `[from, to)` in seconds when either is given.
    pub fn range(&self) -> Option<(f64, f64)> {
        (self.from.is_some() || self.to.is_some())
            .then(|| (self.from.unwrap_or(0.0), self.to.unwrap_or(f64::INFINITY)))
    }
}

/// `--from`, `--to`: seconds, not negative.
fn seconds(value: &str) -> Result<f64, String> {
    match value.parse::<f64>().map_err(|e| e.to_string())? {
        s if s.is_finite() && s >= 0.0 => Ok(s),
        _ => Err("seconds from the capture's start: a number, 0 or more".to_string()),
    }
}

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// A file written by `--save`.
    #[arg(value_name = "CAPTURE")]
    pub capture: PathBuf,

    #[command(flatten)]
    pub range: RangeArgs,

    #[command(flatten)]
    pub out: OutputArgs,
}

/// What a run writes.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct OutputArgs {
    /// SVG flame graph to write [default: profile-<name>-<pid>-<mode>.svg].
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,

    /// Also write the folded stacks (`frame;frame;… count`) here.
    #[arg(long, value_name = "PATH")]
    pub folded: Option<PathBuf>,

    /// Put each thread's name and tid as the frame below the process.
    #[arg(long)]
    pub per_thread: bool,

    /// Put what each wait in a system call was on as a frame above its blocking call in the
    /// flame graph and folded stacks (`[on TCP → 10.0.0.5:5432 (postgres, PID 812)]`). Off
    /// by default: names carry PIDs and paths, so stacks of two runs would no longer fold
    /// alike for `profiler diff`; the report names them either way.
    #[arg(long)]
    pub resources: bool,

    /// Put each process's pid with its name as the root frame (by default processes of the
    /// same name are one tower: all nginx workers together).
    #[arg(long)]
    pub per_process: bool,

    // Its help names the idle rule in the words the report uses (`hide_idle_help`).
    #[arg(long, help = hide_idle_help())]
    pub hide_idle: bool,

    /// Draw idle threads' sleep with its stacks in the flame graph; by default it is one frame
    /// per process and wait (`[idle: 4 threads in …]`), the SVG's subtitle says so. The
    /// folded stacks and the report keep the stacks either way.
    #[arg(long, conflicts_with = "hide_idle")]
    pub show_idle: bool,

    /// Also write the wakeup chains (`waiter stack;--;waker stack`) as `<output>.wakers.svg`
    /// (and `<folded>.wakers.folded`); when recording, take the wakers' stacks.
    #[arg(long)]
    pub wakers: bool,

    /// Write the report here too: Markdown (`.md`), JSON (`.json`, schema in
    /// docs/report.schema.json) or one self-contained HTML page (`.html`) with the flame graph,
    /// state bars and latency charts.
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,

    /// Write the capture as gzipped pprof (profile.proto) here too, for `go tool pprof`,
    /// Pyroscope or Parca: `cpu` and `samples` values in `--mode cpu`, `wall` nanoseconds
    /// otherwise, labelled with thread, tid, pid and state.
    #[arg(long, value_name = "PATH")]
    pub pprof: Option<PathBuf>,

    /// Write the timeline as a Perfetto trace here too (open it in ui.perfetto.dev): one
    /// track per thread, grouped by process, with its running, runnable, sleep and I/O
    /// stretches named by their blocking sites, the wakeups of the ranked sites as arrows,
    /// and the on-CPU samples with their stacks.
    #[arg(long, value_name = "PATH")]
    pub timeline: Option<PathBuf>,
}

/// Recording: what to profile and how.
#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("what")
        .args(["pid", "cgroup", "command"])
        .required(true)
        .multiple(true)
))]
pub struct Args {
    /// Processes to profile, with their descendants (a thread id selects its process):
    /// `-p 1234` or `-p 1234,5678`.
    #[arg(short, long, value_name = "PID[,PID…]", value_delimiter = ',')]
    pub pid: Vec<u32>,

    /// Only the processes named, not their descendants.
    #[arg(long)]
    pub no_children: bool,

    /// Every process of a cgroup v2 directory and its sub-directories (a systemd service, a
    /// container), including processes that join it during the capture.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,

    /// Launch this command (as the invoking user under sudo) and profile it and its
    /// descendants from its first instruction until it exits (or `--secs`); the profiler exits
    /// with its status.
    #[arg(last = true, value_name = "CMD", conflicts_with_all = ["pid", "cgroup"])]
    pub command: Vec<std::ffi::OsString>,

    /// Capture length in seconds (default 20; with a command, until it exits); Ctrl-C or
    /// SIGTERM end it early and still write the output.
    #[arg(short = 'd', long = "secs", value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub secs: Option<u64>,

    /// On-CPU sampling frequency per CPU, in Hz.
    #[arg(short = 'F', long = "freq", value_name = "HZ", default_value_t = DEFAULT_FREQ_HZ,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub freq: u64,

    /// What to profile: `wall` = on-CPU and off-CPU in one graph, in microseconds; `cpu` =
    /// on-CPU samples; `off` = waits only, in microseconds.
    #[arg(long, default_value = "wall", value_parser = mode_arg())]
    pub mode: Mode,

    #[command(flatten)]
    pub out: OutputArgs,

    /// Also save the capture (gzipped JSON) for `profiler replay` and `profiler diff`.
    #[arg(long, value_name = "PATH")]
    pub save: Option<PathBuf>,

    /// Ignore waits shorter than this many microseconds.
    #[arg(long, value_name = "US", default_value_t = DEFAULT_MIN_BLOCK_US)]
    pub min_block_us: u64,

    /// Ignore waits longer than this many microseconds [default: no limit].
    #[arg(long, value_name = "US", value_parser = wait_limit_us)]
    pub max_block_us: Option<u64>,

    /// Leave kernel frames out of every stack.
    #[arg(long)]
    pub no_kernel_stacks: bool,

    /// Do not record who woke each wait (by default every blocking site names its wakers):
    /// the wakeup tracepoint is not loaded, for the lowest cost per context switch and a
    /// faster start. The time split is the same; the report says wakers were not recorded.
    #[arg(long, conflicts_with = "wakers")]
    pub no_wakers: bool,

    /// Do not name what each wait in a system call was on (by default a wait on an fd names
    /// its file, socket or pipe: the path and file system, the addresses and the process at
    /// the other end): a few kernel reads less per such switch.
    #[arg(long)]
    pub no_resources: bool,

    /// Do not follow goroutines of Go targets (by default a Go 1.17+ amd64 binary gets two
    /// uprobes on its runtime, `runtime.gopark` and `runtime.execute`: each goroutine wait
    /// with its goroutine stack and the runtime's wait reason, the report and flame graph
    /// reading requests by their goroutines). Without: its OS threads only.
    #[arg(long)]
    pub no_goroutines: bool,

    /// How to walk user stacks: `dwarf` unwinds from .eh_frame (or Go's .debug_frame) in the
    /// kernel, with frame pointers where a file has no unwind table.
    #[arg(long, value_enum, default_value_t = Unwind::Dwarf)]
    pub unwind: Unwind,

    /// Size of the in-kernel stack table (distinct stacks between two drains). Default: sized
    /// from the target's threads (see `sizes.rs`).
    #[arg(long, value_name = "N", value_parser = table_size)]
    pub max_stacks: Option<u32>,

    /// Size of the in-kernel sample, wait and waker tables (distinct thread × stack keys
    /// between two drains; a site histogram table an eighth of it). Default: waits and
    /// wakers sized from the target's threads, samples from the CPUs and the frequency.
    #[arg(long, value_name = "N", value_parser = table_size)]
    pub max_keys: Option<u32>,

    /// Number of processes tracked in the kernel at once (mapping tables, process events;
    /// exited ones are freed five times a second). Default: sized from the target.
    #[arg(long, value_name = "N", value_parser = table_size)]
    pub max_processes: Option<u32>,

    /// Number of threads tracked in the kernel at once (exited ones leave at the next
    /// drains). Default: sized from the target's threads.
    #[arg(long, value_name = "N", value_parser = table_size)]
    pub max_threads: Option<u32>,

    /// Size of the in-kernel unwind row array, in chunks of 65,536 rows (768 KiB each).
    /// Default: what the target's files need now, plus room for files mapped later (more for
    /// a launched command, whose programs are not known yet).
    #[arg(long, value_name = "N", value_parser = table_size)]
    pub unwind_chunks: Option<u32>,

    /// Do not record the timeline (by default it is recorded when `--timeline`, `--save` or
    /// `--report` asks for it: each wait of at least `--timeline-resolution-us` and each
    /// on-CPU sample, with its time).
    #[arg(long, conflicts_with = "timeline")]
    pub no_timeline: bool,

    /// Waits shorter than this many microseconds are not on the timeline one by one: their
    /// time is spread over the stretches between the longer ones.
    #[arg(long, value_name = "US", default_value_t = DEFAULT_TIMELINE_RESOLUTION_US)]
    pub timeline_resolution_us: u64,

    /// Timeline records (waits and samples) kept at most; more are counted and dropped.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TIMELINE_MAX_RECORDS)]
    pub timeline_max_records: u64,

    /// Size of the kernel's timeline ring in KiB (a power of two, at least 4); a record it
    /// has no room for between two drains is counted and lost. Default: from the target's
    /// threads at the start, 1 to 4 MiB
    #[arg(long, value_name = "KIB", value_parser = ring_kib)]
    pub timeline_ring_kib: Option<u32>,

    /// Unwind every stack even when a memo recognises it, and count the disagreements
    /// (`memo_disagreements` in the JSON report): for tests, at the cost of the memos' saving.
    #[arg(long, hide = true)]
    pub verify_memos: bool,
}

/// `--hide-idle`'s help, with the idle rule as the report words it.
fn hide_idle_help() -> String {
    use profiler_core::render::report::{IdleRuleWords, idle_rule};
    format!(
        "Leave the sleep of idle threads ({}: pool workers waiting for work, a main thread in \
         join) out of the flame graph and the folded stacks; the subtitle says how much was \
         left out. Off by default.",
        idle_rule(IdleRuleWords::Brief)
    )
}

/// `--mode`: one of the core's mode names (the core knows no command-line crate).
fn mode_arg() -> impl clap::builder::TypedValueParser<Value = Mode> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(Mode::ALL.map(Mode::name))
        .try_map(|name| Mode::from_name(&name).ok_or("not a mode"))
}

/// `--max-stacks`, `--max-keys`, `--max-threads`: the `max_entries` of in-kernel maps. The
/// kernel refuses a map of 0 entries (EINVAL) only once the programs are being loaded, so 0 is
/// refused here, with the flag's name, instead of as a loader error.
fn table_size(value: &str) -> Result<u32, String> {
    match value.parse::<u32>().map_err(|e| e.to_string())? {
        0 => Err("an in-kernel table needs at least 1 entry".to_string()),
        n => Ok(n),
    }
}

/// `--max-block-us`: 0 would drop every wait and leave an empty off-CPU view.
fn wait_limit_us(value: &str) -> Result<u64, String> {
    match value.parse::<u64>().map_err(|e| e.to_string())? {
        0 => Err("0 would ignore every wait; leave the flag out for no limit".to_string()),
        n => Ok(n),
    }
}

/// `--timeline-ring-kib`: a ring buffer is a power-of-two number of pages.
fn ring_kib(value: &str) -> Result<u32, String> {
    match value.parse::<u32>().map_err(|e| e.to_string())? {
        n if n >= 4 && n.is_power_of_two() && n <= 1 << 20 => Ok(n),
        _ => Err("a power of two from 4 to 1048576".to_string()),
    }
}

impl Args {
    /// Whether the timeline is recorded: an output that uses it was asked for, and
    /// `--no-timeline` was not given.
    pub fn timeline(&self) -> bool {
        !self.no_timeline
            && (self.out.timeline.is_some() || self.save.is_some() || self.out.report.is_some())
    }

    /// The capture length: `--secs`, or until the command exits, or the default.
    pub fn secs(&self) -> u64 {
        match (self.secs, self.command.is_empty()) {
            (Some(secs), _) => secs,
            (None, true) => DEFAULT_SECS,
            // A day: in practice, until the command exits.
            (None, false) => 86_400,
        }
    }

    pub fn max_block_ns(&self) -> u64 {
        self.max_block_us
            .map_or(u64::MAX, |us| us.saturating_mul(1_000))
    }
    pub fn min_block_ns(&self) -> u64 {
        self.min_block_us.saturating_mul(1_000)
    }
    /// The sample period in nanoseconds of the cpu-clock event.
    pub fn period_ns(&self) -> u64 {
        1_000_000_000 / self.freq
    }

    /// What the kernel's table sizes take from the command line.
    pub fn size_options(&self) -> SizeOptions {
        SizeOptions {
            max_keys: self.max_keys,
            max_stacks: self.max_stacks,
            max_threads: self.max_threads,
            max_processes: self.max_processes,
            timeline_ring_kib: self.timeline_ring_kib,
            follow_children: !self.no_children,
            freq: self.freq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn record(args: &[&str]) -> Result<Args, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("profiler").chain(args.iter().copied()))?;
        assert!(cli.command.is_none());
        Ok(cli.record)
    }

    #[test]
    fn command_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// The wire crate says which table filled; the report names the flag that raises it,
    /// which must be one of ours.
    #[test]
    fn every_flag_a_full_table_names_is_a_flag() {
        let cli = Cli::command();
        for table in profiler_common::Table::ALL {
            let flag = profiler_core::model::time::flag_raising(table);
            let long = flag.strip_prefix("--").expect("a long flag");
            assert!(
                cli.get_arguments().any(|a| a.get_long() == Some(long)),
                "{table:?}: {flag} is not a flag of the profiler"
            );
        }
    }

    #[test]
    fn the_size_flags_reach_the_table_sizes() {
        let args = record(&[
            "-p",
            "1",
            "--no-children",
            "-F",
            "999",
            "--max-keys",
            "800",
            "--max-stacks",
            "900",
            "--max-threads",
            "7",
            "--max-processes",
            "5",
            "--timeline-ring-kib",
            "64",
        ])
        .unwrap();
        assert_eq!(
            args.size_options(),
            SizeOptions {
                max_keys: Some(800),
                max_stacks: Some(900),
                max_threads: Some(7),
                max_processes: Some(5),
                timeline_ring_kib: Some(64),
                follow_children: false,
                freq: 999,
            }
        );
        let bare = record(&["-p", "1"]).unwrap().size_options();
        assert!(bare.follow_children && bare.max_keys.is_none());
    }

    #[test]
    fn bare_command_line_uses_the_documented_defaults() {
        let args = record(&["--pid", "1"]).unwrap();
        assert_eq!(args.secs(), DEFAULT_SECS);
        assert_eq!(args.freq, DEFAULT_FREQ_HZ);
        assert_eq!(args.mode, Mode::Wall);
        assert_eq!(args.min_block_ns(), DEFAULT_MIN_BLOCK_US * 1000);
        assert_eq!(args.max_block_ns(), u64::MAX);
        assert_eq!(args.max_stacks, None, "sized from the target");
        assert_eq!(args.unwind, Unwind::Dwarf);
        assert!(!args.out.per_thread);
        assert!(!args.out.hide_idle);
        assert_eq!(args.save, None);
        assert!(!args.timeline(), "nothing asks for the timeline");
        assert_eq!(args.timeline_resolution_us, DEFAULT_TIMELINE_RESOLUTION_US);
        assert_eq!(args.timeline_max_records, DEFAULT_TIMELINE_MAX_RECORDS);
        assert_eq!(args.timeline_ring_kib, None);
        assert!(!args.no_wakers, "wakers are recorded by default");
    }

    #[test]
    fn no_wakers_refuses_wakers() {
        assert!(record(&["-p", "1", "--no-wakers"]).unwrap().no_wakers);
        let err = record(&["-p", "1", "--no-wakers", "--wakers"]).expect_err("refused");
        assert_eq!(
            err.kind(),
            clap::error::ErrorKind::ArgumentConflict,
            "{err}"
        );
    }

    #[test]
    fn the_timeline_is_recorded_for_the_outputs_that_use_it() {
        assert!(
            record(&["-p", "1", "--timeline", "t.pftrace"])
                .unwrap()
                .timeline()
        );
        assert!(
            record(&["-p", "1", "--save", "c.json.gz"])
                .unwrap()
                .timeline()
        );
        assert!(
            record(&["-p", "1", "--report", "r.html"])
                .unwrap()
                .timeline()
        );
        assert!(
            !record(&["-p", "1", "--save", "c", "--no-timeline"])
                .unwrap()
                .timeline()
        );
        assert!(record(&["-p", "1", "--timeline-ring-kib", "6"]).is_err());
    }

    #[test]
    fn replay_and_diff_take_a_range() {
        let cli =
            Cli::try_parse_from(["profiler", "replay", "x", "--from", "1.5", "--to", "2"]).unwrap();
        let Some(Command::Replay(r)) = cli.command else {
            panic!("not a replay: {cli:?}");
        };
        assert_eq!(r.range.range(), Some((1.5, 2.0)));
        let cli = Cli::try_parse_from(["profiler", "diff", "a", "b", "--to", "3"]).unwrap();
        let Some(Command::Diff(d)) = cli.command else {
            panic!("not a diff: {cli:?}");
        };
        assert_eq!(d.range.range(), Some((0.0, 3.0)));
        assert!(Cli::try_parse_from(["profiler", "replay", "x", "--from", "-1"]).is_err());
        let cli = Cli::try_parse_from(["profiler", "replay", "x"]).unwrap();
        let Some(Command::Replay(r)) = cli.command else {
            panic!("not a replay: {cli:?}");
        };
        assert_eq!(r.range.range(), None);
    }

    #[test]
    fn short_flags_match_the_contract() {
        let args = record(&["-p", "7", "-d", "3", "-F", "49", "-o", "x.svg"]).unwrap();
        assert_eq!((args.secs(), args.freq), (3, 49));
        assert_eq!(args.pid, [7]);
        assert_eq!(
            args.out.output.as_deref(),
            Some(std::path::Path::new("x.svg"))
        );
        assert_eq!(args.period_ns(), 1_000_000_000 / 49);
    }

    #[test]
    fn nonsense_values_are_refused() {
        assert!(record(&["-p", "1", "-F", "0"]).is_err());
        assert!(record(&["-p", "1", "-d", "0"]).is_err());
        assert!(record(&["-p", "1", "--mode", "gpu"]).is_err());
        assert!(record(&[]).is_err());
    }

    #[test]
    fn targets_are_pids_a_cgroup_or_a_command() {
        let a = record(&["-p", "1,2", "-p", "3", "--no-children"]).unwrap();
        assert_eq!((a.pid, a.no_children), (vec![1, 2, 3], true));
        let a = record(&["--cgroup", "/sys/fs/cgroup/x"]).unwrap();
        assert_eq!(
            a.cgroup.as_deref(),
            Some(std::path::Path::new("/sys/fs/cgroup/x"))
        );
        let a = record(&["--", "sleep", "2"]).unwrap();
        assert_eq!(a.command, ["sleep", "2"]);
        assert_eq!(a.secs(), 86_400, "a command runs until it exits");
        assert_eq!(record(&["-d", "5", "--", "true"]).unwrap().secs(), 5);
        // Nothing to profile, or a command with PIDs.
        assert!(record(&["-d", "5"]).is_err());
        assert!(record(&["-p", "1", "--", "true"]).is_err());
    }

    #[test]
    fn replay_needs_no_pid_and_takes_the_output_options() {
        let cli =
            Cli::try_parse_from(["profiler", "replay", "x.capture", "--report", "r.md"]).unwrap();
        let Some(Command::Replay(r)) = cli.command else {
            panic!("not a replay: {cli:?}");
        };
        assert_eq!(r.capture, PathBuf::from("x.capture"));
        assert_eq!(r.out.report, Some(PathBuf::from("r.md")));
        let cli = Cli::try_parse_from(["profiler", "replay", "x", "--pprof", "x.pb.gz"]).unwrap();
        let Some(Command::Replay(r)) = cli.command else {
            panic!("not a replay: {cli:?}");
        };
        assert_eq!(r.out.pprof, Some(PathBuf::from("x.pb.gz")));
        // Recording options do not mix with it.
        assert!(Cli::try_parse_from(["profiler", "-p", "1", "replay", "x"]).is_err());
    }

    #[test]
    fn diff_takes_two_captures_and_its_own_outputs() {
        let cli = Cli::try_parse_from([
            "profiler",
            "diff",
            "a.capture",
            "b.capture",
            "-o",
            "d.svg",
            "--report",
            "d.md",
        ])
        .unwrap();
        let Some(Command::Diff(d)) = cli.command else {
            panic!("not a diff: {cli:?}");
        };
        assert_eq!(
            (d.before, d.after, d.output, d.report, d.top),
            (
                PathBuf::from("a.capture"),
                PathBuf::from("b.capture"),
                Some(PathBuf::from("d.svg")),
                Some(PathBuf::from("d.md")),
                DEFAULT_DIFF_TOP
            )
        );
        assert!(Cli::try_parse_from(["profiler", "diff", "a.capture"]).is_err());
        assert!(Cli::try_parse_from(["profiler", "diff", "a", "b", "--top", "0"]).is_err());
        assert!(Cli::try_parse_from(["profiler", "diff", "a", "b", "--mode", "cpu"]).is_err());
    }

    /// The first line clap prints when it refuses `-p 1` followed by `args`.
    fn refusal(args: &[&str]) -> String {
        let argv = ["profiler", "-p", "1"].iter().chain(args);
        let err = Cli::try_parse_from(argv).expect_err("refused by the parser");
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{err}");
        err.to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn table_sizes_of_zero_are_refused_with_the_flag_named() {
        for flag in ["--max-stacks", "--max-keys", "--max-threads"] {
            assert_eq!(
                refusal(&[flag, "0"]),
                format!(
                    "error: invalid value '0' for '{flag} <N>': an in-kernel table needs at least 1 entry"
                )
            );
            assert!(refusal(&[flag, "many"]).contains(flag));
            let one = record(&["-p", "1", flag, "1"]).unwrap_or_else(|e| panic!("{flag} 1: {e}"));
            let sizes = (one.max_stacks, one.max_keys, one.max_threads);
            let expected = match flag {
                "--max-stacks" => (Some(1), None, None),
                "--max-keys" => (None, Some(1), None),
                _ => (None, None, Some(1)),
            };
            assert_eq!(sizes, expected, "{flag} 1");
        }
    }

    #[test]
    fn a_wait_limit_of_zero_is_refused() {
        assert_eq!(
            refusal(&["--max-block-us", "0"]),
            "error: invalid value '0' for '--max-block-us <US>': 0 would ignore every wait; \
             leave the flag out for no limit"
        );
        let one = record(&["-p", "1", "--max-block-us", "1"]).unwrap();
        assert_eq!(one.max_block_ns(), 1_000);
    }

    #[test]
    fn zero_seconds_and_zero_hertz_are_refused() {
        assert!(refusal(&["--secs", "0"]).starts_with("error: invalid value '0' for '--secs"));
        assert!(refusal(&["--freq", "0"]).starts_with("error: invalid value '0' for '--freq"));
    }
}
