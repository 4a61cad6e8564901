//! Waits whose stacks the unwinder cut short, placed at their thread's site. A JVM stack can
//! stop inside JIT code compiled since the code cache was last read, or at a frame named by
//! code the JIT since moved (`PatternsRequestCondition.<init>` above `Unsafe.park`): the wait
//! keeps its leaf frames and loses what it was for. When the same thread's whole stacks that
//! end with those leaf frames, in the same state, are nearly all at one site, the cut wait is
//! that site's; the report counts its time there and says how much was placed so
//! (`attributed_s`). The folded stacks and the flame graph keep the stacks as unwound.

use std::collections::HashMap;

use profiler_common::{WaitState, stack_id};

use crate::site::{SiteId, Sites};
use crate::{
    model::{Profile, StackNames, stack_frames},
    waits,
};

/// A thread's wait at a stack pair in a state.
pub type WaitKey = (u32, u64, u64, WaitState);

/// A wait and its time.
type TimedWait = (WaitKey, u64);

/// Cut waits and the site each was placed at.
pub type Attributed = HashMap<WaitKey, SiteId>;

/// The least share of the matching whole stacks' time one site must hold.
const DOMINANT: f64 = 0.8;
/// The fewest leaf frames a cut stack must keep to be matched.
const MIN_FRAMES: usize = 4;

/// Frames a whole stack starts with: a thread's start (or the process's).
const ROOTS: &[&str] = &[
    "clone3",
    "clone",
    "start_thread",
    "_start",
    "__libc_start_main",
    "thread_native_entry(Thread*)",
];

/// Every cut wait of a JVM thread that its thread's whole stacks place at one site.
pub fn attribute(profile: &Profile, names: &StackNames, sites: &Sites) -> Attributed {
    let mut frames: HashMap<u64, Vec<String>> = HashMap::new();
    let mut by_thread: HashMap<u32, Vec<TimedWait>> = HashMap::new();
    for e in &profile.entries {
        if let Some(state) = e.blocked_state() {
            frames
                .entry(e.user_stack)
                .or_insert_with(|| stack_frames(e.user_stack, stack_id::EMPTY, names));
            by_thread
                .entry(e.tid)
                .or_default()
                .push(((e.tid, e.user_stack, e.kernel_stack, state), e.time_ns));
        }
    }
    let mut site = |user: u64, kernel: u64, state: WaitState| -> Option<SiteId> {
        sites.at(&(user, kernel, state)).cloned()
    };
    let mut out = Attributed::new();
    for waits in by_thread.values() {
        let (cut, whole): (Vec<&TimedWait>, Vec<&TimedWait>) = waits
            .iter()
            .filter(|(k, _)| waits::is_jvm_stack(&frames[&k.1]))
            .partition(|(k, _)| is_cut(&frames[&k.1]));
        for entry in cut {
            if let Some(at) = placed(&entry.0, &whole, &frames, &mut site) {
                out.insert(entry.0, at);
            }
        }
    }
    out
}

/// A stack that does not start where a thread starts.
fn is_cut(frames: &[String]) -> bool {
    frames.first().is_none_or(|f| !ROOTS.contains(&f.as_str()))
}

/// The site the thread's whole stacks ending with the cut stack's leaf frames are nearly all
/// at, if one is.
fn placed(
    (_, user, _, state): &WaitKey,
    whole: &[&TimedWait],
    frames: &HashMap<u64, Vec<String>>,
    site: &mut impl FnMut(u64, u64, WaitState) -> Option<SiteId>,
) -> Option<SiteId> {
    let cut = &frames[user];
    // Its outermost frame may be the one the unwinder misread: only the frames after it.
    let leaf = cut.get(1..).filter(|l| l.len() >= MIN_FRAMES)?;
    let mut at: HashMap<SiteId, u64> = HashMap::new();
    for ((_, w_user, w_kernel, w_state), ns) in whole {
        if w_state == state
            && frames[w_user].ends_with(leaf)
            && let Some(id) = site(*w_user, *w_kernel, *state)
        {
            *at.entry(id).or_default() += ns;
        }
    }
    let total: u64 = at.values().sum();
    let (site, ns) = at
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))?;
    (total > 0 && ns as f64 >= DOMINANT * total as f64).then_some(site)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(frames: &[&str]) -> Vec<String> {
        frames.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_stacks_that_do_not_start_at_a_thread_start_are_cut() {
        assert!(!is_cut(&v(&[
            "clone3",
            "start_thread",
            "java.lang.Thread.run"
        ])));
        assert!(is_cut(&v(&[
            "org.springframework.web.servlet.mvc.condition.PatternsRequestCondition.<init>",
            "jdk.internal.misc.Unsafe.park",
        ])));
        assert!(is_cut(&[]));
    }
}
