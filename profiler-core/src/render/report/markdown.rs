//! The report as Markdown (`--report x.md`), ready to paste: the verdict, the capture,
//! processes, threads, groups, idle threads, notes, blocking sites with their stacks and
//! wakers, on-CPU functions, the run queue.

use std::io::{self, Write};

use super::{
    model::{Report, StateShares, ThreadTableRow},
    words::{idle_text, latency_cells, paths, wakers_text},
};

/// Markdown, ready to paste.
pub fn write_markdown(r: &Report, out: &mut impl Write) -> io::Result<()> {
    md_capture(r, out)?;
    md_processes(r, out)?;
    md_threads(r, out)?;
    md_groups(r, out)?;
    md_idle_and_notes(r, out)?;
    md_sites(r, out)?;
    md_chains(r, out)?;
    md_goroutines(r, out)?;
    md_functions(r, out)?;
    md_run_queue(r, out)?;
    writeln!(out, "\n_Percentiles: {}._", r.percentile_method)?;
    Ok(())
}

/// The title, the verdict and the capture table.
fn md_capture(r: &Report, out: &mut impl Write) -> io::Result<()> {
    let c = &r.capture;
    writeln!(out, "# Profile of {}\n", c.selection)?;
    writeln!(out, "**{}**\n", r.verdict)?;
    writeln!(out, "## Capture\n")?;
    writeln!(out, "| | |\n|---|---|")?;
    writeln!(
        out,
        "| target | {}, {} process{}, {} threads |",
        c.selection,
        c.processes,
        if c.processes == 1 { "" } else { "es" },
        c.threads
    )?;
    writeln!(out, "| mode | {} |", c.mode)?;
    writeln!(
        out,
        "| duration | {:.2} s{} |",
        c.duration_s,
        c.ended_early
            .as_ref()
            .map_or(String::new(), |e| format!(" ({e})"))
    )?;
    if let Some(hz) = c.frequency_hz {
        writeln!(out, "| sampling | {hz} Hz, {} samples |", c.samples)?;
    }
    writeln!(out, "| kernel | {} |", c.kernel)?;
    if let Some(mib) = c.kernel_memory_mib() {
        writeln!(out, "| kernel memory | {mib:.1} MiB of BPF maps |")?;
    }
    if let Some(m) = &r.machine {
        writeln!(out, "| machine | {} |", super::words::machine_text(m))?;
    }
    writeln!(
        out,
        "| waits | {} finished, {} still open at the end, {} blocked since before the start |",
        c.waits,
        c.open_waits_at_end,
        crate::render::count(c.blocked_at_start, "thread")
    )?;
    let lost: Vec<String> = c
        .lost
        .iter()
        .map(|l| match l.raise_with {
            Some(flag) => format!("{} {} (raise {flag})", l.count, l.what),
            None => format!("{} {}", l.count, l.what),
        })
        .collect();
    writeln!(
        out,
        "| lost | {}{} |\n",
        c.lost_total,
        if lost.is_empty() {
            String::new()
        } else {
            format!(": {}", lost.join("; "))
        }
    )?;

    Ok(())
}

