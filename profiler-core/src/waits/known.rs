//! What the runtimes and frameworks our users run look like in a stack: the frames that say a
//! thread fetches its next task, runs one, takes a lock, borrows a pooled connection, waits
//! for a downstream's reply, touches a file or a socket, or loops over events. Only names: the
//! rules that weigh them are in `mod.rs`, the labels in `label.rs`. Names are compared after
//! [`super::function`] (no `_[i]`, no C++ arguments); `_[k]` marks a kernel function.

/// A pool's or a scheduler's fetch of its next task, at the top of its run loop: the thread
/// has no work. Any class whose name ends so (`java.util.concurrent.ThreadPoolExecutor`,
/// Tomcat's `org.apache.tomcat.util.threads.ThreadPoolExecutor`).
pub const RUN_LOOP_SUFFIXES: &[&str] = &["ThreadPoolExecutor.getTask"];

/// The same, by exact name: a ForkJoinPool's idle worker, Netty's task executors, the Go
/// scheduler parking a thread with no goroutine to run (`runtime.findRunnable` polls the
/// network for one), its monitor thread and its spare-thread keeper.
pub const RUN_LOOP_FRAMES: &[&str] = &[
    "java.util.concurrent.ForkJoinPool.awaitWork",
    "io.netty.util.concurrent.SingleThreadEventExecutor.takeTask",
    "io.netty.util.concurrent.GlobalEventExecutor.takeTask",
    "runtime.stopm",
    "runtime.findRunnable",
    "runtime.findrunnable",
    "runtime.sysmon",
    "runtime.templateThread",
];

/// A queue's blocking take: waiting for work when nothing below it is a task or a pool
/// borrowing a connection (HikariCP waits for a connection in `SynchronousQueue.poll`).
pub const QUEUE_FRAMES: &[&str] = &[
    "java.util.concurrent.LinkedBlockingQueue.take",
    "java.util.concurrent.LinkedBlockingQueue.poll",
    "java.util.concurrent.LinkedBlockingDeque.take",
    "java.util.concurrent.LinkedBlockingDeque.poll",
    "java.util.concurrent.LinkedBlockingDeque.takeFirst",
    "java.util.concurrent.LinkedBlockingDeque.pollFirst",
    "java.util.concurrent.ArrayBlockingQueue.take",
    "java.util.concurrent.ArrayBlockingQueue.poll",
    "java.util.concurrent.SynchronousQueue.take",
    "java.util.concurrent.SynchronousQueue.poll",
    "java.util.concurrent.LinkedTransferQueue.take",
    "java.util.concurrent.LinkedTransferQueue.poll",
    "java.util.concurrent.PriorityBlockingQueue.take",
    "java.util.concurrent.DelayQueue.take",
    "java.util.concurrent.ScheduledThreadPoolExecutor$DelayedWorkQueue.take",
    "java.util.concurrent.ScheduledThreadPoolExecutor$DelayedWorkQueue.poll",
    "org.apache.tomcat.util.threads.TaskQueue.take",
    "org.apache.tomcat.util.threads.TaskQueue.poll",
];

/// Frames below a wait that say the thread is running a task or a request handler: what it
/// waits for there is work, whatever its CPU share.
pub const TASK_FRAMES: &[&str] = &[
    "java.util.concurrent.FutureTask.run",
    "java.util.concurrent.ForkJoinTask.doExec",
    "java.util.concurrent.CompletableFuture$AsyncSupply.run",
    "java.util.concurrent.CompletableFuture$AsyncRun.run",
    "javax.servlet.http.HttpServlet.service",
    "jakarta.servlet.http.HttpServlet.service",
    "org.apache.catalina.core.ApplicationFilterChain.doFilter",
    "org.apache.coyote.AbstractProcessorLight.process",
    "org.eclipse.jetty.server.HttpChannel.handle",
    "io.undertow.server.Connectors.executeRootHandler",
    "com.sun.net.httpserver.Filter$Chain.doFilter",
    "sun.net.httpserver.ServerImpl$Exchange.run",
    "io.netty.channel.AbstractChannelHandlerContext.invokeChannelRead",
    "io.netty.channel.AbstractChannelHandlerContext.invokeChannelActive",
    "io.netty.channel.AbstractChannelHandlerContext.invokeUserEventTriggered",
    "io.netty.channel.AbstractChannelHandlerContext.invokeWrite",
    "io.netty.channel.AbstractChannelHandlerContext.invokeFlush",
    "io.netty.util.concurrent.AbstractEventExecutor.safeExecute",
    "io.netty.util.concurrent.AbstractEventExecutor.runTask",
    "net/http.(*conn).serve",
    "net/http.serverHandler.ServeHTTP",
    "ngx_http_process_request",
    "ngx_http_core_run_phases",
    "ngx_http_upstream_handler",
    "uv__work_done",
    "uv__stream_io",
];

