//! One run, stage by stage: prepare (preflight, outputs, kernel facts, unwind tables) →
//! capture (load/attach, the window, drain) → post-process (account, symbolize) → render
//! (fold, SVG, report, saved capture, pprof). Each stage lives in its own module; this file
//! only sequences them and hands each the model types the previous one produced.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Instant,
};

use anyhow::{Context as _, Result};

use crate::{
    kernel::{
        drain::{self, Drainer},
        facts::{self, TaskOffsets},
        priority,
        probes::{self, ProbeConfig, Probes},
        sizes,
        timeline::TimelineReader,
    },
    process::{
        late::LateSamples,
        launch,
        machine::MachineSnapshot,
        snapshot,
        targets::{Selection, TargetSet},
    },
    run::{
        capture::{EndReason, Tick, TickKind, Waiter},
        cli::{Args, Cli, Command, DiffArgs, OutputArgs, RangeArgs, ReplayArgs, Unwind},
        preflight::{self, Output, PreflightError, Target},
    },
};
use profiler_core::{
    account::AccountOptions,
    fold::Folded,
    model::{CaptureMeta, Drained, Machine, Mode, SavedCapture, Seeds, Window},
    post,
    render::{self, DiffOptions, RenderOptions, ReportFormat, ReportTexts, pprof},
    timeline,
    unwind::tables::UnwindTables,
};

/// Row chunks (65,536 rows, 768 KiB each) kept free for files mapped during the capture
/// and a JVM's compiled code (a file no process maps any more gives its rows up first).
const UNWIND_CHUNKS_HEADROOM: usize = 2;
/// The same for a launched command: its programs (a build's compilers: cc1 alone needs
/// about 5 chunks) are not known when the array is sized.
const UNWIND_CHUNKS_HEADROOM_COMMAND: usize = 12;

/// Runs one command; returns the exit status the profiler should exit with (a launched
/// command's), if any.
pub async fn run(cli: Cli) -> Result<Option<i32>> {
    match cli.command {
        Some(Command::Replay(r)) => replay(&r).map(|()| None),
        Some(Command::Diff(d)) => diff(&d).map(|()| None),
        None => record(&cli.record, cli.verbose).await,
    }
}

/// `profiler replay CAPTURE`: the render stage alone, from a saved capture.
fn replay(r: &ReplayArgs) -> Result<()> {
    let saved = in_range(SavedCapture::load(&r.capture)?, &r.range, &r.capture)?;
    let default_svg = default_svg_name(&saved.meta, saved.profile.mode);
    let outputs = open_outputs(&r.out, default_svg, None, saved.profile.mode)?;
    render(&saved, &r.out, outputs)
}

/// `profiler diff BEFORE AFTER`: two saved captures compared per second of capture; the
/// differential graph drawn on each, and what moved most.
fn diff(d: &DiffArgs) -> Result<()> {
    let before = in_range(SavedCapture::load(&d.before)?, &d.range, &d.before)?;
    let after = in_range(SavedCapture::load(&d.after)?, &d.range, &d.after)?;
    let top = usize::try_from(d.top).unwrap_or(usize::MAX);
    let rendered =
        render::render_diff(&before, &after, &DiffOptions { top }).with_context(|| {
            format!(
                "cannot compare {} with {}",
                d.before.display(),
                d.after.display()
            )
        })?;
    let svg_path = d
        .output
        .clone()
        .unwrap_or_else(|| default_diff_name(&after.meta.target, rendered.diff.mode));
    let before_svg_path = svg_path.with_extension("before.svg");
    let report_out = match &d.report {
        None => None,
        Some(path) => {
            let format = report_format(path)?;
            Some((preflight::open_output("the report", path)?, format))
        }
    };
    let folded_out = d
        .folded
        .as_deref()
        .map(|p| preflight::open_output("the folded stacks", p))
        .transpose()?;
    let after_svg = preflight::open_output("the flame graph", &svg_path)?;
    let before_svg = preflight::open_output("the flame graph", &before_svg_path)?;

    write_text(after_svg, "the flame graph", &rendered.after_svg)?;
    write_text(before_svg, "the flame graph", &rendered.before_svg)?;
    if let Some(out) = folded_out {
        let path = write_text(out, "the folded stacks", &rendered.folded_text())?;
        eprintln!(
            "profiler: wrote folded stacks (before after, µs/s) to {}",
            path.display()
        );
    }
    if let Some((output, format)) = report_out {
        write_report(output, rendered.report(format))?;
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(rendered.terminal()?.as_bytes())?;
    writeln!(
        stdout,
        "profiler: wrote the differential flame graphs to {} (drawn on after) and {} (drawn on before)",
        svg_path.display(),
        before_svg_path.display()
    )?;
    Ok(())
}

/// The capture cut to `--from`/`--to` when either is given.
fn in_range(saved: SavedCapture, range: &RangeArgs, path: &Path) -> Result<SavedCapture> {
    let Some((from, to)) = range.range() else {
        return Ok(saved);
    };
    timeline::range::slice(&saved, from, to)
        .with_context(|| format!("cannot cut {} to {from}–{to} s", path.display()))
}

/// `diff-nginx-wall.svg`: the after capture's target, in characters any file system takes.
fn default_diff_name(target: &str, mode: Mode) -> PathBuf {
    let name = preflight::file_name_safe(target);
    PathBuf::from(format!("diff-{name}-{}.svg", mode.name()))
}

/// The report's format, from its path's extension. A device, a FIFO or `/dev/stdout` has none
/// to go by: it gets Markdown, the format meant to be read.
fn report_format(path: &Path) -> Result<ReportFormat, PreflightError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("md") => Ok(ReportFormat::Markdown),
        Some("json") => Ok(ReportFormat::Json),
        Some("html" | "htm") => Ok(ReportFormat::Html),
        None if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) => {
            Ok(ReportFormat::Markdown)
        }
        _ => Err(PreflightError::ReportExtension(path.to_path_buf())),
    }
}

