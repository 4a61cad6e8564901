//! The timeline: when each thread waited, where, and for how long, and when each on-CPU
//! sample was taken — what a flame graph of the whole window throws away. Built by
//! `timeline::build` from the kernel's records; saved with the capture; read by the range
//! replay, the Perfetto trace, the HTML strip chart and heatmap, and the report's "when".
//!
//! A thread's line covers the part of the window it lived, `[from_ns, to_ns)`. Its waits of
//! at least `resolution_ns` are there one by one; between two of them (a *gap*) the thread
//! was on the CPU for a known time (the difference of the waits' `cpu_before_ns`) and, for
//! the rest, in waits shorter than the resolution, whose sites are known only over the
//! whole capture (the aggregates).

use std::collections::BTreeMap;

use profiler_common::WaitState;
use serde::{Deserialize, Serialize};

/// Default `--timeline-resolution-us`: waits shorter than 1 ms are merged into the stretch
/// around them.
pub const DEFAULT_RESOLUTION_NS: u64 = 1_000_000;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Waits shorter than this are not on the line one by one.
    pub resolution_ns: u64,
    /// By tid.
    pub threads: BTreeMap<u32, ThreadLine>,
    /// Every on-CPU sample, by time.
    pub samples: Vec<TimedSample>,
    /// Records lost (the kernel's ring full, or beyond `--timeline-max-records`): the lines
    /// of their threads have holes, shown as CPU or short waits.
    pub lost: u64,
    /// Goroutine waits of Go targets of at least the resolution, by goroutine and start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub goroutines: Vec<GoroutineSlice>,
}

/// One goroutine wait on the timeline: goroutine `g` of process `pid` parked with `reason`
/// (the runtime's number; its name is the process's `GoProcess::reasons`) at its stack from
/// `start_ns` until the scheduler ran it again at `end_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoroutineSlice {
    pub pid: u32,
    pub g: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub user_stack: u64,
    pub reason: u32,
}

/// One thread's line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadLine {
    /// The part of the window the thread lived (created or exited during it: less).
    pub from_ns: u64,
    pub to_ns: u64,
    /// Its CPU time over `[from_ns, to_ns)`.
    pub cpu_ns: u64,
    /// Its waits of at least the resolution, by start; they do not overlap.
    pub waits: Vec<TimedWait>,
}

/// One wait: blocked (in `state`) from `start_ns` for `blocked_ns`, then runnable for
/// `runnable_ns`. A wait for a CPU from its start (`state` a run-queue state) is all
/// `runnable_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WaitTuple", into = "WaitTuple")]
pub struct TimedWait {
    pub start_ns: u64,
    pub blocked_ns: u64,
    pub runnable_ns: u64,
    pub state: WaitState,
    pub user_stack: u64,
    pub kernel_stack: u64,
    /// Who made it runnable (0: an interrupt, or not seen).
    pub waker_tid: u32,
    /// The thread's CPU time in the window before the wait began.
    pub cpu_before_ns: u64,
    /// When the waker woke it (`sched_waking`; 0: not seen). Before [`TimedWait::wake_ns`]
    /// when the scheduler queued the thread later (an IPI to another CPU).
    pub waking_ns: u64,
    /// What it waited on (`Profile::resources`' key; 0: no fd, or not recorded).
    pub resource: u64,
}

impl TimedWait {
    pub fn end_ns(&self) -> u64 {
        self.start_ns + self.blocked_ns + self.runnable_ns
    }

    /// When it was made runnable.
    pub fn wake_ns(&self) -> u64 {
        self.start_ns + self.blocked_ns
    }

    /// When its waker acted: the `sched_waking` time where it was seen within the wait,
    /// otherwise when it was queued. The waking time wins even past [`TimedWait::wake_ns`]:
    /// that split comes from the run-queue clocks of two CPUs, which on a VM with heavy steal
    /// put a wakeup 1.2 ms before the write() that made it.
    pub fn waker_ns(&self) -> u64 {
        if (self.start_ns..=self.end_ns()).contains(&self.waking_ns) {
            self.waking_ns
        } else {
            self.wake_ns()
        }
    }

    /// A wait for a CPU from its start (a preemption).
    pub fn runqueue(&self) -> bool {
        matches!(
            self.state,
            WaitState::RunqueuePreempted | WaitState::RunqueueWoken
        )
    }
}

/// Saved as `[start, blocked, runnable, state, user, kernel, waker, cpu_before, waking,
/// resource]`: a long capture holds many of them. `waking` and `resource` came later; a
/// capture saved before them has eight or nine.
struct WaitTuple(u64, u64, u64, u32, u64, u64, u32, u64, u64, u64);

