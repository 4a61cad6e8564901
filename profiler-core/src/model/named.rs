//! Named stacks: what symbolization produces, and the naming rules fold and render share
//! (which frames a stack shows, who a waker is).

use std::{collections::HashMap, sync::Arc};

use profiler_common::{stack_id, waker_context};
use serde::{Deserialize, Serialize};

use super::Waker;

/// A frame's name; shared, since most frames repeat across stacks.
pub type Name = Arc<str>;

/// Named frames (root→leaf) for the stack ids of a profile.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StackNames {
    pub user: HashMap<u64, Vec<Name>>,
    pub kernel: HashMap<u64, Vec<Name>>,
    /// Per user stack, root→leaf like `user`, the index in `files` of the file each frame
    /// lies in (`NO_FILE`: JIT code, anonymous memory, an unmapped address). Empty in
    /// captures saved before files were recorded.
    #[serde(default)]
    pub user_files: HashMap<u64, Vec<u32>>,
    #[serde(default)]
    pub files: Vec<FrameFile>,
}

/// A frame that lies in no file.
pub const NO_FILE: u32 = u32::MAX;

/// A file user frames lie in, as outputs that name it show it (pprof's mappings).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameFile {
    /// The path the process mapped it by.
    pub path: String,
    /// Its GNU build ID in hex; empty when it has none or could not be read.
    pub build_id: String,
}

/// User then kernel frames, root→leaf, of a pair of stack ids, as folded lines show them.
pub fn stack_frames(user_stack: u64, kernel_stack: u64, names: &StackNames) -> Vec<String> {
    let mut frames = Vec::new();
    push_side(&mut frames, user_stack, &names.user, "user");
    push_side(&mut frames, kernel_stack, &names.kernel, "kernel");
    frames
}

fn push_side(frames: &mut Vec<String>, id: u64, names: &HashMap<u64, Vec<Name>>, side: &str) {
    match id {
        stack_id::EMPTY => {}
        stack_id::LOST_FETCH => frames.push(format!("[{side} stack unavailable]")),
        stack_id::LOST_TABLE_FULL => frames.push(format!("[{side} stack lost: stack table full]")),
        stack_id::UNSAMPLED => frames.push("[on-cpu: between samples]".into()),
        stack_id::FOREIGN => frames.push("[user stack of another process]".into()),
        stack_id::SWITCHING_IN => frames.push("[on-cpu: switching in]".into()),
        stack_id::PROFILER => frames.push("[profiler overhead]".into()),
        stack_id::UNCHARGED => frames.push("[held the CPU, not charged: hypervisor steal]".into()),
        stack_id::LOST_WAITS => frames.push("[waits lost: wait table full]".into()),
        _ => match names.get(&id) {
            Some(named) => frames.extend(named.iter().map(|n| sanitize(n))),
            None => frames.push(format!("[{side} stack missing]")),
        },
    }
}

/// Frame names must not contain the separators of the folded format (Java perf-map names do
/// contain `;`).
pub fn sanitize(name: &str) -> String {
    if name.contains([';', '\n', '\r']) {
        name.replace(';', ":").replace(['\n', '\r'], " ")
    } else {
        name.to_string()
    }
}

/// Interrupt entry frames: a wakeup below one of these ran in interrupt context (a timer
/// expiring, a packet arriving, another CPU's wakeup arriving as an IPI), whatever task the
/// CPU happened to be running.
pub fn is_interrupt_entry(frame: &str) -> bool {
    frame.starts_with("asm_sysvec_")
        || frame.starts_with("asm_common_interrupt")
        || frame.starts_with("asm_spurious_interrupt")
        || frame.starts_with("handle_softirqs")
        || frame.starts_with("__do_softirq")
}

/// Who a waker really is. A wakeup from interrupt context (a timer expiring, a packet
/// arriving) runs on whatever task the CPU was running: that task did not wake anyone, so
/// such wakers are named after the interrupt and lose the interrupted task's user stack.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WakerIdentity {
    pub name: String,
    pub tid: u32,
    pub pid: u32,
    pub interrupt: bool,
}

/// A waker's frames root→leaf. An interrupt's stack starts at its entry: what the CPU was
/// running before is not part of the wakeup.
pub fn waker_frames(w: &Waker, who: &WakerIdentity, names: &StackNames) -> Vec<String> {
    if !who.interrupt {
        return stack_frames(w.waker_user_stack, w.waker_kernel_stack, names);
    }
    let mut frames = stack_frames(stack_id::EMPTY, w.waker_kernel_stack, names);
    if let Some(entry) = frames.iter().position(|f| is_interrupt_entry(f)) {
        frames.drain(..entry);
    }
    frames
}

pub fn waker_identity(w: &Waker, names: &StackNames) -> WakerIdentity {
    let kernel = names.kernel.get(&w.waker_kernel_stack);
    let has = |pred: &dyn Fn(&str) -> bool| kernel.is_some_and(|k| k.iter().any(|f| pred(f)));
    // The probe read the preempt count; without it, an interrupt shows by its entry frame.
    let interrupt = match w.waker_context {
        waker_context::TASK => false,
        waker_context::SOFTIRQ | waker_context::HARDIRQ => true,
        _ => has(&is_interrupt_entry),
    };
    if interrupt {
        let name = if has(&|f| f.starts_with("hrtimer_wakeup")) {
            "[timer interrupt]"
        } else {
            "[interrupt]"
        };
        return WakerIdentity {
            name: name.into(),
            tid: 0,
            pid: 0,
            interrupt: true,
        };
    }
    WakerIdentity {
        name: if w.waker_name.is_empty() {
            "?".into()
        } else {
            w.waker_name.clone()
        },
        tid: w.waker_tid,
        pid: w.waker_pid,
        interrupt: false,
    }
}
