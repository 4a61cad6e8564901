//! On-CPU sampling: a software cpu-clock perf event on every CPU runs this program; it keeps
//! samples of the target's threads only, aggregated per (tid, user stack, kernel stack).

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::perf_event,
    programs::PerfEventContext,
};
use aya_log_ebpf::debug;
use profiler_common::{BPF_NOEXIST, Counter, SampleKey, SampleValue, config_flags, stack_id};

use crate::{
    config, late,
    maps::{
        SAMPLES, Scratch, THREADS, capture_start, count, insert_thread, new_thread, opaque, parity,
    },
    stack,
    targets::is_target,
    timeline, unwind,
};

#[perf_event]
pub fn on_cpu_sample(ctx: PerfEventContext) -> u32 {
    let cfg = config();
    let pid_tgid = bpf_get_current_pid_tgid();
    // Foreign processes leave after one comparison.
    if !is_target((pid_tgid >> 32) as u32) {
        return 0;
    }
    if capture_start().is_none() {
        return 0;
    }
    // SAFETY: no preconditions.
    let started = unsafe { bpf_ktime_get_ns() };
    let tid = pid_tgid as u32;
    let tgid = (pid_tgid >> 32) as u32;
    if count(Counter::Samples) == 0 {
        debug!(
            &ctx,
            "first on-CPU sample of the target on this CPU (tid {})", tid
        );
    }

    let kernel_stack = if cfg.flags & config_flags::KERNEL_STACKS != 0 {
        sample_kernel_stack(&ctx)
    } else {
        stack_id::EMPTY
    };
    // SAFETY: `ctx` points at the kernel's `bpf_perf_event_data`; `sample_period` is a plain
    // field the verifier lets perf_event programs read.
    let period_ns = unsafe { (*ctx.ctx).sample_period };
    // A process exec'd moments ago: its stack goes to user space whole, to be unwound once its
    // table is in.
    let late = config_flags::USER_STACKS | config_flags::DWARF_UNWIND;
    if cfg.flags & late == late
        && !unwind::has_table()
        && late::record(&ctx, tid, tgid, kernel_stack, period_ns)
    {
        remember_thread(cfg.flags, tid, tgid, started);
        return 0;
    }
    let user_stack = if cfg.flags & config_flags::USER_STACKS != 0 {
        sample_user_stack(&ctx)
    } else {
        stack_id::EMPTY
    };

    let key = SampleKey {
        tid,
        epoch: parity(),
        user_stack,
        kernel_stack,
    };
    match SAMPLES.get_ptr_mut(&key) {
        // SAFETY: one thread runs on one CPU at a time, so no other program updates this key
        // concurrently.
        Some(value) => unsafe {
            (*value).count += 1;
            (*value).period_ns += period_ns;
        },
        None => {
            let value = SampleValue {
                count: 1,
                period_ns,
            };
            if SAMPLES.insert(&key, &value, BPF_NOEXIST).is_err()
                && count(Counter::SamplesMapFull) == 0
            {
                debug!(&ctx, "sample map full: raise --max-samples");
            }
        }
    }

    if cfg.flags & config_flags::TIMELINE != 0 {
        timeline::record_sample(tid, started, user_stack, kernel_stack);
    }
    remember_thread(cfg.flags, tid, tgid, started);
    0
}

/// Out of line (a BPF subprogram), as `switch`'s stack takers: the verifier then checks what
/// follows once, not once per path through the stack code.
#[inline(never)]
fn sample_kernel_stack(ctx: &PerfEventContext) -> u64 {
    opaque(stack::kernel_stack(ctx, Scratch::Sample))
}

#[inline(never)]
fn sample_user_stack(ctx: &PerfEventContext) -> u64 {
    opaque(stack::user_stack(ctx, Scratch::Sample, Some(ctx.ctx), None))
}

/// Keeps the thread's current name (threads often rename themselves right after they start)
/// and charges this program's time to the profiler: the kernel charges it to the thread.
#[inline(always)]
fn remember_thread(flags: u32, tid: u32, tgid: u32, started: u64) {
    let Ok(comm) = bpf_get_current_comm() else {
        return;
    };
    match THREADS.get_ptr_mut(&tid) {
        // SAFETY: only this thread's own events write its entry's name and overhead.
        Some(thread) => unsafe {
            (*thread).stats.comm = comm;
            (*thread).stats.overhead_ns += bpf_ktime_get_ns().saturating_sub(started);
        },
        // With switches traced, entries come from the switch programs and the start snapshot,
        // which give them their time baseline.
        None if flags & config_flags::SWITCHES != 0 => {}
        None => {
            // In map memory: a `Thread` on the stack took 200 of the 512 bytes this program
            // shares with the unwinder it calls.
            let Some(thread) = new_thread(Scratch::Sample) else {
                return;
            };
            thread.stats.comm = comm;
            thread.stats.tgid = tgid;
            insert_thread(tid, thread);
        }
    }
}
