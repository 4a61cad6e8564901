//! One run, stage by stage: preflight → load/attach → capture → drain → account → symbolize
//! → fold → render. Each stage lives in its own module; this file only sequences them.

use std::{
    collections::{HashMap, HashSet},
    io::Write as _,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, Result};

use crate::{
    capture::{EndReason, Tick, Waiter},
    cli::{Args, Mode, Unwind},
    drain::{self, Window},
    fold::{self, FoldOptions, Folded, StackNames},
    kernel,
    preflight::{self, Output, PreflightError, Target},
    probes::{ProbeConfig, Probes},
    profile::{self, AccountOptions, Profile, Seeds},
    render::{report, summary, svg},
    snapshot,
    symbolize::{Symbolizer, perfmap::PerfMap, procmap::ProcessMaps},
    unwind::tables::UnwindTables,
};

/// Row chunks (65,536 rows, 768 KiB each) kept free for files mapped during the capture.
const UNWIND_CHUNKS_HEADROOM: usize = 4;

/// Every file the run will write, opened before anything is attached.
struct Outputs {
    svg: Output,
    folded: Option<Output>,
    report: Option<(Output, ReportFormat)>,
    wakers_svg: Option<Output>,
    wakers_folded: Option<Output>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ReportFormat {
    Markdown,
    Json,
}

fn open_outputs(args: &Args, target: &Target) -> Result<Outputs, PreflightError> {
    let svg_path = args
        .output
        .clone()
        .unwrap_or_else(|| preflight::default_output_name(target, args.mode.name()));
    let report = match &args.report {
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
    let wakers = args.wakers && args.mode.traces_switches();
    let with_wakers =
        |p: &Path, ext: &str| -> PathBuf { p.with_extension(format!("wakers.{ext}")) };
    Ok(Outputs {
        folded: args
            .folded
            .as_deref()
            .map(|p| preflight::open_output("the folded stacks", p))
            .transpose()?,
        wakers_svg: wakers
            .then(|| preflight::open_output("the wakeup graph", &with_wakers(&svg_path, "svg")))
            .transpose()?,
        wakers_folded: match (&args.folded, wakers) {
            (Some(p), true) => Some(preflight::open_output(
                "the wakeup chains",
                &with_wakers(p, "folded"),
            )?),
            _ => None,
        },
        svg: preflight::open_output("the flame graph", &svg_path)?,
        report,
    })
}

pub async fn run(args: Args) -> Result<()> {
    // Preflight: everything that can be refused is refused before anything is attached.
    preflight::check_privilege()?;
    preflight::check_btf()?;
    let target = preflight::resolve_target(args.pid)?;
    if let Some(tid) = target.given_tid {
        eprintln!(
            "profiler: {tid} is a thread of {} (PID {}); profiling the whole process",
            target.name, target.pid
        );
    }
    if args.wakers && !args.mode.traces_switches() {
        eprintln!("profiler: --wakers needs off-CPU tracing; ignored in --mode cpu");
    }
    let outputs = open_outputs(&args, &target)?;
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
    let mut tables = UnwindTables::default();
    let dwarf = args.unwind == Unwind::Dwarf;
    if dwarf {
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
    }

    // Load and attach. Signals are hooked first: a Ctrl-C from now on ends the capture.
    let mut waiter = Waiter::new(target.pid).context("cannot install signal handlers")?;
    let load_started = Instant::now();
    let mut probes = Probes::load(&ProbeConfig {
        target_pid: target.pid,
        offsets,
        mode: args.mode,
        period_ns: args.period_ns(),
        min_block_ns: args.min_block_ns(),
        max_block_ns: args.max_block_ns(),
        kernel_stacks: !args.no_kernel_stacks,
        waker_stacks: args.wakers,
        // Room for libraries loaded during the capture.
        dwarf_chunks: dwarf.then(|| (tables.chunks_needed() + UNWIND_CHUNKS_HEADROOM) as u32),
        max_stacks: args.max_stacks,
        max_keys: args.max_keys,
        max_threads: args.max_threads,
        verbose: args.verbose,
        irq_entry: std::fs::read_to_string("/proc/kallsyms")
            .map(|text| kernel::interrupt_entry_ranges(&text))
            .unwrap_or_default(),
    })?;
    let loaded = load_started.elapsed();
    if dwarf {
        probes.upload_unwind_tables(&mut tables, &maps)?;
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
        let mappings = dwarf.then(|| tables.proc_mappings(&maps));
        let with_tables = mappings.as_deref().map(|m| (&tables, m));
        snapshot::seed_threads(&mut probes, target.pid, start_ns, with_tables)?
    } else {
        Seeds::default()
    };
    log::info!(
        "load {:.3} s, attach {:.3} s, start snapshot {:.3} s",
        loaded.as_secs_f64(),
        (attached - loaded).as_secs_f64(),
        opened.elapsed().as_secs_f64()
    );

    let reason = waiter
        .wait(opened, args.secs, || {
            // New libraries (dlopen) and JIT regions become resolvable and unwindable as they
            // appear.
            let gone =
                maps.refresh().is_err() && !Path::new(&format!("/proc/{}", target.pid)).exists();
            if dwarf
                && !gone
                && tables.update(&maps)
                && let Err(e) = probes.upload_unwind_tables(&mut tables, &maps)
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
    let post_started = Instant::now();
    let mut drained = drain::drain(&probes, target.pid)?;
    drained.sched_at_start = sched_at_start;
    let _ = maps.refresh();
    if let Some(note) = reason.note() {
        eprintln!("profiler: {note}");
    }
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

    let profile = profile::account(
        drained,
        seeds,
        &AccountOptions {
            target_pid: target.pid,
            mode: args.mode,
            window: Window { start_ns, stop_ns },
            period_ns: args.period_ns(),
            min_block_ns: args.min_block_ns(),
            max_block_ns: args.max_block_ns(),
        },
    );
    let symbolizer = Symbolizer::new(maps, PerfMap::load(target.pid));
    let names = name_stacks(&profile, &symbolizer);
    // The programs stay loaded until their own frames have been named (and cut off).
    drop(probes);
    let fold_opts = FoldOptions {
        process: target.name.clone(),
        per_thread: args.per_thread,
    };
    let folded = fold::fold(&profile, &names, &fold_opts);

    let mode_words = match args.mode {
        Mode::Cpu => "on-CPU",
        Mode::Off => "off-CPU",
        Mode::Wall => "wall clock: on-CPU + off-CPU",
    };
    let title = format!("{} (PID {}) — {mode_words}", target.name, target.pid);
    let subtitle = summary::subtitle(&profile, &folded);
    let svg_path = outputs.svg.path.clone();
    write_folded(&folded, outputs.folded)?;
    write_svg(&folded, outputs.svg, title.clone(), subtitle, false)?;
    if outputs.wakers_svg.is_some() || outputs.wakers_folded.is_some() {
        let chains = fold::fold_wakers(&profile, &names, &fold_opts);
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
        profile: &profile,
        names: &names,
        target: &target.name,
        pid: target.pid,
        ended_early: reason.note(),
    });
    if let Some((Output { path, file }, format)) = outputs.report {
        let mut writer = std::io::BufWriter::new(file);
        match format {
            ReportFormat::Markdown => report::write_markdown(&report, &mut writer),
            ReportFormat::Json => report::write_json(&report, &mut writer),
        }
        .and_then(|()| writer.flush())
        .with_context(|| format!("cannot write the report to {}", path.display()))?;
        eprintln!("profiler: wrote the report to {}", path.display());
    }
    let post = post_started.elapsed();

    let mut out = std::io::stdout().lock();
    summary::write_summary(&mut out, &profile, &target.name, target.pid)?;
    report::write_text(&report, &mut out, args.mode)?;
    writeln!(out, "profiler: wrote flame graph to {}", svg_path.display())?;
    log::info!("post-processing took {:.3} s", post.as_secs_f64());
    if folded.lines.is_empty() {
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

fn write_folded(folded: &Folded, out: Option<Output>) -> Result<()> {
    let Some(Output { path, file }) = out else {
        return Ok(());
    };
    let mut writer = std::io::BufWriter::new(file);
    folded
        .write_to(&mut writer)
        .and_then(|()| writer.flush())
        .with_context(|| format!("cannot write the folded stacks to {}", path.display()))?;
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
    let Output { path, file } = out;
    let mut writer = std::io::BufWriter::new(file);
    svg::write_svg(
        folded,
        &svg::SvgOptions {
            title,
            subtitle,
            wakeup_palette,
        },
        &mut writer,
    )
    .and_then(|()| writer.flush())
    .with_context(|| format!("cannot write the flame graph to {}", path.display()))?;
    if wakeup_palette {
        eprintln!("profiler: wrote wakeup graph to {}", path.display());
    }
    Ok(())
}

/// Symbolizes every stack the profile refers to (samples, waits and wakers).
fn name_stacks(profile: &Profile, symbolizer: &Symbolizer) -> StackNames {
    use crate::profile::Kind;
    let mut user_ids = HashSet::new();
    // Kernel stacks by id, and whether a wait refers to it (see Symbolizer::kernel_stacks).
    let mut kernel_ids: HashMap<u64, bool> = HashMap::new();
    for e in &profile.entries {
        user_ids.insert(e.user_stack);
        *kernel_ids.entry(e.kernel_stack).or_default() |= matches!(e.kind, Kind::Off(_));
    }
    for w in &profile.wakers {
        user_ids.extend([w.user_stack, w.waker_user_stack]);
        kernel_ids.insert(w.kernel_stack, true);
        kernel_ids.entry(w.waker_kernel_stack).or_default();
    }
    let user = user_ids
        .iter()
        .filter_map(|id| profile.stacks.get(id).map(|s| (*id, s.as_slice())));
    let kernel = kernel_ids
        .iter()
        .filter_map(|(id, wait)| profile.stacks.get(id).map(|s| (*id, s.as_slice(), *wait)));
    StackNames {
        user: symbolizer.user_stacks(user),
        kernel: symbolizer.kernel_stacks(kernel),
    }
}
