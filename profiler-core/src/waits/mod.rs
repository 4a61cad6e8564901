//! Waits by meaning: a wait's frames (root→leaf, user then kernel) → what its thread waited
//! for — a lock, a pooled connection, a downstream's reply, a file, a socket, a sleep, a
//! condition, events, or its next task — and why: for its next task (an idle wait), inside a
//! task (work, whatever the thread's CPU share), or its stack does not say. The meaning comes
//! from context, the frames below the blocking call, not from one leaf name: HikariCP's
//! `SynchronousQueue.poll` is a wait for a connection, a pool's `getTask` is a wait for work.
//! `known.rs` holds the runtimes' and frameworks' frame names, `label.rs` the labels a reader
//! of that runtime writes. Pure; analysis and the report use it.

mod known;
mod label;

use serde::Serialize;

pub use known::EVENT_FRAMES;
pub use label::{SiteName, jvm_label, lock_label, site_name};

use known::*;

/// What a wait was for ([`meaning`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// A lock held by another thread: a Java monitor, a j.u.c lock, a pthread or Go mutex.
    Lock,
    /// A pool's worker, an acceptor or a scheduler's thread waiting for its next task.
    Work,
    /// A connection from a pool (HikariCP, DBCP, c3p0, Go's database/sql).
    Connection,
    /// A downstream's reply: an HTTP client's call, a database or cache driver's read.
    Reply,
    /// A file's read, write or flush.
    File,
    /// A condition, a future or a park not under a lock's acquire.
    Condition,
    /// A sleep for a time.
    Sleep,
    /// An event loop waiting for any of many events (epoll, poll, select).
    Events,
    /// Reads and writes of sockets and pipes, and everything else a thread blocks in.
    Io,
}

impl WaitKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Work => "waiting for work",
            Self::Connection => "pooled connection",
            Self::Reply => "reply",
            Self::File => "file I/O",
            Self::Condition => "condition",
            Self::Sleep => "sleep",
            Self::Events => "event loop",
            Self::Io => "io",
        }
    }
}

/// Why a thread waited: the analysis calls a thread idle when (nearly) all its waits are not
/// work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// For its next task or event: a pool's queue under its run loop, an event loop's poll
    /// with no handler below, an acceptor, a runtime's housekeeping thread (JIT compiler, GC,
    /// reference handler, timers).
    Idle,
    /// Inside a task: a lock, a pooled connection, a downstream's reply, a file, a socket's
    /// read or write, or any wait with a task or a request handler below it.
    Task,
    /// A sleep, a condition or a pipe's read whose stack says neither (a C worker's
    /// `pthread_cond_wait`).
    Unknown,
}

/// A wait's meaning ([`meaning`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meaning {
    pub kind: WaitKind,
    pub purpose: Purpose,
    /// An event loop's frames are below the wait (Netty, a selector loop, nginx, libuv).
    pub event_loop: bool,
    /// The client or driver a reply is waited for in (`MariaDB Connector/J`, `HttpClient.send`).
    pub client: Option<&'static str>,
    /// The wait is a socket's read, write or connect.
    pub socket: bool,
}

/// A frame's function: without the inlined frames' `_[i]` and without C++ arguments.
pub fn function(frame: &str) -> &str {
    let f = frame.strip_suffix("_[i]").unwrap_or(frame);
    // Go's `sync.(*Mutex).Lock` has parentheses of its own; C++'s arguments come last.
    match f.rfind('(') {
        Some(at) if f.ends_with(')') && at > 0 && !f[..at].ends_with('.') => &f[..at],
        _ => f,
    }
}

fn is(frame: &str, set: &[&str]) -> bool {
    set.contains(&function(frame))
}

fn any_in(frames: &[String], set: &[&str]) -> bool {
    frames.iter().any(|f| is(f, set))
}

fn ends_with_any(frame: &str, suffixes: &[&str]) -> bool {
    let f = function(frame);
    suffixes.iter().any(|s| f.ends_with(s))
}

/// Whether a kernel frame (`…_[k]`) starts with one of `prefixes`.
fn kernel_has(frames: &[String], prefixes: &[&str]) -> bool {
    frames
        .iter()
        .filter_map(|f| f.strip_suffix("_[k]"))
        .any(|k| prefixes.iter().any(|p| k.starts_with(p)))
}

