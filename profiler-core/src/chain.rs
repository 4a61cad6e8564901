//! Wait chains across processes: a wait on a socket or a pipe whose other end is a process
//! also profiled is explained by what that process's threads that served it did meanwhile,
//! hop by hop (a wait-for graph in the spirit of wPerf, OSDI '18). The serving threads are
//! the ones that woke the waits (a Unix socket's or a pipe's writer wakes its reader itself)
//! and the ones whose own waits are on connections from the waiting process (loopback TCP
//! wakes its reader from a softirq, so its wakers say "interrupt"). Their time is split with
//! their waits for the next request left out: on the CPU, waiting for a CPU, each blocking
//! site with what it was on; the largest is the hop's cause, and a cause that is itself a wait
//! on another profiled process is followed.

use std::collections::{BTreeMap, BTreeSet};

use profiler_common::{WaitState, stack_id};
use serde::Serialize;

use crate::{
    analysis::Analysis,
    model::{Kind, NamedResource, Profile, ResourceKind, StackNames},
};

/// Hops followed at most (a cycle stops sooner: a process is visited once per chain).
const MAX_HOPS: usize = 4;
/// A chain is reported when its waits are at least this share of the waiting threads' time.
const MIN_WAIT_PCT: f64 = 5.0;

/// One waiting site of one process on another profiled process, and what happened there.
#[derive(Clone, Debug, Serialize)]
pub struct Chain {
    pub pid: u32,
    pub process: String,
    /// The waiting threads' names, `name-tid`, up to 5, and how many.
    pub threads: Vec<String>,
    pub thread_count: usize,
    pub site: String,
    /// What the waits were on (`TCP → 127.0.0.1:5432 (postgres, PID 812)`).
    pub resource: String,
    pub wait_s: f64,
    /// % of the waiting threads' time.
    pub wait_pct: f64,
    pub hops: Vec<Hop>,
}