/// A worker's run loop: below a wait, a task it runs unless it is fetching the next one
/// (`getTask`, which [`RUN_LOOP_SUFFIXES`] catches first).
pub const TASK_RUNNER_SUFFIXES: &[&str] = &["ThreadPoolExecutor.runWorker"];

/// An event loop's own frames, below its wait for events or below a handler it runs.
/// Thread names (prefixes) of event loops, for threads whose stacks were cut short of the
/// loop's own frames (a JIT compiling the pipeline's handlers as the capture runs, say): a
/// Netty loop busy in its handlers never waits for events to say it is one.
pub const EVENT_LOOP_THREAD_NAMES: &[&str] = &[
    "nioEventLoopGroup",
    "epollEventLoopGroup",
    "kqueueEventLoopGroup",
    "vert.x-eventloop-thread",
    "reactor-http-nio",
    "reactor-http-epoll",
];

pub const EVENT_LOOP_FRAMES: &[&str] = &[
    "io.netty.channel.nio.NioEventLoop.run",
    "io.netty.channel.epoll.EpollEventLoop.run",
    "io.netty.channel.kqueue.KQueueEventLoop.run",
    "org.apache.tomcat.util.net.NioEndpoint$Poller.run",
    "jdk.internal.net.http.HttpClientImpl$SelectorManager.run",
    "ngx_process_events_and_timers",
    "uv_run",
    "aeMain",
    "aeProcessEvents",
    "event_base_loop",
    "runtime.netpoll",
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
    "sun.nio.ch.EPoll.wait",
    "sun.nio.ch.SelectorImpl.select",
    "sun.nio.ch.SelectorImpl.lockAndDoSelect",
];

/// A wait for a new connection: like an event loop's, a wait for work unless in a task.
pub const ACCEPT_FRAMES: &[&str] = &[
    "accept",
    "accept4",
    "__libc_accept",
    "inet_csk_accept_[k]",
    "sun.nio.ch.ServerSocketChannelImpl.accept",
    "sun.nio.ch.NioSocketImpl.accept",
    "java.net.ServerSocket.accept",
    "java.net.ServerSocket.implAccept",
];