/// What a wait with these frames (root→leaf, user then kernel if any) was for and why
/// ([`WaitKind`], [`Purpose`]). The meaning nearest the thread's purpose wins: a pool's run
/// loop fetching its next task is a wait for work even where it takes the queue's lock; a
/// pool's borrow is a wait for a connection even where it parks on a queue; a lock's acquire
/// beats the condition variable it parks on; a socket's read beats the poll it waits in.
pub fn meaning(frames: &[String]) -> Meaning {
    let run_loop = frames
        .iter()
        .any(|f| ends_with_any(f, RUN_LOOP_SUFFIXES) || is(f, RUN_LOOP_FRAMES));
    let in_task = !run_loop
        && frames
            .iter()
            .any(|f| is(f, TASK_FRAMES) || ends_with_any(f, TASK_RUNNER_SUFFIXES));
    let socket = any_in(frames, SOCKET_READ_FRAMES) || kernel_has(frames, SOCKET_KERNEL_PREFIXES);
    let (kind, client) = kind_of(frames, run_loop, in_task, socket);
    let housekeeping = any_in(frames, HOUSEKEEPING_FRAMES) || is_jvm_own_thread(frames);
    let purpose = match kind {
        WaitKind::Work => Purpose::Idle,
        _ if housekeeping => Purpose::Idle,
        WaitKind::Events if !in_task => Purpose::Idle,
        WaitKind::Lock | WaitKind::Connection | WaitKind::Reply | WaitKind::File => Purpose::Task,
        // A thread blocked in a socket's read or write waits for its peer (an upstream, a
        // database, a client's request body): work. Idle connections wait in a poll or an
        // event loop, which is an event wait.
        WaitKind::Io if socket => Purpose::Task,
        _ if in_task => Purpose::Task,
        _ => Purpose::Unknown,
    };
    Meaning {
        kind,
        purpose,
        event_loop: any_in(frames, EVENT_LOOP_FRAMES),
        client,
        socket,
    }
}

/// The kind of a wait, with the client or driver of a reply.
fn kind_of(
    frames: &[String],
    run_loop: bool,
    in_task: bool,
    socket: bool,
) -> (WaitKind, Option<&'static str>) {
    let queue = any_in(frames, QUEUE_FRAMES);
    let kind = if run_loop {
        WaitKind::Work
    } else if any_in(frames, POOL_FRAMES) {
        WaitKind::Connection
    } else if queue && !in_task {
        WaitKind::Work
    } else if any_in(frames, MONITOR_FRAMES) || any_in(frames, LOCK_FRAMES) {
        WaitKind::Lock
    } else if let Some(client) = client_call(frames).or_else(|| driver_called(frames)) {
        return (WaitKind::Reply, Some(client));
    } else if any_in(frames, ACCEPT_FRAMES) && !in_task {
        WaitKind::Work
    } else if queue {
        WaitKind::Condition
    } else if any_in(frames, SLEEP_FRAMES) {
        WaitKind::Sleep
    } else if !socket && (any_in(frames, FILE_FRAMES) || kernel_has(frames, FILE_KERNEL_PREFIXES)) {
        WaitKind::File
    } else if socket {
        WaitKind::Io
    } else if any_in(frames, CONDITION_FRAMES) {
        WaitKind::Condition
    } else if any_in(frames, EVENT_FRAMES) {
        WaitKind::Events
    } else {
        WaitKind::Io
    };
    (kind, None)
}

/// The outermost client call of these frames, as the label names it (`HttpClient.send`).
fn client_call(frames: &[String]) -> Option<&'static str> {
    frames.iter().find_map(|f| {
        let name = function(f);
        CLIENT_CALLS
            .iter()
            .find(|(call, _)| *call == name)
            .map(|(_, label)| *label)
    })
}

/// The driver a wait is in, when something else called it (the application, a data-access
/// layer, a pool's proxy): a driver's own background thread waits for its own reasons.
fn driver_called(frames: &[String]) -> Option<&'static str> {
    let (at, driver) = frames.iter().enumerate().find_map(|(i, f)| {
        let name = function(f);
        DRIVERS
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix))
            .map(|(_, driver)| (i, *driver))
    })?;
    let called = frames[..at].iter().any(|f| {
        let name = function(f);
        if is_java(f) {
            !is_plumbing(name) || DATA_ACCESS_PREFIXES.iter().any(|p| name.starts_with(p))
        } else {
            // A native caller: any named function but a thread's start.
            !name.contains("+0x")
                && !name.starts_with('[')
                && !name.starts_with("__")
                && !matches!(name, "start_thread" | "clone" | "clone3" | "_start")
        }
    });
    called.then_some(driver)
}

/// Whether a Java frame is the runtime's, a framework's or a library's (known packages,
/// generated proxies and lambdas), not the application's own.
pub fn is_plumbing(frame: &str) -> bool {
    let f = function(frame);
    PLUMBING_PREFIXES.iter().any(|p| f.starts_with(p))
        || GENERATED_MARKERS.iter().any(|m| f.contains(m))
}

/// A thread of the JVM's own (JIT compiler, GC, VM thread, the launcher waiting for main):
/// a whole stack, from the thread's start, with JVM frames and no Java code on it. A Java
/// thread's stack cut short above its first Java frame is not one.
fn is_jvm_own_thread(frames: &[String]) -> bool {
    let from_start = frames.iter().any(|f| {
        f.starts_with("thread_native_entry(")
            || f.starts_with("Thread::call_run(")
            || f == "JavaMain"
            || f == "CallJavaMainInNewThread"
    });
    from_start
        && is_jvm_stack(frames)
        && !frames
            .iter()
            .any(|f| is_java(f) || f.contains("JavaCalls::"))
}

/// A thread named like an event loop (`nioEventLoopGroup-3-1`, as the kernel keeps it:
/// `nioEventLoopGro`, 15 bytes).
pub fn is_event_loop_thread(name: &str) -> bool {
    EVENT_LOOP_THREAD_NAMES
        .iter()
        .any(|n| name.starts_with(&n[..n.len().min(15)]))
}

