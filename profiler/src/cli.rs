//! Command line → [`Args`]. Defaults are named constants so tests and docs can reuse them.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// Default sampling frequency: 99 Hz avoids lockstep with 100 Hz timers in the target.
pub const DEFAULT_FREQ_HZ: u64 = 99;
/// Default capture length.
pub const DEFAULT_SECS: u64 = 20;
/// Default `--min-block-us`.
pub const DEFAULT_MIN_BLOCK_US: u64 = 1;
/// Default size of the in-kernel stack table (distinct user + kernel stacks). Preallocated:
/// about 1.1 KiB of kernel memory per entry (36 MiB).
pub const DEFAULT_MAX_STACKS: u32 = 32_768;
/// Default size of the on-CPU sample table and of the off-CPU wait table (distinct keys).
pub const DEFAULT_MAX_KEYS: u32 = 32_768;
/// Default number of threads tracked (also the size of the wait-start table).
pub const DEFAULT_MAX_THREADS: u32 = 65_536;

/// How user stacks are walked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Unwind {
    /// Frame pointers only (what BCC and perf's fp mode do).
    Fp,
    /// `.eh_frame` (or `.debug_frame`: Go) wherever a file has it, frame pointers elsewhere
    /// (JIT code, files without unwind tables).
    Dwarf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// On-CPU samples only; counts are samples.
    Cpu,
    /// Off-CPU waits only; counts are microseconds.
    Off,
    /// On-CPU and off-CPU in one graph; counts are microseconds.
    Wall,
}

impl Mode {
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

/// Where every thread of one process spends its time: on the CPU, asleep, in I/O, or waiting
/// for a CPU, as one flame graph.
#[derive(Debug, Parser)]
#[command(name = "profiler", version, about, long_about = None)]
pub struct Args {
    /// Process to profile (a thread id selects its whole process).
    #[arg(short, long, value_name = "PID")]
    pub pid: u32,

    /// Capture length in seconds; Ctrl-C or SIGTERM end it early and still write the output.
    #[arg(short = 'd', long = "secs", value_name = "SECONDS", default_value_t = DEFAULT_SECS,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub secs: u64,

    /// On-CPU sampling frequency per CPU, in Hz.
    #[arg(short = 'F', long = "freq", value_name = "HZ", default_value_t = DEFAULT_FREQ_HZ,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub freq: u64,

    /// What to profile: `wall` = on-CPU + off-CPU in microseconds.
    #[arg(long, value_enum, default_value_t = Mode::Wall)]
    pub mode: Mode,

    /// SVG flame graph to write [default: profile-<name>-<pid>-<mode>.svg].
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,

    /// Also write the folded stacks (`frame;frame;… count`) here.
    #[arg(long, value_name = "PATH")]
    pub folded: Option<PathBuf>,

    /// Put each thread's name and tid as the frame below the process.
    #[arg(long)]
    pub per_thread: bool,

    /// Also write the wakeup chains (`waiter stack;--;waker stack`) as `<output>.wakers.svg`
    /// (and `<folded>.wakers.folded`), taking the wakers' stacks.
    #[arg(long)]
    pub wakers: bool,

    /// Write the report here too: Markdown (`.md`) or JSON (`.json`, schema in
    /// docs/report.schema.json).
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,

    /// Ignore waits shorter than this many microseconds.
    #[arg(long, value_name = "US", default_value_t = DEFAULT_MIN_BLOCK_US)]
    pub min_block_us: u64,

    /// Ignore waits longer than this many microseconds [default: no limit].
    #[arg(long, value_name = "US")]
    pub max_block_us: Option<u64>,

    /// Leave kernel frames out of every stack.
    #[arg(long)]
    pub no_kernel_stacks: bool,

    /// How to walk user stacks: `dwarf` unwinds from .eh_frame (or Go's .debug_frame) in the
    /// kernel, with frame pointers where a file has no unwind table.
    #[arg(long, value_enum, default_value_t = Unwind::Dwarf)]
    pub unwind: Unwind,

    /// Size of the in-kernel stack table (distinct stacks).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_STACKS)]
    pub max_stacks: u32,

    /// Size of the in-kernel sample and wait tables (distinct thread × stack keys).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_KEYS)]
    pub max_keys: u32,

    /// Number of threads tracked in the kernel.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_THREADS)]
    pub max_threads: u32,

    /// Show eBPF-side diagnostics (aya-log) and more detail; repeat for more.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

impl Args {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_is_well_formed() {
        Args::command().debug_assert();
    }

    #[test]
    fn bare_command_line_uses_the_documented_defaults() {
        let args = Args::try_parse_from(["profiler", "--pid", "1"]).unwrap();
        assert_eq!(args.secs, DEFAULT_SECS);
        assert_eq!(args.freq, DEFAULT_FREQ_HZ);
        assert_eq!(args.mode, Mode::Wall);
        assert_eq!(args.min_block_ns(), DEFAULT_MIN_BLOCK_US * 1000);
        assert_eq!(args.max_block_ns(), u64::MAX);
        assert_eq!(args.max_stacks, DEFAULT_MAX_STACKS);
        assert_eq!(args.unwind, Unwind::Dwarf);
        assert!(!args.per_thread);
    }

    #[test]
    fn short_flags_match_the_contract() {
        let args =
            Args::try_parse_from(["profiler", "-p", "7", "-d", "3", "-F", "49", "-o", "x.svg"])
                .unwrap();
        assert_eq!((args.pid, args.secs, args.freq), (7, 3, 49));
        assert_eq!(args.output.as_deref(), Some(std::path::Path::new("x.svg")));
        assert_eq!(args.period_ns(), 1_000_000_000 / 49);
    }

    #[test]
    fn nonsense_values_are_refused() {
        assert!(Args::try_parse_from(["profiler", "-p", "1", "-F", "0"]).is_err());
        assert!(Args::try_parse_from(["profiler", "-p", "1", "-d", "0"]).is_err());
        assert!(Args::try_parse_from(["profiler", "-p", "1", "--mode", "gpu"]).is_err());
        assert!(Args::try_parse_from(["profiler"]).is_err());
    }
}