/// The process at the other end, as its serving threads spent the window.
#[derive(Clone, Debug, Serialize)]
pub struct Hop {
    pub pid: u32,
    pub process: String,
    /// The serving threads, `name-tid`, up to 5, and how many.
    pub threads: Vec<String>,
    pub thread_count: usize,
    /// Their time, waits for the next request left out.
    pub serving_s: f64,
    /// Shares of it: on the CPU, waiting for a CPU, and the largest blocking sites.
    pub on_cpu_pct: f64,
    pub runnable_pct: f64,
    pub sites: Vec<HopSite>,
    /// The largest of the three (`on the CPU`, `waiting for a CPU`, or a site with what it
    /// was on) and its share.
    pub cause: String,
    pub cause_pct: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct HopSite {
    pub state: &'static str,
    pub site: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    pub pct: f64,
}

/// Waiting process, its site, the process at the other end, what the waits were on.
type WaitingKey = (u32, String, u32, String);
/// A serving thread's blocking site: state, label, what it was on.
type HopSiteKey = (&'static str, String, Option<String>);

/// Every chain of the capture, longest wait first.
pub fn chains(profile: &Profile, names: &StackNames, analysis: &Analysis) -> Vec<Chain> {
    let mut waiting: BTreeMap<WaitingKey, (u64, BTreeSet<u32>)> = BTreeMap::new();
    for e in &profile.entries {
        let Some(state) = e.blocked_state() else {
            continue;
        };
        let Some(peer) = peer_of(profile, e.resource, e.pid)
            .or_else(|| woken_from(profile, e.resource, e, state))
        else {
            continue;
        };
        let site = site_label(analysis, names, state, e.user_stack, e.kernel_stack);
        let text = resource_text(profile, e.resource);
        let w = waiting.entry((e.pid, site, peer, text)).or_default();
        w.0 += e.time_ns;
        w.1.insert(e.tid);
    }
    let mut out: Vec<Chain> = waiting
        .into_iter()
        .filter_map(|((pid, site, peer, resource), (ns, tids))| {
            let total: u64 = tids
                .iter()
                .filter_map(|t| profile.threads.get(t))
                .map(|t| t.total_ns())
                .sum();
            let wait_pct = pct(ns, total);
            (wait_pct >= MIN_WAIT_PCT).then(|| Chain {
                pid,
                process: process_name(profile, pid),
                threads: tids
                    .iter()
                    .take(5)
                    .map(|t| thread_name(profile, *t))
                    .collect(),
                thread_count: tids.len(),
                site,
                hops: follow(profile, names, analysis, (pid, &tids, &resource), peer),
                resource,
                wait_s: ns as f64 / 1e9,
                wait_pct,
            })
        })
        .collect();
    out.sort_by(|a, b| b.wait_s.total_cmp(&a.wait_s));
    out
}

/// The profiled process at the other end of `resource`, if another than `pid`.
fn peer_of(profile: &Profile, resource: u64, pid: u32) -> Option<u32> {
    let r = profile.resources.get(&resource)?;
    let peer = r.peer_pid?;
    let followed = matches!(r.kind, ResourceKind::Socket | ResourceKind::Pipe);
    (followed && peer != pid && profile.processes.contains_key(&peer)).then_some(peer)
}

/// For a socket or pipe whose other end the capture side could not name (a Unix socket's
/// client end), the profiled process whose threads woke most of these waits.
fn woken_from(
    profile: &Profile,
    resource: u64,
    e: &crate::model::Entry,
    state: WaitState,
) -> Option<u32> {
    let r = profile.resources.get(&resource)?;
    if !matches!(r.kind, ResourceKind::Socket | ResourceKind::Pipe) {
        return None;
    }
    let mut by_pid: BTreeMap<u32, u64> = BTreeMap::new();
    for w in profile.wakers.iter().filter(|w| {
        w.tid == e.tid
            && w.state == state
            && w.user_stack == e.user_stack
            && w.kernel_stack == e.kernel_stack
            && w.waker_tid != 0
            && w.waker_pid != e.pid
            && profile.processes.contains_key(&w.waker_pid)
    }) {
        *by_pid.entry(w.waker_pid).or_default() += w.count;
    }
    by_pid
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(pid, _)| pid)
}

/// Hop after hop from the waiting threads `tids` of `pid` into `peer`.
fn follow(
    profile: &Profile,
    names: &StackNames,
    analysis: &Analysis,
    (pid, tids, resource): (u32, &BTreeSet<u32>, &str),
    peer: u32,
) -> Vec<Hop> {
    let mut hops = Vec::new();
    let mut visited = BTreeSet::from([pid]);
    let (mut client, mut clients, mut server) = (pid, tids.clone(), peer);
    // The first hop's connection is known by its ends; later ones by their processes.
    let mut via = profile.resources.values().find(|r| r.text == resource);
    while hops.len() < MAX_HOPS && visited.insert(server) {
        let serving = serving_threads(profile, (client, &clients, via.take()), server);
        if serving.is_empty() {
            break;
        }
        let (hop, next) = hop(profile, names, analysis, client, server, &serving);
        hops.push(hop);
        match next {
            Some(next) => (client, clients, server) = (server, serving, next),
            None => break,
        }
    }
    hops
}

/// The threads of `server` that served `client`'s threads: those that woke them, else those
/// whose own waits are on the other end of `via` (the client's connection), else on any
/// connection from `client`.
fn serving_threads(
    profile: &Profile,
    (client, clients, via): (u32, &BTreeSet<u32>, Option<&NamedResource>),
    server: u32,
) -> BTreeSet<u32> {
    let woke: BTreeSet<u32> = profile
        .wakers
        .iter()
        .filter(|w| clients.contains(&w.tid) && w.waker_pid == server && w.waker_tid != 0)
        .map(|w| w.waker_tid)
        .filter(|t| profile.threads.contains_key(t))
        .collect();
    if !woke.is_empty() {
        return woke;
    }
    // Woken from an interrupt (loopback TCP): the threads on connections from the client.
    let on_connections = |answers: &dyn Fn(&NamedResource) -> bool| -> BTreeSet<u32> {
        profile
            .entries
            .iter()
            .filter(|e| e.pid == server && waits_on(profile, e.resource, client))
            .filter(|e| profile.resources.get(&e.resource).is_some_and(answers))
            .map(|e| e.tid)
            .filter(|t| profile.threads.contains_key(t))
            .collect()
    };
    let answering = via.map(|v| on_connections(&|r| other_end(r, v)));
    match answering {
        Some(threads) if !threads.is_empty() => threads,
        _ => on_connections(&|_| true),
    }
}

/// `server_side` is the other end of the client's `client_side`: the same protocol, and the
/// server's local address the client's peer (TCP/UDP) or the same path (a Unix socket).
fn other_end(server_side: &NamedResource, client_side: &NamedResource) -> bool {
    server_side.protocol == client_side.protocol
        && ((server_side.local.is_some() && server_side.local == client_side.peer)
            || (server_side.path.is_some() && server_side.path == client_side.path))
}

/// A wait on a socket or pipe whose other end is `pid`.
fn waits_on(profile: &Profile, resource: u64, pid: u32) -> bool {
    profile
        .resources
        .get(&resource)
        .is_some_and(|r| r.peer_pid == Some(pid))
}

/// The serving threads' time: on the CPU (and in which leaf functions), waiting for a CPU,
/// and per blocking site with what it was on (and the profiled process it leads to).
#[derive(Default)]
struct Split {
    on: u64,
    runnable: u64,
    functions: BTreeMap<String, u64>,
    sites: BTreeMap<HopSiteKey, (u64, Option<u32>)>,
}

impl Split {
    /// `serving`'s time, waits for `client`'s next request and idle waits left out.
    fn of(
        profile: &Profile,
        (names, analysis): (&StackNames, &Analysis),
        (client, server): (u32, u32),
        serving: &BTreeSet<u32>,
    ) -> Self {
        let mut split = Split::default();
        for e in profile.entries.iter().filter(|e| serving.contains(&e.tid)) {
            match e.kind {
                Kind::OnCpu => {
                    split.on += e.time_ns;
                    let frames = crate::model::stack_frames(e.user_stack, stack_id::EMPTY, names);
                    if let Some(leaf) = frames.last() {
                        *split.functions.entry(leaf.clone()).or_default() += e.time_ns;
                    }
                }
                Kind::Off(WaitState::RunqueueWoken | WaitState::RunqueuePreempted) => {
                    split.runnable += e.time_ns
                }
                Kind::Off(_) => {
                    let Some(state) = e.blocked_state() else {
                        continue;
                    };
                    if waits_on(profile, e.resource, client) {
                        continue;
                    }
                    let id = analysis
                        .sites
                        .site(state, e.user_stack, e.kernel_stack, names);
                    if id.is_idle_wait() {
                        continue;
                    }
                    let label = analysis.sites.label(&id).to_string();
                    let resource = profile.resources.get(&e.resource).map(|r| r.text.clone());
                    let site = split.sites.entry((id.state, label, resource)).or_default();
                    site.0 += e.time_ns;
                    site.1 = site.1.or(peer_of(profile, e.resource, server));
                }
            }
        }
        split
    }

