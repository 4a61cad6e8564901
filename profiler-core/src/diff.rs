//! Diff: two saved captures, before and after → what moved, per second of capture. Both are
//! normalised by their own window length, so runs of different lengths compare honestly:
//! the folded stacks of both in µs of thread time per second (the differential flame graph's
//! input), the time per state, the on-CPU functions (self and total), and the blocking sites
//! with their waits per second and p50/p99. Captures of different modes are refused: their
//! stacks do not measure the same thing. Pure; `profiler diff` renders what this returns
//! (render/diff.rs).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use profiler_common::{SiteKey as KernelSite, WaitState, stack_id};
use serde::Serialize;
use thiserror::Error;

use crate::{
    fold::{self, FoldOptions, Unit},
    model::{Hist, Kind, Mode, Profile, SavedCapture, StackNames, StateTimes, stack_frames},
    site::{SiteId, distinct_labels, site_id},
};

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DiffError {
    #[error(
        "the before capture was recorded in --mode {before} ({}) and the after capture in \
         --mode {after} ({}), which do not measure the same thing; record both with the same \
         --mode",
        mode_words(before),
        mode_words(after)
    )]
    ModeMismatch {
        before: &'static str,
        after: &'static str,
    },
}

fn mode_words(mode: &str) -> &'static str {
    match mode {
        "cpu" => "on-CPU samples only",
        "off" => "off-CPU waits only",
        _ => "on-CPU and off-CPU time",
    }
}

/// One capture, as the diff names it.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub target: String,
    pub pid: u32,
    /// What the capture covered, in words.
    pub selection: String,
    pub duration_s: f64,
    pub threads: usize,
    pub kernel: String,
    pub started_unix_ns: Option<u64>,
    pub lost_total: u64,
}

/// A figure before and after, per second of capture (or a share, or a latency).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Change {
    pub before: f64,
    pub after: f64,
    pub change: f64,
}

impl Change {
    fn new(before: f64, after: f64) -> Self {
        Self {
            before,
            after,
            change: after - before,
        }
    }
}

/// A latency before and after; absent on a side where the site had no finished wait.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencyChange {
    pub before: Option<f64>,
    pub after: Option<f64>,
}

/// Thread time in one state, in milliseconds per second of capture (all threads together:
/// 2000 ms/s is two threads' whole time).
#[derive(Debug, Clone, Serialize)]
pub struct StateRow {
    /// `running`, `runnable`, `sleep`, `io`, `other`.
    pub state: &'static str,
    pub ms_per_s: Change,
}

#[derive(Debug, Clone, Serialize)]
pub struct FunctionDelta {
    pub function: String,
    /// On-CPU time with this function at the top of the stack, ms per second of capture.
    pub self_ms_per_s: Change,
    /// On-CPU time with this function anywhere on the stack, ms per second of capture.
    pub total_ms_per_s: Change,
    /// Self time as a share of its capture's on-CPU time in code, in % (time charged before a
    /// switch-in, the profiler's own programs and time between samples left out: they are no
    /// function's, and vary with the machine's load rather than with the code).
    pub self_pct: Change,
    /// Total time as a share of the same, in %: the function and what it called, including
    /// kernel frames above it (a preempted thread's return from the interrupt).
    pub total_pct: Change,
}

#[derive(Debug, Clone, Serialize)]
pub struct SiteDelta {
    /// `sleep`, `io` or `other`.
    pub state: &'static str,
    /// The blocking call and its caller, leaf first (`read ← blocked_reader`), as the report
    /// names it.
    pub site: String,
    /// The user frames root→leaf that identify the site (all frames for a kernel thread).
    pub stack: Vec<String>,
    /// Blocked time, ms per second of capture.
    pub ms_per_s: Change,
    /// Finished waits per second of capture.
    pub waits_per_s: Change,
    pub p50_ms: LatencyChange,
    pub p99_ms: LatencyChange,
}

/// What moved between two captures.
#[derive(Debug)]
pub struct Diff {
    pub mode: Mode,
    pub before: Side,
    pub after: Side,
    /// Folded stack → (before, after), µs of thread time per second of capture (rounded; the
    /// differential flame graph wants whole counts); addresses without a symbol per file.
    pub stacks: BTreeMap<String, (u64, u64)>,
    pub states: Vec<StateRow>,
    /// Every on-CPU function of either capture, largest change of self time first
    /// (addresses without a symbol: one row per file).
    pub functions: Vec<FunctionDelta>,
    /// Every blocking site of either capture, largest change of blocked time first.
    pub sites: Vec<SiteDelta>,
}

