//! Kernel facts the eBPF programs cannot learn themselves: Rust eBPF has no CO-RE relocations,
//! so the `task_struct` field offsets come from the running kernel's BTF here and are handed
//! to the programs as load-time globals.

use std::path::Path;

use crate::kernel::vmlinux_btf::Btf;
use profiler_common::{FdOffsets, IRQ_ENTRY_RANGES};
use thiserror::Error;

use profiler_core::model::named::is_interrupt_entry;

/// Path of the running kernel's BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

#[derive(Debug, Error)]
pub enum KernelError {
    #[error("cannot read kernel BTF from {path}: {message}")]
    Btf { path: String, message: String },
    #[error("kernel BTF has no `struct {0}`")]
    NoStruct(&'static str),
    #[error("kernel BTF has no field `{field}` in `struct {ty}`")]
    NoField {
        ty: &'static str,
        field: &'static str,
    },
}

/// Byte offsets of the `task_struct` fields the programs read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskOffsets {
    pub pid: u32,
    pub tgid: u32,
    pub comm: u32,
    pub state: u32,
    /// `se.sum_exec_runtime`.
    pub exec: u32,
    /// `sched_info.run_delay` (CONFIG_SCHED_INFO: the time a task waited on a run queue).
    pub run_delay: u32,
    /// `on_cpu`.
    pub on_cpu: u32,
    /// `start_time`: the task's creation, CLOCK_MONOTONIC ns.
    pub start_time: u32,
    /// How to reach this CPU's preempt count; `None` on a kernel whose BTF lacks a piece of
    /// it (no `cfs_rq.rq` without CONFIG_FAIR_GROUP_SCHED): wakers are then told apart by
    /// their kernel stacks, at a higher cost.
    pub preempt_count: Option<PreemptCountPath>,
    /// Where a sleeping task's fd is named (`profiler_common::FdOffsets`); `None` on a
    /// kernel whose BTF lacks a piece of it: waits are then recorded without their resource.
    pub fd: Option<FdOffsets>,
}

/// `current->se.cfs_rq->rq` is the current CPU's `runqueues`, a per-CPU variable; the per-CPU
/// area's layout gives `__preempt_count`'s distance from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreemptCountPath {
    /// `offsetof(struct task_struct, se.cfs_rq)`.
    pub task_cfs_rq: u32,
    /// `offsetof(struct cfs_rq, rq)`.
    pub cfs_rq_rq: u32,
    /// Offsets of `runqueues` and `__preempt_count` in `.data..percpu`.
    pub percpu_runqueues: u32,
    pub percpu_preempt_count: u32,
}

/// The highest process id plus one (`/proc/sys/kernel/pid_max`; 4194304, the most it can be
/// on 64-bit, if unreadable): the size of the target bitmap.
pub fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4_194_304)
}

/// The running kernel's release (`uname -r`), for the report.
pub fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

pub fn task_offsets(btf_path: &Path) -> Result<TaskOffsets, KernelError> {
    let error = |message: String| KernelError::Btf {
        path: btf_path.display().to_string(),
        message,
    };
    let bytes = std::fs::read(btf_path).map_err(|e| error(e.to_string()))?;
    let btf = Btf::parse(&bytes).map_err(error)?;
    let task = btf
        .find_struct("task_struct")
        .ok_or(KernelError::NoStruct("task_struct"))?;
    let missing = |field| KernelError::NoField {
        ty: "task_struct",
        field,
    };
    let field = |name: &'static str| {
        btf.member(task, name)
            .map(|(off, _)| off)
            .ok_or(missing(name))
    };
    let (se_off, se) = btf.member(task, "se").ok_or(missing("se"))?;
    let in_entity = |name: &str| Some(se_off + btf.member(se, name)?.0);
    let exec = in_entity("sum_exec_runtime").ok_or(missing("se.sum_exec_runtime"))?;
    let (si_off, si) = btf
        .member(task, "sched_info")
        .ok_or(missing("sched_info (CONFIG_SCHED_INFO)"))?;
    let run_delay = btf
        .member(si, "run_delay")
        .map(|(off, _)| si_off + off)
        .ok_or(missing("sched_info.run_delay"))?;
    let preempt_count = (|| {
        let cfs_rq = btf.find_struct("cfs_rq")?;
        let percpu = btf.section_offsets(".data..percpu", &["runqueues", "__preempt_count"])?;
        Some(PreemptCountPath {
            task_cfs_rq: in_entity("cfs_rq")?,
            cfs_rq_rq: btf.member(cfs_rq, "rq")?.0,
            percpu_runqueues: percpu[0],
            percpu_preempt_count: percpu[1],
        })
    })();
    Ok(TaskOffsets {
        pid: field("pid")?,
        tgid: field("tgid")?,
        comm: field("comm")?,
        // Renamed from `state` in 5.14.
        state: field("__state").or_else(|_| field("state"))?,
        exec,
        run_delay,
        on_cpu: field("on_cpu")?,
        start_time: field("start_time")?,
        preempt_count,
        fd: fd_offsets(&btf, task),
    })
}

