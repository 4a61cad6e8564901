//! Site identity: which wait is which site, and how it reads. A site is a state, what the
//! wait was for and why (`waits`), and what names it — the wait's meaning and its application
//! frames, or the frames of its user stack; [`site_id`] makes one from a stack pair,
//! `resolve.rs` resolves every stack pair's site once for a capture, [`distinct_labels`] gives
//! sites labels that tell them apart. Below the analysis and the lock holders, which both key
//! their figures by it.

mod resolve;

use std::collections::{HashMap, HashSet};

use profiler_common::{WaitState, stack_id};

pub use resolve::{Sites, StackKey};

use crate::{
    model::{NO_FILE, StackNames, stack_frames},
    waits::{self, Purpose, SiteName, WaitKind},
};

/// A blocking site: its state, what it waited for and why, and what names it — the wait's
/// meaning and its application frames ([`SiteName`]), or, for stacks that have none, the
/// frames of its user stack (all frames of a thread without one). Kernel paths that differ
/// below the call are the same site; so are a JVM's stacks that differ only in plumbing. Its
/// purpose and whether it lies in an event loop are what its stacks say and not part of its
/// identity: a stack of the site that shows less (its task's frames cut short) is the same
/// site, and [`Analysis::canonical`] gives the site what all its stacks say together.
#[derive(Clone, Debug)]
pub struct SiteId {
    pub state: &'static str,
    pub kind: WaitKind,
    pub purpose: Purpose,
    /// An event loop's own frames are below the wait: a handler that blocks the loop.
    pub event_loop: bool,
    pub name: Option<SiteName>,
    /// The site's frames when `name` is None (empty otherwise).
    pub frames: Vec<String>,
    /// A lock's wait: the function that took the lock (its holders pass through it).
    pub locked: Option<String>,
}

impl SiteId {
    fn identity(
        &self,
    ) -> (
        &str,
        WaitKind,
        &Option<SiteName>,
        &[String],
        &Option<String>,
    ) {
        (
            self.state,
            self.kind,
            &self.name,
            &self.frames,
            &self.locked,
        )
    }

    /// A wait for the next task or event, not work.
    pub fn is_idle_wait(&self) -> bool {
        self.purpose == Purpose::Idle
    }

    /// An event loop's wait for its next event.
    pub fn is_event_wait(&self) -> bool {
        self.kind == WaitKind::Events && self.purpose == Purpose::Idle
    }

    /// The label with `depth` ≥ 1 callers' worth of frames.
    pub fn label(&self, depth: usize) -> String {
        match &self.name {
            Some(name) => name.label(depth),
            None => waits::jvm_label(&self.frames, depth)
                .or_else(|| waits::lock_label(&self.frames, depth))
                .unwrap_or_else(|| site_label(&self.frames, &self.frames, depth)),
        }
    }
}

impl PartialEq for SiteId {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for SiteId {}

impl std::hash::Hash for SiteId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

impl PartialOrd for SiteId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SiteId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.identity().cmp(&other.identity())
    }
}

/// The frames that identify the site of a wait in these stacks, for stacks that no meaning
/// names. An address without a symbol (`nginx+0x6e343`) in a file that names other frames of
/// the stack is a local function its symbol table leaves out (a stripped binary keeps only
/// its exported symbols): it is left out, so two stacks that differ only there are one site,
/// as the user reads them, not two rows that look the same. A lock's waits and a JVM pool's
/// waits for work are one site each however they were reached (`waits::site_key`).
pub fn site_frames(user_stack: u64, kernel_stack: u64, names: &StackNames) -> Vec<String> {
    let user = stack_frames(user_stack, stack_id::EMPTY, names);
    let frames = if user.is_empty() {
        stack_frames(user_stack, kernel_stack, names)
    } else {
        match names.user_files.get(&user_stack) {
            Some(files) if files.len() == user.len() => without_local_addresses(user, files),
            _ => user,
        }
    };
    waits::site_key(&frames).unwrap_or(frames)
}

fn unnamed(frame: &str) -> bool {
    frame.contains("+0x")
}

fn without_local_addresses(frames: Vec<String>, files: &[u32]) -> Vec<String> {
    let named_files: HashSet<u32> = frames
        .iter()
        .zip(files)
        .filter(|(f, _)| !unnamed(f))
        .map(|(_, &file)| file)
        .collect();
    frames
        .into_iter()
        .zip(files)
        .filter(|(f, file)| !(unnamed(f) && **file != NO_FILE && named_files.contains(file)))
        .map(|(f, _)| f)
        .collect()
}

/// The blocking call and its nearest named caller, leaf first: `clock_nanosleep ←
/// sleep_20ms` (a caller without a symbol, `nginx+0x54173`, says less than the next one up).
/// `callers` > 1 names more callers up the stack, to tell apart sites that share the first.
pub(crate) fn site_label(user_frames: &[String], all: &[String], callers: usize) -> String {
    let frames = if user_frames.is_empty() {
        all
    } else {
        user_frames
    };
    let Some((leaf, above)) = frames.split_last() else {
        return String::new();
    };
    // A libc-internal wrapper (`__nanosleep`) says less than the function that called it.
    let named = |f: &&String| !f.contains("+0x") && !f.starts_with('[');
    let public = |f: &&String| named(f) && !f.starts_with("__");
    let first = above
        .iter()
        .rposition(|f| public(&f))
        .or_else(|| above.iter().rposition(|f| named(&f)))
        .or_else(|| above.len().checked_sub(1));
    let Some(first) = first else {
        return leaf.clone();
    };
    let mut label = format!("{leaf} ← {}", above[first]);
    for f in above[..first]
        .iter()
        .rev()
        .filter(named)
        .take(callers.saturating_sub(1))
    {
        label.push_str(" ← ");
        label.push_str(f);
    }
    label
}

