//! The report's figures in words, shared by its writers: notes as sentences, latencies,
//! wakers, idle threads. Formatting only: every figure comes from the
//! model.

use std::fmt;

use super::model::{IdleRow, Latency, MachineRow, Note, SiteRow, WakerRow};
use crate::{
    analysis::{IDLE_MAX_IO_PCT, IDLE_MAX_ON_CPU_PCT, IDLE_MIN_SLEEP_PCT},
    model::{CaptureNote, PartialTime},
};

/// How much of the idle rule to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleRuleWords {
    /// `≤ 1 % on the CPU, ≤ 1 % in I/O, ≥ 90 % asleep`: in parentheses after "idle".
    Brief,
    /// The rule in one sentence: the report's `idle_rule`.
    Full,
}

/// The idle rule in words, from its constants (analysis.rs): the one place they become text,
/// so the verdict, the report, `--help` and the README (checked by a test) cannot drift from
/// what `analysis::is_idle` does.
pub fn idle_rule(words: IdleRuleWords) -> String {
    let (cpu, io, sleep) = (IDLE_MAX_ON_CPU_PCT, IDLE_MAX_IO_PCT, IDLE_MIN_SLEEP_PCT);
    match words {
        IdleRuleWords::Brief => {
            format!("≤ {cpu} % on the CPU, ≤ {io} % in I/O, ≥ {sleep} % in idle waits")
        }
        IdleRuleWords::Full => format!(
            "a thread is idle when, over its time in the capture window, it was {}; a wait \
             inside a task — a pooled connection, a downstream's reply (an HTTP client's call, \
             a database driver's read), a socket's read or write, a future, a lock, a file, or any \
             wait with a task or a request handler below it — is work, whatever the thread's CPU share; every other \
             thread is active (in --mode cpu, without off-CPU states, every thread counts as \
             active)",
            idle_rule_core()
        ),
    }
}

/// The rule's figures in one clause, as the README and docs/verdict.md state it.
fn idle_rule_core() -> String {
    let (cpu, io, sleep) = (IDLE_MAX_ON_CPU_PCT, IDLE_MAX_IO_PCT, IDLE_MIN_SLEEP_PCT);
    format!(
        "on the CPU at most {cpu} % of the time, in uninterruptible I/O or stopped at most {io} \
         %, and in idle waits at least {sleep} %: waits for its next task or event (a pool's \
         queue under its run loop, an event loop's poll with no handler below it, an acceptor, \
         a runtime's housekeeping such as its JIT compiler, GC and timers), or sleeps and \
         conditions whose stack does not place them inside a task (the rest is waiting for a \
         CPU after its wakeups)"
    )
}

/// `java 33 %, mariadbd 30 % (3 processes), wrk 24 %`: the processes that used the CPUs.
pub fn machine_users(m: &MachineRow) -> String {
    let users: Vec<String> = m
        .top
        .iter()
        .filter(|u| u.cpu_pct >= 0.5)
        .map(|u| {
            let n = if u.processes > 1 {
                format!(" ({} processes)", u.processes)
            } else {
                String::new()
            };
            format!("{} {:.0} %{n}", u.name, u.cpu_pct)
        })
        .collect();
    users.join(", ")
}