/// One row per process, when there are several.
fn md_processes(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if r.processes.len() > 1 {
        writeln!(
            out,
            "## Processes (% of all their threads' time; CPUs = CPU time ÷ capture length)\n"
        )?;
        writeln!(
            out,
            "| process | threads | CPUs | running | runnable | sleep | io | other | profiler | lifetime |"
        )?;
        writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")?;
        for p in &r.processes {
            let life = match (p.forked_at_s, p.exited_at_s) {
                (None, None) => "whole capture".to_string(),
                (Some(f), None) => format!("forked at {f:.2} s"),
                (None, Some(e)) => format!("exited at {e:.2} s"),
                (Some(f), Some(e)) => format!("{f:.2} s – {e:.2} s"),
            };
            let [running, runnable, sleep, io, other, profiler] = p.shares.columns();
            writeln!(
                out,
                "| {}-{} | {} | {:.2} | {running:.1} % | {runnable:.1} % | {sleep:.1} % | {io:.1} % | {other:.1} % | {profiler:.1} % | {life}{} |",
                p.name,
                p.pid,
                p.threads,
                p.cpus,
                if p.execs > 0 {
                    format!(", {} exec", p.execs)
                } else {
                    String::new()
                }
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// One row per thread: time per state.
fn md_threads(r: &Report, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "## Where each thread's time went (% of the capture)\n")?;
    writeln!(
        out,
        "| thread | running | runnable | sleep | io | other | profiler | run-queue waits: mean / max |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---|")?;
    for row in &r.thread_table {
        match *row {
            ThreadTableRow::Thread(i) => {
                let t = &r.threads[i];
                let rq = t.run_queue_delay.as_ref().map_or("-".into(), |l| {
                    format!("{} × {:.3} / {:.2} ms", l.count, l.mean_ms, l.max_ms)
                });
                md_thread_row(&format!("{}-{}", t.name, t.tid), &t.shares, &rq, out)?;
            }
            ThreadTableRow::ShortLived(i) => {
                let g = &r.short_lived[i];
                md_thread_row(&format!("{}: {}", g.group, g.lives()), &g.shares, "-", out)?;
            }
        }
    }
    writeln!(
        out,
        "\nRunning is CPU time as the scheduler charges it (the thread's schedstat), the \
         profiler's own programs left out (column *profiler*)."
    )?;
    Ok(())
}

fn md_thread_row(
    name: &str,
    shares: &StateShares,
    run_queue: &str,
    out: &mut impl Write,
) -> io::Result<()> {
    let [running, runnable, sleep, io, other, profiler] = shares.columns();
    writeln!(
        out,
        "| {name} | {running:.1} % | {runnable:.1} % | {sleep:.1} % | {io:.1} % | {other:.1} % | {profiler:.1} % | {run_queue} |",
    )
}

/// Pools of threads named alike.
fn md_groups(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if !r.groups.is_empty() {
        writeln!(out, "\n## Groups\n")?;
        writeln!(
            out,
            "Threads named alike once digits are stripped, in processes of the same name; % of \
             the time of the group's active threads (of all of them when all are idle), busiest \
             first.\n"
        )?;
        // Without wakers (`--no-wakers`) the column would be all dashes: a note says why.
        let wakers = r.capture.wakers_recorded;
        writeln!(
            out,
            "| group | threads | idle | running | runnable | sleep | io | other | dominant wait | share | p99 |{}",
            if wakers { " woken by |" } else { "" }
        )?;
        writeln!(
            out,
            "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|{}",
            if wakers { "---|" } else { "" }
        )?;
        for g in &r.groups {
            let (site, share, p99, by) = g.dominant_wait.as_ref().map_or(
                (
                    "-".to_string(),
                    "-".to_string(),
                    "-".to_string(),
                    "-".to_string(),
                ),
                |w| {
                    (
                        format!("{} `{}`", w.state, w.site),
                        format!("{:.1} %", w.share_pct),
                        w.p99_ms.map_or("-".into(), |p| format!("{p:.2} ms")),
                        w.woken_by.clone().unwrap_or_else(|| "-".into()),
                    )
                },
            );
            let by = if wakers {
                format!(" {by} |")
            } else {
                String::new()
            };
            writeln!(
                out,
                "| {} | {} | {} | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {:.1} % | {site} | {share} | {p99} |{by}",
                g.name,
                g.thread_count,
                g.idle_threads,
                g.running_pct,
                g.runnable_pct,
                g.sleep_pct,
                g.io_pct,
                g.other_pct
            )?;
        }
    }
    Ok(())
}

/// Idle threads (the rule, one line each) and the notes.
fn md_idle_and_notes(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if !r.idle_threads.is_empty() {
        writeln!(out, "\n## Idle threads\n")?;
        writeln!(
            out,
            "Rule: {}. Idle threads are not ranked among blocking sites.\n",
            r.idle_rule
        )?;
        for i in &r.idle_threads {
            writeln!(out, "- {}", idle_text(i))?;
        }
    }
    for n in &r.notes {
        writeln!(out, "\n> {n}")?;
    }
    Ok(())
}

/// Blocking sites ranked by active threads, then their stacks and wakers.
fn md_sites(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if !r.top_blocking_sites.is_empty() {
        writeln!(out, "\n## Top blocking sites\n")?;
        writeln!(
            out,
            "Ranked by the time of active threads (% of all active threads' time), event waits \
             (epoll, poll, select: marked *event*) after the others; idle threads' time at the \
             same site apart.\n"
        )?;
        // Without wakers (`--no-wakers`) no "woken by" column: a note says why.
        let wakers = r.capture.wakers_recorded;
        writeln!(
            out,
            "| # | state | site | threads | active | % of active | idle | waits | p50 | p90 | p99 | max |{}",
            if wakers { " woken by |" } else { "" }
        )?;
        writeln!(
            out,
            "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|{}",
            if wakers { "---|" } else { "" }
        )?;
        for s in &r.top_blocking_sites {
            let [p50, p90, p99, max] = latency_cells(&s.latency);
            let by = if wakers {
                format!(" {} |", wakers_text(&s.wakers))
            } else {
                String::new()
            };
            writeln!(
                out,
                "| {} | {}{} | `{}`{} | {} | {:.2} s | {:.1} % | {:.2} s | {} | {p50} | {p90} | {p99} | {max} |{by}",
                s.rank,
                s.state,
                if s.event_wait { " (event)" } else { "" },
                s.site,
                paths(s),
                s.thread_count,
                s.active_s,
                s.active_pct,
                s.idle_s,
                s.waits,
            )?;
        }
        if r.top_blocking_sites.iter().any(|s| !s.resources.is_empty()) {
            writeln!(out, "\nWhat the waits were on:\n")?;
            for s in &r.top_blocking_sites {
                if !s.resources.is_empty() {
                    writeln!(out, "{}. {}", s.rank, super::resources_text(&s.resources))?;
                }
            }
        }
        if r.top_blocking_sites.iter().any(|s| s.when.is_some()) {
            writeln!(out, "\nWhen (from the timeline):\n")?;
            for s in &r.top_blocking_sites {
                if let Some(w) = &s.when {
                    writeln!(out, "{}. {}", s.rank, w.summary)?;
                }
            }
        }
        writeln!(out, "\nStacks (root → leaf):\n")?;
        for s in &r.top_blocking_sites {
            writeln!(out, "{}. `{}`", s.rank, s.stack.join(";"))?;
            for w in s.wakers.iter().filter(|w| !w.stack.is_empty()) {
                writeln!(
                    out,
                    "   - woken by {}: `{}`",
                    wakers_text(std::slice::from_ref(w)),
                    w.stack.join(";")
                )?;
            }
        }
    }
    Ok(())
}

/// Waits on other profiled processes, followed into them.
fn md_chains(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if r.chains.is_empty() {
        return Ok(());
    }
    writeln!(out, "\n## Wait chains across processes\n")?;
    for c in &r.chains {
        writeln!(out, "- {}.", c.sentence())?;
    }
    Ok(())
}

/// Goroutine groups of Go processes, with their sites.
fn md_goroutines(r: &Report, out: &mut impl Write) -> io::Result<()> {
    let unfollowed: Vec<_> = r
        .go_processes
        .iter()
        .filter(|p| p.unfollowed.is_some())
        .collect();
    if r.goroutines.is_empty() && unfollowed.is_empty() {
        return Ok(());
    }
    writeln!(out, "\n## Goroutines\n")?;
    for p in unfollowed {
        writeln!(
            out,
            "- {} (PID {}, {}): goroutines not followed, {}.",
            p.name,
            p.pid,
            p.version,
            p.unfollowed.as_deref().unwrap_or("")
        )?;
    }
    for g in &r.goroutines {
        writeln!(
            out,
            "\n**{}** (PID {}){}: on the CPU {:.3} s ({:.0} % of their time with work), waits \
             with work {:.3} s, idle waits {:.3} s\n",
            g.subject,
            g.pid,
            if g.idle { ", idle" } else { "" },
            g.on_cpu_s,
            g.on_cpu_pct,
            g.wait_s,
            g.idle_wait_s
        )?;
        writeln!(
            out,
            "| wait | for | share | time | waits | p50 | p99 | max |\n|---|---|---:|---:|---:|---:|---:|---:|"
        )?;
        for s in &g.sites {
            let [p50, _, p99, max] = latency_cells(&s.latency);
            writeln!(
                out,
                "| `{}`{} | {} | {:.1} % | {:.3} s | {}{} | {p50} | {p99} | {max} |",
                s.label,
                if s.idle { " (idle)" } else { "" },
                s.waiting_for,
                s.share_pct,
                s.time_s,
                s.waits,
                if s.still_parked > 0 {
                    format!(" + {} parked at the end", s.still_parked)
                } else {
                    String::new()
                }
            )?;
        }
    }
    Ok(())
}

/// The hottest on-CPU functions.
fn md_functions(r: &Report, out: &mut impl Write) -> io::Result<()> {
    if !r.top_on_cpu_functions.is_empty() {
        writeln!(out, "\n## Top on-CPU functions\n")?;
        writeln!(out, "| function | self | total |\n|---|---:|---:|")?;
        for f in &r.top_on_cpu_functions {
            writeln!(
                out,
                "| `{}` | {:.1} % | {:.1} % |",
                f.function, f.self_pct, f.total_pct
            )?;
        }
    }
    Ok(())
}

/// Run-queue delay: preempted and after a wakeup.
fn md_run_queue(r: &Report, out: &mut impl Write) -> io::Result<()> {
    let q = &r.run_queue;
    if q.preempted.is_some() || q.after_wakeup.is_some() {
        writeln!(out, "\n## Run queue\n")?;
        writeln!(
            out,
            "| | total | waits | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|---:|---:|"
        )?;
        for (what, total, l) in [
            ("preempted", q.preempted_s, &q.preempted),
            ("after wakeup", q.after_wakeup_s, &q.after_wakeup),
        ] {
            let [p50, p90, p99, max] = latency_cells(l);
            let n = l.as_ref().map_or(0, |l| l.count);
            writeln!(
                out,
                "| {what} | {total:.3} s | {n} | {p50} | {p90} | {p99} | {max} |"
            )?;
        }
    }
    Ok(())
}