/// Compares two captures; refuses captures of different modes.
pub fn diff(before: &SavedCapture, after: &SavedCapture) -> Result<Diff, DiffError> {
    let mode = before.profile.mode;
    if after.profile.mode != mode {
        return Err(DiffError::ModeMismatch {
            before: mode.name(),
            after: after.profile.mode.name(),
        });
    }
    let (b, a) = (Figures::of(before), Figures::of(after));
    let mut stacks: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (stack, rate) in &b.stacks {
        stacks.entry(stack.clone()).or_default().0 = rate.round() as u64;
    }
    for (stack, rate) in &a.stacks {
        stacks.entry(stack.clone()).or_default().1 = rate.round() as u64;
    }
    stacks.retain(|_, (b, a)| *b > 0 || *a > 0);
    Ok(Diff {
        mode,
        before: side(before),
        after: side(after),
        stacks,
        states: states(&b, &a),
        functions: functions(&b, &a),
        sites: sites(&b, &a),
    })
}

fn side(c: &SavedCapture) -> Side {
    Side {
        target: c.meta.target.clone(),
        pid: c.meta.pid,
        selection: c.meta.selection.clone(),
        duration_s: round3(c.profile.window.len_ns() as f64 / 1e9),
        threads: c.profile.threads.len(),
        kernel: c.meta.kernel.clone(),
        started_unix_ns: c.meta.started_unix_ns,
        lost_total: c.profile.total_lost(),
    }
}

/// One capture's figures, each already divided by its window length.
struct Figures {
    /// Folded stack → µs per second.
    stacks: HashMap<String, f64>,
    /// Thread time per state over all threads, ns.
    states: StateTimes,
    /// The window's length in seconds: what every figure is divided by.
    secs: f64,
    /// Function → (self, total) ms per second.
    functions: HashMap<String, (f64, f64)>,
    /// On-CPU time in code (the sum of every function's self time), ms per second.
    code_ms_per_s: f64,
    sites: BTreeMap<SiteId, SiteFigures>,
}

struct SiteFigures {
    /// The user stack (all frames without one) of the site's largest part.
    stack: Vec<String>,
    ms_per_s: f64,
    waits_per_s: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
}

impl Figures {
    fn of(c: &SavedCapture) -> Self {
        let profile = &c.profile;
        let secs = (profile.window.len_ns() as f64 / 1e9).max(1e-9);
        let per_s = |ns: u64| ns as f64 / 1e6 / secs;
        let functions = function_times(profile, &c.names);
        let code_ns = functions.values().map(|f| f.0).sum();
        Self {
            stacks: stack_rates(c, secs),
            states: profile.state_totals(),
            secs,
            functions: functions
                .into_iter()
                .map(|(f, (s, t))| (f, (per_s(s), per_s(t))))
                .collect(),
            code_ms_per_s: per_s(code_ns),
            sites: site_hists(profile, &c.names)
                .into_iter()
                .map(|(key, (ns, hist, stack))| {
                    let fig = SiteFigures {
                        stack,
                        ms_per_s: per_s(ns),
                        waits_per_s: hist.count as f64 / secs,
                        p50_ms: hist.quantile_ns(0.50).map(|v| v / 1e6),
                        p99_ms: hist.quantile_ns(0.99).map(|v| v / 1e6),
                    };
                    (key, fig)
                })
                .collect(),
        }
    }
}

/// Folded stacks (process name as the root, no threads: tids differ between runs; addresses
/// without a symbol per file, [`per_file`]) in µs per second of capture. `--mode cpu` counts samples; each is one sample period of CPU time.
fn stack_rates(c: &SavedCapture, secs: f64) -> HashMap<String, f64> {
    let folded = fold::fold(
        &c.profile,
        &c.names,
        &FoldOptions {
            process: c.meta.target.clone(),
            per_process: false,
            per_thread: false,
            hide_sleep_of: Default::default(),
            collapse_sleep_of: Default::default(),
            resources: false,
            idle_goroutines: Default::default(),
        },
    );
    let us_per_count = match folded.unit {
        Unit::Samples => c.profile.period_ns as f64 / 1e3,
        Unit::Micros => 1.0,
    };
    let mut rates: HashMap<String, f64> = HashMap::new();
    for (stack, count) in folded.lines {
        *rates.entry(per_file(&stack)).or_default() += count as f64 * us_per_count / secs;
    }
    rates
}

