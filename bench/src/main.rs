//! `cargo xtask bench` and `cargo xtask demo` (xtask runs this binary): what our profiler
//! costs next to the anchors (libbpf-tools `offcputime`, `perf record --call-graph dwarf`),
//! measured side by side in one run on three workloads — a private nginx under wrk, a private
//! PostgreSQL under pgbench, and the test workload's fsync loop beside sleepers and spinners —
//! and the README's write-ups on real services.
//!
//! The bench measures in phases, one module each:
//! 1. **Throughput** (`throughput.rs`), nginx and PostgreSQL: a profiled side against an
//!    unprofiled one within the same 10 ms, one run per condition (`tools.rs`) per round,
//!    the order rotating and the profiled side alternating. bpf_stats stays off here: its
//!    two clock reads per program run would tax the BPF tools.
//! 2. **BPF cost per event** (`cost.rs`), from bpf_stats, on each workload.
//! 3. **Post-processing and memory** (`post.rs`), nginx.
//! 4. **Side by side** (`sidebyside.rs`), on each workload: ours and the anchors (offcputime;
//!    offcputime + wakeuptime as one side) attached to one process at once, in both attach
//!    orders, their BPF cost compared run by run (`--side-by-side` alone).
//!
//! Before them, **start-up** (`startup.rs`): CPU and wall time from the command to the capture
//! window's opening, on an idle machine and with 8 busy threads (`--workloads startup` alone).
//!
//! Ours runs as one instance on the service (nginx's master, PostgreSQL's postmaster),
//! following its children; offcputime and perf take one PID and run one instance per
//! process. Each run first waits for a quiet machine and is repeated when other work
//! disturbed it (`quiet.rs`), unless `--under-load`. `report.rs` writes
//! target/bench/latest.md.

mod compare;
mod cost;
mod demo;
mod goservice;
mod nginx;
mod post;
mod postgres;
mod process;
mod quiet;
mod report;
mod sidebyside;
mod startup;
mod throughput;
mod tools;

use std::{
    cell::RefCell,
    env, fs,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Instant,
};

use anyhow::{Context as _, Result, bail};
use clap::{Args, Parser};

use crate::{
    cost::{Costs, Workload},
    nginx::{Layout, NGINX_WORKERS, Nginx, Scratch, run_wrk},
    post::Post,
    postgres::Cluster,
    process::say,
    quiet::Quiet,
    report::{Machine, Report, Setup},
    sidebyside::SideBySide,
    throughput::{PgSides, Throughput},
    tools::{Bench, Condition, PACKAGES},
};

#[derive(Parser, Debug)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
enum Cli {
    /// What the profiler costs next to offcputime and perf on nginx under wrk, PostgreSQL
    /// under pgbench and an fsync-heavy load (throughput, BPF cost, and side by side with
    /// the anchors attached at once), then a fuzz run of each parser; as root, installs what
    /// it needs; writes target/bench/latest.md.
    Bench(Options),
    /// Profile a real service under load, next to the anchors (the README's write-ups;
    /// outputs in target/demo/).
    Demo {
        service: demo::Service,
        /// Capture length.
        #[arg(default_value_t = 20, value_name = "SECONDS")]
        secs: u64,
    },
}

