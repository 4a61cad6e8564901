//! Waits by meaning: a blocking site's frames (root→leaf) → what its threads waited for — a
//! lock, work, a condition, I/O, a sleep, events — and the label a reader of that runtime
//! expects: a lock wait by the lock's user frame (`monitor enter ← Ledger$AuditLog.append`,
//! `lock ← flush_queue`), a JVM thread's other waits by their Java frames, its runtime's C++
//! (`ObjectMonitor::EnterI`, `os::PlatformEvent::park`) kept in the stack, out of the label.
//! Pure; analysis and the report use it.

use serde::Serialize;

/// What a wait was for, from its frames ([`classify`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// A lock held by another thread: a Java monitor, a j.u.c lock, a pthread or Go mutex.
    Lock,
    /// A pool's worker or a scheduler's thread waiting for its next task: idle.
    Work,
    /// A condition, a future or a park not under a lock's acquire.
    Condition,
    /// A sleep for a time.
    Sleep,
    /// An event loop waiting for any of many events (epoll, poll, select).
    Events,
    /// Reads, writes, flushes: everything else a thread blocks in.
    Io,
}

impl WaitKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Work => "waiting for work",
            Self::Condition => "condition",
            Self::Sleep => "sleep",
            Self::Events => "event loop",
            Self::Io => "io",
        }
    }
}

/// Frames that mean a wait for work: a Java pool's queue, a ForkJoinPool's idle worker, the
/// Go scheduler parking a thread with no goroutine to run (`runtime.findRunnable` polls the
/// network for one), its monitor thread and its spare-thread keeper. A C pool's worker in
/// `pthread_cond_wait` says so only by its own function's name: not recognised.
pub const WORK_FRAMES: &[&str] = &[
    "java.util.concurrent.ThreadPoolExecutor.getTask",
    "java.util.concurrent.LinkedBlockingQueue.take",
    "java.util.concurrent.LinkedBlockingQueue.poll",
    "java.util.concurrent.LinkedBlockingDeque.take",
    "java.util.concurrent.LinkedBlockingDeque.poll",
    "java.util.concurrent.ArrayBlockingQueue.take",
    "java.util.concurrent.ArrayBlockingQueue.poll",
    "java.util.concurrent.SynchronousQueue.take",
    "java.util.concurrent.SynchronousQueue.poll",
    "java.util.concurrent.LinkedTransferQueue.take",
    "java.util.concurrent.LinkedTransferQueue.poll",
    "java.util.concurrent.DelayQueue.take",
    "java.util.concurrent.ScheduledThreadPoolExecutor$DelayedWorkQueue.take",
    "java.util.concurrent.ForkJoinPool.awaitWork",
    "runtime.stopm",
    "runtime.findRunnable",
    "runtime.findrunnable",
    "runtime.sysmon",
    "runtime.templateThread",
];