/// The offsets of the fd table, file, inode and socket fields a wait's resource is named
/// from; None if any is missing.
fn fd_offsets(btf: &Btf, task: u32) -> Option<FdOffsets> {
    let member = |ty: &str, field: &str| -> Option<u32> {
        let id = btf.find_struct(ty)?;
        Some(btf.member(id, field)?.0)
    };
    let common = member("sock", "__sk_common")?;
    let in_common = |field: &str| Some(common + member("sock_common", field)?);
    Some(FdOffsets {
        task_files: btf.member(task, "files")?.0,
        files_fdt: member("files_struct", "fdt")?,
        fdt_max_fds: member("fdtable", "max_fds")?,
        fdt_fd: member("fdtable", "fd")?,
        file_inode: member("file", "f_inode")?,
        file_private: member("file", "private_data")?,
        inode_mode: member("inode", "i_mode")?,
        inode_ino: member("inode", "i_ino")?,
        inode_sb: member("inode", "i_sb")?,
        sb_dev: member("super_block", "s_dev")?,
        socket_sk: member("socket", "sk")?,
        sk_family: in_common("skc_family")?,
        sk_daddr: in_common("skc_daddr")?,
        sk_saddr: in_common("skc_rcv_saddr")?,
        sk_dport: in_common("skc_dport")?,
        sk_num: in_common("skc_num")?,
        sk_v6_daddr: in_common("skc_v6_daddr")?,
        sk_v6_saddr: in_common("skc_v6_rcv_saddr")?,
        // A u16 of its own since 5.6 (a bitfield before: not read then).
        sk_protocol: member("sock", "sk_protocol")?,
        _pad: 0,
    })
}

/// The interrupt entry ranges the programs are loaded with, from /proc/kallsyms (none when
/// it cannot be read). Only waker kernel stacks stop at an interrupt entry: with `--wakers`
/// (`waker_stacks`), or where the preempt count cannot tell an interrupt. Reading
/// /proc/kallsyms costs ~0.1 s of CPU, so it is read only then.
pub fn interrupt_entries(waker_stacks: bool, offsets: &TaskOffsets) -> [u64; 2 * IRQ_ENTRY_RANGES] {
    if !waker_stacks && offsets.preempt_count.is_some() {
        return Default::default();
    }
    std::fs::read_to_string("/proc/kallsyms")
        .map(|text| interrupt_entry_ranges(&text))
        .unwrap_or_default()
}