    fn total(&self) -> u64 {
        self.on + self.runnable + self.sites.values().map(|s| s.0).sum::<u64>()
    }

    /// The largest part, its time, and the process it leads to: a blocking site (with what
    /// it was on), waiting for a CPU, or on the CPU (with its hottest leaf function).
    fn cause(&self) -> (String, u64, Option<u32>) {
        let top = self.sites.iter().max_by_key(|(_, (ns, _))| *ns);
        match top {
            Some(((_, label, r), (ns, next))) if *ns >= self.on && *ns >= self.runnable => {
                let on_what = r.as_ref().map(|r| format!(" on {r}")).unwrap_or_default();
                (format!("{label}{on_what}"), *ns, *next)
            }
            _ if self.runnable > self.on => ("waiting for a CPU".to_string(), self.runnable, None),
            _ => {
                let hottest = self.functions.iter().max_by_key(|(_, ns)| **ns);
                let cause = match hottest {
                    Some((f, ns)) if ns * 2 >= self.on => format!("on the CPU, most in {f}"),
                    _ => "on the CPU".to_string(),
                };
                (cause, self.on, None)
            }
        }
    }
}

/// What the serving threads did, waits for `client`'s next request and idle waits left out;
/// and the next process to follow, when the cause is a wait on another profiled one.
fn hop(
    profile: &Profile,
    names: &StackNames,
    analysis: &Analysis,
    client: u32,
    server: u32,
    serving: &BTreeSet<u32>,
) -> (Hop, Option<u32>) {
    let split = Split::of(profile, (names, analysis), (client, server), serving);
    let serving_ns = split.total();
    let (cause, cause_ns, next) = split.cause();
    let mut ranked: Vec<_> = split.sites.into_iter().collect();
    ranked.sort_by_key(|(_, (ns, _))| std::cmp::Reverse(*ns));
    let hop = Hop {
        pid: server,
        process: process_name(profile, server),
        threads: serving
            .iter()
            .take(5)
            .map(|t| thread_name(profile, *t))
            .collect(),
        thread_count: serving.len(),
        serving_s: serving_ns as f64 / 1e9,
        on_cpu_pct: pct(split.on, serving_ns),
        runnable_pct: pct(split.runnable, serving_ns),
        sites: ranked
            .into_iter()
            .take(3)
            .map(|((state, site, resource), (ns, _))| HopSite {
                state,
                site,
                resource,
                pct: pct(ns, serving_ns),
            })
            .collect(),
        cause,
        cause_pct: pct(cause_ns, serving_ns),
    };
    (hop, next)
}

fn site_label(
    analysis: &Analysis,
    names: &StackNames,
    state: WaitState,
    user: u64,
    kernel: u64,
) -> String {
    let id = analysis.sites.site(state, user, kernel, names);
    analysis.sites.label(&id).to_string()
}

fn resource_text(profile: &Profile, id: u64) -> String {
    profile
        .resources
        .get(&id)
        .map_or_else(String::new, |r: &NamedResource| r.text.clone())
}

fn process_name(profile: &Profile, pid: u32) -> String {
    profile
        .processes
        .get(&pid)
        .map_or_else(|| "?".to_string(), |p| p.name.clone())
}

fn thread_name(profile: &Profile, tid: u32) -> String {
    let name = profile.threads.get(&tid).map_or("?", |t| t.name.as_str());
    format!("{name}-{tid}")
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 * 1000.0 / whole as f64).round() / 10.0
    }
}