/// Frames that take a lock: HotSpot's monitor enter (compiled code's stub, the runtime's
/// slow path, the interpreter's), a j.u.c lock's acquire, glibc's mutex, Go's mutex.
const MONITOR_FRAMES: &[&str] = &[
    "_complete_monitor_locking_Java",
    "SharedRuntime::complete_monitor_locking_C",
    "ObjectSynchronizer::enter",
    "ObjectMonitor::enter",
    "ObjectMonitor::EnterI",
    "InterpreterRuntime::monitorenter",
    "Runtime1::monitorenter",
    "JVM_MonitorEnter",
];
const LOCK_FRAMES: &[&str] = &[
    "java.util.concurrent.locks.AbstractQueuedSynchronizer.acquire",
    "java.util.concurrent.locks.AbstractQueuedSynchronizer.acquireInterruptibly",
    "java.util.concurrent.locks.AbstractQueuedSynchronizer.acquireShared",
    "java.util.concurrent.locks.AbstractQueuedSynchronizer.acquireSharedInterruptibly",
    "java.util.concurrent.locks.AbstractQueuedSynchronizer.tryAcquireNanos",
    "pthread_mutex_lock",
    "__pthread_mutex_lock",
    "___pthread_mutex_lock",
    "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock",
    "__lll_lock_wait",
    "sync.(*Mutex).lockSlow",
    "sync.(*Mutex).Lock",
    "sync.(*RWMutex).Lock",
    "sync.(*RWMutex).RLock",
];
const SLEEP_FRAMES: &[&str] = &[
    "java.lang.Thread.sleep",
    "JVM_Sleep",
    "nanosleep",
    "__nanosleep",
    "clock_nanosleep",
    "__clock_nanosleep",
    "usleep",
    "sleep",
    "time.Sleep",
    "hrtimer_nanosleep_[k]",
];
const CONDITION_FRAMES: &[&str] = &[
    "java.lang.Object.wait",
    "JVM_MonitorWait",
    "java.util.concurrent.locks.LockSupport.park",
    "java.util.concurrent.locks.LockSupport.parkNanos",
    "jdk.internal.misc.Unsafe.park",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "___pthread_cond_wait",
    "___pthread_cond_timedwait64",
    "__pthread_cond_wait_common",
    "pthread_cond_clockwait",
    "__pthread_cond_wait",
    "__pthread_cond_timedwait",
    "sem_wait",
    "sem_timedwait",
    "__new_sem_wait_slow64",
    "pthread_join",
    "__pthread_clockjoin_ex",
    // A futex under none of the above: something waits for something else's signal.
    "__futex_abstimed_wait_common",
    "__futex_abstimed_wait_common64",
    "do_futex_wait",
    "futex_wait",
    "runtime.futex",
    "sync.(*WaitGroup).Wait",
    "sync.(*Cond).Wait",
];
/// Frames of a wait for any of many events, in the kernel, libc, the JDK or the Go runtime.
pub const EVENT_FRAMES: &[&str] = &[
    "do_epoll_wait_[k]",
    "do_sys_poll_[k]",
    "do_select_[k]",
    "core_sys_select_[k]",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "poll",
    "__poll",
    "ppoll",
    "select",
    "__select",
    "pselect",
    "runtime.epollwait",
];

/// Classes whose frames are a lock's or a park's machinery, named past in labels.
const MACHINERY: &[&str] = &[
    "java.util.concurrent.locks.",
    "jdk.internal.misc.Unsafe.",
    "java.util.concurrent.ForkJoinPool.managedBlock",
    "java.util.concurrent.ForkJoinPool.unmanagedBlock",
];

/// A frame's function: without the inlined frames' `_[i]` and without C++ arguments.
pub fn function(frame: &str) -> &str {
    let f = frame.strip_suffix("_[i]").unwrap_or(frame);
    // Go's `sync.(*Mutex).Lock` has parentheses of its own; C++'s arguments come last.
    match f.rfind('(') {
        Some(at) if f.ends_with(')') && at > 0 && !f[..at].ends_with('.') => &f[..at],
        _ => f,
    }
}

fn any_in(frames: &[String], set: &[&str]) -> bool {
    frames.iter().any(|f| set.contains(&function(f)))
}

/// What a wait with these frames (root→leaf, user then kernel if any) was for. The meaning
/// nearest the thread's purpose wins: a pool's queue is a wait for work even where it takes
/// the queue's lock or parks; a lock's acquire even where it parks on a condition variable;
/// a sleep even where the JVM sleeps on a condition variable.
pub fn classify(frames: &[String]) -> WaitKind {
    if any_in(frames, WORK_FRAMES) {
        WaitKind::Work
    } else if any_in(frames, MONITOR_FRAMES) || any_in(frames, LOCK_FRAMES) {
        WaitKind::Lock
    } else if any_in(frames, SLEEP_FRAMES) {
        WaitKind::Sleep
    } else if any_in(frames, CONDITION_FRAMES) {
        WaitKind::Condition
    } else if any_in(frames, EVENT_FRAMES) {
        WaitKind::Events
    } else {
        WaitKind::Io
    }
}

/// Whether these frames are a JVM thread's: Java frames (by the JDK's packages), the JVM's
/// calls into Java, the java launcher's main thread, the start of a thread of the JVM's own
/// (GC, compiler, VM thread), or the
/// JVM's monitor, `os::` and `JVM_` functions (a stack cut short before its Java frames).
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

