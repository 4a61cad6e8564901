//! The builder's notes: where the figures would mislead without a word — processes that came
//! and went, steal, sampling skew where interrupts come back on, samples that cannot see all
//! of a thread's CPU time, and what the capture itself noted. Data here; `words.rs` words it.

use std::collections::BTreeMap;

use super::model::Note;
use crate::{
    analysis::enables_interrupts,
    model::{CaptureMeta, Kind, Mode, Profile, StackNames},
};

/// Threads that ran more than this are checked against their schedstat.
const CHECKED_CPU_NS: u64 = 1_000_000_000;

pub(super) fn notes(profile: &Profile, names: &StackNames, meta: &CaptureMeta) -> Vec<Note> {
    let mut notes = process_notes(profile);
    notes.extend(steal(profile));
    notes.extend(interrupt_skew(profile, names));
    notes.extend(sample_coverage(profile));
    if profile.mode.traces_switches() && !profile.wakers_recorded {
        notes.push(Note::WakersNotRecorded);
    }
    notes.extend(meta.notes.iter().cloned().map(Note::Capture));
    notes
}

/// Processes that ended or were forked during the capture.
fn process_notes(profile: &Profile) -> Vec<Note> {
    let at = |ns: u64| ns.saturating_sub(profile.window.start_ns) as f64 / 1e9;
    let mut notes = Vec::new();
    // A process that was there from the start and ended: the others went on without it.
    for (pid, p) in &profile.processes {
        if let (None, Some(end)) = (p.forked_ns, p.exited_ns) {
            notes.push(Note::ProcessExited {
                name: p.name.clone(),
                pid: *pid,
                at_s: at(end),
            });
        }
    }
    let forked = profile.processes.values().filter(|p| p.forked_ns.is_some());
    let (processes, exited) = forked.fold((0, 0), |(f, e), p| {
        (f + 1, e + u32::from(p.exited_ns.is_some()))
    });
    if processes > 0 {
        notes.push(Note::Forked { processes, exited });
    }
    notes
}

/// The threads' time on a CPU the host gave to someone else, when it is at least 0.1 % of
/// all thread time.
fn steal(profile: &Profile) -> Option<Note> {
    let uncharged: u64 = profile.threads.values().map(|t| t.uncharged_ns).sum();
    let all: u64 = profile.threads.values().map(|t| t.total_ns()).sum();
    if uncharged == 0 || uncharged * 1000 < all {
        return None;
    }
    let most = profile
        .threads
        .iter()
        .max_by_key(|(tid, t)| (t.uncharged_ns, std::cmp::Reverse(**tid)))
        .map(|(tid, t)| (format!("{}-{tid}", t.name), t.uncharged_ns as f64 / 1e9));
    Some(Note::Steal {
        uncharged_s: uncharged as f64 / 1e9,
        share_pct: 100.0 * uncharged as f64 / all.max(1) as f64,
        most,
    })
}

/// cpu-clock samples come from a timer interrupt, which waits while the kernel runs with
/// interrupts off: that time lands on the function that turns them back on. Said when it is
/// a visible share of the samples (perf's cpu-clock shows the same).
pub(super) fn interrupt_skew(profile: &Profile, names: &StackNames) -> Option<Note> {
    let (mut skewed, mut sampled) = (0u64, 0u64);
    let mut by_frame: BTreeMap<&str, u64> = BTreeMap::new();
    for e in profile.entries.iter().filter(|e| e.kind == Kind::OnCpu) {
        if e.samples == 0 {
            continue;
        }
        sampled += e.samples;
        let leaf = names.kernel.get(&e.kernel_stack).and_then(|k| k.last());
        if let Some(leaf) = leaf.filter(|l| enables_interrupts(l)) {
            skewed += e.samples;
            *by_frame.entry(leaf).or_default() += e.samples;
        }
    }
    if sampled == 0 || skewed * 20 < sampled {
        return None;
    }
    let mut frames: Vec<(&str, u64)> = by_frame.into_iter().collect();
    frames.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    Some(Note::InterruptSkew {
        share_pct: 100.0 * skewed as f64 / sampled as f64,
        frames: frames.iter().take(3).map(|(f, _)| f.to_string()).collect(),
    })
}

/// `--mode cpu`: samples see only what runs when the timer fires; the kernel also charges a
/// thread for time before it is switched in. Said for each busy thread whose samples differ
/// from its schedstat by more than 5 %.
fn sample_coverage(profile: &Profile) -> Vec<Note> {
    if profile.mode != Mode::Cpu {
        return Vec::new();
    }
    let mut notes = Vec::new();
    for (tid, t) in &profile.threads {
        let Some(sched) = t.schedstat else { continue };
        if sched.exec_ns < CHECKED_CPU_NS {
            continue;
        }
        let sampled = t.on_cpu_ns() as f64 / sched.exec_ns as f64;
        if (sampled - 1.0).abs() > 0.05 {
            notes.push(Note::SampleCoverage {
                thread: format!("{}-{tid}", t.name),
                covered_pct: 100.0 * sampled,
                sampled_s: t.on_cpu_ns() as f64 / 1e9,
                schedstat_s: sched.exec_ns as f64 / 1e9,
            });
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{Entry, Window};

    #[test]
    fn samples_where_interrupts_come_back_on_are_said_to_be_skewed() {
        let mut names = StackNames::default();
        let k = |v: &[&str]| v.iter().map(|s| Arc::from(*s)).collect::<Vec<_>>();
        names.kernel.insert(
            7,
            k(&["tcp_sendmsg_[k]", "_raw_spin_unlock_irqrestore_[k]"]),
        );
        names
            .kernel
            .insert(8, k(&["tcp_sendmsg_[k]", "skb_copy_[k]"]));
        let on = |kernel, samples| Entry {
            samples,
            ..Entry::new(1, 1, 0, kernel, Kind::OnCpu)
        };
        let window = Window {
            start_ns: 0,
            stop_ns: 1_000_000_000,
        };
        let with = |skewed| Profile {
            entries: vec![on(7, skewed), on(8, 100 - skewed)],
            ..Profile::empty(Mode::Wall, window, 10_101_010)
        };
        let note = interrupt_skew(&with(30), &names).expect("30 % is said");
        assert_eq!(
            note,
            Note::InterruptSkew {
                share_pct: 30.0,
                frames: vec!["_raw_spin_unlock_irqrestore_[k]".into()]
            }
        );
        let text = note.to_string();
        assert!(
            text.starts_with("30 % of the on-CPU samples")
                && text.contains("_raw_spin_unlock_irqrestore_[k]"),
            "{text}"
        );
        assert!(interrupt_skew(&with(4), &names).is_none());
    }
}