/// A folded stack with addresses without a symbol named per file, consecutive ones as one
/// frame: a stripped library's internal calls are one frame that the two captures share, even
/// when its addresses moved (a rebuilt binary).
fn per_file(stack: &str) -> String {
    let mut frames: Vec<String> = Vec::new();
    for f in stack.split(';').map(|f| function_of(f.to_string())) {
        if frames.last() != Some(&f) || !f.ends_with("+0x…") {
            frames.push(f);
        }
    }
    frames.join(";")
}

/// On-CPU time per function name: (self, total) in ns. CPU time that is not code (charged
/// before a switch-in, the profiler's programs, between samples) is no function's.
fn function_times(profile: &Profile, names: &StackNames) -> HashMap<String, (u64, u64)> {
    let mut out: HashMap<String, (u64, u64)> = HashMap::new();
    for e in profile.entries.iter().filter(|e| e.kind == Kind::OnCpu) {
        if matches!(
            e.user_stack,
            stack_id::SWITCHING_IN | stack_id::PROFILER | stack_id::UNSAMPLED
        ) {
            continue;
        }
        let frames: Vec<String> = stack_frames(e.user_stack, e.kernel_stack, names)
            .into_iter()
            .map(function_of)
            .collect();
        if let Some(leaf) = frames.last() {
            out.entry(leaf.clone()).or_default().0 += e.time_ns;
        }
        for f in frames.iter().collect::<BTreeSet<_>>() {
            out.entry(f.clone()).or_default().1 += e.time_ns;
        }
    }
    out
}

/// The function a frame counts for. Addresses without a symbol (`libz.so.1+0x4a2e`: a
/// stripped library's internal functions) are one row per file, `libz.so.1+0x…`: each
/// address its own row would split one function's time into dozens of small moves.
fn function_of(frame: String) -> String {
    match frame.rsplit_once("+0x") {
        Some((file, offset))
            if !file.is_empty()
                && !offset.is_empty()
                && offset.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            format!("{file}+0x…")
        }
        _ => frame,
    }
}

/// Blocked time, merged waits and largest stack per site, as the report groups them (kernel
/// paths below one call are one site, and so are a JVM's stacks that differ in plumbing).
fn site_hists(profile: &Profile, names: &StackNames) -> BTreeMap<SiteId, (u64, Hist, Vec<String>)> {
    let mut ids: HashMap<(u64, u64, WaitState), SiteId> = HashMap::new();
    let mut largest: HashMap<SiteId, ((u64, u64), u64)> = HashMap::new();
    let mut sites: BTreeMap<SiteId, (u64, Hist, Vec<String>)> = BTreeMap::new();
    let mut hists_added: BTreeSet<KernelSite> = BTreeSet::new();
    for e in &profile.entries {
        let Some(state) = e.blocked_state() else {
            continue;
        };
        let key = ids
            .entry((e.user_stack, e.kernel_stack, state))
            .or_insert_with(|| site_id(state, e.user_stack, e.kernel_stack, names))
            .clone();
        let slot = largest
            .entry(key.clone())
            .or_insert(((e.user_stack, e.kernel_stack), 0));
        if e.time_ns > slot.1 {
            *slot = ((e.user_stack, e.kernel_stack), e.time_ns);
        }
        let (ns, hist, _) = sites.entry(key).or_default();
        *ns += e.time_ns;
        hist.add_waits(e.waits, e.time_ns, e.min_ns, e.max_ns);
        if let Some(h) = profile.site_hist_once(e, state, &mut hists_added) {
            hist.add_buckets(h);
        }
    }
    for (key, ((user, kernel), _)) in largest {
        if let Some(site) = sites.get_mut(&key) {
            let frames = stack_frames(user, stack_id::EMPTY, names);
            site.2 = if frames.is_empty() {
                stack_frames(user, kernel, names)
            } else {
                frames
            };
        }
    }
    sites
}

