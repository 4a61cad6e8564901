//! Every wait's site, resolved once for the whole capture: each stack pair's [`SiteId`], the
//! purpose and event loop its stacks say together (a stack that lost its task's frames is
//! still the task's), and one site per label — stacks whose sites read alike however many
//! callers are named (the JVM's C++ under a cut stack, a monitor entered from compiled and
//! from interpreted code) are one row, with all their time.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use profiler_common::WaitState;

use super::{SiteId, distinct_labels, site_id};
use crate::{
    model::{Profile, StackNames},
    waits::Purpose,
};

/// A stack pair in a state.
pub type StackKey = (u64, u64, WaitState);

/// The capture's sites: each stack pair's, each site's representative and its label.
#[derive(Clone, Debug, Default)]
pub struct Sites {
    by_stack: HashMap<StackKey, SiteId>,
    /// Any site → the one that stands for its label, with the merged purpose.
    representative: HashMap<SiteId, SiteId>,
    labels: BTreeMap<SiteId, String>,
}

impl Sites {
    pub fn of(profile: &Profile, names: &StackNames) -> Self {
        let mut by_stack: HashMap<StackKey, SiteId> = HashMap::new();
        for e in &profile.entries {
            if let Some(state) = e.blocked_state() {
                by_stack
                    .entry((e.user_stack, e.kernel_stack, state))
                    .or_insert_with(|| site_id(state, e.user_stack, e.kernel_stack, names));
            }
        }
        let all: BTreeSet<SiteId> = by_stack.values().cloned().collect();
        let labels = distinct_labels(all.iter());
        let mut first: HashMap<(&'static str, &str), SiteId> = HashMap::new();
        let mut representative: HashMap<SiteId, SiteId> = HashMap::new();
        for (id, label) in all.iter().zip(&labels) {
            let rep = first.entry((id.state, label)).or_insert_with(|| id.clone());
            merge_purpose(rep, id);
            representative.insert(id.clone(), rep.clone());
        }
        // Every variant of a site gets what all of them say together.
        let reps: HashMap<(&'static str, &str), SiteId> = first;
        for (id, label) in all.iter().zip(&labels) {
            let merged = reps[&(id.state, label.as_str())].clone();
            representative.insert(id.clone(), merged);
        }
        for id in by_stack.values_mut() {
            *id = representative[&*id].clone();
        }
        let labels = all
            .iter()
            .zip(labels)
            .map(|(id, label)| (representative[id].clone(), label))
            .collect();
        Self {
            by_stack,
            representative,
            labels,
        }
    }

    /// The site of a wait at these stacks in this state.
    pub fn at(&self, key: &StackKey) -> Option<&SiteId> {
        self.by_stack.get(key)
    }

    /// The site that stands for `id` (itself when no other reads alike).
    pub fn resolve(&self, id: SiteId) -> SiteId {
        self.representative.get(&id).cloned().unwrap_or(id)
    }

    /// Each site with its label, as the report names them.
    pub fn labels(&self) -> &BTreeMap<SiteId, String> {
        &self.labels
    }

    /// The site of a wait at these stacks in this state, whether or not the profile's
    /// entries hold it (a timeline's wait, a waker's site).
    pub fn site(&self, state: WaitState, user: u64, kernel: u64, names: &StackNames) -> SiteId {
        match self.at(&(user, kernel, state)) {
            Some(id) => id.clone(),
            None => self.resolve(site_id(state, user, kernel, names)),
        }
    }

    /// A site's label ("" for a site the capture's waits never were at).
    pub fn label(&self, id: &SiteId) -> &str {
        self.labels.get(id).map_or("", String::as_str)
    }
}

/// `rep` takes what `id` says of the purpose and the event loop too: a task's if either says
/// so (the other lost the task's frames), else idle if either does.
fn merge_purpose(rep: &mut SiteId, id: &SiteId) {
    rep.purpose = match (rep.purpose, id.purpose) {
        (Purpose::Task, _) | (_, Purpose::Task) => Purpose::Task,
        (Purpose::Idle, _) | (_, Purpose::Idle) => Purpose::Idle,
        _ => Purpose::Unknown,
    };
    rep.event_loop |= id.event_loop;
}
