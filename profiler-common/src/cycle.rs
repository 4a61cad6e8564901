//! The time rule: how one cycle of a thread (switch-out to switch-out) splits into time on
//! the CPU, runnable, blocked and uncharged; the kernel and user space share it.

/// What is known about one cycle of a thread: from `from_ns` (a switch-out, or where the
/// thread's accounting began) to `to_ns` (the next switch-out, or the end of the window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleInput {
    pub from_ns: u64,
    pub to_ns: u64,
    /// The switch-in inside the cycle (0: none reported).
    pub in_ns: u64,
    /// The wakeup that ended the wait (0: none seen).
    pub wake_ns: u64,
    /// A wait began at `from_ns`; otherwise the thread was on the CPU from there on.
    pub waiting: bool,
    /// That wait is a wait for a CPU from the start (preempted, or just created).
    pub runqueue_wait: bool,
    /// `se.sum_exec_runtime` and `sched_info.run_delay` grew by these over the cycle, when
    /// known (`*_known`). Plain numbers, not `Option`s: LLVM computes with an `Option`'s
    /// payload before testing it, and the verifier rejects reading that undefined register.
    pub exec_delta: u64,
    pub exec_known: bool,
    pub delay_delta: u64,
    pub delay_known: bool,
}

/// How one cycle splits. `on_ns + runnable_ns + blocked_ns + uncharged_ns` is the cycle's
/// length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cycle {
    /// On the CPU, as the scheduler charges it when its counters are known.
    pub on_ns: u64,
    /// Switch-in to switch-out as the tracepoints saw it (`on_ns` when no switch-in was seen).
    pub traced_on_ns: u64,
    /// Waiting for a CPU.
    pub runnable_ns: u64,
    /// In the wait's own state (sleep, io, other) until it was made runnable.
    pub blocked_ns: u64,
    /// On the CPU by the tracepoints, but charged by the scheduler as neither CPU time nor
    /// run-queue wait: on a virtual machine, the host ran something else on the thread's
    /// CPU (`sum_exec_runtime` leaves steal out, with `CONFIG_PARAVIRT_TIME_ACCOUNTING`; so
    /// does interrupt time with `CONFIG_IRQ_TIME_ACCOUNTING`). Not part of the other three.
    pub uncharged_ns: u64,
}

/// The least time a cycle must lack from the scheduler's counters to be counted as
/// uncharged. The run queue's clock and the tracepoint clock differ by a few µs at a switch
/// (carried to the next cycle, see [`crate::ThreadStats::last_exec_ns`]); a host takes a vCPU for
/// its own scheduler's slices, hundreds of µs and more.
pub const UNCHARGED_MIN_NS: u64 = 50_000;