async fn record(args: &Args, verbose: u8) -> Result<Option<i32>> {
    // Until the window opens (`open_window`): see priority.rs.
    priority::boost();
    let mut prepared = prepare(args)?;
    let mut waiter = Waiter::new().context("cannot install signal handlers")?;
    let captured = capture(args, verbose, &mut prepared, &mut waiter).await;
    // Whatever happened, a launched command is let go (or told to exit) and waited for.
    let captured = match captured {
        Ok(c) => c,
        Err(e) => {
            if let Some(l) = prepared.launched.as_mut() {
                let _ = l.wait();
            }
            return Err(e);
        }
    };
    let post_started = Instant::now();
    let Prepared {
        mut targets,
        outputs,
        launched,
        selection,
        ..
    } = prepared;
    let Captured {
        drained,
        seeds,
        window,
        reason,
        probes,
        machine,
    } = captured;
    if let Some(note) = reason.note() {
        eprintln!("profiler: {note}");
    }
    if let Some(l) = &launched {
        match reason {
            EndReason::Interrupted => l.signal(libc::SIGINT),
            EndReason::Terminated => l.signal(libc::SIGTERM),
            _ => {}
        }
    }
    let (mut meta, opts) = post_inputs(args, &mut targets, selection, window, reason);
    meta.machine = machine;
    let out = args.out.clone();
    // Post-processing runs beside the signal handlers: a Ctrl-C now abandons it instead of
    // going unheard. The outputs are still temporary files; they are removed.
    let temp_paths = outputs.temp_paths();
    let work = tokio::task::spawn_blocking(move || -> Result<bool> {
        let saved = post::post_process(drained, seeds, &opts, meta, &mut targets);
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
            "profiler: nothing was recorded{}",
            if reason == EndReason::TargetExited {
                " before the target exited"
            } else {
                ""
            }
        );
    }
    finish_command(launched, reason)
}

/// What post-processing needs besides the drained maps: the capture's description and the
/// accounting rules.
fn post_inputs(
    args: &Args,
    targets: &mut TargetSet,
    selection: String,
    window: Window,
    reason: EndReason,
) -> (CaptureMeta, AccountOptions) {
    targets.finish();
    let first = targets
        .first()
        .map(|t| (t.name.clone(), t.pid))
        .unwrap_or_default();
    let meta = CaptureMeta {
        target: first.0.clone(),
        pid: first.1,
        selection,
        kernel: facts::release(),
        ended_early: reason.note().map(str::to_string),
        started_unix_ns: unix_time_of(window.start_ns),
        notes: targets.jit_notes(),
        machine: None,
        range: None,
    };
    let opts = AccountOptions {
        processes: targets
            .processes
            .iter()
            .map(|(&p, t)| (p, t.info()))
            .collect(),
        pid_of: threads_of(targets.processes.keys().copied()),
        mode: args.mode,
        window,
        period_ns: args.period_ns(),
        min_block_ns: args.min_block_ns(),
        max_block_ns: args.max_block_ns(),
        wakers: !args.no_wakers,
    };
    (meta, opts)
}

