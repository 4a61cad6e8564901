//! What a thread going to sleep in a system call waits on: the fd in the call's first
//! argument, named from the task's fd table at switch-out (`Resource`, first sight only, in
//! `RESOURCES`) and carried with the wait as an id. Only for the calls that wait on their
//! first argument (`syscall_fd_arg`): an epoll or futex wait costs one register load here.
//!
//! Reads go through `bpf_probe_read_kernel`: the fd table is reached through an array
//! indexed by the fd, which the verifier does not let a BTF pointer walk, and a table being
//! resized under us reads as zeros or stale pointers, never as a fault.

use aya_ebpf::{
    bindings::pt_regs,
    helpers::{
        bpf_get_current_task_btf, bpf_probe_read_kernel, bpf_probe_read_user, bpf_task_pt_regs,
    },
    macros::map,
    maps::{Array, LruHashMap, PerCpuArray},
};
use profiler_common::{
    FdOffsets, HASH_SEED, Resource, file_type, hash_finish, hash_step, resource_kind,
    syscall_fd_arg, syscall_polls,
};

use crate::config;

/// Resources by id, as first seen. LRU: user space copies new ones out every tick, so an
/// entry evicted before that is only a name lost (4 096 × 72 bytes).
#[map]
static RESOURCES: LruHashMap<u64, Resource> = LruHashMap::with_max_entries(4_096, 0);

/// Per-CPU working space for a resource being named: off the 512-byte BPF stack.
#[map]
static NEW_RESOURCE: PerCpuArray<Resource> = PerCpuArray::with_max_entries(1, 0);

/// The TCP ports something listens on, one bit each (user space sets them from
/// /proc/net/tcp* before attaching and at every drain): an end on a listening port is a
/// server's, whatever the numbers (a service on a port above its clients' ephemeral ones).
#[map]
static LISTENING: Array<u64> = Array::with_max_entries(1024, 0);

/// `AF_INET`, `AF_INET6` (include/linux/socket.h).
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// The resource the current task waits on, if it sleeps in a system call on an fd: its id
/// (never 0), else 0. A global function: verified once, whatever path of `sched_switch`
/// reaches it; its locals live in its own frame.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn wait_resource(tgid: u32) -> u64 {
    let Some(fd) = syscall_fd() else {
        return 0;
    };
    let Some(slot) = NEW_RESOURCE.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: per-CPU working space, this program's alone while it runs.
    let r = unsafe { &mut *slot };
    let off = &config().fd;
    if describe(off, fd.0, r).is_none() {
        return 0;
    }
    r.tgid = tgid;
    r.fd = fd.0 as u32;
    r.syscall = fd.1 as u32;
    let id = class_id(r) | 1;
    // SAFETY: read-only lookup; the value is not kept.
    if unsafe { RESOURCES.get(&id) }.is_none() {
        // Full: LRU, the oldest name goes (user space has read it, most likely).
        let _ = RESOURCES.insert(&id, r, 0);
    }
    id
}

/// The fd and the system call, when the current task sleeps in one that waits on an fd.
#[inline(always)]
fn syscall_fd() -> Option<(i64, u64)> {
    // SAFETY: the current task always exists; its user registers sit at the top of its
    // kernel stack.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) as *const pt_regs };
    if regs.is_null() {
        return None;
    }
    // Plain loads: a BTF pointer the verifier lets us read (faults read as zero).
    // SAFETY: checked non-null above.
    let (nr, arg0, arg1) = unsafe {
        (
            core::ptr::read_volatile(&(*regs).orig_rax),
            core::ptr::read_volatile(&(*regs).rdi),
            core::ptr::read_volatile(&(*regs).rsi),
        )
    };
    let fd = if syscall_fd_arg(nr) {
        arg0 as i64
    } else if syscall_polls(nr) && arg1 == 1 {
        // `struct pollfd { int fd; short events; short revents; }`: its fd is first.
        // SAFETY: the helper reads user memory safely.
        unsafe { bpf_probe_read_user(arg0 as *const i32) }.ok()? as i64
    } else {
        return None;
    };
    (0..(1 << 20)).contains(&fd).then_some((fd, nr))
}

/// Reads `*(base + offset)` of kernel memory.
#[inline(always)]
fn at<T>(base: u64, offset: u32) -> Option<T> {
    if base == 0 {
        return None;
    }
    // SAFETY: the helper faults safely on any address.
    unsafe { bpf_probe_read_kernel((base + offset as u64) as *const T) }.ok()
}