/// The time rule. With the scheduler's counters, a cycle is on the CPU for as long as
/// `sum_exec_runtime` grew, runnable for as long as `run_delay` grew, and blocked for the
/// rest (a preemption: runnable for as long as `run_delay` grew, on the CPU for the rest):
/// the thread's figures then add up to `/proc/<pid>/task/<tid>/schedstat`, the caller
/// carrying what a cycle could not take over to the next. Time the thread held the CPU that
/// neither counter grew by, beyond the clocks' few µs ([`UNCHARGED_MIN_NS`]), is uncharged
/// (steal on a virtual machine): neither CPU time nor a wait. Without the counters (the first
/// cycle of a thread the start snapshot missed), the tracepoint times decide: on the CPU from
/// switch-in to switch-out, runnable from the wakeup to the switch-in.
pub const fn split_cycle(c: &CycleInput) -> Cycle {
    let cycle = c.to_ns.saturating_sub(c.from_ns);
    if !c.waiting {
        return Cycle {
            on_ns: cycle,
            traced_on_ns: cycle,
            runnable_ns: 0,
            blocked_ns: 0,
            uncharged_ns: 0,
        };
    }
    let switched_in = c.in_ns > c.from_ns && c.in_ns <= c.to_ns;
    let traced = if switched_in { c.to_ns - c.in_ns } else { 0 };
    if c.runqueue_wait && c.delay_known {
        // A wait for a CPU from the start: the kernel's run delay is its length, and the CPU
        // time is the rest of the cycle. The two clocks differ by a few µs at a switch; the
        // caller carries the difference to the next cycle (see `ThreadStats::last_exec_ns`).
        let runnable = min(c.delay_delta, cycle);
        let rest = cycle - runnable;
        let uncharged = if c.exec_known && rest > c.exec_delta + UNCHARGED_MIN_NS {
            rest - c.exec_delta
        } else {
            0
        };
        let on = rest - uncharged;
        return Cycle {
            on_ns: on,
            traced_on_ns: if switched_in {
                traced.saturating_sub(uncharged)
            } else {
                on
            },
            runnable_ns: runnable,
            blocked_ns: 0,
            uncharged_ns: uncharged,
        };
    }
    let on = if c.exec_known {
        min(c.exec_delta, cycle)
    } else {
        traced
    };
    let off = cycle - on;
    // The switch-in to switch-out stretch the scheduler charged less than it lasted.
    let uncharged = if c.exec_known && traced > on + UNCHARGED_MIN_NS {
        min(traced - on, off)
    } else {
        0
    };
    let off = off - uncharged;
    let runnable = if c.runqueue_wait {
        off
    } else if c.delay_known {
        min(c.delay_delta, off)
    } else {
        let end = if switched_in { c.in_ns } else { c.to_ns };
        if c.wake_ns >= c.from_ns && c.wake_ns < end {
            min(end - c.wake_ns, off)
        } else {
            0
        }
    };
    Cycle {
        on_ns: on,
        traced_on_ns: if switched_in { traced - uncharged } else { on },
        runnable_ns: runnable,
        blocked_ns: off - runnable,
        uncharged_ns: uncharged,
    }
}