fn states(b: &Figures, a: &Figures) -> Vec<StateRow> {
    // Running is all CPU time here, the profiler's programs included: both captures paid
    // for them, and a diff of thread time should add up to the threads' time.
    const STATES: [&str; 5] = ["running", "runnable", "sleep", "io", "other"];
    let ms_per_s = |f: &Figures| {
        let t = &f.states;
        [t.on_cpu(), t.runnable, t.sleep, t.io, t.other].map(|ns| ns as f64 / 1e6 / f.secs)
    };
    STATES
        .into_iter()
        .zip(ms_per_s(b).into_iter().zip(ms_per_s(a)))
        .map(|(state, (before, after))| StateRow {
            state,
            ms_per_s: change(before, after),
        })
        .filter(|r| r.ms_per_s.before > 0.0 || r.ms_per_s.after > 0.0)
        .collect()
}

fn functions(b: &Figures, a: &Figures) -> Vec<FunctionDelta> {
    let names: BTreeSet<&String> = b.functions.keys().chain(a.functions.keys()).collect();
    let pct = |ms: f64, of: f64| if of > 0.0 { 100.0 * ms / of } else { 0.0 };
    let share = |before: f64, after: f64| {
        let (before, after) = (pct(before, b.code_ms_per_s), pct(after, a.code_ms_per_s));
        Change {
            before: round1(before),
            after: round1(after),
            change: round1(after - before),
        }
    };
    let mut rows: Vec<FunctionDelta> = names
        .into_iter()
        .map(|f| {
            let (bs, bt) = b.functions.get(f).copied().unwrap_or_default();
            let (as_, at) = a.functions.get(f).copied().unwrap_or_default();
            FunctionDelta {
                function: f.clone(),
                self_ms_per_s: change(bs, as_),
                total_ms_per_s: change(bt, at),
                self_pct: share(bs, as_),
                total_pct: share(bt, at),
            }
        })
        // Functions that are only ever callers move in the total column only.
        .filter(|r| r.self_ms_per_s.before > 0.0 || r.self_ms_per_s.after > 0.0)
        .collect();
    largest_change_first(&mut rows, |r| (&r.self_ms_per_s, &r.function));
    rows
}

fn sites(b: &Figures, a: &Figures) -> Vec<SiteDelta> {
    let keys: BTreeSet<&SiteId> = b.sites.keys().chain(a.sites.keys()).collect();
    // One label per site for both captures: a site that needs more callers to read apart
    // from another in one capture is named the same way in the other.
    let labels = distinct_labels(keys.iter().copied());
    let mut rows: Vec<SiteDelta> = keys
        .into_iter()
        .zip(labels)
        .map(|(key, label)| {
            let (bf, af) = (b.sites.get(key), a.sites.get(key));
            let get = |f: Option<&SiteFigures>, v: fn(&SiteFigures) -> f64| f.map_or(0.0, v);
            let lat = |f: Option<&SiteFigures>, v: fn(&SiteFigures) -> Option<f64>| {
                f.and_then(v).map(round3)
            };
            SiteDelta {
                state: key.state,
                site: label,
                stack: af.or(bf).map(|f| f.stack.clone()).unwrap_or_default(),
                ms_per_s: change(get(bf, |f| f.ms_per_s), get(af, |f| f.ms_per_s)),
                waits_per_s: change(get(bf, |f| f.waits_per_s), get(af, |f| f.waits_per_s)),
                p50_ms: LatencyChange {
                    before: lat(bf, |f| f.p50_ms),
                    after: lat(af, |f| f.p50_ms),
                },
                p99_ms: LatencyChange {
                    before: lat(bf, |f| f.p99_ms),
                    after: lat(af, |f| f.p99_ms),
                },
            }
        })
        .collect();
    largest_change_first(&mut rows, |r| (&r.ms_per_s, &r.site));
    rows
}

/// The order of a diff's tables: the largest change (either way) first, then by name.
fn largest_change_first<T>(rows: &mut [T], key: fn(&T) -> (&Change, &String)) {
    rows.sort_by(|x, y| {
        let ((cx, nx), (cy, ny)) = (key(x), key(y));
        cy.change
            .abs()
            .total_cmp(&cx.change.abs())
            .then_with(|| nx.cmp(ny))
    });
}

