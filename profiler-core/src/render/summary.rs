//! The end-of-run summary and the flame graph subtitle: capture, time per state, losses.

use std::io::{self, Write};

use profiler_common::{Counter, WaitState};

use crate::{
    analysis::Analysis,
    fold::Folded,
    model::{CaptureMeta, Kind, Mode, Profile},
};

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

/// Time per state, in the order on-CPU, sleep, io, runqueue, other.
fn state_times(profile: &Profile) -> Vec<(&'static str, u64)> {
    let totals = profile.totals();
    let get = |k: Kind| totals.get(&k).copied().unwrap_or(0);
    let mut out = Vec::new();
    if profile.mode.samples_on_cpu() {
        out.push(("on-CPU", get(Kind::OnCpu)));
    }
    if profile.mode.traces_switches() {
        out.push(("sleep", get(Kind::Off(WaitState::Sleep))));
        out.push(("io", get(Kind::Off(WaitState::Io))));
        out.push((
            "runqueue",
            get(Kind::Off(WaitState::RunqueuePreempted)) + get(Kind::Off(WaitState::RunqueueWoken)),
        ));
        out.push(("other", get(Kind::Off(WaitState::Other))));
    }
    out
}

/// Sampling frequency from the sample period.
fn hz(profile: &Profile) -> String {
    format!("{:.0} Hz", 1e9 / profile.period_ns.max(1) as f64)
}

pub fn subtitle(profile: &Profile, folded: &Folded) -> String {
    let mut parts = vec![secs(profile.window.len_ns())];
    if profile.mode.samples_on_cpu() {
        parts.push(hz(profile));
        parts.push(format!(
            "{} samples",
            profile.counters.get(Counter::Samples)
        ));
    }
    for (name, ns) in state_times(profile) {
        parts.push(format!("{name} {}", secs(ns)));
    }
    parts.push(format!("{} lost", profile.total_lost()));
    if folded.hidden_threads > 0 {
        parts.push(format!(
            "hidden (--hide-idle): {} asleep of {} idle threads",
            secs(folded.hidden_ns),
            folded.hidden_threads
        ));
    }
    parts.push(format!("unit: {}", folded.unit.name()));
    parts.join(" · ")
}

pub fn write_summary(
    out: &mut impl Write,
    profile: &Profile,
    analysis: &Analysis,
    meta: &CaptureMeta,
) -> io::Result<()> {
    let mode = match profile.mode {
        Mode::Cpu => "cpu",
        Mode::Off => "off",
        Mode::Wall => "wall",
    };
    let what = if meta.selection.is_empty() {
        format!("{} (PID {})", meta.target, meta.pid)
    } else {
        meta.selection.clone()
    };
    write!(
        out,
        "profiler: {what}, {mode} mode, {}",
        secs(profile.window.len_ns())
    )?;
    if profile.mode.samples_on_cpu() {
        write!(out, " at {}", hz(profile))?;
    }
    let processes = profile.process_totals().len();
    if processes > 1 {
        write!(out, ", {processes} processes")?;
    }
    writeln!(
        out,
        ", {}",
        super::count(profile.threads.len() as u64, "thread")
    )?;
    let times: Vec<String> = state_times(profile)
        .into_iter()
        .map(|(n, ns)| format!("{n} {}", secs(ns)))
        .collect();
    writeln!(out, "  time     {}", times.join(" · "))?;
    if profile.mode.samples_on_cpu() {
        writeln!(out, "  samples  {}", profile.counters.get(Counter::Samples))?;
    }
    if profile.mode.traces_switches() {
        writeln!(
            out,
            "  waits    {} finished · {} still open at the end · {} blocked since before the start",
            profile.counters.get(Counter::Waits),
            profile.open_waits,
            super::count(profile.blocked_at_start, "thread")
        )?;
    }
    let lost = profile.total_lost();
    if lost == 0 {
        writeln!(out, "  lost     0")?;
    } else {
        let details: Vec<String> = profile
            .lost()
            .into_iter()
            .filter(|l| l.1 > 0)
            .map(|(what, n, flag)| match flag {
                None => format!("{n} {what}"),
                Some(flag) => format!("{n} {what} (raise {flag})"),
            })
            .collect();
        writeln!(out, "  lost     {lost}: {}", details.join("; "))?;
    }
    if profile.mode.traces_switches() {
        write_process_table(out, profile)?;
        write_thread_table(out, profile, analysis)?;
    }
    Ok(())
}

/// With several processes, each one's threads summed: CPUs it kept busy on average, and its
/// threads' time by state (% of all its threads' time).
fn write_process_table(out: &mut impl Write, profile: &Profile) -> io::Result<()> {
    const SHOWN: usize = 10;
    let processes = profile.process_totals();
    if processes.len() < 2 {
        return Ok(());
    }
    let window = profile.window.len_ns().max(1) as f64;
    writeln!(
        out,
        "  {:<24} {:>7} {:>5} {:>8} {:>9} {:>8} {:>8} {:>8}",
        "process", "threads", "CPUs", "running", "runnable", "sleep", "io", "other"
    )?;
    for p in processes.iter().take(SHOWN) {
        let all = p.thread_ns().max(1) as f64;
        let pct = |ns: u64| format!("{:.1}%", 100.0 * ns as f64 / all);
        writeln!(
            out,
            "  {:<24} {:>7} {:>5.2} {:>8} {:>9} {:>8} {:>8} {:>8}",
            format!("{}-{}", p.name, p.pid),
            p.threads,
            p.on_cpu_ns as f64 / window,
            pct(p.running_ns()),
            pct(p.runnable_ns()),
            pct(p.off(WaitState::Sleep)),
            pct(p.off(WaitState::Io)),
            pct(p.off(WaitState::Other)),
        )?;
    }
    if processes.len() > SHOWN {
        writeln!(out, "  … {} more processes", processes.len() - SHOWN)?;
    }
    Ok(())
}

/// Busiest threads by where their time went, as % of their time in the capture (`ThreadTime::
/// share_base_ns`): what `top -H` cannot say.
/// Running is CPU time as the scheduler charges it (schedstat), the profiler's own programs
/// shown apart.
fn write_thread_table(
    out: &mut impl Write,
    profile: &Profile,
    analysis: &Analysis,
) -> io::Result<()> {
    const SHOWN: usize = 10;
    let window_ns = profile.window.len_ns();
    let mut threads: Vec<_> = profile.threads.iter().collect();
    threads.sort_by_key(|(tid, t)| (std::cmp::Reverse(t.on_cpu_ns), **tid));
    writeln!(
        out,
        "  {:<24} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9}  class",
        "thread", "running", "runnable", "sleep", "io", "other", "profiler"
    )?;
    for (tid, t) in threads.iter().take(SHOWN) {
        let all = t.share_base_ns(profile.mode, window_ns) as f64;
        let pct = |ns: u64| format!("{:.1}%", 100.0 * ns as f64 / all);
        writeln!(
            out,
            "  {:<24} {:>8} {:>9} {:>8} {:>8} {:>8} {:>9}  {}",
            format!("{}-{tid}", t.name),
            pct(t.running_ns()),
            pct(t.runnable_ns()),
            pct(t.off(WaitState::Sleep)),
            pct(t.off(WaitState::Io)),
            pct(t.off(WaitState::Other)),
            pct(t.overhead_ns),
            if analysis.is_idle(**tid) {
                "idle"
            } else {
                "active"
            },
        )?;
    }
    if threads.len() > SHOWN {
        writeln!(out, "  … {} more threads", threads.len() - SHOWN)?;
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