impl Chain {
    /// The chain as the verdict says it.
    pub fn sentence(&self) -> String {
        let (who, verb) = match self.threads.as_slice() {
            [one] if self.thread_count == 1 => (
                format!("{} (PID {})'s thread {one}", self.process, self.pid),
                "spends",
            ),
            _ => (
                format!(
                    "{} (PID {})'s {} threads",
                    self.process, self.pid, self.thread_count
                ),
                "spend",
            ),
        };
        let mut s = format!(
            "{who} {verb} {:.0} % of their time in {} on {}",
            self.wait_pct, self.site, self.resource
        );
        if self.thread_count == 1 {
            s = s.replacen("of their time", "of its time", 1);
        }
        for hop in &self.hops {
            s.push_str(&format!(
                "; {} (PID {})'s {} serving it spent {:.0} % of that time {}",
                hop.process,
                hop.pid,
                if hop.thread_count == 1 {
                    "thread".to_string()
                } else {
                    format!("{} threads", hop.thread_count)
                },
                hop.cause_pct,
                in_cause(&hop.cause),
            ));
        }
        s
    }
}

/// "on the CPU" and "waiting for a CPU" read as they are; a site reads "in <site>".
fn in_cause(cause: &str) -> String {
    if cause.starts_with("on the CPU") || cause == "waiting for a CPU" {
        cause.to_string()
    } else {
        format!("in {cause}")
    }
}