const fn min(a: u64, b: u64) -> u64 {
    if a < b { a } else { b }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycle(waiting: bool, runqueue_wait: bool) -> CycleInput {
        CycleInput {
            from_ns: 1_000,
            to_ns: 11_000,
            in_ns: 8_000,
            wake_ns: 6_000,
            waiting,
            runqueue_wait,
            exec_delta: 0,
            exec_known: false,
            delay_delta: 0,
            delay_known: false,
        }
    }

    #[test]
    fn a_cycle_splits_by_the_schedulers_counters_when_known() {
        // 10 µs cycle: the kernel charged 4 µs of CPU and 1 µs of run-queue wait.
        let c = split_cycle(&CycleInput {
            exec_delta: 4_000,
            exec_known: true,
            delay_delta: 1_000,
            delay_known: true,
            ..cycle(true, false)
        });
        assert_eq!(
            c,
            Cycle {
                on_ns: 4_000,
                traced_on_ns: 3_000,
                runnable_ns: 1_000,
                blocked_ns: 5_000,
                uncharged_ns: 0
            }
        );
        // Counters beyond the cycle (read late) are capped by it.
        let c = split_cycle(&CycleInput {
            exec_delta: 50_000,
            exec_known: true,
            delay_delta: 50_000,
            delay_known: true,
            ..cycle(true, false)
        });
        assert_eq!((c.on_ns, c.runnable_ns, c.blocked_ns), (10_000, 0, 0));
    }

    #[test]
    fn a_cycle_without_counters_splits_by_the_tracepoint_times() {
        let c = split_cycle(&cycle(true, false));
        assert_eq!(
            c,
            Cycle {
                on_ns: 3_000,
                traced_on_ns: 3_000,
                runnable_ns: 2_000,
                blocked_ns: 5_000,
                uncharged_ns: 0
            }
        );
        // A preemption: all of the time off the CPU is run-queue time.
        let c = split_cycle(&cycle(true, true));
        assert_eq!((c.on_ns, c.runnable_ns, c.blocked_ns), (3_000, 7_000, 0));
        // On the CPU since the cycle began.
        let c = split_cycle(&cycle(false, false));
        assert_eq!((c.on_ns, c.runnable_ns, c.blocked_ns), (10_000, 0, 0));
        // No switch-in seen and no counters: all of it waiting, woken at 6 µs.
        let c = split_cycle(&CycleInput {
            in_ns: 0,
            ..cycle(true, false)
        });
        assert_eq!((c.on_ns, c.runnable_ns, c.blocked_ns), (0, 5_000, 5_000));
    }

    #[test]
    fn a_cycle_always_adds_up_to_its_length() {
        for exec in [None, Some(0), Some(3_000), Some(20_000)] {
            for delay in [None, Some(0), Some(2_500), Some(20_000)] {
                for (waiting, rq) in [(true, false), (true, true), (false, false)] {
                    for in_ns in [0, 1_000, 8_000, 11_000, 12_000] {
                        let c = split_cycle(&CycleInput {
                            in_ns,
                            exec_delta: exec.unwrap_or(0),
                            exec_known: exec.is_some(),
                            delay_delta: delay.unwrap_or(0),
                            delay_known: delay.is_some(),
                            ..cycle(waiting, rq)
                        });
                        assert_eq!(
                            c.on_ns + c.runnable_ns + c.blocked_ns + c.uncharged_ns,
                            10_000,
                            "{c:?}"
                        );
                        assert!(c.traced_on_ns <= 10_000, "{c:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn time_the_scheduler_did_not_charge_is_uncharged_not_cpu() {
        const MS: u64 = 1_000_000;
        // A preemption of 10 ms: 2 ms in the run queue, on the CPU for 8 ms by the
        // tracepoints, of which the host took 3 ms (steal: not in sum_exec_runtime).
        let preempted = CycleInput {
            from_ns: 0,
            to_ns: 10 * MS,
            in_ns: 2 * MS,
            wake_ns: 0,
            waiting: true,
            runqueue_wait: true,
            exec_delta: 5 * MS,
            exec_known: true,
            delay_delta: 2 * MS,
            delay_known: true,
        };
        assert_eq!(
            split_cycle(&preempted),
            Cycle {
                on_ns: 5 * MS,
                traced_on_ns: 5 * MS,
                runnable_ns: 2 * MS,
                blocked_ns: 0,
                uncharged_ns: 3 * MS,
            }
        );
        // The same after a sleep: asleep 2 ms, on the CPU 8 ms of which 3 ms stolen.
        let slept = CycleInput {
            runqueue_wait: false,
            delay_delta: 0,
            ..preempted
        };
        assert_eq!(
            split_cycle(&slept),
            Cycle {
                on_ns: 5 * MS,
                traced_on_ns: 5 * MS,
                runnable_ns: 0,
                blocked_ns: 2 * MS,
                uncharged_ns: 3 * MS,
            }
        );
        // The clocks' few µs at a switch are not steal: the preemption's CPU share runs
        // ahead of the counter (the caller's carry repays it), the sleep's is the counter.
        let skewed = CycleInput {
            exec_delta: 8 * MS - 4_000,
            ..preempted
        };
        let c = split_cycle(&skewed);
        assert_eq!((c.on_ns, c.uncharged_ns), (8 * MS, 0));
        let c = split_cycle(&CycleInput {
            runqueue_wait: false,
            ..skewed
        });
        assert_eq!(
            (c.on_ns, c.runnable_ns, c.blocked_ns, c.uncharged_ns),
            (8 * MS - 4_000, 2 * MS, 4_000, 0)
        );
        // Without the counters nothing can be told apart.
        let c = split_cycle(&CycleInput {
            exec_known: false,
            delay_known: false,
            ..preempted
        });
        assert_eq!(c.uncharged_ns, 0);
    }
}