/// Frames that take a lock: HotSpot's monitor enter (compiled code's stub, the runtime's
/// slow path, the interpreter's), a j.u.c lock's acquire, glibc's mutex, Go's mutex.
pub const MONITOR_FRAMES: &[&str] = &[
    "_complete_monitor_locking_Java",
    "SharedRuntime::complete_monitor_locking_C",
    "ObjectSynchronizer::enter",
    "ObjectMonitor::enter",
    "ObjectMonitor::EnterI",
    "InterpreterRuntime::monitorenter",
    "Runtime1::monitorenter",
    "JVM_MonitorEnter",
];
pub const LOCK_FRAMES: &[&str] = &[
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
pub const SLEEP_FRAMES: &[&str] = &[
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
pub const CONDITION_FRAMES: &[&str] = &[
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

/// A pool's borrow of a connection (the outermost of these names the pool in the label).
pub const POOL_FRAMES: &[&str] = &[
    "com.zaxxer.hikari.pool.HikariPool.getConnection",
    "com.zaxxer.hikari.util.ConcurrentBag.borrow",
    "org.apache.commons.pool2.impl.GenericObjectPool.borrowObject",
    "org.apache.commons.dbcp2.PoolingDataSource.getConnection",
    "org.apache.commons.dbcp2.BasicDataSource.getConnection",
    "org.apache.tomcat.dbcp.pool2.impl.GenericObjectPool.borrowObject",
    "org.apache.tomcat.dbcp.dbcp2.PoolingDataSource.getConnection",
    "org.apache.tomcat.jdbc.pool.ConnectionPool.borrowConnection",
    "com.mchange.v2.resourcepool.BasicResourcePool.checkoutResource",
    "com.mchange.v2.resourcepool.BasicResourcePool.awaitAvailable",
    "redis.clients.jedis.JedisPool.getResource",
    "database/sql.(*DB).conn",
];

/// A client's call that waits for a downstream's reply, by its entry frame, with what the
/// label calls it.
pub const CLIENT_CALLS: &[(&str, &str)] = &[
    (
        "jdk.internal.net.http.HttpClientFacade.send",
        "HttpClient.send",
    ),
    (
        "jdk.internal.net.http.HttpClientImpl.send",
        "HttpClient.send",
    ),
    (
        "sun.net.www.protocol.http.HttpURLConnection.getInputStream",
        "HttpURLConnection.getInputStream",
    ),
    (
        "sun.net.www.protocol.http.HttpURLConnection.getOutputStream",
        "HttpURLConnection.getOutputStream",
    ),
    (
        "org.apache.http.impl.client.CloseableHttpClient.execute",
        "HttpClient.execute",
    ),
    (
        "org.apache.hc.client5.http.impl.classic.CloseableHttpClient.execute",
        "HttpClient.execute",
    ),
    ("okhttp3.RealCall.execute", "OkHttp Call.execute"),
    (
        "okhttp3.internal.connection.RealCall.execute",
        "OkHttp Call.execute",
    ),
    (
        "org.springframework.web.client.RestTemplate.doExecute",
        "RestTemplate.exchange",
    ),
    (
        "io.grpc.stub.ClientCalls.blockingUnaryCall",
        "gRPC blockingUnaryCall",
    ),
    ("feign.SynchronousMethodHandler.invoke", "Feign client"),
    ("net/http.(*Client).Do", "http.Client.Do"),
    ("net/http.(*persistConn).roundTrip", "http.Client.Do"),
    ("curl_easy_perform", "curl_easy_perform"),
    ("Curl_poll", "curl_easy_perform"),
];

/// Database and cache drivers by package or function prefix: a wait in one, called from
/// elsewhere, is a wait for the server's reply.
pub const DRIVERS: &[(&str, &str)] = &[
    ("org.mariadb.jdbc.", "MariaDB Connector/J"),
    ("com.mysql.cj.", "MySQL Connector/J"),
    ("com.mysql.jdbc.", "MySQL Connector/J"),
    ("org.postgresql.", "PostgreSQL JDBC"),
    ("oracle.jdbc.", "Oracle JDBC"),
    ("com.microsoft.sqlserver.jdbc.", "SQL Server JDBC"),
    ("redis.clients.jedis.", "Jedis"),
    ("io.lettuce.core.", "Lettuce"),
    ("com.mongodb.", "MongoDB driver"),
    ("com.datastax.", "Cassandra driver"),
    ("PQexec", "libpq"),
    ("PQgetResult", "libpq"),
    ("PQprepare", "libpq"),
    ("pqWait", "libpq"),
    ("mysql_real_query", "libmysqlclient"),
    ("mysql_send_query", "libmysqlclient"),
    ("mysql_read_query_result", "libmysqlclient"),
    ("mysql_store_result", "libmysqlclient"),
    ("mysql_stmt_execute", "libmysqlclient"),
    ("mysql_stmt_fetch", "libmysqlclient"),
    ("cli_safe_read", "libmysqlclient"),
    ("redisGetReply", "hiredis"),
    ("redisCommand", "hiredis"),
    ("github.com/lib/pq.", "lib/pq"),
    ("github.com/jackc/pgx", "pgx"),
    ("github.com/go-sql-driver/mysql.", "go-sql-driver/mysql"),
];

/// Data-access layers an application calls a driver through: the label names the layer's
/// call (`JdbcTemplate.query`), not the driver's internals.
pub const DATA_ACCESS_PREFIXES: &[&str] = &[
    "org.springframework.jdbc.",
    "org.springframework.orm.",
    "org.hibernate.",
    "org.apache.ibatis.",
    "org.jooq.",
    "com.zaxxer.hikari.pool.HikariProxy",
];

/// A file's system calls and the JDK's file APIs: file I/O, wherever it is called from.
pub const FILE_FRAMES: &[&str] = &[
    "fsync",
    "fdatasync",
    "__libc_fsync",
    "__libc_fdatasync",
    "sync_file_range",
    "msync",
    "syncfs",
    "java.io.FileDescriptor.sync",
    "sun.nio.ch.FileChannelImpl.force",
    "sun.nio.ch.FileChannelImpl.read",
    "sun.nio.ch.FileChannelImpl.write",
    "java.io.FileOutputStream.write",
    "java.io.FileInputStream.read",
    "java.io.RandomAccessFile.read",
    "java.io.RandomAccessFile.write",
    "syscall.Fsync",
    "internal/poll.(*FD).Fsync",
];

/// Kernel functions of a file system or the block layer under a wait.
pub const FILE_KERNEL_PREFIXES: &[&str] = &[
    "vfs_fsync",
    "do_fsync",
    "ext4_",
    "xfs_",
    "btrfs_",
    "jbd2_",
    "nfs_",
    "nfs4_",
    "filemap_",
    "folio_wait",
    "io_schedule",
    "blk_",
    "submit_bio",
    "file_write_and_wait",
];

/// Kernel and JDK frames of a socket's read or write.
pub const SOCKET_KERNEL_PREFIXES: &[&str] = &[
    "tcp_recvmsg",
    "tcp_sendmsg",
    "sk_wait_data",
    "sk_stream_wait",
    "inet_recvmsg",
    "udp_recvmsg",
    "unix_stream_read",
    "unix_stream_recvmsg",
    "unix_dgram_recvmsg",
    "sock_recvmsg",
    "__sys_recvfrom",
    "__sys_connect",
    "inet_stream_connect",
];
pub const SOCKET_READ_FRAMES: &[&str] = &[
    "sun.nio.ch.NioSocketImpl.read",
    "sun.nio.ch.NioSocketImpl.implRead",
    "sun.nio.ch.NioSocketImpl.timedRead",
    "java.net.SocketInputStream.read",
    "java.net.Socket$SocketInputStream.read",
    "sun.nio.ch.SocketChannelImpl.read",
    "sun.nio.ch.NioSocketImpl.connect",
    "recv",
    "recvfrom",
    "recvmsg",
    "__libc_recv",
    "__libc_recvfrom",
    "internal/poll.(*FD).Read",
];

/// The runtime's own housekeeping threads, by a frame of their run loop: their waits are for
/// their own next piece of work (references to process, timers to fire, a shutdown).
pub const HOUSEKEEPING_FRAMES: &[&str] = &[
    "java.lang.ref.Reference.waitForReferencePendingList",
    "java.lang.ref.Reference$ReferenceHandler.run",
    "java.lang.ref.Finalizer$FinalizerThread.run",
    "jdk.internal.ref.CleanerImpl.run",
    "java.util.TimerThread.mainLoop",
    "sun.net.www.http.KeepAliveCache.run",
    "org.apache.catalina.core.StandardServer.await",
    "io.netty.util.ThreadDeathWatcher$Watcher.run",
    "io.netty.util.HashedWheelTimer$Worker.run",
];

/// Java packages of the runtime, frameworks and libraries: plumbing a label passes over to
/// reach the application's own frames (JDK, servlet containers, Netty's pipeline, Spring's
/// dispatch and proxies, reflection, logging, pools, drivers, clients).
pub const PLUMBING_PREFIXES: &[&str] = &[
    "java.",
    "javax.",
    "jakarta.",
    "jdk.",
    "sun.",
    "com.sun.",
    "io.netty.",
    "org.springframework.",
    "org.apache.catalina.",
    "org.apache.coyote.",
    "org.apache.tomcat.",
    "org.apache.juli.",
    "org.apache.commons.",
    "org.apache.http.",
    "org.apache.hc.",
    "org.eclipse.jetty.",
    "io.undertow.",
    "ch.qos.logback.",
    "org.slf4j.",
    "org.apache.logging.",
    "com.zaxxer.hikari.",
    "com.mchange.",
    "org.mariadb.jdbc.",
    "com.mysql.",
    "org.postgresql.",
    "oracle.jdbc.",
    "com.microsoft.sqlserver.",
    "org.hibernate.",
    "org.apache.ibatis.",
    "org.jooq.",
    "redis.clients.",
    "io.lettuce.",
    "com.mongodb.",
    "com.datastax.",
    "okhttp3.",
    "okio.",
    "io.grpc.",
    "feign.",
    "reactor.",
    "kotlin.",
    "kotlinx.",
    "scala.",
    "com.fasterxml.",
    "com.google.common.",
    "org.aopalliance.",
];

/// Generated classes of proxies and lambdas: trampolines, never the application's frame.
pub const GENERATED_MARKERS: &[&str] = &[
    "$$Lambda",
    "$$EnhancerBySpringCGLIB$$",
    "$$SpringCGLIB$$",
    "$$FastClassBySpringCGLIB$$",
    "GeneratedMethodAccessor",
    "$Proxy",
];

/// Classes whose frames are a lock's or a park's machinery, named past in labels.
pub const MACHINERY: &[&str] = &[
    "java.util.concurrent.locks.",
    "jdk.internal.misc.Unsafe.",
    "java.util.concurrent.ForkJoinPool.managedBlock",
    "java.util.concurrent.ForkJoinPool.unmanagedBlock",
];

/// HotSpot's own classes whose frames are the JVM at work (its JIT compilers, its GC, its
/// locks and runtime calls), not the program: by name, and by prefix for families of them.
pub const HOTSPOT_CLASSES: &[&str] = &[
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
pub const HOTSPOT_CLASS_PREFIXES: &[&str] = &["Phase", "G1", "Shenandoah", "ci", "PS", "ZBarrier"];