/// What a wait with these frames was for ([`meaning`]'s kind).
pub fn classify(frames: &[String]) -> WaitKind {
    meaning(frames).kind
}

/// Frames that make a wait a wait for work ([`Purpose::Idle`]) wherever they are: a pool's
/// or a scheduler's run loop, and queues' takes with no task below them. For the report.
pub fn idle_wait_frames() -> Vec<&'static str> {
    RUN_LOOP_SUFFIXES
        .iter()
        .chain(RUN_LOOP_FRAMES)
        .chain(QUEUE_FRAMES)
        .chain(HOUSEKEEPING_FRAMES)
        .copied()
        .collect()
}

/// Whether these frames are a JVM thread's: Java frames (by the JDK's packages), the JVM's
/// calls into Java, the java launcher's main thread, the start of a thread of the JVM's own
/// (GC, compiler, VM thread), or the JVM's monitor, `os::` and `JVM_` functions (a stack cut
/// short before its Java frames).
pub fn is_jvm_stack(frames: &[String]) -> bool {
    frames.iter().any(|f| {
        f.starts_with("java.")
            || f.starts_with("jdk.")
            || f.contains("JavaCalls::")
            || f.contains("JavaThread::")
            || f.starts_with("thread_native_entry(")
            || f == "JavaMain"
            || f == "CallJavaMainInNewThread"
            || f.starts_with("Thread::call_run(")
            || f.starts_with("os::")
            || f.starts_with("JVM_")
            || MONITOR_FRAMES.contains(&function(f))
    })
}

/// Whether a frame is the JVM's own machinery by its name: HotSpot's C++ (`PhaseChaitin::Split
/// (…)`, `ObjectMonitor::EnterI(…)`), its stubs, `JVM_` and `Unsafe_` entry points,
/// `SpinPause`. The verdict names none of them as where the CPU time went.
pub fn is_jvm_internal(frame: &str) -> bool {
    let f = function(frame);
    if f.starts_with("JVM_")
        || f.starts_with("Unsafe_")
        || f.starts_with("StubRoutines")
        || f == "SpinPause"
        || f == "Interpreter"
        || MONITOR_FRAMES.contains(&f)
    {
        return true;
    }
    f.split_once("::").is_some_and(|(class, _)| {
        HOTSPOT_CLASSES.contains(&class)
            || HOTSPOT_CLASS_PREFIXES.iter().any(|p| {
                class
                    .strip_prefix(p)
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()))
            })
    })
}

/// Whether a frame of a JVM stack is a Java method (`Class.method`), not the JVM's C++, a
/// stub, a native library's function or an address.
pub fn is_java(frame: &str) -> bool {
    let f = function(frame);
    f.contains('.')
        && !f.contains("::")
        && !f.contains(['(', ' ', '<', '+', '['])
        && !f.starts_with('_')
        && !f.ends_with(".so")
}

/// `java.util.concurrent.ThreadPoolExecutor.getTask` → `ThreadPoolExecutor.getTask`.
pub fn short_java(frame: &str) -> &str {
    let f = function(frame);
    match f.rfind('.').and_then(|m| f[..m].rfind('.')) {
        Some(at) => &f[at + 1..],
        None => f,
    }
}

/// The frame (index) that took the lock: the caller of the outermost lock frame, passing
/// over the lock's machinery (j.u.c's `ReentrantLock.lock`) and, in a JVM, its C++ and stubs;
/// with that lock frame's index and whether it is a Java monitor's.
pub fn lock_taker(frames: &[String]) -> Option<(usize, usize, bool)> {
    let monitor = frames
        .iter()
        .position(|f| MONITOR_FRAMES.contains(&function(f)));
    let outer = monitor.or_else(|| {
        frames
            .iter()
            .position(|f| LOCK_FRAMES.contains(&function(f)))
    })?;
    let jvm = is_jvm_stack(frames);
    let taker = frames[..outer].iter().rposition(|f| {
        let name = function(f);
        let machinery = MACHINERY.iter().any(|m| name.starts_with(m));
        let unnamed = name.contains("+0x") || name.starts_with('[');
        !machinery && !unnamed && (!jvm || is_java(f))
    })?;
    Some((taker, outer, monitor.is_some()))
}