#[derive(Args, Debug)]
struct Options {
    /// Rounds of the throughput and BPF-cost phases; pairs of runs (both attach orders) of
    /// each side-by-side comparison; runs of each start-up case.
    // Twelve, not the five the issue asks for: the default layout's noise floor is ~1.5 % per
    // run and the goal is 2 %; twelve rounds put its standard error near 0.4 %.
    #[arg(long, default_value_t = 12, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Seconds of load per run.
    #[arg(long, default_value_t = 6, value_name = "S",
          value_parser = clap::value_parser!(u64).range(1..))]
    secs: u64,
    /// A smoke test: 1 round of 3 s, a 3 s post-processing capture, 10 s of fuzzing per
    /// target (overrides --rounds and --secs).
    #[arg(long)]
    quick: bool,
    /// The throughput phase's worst case: each side is one worker and `wrk -t1 -c32`, all on
    /// one CPU, so the worker is preempted at nearly every request.
    #[arg(long)]
    one_cpu: bool,
    /// Only these conditions next to the baseline (default: all). Fewer conditions per round
    /// put each one closer in time to its baseline. The side-by-side phase runs when both
    /// `wall` and `offcputime` are named (or `--only` is not given).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "wall,wall-no-timeline,wall-no-wakers,wall-each,cpu,offcputime,perf"
    )]
    only: Vec<Condition>,
    /// Only these workloads (default: all). `startup`: the profiler's start-up on an idle
    /// `sleep`, on an idle machine and with 8 busy threads, `--rounds` runs of each (alone,
    /// it needs no nginx nor PostgreSQL).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "nginx,postgres,fsync,startup"
    )]
    workloads: Vec<WorkloadName>,
    /// On a machine other work keeps busy: start every run at once instead of waiting for
    /// quiet CPUs, never repeat a disturbed run, and report how busy other work kept the CPUs.
    #[arg(long)]
    under_load: bool,
    /// Only the side-by-side phase on the workloads `--workloads` names (default: nginx,
    /// postgres, fsync): ours and the anchors (offcputime; offcputime + wakeuptime as one
    /// side) attached to one process at once, `--rounds` pairs of `--secs` s runs in both
    /// attach orders, their BPF cost per event and per context switch compared (a full bench
    /// runs it too, after each workload's other phases).
    #[arg(long, conflicts_with_all = ["against", "timeline_ab"])]
    side_by_side: bool,
    /// Skip the fuzz runs at the end.
    #[arg(long)]
    no_fuzz: bool,
    /// Only compare `sched_switch`'s BPF cost per event with another build of the profiler
    /// (both on the same nginx worker at once, in both attach orders).
    #[arg(long, value_name = "PROFILER_BINARY")]
    against: Option<PathBuf>,
    /// Only compare `sched_switch`'s BPF cost per event with the timeline on and off: this
    /// build twice on the same nginx worker at once (`--report` with and without
    /// `--no-timeline`), in both attach orders.
    #[arg(long, conflicts_with = "against")]
    timeline_ab: bool,
}

/// The bench's workloads, for `--workloads`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum WorkloadName {
    Nginx,
    Postgres,
    Fsync,
    /// Not a service: the profiler's start-up (`startup.rs`).
    Startup,
    /// A Go net/http service with and without its goroutines followed (`goservice.rs`).
    Go,
}

impl WorkloadName {
    /// The workloads of the overhead phases, which need the services.
    const SERVICES: [WorkloadName; 3] = [
        WorkloadName::Nginx,
        WorkloadName::Postgres,
        WorkloadName::Fsync,
    ];
}

/// Conditions of the PostgreSQL throughput runs (perf and cpu mode are nginx's only).
const PG_CONDITIONS: [Condition; 3] = [Condition::Baseline, Condition::Wall, Condition::Offcputime];

/// Capture length of the post-processing measurement (the README goal is for 20 s).
const POST_SECS: u64 = 20;
/// Seconds per fuzz target at the end of a full bench.
const BENCH_FUZZ_SECS: u64 = 300;

impl Options {
    fn rounds(&self) -> usize {
        if self.quick { 1 } else { self.rounds as usize }
    }

    fn secs(&self) -> u64 {
        if self.quick { 3 } else { self.secs }
    }

    fn layout(&self) -> Layout {
        if self.one_cpu {
            Layout::OneCpu
        } else {
            Layout::Spread
        }
    }

    /// The conditions measured: the baseline and what `--only` names (all by default).
    fn conditions(&self) -> Vec<Condition> {
        Condition::ALL
            .into_iter()
            .filter(|c| *c == Condition::Baseline || self.only.is_empty() || self.only.contains(c))
            .collect()
    }

    fn runs(&self, workload: WorkloadName) -> bool {
        self.workloads.is_empty() || self.workloads.contains(&workload)
    }

    /// Whether the start-up phase runs: not with the A/B comparisons nor `--side-by-side`,
    /// which run nothing else.
    fn runs_go(&self) -> bool {
        self.runs(WorkloadName::Go)
            && self.against.is_none()
            && !self.timeline_ab
            && !self.side_by_side
    }

