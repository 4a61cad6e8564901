//! Labels a reader of that runtime writes: a wait's meaning, the library call the application
//! made, and the application's frames that made it — `reply ← HttpClient.send ←
//! OrderController.price`, `pooled connection ← HikariPool.getConnection ← JdbcTemplate.query
//! ← OrderController.list`, `monitor enter ← AuditLog.record ← OrderController.list` — the
//! runtime's and frameworks' plumbing between them (Netty's pipeline, Spring's dispatch,
//! reflection, Tomcat's valves) left in the stack, out of the label. A wait named so
//! ([`SiteName`]) is one site however its plumbing differs: interpreted or compiled, inlined
//! or not, through a bridge method or not.

use super::{
    Meaning, WaitKind, function, is, is_java, is_jvm_stack, is_plumbing, known::*, lock_taker,
    short_java,
};

/// A wait named by its meaning: what it waits for, the library calls that place it (leaf
/// first, as the label shows them) and the application's frames below them (root→leaf).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteName {
    pub what: String,
    pub calls: Vec<String>,
    pub app: Vec<String>,
}

impl SiteName {
    /// The label with `depth` ≥ 1: at depth 1 the meaning, the calls and the application's
    /// frames up to four parts (at least one application frame); each depth more adds one
    /// more caller, to tell apart sites that would read alike.
    pub fn label(&self, depth: usize) -> String {
        let base = 3usize.saturating_sub(self.calls.len()).clamp(1, 2);
        let app = base + depth.saturating_sub(1);
        let mut parts: Vec<&str> = vec![&self.what];
        parts.extend(self.calls.iter().map(String::as_str));
        parts.extend(self.app.iter().rev().take(app).map(|f| display(f)));
        parts.dedup();
        parts.join(" ← ")
    }
}

/// How a frame reads in a label: a Java method by its class and name, a native one as is.
fn display(frame: &str) -> &str {
    if is_java(frame) {
        short_java(frame)
    } else {
        function(frame)
    }
}

/// The name of a wait with these frames and this meaning: a JVM thread's wait with frames of
/// the application's own, and a native thread's wait for a driver's or client's reply or a
/// pooled connection. None for the others, which are named by their stacks.
pub fn site_name(frames: &[String], m: &Meaning) -> Option<SiteName> {
    if is_jvm_stack(frames) {
        jvm_name(frames, m)
    } else {
        native_name(frames, m)
    }
}

fn jvm_name(frames: &[String], m: &Meaning) -> Option<SiteName> {
    let java: Vec<usize> = (0..frames.len()).filter(|&i| is_java(&frames[i])).collect();
    let leaf_app = *java.iter().rfind(|&&i| !is_plumbing(&frames[i]))?;
    let mut app: Vec<String> = java
        .iter()
        .filter(|&&i| i <= leaf_app && !is_plumbing(&frames[i]))
        .map(|&i| function(&frames[i]).to_string())
        .collect();
    // A bridge method and its target, or a recursion, read as one frame.
    app.dedup();
    // The library call the application made: the first Java frame past its own. A lock's
    // is its machinery (`ReentrantLock.lock`): the frame that took it names it.
    let api = java
        .iter()
        .copied()
        .find(|&i| i > leaf_app)
        .filter(|_| m.kind != WaitKind::Lock);
    let (what, anchor) = what_and_anchor(frames, m, api, leaf_app);
    let mut calls: Vec<String> = Vec::new();
    for i in [anchor, api].into_iter().flatten() {
        let name = call_name(&frames[i]);
        if name != what && calls.last() != Some(&name) {
            calls.push(name);
        }
    }
    Some(SiteName { what, calls, app })
}

/// What the label starts with, and the frame (index) that gave the wait its meaning when the
/// label names it besides the application's call (a pool, a client, a lock taken in a
/// library).
fn what_and_anchor(
    frames: &[String],
    m: &Meaning,
    api: Option<usize>,
    leaf_app: usize,
) -> (String, Option<usize>) {
    let outermost = |set: &[&str]| frames.iter().position(|f| is(f, set));
    match m.kind {
        WaitKind::Lock => {
            let taker = lock_taker(frames);
            let what = if taker.is_some_and(|t| t.2) {
                "monitor enter"
            } else {
                "lock"
            };
            let anchor = taker.map(|t| t.0).filter(|&t| t > leaf_app);
            (what.into(), anchor)
        }
        WaitKind::Connection => ("pooled connection".into(), outermost(POOL_FRAMES)),
        WaitKind::Reply => {
            let client = frames
                .iter()
                .position(|f| CLIENT_CALLS.iter().any(|(c, _)| *c == function(f)));
            match (client, m.client) {
                (Some(at), _) => ("reply".into(), Some(at)),
                (None, Some(driver)) if m.socket => (format!("socket read ({driver})"), None),
                (None, Some(driver)) => (format!("reply ({driver})"), None),
                (None, None) => ("reply".into(), None),
            }
        }
        WaitKind::Io if m.socket => (socket_what(frames).into(), None),
        WaitKind::Sleep if any_java(frames, "java.lang.Thread.sleep") => {
            ("Thread.sleep".into(), None)
        }
        WaitKind::Condition | WaitKind::Work => {
            let what = api.map_or_else(|| m.kind.name().to_string(), |i| call_name(&frames[i]));
            (what, None)
        }
        _ => (
            leaf_call(frames).map_or_else(|| m.kind.name().to_string(), str::to_string),
            None,
        ),
    }
}

fn any_java(frames: &[String], name: &str) -> bool {
    frames.iter().any(|f| function(f) == name)
}