/// Rounded to µs per second (0.001 ms/s): figures below that are noise, and the JSON stays
/// readable.
fn change(before: f64, after: f64) -> Change {
    let (before, after) = (round3(before), round3(after));
    Change::new(before, after).rounded()
}

impl Change {
    fn rounded(self) -> Self {
        Self {
            change: round3(self.change),
            ..self
        }
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}
fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap, sync::Arc};

    use profiler_common::{WaitHist, WaitState, hist_bucket};

    use super::*;
    use crate::model::{Entry, Name, ThreadTime, Window};

    const MS: u64 = 1_000_000;

    fn on_cpu(user: u64, time_ns: u64) -> Entry {
        Entry {
            samples: time_ns / (10 * MS),
            time_ns,
            ..Entry::new(1, 1, user, stack_id::EMPTY, Kind::OnCpu)
        }
    }

    fn wait(user: u64, kernel: u64, time_ns: u64, waits: u64) -> Entry {
        let mut e = Entry::new(1, 1, user, kernel, Kind::Off(WaitState::Sleep));
        e.time_ns = time_ns;
        for _ in 0..waits {
            e.finished(time_ns / waits);
        }
        e
    }

    /// A capture of `secs` seconds of one thread with these entries; stack 1 is
    /// `main;spin_a`, 2 `main;spin_b`, 3 `main;nap` (a sleep), 4 `main;nap2`.
    fn capture(mode: Mode, secs: u64, entries: Vec<Entry>) -> SavedCapture {
        let n = |v: &[&str]| v.iter().map(|s| Arc::from(*s)).collect::<Vec<Name>>();
        let mut names = StackNames::default();
        names.user.insert(1, n(&["main", "spin_a"]));
        names.user.insert(2, n(&["main", "spin_b"]));
        names.user.insert(3, n(&["main", "nap"]));
        names.user.insert(4, n(&["main", "nap2"]));
        names.kernel.insert(9, n(&["do_nanosleep_[k]"]));
        names.kernel.insert(8, n(&["hrtimer_nanosleep_[k]"]));
        let mut site_hists = HashMap::new();
        for e in &entries {
            if let Kind::Off(state) = e.kind
                && e.waits > 0
            {
                let mut h = WaitHist::default();
                h.buckets[hist_bucket(e.time_ns / e.waits)] += e.waits as u32;
                site_hists.insert(
                    KernelSite {
                        state: state as u32,
                        epoch: 0,
                        user_stack: e.user_stack,
                        kernel_stack: e.kernel_stack,
                    },
                    h,
                );
            }
        }
        let mut thread = ThreadTime {
            pid: 1,
            name: "worker".into(),
            ..ThreadTime::default()
        };
        for e in &entries {
            match e.kind {
                Kind::OnCpu => thread.time.running += e.time_ns,
                Kind::Off(s) => thread.time.add_wait(s, e.time_ns),
            }
        }
        let profile = Profile {
            entries,
            threads: [(1, thread)].into_iter().collect(),
            site_hists,
            ..Profile::empty(
                mode,
                Window {
                    start_ns: 0,
                    stop_ns: secs * 1000 * MS,
                },
                10 * MS,
            )
        };
        SavedCapture::of_app(profile, names, None)
    }

    fn function<'a>(d: &'a Diff, name: &str) -> &'a FunctionDelta {
        d.functions
            .iter()
            .find(|f| f.function == name)
            .unwrap_or_else(|| panic!("{name} missing from {:?}", d.functions))
    }

    #[test]
    fn time_moved_between_functions_shows_per_second_whatever_the_lengths() {
        // Before: 10 s, 7.5 s in spin_a and 2.5 s in spin_b. After: 20 s, 5 s and 15 s.
        let before = capture(
            Mode::Wall,
            10,
            vec![on_cpu(1, 7500 * MS), on_cpu(2, 2500 * MS)],
        );
        let after = capture(
            Mode::Wall,
            20,
            vec![on_cpu(1, 5000 * MS), on_cpu(2, 15000 * MS)],
        );
        let d = diff(&before, &after).unwrap();
        let a = function(&d, "spin_a");
        assert_eq!(a.self_ms_per_s, Change::new(750.0, 250.0));
        assert_eq!(a.self_pct, Change::new(75.0, 25.0));
        assert_eq!(a.total_pct, Change::new(75.0, 25.0));
        let b = function(&d, "spin_b");
        assert_eq!(b.self_ms_per_s, Change::new(250.0, 750.0));
        // Both moved by 500 ms/s; `main` is only ever a caller and moved not at all.
        assert_eq!(d.functions.len(), 2);
        assert_eq!(function(&d, "spin_a").total_ms_per_s.change, -500.0);
        assert_eq!(d.states[0].state, "running");
        assert_eq!(d.states[0].ms_per_s, Change::new(1000.0, 1000.0));
        assert_eq!(
            d.stacks.get("app;main;spin_a"),
            Some(&(750_000, 250_000)),
            "{:?}",
            d.stacks
        );
    }

    #[test]
    fn addresses_without_symbols_count_per_file() {
        assert_eq!(function_of("libz.so.1+0x4a2e".into()), "libz.so.1+0x…");
        assert_eq!(function_of("nginx+0x54173".into()), "nginx+0x…");
        assert_eq!(function_of("spin_a".into()), "spin_a");
        assert_eq!(function_of("a+0xzz".into()), "a+0xzz");
        assert_eq!(
            per_file("app;main;libz.so.1+0x10;libz.so.1+0x20;crc32_z;libz.so.1+0x30"),
            "app;main;libz.so.1+0x…;crc32_z;libz.so.1+0x…"
        );
    }

    #[test]
    fn cpu_mode_samples_become_time_per_second() {
        let before = capture(Mode::Cpu, 2, vec![on_cpu(1, 1000 * MS)]);
        let after = capture(Mode::Cpu, 4, vec![on_cpu(2, 1000 * MS)]);
        let d = diff(&before, &after).unwrap();
        // 100 samples of 10 ms in 2 s: 500 ms/s.
        assert_eq!(d.stacks["app;main;spin_a"], (500_000, 0));
        assert_eq!(d.stacks["app;main;spin_b"], (0, 250_000));
    }

    #[test]
    fn sites_compare_time_waits_and_percentiles() {
        // 100 waits of 10 ms in 10 s, then 400 waits of 2 ms in 10 s; a new site after.
        let before = capture(Mode::Wall, 10, vec![wait(3, 9, 1000 * MS, 100)]);
        let after = capture(
            Mode::Wall,
            10,
            vec![wait(3, 9, 800 * MS, 400), wait(4, 8, 500 * MS, 5)],
        );
        let d = diff(&before, &after).unwrap();
        assert_eq!(d.sites.len(), 2);
        let nap = d.sites.iter().find(|s| s.site == "nap ← main").unwrap();
        assert_eq!(nap.ms_per_s, Change::new(100.0, 80.0));
        assert_eq!(nap.waits_per_s, Change::new(10.0, 40.0));
        let (p50b, p50a) = (nap.p50_ms.before.unwrap(), nap.p50_ms.after.unwrap());
        assert!(
            (p50b - 10.0).abs() < 0.5 && (p50a - 2.0).abs() < 0.1,
            "{nap:?}"
        );
        let new = &d.sites[0];
        assert_eq!(new.site, "nap2 ← main", "the largest change first");
        assert_eq!(new.ms_per_s, Change::new(0.0, 50.0));
        assert_eq!(new.p99_ms.before, None);
        assert_eq!(
            d.states.iter().map(|s| s.state).collect::<Vec<_>>(),
            ["sleep"]
        );
    }

    #[test]
    fn different_modes_are_refused_with_a_sentence() {
        let before = capture(Mode::Wall, 1, vec![on_cpu(1, MS)]);
        let after = capture(Mode::Cpu, 1, vec![on_cpu(1, MS)]);
        let err = diff(&before, &after).unwrap_err();
        assert_eq!(
            err,
            DiffError::ModeMismatch {
                before: "wall",
                after: "cpu"
            }
        );
        assert_eq!(
            err.to_string(),
            "the before capture was recorded in --mode wall (on-CPU and off-CPU time) and the \
             after capture in --mode cpu (on-CPU samples only), which do not measure the same \
             thing; record both with the same --mode"
        );
    }
}
