//! JVMs whose threads' stacks stopped inside Java code: the share of their time whose callers
//! are missing, said in the report rather than hidden.

use std::ops::Range;

use profiler_common::unwind::java_method_of;

use crate::{
    model::{CaptureNote, Kind, PartialTime, Profile},
    procmap::ProcessMaps,
};

/// A JVM among the targets, as the capture side last read it.
pub struct JavaProcess<'a> {
    pub pid: u32,
    pub name: &'a str,
    /// The code cache's extent as last read (every blob, the interpreter included).
    pub code_cache: Range<u64>,
    pub maps: &'a ProcessMaps,
}

/// JVMs whose threads' stacks stopped inside Java code for more than 1 % of their on-CPU or
/// off-CPU time: that share is said, not hidden (their callers are missing).
pub fn partial_java_notes(profile: &Profile, jvms: &[JavaProcess<'_>]) -> Vec<CaptureNote> {
    let mut notes = Vec::new();
    for jvm in jvms {
        // (total, partial) on the CPU and off it.
        let mut on = (0u64, 0u64);
        let mut off = (0u64, 0u64);
        for e in profile.entries.iter().filter(|e| e.pid == jvm.pid) {
            let sum = if e.kind == Kind::OnCpu {
                &mut on
            } else {
                &mut off
            };
            sum.0 += e.time_ns;
            // Or at an address no code is mapped at: a return address read where the frame
            // was not (an epilogue, an unwound stub).
            if profile.stacks.get(&e.user_stack).is_some_and(|s| {
                ends_in_java(s, &jvm.code_cache)
                    || s.last().is_some_and(|&a| jvm.maps.find(a).is_none())
            }) {
                sum.1 += e.time_ns;
            }
        }
        let share = |(total, partial): (u64, u64)| {
            (total > 0 && partial * 100 > total).then_some(PartialTime {
                partial_ns: partial,
                total_ns: total,
            })
        };
        let (on_cpu, off_cpu) = (share(on), share(off));
        if on_cpu.is_none() && off_cpu.is_none() {
            continue;
        }
        notes.push(CaptureNote::PartialJavaStacks {
            process: jvm.name.to_string(),
            pid: jvm.pid,
            on_cpu,
            off_cpu,
        });
    }
    notes
}

/// Whether a user stack (leaf first) ends inside Java code: the walk stopped there (code
/// compiled since the last read, a stub without a frame rule, or the depth limit), so the
/// stack is partial.
fn ends_in_java(stack: &[u64], code_cache: &Range<u64>) -> bool {
    stack
        .last()
        .is_some_and(|&outer| java_method_of(outer).is_some() || code_cache.contains(&outer))
}

#[cfg(test)]
mod tests {
    use crate::{
        model::{Entry, Mode, Window},
        procmap::{Mapping, MappingKind},
    };

    use super::*;

    fn entry(user_stack: u64, kind: Kind, time_ns: u64) -> Entry {
        Entry {
            pid: 7,
            tid: 7,
            user_stack,
            kernel_stack: 0,
            kind,
            samples: 0,
            time_ns,
            waits: 0,
            min_ns: 0,
            max_ns: 0,
            resource: 0,
        }
    }

    #[test]
    fn stacks_ending_in_the_code_cache_or_unmapped_are_said_past_one_percent() {
        let mut profile = Profile::empty(Mode::Wall, Window::default(), 1);
        // Stack 1 reaches main in libjvm's mapping; 2 stops in the code cache; 3 at an
        // address nothing maps.
        profile.stacks.insert(1, vec![0x50_0010, 0x40_0010]);
        profile.stacks.insert(2, vec![0x40_0010, 0x90_0000]);
        profile.stacks.insert(3, vec![0x40_0010, 0xdead_0000]);
        profile.entries = vec![
            entry(1, Kind::OnCpu, 980),
            entry(2, Kind::OnCpu, 20),
            entry(1, Kind::Off(profiler_common::WaitState::Sleep), 995),
            entry(3, Kind::Off(profiler_common::WaitState::Sleep), 5),
        ];
        let maps = ProcessMaps::from_mappings(vec![Mapping {
            start: 0x40_0000,
            end: 0x60_0000,
            offset: 0,
            kind: MappingKind::Anon {
                name: String::new(),
            },
        }]);
        let jvm = JavaProcess {
            pid: 7,
            name: "java",
            code_cache: 0x80_0000..0xa0_0000,
            maps: &maps,
        };
        let notes = partial_java_notes(&profile, &[jvm]);
        // 2 % of the CPU time is partial; 0.5 % off it is not said.
        assert_eq!(
            notes,
            vec![CaptureNote::PartialJavaStacks {
                process: "java".into(),
                pid: 7,
                on_cpu: Some(PartialTime {
                    partial_ns: 20,
                    total_ns: 1_000,
                }),
                off_cpu: None,
            }]
        );
    }
}