impl Serialize for WaitTuple {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (
            self.0, self.1, self.2, self.3, self.4, self.5, self.6, self.7, self.8, self.9,
        )
            .serialize(s)
    }
}

impl<'de> Deserialize<'de> for WaitTuple {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = WaitTuple;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a wait: an array of 8 to 10 integers")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<WaitTuple, A::Error> {
                let mut n = 0;
                let mut next = |a: &mut A| -> Result<u64, A::Error> {
                    n += 1;
                    a.next_element()?
                        .ok_or_else(|| serde::de::Error::invalid_length(n - 1, &self))
                };
                let (start, blocked, runnable) = (next(&mut a)?, next(&mut a)?, next(&mut a)?);
                let state = u32::try_from(next(&mut a)?).unwrap_or(u32::MAX);
                let (user, kernel) = (next(&mut a)?, next(&mut a)?);
                let waker = u32::try_from(next(&mut a)?).unwrap_or(0);
                let cpu_before = next(&mut a)?;
                let waking = a.next_element()?.unwrap_or(0);
                let resource = a.next_element()?.unwrap_or(0);
                Ok(WaitTuple(
                    start, blocked, runnable, state, user, kernel, waker, cpu_before, waking,
                    resource,
                ))
            }
        }
        d.deserialize_seq(Visitor)
    }
}

impl From<WaitTuple> for TimedWait {
    fn from(t: WaitTuple) -> Self {
        Self {
            start_ns: t.0,
            blocked_ns: t.1,
            runnable_ns: t.2,
            state: WaitState::from_u32(t.3).unwrap_or(WaitState::Other),
            user_stack: t.4,
            kernel_stack: t.5,
            waker_tid: t.6,
            cpu_before_ns: t.7,
            waking_ns: t.8,
            resource: t.9,
        }
    }
}

impl From<TimedWait> for WaitTuple {
    fn from(w: TimedWait) -> Self {
        Self(
            w.start_ns,
            w.blocked_ns,
            w.runnable_ns,
            w.state as u32,
            w.user_stack,
            w.kernel_stack,
            w.waker_tid,
            w.cpu_before_ns,
            w.waking_ns,
            w.resource,
        )
    }
}

/// An on-CPU sample; saved as `[tid, ts, user, kernel]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SampleTuple", into = "SampleTuple")]
pub struct TimedSample {
    pub tid: u32,
    pub ts_ns: u64,
    pub user_stack: u64,
    pub kernel_stack: u64,
}

#[derive(Serialize, Deserialize)]
struct SampleTuple(u32, u64, u64, u64);

impl From<SampleTuple> for TimedSample {
    fn from(t: SampleTuple) -> Self {
        Self {
            tid: t.0,
            ts_ns: t.1,
            user_stack: t.2,
            kernel_stack: t.3,
        }
    }
}

impl From<TimedSample> for SampleTuple {
    fn from(s: TimedSample) -> Self {
        Self(s.tid, s.ts_ns, s.user_stack, s.kernel_stack)
    }
}

/// A stretch of a thread's line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment<'a> {
    /// A wait of at least the resolution.
    Wait(&'a TimedWait),
    /// Between two waits: `cpu_ns` on the CPU, the rest in shorter waits.
    Gap {
        from_ns: u64,
        to_ns: u64,
        cpu_ns: u64,
    },
}

impl Segment<'_> {
    pub fn from_ns(&self) -> u64 {
        match self {
            Segment::Wait(w) => w.start_ns,
            Segment::Gap { from_ns, .. } => *from_ns,
        }
    }

    pub fn to_ns(&self) -> u64 {
        match self {
            Segment::Wait(w) => w.end_ns(),
            Segment::Gap { to_ns, .. } => *to_ns,
        }
    }
}

impl ThreadLine {
    /// Its waits and the gaps between them, in order, covering `[from_ns, to_ns)`. A gap's
    /// CPU time is what the thread's CPU counter grew by across it, at most its length.
    pub fn segments(&self) -> Vec<Segment<'_>> {
        let mut out = Vec::with_capacity(2 * self.waits.len() + 1);
        let mut at = self.from_ns;
        let mut cpu_at = 0u64;
        for w in &self.waits {
            if w.start_ns > at {
                out.push(gap(at, w.start_ns, w.cpu_before_ns.saturating_sub(cpu_at)));
            }
            out.push(Segment::Wait(w));
            at = at.max(w.end_ns());
            cpu_at = cpu_at.max(w.cpu_before_ns);
        }
        if self.to_ns > at {
            out.push(gap(at, self.to_ns, self.cpu_ns.saturating_sub(cpu_at)));
        }
        out
    }
}

