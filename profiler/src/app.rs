//! One run, stage by stage: preflight → load/attach → capture → drain → account → symbolize
//! → fold → render. Each stage lives in its own module; this file only sequences them.

use std::{collections::HashSet, io::Write as _, path::Path, time::Instant};

use anyhow::{Context as _, Result};

use crate::{
    capture::{EndReason, Waiter},
    cli::{Args, Mode},
    drain::{self, Window},
    fold::{self, FoldOptions, StackNames},
    kernel,
    preflight::{self, Output},
    probes::{ProbeConfig, Probes},
    profile::{self, AccountOptions, Profile, Seeds},
    render::{summary, svg},
    snapshot,
    symbolize::{Symbolizer, perfmap::PerfMap, procmap::ProcessMaps},
};

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
    let svg_path = args
        .output
        .clone()
        .unwrap_or_else(|| preflight::default_output_name(&target, args.mode.name()));
    let svg_out = preflight::open_output("the flame graph", &svg_path)?;
    let folded_out = args
        .folded
        .as_deref()
        .map(|p| preflight::open_output("the folded stacks", p))
        .transpose()?;
    let offsets = kernel::task_offsets(Path::new(preflight::VMLINUX_BTF))
        .context("cannot find the task_struct layout of this kernel")?;

    let mut maps = ProcessMaps::new(target.pid);
    maps.refresh()
        .map_err(|_| preflight::PreflightError::NoSuchProcess(target.pid))?;

    // Load and attach. Signals are hooked first: a Ctrl-C from now on ends the capture.
    let mut waiter = Waiter::new(target.pid).context("cannot install signal handlers")?;
    let mut probes = Probes::load(&ProbeConfig {
        target_pid: target.pid,
        offsets,
        mode: args.mode,
        period_ns: args.period_ns(),
        min_block_ns: args.min_block_ns(),
        max_block_ns: args.max_block_ns(),
        kernel_stacks: !args.no_kernel_stacks,
        max_stacks: args.max_stacks,
        max_keys: args.max_keys,
        max_threads: args.max_threads,
        verbose: args.verbose,
    })?;
    probes.attach()?;

    let start_ns = probes.start()?;
    let seeds = if args.mode.traces_switches() {
        snapshot::seed_blocked_threads(&mut probes, target.pid, start_ns)?
    } else {
        Seeds::default()
    };
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

    let reason = waiter.wait(args.secs, &probes, &mut maps, target.pid).await;
    let stop_ns = probes.stop(start_ns)?;
    let post_started = Instant::now();
    let drained = drain::drain(&probes, target.pid)?;
    drop(probes);
    let _ = maps.refresh();
    if let Some(note) = reason.note() {
        eprintln!("profiler: {note}");
    }

    let window = Window { start_ns, stop_ns };
    for (tid, t) in &drained.threads {
        log::debug!(
            "thread {tid}: on {} ns, last in {:?}, last out {:?}, {} switches (window {start_ns}..{stop_ns})",
            t.on_cpu_ns,
            t.last_in_ns.checked_sub(start_ns),
            t.last_out_ns.checked_sub(start_ns),
            t.switches,
        );
    }
    let profile = profile::account(
        drained,
        seeds,
        &AccountOptions {
            mode: args.mode,
            window,
            period_ns: args.period_ns(),
            max_block_ns: args.max_block_ns(),
        },
    );

    let symbolizer = Symbolizer::new(maps, PerfMap::load(target.pid));
    let names = name_stacks(&profile, &symbolizer);
    let folded = fold::fold(
        &profile,
        &names,
        &FoldOptions {
            process: target.name.clone(),
            per_thread: args.per_thread,
        },
    );

    if let Some(Output { path, mut file }) = folded_out {
        folded
            .write_to(&mut file)
            .and_then(|()| file.flush())
            .with_context(|| format!("cannot write the folded stacks to {}", path.display()))?;
        eprintln!("profiler: wrote folded stacks to {}", path.display());
    }
    let Output { path, file } = svg_out;
    let title = format!(
        "{} (PID {}) — {}",
        target.name,
        target.pid,
        match args.mode {
            Mode::Cpu => "on-CPU",
            Mode::Off => "off-CPU",
            Mode::Wall => "wall clock: on-CPU + off-CPU",
        }
    );
    let subtitle = summary::subtitle(&profile, &folded);
    let mut writer = std::io::BufWriter::new(file);
    svg::write_svg(&folded, &svg::SvgOptions { title, subtitle }, &mut writer)
        .and_then(|()| writer.flush())
        .with_context(|| format!("cannot write the flame graph to {}", path.display()))?;
    let post = post_started.elapsed();

    let mut out = std::io::stdout().lock();
    summary::write_summary(&mut out, &profile, &target.name, target.pid)?;
    writeln!(out, "profiler: wrote flame graph to {}", path.display())?;
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

/// Symbolizes every stack the profile refers to.
fn name_stacks(profile: &Profile, symbolizer: &Symbolizer) -> StackNames {
    let mut user_ids = HashSet::new();
    let mut kernel_ids = HashSet::new();
    for e in &profile.entries {
        user_ids.insert(e.user_stack);
        kernel_ids.insert(e.kernel_stack);
    }
    let pick = |ids: &HashSet<u64>| {
        ids.iter()
            .filter_map(|id| profile.stacks.get(id).map(|s| (*id, s.as_slice())))
            .collect::<Vec<_>>()
    };
    StackNames {
        user: symbolizer.user_stacks(pick(&user_ids)),
        kernel: symbolizer.kernel_stacks(pick(&kernel_ids)),
    }
}