/// Labels for the sites, in their order: the wait and its callers, or as many more callers
/// as it takes for two sites in the same state not to read alike.
pub fn distinct_labels<'a>(keys: impl Iterator<Item = &'a SiteId> + Clone) -> Vec<String> {
    const MAX_CALLERS: usize = 8;
    let keys: Vec<&SiteId> = keys.collect();
    let mut depth = vec![1usize; keys.len()];
    loop {
        let labels: Vec<String> = keys
            .iter()
            .zip(&depth)
            .map(|(key, &d)| key.label(d))
            .collect();
        let mut seen: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
        for (i, l) in labels.iter().enumerate() {
            seen.entry((keys[i].state, l.as_str())).or_default().push(i);
        }
        let mut deeper = false;
        for same in seen.values().filter(|v| v.len() > 1) {
            for &i in same {
                if depth[i] < MAX_CALLERS {
                    depth[i] += 1;
                    deeper = true;
                }
            }
        }
        if !deeper {
            return labels;
        }
    }
}

/// The site of a wait at these stacks in a blocking state: its meaning from all its frames
/// (the kernel's say a socket from a file), its name from the user stack.
pub fn site_id(state: WaitState, user_stack: u64, kernel_stack: u64, names: &StackNames) -> SiteId {
    let all = stack_frames(user_stack, kernel_stack, names);
    let meaning = waits::meaning(&all);
    let user = stack_frames(user_stack, stack_id::EMPTY, names);
    let named = if user.is_empty() { &all } else { &user };
    let name = waits::site_name(named, &meaning);
    let locked = (meaning.kind == WaitKind::Lock)
        .then(|| waits::lock_taker(named))
        .flatten()
        .map(|(taker, _, _)| waits::function(&named[taker]).to_string());
    SiteId {
        state: state.label(),
        kind: meaning.kind,
        purpose: meaning.purpose,
        event_loop: meaning.event_loop,
        frames: if name.is_some() {
            Vec::new()
        } else {
            site_frames(user_stack, kernel_stack, names)
        },
        name,
        locked,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::Name;

    #[test]
    fn stacks_that_differ_only_in_a_files_unnamed_local_functions_are_one_site() {
        let n = |v: &[&str]| v.iter().map(|s| Arc::from(*s)).collect::<Vec<Name>>();
        let mut names = StackNames::default();
        let via = |local: &'static str| {
            [
                "main",
                "ngx_http_core_content_phase",
                local,
                "ngx_http_free_request",
                "nginx+0x6b9ff",
                "__libc_write",
            ]
        };
        names.user.insert(1, n(&via("nginx+0x6e343")));
        names.user.insert(2, n(&via("nginx+0x6db0f")));
        // A stripped binary with no symbol at all keeps its addresses: they are all it says.
        names.user.insert(3, n(&["app+0x10", "app+0x20", "read"]));
        names.user.insert(4, n(&["app+0x10", "app+0x30", "read"]));
        for id in [1, 2] {
            names.user_files.insert(id, vec![0, 0, 0, 0, 0, 1]);
        }
        for id in [3, 4] {
            names.user_files.insert(id, vec![2, 2, 1]);
        }
        assert_eq!(
            site_frames(1, 0, &names),
            [
                "main",
                "ngx_http_core_content_phase",
                "ngx_http_free_request",
                "__libc_write"
            ]
        );
        assert_eq!(site_frames(1, 0, &names), site_frames(2, 0, &names));
        assert_ne!(site_frames(3, 0, &names), site_frames(4, 0, &names));
    }

    #[test]
    fn sites_that_would_read_alike_name_more_callers() {
        let stack = |caller: &str| {
            ["main", caller, "nap_ns", "__nanosleep", "__clock_nanosleep"]
                .map(String::from)
                .to_vec()
        };
        let id = |state, frames| SiteId {
            state,
            kind: WaitKind::Sleep,
            purpose: Purpose::Unknown,
            event_loop: false,
            name: None,
            frames,
            locked: None,
        };
        let a = id("sleep", stack("sleep_1ms"));
        let b = id("sleep", stack("sleep_5ms"));
        let c = id("io", stack("sleep_1ms"));
        let labels = distinct_labels([&a, &b, &c].into_iter());
        assert_eq!(
            labels,
            [
                "__clock_nanosleep ← nap_ns ← sleep_1ms",
                "__clock_nanosleep ← nap_ns ← sleep_5ms",
                // Another state: no one to be told apart from.
                "__clock_nanosleep ← nap_ns",
            ]
        );
    }

    #[test]
    fn site_labels_name_the_call_and_its_caller() {
        let user = vec!["main".to_string(), "reader".to_string(), "read".to_string()];
        assert_eq!(site_label(&user, &user, 1), "read ← reader");
        let kernel_only = vec!["schedule_[k]".to_string()];
        assert_eq!(site_label(&[], &kernel_only, 1), "schedule_[k]");
        let wrapped = ["main", "sleep_20ms", "__nanosleep", "__clock_nanosleep"].map(String::from);
        assert_eq!(
            site_label(&wrapped, &wrapped, 1),
            "__clock_nanosleep ← sleep_20ms"
        );
        let stripped = [
            "main",
            "ngx_process_events_and_timers",
            "nginx+0x54173",
            "epoll_wait",
        ]
        .map(String::from);
        assert_eq!(
            site_label(&stripped, &stripped, 1),
            "epoll_wait ← ngx_process_events_and_timers"
        );
    }
}