/// A launched command's exit status, once it has exited.
fn finish_command(launched: Option<launch::Launched>, reason: EndReason) -> Result<Option<i32>> {
    match launched {
        Some(mut l) => {
            if reason != EndReason::TargetExited {
                eprintln!("profiler: waiting for the command to exit");
            }
            Ok(Some(l.wait().context("cannot wait for the command")?))
        }
        None => Ok(None),
    }
}

/// Threads of live processes, from /proc: the process of a thread the kernel side did not
/// name.
fn threads_of(pids: impl Iterator<Item = u32>) -> std::collections::HashMap<u32, u32> {
    let mut pid_of = std::collections::HashMap::new();
    for pid in pids {
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for t in tasks.flatten() {
                if let Some(tid) = t.file_name().to_str().and_then(|s| s.parse().ok()) {
                    pid_of.insert(tid, pid);
                }
            }
        }
    }
    pid_of
}

/// What the prepare stage hands the capture.
struct Prepared {
    targets: TargetSet,
    /// A command to launch (`-- CMD`), found but not started.
    command: Option<launch::Command>,
    launched: Option<launch::Launched>,
    /// What the capture covers, in words.
    selection: String,
    outputs: Outputs,
    offsets: TaskOffsets,
}

/// Everything that can be refused is refused here, before anything is attached.
fn prepare(args: &Args) -> Result<Prepared> {
    if !Probes::built() {
        return Err(probes::ProbeError::NotBuilt.into());
    }
    preflight::check_privilege()?;
    preflight::check_btf()?;
    if args.out.wakers && !args.mode.traces_switches() {
        eprintln!("profiler: --wakers needs off-CPU tracing; ignored in --mode cpu");
    }
    let command = (!args.command.is_empty())
        .then(|| launch::resolve(&args.command))
        .transpose()?;
    let selection = Selection {
        pids: args.pid.clone(),
        cgroup: args.cgroup.clone(),
        follow_children: !args.no_children,
    };
    // A command's process exists only once launched, after the programs are attached.
    let mut targets = if command.is_some() {
        TargetSet::empty()
    } else {
        TargetSet::resolve(&selection)?
    };
    say_threads_given(&args.pid, &targets);
    let words = describe_selection(args, &targets, command.as_ref());
    let default_svg = preflight::default_output_name(
        &default_target(command.as_ref(), &targets),
        args.mode.name(),
    );
    let outputs = open_outputs(&args.out, default_svg, args.save.as_deref(), args.mode)?;
    let started = std::time::Instant::now();
    let offsets = facts::task_offsets(Path::new(preflight::VMLINUX_BTF))
        .context("cannot find the task_struct layout of this kernel")?;
    log::debug!(
        "task_struct layout read in {:.3} s",
        started.elapsed().as_secs_f64()
    );
    // Unwind tables for every executable file the targets map, before the programs load:
    // their size decides the size of the kernel's row array.
    if args.unwind == Unwind::Dwarf {
        build_unwind_tables(&mut targets);
    }
    Ok(Prepared {
        targets,
        command,
        launched: None,
        selection: words,
        outputs,
        offsets,
    })
}

/// Says which PIDs given are threads of a process, which is profiled whole.
fn say_threads_given(pids: &[u32], targets: &TargetSet) {
    for &pid in pids {
        if !targets.processes.contains_key(&pid)
            && let Some(t) = targets
                .processes
                .values()
                .find(|t| preflight::resolve_target(pid).is_ok_and(|r| r.pid == t.pid))
        {
            eprintln!(
                "profiler: {pid} is a thread of {} (PID {}); profiling the whole process",
                t.name, t.pid
            );
        }
    }
}

/// The target the default output is named after: the command's program, else the first
/// process.
fn default_target(command: Option<&launch::Command>, targets: &TargetSet) -> Target {
    let (name, pid) = match (command, targets.first()) {
        (Some(c), _) => (
            c.program
                .file_name()
                .map_or_else(|| c.shown.clone(), |n| n.to_string_lossy().into_owned()),
            0,
        ),
        (None, Some(t)) => (t.name.clone(), t.pid),
        (None, None) => (String::from("profile"), 0),
    };
    Target {
        pid,
        name,
        given_tid: None,
    }
}