    fn runs_startup(&self) -> bool {
        self.runs(WorkloadName::Startup)
            && self.against.is_none()
            && !self.timeline_ab
            && !self.side_by_side
    }

    /// Whether the side-by-side phase runs (on each workload that runs): ours in wall mode
    /// against offcputime, so not when `--only` leaves either out.
    fn runs_side_by_side(&self) -> bool {
        self.side_by_side
            || self.only.is_empty()
            || [Condition::Wall, Condition::Offcputime]
                .iter()
                .all(|c| self.only.contains(c))
    }

    /// Whether nginx is started and the overhead phases (or an A/B comparison) run.
    fn runs_services(&self) -> bool {
        self.against.is_some()
            || self.timeline_ab
            || WorkloadName::SERVICES.into_iter().any(|w| self.runs(w))
    }

    /// The post-processing capture: 20 s as in the goal, shortened with `--quick`.
    fn post_secs(&self) -> u64 {
        if self.quick { self.secs() } else { POST_SECS }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = xtask::workspace_root();
    let (prefix, result) = match cli {
        Cli::Bench(opts) => ("bench", bench(&root, &opts)),
        Cli::Demo { service, secs } => ("demo", demo::run(&root, service, secs)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{prefix}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The bench command as typed (`cargo xtask bench …`), for the report.
fn typed_command(args: impl IntoIterator<Item = String>) -> String {
    std::iter::once("cargo xtask".to_string())
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}

fn bench(root: &Path, opts: &Options) -> Result<()> {
    if !xtask::is_root() {
        bail!(
            "the bench installs packages, loads eBPF programs and sets sysctls: run it as root \
             (sudo -E cargo xtask bench)"
        );
    }
    let started = Instant::now();
    if opts.runs_services() {
        xtask::packages::ensure(PACKAGES)?;
    }
    let binary = xtask::build(root, false)?;
    let scratch = Scratch::create()?;
    let quiet = RefCell::new(Quiet {
        under_load: opts.under_load,
        ..Quiet::default()
    });
    // First, before nginx and the clusters exist: the idle case wants an idle machine.
    let startup = if opts.runs_startup() {
        Some(startup::measure(
            &binary,
            &scratch.0,
            &quiet,
            opts.rounds(),
        )?)
    } else {
        None
    };
    let go = if opts.runs_go() {
        xtask::packages::ensure(&[
            xtask::packages::Package {
                binary: "/usr/bin/go",
                name: "golang-go",
                why: "the Go service is built from profiler-core/tests/fixtures/gowait",
            },
            xtask::packages::Package {
                binary: "/usr/bin/wrk",
                name: "wrk",
                why: "the HTTP load generator",
            },
        ])?;
        Some(goservice::measure(
            root,
            &binary,
            &scratch.0,
            &quiet,
            opts.rounds(),
            opts.secs(),
        )?)
    } else {
        None
    };
    let (overhead, quiet) = if opts.runs_services() {
        match overhead(root, opts, binary, &scratch, quiet)? {
            Some(done) => done,
            // An A/B comparison printed its own result.
            None => return Ok(()),
        }
    } else {
        (Overhead::default(), quiet.into_inner())
    };
    let setup = Setup {
        command: typed_command(env::args().skip(1)),
        rounds: opts.rounds(),
        secs: opts.secs(),
        layout: opts.layout(),
    };
    let report = Report {
        setup: &setup,
        machine: Machine::describe(root),
        nginx: overhead.nginx.as_ref(),
        postgres: overhead.postgres.as_ref(),
        costs: &overhead.costs,
        post: overhead.post.as_ref(),
        startup: startup.as_ref(),
        go: go.as_ref(),
        side_by_side: &overhead.side_by_side,
        quiet: &quiet,
        took: started.elapsed(),
    }
    .markdown();
    print!("{report}");
    let out_dir = root.join("target").join("bench");
    fs::create_dir_all(&out_dir).with_context(|| format!("cannot create {}", out_dir.display()))?;
    let out = out_dir.join("latest.md");
    fs::write(&out, &report).with_context(|| format!("cannot write {}", out.display()))?;
    say(&format!("wrote {}", out.display()));
    if opts.no_fuzz {
        return Ok(());
    }

    // The parsers that read files of untrusted processes get a longer fuzz run than CI's.
    let fuzz_secs = if opts.quick { 10 } else { BENCH_FUZZ_SECS };
    say(&format!("fuzzing each target for {fuzz_secs} s"));
    xtask::fuzz::run(root, fuzz_secs)
}

/// nginx's throughput, BPF cost, post-processing and side-by-side phases.
fn nginx_phases(
    bench: &Bench,
    opts: &Options,
    scratch: &Scratch,
    done: &mut Overhead,
) -> Result<()> {
    if opts.side_by_side {
        return side_by_side(bench, opts, &Workload::Nginx, done);
    }
    let conditions = opts.conditions();
    let (rounds, secs) = (opts.rounds(), opts.secs());
    let sides = throughput::Sides::start(&scratch.0, opts.layout())?;
    say(&format!("throughput: {}", sides.describe()));
    let tp_conditions: Vec<Condition> = conditions
        .iter()
        .copied()
        .filter(|c| c.in_throughput())
        .collect();
    done.nginx = Some(throughput::rounds(
        bench,
        &tp_conditions,
        rounds,
        "requests/s",
        |cond, side| throughput::nginx_run(bench, &sides, cond, side, secs),
    )?);
    drop(sides);
    done.costs.push(cost::bpf_costs(
        bench,
        &Workload::Nginx,
        &conditions,
        rounds,
        secs,
    )?);
    done.post = Some(post::post_processing(bench, opts.post_secs())?);
    side_by_side(bench, opts, &Workload::Nginx, done)
}

/// PostgreSQL's throughput, BPF cost and side-by-side phases; with `--side-by-side` only the
/// last, on one cluster.
fn postgres_phases(
    bench: &Bench,
    opts: &Options,
    scratch: &Scratch,
    done: &mut Overhead,
) -> Result<()> {
    if opts.side_by_side {
        say("PostgreSQL: a private cluster, pgbench tables at scale 10");
        let cluster = Cluster::start(&scratch.0.join("pg-a"))?;
        cluster.init_tables()?;
        return side_by_side(bench, opts, &Workload::Postgres(&cluster), done);
    }
    let conditions = opts.conditions();
    let (rounds, secs) = (opts.rounds(), opts.secs());
    say("PostgreSQL: two private clusters, pgbench tables at scale 10");
    let pg = PgSides::start(&scratch.0)?;
    let pg_conditions: Vec<Condition> = PG_CONDITIONS
        .into_iter()
        .filter(|c| conditions.contains(c))
        .collect();
    done.postgres = Some(throughput::rounds(
        bench,
        &pg_conditions,
        rounds,
        "transactions/s",
        |cond, side| throughput::postgres_run(bench, &pg, cond, side, secs),
    )?);
    let workload = Workload::Postgres(pg.first());
    done.costs.push(cost::bpf_costs(
        bench,
        &workload,
        &conditions,
        rounds,
        secs,
    )?);
    side_by_side(bench, opts, &workload, done)
}

/// The fsync-heavy workload's BPF cost and side-by-side phases.
fn fsync_phases(root: &Path, bench: &Bench, opts: &Options, done: &mut Overhead) -> Result<()> {
    let workload = cost::build_workload(root, &bench.dir)?;
    let workload = Workload::Fsync(&workload);
    if !opts.side_by_side {
        done.costs.push(cost::bpf_costs(
            bench,
            &workload,
            &opts.conditions(),
            opts.rounds(),
            opts.secs(),
        )?);
    }
    side_by_side(bench, opts, &workload, done)
}

/// The side-by-side phase on `workload`, where it runs (see [`Options::runs_side_by_side`]).
fn side_by_side(
    bench: &Bench,
    opts: &Options,
    workload: &Workload,
    done: &mut Overhead,
) -> Result<()> {
    if opts.runs_side_by_side() {
        let sides = sidebyside::ours_sides(&bench.binary);
        done.side_by_side.push(sidebyside::run(
            bench,
            workload,
            &sides,
            opts.rounds(),
            opts.secs(),
        )?);
    }
    Ok(())
}

/// What the overhead phases measured, where they ran.
#[derive(Default)]
struct Overhead {
    nginx: Option<Throughput>,
    postgres: Option<Throughput>,
    costs: Vec<Costs>,
    post: Option<Post>,
    side_by_side: Vec<SideBySide>,
}

/// The overhead phases (throughput, BPF cost, post-processing, side by side) on the
/// workloads asked for,
/// or an A/B comparison (`--against`, `--timeline-ab`: printed here, `None` returned). Also
/// returns what the quiet gate saw.
fn overhead(
    root: &Path,
    opts: &Options,
    binary: PathBuf,
    scratch: &Scratch,
    quiet: RefCell<Quiet>,
) -> Result<Option<(Overhead, Quiet)>> {
    let nginx = Nginx::start(&scratch.0, NGINX_WORKERS)?;
    let bench = Bench {
        binary,
        dir: scratch.0.clone(),
        port: nginx.port,
        nginx: nginx.target()?,
        quiet,
    };
    say(&format!(
        "nginx (master {}, workers {:?}) serves http://127.0.0.1:{}/; {} round(s) of {} s",
        bench.nginx.service,
        bench.nginx.processes,
        bench.port,
        opts.rounds(),
        opts.secs()
    ));
    // Warm-up: first requests fault in nginx's pages and fill the page cache.
    run_wrk(bench.port, if opts.quick { 1 } else { 3 })?;
    if let Some(other) = &opts.against {
        let this = compare::Side::plain("this build", &bench.binary);
        let other = compare::Side::plain(other.display().to_string(), other);
        compare::run(&bench, &this, &other, opts.rounds(), opts.secs())?;
        return Ok(None);
    }
    if opts.timeline_ab {
        let (on, off) = compare::timeline_sides(&bench.binary);
        compare::run(&bench, &on, &off, opts.rounds(), opts.secs())?;
        return Ok(None);
    }

    let mut done = Overhead::default();
    if opts.runs(WorkloadName::Nginx) {
        nginx_phases(&bench, opts, scratch, &mut done)?;
    }
    drop(nginx);
    if opts.runs(WorkloadName::Postgres) {
        postgres_phases(&bench, opts, scratch, &mut done)?;
    }
    if opts.runs(WorkloadName::Fsync) {
        fsync_phases(root, &bench, opts, &mut done)?;
    }
    Ok(Some((done, bench.quiet.into_inner())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(args: &[&str]) -> Result<Options, clap::Error> {
        let argv = ["cargo xtask", "bench"]
            .into_iter()
            .chain(args.iter().copied());
        match Cli::try_parse_from(argv)? {
            Cli::Bench(o) => Ok(o),
            Cli::Demo { .. } => panic!("parsed as demo"),
        }
    }

    #[test]
    fn bench_options_defaults_quick_and_errors() {
        let o = bench(&[]).unwrap();
        assert_eq!((o.rounds(), o.secs(), o.quick), (12, 6, false));
        assert_eq!(o.layout(), Layout::Spread);
        assert_eq!(o.post_secs(), POST_SECS);
        assert_eq!(o.conditions(), Condition::ALL);
        assert_eq!(bench(&["--one-cpu"]).unwrap().layout(), Layout::OneCpu);
        let o = bench(&["--rounds", "7", "--secs", "20"]).unwrap();
        assert_eq!((o.rounds(), o.secs()), (7, 20));
        let o = bench(&["--quick", "--rounds", "7"]).unwrap();
        assert_eq!((o.rounds(), o.secs(), o.post_secs()), (1, 3, 3));
        let o = bench(&["--only", "wall,offcputime"]).unwrap();
        assert_eq!(
            o.conditions(),
            [Condition::Baseline, Condition::Wall, Condition::Offcputime]
        );
        assert!(o.runs(WorkloadName::Fsync));
        let o = bench(&["--only", "wall,wall-no-timeline"]).unwrap();
        assert_eq!(
            o.conditions(),
            [
                Condition::Baseline,
                Condition::Wall,
                Condition::WallNoTimeline
            ]
        );
        assert!(!Condition::WallNoTimeline.in_throughput() && Condition::Wall.in_throughput());
        let o = bench(&["--only", "wall,wall-no-wakers"]).unwrap();
        assert_eq!(
            o.conditions(),
            [
                Condition::Baseline,
                Condition::Wall,
                Condition::WallNoWakers
            ]
        );
        assert!(!Condition::WallNoWakers.in_throughput());
        let o = bench(&["--workloads", "postgres,fsync", "--under-load", "--no-fuzz"]).unwrap();
        assert!(!o.runs(WorkloadName::Nginx) && o.runs(WorkloadName::Postgres));
        assert!(o.under_load && o.no_fuzz);
        assert!(bench(&["--workloads", "redis"]).is_err());
        let o = bench(&["--against", "/tmp/old-profiler"]).unwrap();
        assert_eq!(o.against, Some(PathBuf::from("/tmp/old-profiler")));
        assert!(bench(&["--timeline-ab"]).unwrap().timeline_ab);
        let o = bench(&["--workloads", "startup"]).unwrap();
        assert!(o.runs_startup() && !o.runs_services());
        let o = bench(&["--workloads", "fsync,startup"]).unwrap();
        assert!(o.runs_startup() && o.runs_services() && !o.runs(WorkloadName::Nginx));
        let o = bench(&[]).unwrap();
        assert!(o.runs_startup() && o.runs_services());
        assert!(!bench(&["--workloads", "nginx"]).unwrap().runs_startup());
        for ab in [&["--timeline-ab"][..], &["--against", "/tmp/old-profiler"]] {
            let o = bench(ab).unwrap();
            assert!(!o.runs_startup() && o.runs_services());
        }
        assert!(bench(&["--timeline-ab", "--against", "/tmp/old-profiler"]).is_err());
        assert!(bench(&["--rounds"]).is_err());
        assert!(bench(&["--rounds", "0"]).is_err());
        assert!(bench(&["--only", "baseline"]).is_err());
        assert!(bench(&["--only", "frob"]).is_err());
        assert!(bench(&["--frobnicate"]).is_err());
    }

    #[test]
    fn the_side_by_side_phase_runs_by_default_and_alone() {
        let o = bench(&[]).unwrap();
        assert!(o.runs_side_by_side() && !o.side_by_side && o.runs_startup());
        let o = bench(&["--only", "wall,offcputime"]).unwrap();
        assert!(o.runs_side_by_side());
        for only in ["wall", "offcputime,perf", "cpu"] {
            assert!(!bench(&["--only", only]).unwrap().runs_side_by_side());
        }
        let o = bench(&["--side-by-side", "--workloads", "postgres,fsync"]).unwrap();
        assert!(o.runs_side_by_side() && o.runs_services() && !o.runs_startup());
        assert!(!o.runs(WorkloadName::Nginx) && o.runs(WorkloadName::Fsync));
        let o = bench(&["--side-by-side", "--only", "cpu", "--under-load"]).unwrap();
        assert!(o.runs_side_by_side() && o.under_load);
        assert!(bench(&["--side-by-side", "--timeline-ab"]).is_err());
        assert!(bench(&["--side-by-side", "--against", "/tmp/old-profiler"]).is_err());
    }

    #[test]
    fn demo_takes_a_service_and_seconds() {
        let argv = |a: &[&'static str]| ["cargo xtask", "demo"].into_iter().chain(a.to_vec());
        let parsed = Cli::try_parse_from(argv(&["postgres", "15"])).unwrap();
        assert!(matches!(
            parsed,
            Cli::Demo {
                service: demo::Service::Postgres,
                secs: 15
            }
        ));
        let parsed = Cli::try_parse_from(argv(&["nginx"])).unwrap();
        assert!(matches!(parsed, Cli::Demo { secs: 20, .. }));
        assert!(Cli::try_parse_from(argv(&["mysql"])).is_err());
        assert!(Cli::try_parse_from(argv(&[])).is_err());
    }

    #[test]
    fn the_report_names_the_command_as_typed() {
        let args = ["bench", "--rounds", "7"].map(String::from);
        assert_eq!(typed_command(args), "cargo xtask bench --rounds 7");
    }
}
