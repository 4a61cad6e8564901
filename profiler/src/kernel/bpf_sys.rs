//! The raw `bpf(2)` commands aya 0.14 does not offer: element updates and deletes on a map
//! the programs' own loader holds (to fill each CPU's allocator cache before attach,
//! probes.rs) and the batch commands that read and empty a map in a few calls (drain.rs).
//! One wrapper: each command's `union bpf_attr` member is a `#[repr(C)]` struct below.

use std::{io, os::fd::RawFd};

pub const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
pub const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
pub const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
pub const BPF_MAP_LOOKUP_AND_DELETE_BATCH: libc::c_long = 25;
pub const BPF_MAP_DELETE_BATCH: libc::c_long = 27;

/// A `union bpf_attr` member (include/uapi/linux/bpf.h): `#[repr(C)]`, its pointers valid
/// for the command it is passed with.
///
/// # Safety
/// Implementors are `#[repr(C)]` prefixes of `union bpf_attr` for their commands.
pub unsafe trait Attr {}

/// The element commands' member.
#[repr(C)]
#[derive(Default)]
pub struct ElemAttr {
    pub map_fd: u32,
    _pad: u32,
    pub key: u64,
    pub value: u64,
    pub flags: u64,
}

// SAFETY: the `map_fd, key, value, flags` member, as the kernel lays it out.
unsafe impl Attr for ElemAttr {}

/// The `BPF_MAP_*_BATCH` commands' member.
#[repr(C)]
#[derive(Default)]
pub struct BatchAttr {
    pub in_batch: u64,
    pub out_batch: u64,
    pub keys: u64,
    pub values: u64,
    pub count: u32,
    pub map_fd: u32,
    pub elem_flags: u64,
    pub flags: u64,
}

// SAFETY: the `batch` member, as the kernel lays it out.
unsafe impl Attr for BatchAttr {}

/// `bpf(cmd, attr, sizeof attr)`.
///
/// # Safety
/// `attr`'s pointers must point at buffers of the sizes `cmd` reads and writes for its map,
/// alive for the call.
pub unsafe fn bpf<A: Attr>(cmd: libc::c_long, attr: &mut A) -> io::Result<()> {
    // SAFETY: `attr` is a valid `bpf_attr` member for `cmd` (the trait), its pointers valid
    // (the caller), and the size passed is its own.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut A,
            std::mem::size_of::<A>() as u32,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// One element command on map `fd`: `key` (and `value`) of the map's sizes.
pub fn elem(cmd: libc::c_long, fd: RawFd, key: &[u8], value: Option<&[u8]>) -> io::Result<()> {
    let mut attr = ElemAttr {
        map_fd: fd as u32,
        key: key.as_ptr() as u64,
        value: value.map_or(0, |v| v.as_ptr() as u64),
        ..ElemAttr::default()
    };
    // SAFETY: the key and the value are the map's sizes (the caller's contract, checked by
    // the kernel against the map), alive for the call.
    unsafe { bpf(cmd, &mut attr) }
}
