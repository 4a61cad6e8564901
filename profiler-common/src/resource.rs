//! What a wait waits on: the file descriptor a thread blocked in a system call on, named by
//! the kernel at switch-out ([`Resource`], in [`crate::names::MAP_RESOURCES`]) and carried by
//! the wait's aggregate key as an id ([`crate::WaitKey::resource`]).
//!
//! The id is a class, not one open file: a file is its (device, inode); a TCP/UDP socket is
//! the service it talks to — the local address and port with the peer's address when the
//! local port is a listening one (a server's connections from one client host; user space
//! keeps the listening ports in [`crate::names::MAP_LISTENING`]), else the peer's address
//! and port (a client of a database, an upstream), or the local address and port of a
//! listener. A thread-per-request server's thousands of
//! connections are one resource; a pool's connections to one database are one resource.
//! A Unix socket or a pipe is its inode.

/// Offsets of the kernel structures read to name a wait's fd, from the running kernel's
/// BTF (Rust eBPF has no CO-RE). All 0 (and [`crate::config_flags::RESOURCES`] clear) when
/// one is missing.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FdOffsets {
    /// `task_struct.files`.
    pub task_files: u32,
    /// `files_struct.fdt`.
    pub files_fdt: u32,
    /// `fdtable.max_fds`, `fdtable.fd`.
    pub fdt_max_fds: u32,
    pub fdt_fd: u32,
    /// `file.f_inode`, `file.private_data` (a socket file's `struct socket`).
    pub file_inode: u32,
    pub file_private: u32,
    /// `inode.i_mode`, `inode.i_ino`, `inode.i_sb`.
    pub inode_mode: u32,
    pub inode_ino: u32,
    pub inode_sb: u32,
    /// `super_block.s_dev`.
    pub sb_dev: u32,
    /// `socket.sk`.
    pub socket_sk: u32,
    /// `sock.__sk_common`'s `skc_family`, `skc_daddr`, `skc_rcv_saddr`, `skc_dport`,
    /// `skc_num`, `skc_v6_daddr`, `skc_v6_rcv_saddr`, and `sock.sk_protocol`.
    pub sk_family: u32,
    pub sk_daddr: u32,
    pub sk_saddr: u32,
    pub sk_dport: u32,
    pub sk_num: u32,
    pub sk_v6_daddr: u32,
    pub sk_v6_saddr: u32,
    pub sk_protocol: u32,
    pub _pad: u32,
}

/// Value of [`crate::names::MAP_RESOURCES`]: one resource as first seen.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resource {
    /// A [`resource_kind`].
    pub kind: u32,
    /// The process and fd it was first seen at, and the system call.
    pub tgid: u32,
    pub fd: u32,
    pub syscall: u32,
    /// `i_mode` of its inode.
    pub mode: u32,
    /// `s_dev` of its file system (the kernel's encoding: major << 20 | minor).
    pub dev: u32,
    pub ino: u64,
    /// Sockets: `AF_*`, `IPPROTO_*`, local and peer ports (host order).
    pub family: u16,
    pub protocol: u16,
    pub local_port: u16,
    pub peer_port: u16,
    /// IPv4 in the first 4 bytes, else IPv6; network order.
    pub local_addr: [u8; 16],
    pub peer_addr: [u8; 16],
}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only integer fields, no padding holes (sizes checked in lib.rs).
unsafe impl aya::Pod for Resource {}

#[cfg(feature = "aya")]
// SAFETY: repr(C), only u32 fields.
unsafe impl aya::Pod for FdOffsets {}

pub mod resource_kind {
    pub const FILE: u32 = 1;
    pub const SOCKET: u32 = 2;
    pub const PIPE: u32 = 3;
    /// Character or block device, directory, eventfd and other anonymous inodes.
    pub const OTHER: u32 = 4;
}

/// The system calls whose wait is on the fd in their first argument (x86-64 numbers):
/// reads and writes, socket calls, syncs, file locks. `poll`/`ppoll` wait on one fd only
/// when given one (the caller checks `nfds`).
pub fn syscall_fd_arg(nr: u64) -> bool {
    matches!(
        nr,
        0 | 1 // read, write
            | 17..=20 // pread64, pwrite64, readv, writev
            | 40 // sendfile (out fd)
            | 42..=47 // connect, accept, sendto, recvfrom, sendmsg, recvmsg
            | 72..=75 // fcntl (F_SETLKW), flock, fsync, fdatasync
            | 77 // ftruncate
            | 275 // splice (in fd)
            | 277 // sync_file_range
            | 285 // fallocate
            | 288 // accept4
            | 295 | 296 // preadv, pwritev
            | 299 // recvmmsg
            | 307 // sendmmsg
            | 326..=328 // copy_file_range, preadv2, pwritev2
    )
}

/// `poll` and `ppoll`: their first argument is the user's `pollfd` array.
pub fn syscall_polls(nr: u64) -> bool {
    nr == 7 || nr == 271
}

/// `S_IFMT` and the file types of `i_mode` (include/uapi/linux/stat.h).
pub mod file_type {
    pub const MASK: u32 = 0o170000;
    pub const SOCKET: u32 = 0o140000;
    pub const REGULAR: u32 = 0o100000;
    pub const FIFO: u32 = 0o010000;
}