/// The frames that identify a lock's wait wherever it is called from and however the JIT
/// compiled its callers — the frame that took the lock and the lock's outermost frame — and a
/// JVM pool's wait for work — its outermost and innermost wait-for-work frames (`[getTask,
/// LinkedBlockingQueue.take]`). None for other waits: their stacks are their identity. For
/// stacks without a frame of the application's own ([`site_name`] covers the others).
pub fn site_key(frames: &[String]) -> Option<Vec<String>> {
    match classify(frames) {
        WaitKind::Lock => {
            let (taker, outer, _) = lock_taker(frames)?;
            Some(vec![
                function(&frames[taker]).to_string(),
                function(&frames[outer]).to_string(),
            ])
        }
        WaitKind::Work if is_jvm_stack(frames) => {
            let work = |f: &&String| {
                ends_with_any(f, RUN_LOOP_SUFFIXES)
                    || is(f, RUN_LOOP_FRAMES)
                    || is(f, QUEUE_FRAMES)
                    || is(f, ACCEPT_FRAMES)
            };
            let outer = function(frames.iter().find(work)?).to_string();
            let inner = function(frames.iter().rfind(work)?).to_string();
            let mut key = vec![outer];
            if key[0] != inner {
                key.push(inner);
            }
            Some(key)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(frames: &[&str]) -> Vec<String> {
        frames.iter().map(|s| s.to_string()).collect()
    }

    /// The label the report gives a site with these frames at depth 1.
    fn label(frames: &[String]) -> String {
        let m = meaning(frames);
        site_name(frames, &m)
            .map(|n| n.label(1))
            .or_else(|| jvm_label(frames, 1))
            .unwrap_or_default()
    }

    /// A pool thread of the JDK's HTTP server blocked entering a monitor that C2 inlined
    /// into the filter chain (the inlined frame expanded), as HotSpot's frames read.
    fn monitor_wait() -> Vec<String> {
        v(&[
            "start_thread",
            "thread_native_entry(Thread*)",
            "JavaThread::run()",
            "JavaCalls::call_helper(JavaValue*, methodHandle const&, JavaCallArguments*, JavaThread*)",
            "java.lang.Thread.run",
            "java.util.concurrent.ThreadPoolExecutor.runWorker",
            "com.sun.net.httpserver.Filter$Chain.doFilter",
            "Ledger$AuditLog.append_[i]",
            "_complete_monitor_locking_Java",
            "SharedRuntime::complete_monitor_locking_C(oopDesc*, BasicLock*, JavaThread*)",
            "ObjectSynchronizer::enter(Handle, BasicLock*, JavaThread*)",
            "ObjectMonitor::enter(JavaThread*)",
            "ObjectMonitor::EnterI(JavaThread*)",
            "os::PlatformEvent::park()",
            "pthread_cond_wait",
            "__futex_abstimed_wait_common",
        ])
    }

    fn juc(tail: &[&str]) -> Vec<String> {
        let mut f = v(&[
            "start_thread",
            "JavaCalls::call_helper(JavaValue*, methodHandle const&, JavaCallArguments*, JavaThread*)",
            "java.lang.Thread.run",
            "java.util.concurrent.ThreadPoolExecutor.runWorker",
        ]);
        f.extend(v(tail));
        f.extend(v(&[
            "jdk.internal.misc.Unsafe.park",
            "Unsafe_Park",
            "Parker::park(bool, long)",
            "pthread_cond_wait",
            "__futex_abstimed_wait_common",
        ]));
        f
    }

    #[test]
    fn a_monitor_wait_is_a_lock_named_by_the_synchronized_method() {
        let f = monitor_wait();
        assert_eq!(classify(&f), WaitKind::Lock);
        assert_eq!(
            lock_label(&f, 1).as_deref(),
            Some("monitor enter ← Ledger$AuditLog.append")
        );
        assert_eq!(
            jvm_label(&f, 2).as_deref(),
            Some("monitor enter ← Ledger$AuditLog.append ← Filter$Chain.doFilter")
        );
    }

    #[test]
    fn a_locks_waits_and_a_pools_waits_are_one_site_each_however_they_were_reached() {
        let key = site_key(&monitor_wait()).expect("a lock's key");
        assert_eq!(
            key,
            ["Ledger$AuditLog.append", "_complete_monitor_locking_Java"]
        );
        assert_eq!(
            lock_label(&key, 1).as_deref(),
            Some("monitor enter ← Ledger$AuditLog.append")
        );
        let take = juc(&[
            "java.util.concurrent.ThreadPoolExecutor.getTask",
            "java.util.concurrent.LinkedBlockingQueue.take_[i]",
            "java.util.concurrent.locks.AbstractQueuedSynchronizer$ConditionObject.await",
            "java.util.concurrent.ForkJoinPool.managedBlock",
            "java.util.concurrent.ForkJoinPool.unmanagedBlock",
            "java.util.concurrent.locks.LockSupport.park",
        ]);
        let key = site_key(&take).expect("a pool's key");
        assert_eq!(
            jvm_label(&key, 1).as_deref(),
            Some("LinkedBlockingQueue.take ← ThreadPoolExecutor.getTask")
        );
        assert_eq!(
            jvm_label(&take, 2).as_deref(),
            Some("LinkedBlockingQueue.take ← ThreadPoolExecutor.getTask")
        );
        let cut_short = v(&[
            "com.sun.net.httpserver.Filter$Chain.doFilter",
            "Ledger$AuditLog.append_[i]",
            "_complete_monitor_locking_Java",
            "ObjectMonitor::EnterI(JavaThread*)",
            "os::PlatformEvent::park()",
            "___pthread_cond_wait",
        ]);
        assert_eq!(
            jvm_label(&cut_short, 1).as_deref(),
            Some("monitor enter ← Ledger$AuditLog.append")
        );
        assert_eq!(site_key(&v(&["main", "read"])), None);
    }

    #[test]
    fn a_reentrant_lock_is_a_lock_named_by_its_caller() {
        let f = juc(&[
            "Ledger$Journal.append",
            "java.util.concurrent.locks.ReentrantLock.lock",
            "java.util.concurrent.locks.ReentrantLock$Sync.lock",
            "java.util.concurrent.locks.AbstractQueuedSynchronizer.acquire",
            "java.util.concurrent.locks.LockSupport.park",
        ]);
        assert_eq!(classify(&f), WaitKind::Lock);
        assert_eq!(
            jvm_label(&f, 1).as_deref(),
            Some("lock ← Ledger$Journal.append")
        );
        assert_eq!(label(&f), "lock ← Ledger$Journal.append");
    }

    #[test]
    fn a_pool_waiting_on_its_queue_waits_for_work_even_taking_the_queues_lock() {
        let take = juc(&[
            "java.util.concurrent.ThreadPoolExecutor.getTask",
            "java.util.concurrent.LinkedBlockingQueue.take",
            "java.util.concurrent.locks.AbstractQueuedSynchronizer$ConditionObject.await",
            "java.util.concurrent.locks.LockSupport.park",
        ]);
        assert_eq!(classify(&take), WaitKind::Work);
        let lock = juc(&[
            "java.util.concurrent.ThreadPoolExecutor.getTask",
            "java.util.concurrent.LinkedBlockingQueue.take",
            "java.util.concurrent.locks.ReentrantLock.lockInterruptibly",
            "java.util.concurrent.locks.AbstractQueuedSynchronizer.acquireInterruptibly",
        ]);
        assert_eq!(classify(&lock), WaitKind::Work);
        assert_eq!(lock_label(&lock, 1), None);
        let go = v(&[
            "runtime.mstart",
            "runtime.schedule",
            "runtime.findRunnable",
            "runtime.stopm",
            "runtime.futex",
        ]);
        assert_eq!(classify(&go), WaitKind::Work);
    }

    #[test]
    fn event_loop_threads_by_their_names_as_the_kernel_keeps_them() {
        assert!(is_event_loop_thread("nioEventLoopGro"));
        assert!(is_event_loop_thread("epollEventLoopG"));
        assert!(is_event_loop_thread("vert.x-eventloo"));
        assert!(!is_event_loop_thread("http-nio-8080-e"));
        assert!(!is_event_loop_thread("nio"));
    }

    #[test]
    fn sleeps_conditions_events_and_io_by_their_frames() {
        let sleep = v(&[
            "java.lang.Thread.run",
            "Worker.nap",
            "java.lang.Thread.sleep",
            "JVM_Sleep",
            "os::PlatformEvent::park(long)",
            "pthread_cond_timedwait",
        ]);
        assert_eq!(classify(&sleep), WaitKind::Sleep);
        assert_eq!(
            jvm_label(&sleep, 1).as_deref(),
            Some("Thread.sleep ← Worker.nap")
        );
        let wait = v(&[
            "java.lang.Thread.run",
            "Box.take",
            "java.lang.Object.wait",
            "JVM_MonitorWait",
            "ObjectMonitor::wait(long, bool, JavaThread*)",
            "pthread_cond_wait",
        ]);
        assert_eq!(classify(&wait), WaitKind::Condition);
        let future = juc(&[
            "Client.call",
            "java.util.concurrent.FutureTask.get",
            "java.util.concurrent.FutureTask.awaitDone",
            "java.util.concurrent.locks.LockSupport.park",
        ]);
        assert_eq!(classify(&future), WaitKind::Condition);
        assert_eq!(
            jvm_label(&future, 2).as_deref(),
            Some("FutureTask.awaitDone ← FutureTask.get")
        );
        let c = v(&["main", "worker", "pthread_cond_wait"]);
        assert_eq!(classify(&c), WaitKind::Condition);
        let main = v(&[
            "main",
            "CallJavaMainInNewThread",
            "pthread_join",
            "__futex_abstimed_wait_common",
        ]);
        assert_eq!(classify(&main), WaitKind::Condition);
        assert_eq!(
            jvm_label(&main, 2).as_deref(),
            Some("the JVM's own condition wait")
        );
        let mutex = v(&[
            "main",
            "flush_queue",
            "pthread_mutex_lock",
            "__lll_lock_wait",
        ]);
        assert_eq!(classify(&mutex), WaitKind::Lock);
        assert_eq!(lock_label(&mutex, 1).as_deref(), Some("lock ← flush_queue"));
        let go = v(&[
            "main.handler",
            "sync.(*Mutex).Lock",
            "sync.(*Mutex).lockSlow",
            "runtime.semacquire1",
        ]);
        assert_eq!(lock_label(&go, 1).as_deref(), Some("lock ← main.handler"));
        assert_eq!(
            classify(&v(&["main", "loop", "epoll_wait"])),
            WaitKind::Events
        );
        assert_eq!(
            classify(&v(&["main", "flush", "fdatasync"])),
            WaitKind::File
        );
        let tcp = v(&[
            "main",
            "fetch",
            "read",
            "tcp_recvmsg_[k]",
            "sk_wait_data_[k]",
        ]);
        assert_eq!(classify(&tcp), WaitKind::Io);
        assert!(meaning(&tcp).socket);
        let disk = v(&[
            "main",
            "load",
            "read",
            "filemap_read_[k]",
            "folio_wait_bit_[k]",
        ]);
        assert_eq!(classify(&disk), WaitKind::File);
    }

    #[test]
    fn an_fsync_from_java_reads_as_the_call_and_its_java_callers() {
        let f = v(&[
            "java.lang.Thread.run",
            "com.sun.net.httpserver.Filter$Chain.doFilter",
            "Ledger$AuditLog.append_[i]",
            "java.io.FileDescriptor.sync",
            "java.io.FileDescriptor.sync0",
            "Java_java_io_FileDescriptor_sync0",
            "fsync",
        ]);
        assert_eq!(classify(&f), WaitKind::File);
        assert_eq!(
            label(&f),
            "fsync ← FileDescriptor.sync ← Ledger$AuditLog.append"
        );
        assert_eq!(jvm_label(&v(&["main", "read"]), 2), None);
        let gc = v(&[
            "start_thread",
            "thread_native_entry(Thread*)",
            "Thread::call_run()",
            "WorkerThread::run()",
            "Monitor::wait(long)",
            "pthread_cond_wait",
        ]);
        assert_eq!(
            jvm_label(&gc, 2).as_deref(),
            Some("the JVM's own condition wait")
        );
    }

    #[test]
    fn functions_lose_suffixes_and_arguments_but_not_go_receivers() {
        assert_eq!(
            function("ObjectMonitor::EnterI(JavaThread*)"),
            "ObjectMonitor::EnterI"
        );
        assert_eq!(function("A.b_[i]"), "A.b");
        assert_eq!(function("do_epoll_wait_[k]"), "do_epoll_wait_[k]");
        assert_eq!(function("sync.(*Mutex).Lock"), "sync.(*Mutex).Lock");
        assert!(is_java("Ledger$AuditLog.append_[i]"));
        assert!(!is_java("os::PlatformEvent::park()"));
        assert!(!is_java("libjvm.so+0x1234"));
        assert!(is_jvm_internal(
            "PhaseChaitin::Split(unsigned int, ResourceArea*)"
        ));
        assert!(is_jvm_internal("ObjectMonitor::EnterI(JavaThread*)"));
        assert!(is_jvm_internal("SpinPause"));
        assert!(!is_jvm_internal("LockService.checksum_[i]"));
        assert!(!is_jvm_internal("std::vector<int>::push_back(int const&)"));
    }

    /// A Tomcat worker's stack from its thread's start to a Spring controller's method, as
    /// HotSpot's frames read (the servlet container's valves and Spring's dispatch between).
    fn tomcat_request(tail: &[&str]) -> Vec<String> {
        let mut f = v(&[
            "start_thread",
            "thread_native_entry(Thread*)",
            "JavaThread::run()",
            "JavaCalls::call_helper(JavaValue*, methodHandle const&, JavaCallArguments*, JavaThread*)",
            "java.lang.Thread.run",
            "org.apache.tomcat.util.threads.TaskThread$WrappingRunnable.run",
            "org.apache.tomcat.util.threads.ThreadPoolExecutor$Worker.run",
            "org.apache.tomcat.util.threads.ThreadPoolExecutor.runWorker",
            "org.apache.tomcat.util.net.SocketProcessorBase.run",
            "org.apache.coyote.AbstractProcessorLight.process",
            "org.apache.coyote.http11.Http11Processor.service",
            "org.apache.catalina.connector.CoyoteAdapter.service",
            "org.apache.catalina.core.StandardEngineValve.invoke",
            "org.apache.catalina.core.ApplicationFilterChain.doFilter",
            "org.apache.catalina.core.ApplicationFilterChain.internalDoFilter",
            "javax.servlet.http.HttpServlet.service",
            "org.springframework.web.servlet.FrameworkServlet.service",
            "org.springframework.web.servlet.DispatcherServlet.doDispatch",
            "org.springframework.web.method.support.InvocableHandlerMethod.doInvoke",
            "jdk.internal.reflect.GeneratedMethodAccessor42.invoke",
            "java.lang.reflect.Method.invoke",
        ]);
        f.extend(v(tail));
        f
    }

    fn parked() -> [&'static str; 5] {
        [
            "java.util.concurrent.locks.LockSupport.park",
            "jdk.internal.misc.Unsafe.park",
            "Unsafe_Park",
            "Parker::park(bool, long)",
            "__pthread_cond_wait",
        ]
    }

    #[test]
    fn a_request_waiting_for_an_upstreams_reply_is_work_named_by_the_client_and_the_controller() {
        let mut tail = vec![
            "OrderService$OrderController.price",
            "jdk.internal.net.http.HttpClientFacade.send",
            "jdk.internal.net.http.HttpClientImpl.send",
            "java.util.concurrent.CompletableFuture.get",
            "java.util.concurrent.CompletableFuture.waitingGet",
            "java.util.concurrent.ForkJoinPool.managedBlock",
            "java.util.concurrent.CompletableFuture$Signaller.block",
        ];
        tail.extend(parked());
        let f = tomcat_request(&tail);
        let m = meaning(&f);
        assert_eq!((m.kind, m.purpose), (WaitKind::Reply, Purpose::Task));
        assert_eq!(
            label(&f),
            "reply ← HttpClient.send ← OrderService$OrderController.price"
        );
    }

    #[test]
    fn a_pooled_connection_and_a_drivers_read_are_named_as_the_application_called_them() {
        let mut pool = vec![
            "OrderService$OrderController.list",
            "org.springframework.jdbc.core.JdbcTemplate.query",
            "org.springframework.jdbc.core.JdbcTemplate.query",
            "org.springframework.jdbc.core.JdbcTemplate.execute",
            "org.springframework.jdbc.datasource.DataSourceUtils.getConnection",
            "com.zaxxer.hikari.HikariDataSource.getConnection",
            "com.zaxxer.hikari.pool.HikariPool.getConnection",
            "com.zaxxer.hikari.util.ConcurrentBag.borrow",
            "java.util.concurrent.SynchronousQueue.poll",
            "java.util.concurrent.SynchronousQueue$TransferStack.awaitFulfill",
        ];
        pool.extend(parked());
        let f = tomcat_request(&pool);
        let m = meaning(&f);
        assert_eq!((m.kind, m.purpose), (WaitKind::Connection, Purpose::Task));
        assert_eq!(
            label(&f),
            "pooled connection ← HikariPool.getConnection ← JdbcTemplate.query ← \
             OrderService$OrderController.list"
        );
        let read = tomcat_request(&[
            "OrderService$OrderController.list",
            "org.springframework.jdbc.core.JdbcTemplate.query_[i]",
            "org.springframework.jdbc.core.JdbcTemplate.execute",
            "org.springframework.jdbc.core.JdbcTemplate$1QueryStatementCallback.doInStatement",
            "com.zaxxer.hikari.pool.HikariProxyStatement.executeQuery",
            "org.mariadb.jdbc.MariaDbStatement.executeQuery",
            "org.mariadb.jdbc.internal.protocol.AbstractQueryProtocol.executeQuery",
            "org.mariadb.jdbc.internal.io.input.StandardPacketInputStream.getPacket",
            "java.io.FilterInputStream.read",
            "java.net.Socket$SocketInputStream.read",
            "sun.nio.ch.NioSocketImpl.read",
            "sun.nio.ch.NioSocketImpl.implRead",
            "sun.nio.ch.NioSocketImpl.park",
            "sun.nio.ch.NioSocketImpl.park",
            "sun.nio.ch.Net.poll",
            "Java_sun_nio_ch_Net_poll",
            "poll",
            "do_sys_poll_[k]",
        ]);
        let m = meaning(&read);
        assert_eq!((m.kind, m.purpose), (WaitKind::Reply, Purpose::Task));
        assert_eq!(
            label(&read),
            "socket read (MariaDB Connector/J) ← JdbcTemplate.query ← \
             OrderService$OrderController.list"
        );
        // A driver's own thread reading its socket waits for its own reasons.
        let monitor = v(&[
            "java.lang.Thread.run",
            "com.mongodb.internal.connection.DefaultServerMonitor$ServerMonitorRunnable.run",
            "java.net.Socket$SocketInputStream.read",
            "read",
        ]);
        assert_ne!(classify(&monitor), WaitKind::Reply);
    }

    #[test]
    fn a_monitor_is_one_site_compiled_or_interpreted_and_names_the_controller() {
        let compiled = tomcat_request(&[
            "OrderService$OrderController.list",
            "OrderService$Audit.record_[i]",
            "_complete_monitor_locking_Java",
            "SharedRuntime::complete_monitor_locking_C(oopDesc*, BasicLock*, JavaThread*)",
            "ObjectMonitor::EnterI(JavaThread*)",
            "__pthread_cond_wait",
        ]);
        let interpreted = tomcat_request(&[
            "OrderService$OrderController.list",
            "OrderService$Audit.record",
            "InterpreterRuntime::monitorenter(JavaThread*, BasicObjectLock*)",
            "ObjectMonitor::enter(JavaThread*)",
            "ObjectMonitor::EnterI(JavaThread*)",
            "__pthread_cond_wait",
        ]);
        let name = |f: &[String]| site_name(f, &meaning(f)).expect("named");
        assert_eq!(name(&compiled), name(&interpreted));
        assert_eq!(
            label(&compiled),
            "monitor enter ← OrderService$Audit.record ← OrderService$OrderController.list"
        );
    }

    #[test]
    fn a_blocking_event_loop_handler_is_one_site_through_nettys_pipeline_and_a_bridge() {
        let netty = |tail: &[&str]| {
            let mut f = v(&[
                "java.lang.Thread.run",
                "io.netty.util.concurrent.FastThreadLocalRunnable.run",
                "io.netty.util.concurrent.SingleThreadEventExecutor$4.run",
                "io.netty.channel.nio.NioEventLoop.run",
            ]);
            f.extend(v(tail));
            f
        };
        let handler = |decoders: &[&str]| {
            let mut tail = vec![
                "io.netty.channel.nio.NioEventLoop.processSelectedKeys",
                "io.netty.channel.nio.AbstractNioByteChannel$NioByteUnsafe.read",
                "io.netty.channel.AbstractChannelHandlerContext.invokeChannelRead",
            ];
            tail.extend(decoders);
            tail.extend([
                "io.netty.channel.SimpleChannelInboundHandler.channelRead",
                "NettyService$SlowHandler.channelRead0",
                "NettyService$SlowHandler.channelRead0",
                "java.lang.Thread.sleep",
                "JVM_Sleep",
                "os::PlatformEvent::park(long)",
                "__pthread_cond_timedwait",
            ]);
            netty(&tail)
        };
        let short = handler(&["io.netty.handler.codec.ByteToMessageDecoder.channelRead"]);
        let long = handler(&[
            "io.netty.handler.codec.ByteToMessageDecoder.channelRead",
            "io.netty.channel.AbstractChannelHandlerContext.fireChannelRead",
            "io.netty.handler.codec.MessageToMessageDecoder.channelRead",
        ]);
        let m = meaning(&short);
        assert_eq!(
            (m.kind, m.purpose, m.event_loop),
            (WaitKind::Sleep, Purpose::Task, true)
        );
        assert_eq!(site_name(&short, &m), site_name(&long, &meaning(&long)));
        assert_eq!(
            label(&short),
            "Thread.sleep ← NettyService$SlowHandler.channelRead0"
        );
        let idle = netty(&[
            "io.netty.channel.nio.NioEventLoop.select",
            "sun.nio.ch.SelectorImpl.select",
            "sun.nio.ch.EPollSelectorImpl.doSelect",
            "sun.nio.ch.EPoll.wait",
            "epoll_wait",
        ]);
        let m = meaning(&idle);
        assert_eq!(
            (m.kind, m.purpose, m.event_loop),
            (WaitKind::Events, Purpose::Idle, true)
        );
    }

    #[test]
    fn pools_acceptors_pollers_and_the_jvms_own_threads_wait_for_work() {
        let mut take = vec![
            "java.lang.Thread.run",
            "org.apache.tomcat.util.threads.ThreadPoolExecutor.runWorker",
            "org.apache.tomcat.util.threads.ThreadPoolExecutor.getTask",
            "org.apache.tomcat.util.threads.TaskQueue.take",
            "java.util.concurrent.LinkedBlockingQueue.take",
        ];
        take.extend(parked());
        let acceptor = v(&[
            "java.lang.Thread.run",
            "org.apache.tomcat.util.net.Acceptor.run",
            "org.apache.tomcat.util.net.NioEndpoint.serverSocketAccept",
            "sun.nio.ch.ServerSocketChannelImpl.accept",
            "accept",
        ]);
        let poller = v(&[
            "java.lang.Thread.run",
            "org.apache.tomcat.util.net.NioEndpoint$Poller.run",
            "sun.nio.ch.SelectorImpl.select",
            "sun.nio.ch.EPoll.wait",
            "epoll_wait",
        ]);
        let compiler = v(&[
            "start_thread",
            "thread_native_entry(Thread*)",
            "Thread::call_run()",
            "JavaThread::thread_main_inner()",
            "CompileBroker::compiler_thread_loop()",
            "CompileQueue::get(JavaThread*)",
            "Monitor::wait(long)",
            "pthread_cond_timedwait",
        ]);
        let reference = v(&[
            "java.lang.ref.Reference$ReferenceHandler.run",
            "java.lang.ref.Reference.processPendingReferences",
            "java.lang.ref.Reference.waitForReferencePendingList",
            "JVM_WaitForReferencePendingList",
            "Monitor::wait(long)",
        ]);
        for f in [v(&take), acceptor, poller, compiler, reference] {
            assert_eq!(meaning(&f).purpose, Purpose::Idle, "{f:?}");
        }
        // A Java thread's park whose stack the unwinder lost above the JVM's C++ is no
        // thread of the JVM's own.
        let cut = v(&[
            "Unsafe_Park",
            "Parker::park(bool, long)",
            "__pthread_cond_wait",
        ]);
        assert_eq!(meaning(&cut).purpose, Purpose::Unknown);
        // A C worker's condition wait says nothing of its purpose; a C thread's read of a
        // socket waits for its peer.
        let c = v(&["start_thread", "worker", "pthread_cond_wait"]);
        assert_eq!(meaning(&c).purpose, Purpose::Unknown);
        let upstream = v(&[
            "start_thread",
            "handle",
            "call_upstream",
            "read",
            "tcp_recvmsg_[k]",
        ]);
        assert_eq!(meaning(&upstream).purpose, Purpose::Task);
    }

    #[test]
    fn a_native_driver_call_is_a_reply_named_by_the_call_and_its_caller() {
        let f = v(&[
            "main",
            "fetch_rows",
            "PQexec",
            "PQgetResult",
            "pqWait",
            "pqSocketCheck",
            "poll",
            "do_sys_poll_[k]",
        ]);
        let m = meaning(&f);
        assert_eq!((m.kind, m.purpose), (WaitKind::Reply, Purpose::Task));
        assert_eq!(label(&f), "reply (libpq) ← PQexec ← fetch_rows ← main");
    }
}
