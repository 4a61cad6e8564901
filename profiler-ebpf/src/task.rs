//! Fields of a `task_struct`, at offsets user space read from this kernel's BTF (Rust eBPF has
//! no CO-RE relocations): the readers `switch`, `wakeup`, `targets` and `snapshot` share.

use aya_ebpf::helpers::bpf_probe_read_kernel;

/// Reads a field of a task_struct at an offset resolved from BTF.
///
/// # Safety
/// `task` must point at a live task_struct.
#[inline(always)]
pub(crate) unsafe fn read<T>(task: *const u8, offset: u32) -> Result<T, i32> {
    // SAFETY: the caller guarantees `task`; the helper faults safely on a bad address.
    unsafe { bpf_probe_read_kernel(task.add(offset as usize).cast()) }
}

/// Loads a field of a task_struct the tracepoint handed us, without a helper call: the
/// arguments of tp_btf programs are trusted BTF pointers, and the offset is a constant the
/// verifier knows (it reads it from our frozen `.rodata`), so it checks the access against
/// the field's type itself. Only for `u32`/`u64` fields.
///
/// # Safety
/// `task` must be a task_struct argument of the tracepoint and `offset` one of its fields of
/// type `T`.
#[inline(always)]
pub(crate) unsafe fn load<T: Copy>(task: *const u8, offset: u32) -> T {
    // SAFETY: as documented above.
    unsafe { core::ptr::read_volatile(task.add(offset as usize).cast::<T>()) }
}