/// HotSpot's own classes whose frames are the JVM at work (its JIT compilers, its GC, its
/// locks and runtime calls), not the program: by name, and by prefix for families of them.
const HOTSPOT_CLASSES: &[&str] = &[
    "Compile",
    "C2Compiler",
    "Parse",
    "GraphKit",
    "Matcher",
    "Node",
    "LinearScan",
    "GraphBuilder",
    "Optimizer",
    "ConnectionGraph",
    "IndexSet",
    "RegMask",
    "ObjectMonitor",
    "ObjectSynchronizer",
    "SharedRuntime",
    "InterpreterRuntime",
    "Runtime1",
    "OptoRuntime",
    "JavaThread",
    "Thread",
    "os",
    "Monitor",
    "Mutex",
    "CodeCache",
    "CompileBroker",
    "Symbol",
    "SymbolTable",
    "ClassLoader",
    "SystemDictionary",
    "SafepointSynchronize",
    "Parker",
    "WorkerThread",
    "VMThread",
    "JvmtiExport",
    "Klass",
    "InstanceKlass",
    "Method",
    "MacroAssembler",
    "LIR_Assembler",
    "nmethod",
    "CompiledMethod",
    "CodeBuffer",
    "Dependencies",
];
const HOTSPOT_CLASS_PREFIXES: &[&str] = &["Phase", "G1", "Shenandoah", "ci", "PS", "ZBarrier"];

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
/// compiled its callers — the frame that took the lock and the lock's outermost frame
/// (`[LockService$Journal.record, _complete_monitor_locking_Java]`) — and a JVM pool's wait
/// for work — its outermost and innermost wait-for-work frames (`[getTask,
/// LinkedBlockingQueue.take]`). None for other waits: their stacks are their identity.
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
            let work = |f: &&String| WORK_FRAMES.contains(&function(f));
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

/// A lock wait's label: `monitor enter ← Ledger$AuditLog.append` (a Java monitor), `lock ←
/// Store.put` (j.u.c, pthread, Go); `callers` > 1 adds callers of the frame that took it.
/// None for a wait that is not a lock's, or whose taker is unknown.
pub fn lock_label(frames: &[String], callers: usize) -> Option<String> {
    if classify(frames) != WaitKind::Lock {
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

/// A JVM thread's wait label, its Java frames leaf first after the blocking C call when the
/// leaf is one (`fsync ← FileDescriptor.sync ← Ledger$AuditLog.append`), the JVM's C++ and
/// the JDK's park machinery left out; `callers` Java frames (at least two). A thread of the
/// JVM's own, with no Java frame, reads `the JVM's own condition wait`. None for a stack
/// that is not a JVM thread's.
pub fn jvm_label(frames: &[String], callers: usize) -> Option<String> {
    if !is_jvm_stack(frames) {
        return None;
    }
    if let Some(label) = lock_label(frames, callers) {
        return Some(label);
    }
    let java = java_frames_leaf_first(frames);
    let kind = classify(frames);
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
        .filter(|_| matches!(kind, WaitKind::Io | WaitKind::Events))
        .filter(|f| !f.starts_with('_') && !f.contains("::") && !f.contains("+0x") && !is_java(f));
    let parts: Vec<&str> = leaf
        .into_iter()
        .chain(java.into_iter().take(callers.max(2)))
        .collect();
    Some(parts.join(" ← "))
}

/// The Java frames leaf first, short, a JDK native helper (`sync0`) read as the method that
/// calls it (`sync`), the park machinery passed over.
fn java_frames_leaf_first(frames: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for f in frames.iter().rev().filter(|f| is_java(f)) {
        let name = function(f);
        if MACHINERY.iter().any(|m| name.starts_with(m)) {
            continue;
        }
        let short = short_java(f);
        if let Some(last) = out.last()
            && last.strip_suffix('0') == Some(short)
        {
            out.pop();
        }
        out.push(short);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(frames: &[&str]) -> Vec<String> {
        frames.iter().map(|s| s.to_string()).collect()
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
        assert_eq!(classify(&v(&["main", "flush", "fdatasync"])), WaitKind::Io);
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
        assert_eq!(classify(&f), WaitKind::Io);
        assert_eq!(
            jvm_label(&f, 2).as_deref(),
            Some("fsync ← FileDescriptor.sync ← Ledger$AuditLog.append")
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
}
