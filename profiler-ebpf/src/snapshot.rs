//! Start-of-capture snapshot (task iterator, `iter/task`): for every thread of the target, its
//! state, name, saved user registers and kernel stack, written to the iterator's seq file.
//!
//! A thread blocked since before the capture produces no switch-out event, so without this its
//! wait would be invisible (BCC's offcputime shows nothing for it). User space unwinds the user
//! stack from the saved registers and seeds the thread's `THREADS` entry with what this
//! program reports.

use core::{ffi::c_void, mem::size_of};

use aya_ebpf::{
    bindings::pt_regs,
    helpers::{
        bpf_probe_read_kernel,
        generated::{bpf_get_task_stack, bpf_seq_write, bpf_task_pt_regs},
    },
    macros::map,
    maps::PerCpuArray,
};
use profiler_common::{COMM_LEN, MAX_STACK_DEPTH, TaskSnapshot};

use crate::{config, targets::is_target};

#[map]
static SNAPSHOT_SCRATCH: PerCpuArray<TaskSnapshot> = PerCpuArray::with_max_entries(1, 0);

const FRAMES_BYTES: u32 = (size_of::<u64>() * MAX_STACK_DEPTH) as u32;

/// `struct bpf_iter__task { struct bpf_iter_meta *meta; struct task_struct *task; }` and
/// `struct bpf_iter_meta { struct seq_file *seq; ... }` (kernel/bpf/task_iter.c): fixed layout
/// of the iterator context, no relocation needed.
const CTX_META: usize = 0;
const CTX_TASK: usize = 1;

/// aya-ebpf has no `#[iter]` macro yet; the section name is what makes this a task iterator.
///
/// # Safety
/// Called by the kernel with a `bpf_iter__task` context.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub unsafe extern "C" fn snapshot_tasks(ctx: *mut c_void) -> i32 {
    let ctx = ctx as *const *mut u8;
    // SAFETY: fixed context layout, see CTX_TASK.
    let task = unsafe { *ctx.add(CTX_TASK) };
    // The iterator ends with one call whose task is NULL; the verifier also insists on this
    // check before any use of `task`.
    if task.is_null() {
        return 0;
    }
    let cfg = config();
    // SAFETY: `task` is a live task_struct; the offsets come from this kernel's BTF.
    let Ok(tgid) =
        (unsafe { bpf_probe_read_kernel::<u32>(task.add(cfg.task_tgid_offset as usize).cast()) })
    else {
        return 0;
    };
    if !is_target(tgid) {
        return 0;
    }
    let Some(snap) = SNAPSHOT_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: per-CPU scratch owned by this program while it runs.
    let snap = unsafe { &mut *snap };
    // SAFETY (all reads below): fields of the live task and of its saved user registers.
    unsafe {
        snap.tid =
            bpf_probe_read_kernel(task.add(cfg.task_pid_offset as usize).cast()).unwrap_or(0);
        snap.tgid = tgid;
        snap.state =
            bpf_probe_read_kernel(task.add(cfg.task_state_offset as usize).cast()).unwrap_or(0);
        snap.comm =
            bpf_probe_read_kernel::<[u8; COMM_LEN]>(task.add(cfg.task_comm_offset as usize).cast())
                .unwrap_or([0; COMM_LEN]);
        snap.exec_ns =
            bpf_probe_read_kernel(task.add(cfg.task_exec_offset as usize).cast()).unwrap_or(0);
        snap.run_delay_ns =
            bpf_probe_read_kernel(task.add(cfg.task_run_delay_offset as usize).cast()).unwrap_or(0);
        snap.on_cpu =
            bpf_probe_read_kernel(task.add(cfg.task_on_cpu_offset as usize).cast()).unwrap_or(0);
        let regs = bpf_task_pt_regs(task.cast()) as *const pt_regs;
        snap.user_ip = bpf_probe_read_kernel(&(*regs).rip).unwrap_or(0);
        snap.user_sp = bpf_probe_read_kernel(&(*regs).rsp).unwrap_or(0);
        snap.user_bp = bpf_probe_read_kernel(&(*regs).rbp).unwrap_or(0);
        let ret = bpf_get_task_stack(
            task.cast(),
            snap.kernel_frames.as_mut_ptr().cast(),
            FRAMES_BYTES,
            0,
        );
        snap.kernel_len = if ret > 0 { ret as u64 / 8 } else { 0 };

        let meta = *ctx.add(CTX_META) as *const *mut c_void;
        let seq = *meta;
        bpf_seq_write(
            seq.cast(),
            (snap as *const TaskSnapshot).cast(),
            size_of::<TaskSnapshot>() as u32,
        );
    }
    0
}
