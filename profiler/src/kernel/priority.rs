//! Start-up ahead of a busy machine's threads. Before its window opens the profiler needs
//! ~0.3 s of CPU, most of it the kernel verifying its programs; on a machine whose CPUs are
//! saturated (the usual reason to profile) it gets a thread's fair share of them, and eight
//! busy threads on two CPUs made that 1.8 s of wall time. It runs at nice −10 until the
//! window opens, then every one of its threads goes back to the nice it was started with, so
//! the capture and the post-processing take no more than their share. The CPU spent is the
//! same, only sooner. A command launched with `--` execs with the original nice.
//!
//! The drainer keeps the boost for the whole capture (its thread alone): its work is bounded
//! by what the probes wrote, and a drainer waiting its turn behind a saturated machine's
//! threads lets the tables fill and lose records. A 64-thread target beside 8 spinners on 2
//! CPUs: 20 drains in 4 s took 0.07–0.10 s of wall time boosted, 0.20–0.29 s at the spinners'
//! nice (0.04–0.05 s of CPU either way). At the extreme, a 5 000-thread Python process with
//! ~1 450 threads runnable: 5 drains in 4 s unboosted, 6–7 at −10, 23 at −20 — the losses
//! there are counted and reported, not avoided.

use std::sync::atomic::{AtomicI32, Ordering};

/// How much higher than the start nice the start-up runs.
const BOOST: i32 = 10;
/// `ORIGINAL_NICE` when nothing was changed.
const UNCHANGED: i32 = i32::MIN;

/// The nice the profiler was started with, while its start-up runs higher.
static ORIGINAL_NICE: AtomicI32 = AtomicI32::new(UNCHANGED);

/// Raises the calling thread's priority (threads it creates inherit it). Without the right to
/// (no `CAP_SYS_NICE`), nothing changes.
pub fn boost() {
    if let Some((original, boosted)) = raise_calling_thread() {
        ORIGINAL_NICE.store(original, Ordering::Relaxed);
        log::debug!("start-up at nice {boosted} (started at {original})");
    }
}

/// Raises the calling thread's priority for good (the drainer's thread), whatever
/// [`end_boost`] does to the others later.
pub fn boost_this_thread(what: &str) {
    if let Some((original, boosted)) = raise_calling_thread() {
        log::debug!("{what} at nice {boosted} (started at {original})");
    }
}

/// Sets the calling thread's nice `BOOST` lower: the nice it had and the new one, or None
/// where it could not be read or raised.
fn raise_calling_thread() -> Option<(i32, i32)> {
    // getpriority may return -1 as a nice value: errno tells.
    // SAFETY: plain syscalls on the calling thread (Linux keeps a nice per thread); errno is
    // thread-local.
    let original = unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        if nice == -1 && *libc::__errno_location() != 0 {
            return None;
        }
        nice
    };
    let boosted = (original - BOOST).max(-20);
    if boosted >= original {
        return None;
    }
    // SAFETY: as above.
    (unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, boosted) } == 0)
        .then_some((original, boosted))
}

/// The nice to give a process the profiler forks now (None: unchanged, nothing to do).
pub fn original() -> Option<i32> {
    let nice = ORIGINAL_NICE.load(Ordering::Relaxed);
    (nice != UNCHANGED).then_some(nice)
}

/// Puts every thread of the profiler back at its start nice.
pub fn end_boost() {
    let Some(nice) = original() else {
        return;
    };
    // Linux keeps a nice per thread: each one is set.
    let tids = std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.parse::<libc::id_t>().ok())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for tid in tids {
        // SAFETY: a plain syscall; a thread gone since the listing only fails it.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) };
    }
    ORIGINAL_NICE.store(UNCHANGED, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nice_of(tid: libc::id_t) -> i32 {
        // SAFETY: a plain syscall.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) }
    }

    fn gettid() -> libc::id_t {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() as libc::id_t }
    }

    #[test]
    fn a_boost_ends_on_every_thread_it_reached() {
        // On its own thread: the test harness's threads are not touched by the boost.
        std::thread::spawn(|| {
            let start = nice_of(0);
            boost();
            let Some(started_at) = original() else {
                // Not allowed to raise a priority (not root): nothing changed.
                assert_eq!(nice_of(0), start);
                return;
            };
            assert_eq!(started_at, start);
            assert_eq!(nice_of(0), (start - BOOST).max(-20));
            // A thread started during the start-up inherits the boost, and loses it too.
            let (tx, rx) = std::sync::mpsc::channel();
            let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
            let child = std::thread::spawn(move || {
                tx.send(gettid()).unwrap();
                done_rx.recv().unwrap();
            });
            let child_tid = rx.recv().unwrap();
            assert_eq!(nice_of(child_tid), (start - BOOST).max(-20));
            end_boost();
            assert_eq!(nice_of(0), start);
            assert_eq!(nice_of(child_tid), start);
            assert_eq!(original(), None);
            done_tx.send(()).unwrap();
            child.join().unwrap();
        })
        .join()
        .unwrap();
    }
}
