//! Lock waits explained by their holders: for a lock site (`monitor enter ←
//! Ledger$AuditLog.append`), what the threads that released the lock — its wakers — did
//! while they held it: their time (on the CPU, waiting for one, or in a wait of their own)
//! in stacks that pass through the frame that took the lock, the lock's own waits left out.
//! For a `synchronized` method that frame is the held region; for a lock taken inside a
//! method (`ReentrantLock.lock()`) it is the method, held or not. Pure; analysis keeps it.

use std::collections::{BTreeSet, HashMap};

use profiler_common::{WaitState, stack_id, waker_context};
use serde::Serialize;

use crate::{
    model::{Kind, Profile, StackNames, stack_frames},
    site::{SiteId, site_id},
    waits::{self, WaitKind},
};

/// What a lock's holders did with it, largest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Holders {
    /// The threads counted: the lock's wakers, or (without any) the waiting threads'
    /// processes' threads.
    pub threads: usize,
    /// Their time in stacks through the locked frame.
    pub total_ns: u64,
    pub held: Vec<Held>,
}

/// One thing the holders did while holding the lock.
#[derive(Clone, Debug, PartialEq)]
pub struct Held {
    /// `on-cpu`, `runnable`, or the wait's state (`io`, `sleep`, `other`).
    pub state: &'static str,
    /// `on the CPU`, `waiting for a CPU`, or the wait's label (`fsync ←
    /// FileDescriptor.sync ← Ledger$AuditLog.append`).
    pub what: String,
    pub kind: Option<WaitKind>,
    pub ns: u64,
}

/// The holders of every lock site in `sites`.
pub fn lock_holders<'a>(
    profile: &Profile,
    names: &StackNames,
    sites: impl Iterator<Item = &'a SiteId>,
) -> HashMap<SiteId, Holders> {
    let mut ids = SiteIds::default();
    let mut out = HashMap::new();
    for site in sites.filter(|s| s.kind == WaitKind::Lock) {
        let Some(locked) = &site.locked else {
            continue;
        };
        let tids = holder_threads(profile, names, &mut ids, site);
        let holders = held(profile, names, &mut ids, locked, &tids);
        if holders.total_ns > 0 {
            out.insert(site.clone(), holders);
        }
    }
    out
}

/// Each stack pair's site and user frames, computed once.
#[derive(Default)]
struct SiteIds {
    sites: HashMap<(u64, u64, WaitState), SiteId>,
    frames: HashMap<u64, Vec<String>>,
}

impl SiteIds {
    fn site(&mut self, state: WaitState, user: u64, kernel: u64, names: &StackNames) -> &SiteId {
        self.sites
            .entry((user, kernel, state))
            .or_insert_with(|| site_id(state, user, kernel, names))
    }

    fn user_frames(&mut self, user: u64, names: &StackNames) -> &[String] {
        self.frames
            .entry(user)
            .or_insert_with(|| stack_frames(user, stack_id::EMPTY, names))
    }
}

/// The lock's wakers (threads), or, without any, every thread of the waiters' processes.
fn holder_threads(
    profile: &Profile,
    names: &StackNames,
    ids: &mut SiteIds,
    site: &SiteId,
) -> BTreeSet<u32> {
    let wakers: BTreeSet<u32> = profile
        .wakers
        .iter()
        .filter(|w| w.waker_tid != 0 && w.waker_context != waker_context::SOFTIRQ)
        .filter(|w| w.waker_context != waker_context::HARDIRQ && w.state.label() == site.state)
        .filter(|w| ids.site(w.state, w.user_stack, w.kernel_stack, names) == site)
        .map(|w| w.waker_tid)
        .collect();
    if !wakers.is_empty() {
        return wakers;
    }
    let pids: BTreeSet<u32> = profile
        .entries
        .iter()
        .filter(|e| {
            e.blocked_state().is_some_and(|s| {
                s.label() == site.state && ids.site(s, e.user_stack, e.kernel_stack, names) == site
            })
        })
        .map(|e| e.pid)
        .collect();
    profile
        .threads
        .iter()
        .filter(|(_, t)| pids.contains(&t.pid))
        .map(|(tid, _)| *tid)
        .collect()
}

/// The time of `tids` in stacks through `locked`, by what it was, the lock's own waits out.
fn held(
    profile: &Profile,
    names: &StackNames,
    ids: &mut SiteIds,
    locked: &str,
    tids: &BTreeSet<u32>,
) -> Holders {
    let mut by: HashMap<(&'static str, String), (Option<WaitKind>, u64)> = HashMap::new();
    for e in profile.entries.iter().filter(|e| tids.contains(&e.tid)) {
        let through = ids
            .user_frames(e.user_stack, names)
            .iter()
            .any(|f| waits::function(f) == locked);
        if !through {
            continue;
        }
        let (state, what, kind) = match e.kind {
            Kind::OnCpu => ("on-cpu", "on the CPU".to_string(), None),
            Kind::Off(WaitState::RunqueuePreempted | WaitState::RunqueueWoken) => {
                ("runnable", "waiting for a CPU".to_string(), None)
            }
            _ => {
                let Some(state) = e.blocked_state() else {
                    continue;
                };
                let site = ids.site(state, e.user_stack, e.kernel_stack, names);
                let this_lock =
                    site.kind == WaitKind::Lock && site.locked.as_deref() == Some(locked);
                if site.is_idle_wait() || this_lock {
                    continue;
                }
                (state.label(), site.label(1), Some(site.kind))
            }
        };
        let slot = by.entry((state, what)).or_insert((kind, 0));
        slot.1 += e.time_ns;
    }
    let mut held: Vec<Held> = by
        .into_iter()
        .map(|((state, what), (kind, ns))| Held {
            state,
            what,
            kind,
            ns,
        })
        .collect();
    held.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.what.cmp(&b.what)));
    Holders {
        threads: tids.len(),
        total_ns: held.iter().map(|h| h.ns).sum(),
        held,
    }
}