fn gap(from_ns: u64, to_ns: u64, cpu_ns: u64) -> Segment<'static> {
    Segment::Gap {
        from_ns,
        to_ns,
        cpu_ns: cpu_ns.min(to_ns - from_ns),
    }
}

/// The overlap of `[a, b)` with `[from, to)`, in ns.
pub fn overlap(a: u64, b: u64, from: u64, to: u64) -> u64 {
    b.min(to).saturating_sub(a.max(from))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(start_ns: u64, blocked_ns: u64, runnable_ns: u64, cpu_before_ns: u64) -> TimedWait {
        TimedWait {
            start_ns,
            blocked_ns,
            runnable_ns,
            state: WaitState::Sleep,
            user_stack: 7,
            kernel_stack: 8,
            waker_tid: 0,
            cpu_before_ns,
            waking_ns: 0,
            resource: 0,
        }
    }

    #[test]
    fn gaps_get_the_cpu_the_counter_grew_by() {
        let line = ThreadLine {
            from_ns: 0,
            to_ns: 100,
            cpu_ns: 50,
            waits: vec![wait(10, 20, 5, 8), wait(60, 10, 0, 30)],
        };
        assert_eq!(
            line.segments(),
            vec![
                Segment::Gap {
                    from_ns: 0,
                    to_ns: 10,
                    cpu_ns: 8
                },
                Segment::Wait(&line.waits[0]),
                Segment::Gap {
                    from_ns: 35,
                    to_ns: 60,
                    cpu_ns: 22
                },
                Segment::Wait(&line.waits[1]),
                Segment::Gap {
                    from_ns: 70,
                    to_ns: 100,
                    cpu_ns: 20
                },
            ]
        );
    }

    #[test]
    fn a_gap_never_has_more_cpu_than_its_length() {
        let line = ThreadLine {
            from_ns: 0,
            to_ns: 20,
            cpu_ns: 500,
            waits: vec![wait(5, 5, 0, 400)],
        };
        let s = line.segments();
        assert_eq!(
            s[0],
            Segment::Gap {
                from_ns: 0,
                to_ns: 5,
                cpu_ns: 5
            }
        );
        assert_eq!(
            s[2],
            Segment::Gap {
                from_ns: 10,
                to_ns: 20,
                cpu_ns: 10
            }
        );
    }

    #[test]
    fn the_waker_acts_at_its_waking_time_when_that_lies_in_the_wait() {
        let w = wait(1_000, 500, 300, 0);
        assert_eq!(w.waker_ns(), 1_500, "not seen: when it was queued");
        // An IPI queued it 200 ns after the waker acted.
        assert_eq!(
            TimedWait {
                waking_ns: 1_300,
                ..w
            }
            .waker_ns(),
            1_300
        );
        // Run-queue clocks that put the queueing first: the waking time still.
        assert_eq!(
            TimedWait {
                waking_ns: 1_600,
                ..w
            }
            .waker_ns(),
            1_600
        );
        // Outside the wait (a range cut, a stale time): when it was queued.
        for waking_ns in [999, 1_801, u64::MAX] {
            assert_eq!(
                TimedWait { waking_ns, ..w }.waker_ns(),
                1_500,
                "{waking_ns}"
            );
        }
    }

    #[test]
    fn waits_and_samples_save_as_short_arrays() {
        let w = TimedWait {
            waking_ns: 2,
            resource: 9,
            ..wait(1, 2, 3, 4)
        };
        let json = serde_json::to_string(&w).unwrap();
        assert_eq!(json, "[1,2,3,1,7,8,0,4,2,9]");
        assert_eq!(serde_json::from_str::<TimedWait>(&json).unwrap(), w);
        // Saved before the resource was: nine, on nothing recorded.
        let nine = serde_json::from_str::<TimedWait>("[1,2,3,1,7,8,0,4,2]").unwrap();
        assert_eq!(nine, TimedWait { resource: 0, ..w });
        // Saved before the waking time was: eight, and the waker acted when it was queued.
        let old = serde_json::from_str::<TimedWait>("[1,2,3,1,7,8,0,4]").unwrap();
        assert_eq!(old, wait(1, 2, 3, 4));
        assert_eq!(old.waker_ns(), old.wake_ns());
        for short in ["[1,2,3,1,7,8,0]", "[]", "[1,2,3,1,7,8,0,4,2,9,1]"] {
            assert!(serde_json::from_str::<TimedWait>(short).is_err(), "{short}");
        }
        let s = TimedSample {
            tid: 5,
            ts_ns: 6,
            user_stack: u64::MAX >> 1,
            kernel_stack: 0,
        };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<TimedSample>(&json).unwrap(), s);
    }
}
