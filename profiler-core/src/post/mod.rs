//! Post-processing, in its order: the drained maps accounted (time per thread, stack and
//! state), the timeline built from its raw records, notes on JVMs' partial stacks, every stack
//! named, and the result as a saved capture — what `--save` writes and `render` reads. The
//! capture side hands it the drained maps and its target set ([`Targets`]): the one step that
//! still reads live processes (a JVM's JIT names) is the target set's.

mod java;

use std::collections::HashMap;

pub use java::{JavaProcess, partial_java_notes};

use crate::{
    account::{self, AccountOptions},
    model::{CaptureMeta, Drained, Profile, SavedCapture, Seeds, saved::SAVED_FORMAT},
    perfmap::PerfMap,
    symbolize::{self, Spaces},
    timeline,
};

/// What post-processing asks of the capture side's target set once the window is closed.
pub trait Targets {
    /// The JVMs among the targets, with the code cache each was last read with.
    fn java_processes(&self) -> Vec<JavaProcess<'_>>;
    /// Names of JVMs' JIT code by process, for the profile's stacks (read from the JVMs while
    /// they still run).
    fn jit_names(&mut self, profile: &Profile) -> HashMap<u32, PerfMap>;
    /// Where the stacks' addresses are named: each layout's and each process's mappings, and
    /// `jit`.
    fn spaces(&self, jit: HashMap<u32, PerfMap>) -> Spaces<'_>;
}

/// Account the time, then name every stack it refers to.
pub fn post_process(
    drained: Drained,
    seeds: Seeds,
    opts: &AccountOptions,
    meta: CaptureMeta,
    targets: &mut impl Targets,
) -> SavedCapture {
    let mut drained = drained;
    let raw_timeline = std::mem::take(&mut drained.timeline);
    let threads = raw_timeline.enabled.then(|| drained.threads.clone());
    let profile = account::account(drained, seeds, opts);
    let timeline = threads.and_then(|t| timeline::build(raw_timeline, &t, &profile));
    let mut meta = meta;
    meta.notes
        .extend(partial_java_notes(&profile, &targets.java_processes()));
    let jit = targets.jit_names(&profile);
    let names = symbolize::name_stacks(&profile, &targets.spaces(jit));
    SavedCapture {
        format: SAVED_FORMAT,
        meta,
        profile,
        names,
        timeline,
    }
}