/// `2 CPUs 98 % busy (user 70 %, system 25 %, steal 3 %): java 33 %, …`.
pub fn machine_text(m: &MachineRow) -> String {
    let mut parts = vec![
        format!("user {:.0} %", m.user_pct),
        format!("system {:.0} %", m.system_pct),
    ];
    if m.iowait_pct >= 0.5 {
        parts.push(format!("iowait {:.0} %", m.iowait_pct));
    }
    if m.steal_pct >= 0.5 {
        parts.push(format!("steal {:.0} %", m.steal_pct));
    }
    let users = machine_users(m);
    format!(
        "{} {:.0} % busy ({}){}",
        crate::render::count(u64::from(m.cpus), "CPU"),
        m.busy_pct,
        parts.join(", "),
        if users.is_empty() {
            String::new()
        } else {
            format!(": {users}")
        }
    )
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::ProcessExited { name, pid, at_s } => write!(
                f,
                "{name}-{pid} exited {at_s:.2} s into the capture; the other processes were \
                 profiled to the end."
            ),
            Note::Forked { processes, exited } => write!(
                f,
                "{processes} process{} forked during the capture and followed from its first \
                 instruction ({exited} exited before the end).",
                if *processes == 1 { " was" } else { "es were" },
            ),
            Note::Steal {
                uncharged_s,
                share_pct,
                most,
            } => write!(
                f,
                "The threads held their CPUs for {uncharged_s:.2} s ({share_pct:.1} % of all \
                 thread time{}) that the kernel charged neither as CPU time nor as run-queue \
                 wait: the hypervisor ran something else on this virtual machine's CPUs \
                 (steal). That time is shown as other, in the frame [held the CPU, not \
                 charged: hypervisor steal]; running is what the scheduler charged.",
                most.as_ref().map_or(String::new(), |(who, s)| format!(
                    "; most in {who}, {s:.2} s"
                )),
            ),
            Note::InterruptSkew { share_pct, frames } => write!(
                f,
                "{share_pct:.0} % of the on-CPU samples landed where the kernel turns \
                 interrupts back on ({}): the sampling timer (cpu-clock) is an interrupt, so \
                 time the kernel ran with interrupts off, in the callers of these frames, is \
                 counted there (perf's cpu-clock and BCC's profile show the same).",
                frames.join(", ")
            ),
            Note::SampleCoverage {
                thread,
                covered_pct,
                sampled_s,
                schedstat_s,
            } => write!(
                f,
                "{thread}: samples cover {covered_pct:.0} % of its CPU time by the kernel's \
                 account ({sampled_s:.2} s of {schedstat_s:.2} s); the rest is time no sample \
                 sees — the scheduler charges a woken thread from its wakeup, while its CPU \
                 leaves idle or finishes the task it preempts. --mode wall measures that part \
                 (`switching in`)."
            ),
            Note::WakersNotRecorded => write!(
                f,
                "Wakers were not recorded (--no-wakers): no blocking site says who woke it; \
                 the time split is the same."
            ),
            Note::Capture(note) => write!(f, "{note}"),
        }
    }
}

impl fmt::Display for CaptureNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureNote::JitCodeReused {
                process,
                pid,
                addresses,
            } => write!(
                f,
                "{process}-{pid}: {addresses} address{} of JIT code held one Java method and \
                 then another during the capture; frames there carry the later name, which may \
                 be stale for stacks taken before the JIT reused it.",
                if *addresses == 1 { "" } else { "es" },
            ),
            CaptureNote::CodeCacheUnreadable {
                process,
                pid,
                error,
            } => write!(
                f,
                "{process}-{pid}: the JVM's code cache could not be read ({error}); JIT code \
                 compiled after the last good read is unnamed and unwinds by frame pointers."
            ),
            CaptureNote::PartialJavaStacks {
                process,
                pid,
                on_cpu,
                off_cpu,
            } => {
                let part = |what: &str, t: &Option<PartialTime>| {
                    t.map(|t| format!("{:.1} % of its {what} time", t.pct()))
                };
                let parts: Vec<String> = [part("on-CPU", on_cpu), part("off-CPU", off_cpu)]
                    .into_iter()
                    .flatten()
                    .collect();
                write!(
                    f,
                    "{process}-{pid}: {} had stacks that stop inside Java code or at an \
                     unmapped address (code the JIT compiled since the profiler last read the \
                     code cache, a stub with no frame rule, a method's epilogue): their callers \
                     are missing. A warmed-up JVM has fewer.",
                    parts.join(" and ")
                )
            }
            CaptureNote::Text(text) => f.write_str(text),
        }
    }
}

/// p50, p90, p99 and max, `-` where unknown.
pub(crate) fn latency_cells(l: &Option<Latency>) -> [String; 4] {
    let p = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2} ms"));
    match l {
        Some(l) => [p(l.p50_ms), p(l.p90_ms), p(l.p99_ms), p(Some(l.max_ms))],
        None => ["-".into(), "-".into(), "-".into(), "-".into()],
    }
}

/// ` (3 kernel paths)` when a site groups several (its stacks differ below the call).
pub(super) fn paths(s: &SiteRow) -> String {
    if s.stacks > 1 {
        format!(" ({} kernel paths)", s.stacks)
    } else {
        String::new()
    }
}