/// Where interrupt entry code lies in kernel text, as `[start, end)` pairs flattened into
/// `[s0, e0, s1, e1, …]` (unused pairs are zero): the waker probe stops a waker's kernel stack
/// at the first such frame, because what the interrupted task was doing below it is not part
/// of the wakeup — and unwinding it cost ~12 µs per wakeup here (sched_wakeup from an IPI
/// deep in another task's stack). Runs of adjacent entry symbols become one range; ranges
/// beyond the first [`IRQ_ENTRY_RANGES`] are left out (those stacks are then taken whole).
pub fn interrupt_entry_ranges(kallsyms: &str) -> [u64; 2 * IRQ_ENTRY_RANGES] {
    let mut symbols: Vec<(u64, &str)> = kallsyms
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
            let _kind = parts.next()?;
            let name = parts.next()?;
            // Module symbols carry `[module]`: interrupt entries live in the core kernel.
            (parts.next().is_none() && addr != 0).then_some((addr, name))
        })
        .collect();
    symbols.sort_unstable();
    let mut ranges = [0u64; 2 * IRQ_ENTRY_RANGES];
    let mut used = 0;
    let mut run_start = None;
    for (i, &(addr, name)) in symbols.iter().enumerate() {
        // Symbols at the same address (aliases) belong to the run the first of them decided.
        if i > 0 && symbols[i - 1].0 == addr {
            continue;
        }
        let entry = is_interrupt_entry(name)
            || symbols[i + 1..]
                .iter()
                .take_while(|(a, _)| *a == addr)
                .any(|(_, n)| is_interrupt_entry(n));
        match (entry, run_start) {
            (true, None) => run_start = Some(addr),
            (false, Some(start)) => {
                if used < IRQ_ENTRY_RANGES {
                    ranges[2 * used] = start;
                    ranges[2 * used + 1] = addr;
                    used += 1;
                }
                run_start = None;
            }
            _ => {}
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupt_entries_become_ranges_up_to_the_next_symbol() {
        let kallsyms = "\
ffffffff81000c60 T asm_exc_page_fault
ffffffff81000d40 T asm_common_interrupt
ffffffff81000d80 T asm_spurious_interrupt
ffffffff81000db0 T asm_sysvec_error_interrupt
ffffffff81000e70 T asm_sysvec_call_function_single
ffffffff81000f70 T __irqentry_text_end
ffffffff81360020 T handle_softirqs
ffffffff81360020 t handle_softirqs_alias
ffffffff81360300 T irq_enter_rcu
ffffffffc0000000 t helper\t[some_module]
0000000000000000 A fixed_percpu_data
";
        let r = interrupt_entry_ranges(kallsyms);
        assert_eq!(
            r,
            [
                0xffffffff81000d40,
                0xffffffff81000f70,
                0xffffffff81360020,
                0xffffffff81360300,
                0,
                0,
                0,
                0
            ]
        );
    }

    #[test]
    fn this_kernel_has_interrupt_entries() {
        let Ok(text) = std::fs::read_to_string("/proc/kallsyms") else {
            return;
        };
        let r = interrupt_entry_ranges(&text);
        // Without root kallsyms shows zero addresses, which are skipped.
        if text
            .lines()
            .next()
            .is_some_and(|l| l.starts_with("0000000000000000"))
        {
            assert_eq!(r, [0; 2 * IRQ_ENTRY_RANGES]);
            return;
        }
        assert!(r[0] != 0 && r[0] < r[1], "{r:x?}");
    }

    #[test]
    fn running_kernel_task_struct_offsets_are_plausible() {
        let path = Path::new(VMLINUX_BTF);
        if !path.exists() {
            eprintln!("skipping: {} is missing on this machine", path.display());
            return;
        }
        let off = task_offsets(path).unwrap();
        // pid and tgid are adjacent pid_t fields in every kernel since 2.6.
        assert_eq!(off.tgid, off.pid + 4);
        assert!(off.comm > off.tgid, "{off:?}");
        assert!(off.state < off.pid, "{off:?}");
        assert!(
            off.exec > off.state && off.exec.is_multiple_of(8),
            "{off:?}"
        );
        // This machine's kernel has CONFIG_FAIR_GROUP_SCHED: the preempt count is reachable.
        let p = off.preempt_count.expect("a path to the preempt count");
        assert!(
            p.task_cfs_rq > off.state && p.task_cfs_rq.is_multiple_of(8),
            "{p:?}"
        );
        assert!(p.percpu_runqueues != p.percpu_preempt_count, "{p:?}");
    }
}
