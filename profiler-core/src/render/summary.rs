//! The end-of-run summary and the flame graph subtitle: capture, time per state, losses,
//! the process and thread tables. It formats the report model; every figure is the report's.

use std::io::{self, Write};

use super::report::{Report, StateShares, ThreadTableRow};
use crate::fold::Folded;

/// Seconds with a precision that suits the magnitude.
pub fn secs(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if s >= 100.0 {
        format!("{s:.0} s")
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.0} µs", ns as f64 / 1e3)
    }
}

/// The table columns as the terminal shows them: `12.5%`.
fn percents(s: &StateShares) -> [String; 6] {
    s.columns().map(|v| format!("{v:.1}%"))
}

/// Time per state over all threads, in the order on-CPU, sleep, io, runqueue, other: the
/// states the mode records.
fn state_times(r: &Report) -> Vec<(&'static str, u64)> {
    let t = &r.totals;
    let mut out = Vec::new();
    if r.mode.samples_on_cpu() {
        out.push(("on-CPU", t.on_cpu()));
    }
    if r.mode.traces_switches() {
        out.push(("sleep", t.sleep));
        out.push(("io", t.io));
        out.push(("runqueue", t.runnable));
        out.push(("other", t.other));
    }
    out
}

/// The sampling frequency.
fn hz(r: &Report) -> String {
    format!("{:.0} Hz", r.capture.frequency_hz.unwrap_or_default())
}

/// The flame graph's subtitle: capture length, rate, time per state, losses, what was hidden.
pub fn subtitle(r: &Report, folded: &Folded) -> String {
    let mut parts = vec![secs(r.capture.window_ns)];
    if r.mode.samples_on_cpu() {
        parts.push(hz(r));
        parts.push(format!("{} samples", r.capture.samples));
    }
    for (name, ns) in state_times(r) {
        parts.push(format!("{name} {}", secs(ns)));
    }
    parts.push(format!("{} lost", r.capture.lost_total));
    if folded.hidden_threads > 0 {
        parts.push(format!(
            "hidden (--hide-idle): {} asleep of {} idle threads",
            secs(folded.hidden_ns),
            folded.hidden_threads
        ));
    }
    if folded.go_scheduler_sleep_ns > 0 {
        parts.push(format!(
            "Go threads' scheduler sleep {} drawn as their goroutines' waits",
            secs(folded.go_scheduler_sleep_ns)
        ));
    }
    parts.push(format!("unit: {}", folded.unit.name()));
    parts.join(" · ")
}

/// The end-of-run summary: the capture, time per state, waits, losses, and with switches
/// traced the process and thread tables (the report's terminal text follows it).
pub fn write_summary(out: &mut impl Write, r: &Report) -> io::Result<()> {
    let c = &r.capture;
    write!(
        out,
        "profiler: {}, {} mode, {}",
        c.selection,
        c.mode,
        secs(c.window_ns)
    )?;
    if r.mode.samples_on_cpu() {
        write!(out, " at {}", hz(r))?;
    }
    if c.processes > 1 {
        write!(out, ", {} processes", c.processes)?;
    }
    writeln!(out, ", {}", super::count(c.threads as u64, "thread"))?;
    let times: Vec<String> = state_times(r)
        .into_iter()
        .map(|(n, ns)| format!("{n} {}", secs(ns)))
        .collect();
    writeln!(out, "  time     {}", times.join(" · "))?;
    if r.mode.samples_on_cpu() {
        writeln!(out, "  samples  {}", c.samples)?;
    }
    if r.mode.traces_switches() {
        writeln!(
            out,
            "  waits    {} finished · {} still open at the end · {} blocked since before the start",
            c.waits,
            c.open_waits_at_end,
            super::count(c.blocked_at_start, "thread")
        )?;
    }
    if c.lost_total == 0 {
        writeln!(out, "  lost     0")?;
    } else {
        let details: Vec<String> = c
            .lost
            .iter()
            .map(|l| match l.raise_with {
                None => format!("{} {}", l.count, l.what),
                Some(flag) => format!("{} {} (raise {flag})", l.count, l.what),
            })
            .collect();
        writeln!(out, "  lost     {}: {}", c.lost_total, details.join("; "))?;
    }
    if let Some(mib) = c.kernel_memory_mib() {
        writeln!(
            out,
            "  kernel   {mib:.1} MiB of BPF maps held for the capture"
        )?;
    }
    if let Some(m) = &r.machine {
        writeln!(out, "  machine  {}", super::report::machine_text(m))?;
    }
    if r.mode.traces_switches() {
        write_process_table(out, r)?;
        write_thread_table(out, r)?;
    }
    Ok(())
}

/// With several processes, each one's threads summed: CPUs it kept busy on average, and its
/// threads' time by state (% of all its threads' time).
fn write_process_table(out: &mut impl Write, r: &Report) -> io::Result<()> {
    const SHOWN: usize = 10;
    if r.processes.len() < 2 {
        return Ok(());
    }
    writeln!(
        out,
        "  {:<24} {:>7} {:>5} {:>8} {:>9} {:>8} {:>8} {:>8}",
        "process", "threads", "CPUs", "running", "runnable", "sleep", "io", "other"
    )?;
    for p in r.processes.iter().take(SHOWN) {
        let [running, runnable, sleep, io, other, _] = percents(&p.shares);
        writeln!(
            out,
            "  {:<24} {:>7} {:>5.2} {running:>8} {runnable:>9} {sleep:>8} {io:>8} {other:>8}",
            format!("{}-{}", p.name, p.pid),
            p.threads,
            p.cpus,
        )?;
    }
    if r.processes.len() > SHOWN {
        writeln!(out, "  … {} more processes", r.processes.len() - SHOWN)?;
    }
    Ok(())
}

/// Busiest threads by where their time went, as % of their time in the capture (`ThreadTime::
/// share_base_ns`): what `top -H` cannot say.
/// Running is CPU time as the scheduler charges it (schedstat), the profiler's own programs
/// shown apart.
fn write_thread_table(out: &mut impl Write, r: &Report) -> io::Result<()> {
    const SHOWN: usize = 10;
    writeln!(
        out,
        "  {:<24} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9}  class",
        "thread", "running", "runnable", "sleep", "io", "other", "profiler"
    )?;
    for row in r.thread_table.iter().take(SHOWN) {
        let (name, shares, class) = match *row {
            ThreadTableRow::Thread(i) => {
                let t = &r.threads[i];
                (
                    format!("{}-{}", t.name, t.tid),
                    &t.shares,
                    t.class.to_string(),
                )
            }
            ThreadTableRow::ShortLived(i) => {
                let g = &r.short_lived[i];
                (g.group.clone(), &g.shares, g.lives())
            }
        };
        let [running, runnable, sleep, io, other, profiler] = percents(shares);
        writeln!(
            out,
            "  {name:<24} {running:>8} {runnable:>9} {sleep:>8} {io:>8} {other:>8} {profiler:>9}  {class}",
        )?;
    }
    if r.thread_table.len() > SHOWN {
        writeln!(out, "  … {} more rows", r.thread_table.len() - SHOWN)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_naturally() {
        assert_eq!(secs(20_000_000_000), "20.00 s");
        assert_eq!(secs(150_000_000_000), "150 s");
        assert_eq!(secs(2_500_000), "2.5 ms");
        assert_eq!(secs(700), "1 µs");
    }
}