/// Things the holders did, at most this many, in the report.
const TOP_HELD: usize = 3;

/// The report's view of a lock's holders (`top_blocking_sites[].holders`).
#[derive(Clone, Debug, Serialize)]
pub struct HoldersRow {
    /// The threads counted (the lock's wakers).
    pub threads: usize,
    /// Their time in stacks through the locked frame.
    pub held_s: f64,
    /// What they did with it, largest first.
    pub held: Vec<HeldRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct HeldRow {
    pub state: &'static str,
    pub what: String,
    /// `lock`, `io`, … for a wait (as `top_blocking_sites[].kind`), null on or waiting for a
    /// CPU.
    pub kind: Option<WaitKind>,
    /// % of `held_s`.
    pub share_pct: f64,
    pub total_s: f64,
}

impl Holders {
    pub fn row(&self) -> HoldersRow {
        let round = |v: f64, by: f64| (v * by).round() / by;
        HoldersRow {
            threads: self.threads,
            held_s: round(self.total_ns as f64 / 1e9, 1e3),
            held: self
                .held
                .iter()
                .take(TOP_HELD)
                .map(|h| HeldRow {
                    state: h.state,
                    what: h.what.clone(),
                    kind: h.kind,
                    share_pct: round(100.0 * h.ns as f64 / self.total_ns.max(1) as f64, 10.0),
                    total_s: round(h.ns as f64 / 1e9, 1e3),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{Entry, Mode, Name, ThreadTime, Waker, Window};

    fn names() -> StackNames {
        let n = |v: &[&str]| v.iter().map(|s| Arc::from(*s)).collect::<Vec<Name>>();
        let base = [
            "java.lang.Thread.run",
            "Handler.handle",
            "Ledger$AuditLog.append_[i]",
        ];
        let mut names = StackNames::default();
        let with = |tail: &[&'static str]| n(&[&base[..], tail].concat());
        names.user.insert(
            1,
            with(&[
                "_complete_monitor_locking_Java",
                "ObjectMonitor::enter(JavaThread*)",
                "ObjectMonitor::EnterI(JavaThread*)",
                "pthread_cond_wait",
            ]),
        );
        names.user.insert(
            2,
            with(&[
                "java.io.FileDescriptor.sync",
                "java.io.FileDescriptor.sync0",
                "fsync",
            ]),
        );
        names.user.insert(3, with(&["java.lang.String.format"]));
        names.user.insert(
            4,
            n(&["java.lang.Thread.run", "Handler.handle", "Handler.render"]),
        );
        names
    }

    fn entry(tid: u32, stack: u64, kind: Kind, ns: u64) -> Entry {
        let mut e = Entry::new(1, tid, stack, 0, kind);
        e.time_ns = ns;
        e
    }

    #[test]
    fn holders_spend_the_held_time_in_their_own_waits_inside_the_locked_frame() {
        let ms = 1_000_000;
        let mut threads = std::collections::BTreeMap::new();
        for tid in [11, 12] {
            threads.insert(
                tid,
                ThreadTime {
                    pid: 1,
                    name: format!("pool-1-thread-{tid}"),
                    ..ThreadTime::default()
                },
            );
        }
        let entries = vec![
            entry(11, 1, Kind::Off(WaitState::Sleep), 700 * ms),
            entry(12, 1, Kind::Off(WaitState::Sleep), 600 * ms),
            entry(11, 2, Kind::Off(WaitState::Io), 160 * ms),
            entry(12, 2, Kind::Off(WaitState::Io), 140 * ms),
            entry(12, 3, Kind::OnCpu, 20 * ms),
            // Outside the locked frame: not held time.
            entry(12, 4, Kind::OnCpu, 500 * ms),
        ];
        let waker = Waker {
            tid: 11,
            state: WaitState::Sleep,
            user_stack: 1,
            kernel_stack: 0,
            waker_tid: 12,
            waker_pid: 1,
            waker_name: "pool-1-thread-12".into(),
            waker_user_stack: 0,
            waker_kernel_stack: 0,
            waker_context: waker_context::TASK,
            count: 10,
            time_ns: 0,
        };
        let window = Window {
            start_ns: 0,
            stop_ns: 1_000 * ms,
        };
        let mut profile = Profile {
            entries,
            threads,
            ..Profile::empty(Mode::Wall, window, 10_101_010)
        };
        profile.wakers.push(waker);
        let names = names();
        let site: SiteId = crate::site::site_id(WaitState::Sleep, 1, 0, &names);
        let all = lock_holders(&profile, &names, std::iter::once(&site));
        let h = &all[&site];
        assert_eq!((h.threads, h.total_ns), (1, 160 * ms), "{h:?}");
        assert_eq!(
            h.held[0].what,
            "fsync ← FileDescriptor.sync ← Ledger$AuditLog.append ← Handler.handle"
        );
        assert_eq!((h.held[0].state, h.held[0].ns), ("io", 140 * ms));
        assert_eq!(h.held[1].what, "on the CPU");
    }
}
