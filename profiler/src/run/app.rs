//! One run, stage by stage: prepare (preflight, outputs, kernel facts, unwind tables) →
//! capture (load/attach, the window, drain) → post-process (account, symbolize) → render
//! (fold, SVG, report, saved capture, pprof: `outputs.rs`). Each stage lives in its own
//! module; this file only sequences them and hands each the model types the previous one
//! produced. `saved.rs` holds the commands on saved captures (replay, diff).

use std::{
    path::Path,
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
        golang,
        late::LateSamples,
        launch,
        machine::MachineSnapshot,
        snapshot,
        targets::{Selection, TargetSet},
    },
    run::{
        capture::{EndReason, Tick, TickKind, Waiter},
        cli::{Args, Cli, Command, Unwind},
        outputs::{self, Outputs},
        preflight::{self, Target},
        saved,
    },
};
use profiler_core::{
    account::AccountOptions,
    model::{CaptureMeta, Drained, Machine, Seeds, Window},
    post,
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
        Some(Command::Replay(r)) => saved::replay(&r).map(|()| None),
        Some(Command::Diff(d)) => saved::diff(&d).map(|()| None),
        None => record(&cli.record, cli.verbose).await,
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
    window_ended(reason, launched.as_ref());
    let (mut meta, opts) = post_inputs(args, &mut targets, selection, window, reason);
    meta.machine = machine;
    let out = args.out.clone();
    // Post-processing runs beside the signal handlers: a Ctrl-C now abandons it instead of
    // going unheard. The outputs are still temporary files; they are removed.
    let temp_paths = outputs.temp_paths();
    let work = tokio::task::spawn_blocking(move || -> Result<bool> {
        let saved = post::post_process(drained, seeds, &opts, meta, &mut targets);
        let empty = saved.profile.entries.is_empty();
        outputs::render(&saved, &out, outputs)?;
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

/// Says why the window ended early, if it did; a launched command gets the signal that
/// ended it.
fn window_ended(reason: EndReason, launched: Option<&launch::Launched>) {
    if let Some(note) = reason.note() {
        eprintln!("profiler: {note}");
    }
    if let Some(l) = launched {
        match reason {
            EndReason::Interrupted => l.signal(libc::SIGINT),
            EndReason::Terminated => l.signal(libc::SIGTERM),
            _ => {}
        }
    }
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
    /// Target processes that run Go (found before the programs load), and what the report
    /// says of each once their goroutine probes are attached.
    go: Vec<golang::GoTarget>,
    go_processes: Vec<profiler_core::model::GoProcess>,
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
    let outputs = outputs::open_outputs(&args.out, default_svg, args.save.as_deref(), args.mode)?;
    let started = std::time::Instant::now();
    let offsets = facts::task_offsets(Path::new(facts::VMLINUX_BTF))
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
    // Goroutine waits come from the scheduler's switches' mode only (`--mode off|wall`).
    let go = if !args.mode.traces_switches() || args.no_goroutines {
        Vec::new()
    } else if let Some(c) = &command {
        // Its process exists once launched; the program is what it will exec.
        let probe = golang::find_program(0, c.program.clone());
        probe.into_iter().collect()
    } else {
        golang::find(targets.processes.keys().copied())
    };
    Ok(Prepared {
        targets,
        command,
        launched: None,
        selection: words,
        outputs,
        offsets,
        go,
        go_processes: Vec::new(),
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
        for g in &mut prepared.go {
            g.pid = launched.pid();
        }
        prepared.launched = Some(launched);
    }
    prepared.targets.install(probes)?;
    probes.attach()?;
    prepared.go_processes = golang::attach(probes, &prepared.go);
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
        .watch_namespaces_of(prepared.targets.processes.keys().copied())
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
    drained.goroutines.processes = std::mem::take(&mut prepared.go_processes);
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
        resources: !args.no_resources,
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
        irq_entry: facts::interrupt_entries(args.out.wakers, &prepared.offsets),
        go: prepared.go.iter().any(|g| g.runtime.is_ok()),
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