/// Unwind rows for every executable file the targets map, logged.
fn build_unwind_tables(targets: &mut TargetSet) {
    targets.use_tables(UnwindTables::default());
    if let Some(tables) = targets.uploads.tables() {
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
}

/// `nginx (PID 100) and its descendants`, `3 processes of cgroup …`, `command: …`.
fn describe_selection(
    args: &Args,
    targets: &TargetSet,
    command: Option<&launch::Command>,
) -> String {
    if let Some(c) = command {
        return format!("command `{}` and its descendants", c.shown);
    }
    let mut parts = Vec::new();
    if !args.pid.is_empty() {
        let listed: Vec<String> = args
            .pid
            .iter()
            .filter_map(|p| {
                let pid = preflight::resolve_target(*p).ok()?.pid;
                let t = targets.processes.get(&pid)?;
                Some(format!("{} (PID {pid})", t.name))
            })
            .collect();
        parts.push(listed.join(", "));
    }
    if let Some(dir) = &args.cgroup {
        parts.push(format!("cgroup {}", dir.display()));
    }
    let mut words = parts.join(" and ");
    if !args.no_children && !args.pid.is_empty() {
        words.push_str(" with descendants");
    }
    words
}

/// What the capture stage hands post-processing. The programs are still loaded.
struct Captured {
    drained: Drained,
    seeds: Seeds,
    window: Window,
    reason: EndReason,
    probes: Probes,
    /// The machine over the window, when /proc could be read.
    machine: Option<Machine>,
}

/// Load and attach, open the window, wait it out (keeping the target set current), close it
/// and drain the maps.
async fn capture(
    args: &Args,
    verbose: u8,
    prepared: &mut Prepared,
    waiter: &mut Waiter,
) -> Result<Captured> {
    let load_started = Instant::now();
    let config = probe_config(args, verbose, prepared);
    let mut probes = Probes::load(&config)?;
    let (kernel_memory, maps) = probes.map_memory().read();
    log::info!(
        "kernel memory at load: {:.1} MiB in {maps} maps",
        kernel_memory as f64 / (1024.0 * 1024.0)
    );
    prepared.targets.uploads.set_capacity(config.dwarf_chunks);
    let loaded = load_started.elapsed();
    attach(&mut probes, prepared, waiter)?;
    let attached = load_started.elapsed();

    let open = open_window(args, &mut probes, prepared)?;
    let start_ns = open.start_ns;
    let seeds = if args.mode.traces_switches() {
        snapshot::seed_threads(&mut probes, &mut prepared.targets, start_ns)?
    } else {
        Seeds::default()
    };
    log::info!(
        "load {:.3} s, attach {:.3} s, start snapshot {:.3} s; CPU before the window: {}",
        loaded.as_secs_f64(),
        (attached - loaded).as_secs_f64(),
        open.at.elapsed().as_secs_f64(),
        cpu_used_so_far()
    );
    let (reason, stop_ns, mut drained, probes, machine) =
        wait_out(args, &config, probes, open, prepared, waiter).await?;
    // The most the maps held: at load, or at a drain (the tables of large entries grow).
    let peak = drained
        .counters
        .get(profiler_common::Counter::KernelMemoryBytes)
        .max(kernel_memory);
    drained
        .counters
        .set(profiler_common::Counter::KernelMemoryBytes, peak);
    Ok(Captured {
        drained,
        seeds,
        window: Window { start_ns, stop_ns },
        reason,
        probes,
        machine,
    })
}

/// The target set's tables into the loaded programs, which are then attached; a command
/// started first, held before its exec, so that it is in the target set before its first
/// instruction.
fn attach(probes: &mut Probes, prepared: &mut Prepared, waiter: &mut Waiter) -> Result<()> {
    // Before a command starts: its exec's mappings are among the records.
    prepared.targets.open_mapping_records();
    if let Some(command) = &prepared.command {
        let launched = command
            .spawn_held()
            .with_context(|| format!("cannot start {}", command.shown))?;
        prepared.targets.add_launched(launched.pid());
        waiter.watch(launched.pid());
        prepared.launched = Some(launched);
    }
    prepared.targets.install(probes)?;
    probes.attach()?;
    prepared.targets.catch_up(probes);
    Ok(())
}

/// The capture window, open.
struct OpenWindow {
    switch: probes::WindowSwitch,
    start_ns: u64,
    /// When it opened.
    at: Instant,
    /// The scheduler's own counts of the targets' threads when it opened.
    sched_at_start: std::collections::HashMap<u32, profiler_core::model::SchedStat>,
    /// The machine's CPU counters when it opened.
    machine_at_start: Option<MachineSnapshot>,
}

/// Opens the window, says so, and lets a launched command exec.
fn open_window(args: &Args, probes: &mut Probes, prepared: &mut Prepared) -> Result<OpenWindow> {
    // The window opens now and lasts exactly `--secs`: the line below says so the moment it
    // opens (whoever compares our figures with the kernel's reads them from here).
    let mut switch = probes.window_switch()?;
    let start_ns = switch.open()?;
    let at = Instant::now();
    priority::end_boost();
    announce(args, &prepared.selection, probes.attached_cpus());
    if let Some(l) = prepared.launched.as_mut() {
        l.release().context("cannot start the command")?;
    }
    let pids: Vec<u32> = prepared.targets.processes.keys().copied().collect();
    Ok(OpenWindow {
        switch,
        start_ns,
        at,
        sched_at_start: drain::sched_stats(&pids),
        machine_at_start: MachineSnapshot::read(),
    })
}

/// Waits the open window out, closes it and drains the maps: why it ended, its end, what
/// was drained, and the programs (still loaded).
async fn wait_out(
    args: &Args,
    config: &ProbeConfig,
    mut probes: Probes,
    open: OpenWindow,
    prepared: &mut Prepared,
    waiter: &mut Waiter,
) -> Result<(EndReason, u64, Drained, Probes, Option<Machine>)> {
    // From here on the aggregate tables belong to the drainer, which empties them while the
    // window is open so that they hold a drain interval's records, not the whole capture's.
    let window = Arc::new(Mutex::new(open.switch));
    let timeline = config
        .timeline_min_ns
        .map(|ns| TimelineReader::new(&mut probes, ns, args.timeline_max_records))
        .transpose()?;
    let (new_stacks, named_at_ticks) = std::sync::mpsc::channel();
    prepared.targets.new_stacks = Some(named_at_ticks);
    let draining = Drainer::new(&mut probes, Arc::clone(&window), timeline)?
        .send_new_stacks(new_stacks)
        .start();
    if config.dwarf_chunks.is_some() {
        match LateSamples::new(&mut probes) {
            Ok(late) => prepared.targets.late = Some(late),
            Err(e) => log::warn!("samples of processes just exec'd stay partial: {e}"),
        }
    }
    let state = (
        probes,
        std::mem::replace(&mut prepared.targets, TargetSet::empty()),
    );
    let wake = state.1.mapping_records_ready();
    let (reason, stop_ns, (probes, targets)) = waiter
        .wait(open.at, args.secs(), state, wake, tick, || {
            window
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .close()
        })
        .await;
    prepared.targets = targets;
    let stop_ns = stop_ns?;
    let machine = open.machine_at_start.as_ref().and_then(|start| {
        let pids = prepared.targets.processes.keys().copied().collect();
        Some(start.until(&MachineSnapshot::read()?, &pids))
    });
    let mut drained = drain_all(
        &probes,
        draining.stop(),
        &prepared.targets,
        open.sched_at_start,
    )?;
    if let Some(((samples, stacks), without_table)) = prepared.targets.finish_late() {
        log::info!(
            "{} samples of processes just exec'd unwound in user space ({without_table} without a table for their pc)",
            drained.counters.get(profiler_common::Counter::LateSamples)
        );
        drained.samples.extend(samples);
        for (id, frames) in stacks {
            drained.stacks.entry(id).or_insert(frames);
        }
    }
    Ok((reason, stop_ns, drained, probes, machine))
}

/// One tick of the capture: the target set kept current (processes, mappings, JIT code),
/// progress read; or only the kernel's mapping records applied.
fn tick(state: &mut (Probes, TargetSet), kind: TickKind) -> Tick {
    let (probes, targets) = state;
    if kind == TickKind::Mappings {
        targets.follow_mappings(probes);
        return Tick::default();
    }
    let tick = targets.tick(probes);
    for (pid, name) in &tick.ended {
        eprintln!("profiler: {name} (PID {pid}) exited");
    }
    let counters = probes.counters().unwrap_or_default();
    Tick {
        samples: counters.get(profiler_common::Counter::Samples),
        switches: counters.get(profiler_common::Counter::SwitchesOut),
        target_gone: tick.all_gone,
    }
}

/// Sizes, offsets and switches the programs are loaded with.
fn probe_config(args: &Args, verbose: u8, prepared: &Prepared) -> ProbeConfig {
    ProbeConfig {
        target_words: facts::pid_max().div_ceil(64),
        follow_children: !args.no_children,
        sizes: sizes::at_start(
            &args.size_options(),
            &prepared
                .targets
                .processes
                .keys()
                .copied()
                .collect::<Vec<_>>(),
        ),
        offsets: prepared.offsets,
        mode: args.mode,
        period_ns: args.period_ns(),
        min_block_ns: args.min_block_ns(),
        max_block_ns: args.max_block_ns(),
        kernel_stacks: !args.no_kernel_stacks,
        waker_stacks: args.out.wakers,
        wakers: !args.no_wakers,
        dwarf_chunks: prepared
            .targets
            .uploads
            .tables()
            .map(|t| unwind_chunks(args, t)),
        verify_memos: args.verify_memos,
        timeline_min_ns: args
            .timeline()
            .then(|| args.timeline_resolution_us.saturating_mul(1_000)),
        verbose,
        // Only waker kernel stacks stop at an interrupt entry: with `--wakers`, or where the
        // preempt count cannot tell an interrupt. Reading /proc/kallsyms costs ~0.1 s of CPU.
        irq_entry: if args.out.wakers || prepared.offsets.preempt_count.is_none() {
            std::fs::read_to_string("/proc/kallsyms")
                .map(|text| facts::interrupt_entry_ranges(&text))
                .unwrap_or_default()
        } else {
            Default::default()
        },
    }
}

/// The kernel's row array: as asked, else what the files need now and room for files mapped
/// during the capture.
fn unwind_chunks(args: &Args, tables: &UnwindTables) -> u32 {
    let headroom = if args.command.is_empty() {
        UNWIND_CHUNKS_HEADROOM
    } else {
        UNWIND_CHUNKS_HEADROOM_COMMAND
    };
    args.unwind_chunks
        .unwrap_or((tables.chunks_needed() + headroom) as u32)
        .max(tables.chunks_needed() as u32)
}

/// The line that says the window is open, the moment it opens.
fn announce(args: &Args, selection: &str, cpus: usize) {
    let secs = args.secs();
    eprintln!(
        "profiler: capturing {}{} in {} mode{}",
        selection,
        if args.command.is_empty() || args.secs.is_some() {
            format!(" for {secs} s")
        } else {
            String::new()
        },
        args.mode.name(),
        if args.mode.samples_on_cpu() {
            format!(" at {} Hz on {} CPUs", args.freq, cpus)
        } else {
            String::new()
        }
    );
}

/// The last drain once the window is closed, added to what was drained during it.
fn drain_all(
    probes: &Probes,
    drainer: Drainer,
    targets: &TargetSet,
    sched_at_start: std::collections::HashMap<u32, profiler_core::model::SchedStat>,
) -> Result<Drained> {
    let pids: Vec<u32> = targets.processes.keys().copied().collect();
    let (mut drained, stats) = drainer.finish(probes, &pids)?;
    drained
        .counters
        .set(profiler_common::Counter::Drains, stats.drains);
    drained.counters.set(
        profiler_common::Counter::KernelMemoryBytes,
        stats.peak_kernel_memory,
    );
    // Losses of user space's own, beside the kernel's.
    drained.counters.set(
        profiler_common::Counter::MappingRecordsLost,
        targets.mapping_records_lost,
    );
    if targets.uploads.held_back > 0 {
        log::info!(
            "{} mapping tables held back: their process exec'd before they reached the kernel",
            targets.uploads.held_back
        );
    }
    if let Some(tables) = targets.uploads.tables() {
        drained.counters.set(
            profiler_common::Counter::UnwindRowsNotLoaded,
            tables.not_loaded.len() as u64,
        );
        for (file, rows) in &tables.not_loaded {
            log::info!("unwind rows of {file} not loaded ({rows} rows): the row array is full");
        }
    }
    log::info!(
        "drained {} times during the capture ({:.3} s in all, {:.3} s of CPU); most keys at one drain: {} waits, {} samples, {} wakers, {} stacks, {} threads",
        stats.drains,
        stats.secs,
        stats.cpu_secs,
        stats.peak_waits,
        stats.peak_samples,
        stats.peak_wakers,
        stats.peak_stacks,
        stats.peak_threads
    );
    log::info!(
        "kernel memory: at most {:.1} MiB at a drain",
        stats.peak_kernel_memory as f64 / (1024.0 * 1024.0)
    );
    if let Some(shortest) = stats.shortest_interval {
        log::info!(
            "a table came to be more than half full: the drains came as often as every {} ms",
            shortest.as_millis()
        );
    }
    drained.sched_at_start = sched_at_start;
    for counter in profiler_common::Counter::ALL {
        log::debug!("counter {counter:?}: {}", drained.counters.get(counter));
    }
    log::debug!(
        "drained {} sample keys, {} wait keys, {} waker keys, {} stacks, {} threads, {} processes",
        drained.samples.len(),
        drained.waits.len(),
        drained.wakers.len(),
        drained.stacks.len(),
        drained.threads.len(),
        pids.len()
    );
    Ok(drained)
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

/// Every file the run writes, opened before anything is attached.
struct Outputs {
    svg: Output,
    folded: Option<Output>,
    report: Option<(Output, ReportFormat)>,
    wakers_svg: Option<Output>,
    wakers_folded: Option<Output>,
    saved: Option<Output>,
    pprof: Option<Output>,
    timeline: Option<Output>,
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
        all.extend(self.timeline.iter());
        all.iter()
            .filter_map(|o| o.temp_path())
            .map(Path::to_path_buf)
            .collect()
    }
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
            let format = report_format(path)?;
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
        timeline: out
            .timeline
            .as_deref()
            .map(|p| preflight::open_output("the timeline", p))
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

/// Render the capture (profiler-core: analyse, fold, draw, report), then write every output
/// and print the summary.
fn render(saved: &SavedCapture, out: &OutputArgs, outputs: Outputs) -> Result<()> {
    if outputs.timeline.is_some() && saved.timeline.is_none() {
        anyhow::bail!(
            "this capture has no timeline for --timeline (saved before timelines were \
             recorded, or with --no-timeline)"
        );
    }
    let wakers = outputs.wakers_svg.is_some() || outputs.wakers_folded.is_some();
    if wakers && saved.profile.mode.traces_switches() && !saved.profile.wakers_recorded {
        anyhow::bail!("this capture has no wakers for --wakers (recorded with --no-wakers)");
    }
    let opts = RenderOptions {
        per_process: out.per_process,
        per_thread: out.per_thread,
        hide_idle: out.hide_idle,
        show_idle: out.show_idle,
        wakers,
        trace: outputs.timeline.is_some(),
        timeline_html: matches!(outputs.report, Some((_, ReportFormat::Html))),
    };
    let rendered = render::render(saved, &opts).context("cannot draw the flame graph")?;
    let svg_path = outputs.svg.path.clone();
    write_folded(&rendered.folded, outputs.folded)?;
    write_text(outputs.svg, "the flame graph", &rendered.svg)?;
    if let Some(wakers) = &rendered.wakers {
        write_folded(&wakers.folded, outputs.wakers_folded)?;
        if let Some(out) = outputs.wakers_svg {
            let path = write_text(out, "the wakeup graph", &wakers.svg)?;
            eprintln!("profiler: wrote wakeup graph to {}", path.display());
        }
    }
    if let Some((output, format)) = outputs.report {
        write_report(output, rendered.report(format))?;
    }
    if let Some(output) = outputs.saved {
        let path = write_output(output, "the saved capture", |w| saved.write_to(w))?;
        eprintln!("profiler: saved the capture to {}", path.display());
    }
    if let (Some(output), Some(trace)) = (outputs.timeline, &rendered.trace) {
        let path = write_output(output, "the timeline", |w| w.write_all(trace))?;
        eprintln!(
            "profiler: wrote the timeline (a Perfetto trace) to {}",
            path.display()
        );
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
    stdout.write_all(rendered.terminal()?.as_bytes())?;
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

/// Writes the report the render stage made, and says where.
fn write_report(output: Output, text: std::io::Result<String>) -> Result<()> {
    let text = text.context("cannot write the report")?;
    let path = write_text(output, "the report", &text)?;
    eprintln!("profiler: wrote the report to {}", path.display());
    Ok(())
}

/// Writes text the render stage made.
fn write_text(out: Output, what: &str, text: &str) -> Result<PathBuf> {
    write_output(out, what, |w| w.write_all(text.as_bytes()))
}
