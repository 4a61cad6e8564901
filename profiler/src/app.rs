//! One run, stage by stage: prepare (preflight, outputs, kernel facts, unwind tables) →
//! capture (load/attach, the window, drain) → post-process (account, symbolize) → render
//! (fold, SVG, report, saved capture, pprof). Each stage lives in its own module; this file
//! only sequences them and hands each the model types the previous one produced.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, Result};

use crate::{
    capture::{EndReason, Tick, Waiter},
    cli::{Args, Cli, Command, OutputArgs, ReplayArgs, Unwind},
    drain,
    fold::{self, FoldOptions, Folded},
    kernel::{self, TaskOffsets},
    model::{CaptureMeta, Drained, Mode, SavedCapture, Seeds, Window, saved::SAVED_FORMAT},
    preflight::{self, Output, PreflightError, Target},
    probes::{self, ProbeConfig, Probes},
    profile::{self, AccountOptions},
    render::{pprof, report, summary, svg},
    snapshot,
    symbolize::{self, Symbolizer, perfmap::PerfMap, procmap::ProcessMaps},
    unwind::tables::UnwindTables,
};

/// Row chunks (65,536 rows, 768 KiB each) kept free for files mapped during the capture.
const UNWIND_CHUNKS_HEADROOM: usize = 4;

pub async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Some(Command::Replay(r)) => replay(&r),
        None => record(&cli.record, cli.verbose).await,
    }
}

/// `profiler replay CAPTURE`: the render stage alone, from a saved capture.
fn replay(r: &ReplayArgs) -> Result<()> {
    let saved = SavedCapture::load(&r.capture)?;
    let default_svg = default_svg_name(&saved.meta, saved.profile.mode);
    let outputs = open_outputs(&r.out, default_svg, None, saved.profile.mode)?;
    render(&saved, &r.out, outputs)
}