pub(crate) fn wakers_text(wakers: &[WakerRow]) -> String {
    // A waker that would read "(0 %)" tells the reader nothing; the first is always named.
    wakers
        .iter()
        .enumerate()
        .filter(|(i, w)| *i == 0 || w.wakeups_pct >= 0.5)
        .map(|(_, w)| {
            if w.tid == 0 {
                format!("{} ({:.0} %)", w.name, w.wakeups_pct)
            } else {
                format!("{}-{} ({:.0} %)", w.name, w.tid, w.wakeups_pct)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `4 × workload: worker-0-12, worker-1-13, … in pthread_cond_wait ← park (20.00 s, 57.1 %)`
pub(super) fn idle_text(i: &IdleRow) -> String {
    let mut names = i.threads.join(", ");
    if i.thread_count > i.threads.len() {
        names.push_str(", …");
    }
    let site = i
        .site
        .as_ref()
        .map_or(String::new(), |s| format!(" in {s}"));
    format!(
        "{} × {}: {names}{site} (asleep {:.2} s, {:.1} % of all thread time)",
        i.thread_count, i.process, i.sleep_s, i.share_pct
    )
}

pub(super) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// What a site's waits were on: the top three with their share of its time.
pub fn resources_text(rows: &[super::model::ResourceRow]) -> String {
    let mut parts: Vec<String> = rows
        .iter()
        .take(3)
        .map(|r| format!("{} ({:.0} %)", r.resource.text, r.site_pct))
        .collect();
    if rows.len() > 3 {
        parts.push(format!("{} more", rows.len() - 3));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakers_that_would_read_zero_percent_are_left_out() {
        let waker = |name: &str, tid, wakeups_pct| WakerRow {
            name: name.into(),
            tid,
            pid: tid,
            wakeups: 1,
            wakeups_pct,
            stack: Vec::new(),
        };
        let text = wakers_text(&[
            waker("[interrupt]", 0, 99.7),
            waker("kworker/u8:3", 22664, 0.6),
            waker("[timer interrupt]", 0, 0.3),
        ]);
        assert_eq!(text, "[interrupt] (100 %), kworker/u8:3-22664 (1 %)");
        assert_eq!(wakers_text(&[waker("rare", 7, 0.2)]), "rare-7 (0 %)");
    }

    #[test]
    fn the_idle_rule_reads_as_the_readme_says() {
        assert_eq!(
            idle_rule(IdleRuleWords::Brief),
            "≤ 1 % on the CPU, ≤ 1 % in I/O, ≥ 90 % in idle waits"
        );
        assert!(idle_rule(IdleRuleWords::Full).contains(&idle_rule_core()));
        // The README and docs/verdict.md state the rule in a paragraph of their own: its
        // figures and its words are the constants' and this module's.
        let rule = idle_rule_core();
        for doc in ["README.md", "docs/verdict.md"] {
            let path = format!("{}/../{doc}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let text = text.replace("**", "");
            assert!(text.contains(&rule), "{doc} does not say: {rule}");
            assert!(text.contains(&idle_rule(IdleRuleWords::Brief)), "{doc}");
        }
    }

    #[test]
    fn capture_notes_read_as_they_were_written() {
        let reused = CaptureNote::JitCodeReused {
            process: "java".into(),
            pid: 7,
            addresses: 1,
        };
        assert_eq!(
            reused.to_string(),
            "java-7: 1 address of JIT code held one Java method and then another during the \
             capture; frames there carry the later name, which may be stale for stacks taken \
             before the JIT reused it."
        );
        let partial = CaptureNote::PartialJavaStacks {
            process: "java".into(),
            pid: 7,
            on_cpu: Some(PartialTime {
                partial_ns: 25,
                total_ns: 1000,
            }),
            off_cpu: Some(PartialTime {
                partial_ns: 500,
                total_ns: 1000,
            }),
        };
        assert!(
            partial.to_string().starts_with(
                "java-7: 2.5 % of its on-CPU time and 50.0 % of its off-CPU time had stacks"
            ),
            "{partial}"
        );
        let old = CaptureNote::Text("as it was written".into());
        assert_eq!(Note::Capture(old).to_string(), "as it was written");
    }
}