/// Fills `r` (but its owner) from the current task's fd `fd`.
#[inline(always)]
fn describe(off: &FdOffsets, fd: i64, r: &mut Resource) -> Option<()> {
    let task = unsafe { bpf_get_current_task_btf() } as u64;
    let files: u64 = at(task, off.task_files)?;
    let fdt: u64 = at(files, off.files_fdt)?;
    let max_fds: u32 = at(fdt, off.fdt_max_fds)?;
    if fd as u64 >= max_fds as u64 {
        return None;
    }
    let array: u64 = at(fdt, off.fdt_fd)?;
    let file: u64 = at(array, (fd as u32) * 8)?;
    let inode: u64 = at(file, off.file_inode)?;
    let mode: u16 = at(inode, off.inode_mode)?;
    r.mode = mode as u32;
    r.ino = at(inode, off.inode_ino)?;
    r.family = 0;
    r.protocol = 0;
    r.local_port = 0;
    r.peer_port = 0;
    r.local_addr = [0; 16];
    r.peer_addr = [0; 16];
    match r.mode & file_type::MASK {
        file_type::SOCKET => {
            r.kind = resource_kind::SOCKET;
            r.dev = 0;
            let socket: u64 = at(file, off.file_private)?;
            let sk: u64 = at(socket, off.socket_sk)?;
            socket_ends(off, sk, r);
        }
        t => {
            r.kind = match t {
                file_type::REGULAR => resource_kind::FILE,
                file_type::FIFO => resource_kind::PIPE,
                _ => resource_kind::OTHER,
            };
            let sb: u64 = at(inode, off.inode_sb)?;
            r.dev = at(sb, off.sb_dev)?;
        }
    }
    Some(())
}

/// A socket's family, protocol and both ends (IPv4 and IPv6; others by inode only).
#[inline(always)]
fn socket_ends(off: &FdOffsets, sk: u64, r: &mut Resource) {
    r.family = at(sk, off.sk_family).unwrap_or(0);
    r.protocol = at(sk, off.sk_protocol).unwrap_or(0);
    // `skc_dport` is in network order, `skc_num` in host order.
    r.peer_port = u16::from_be(at(sk, off.sk_dport).unwrap_or(0));
    r.local_port = at(sk, off.sk_num).unwrap_or(0);
    if r.family == AF_INET {
        let peer: [u8; 4] = at(sk, off.sk_daddr).unwrap_or([0; 4]);
        let local: [u8; 4] = at(sk, off.sk_saddr).unwrap_or([0; 4]);
        r.peer_addr[..4].copy_from_slice(&peer);
        r.local_addr[..4].copy_from_slice(&local);
    } else if r.family == AF_INET6 {
        r.peer_addr = at(sk, off.sk_v6_daddr).unwrap_or([0; 16]);
        r.local_addr = at(sk, off.sk_v6_saddr).unwrap_or([0; 16]);
    }
}

/// The id of what `r` is a case of (see `profiler_common::resource`): the service end of an
/// IP socket (this end's when it is on a listening port, else the peer's), else the inode.
#[inline(always)]
fn class_id(r: &Resource) -> u64 {
    let mut h = hash_step(HASH_SEED, r.kind as u64);
    if r.kind == resource_kind::SOCKET && (r.family == AF_INET || r.family == AF_INET6) {
        h = hash_step(h, (r.family as u64) << 16 | r.protocol as u64);
        let (peer_lo, peer_hi) = halves(&r.peer_addr);
        let (local_lo, local_hi) = halves(&r.local_addr);
        if r.peer_port != 0 && !listening(r.local_port) {
            // A client: the service it calls.
            h = hash_step(hash_step(hash_step(h, 1), peer_lo), peer_hi);
            h = hash_step(h, r.peer_port as u64);
        } else {
            // A server's connections from one host, or a listener (no peer).
            h = hash_step(hash_step(hash_step(h, 2), local_lo), local_hi);
            h = hash_step(h, r.local_port as u64);
            h = hash_step(hash_step(h, peer_lo), peer_hi);
        }
    } else {
        h = hash_step(hash_step(h, r.dev as u64), r.ino);
    }
    hash_finish(h)
}

/// Whether `port` is a listening TCP port (see [`LISTENING`]).
#[inline(always)]
fn listening(port: u16) -> bool {
    LISTENING
        .get(u32::from(port / 64))
        .is_some_and(|word| word & (1 << (port % 64)) != 0)
}

#[inline(always)]
fn halves(addr: &[u8; 16]) -> (u64, u64) {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&addr[..8]);
    hi.copy_from_slice(&addr[8..]);
    (u64::from_ne_bytes(lo), u64::from_ne_bytes(hi))
}