async fn record(args: &Args, verbose: u8) -> Result<()> {
    let mut prepared = prepare(args)?;
    let mut waiter = Waiter::new(prepared.target.pid).context("cannot install signal handlers")?;
    let captured = capture(args, verbose, &mut prepared, &mut waiter).await?;
    let post_started = Instant::now();
    let Prepared {
        target,
        outputs,
        maps,
        ..
    } = prepared;
    let Captured {
        drained,
        seeds,
        window,
        reason,
        probes,
    } = captured;
    if let Some(note) = reason.note() {
        eprintln!("profiler: {note}");
    }
    let meta = CaptureMeta {
        target: target.name.clone(),
        pid: target.pid,
        kernel: kernel::release(),
        ended_early: reason.note().map(str::to_string),
        started_unix_ns: unix_time_of(window.start_ns),
    };
    let opts = AccountOptions {
        target_pid: target.pid,
        mode: args.mode,
        window,
        period_ns: args.period_ns(),
        min_block_ns: args.min_block_ns(),
        max_block_ns: args.max_block_ns(),
    };
    let out = args.out.clone();
    // Post-processing runs beside the signal handlers: a Ctrl-C now abandons it instead of
    // going unheard. The outputs are still temporary files; they are removed.
    let temp_paths = outputs.temp_paths();
    let work = tokio::task::spawn_blocking(move || -> Result<bool> {
        let saved = post_process(drained, seeds, &opts, meta, maps);
        let empty = saved.profile.entries.is_empty();
        render(&saved, &out, outputs)?;
        Ok(empty)
    });
    let empty = tokio::select! {
        done = work => done.context("post-processing failed")??,
        () = waiter.interrupted() => {
            for p in temp_paths {
                let _ = std::fs::remove_file(p);
            }
            anyhow::bail!("interrupted while writing the output; nothing was written");
        }
    };
    // The programs stay loaded until their own frames have been named (and cut off).
    drop(probes);
    log::info!(
        "post-processing took {:.3} s",
        post_started.elapsed().as_secs_f64()
    );
    if empty {
        eprintln!(
            "profiler: nothing was recorded for PID {}{}",
            target.pid,
            if reason == EndReason::TargetExited {
                " before it exited"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// What the prepare stage hands the capture.
struct Prepared {
    target: Target,
    outputs: Outputs,
    offsets: TaskOffsets,
    maps: ProcessMaps,
    /// `.eh_frame` rows of every executable file the target maps (with `--unwind dwarf`).
    tables: Option<UnwindTables>,
}

/// Everything that can be refused is refused here, before anything is attached.
fn prepare(args: &Args) -> Result<Prepared> {
    preflight::check_privilege()?;
    preflight::check_btf()?;
    let pid = args.pid.ok_or(PreflightError::NoSuchProcess(0))?;
    let target = preflight::resolve_target(pid)?;
    if let Some(tid) = target.given_tid {
        eprintln!(
            "profiler: {tid} is a thread of {} (PID {}); profiling the whole process",
            target.name, target.pid
        );
    }
    if args.out.wakers && !args.mode.traces_switches() {
        eprintln!("profiler: --wakers needs off-CPU tracing; ignored in --mode cpu");
    }
    let default_svg = preflight::default_output_name(&target, args.mode.name());
    let outputs = open_outputs(&args.out, default_svg, args.save.as_deref(), args.mode)?;
    let offsets = kernel::task_offsets(Path::new(preflight::VMLINUX_BTF))
        .context("cannot find the task_struct layout of this kernel")?;
    let mut maps = ProcessMaps::new(target.pid);
    maps.refresh().map_err(|error| {
        if Path::new(&format!("/proc/{}", target.pid)).exists() {
            PreflightError::Unreadable {
                pid: target.pid,
                error,
            }
        } else {
            PreflightError::NoSuchProcess(target.pid)
        }
    })?;
    // Unwind tables for every executable file the target maps, before the programs load:
    // their size decides the size of the kernel's row array.
    let tables = (args.unwind == Unwind::Dwarf).then(|| {
        let mut tables = UnwindTables::default();
        tables.update(&maps);
        log::info!(
            "unwind tables: {} rows from {} files in {:.3} s ({:.1} MiB)",
            tables.row_count(),
            tables.file_count(),
            tables.build_secs,
            (tables.row_count() * std::mem::size_of::<profiler_common::unwind::UnwindRow>()) as f64
                / (1024.0 * 1024.0)
        );
        for (file, why) in &tables.failures {
            log::debug!("no unwind table for {file} ({why}): frame pointers there");
        }
        tables
    });
    Ok(Prepared {
        target,
        outputs,
        offsets,
        maps,
        tables,
    })
}

/// What the capture stage hands post-processing. The programs are still loaded.
struct Captured {
    drained: Drained,
    seeds: Seeds,
    window: Window,
    reason: EndReason,
    probes: Probes,
}

/// Load and attach, open the window, wait it out (keeping the target's mappings current),
/// close it and drain the maps.
async fn capture(
    args: &Args,
    verbose: u8,
    prepared: &mut Prepared,
    waiter: &mut Waiter,
) -> Result<Captured> {
    let Prepared {
        target,
        offsets,
        maps,
        tables,
        ..
    } = prepared;
    let load_started = Instant::now();
    let mut probes = Probes::load(&ProbeConfig {
        target_pid: target.pid,
        offsets: *offsets,
        mode: args.mode,
        period_ns: args.period_ns(),
        min_block_ns: args.min_block_ns(),
        max_block_ns: args.max_block_ns(),
        kernel_stacks: !args.no_kernel_stacks,
        waker_stacks: args.out.wakers,
        // Room for libraries loaded during the capture.
        dwarf_chunks: tables
            .as_ref()
            .map(|t| (t.chunks_needed() + UNWIND_CHUNKS_HEADROOM) as u32),
        max_stacks: args.max_stacks,
        max_keys: args.max_keys,
        max_threads: args.max_threads,
        verify_memos: args.verify_memos,
        verbose,
        // Only waker kernel stacks stop at an interrupt entry: with `--wakers`, or where the
        // preempt count cannot tell an interrupt. Reading /proc/kallsyms costs ~0.1 s of CPU.
        irq_entry: if args.out.wakers || offsets.preempt_count.is_none() {
            std::fs::read_to_string("/proc/kallsyms")
                .map(|text| kernel::interrupt_entry_ranges(&text))
                .unwrap_or_default()
        } else {
            Default::default()
        },
    })?;
    let loaded = load_started.elapsed();
    if let Some(tables) = tables.as_mut() {
        probes.upload_unwind_tables(tables, maps)?;
    }
    probes.attach()?;
    let attached = load_started.elapsed();

    // The window opens now and lasts exactly `--secs`: the line below says so the moment it
    // opens (whoever compares our figures with the kernel's reads them from here).
    let start_ns = probes.start()?;
    let opened = Instant::now();
    eprintln!(
        "profiler: capturing {} (PID {}) for {} s in {} mode{}",
        target.name,
        target.pid,
        args.secs,
        args.mode.name(),
        if args.mode.samples_on_cpu() {
            format!(" at {} Hz on {} CPUs", args.freq, probes.attached_cpus())
        } else {
            String::new()
        }
    );
    let sched_at_start = drain::sched_stats(target.pid);
    let seeds = if args.mode.traces_switches() {
        let mappings = tables.as_mut().map(|t| t.proc_mappings(maps));
        let with_tables = tables.as_ref().zip(mappings.as_deref());
        snapshot::seed_threads(&mut probes, target.pid, start_ns, with_tables)?
    } else {
        Seeds::default()
    };
    log::info!(
        "load {:.3} s, attach {:.3} s, start snapshot {:.3} s; CPU before the window: {}",
        loaded.as_secs_f64(),
        (attached - loaded).as_secs_f64(),
        opened.elapsed().as_secs_f64(),
        cpu_used_so_far()
    );

    let pid = target.pid;
    let reason = waiter
        .wait(opened, args.secs, || {
            // New libraries (dlopen) and JIT regions become resolvable and unwindable as they
            // appear.
            let gone = maps.refresh().is_err() && !Path::new(&format!("/proc/{pid}")).exists();
            if let Some(tables) = tables.as_mut()
                && !gone
                && tables.update(maps)
                && let Err(e) = probes.upload_unwind_tables(tables, maps)
            {
                log::warn!("new unwind tables not uploaded: {e}");
            }
            let counters = probes.counters().unwrap_or_default();
            Tick {
                samples: counters.get(profiler_common::Counter::Samples),
                switches: counters.get(profiler_common::Counter::SwitchesOut),
                target_gone: gone,
            }
        })
        .await;
    let stop_ns = probes.stop(start_ns)?;
    let mut drained = drain::drain(&probes, target.pid)?;
    drained.sched_at_start = sched_at_start;
    let _ = maps.refresh();
    for counter in profiler_common::Counter::ALL {
        log::debug!("counter {counter:?}: {}", drained.counters.get(counter));
    }
    log::debug!(
        "drained {} sample keys, {} wait keys, {} waker keys, {} stacks, {} threads",
        drained.samples.len(),
        drained.waits.len(),
        drained.wakers.len(),
        drained.stacks.len(),
        drained.threads.len()
    );
    Ok(Captured {
        drained,
        seeds,
        window: Window { start_ns, stop_ns },
        reason,
        probes,
    })
}

/// This process's CPU time so far (user + system: most of the system time is the kernel
/// verifying our programs), for the start-up log line the bench reads.
fn cpu_used_so_far() -> String {
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    format!(
        "{:.3} s (user {:.3} s, system {:.3} s)",
        secs(ru.ru_utime) + secs(ru.ru_stime),
        secs(ru.ru_utime),
        secs(ru.ru_stime)
    )
}

/// The wall-clock time (ns since the Unix epoch) of a CLOCK_MONOTONIC instant in the past.
fn unix_time_of(monotonic_ns: u64) -> Option<u64> {
    let ago = probes::monotonic_ns().checked_sub(monotonic_ns)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    u64::try_from(now.as_nanos()).ok()?.checked_sub(ago)
}

/// Account the time, then name every stack it refers to.
fn post_process(
    drained: Drained,
    seeds: Seeds,
    opts: &AccountOptions,
    meta: CaptureMeta,
    maps: ProcessMaps,
) -> SavedCapture {
    let pid = meta.pid;
    let profile = profile::account(drained, seeds, opts);
    let symbolizer = Symbolizer::new(maps, PerfMap::load(pid));
    let names = symbolize::name_stacks(&profile, &symbolizer);
    SavedCapture {
        format: SAVED_FORMAT,
        meta,
        profile,
        names,
    }
}

/// Every file the run writes, opened before anything is attached.
struct Outputs {
    svg: Output,
    folded: Option<Output>,
    report: Option<(Output, ReportFormat)>,
    wakers_svg: Option<Output>,
    wakers_folded: Option<Output>,
    saved: Option<Output>,
    pprof: Option<Output>,
}

impl Outputs {
    fn temp_paths(&self) -> Vec<PathBuf> {
        let mut all: Vec<&Output> = vec![&self.svg];
        all.extend(self.folded.iter());
        all.extend(self.report.iter().map(|(o, _)| o));
        all.extend(self.wakers_svg.iter());
        all.extend(self.wakers_folded.iter());
        all.extend(self.saved.iter());
        all.extend(self.pprof.iter());
        all.iter().map(|o| o.temp_path().to_path_buf()).collect()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ReportFormat {
    Markdown,
    Json,
}

fn open_outputs(
    out: &OutputArgs,
    default_svg: PathBuf,
    save: Option<&Path>,
    mode: Mode,
) -> Result<Outputs, PreflightError> {
    let svg_path = out.output.clone().unwrap_or(default_svg);
    let report = match &out.report {
        None => None,
        Some(path) => {
            let format = match path.extension().and_then(|e| e.to_str()) {
                Some("md") => ReportFormat::Markdown,
                Some("json") => ReportFormat::Json,
                _ => return Err(PreflightError::ReportExtension(path.clone())),
            };
            Some((preflight::open_output("the report", path)?, format))
        }
    };
    let wakers = out.wakers && mode.traces_switches();
    let with_wakers =
        |p: &Path, ext: &str| -> PathBuf { p.with_extension(format!("wakers.{ext}")) };
    Ok(Outputs {
        folded: out
            .folded
            .as_deref()
            .map(|p| preflight::open_output("the folded stacks", p))
            .transpose()?,
        wakers_svg: wakers
            .then(|| preflight::open_output("the wakeup graph", &with_wakers(&svg_path, "svg")))
            .transpose()?,
        wakers_folded: match (&out.folded, wakers) {
            (Some(p), true) => Some(preflight::open_output(
                "the wakeup chains",
                &with_wakers(p, "folded"),
            )?),
            _ => None,
        },
        saved: save
            .map(|p| preflight::open_output("the saved capture", p))
            .transpose()?,
        pprof: out
            .pprof
            .as_deref()
            .map(|p| preflight::open_output("the pprof profile", p))
            .transpose()?,
        svg: preflight::open_output("the flame graph", &svg_path)?,
        report,
    })
}

fn default_svg_name(meta: &CaptureMeta, mode: Mode) -> PathBuf {
    preflight::default_output_name(
        &Target {
            pid: meta.pid,
            name: meta.target.clone(),
            given_tid: None,
        },
        mode.name(),
    )
}

/// Fold, then write every output and print the summary.
fn render(saved: &SavedCapture, out: &OutputArgs, outputs: Outputs) -> Result<()> {
    let SavedCapture {
        meta,
        profile,
        names,
        ..
    } = saved;
    let fold_opts = FoldOptions {
        process: meta.target.clone(),
        per_thread: out.per_thread,
    };
    let folded = fold::fold(profile, names, &fold_opts);
    let mode_words = match profile.mode {
        Mode::Cpu => "on-CPU",
        Mode::Off => "off-CPU",
        Mode::Wall => "wall clock: on-CPU + off-CPU",
    };
    let title = format!("{} (PID {}) — {mode_words}", meta.target, meta.pid);
    let svg_path = outputs.svg.path.clone();
    write_folded(&folded, outputs.folded)?;
    let subtitle = summary::subtitle(profile, &folded);
    write_svg(&folded, outputs.svg, title.clone(), subtitle, false)?;
    if outputs.wakers_svg.is_some() || outputs.wakers_folded.is_some() {
        let chains = fold::fold_wakers(profile, names, &fold_opts);
        write_folded(&chains, outputs.wakers_folded)?;
        if let Some(out) = outputs.wakers_svg {
            let subtitle = format!(
                "blocked stack above --, waker's stack below it · {} · unit: µs of blocked time each waker ended",
                summary::secs(profile.window.len_ns())
            );
            write_svg(&chains, out, format!("{title} — wakeups"), subtitle, true)?;
        }
    }
    let report = report::build(&report::ReportInput {
        profile,
        names,
        meta,
    });
    if let Some((output, format)) = outputs.report {
        let path = write_output(output, "the report", |w| match format {
            ReportFormat::Markdown => report::write_markdown(&report, &mut { w }),
            ReportFormat::Json => report::write_json(&report, &mut { w }),
        })?;
        eprintln!("profiler: wrote the report to {}", path.display());
    }
    if let Some(output) = outputs.saved {
        let path = write_output(output, "the saved capture", |w| saved.write_to(w))?;
        eprintln!("profiler: saved the capture to {}", path.display());
    }
    if let Some(output) = outputs.pprof {
        let started = Instant::now();
        let path = write_output(output, "the pprof profile", |w| {
            pprof::write_pprof(saved, w)
        })?;
        log::info!(
            "pprof: {} bytes in {:.1} ms",
            std::fs::metadata(&path).map_or(0, |m| m.len()),
            started.elapsed().as_secs_f64() * 1e3
        );
        eprintln!("profiler: wrote the pprof profile to {}", path.display());
    }
    let mut stdout = std::io::stdout().lock();
    summary::write_summary(&mut stdout, profile, &meta.target, meta.pid)?;
    report::write_text(&report, &mut stdout, profile.mode)?;
    writeln!(
        stdout,
        "profiler: wrote flame graph to {}",
        svg_path.display()
    )?;
    Ok(())
}

/// Writes an output through a buffer and puts it in place.
fn write_output(
    mut out: Output,
    what: &str,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<PathBuf> {
    let path = out.path.clone();
    let written = {
        let mut writer = std::io::BufWriter::new(out.file());
        write(&mut writer).and_then(|()| writer.flush())
    };
    written
        .and_then(|()| out.commit())
        .with_context(|| format!("cannot write {what} to {}", path.display()))
}

fn write_folded(folded: &Folded, out: Option<Output>) -> Result<()> {
    let Some(out) = out else {
        return Ok(());
    };
    let path = write_output(out, "the folded stacks", |w| folded.write_to(&mut { w }))?;
    eprintln!("profiler: wrote folded stacks to {}", path.display());
    Ok(())
}

fn write_svg(
    folded: &Folded,
    out: Output,
    title: String,
    subtitle: String,
    wakeup_palette: bool,
) -> Result<()> {
    let opts = svg::SvgOptions {
        title,
        subtitle,
        wakeup_palette,
    };
    let path = write_output(out, "the flame graph", |w| svg::write_svg(folded, &opts, w))?;
    if wakeup_palette {
        eprintln!("profiler: wrote wakeup graph to {}", path.display());
    }
    Ok(())
}