/// A socket's wait by its direction.
fn socket_what(frames: &[String]) -> &'static str {
    let has = |word: &str| frames.iter().any(|f| function(f).contains(word));
    if has("connect") {
        "connect"
    } else if has("write") || has("send") || has("Write") {
        "socket write"
    } else {
        "socket read"
    }
}

/// A call as the label names it: a client's entry by its API's name (`HttpClient.send`, not
/// `HttpClientFacade.send`), a Java method by class and name.
fn call_name(frame: &str) -> String {
    let name = function(frame);
    CLIENT_CALLS
        .iter()
        .find(|(call, _)| *call == name)
        .map_or_else(
            || display(frame).to_string(),
            |(_, label)| label.to_string(),
        )
}

/// The innermost native call of a user stack that says what it waits in (`fsync`, `read`,
/// `epoll_wait`): not the JVM's C++, not a libc internal, not a kernel frame.
fn leaf_call(frames: &[String]) -> Option<&str> {
    frames
        .iter()
        .rev()
        .filter(|f| !f.ends_with("_[k]"))
        .take_while(|f| !is_java(f))
        .map(|f| function(f))
        .find(|f| {
            !f.starts_with('_') && !f.contains("::") && !f.contains("+0x") && !f.contains('[')
        })
}

/// A native thread waiting in a driver or client (`PQexec`) or a pool: the driver's outermost
/// call and the named functions that called it.
fn native_name(frames: &[String], m: &Meaning) -> Option<SiteName> {
    if !matches!(m.kind, WaitKind::Reply | WaitKind::Connection) {
        return None;
    }
    let driver = |f: &String| {
        let name = function(f);
        DRIVERS.iter().any(|(p, _)| name.starts_with(p))
            || CLIENT_CALLS.iter().any(|(c, _)| *c == name)
            || POOL_FRAMES.contains(&name)
    };
    let at = frames.iter().position(driver)?;
    let app: Vec<String> = frames[..at]
        .iter()
        .filter(|f| !f.contains("+0x") && !f.starts_with('[') && !f.starts_with("__"))
        .map(|f| function(f).to_string())
        .collect();
    let what = match (m.kind, m.client) {
        (WaitKind::Connection, _) => "pooled connection".to_string(),
        (_, Some(client)) if CLIENT_CALLS.iter().any(|(_, l)| *l == client) => "reply".into(),
        (_, Some(driver)) => format!("reply ({driver})"),
        _ => "reply".into(),
    };
    Some(SiteName {
        what,
        calls: vec![call_name(&frames[at])],
        app,
    })
}

/// A lock wait's label: `monitor enter ← Ledger$AuditLog.append` (a Java monitor), `lock ←
/// Store.put` (j.u.c, pthread, Go); `callers` > 1 adds callers of the frame that took it.
/// None for a wait that is not a lock's, or whose taker is unknown.
pub fn lock_label(frames: &[String], callers: usize) -> Option<String> {
    if super::classify(frames) != WaitKind::Lock {
        return None;
    }
    let (taker, _, monitor) = lock_taker(frames)?;
    let mut label = String::from(if monitor { "monitor enter" } else { "lock" });
    let jvm = is_jvm_stack(frames);
    let named = frames[..=taker]
        .iter()
        .rev()
        .filter(|f| !jvm || is_java(f))
        .take(callers.max(1));
    for f in named {
        label.push_str(" ← ");
        label.push_str(if jvm { short_java(f) } else { f });
    }
    Some(label)
}

/// A JVM thread's wait label from its Java frames, leaf first after the blocking C call when
/// the leaf is one (`epoll_wait ← EPoll.wait ← …`), the JVM's C++ and the JDK's park machinery
/// left out; `callers` Java frames (at least two). A thread of the JVM's own, with no Java
/// frame, reads `the JVM's own condition wait`. None for a stack that is not a JVM thread's.
/// For stacks with no frame of the application's own ([`site_name`] names the others).
pub fn jvm_label(frames: &[String], callers: usize) -> Option<String> {
    if !is_jvm_stack(frames) {
        return None;
    }
    if let Some(label) = lock_label(frames, callers) {
        return Some(label);
    }
    let java = java_frames_leaf_first(frames);
    let kind = super::classify(frames);
    if java.is_empty() {
        // A thread of the JVM's own (GC, compiler): its C++ is in the stack, not the label.
        return Some(match kind {
            WaitKind::Work => "the JVM's own wait for work".into(),
            kind => format!("the JVM's own {} wait", kind.name()),
        });
    }
    // A system call's wrapper (fsync, read, epoll_wait) says what the Java frames wait in;
    // a sleep's or a park's condition variable says nothing more than they do.
    let leaf = frames
        .last()
        .map(|f| function(f))
        .filter(|_| matches!(kind, WaitKind::Io | WaitKind::Events | WaitKind::File))
        .filter(|f| !f.starts_with('_') && !f.contains("::") && !f.contains("+0x") && !is_java(f));
    let parts: Vec<&str> = leaf
        .into_iter()
        .chain(java.into_iter().take(callers.max(2)))
        .collect();
    Some(parts.join(" ← "))
}

/// The Java frames leaf first, short, a JDK native helper (`sync0`) read as the method that
/// calls it (`sync`), the park machinery passed over, a frame repeated in a row once.
fn java_frames_leaf_first(frames: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for f in frames.iter().rev().filter(|f| is_java(f)) {
        let name = function(f);
        if MACHINERY.iter().any(|m| name.starts_with(m)) {
            continue;
        }
        let short = short_java(f);
        if let Some(last) = out.last()
            && (last.strip_suffix('0') == Some(short) || *last == short)
        {
            out.pop();
        }
        out.push(short);
    }
    out
}
