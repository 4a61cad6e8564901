//! Real-framework services for the end-to-end tests (issue 40), built by the tests from
//! Debian's packaged Java libraries (`cargo xtask test` installs them, see
//! xtask/src/packages.rs) and started privately, each on an ephemeral loopback port:
//!
//! - the slow upstream (tests/fixtures/frameworks/http.c `upstream`: 20 ms per request);
//! - `OrderService`: embedded Tomcat 9 + Spring MVC, `/price` calls the upstream with the
//!   JDK's HttpClient, `/list` queries MariaDB through a HikariCP pool of 4 with
//!   JdbcTemplate, logs with logback and appends to a synchronized, fsynced audit log,
//!   `/order` only logs and appends to the audit log;
//! - `NettyService`: Netty 4.1 whose handler sleeps 5 ms on the event loop;
//! - `tpr-server` (http.c `server`): one thread per connection, one upstream call per
//!   request;
//! - a private MariaDB (root, a scratch datadir, no grant tables).
//!
//! A [`Scenario`] starts one of them with what it needs, [`run`] loads it with wrk, warms it,
//! captures it with the profiler and measures the same window from the services' own
//! counters (`GET /stats`), /proc and wrk: the ground truth the tests compare the report
//! with. Everything lives in the scratch directory and every process is killed when its
//! owner is dropped, on panics too.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs::File,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use serde_json::json;

use super::{Capturing, Line, assert_success, build_fixture, prompt, read_folded, scratch_dir};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/frameworks");

/// The jars under /usr/share/java the Java fixtures compile and run against, each with the
/// Debian package that installs it (a missing one is named with its package).
const JARS: &[(&str, &str)] = &[
    ("tomcat9-catalina.jar", "libtomcat9-java"),
    ("tomcat9-coyote.jar", "libtomcat9-java"),
    ("tomcat9-juli.jar", "libtomcat9-java"),
    ("tomcat9-util.jar", "libtomcat9-java"),
    ("tomcat9-util-scan.jar", "libtomcat9-java"),
    ("tomcat9-api.jar", "libtomcat9-java"),
    ("tomcat9-servlet-api.jar", "libtomcat9-java"),
    ("tomcat9-annotations-api.jar", "libtomcat9-java"),
    ("tomcat9-jaspic-api.jar", "libtomcat9-java"),
    ("tomcat9-el-api.jar", "libtomcat9-java"),
    ("tomcat9-jni.jar", "libtomcat9-java"),
    ("spring3-core.jar", "libspring-core-java"),
    ("spring3-beans.jar", "libspring-beans-java"),
    ("spring3-context.jar", "libspring-context-java"),
    ("spring3-aop.jar", "libspring-aop-java"),
    ("spring3-expression.jar", "libspring-expression-java"),
    ("spring3-web.jar", "libspring-web-java"),
    ("spring3-web.servlet.jar", "libspring-web-servlet-java"),
    ("spring3-jdbc.jar", "libspring-jdbc-java"),
    ("spring3-transaction.jar", "libspring-transaction-java"),
    ("commons-logging.jar", "libcommons-logging-java"),
    ("HikariCP.jar", "libhikaricp-java"),
    ("mariadb-java-client.jar", "libmariadb-java"),
    ("logback-classic.jar", "liblogback-java"),
    ("logback-core.jar", "liblogback-java"),
    ("slf4j-api.jar", "libslf4j-java"),
    ("netty-common.jar", "libnetty-java"),
    ("netty-buffer.jar", "libnetty-java"),
    ("netty-transport.jar", "libnetty-java"),
    ("netty-codec.jar", "libnetty-java"),
    ("netty-codec-http.jar", "libnetty-java"),
    ("netty-handler.jar", "libnetty-java"),
    ("netty-resolver.jar", "libnetty-java"),
];

const JAVA_SOURCES: &[&str] = &[
    "OrderService.java",
    "OrderConfig.java",
    "OrderController.java",
    "AuditLog.java",
    "Stats.java",
    "NettyService.java",
];

fn jars() -> String {
    let jars: Vec<String> = JARS
        .iter()
        .map(|(jar, package)| {
            let path = Path::new("/usr/share/java").join(jar);
            assert!(
                path.exists(),
                "{} is missing: install the Debian package {package} (`cargo xtask test` does)",
                path.display()
            );
            path.display().to_string()
        })
        .collect();
    jars.join(":")
}

/// The class path of the Java fixtures: compiled once per test process into the scratch
/// directory, then Debian's jars.
pub fn java_classpath() -> &'static str {
    static CLASSPATH: OnceLock<String> = OnceLock::new();
    CLASSPATH.get_or_init(|| {
        let jars = jars();
        let classes = scratch_dir().join(format!("frameworks-classes-{}", std::process::id()));
        std::fs::create_dir_all(&classes).expect("create the Java build directory");
        let status = Command::new("javac")
            .arg("-d")
            .arg(&classes)
            .args(["-cp", &jars])
            .args(JAVA_SOURCES.iter().map(|s| Path::new(FIXTURES).join(s)))
            .status()
            .expect("run javac (`cargo xtask test` installs openjdk-17-jdk-headless)");
        assert!(status.success(), "javac failed on the framework fixtures");
        format!("{}:{jars}", classes.display())
    })
}

/// http.c built as `upstream` and as `tpr-server`: one program, two process names, so the
/// report tells them apart. Built once per test process.
fn c_binaries() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        // As distributions build: optimised, no frame pointers.
        let flags = ["-O2", "-g", "-pthread", "-Wall"];
        (
            build_fixture("frameworks/http.c", "upstream", &flags),
            build_fixture("frameworks/http.c", "tpr-server", &flags),
        )
    })
}

/// The JVM options of logback's configuration (tests/fixtures/frameworks/logback.xml), which
/// appends to `app.log` in `dir`: without it, logback logs every library's debug lines.
fn java_logging(dir: &Path) -> [String; 2] {
    [
        format!("-Dlogback.configurationFile={FIXTURES}/logback.xml"),
        format!("-Dapp.log={}", dir.join("app.log").display()),
    ]
}

/// `cmd`, killed when the test's thread ends, however it ends: a test process killed by a
/// timeout or Ctrl-C leaves no service behind (on a panic, the owners' Drop kill them first).
fn dies_with_the_test(mut cmd: Command) -> Command {
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    cmd
}

/// A free loopback port, for servers that cannot be told to pick one (MariaDB).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral loopback port")
        .port()
}

/// A service fixture: killed and reaped when dropped. Its stderr goes to `log`.
pub struct Service {
    child: Child,
    pub name: &'static str,
    pub port: u16,
    pub log: PathBuf,
}

impl Service {
    /// Starts `cmd` and waits (60 s at most: a JVM on a loaded machine) for its `ready PORT`.
    fn start(name: &'static str, cmd: Command, log: PathBuf) -> Service {
        let child = dies_with_the_test(cmd)
            .stdout(Stdio::piped())
            .stderr(File::create(&log).expect("create the service's log"))
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        // Owned before anything can panic, so that the process is killed then too.
        let mut service = Service {
            child,
            name,
            port: 0,
            log,
        };
        let stdout = service.child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads stdout to its end: a library that prints there must not fill the pipe and
        // stall the service.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line.trim().strip_prefix("ready ") {
                    let _ = tx.send(port.parse::<u16>().ok());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Some(port)) => service.port = port,
            _ => panic!(
                "{name} did not print `ready PORT`; its log:\n{}",
                service.log_tail()
            ),
        }
        service
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The last lines of its log, for a failure's message.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `GET path`: the body of a 200 answer.
    pub fn get(&self, path: &str) -> String {
        http_get(self.port, path).unwrap_or_else(|e| {
            panic!(
                "GET {path} from {}: {e}; its log:\n{}",
                self.name,
                self.log_tail()
            )
        })
    }

    /// Its counters (`GET /stats`).
    pub fn stats(&self) -> Counters {
        parse_counters(&self.get("/stats"))
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_get(port: u16, path: &str) -> Result<String, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| e.to_string())?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP answer: {answer:?}"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("answered {head:?}"));
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Err(format!("a chunked answer: {answer:?}"));
    }
    Ok(body.to_string())
}

/// A service's counters by name (`name value` pairs, tests/fixtures/frameworks/Stats.java).
pub type Counters = BTreeMap<String, u64>;

fn parse_counters(text: &str) -> Counters {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .chunks(2)
        .map(|pair| {
            let value = pair.get(1).and_then(|v| v.parse().ok());
            let value = value.unwrap_or_else(|| panic!("bad counters {text:?}"));
            (pair[0].to_string(), value)
        })
        .collect()
}

/// A private MariaDB: a scratch datadir, loopback TCP on a free port, no grant tables (the
/// test connects as root without a password); killed and its datadir removed when dropped.
pub struct MariaDb {
    child: Child,
    dir: PathBuf,
    pub port: u16,
}

impl MariaDb {
    pub fn start() -> MariaDb {
        let dir = scratch_dir().join(format!("mariadb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).expect("create the MariaDB datadir");
        let port = free_port();
        // An empty datadir is enough without grant tables: mariadbd creates InnoDB's files
        // (a second) where mariadb-install-db would take three.
        let child = dies_with_the_test(Command::new("/usr/sbin/mariadbd"))
            .arg("--no-defaults")
            .arg("--user=root")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
            .arg(format!("--log-error={}", dir.join("error.log").display()))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--port={port}"))
            .args([
                "--skip-grant-tables",
                "--skip-name-resolve",
                "--skip-log-bin",
                "--performance-schema=off",
                "--innodb-buffer-pool-size=16M",
                "--innodb-log-file-size=8M",
                "--max-connections=64",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mariadbd (`cargo xtask test` installs mariadb-server)");
        let mut db = MariaDb { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while db.sql("SELECT 1").is_err() {
            if let Ok(Some(status)) = db.child.try_wait() {
                panic!("mariadbd exited at start ({status}):\n{}", db.error_log());
            }
            assert!(
                Instant::now() < deadline,
                "mariadbd does not answer after 60 s:\n{}",
                db.error_log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // The items /list reads (seq_1_to_100: MariaDB's sequence engine).
        db.sql(
            "CREATE DATABASE shop; USE shop; \
             CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40)) ENGINE=InnoDB; \
             INSERT INTO items SELECT seq, CONCAT('item-', seq) FROM seq_1_to_100;",
        )
        .unwrap_or_else(|e| panic!("create the schema: {e}"));
        db
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn jdbc_url(&self) -> String {
        format!("jdbc:mariadb://127.0.0.1:{}/shop?user=root", self.port)
    }

    /// Runs `sql` with the command-line client over the server's socket.
    pub fn sql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new("/usr/bin/mariadb")
            .arg("--no-defaults")
            .arg(format!(
                "--socket={}",
                self.dir.join("mysqld.sock").display()
            ))
            .args(["-uroot", "--batch", "-e", sql])
            .output()
            .map_err(|e| format!("run the mariadb client: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        // Killed, not shut down: the data is thrown away, and a shutdown takes seconds.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a test runs: one service under `wrk -t2 -c32` on one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Tomcat + Spring MVC `/price`: HttpClient.send to the 20 ms upstream, then 0.2 ms of
    /// hashing.
    TomcatPrice,
    /// Tomcat + Spring MVC `/list`: JdbcTemplate.query through a HikariCP pool of 4 (a 10 ms
    /// query), a logback line, a synchronized append + fsync; profiled with mariadbd.
    TomcatList,
    /// Tomcat + Spring MVC `/order`: a logback line and the synchronized append + fsync,
    /// nothing else: the 32 requests in flight queue on the audit log's monitor.
    TomcatOrder,
    /// Netty 4.1, 2 event loops whose handler sleeps 5 ms.
    NettyBlocking,
    /// C, a thread per connection, each request a new connection to the 20 ms upstream.
    CThreadPerRequest,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::TomcatPrice => "tomcat-price",
            Scenario::TomcatList => "tomcat-list",
            Scenario::TomcatOrder => "tomcat-order",
            Scenario::NettyBlocking => "netty-blocking",
            Scenario::CThreadPerRequest => "c-thread-per-request",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Scenario::TomcatPrice => "/price",
            Scenario::TomcatList => "/list",
            Scenario::TomcatOrder => "/order",
            Scenario::NettyBlocking => "/quote",
            Scenario::CThreadPerRequest => "/price",
        }
    }

    /// The frame only request-serving threads run: they are the request threads.
    pub fn request_frame(self) -> &'static str {
        match self {
            Scenario::TomcatPrice => "OrderController.price",
            Scenario::TomcatList => "OrderController.list",
            Scenario::TomcatOrder => "OrderController.order",
            Scenario::NettyBlocking => "QuoteHandler.channelRead0",
            Scenario::CThreadPerRequest => "handle_connection",
        }
    }

    /// The frame by which a thread is a request thread: one that served the load, not only
    /// the test's `GET /stats` (which the C server serves on a thread of its own).
    pub fn load_frame(self) -> &'static str {
        match self {
            Scenario::CThreadPerRequest => "call_upstream",
            _ => self.request_frame(),
        }
    }

    /// Starts the scenario's processes, each answering.
    pub fn start(self) -> Running {
        // One directory per scenario, emptied first: a capture's outputs are tens of MB.
        let dir = scratch_dir().join("frameworks").join(self.name());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the scenario's directory");
        let needs_upstream = matches!(self, Scenario::TomcatPrice | Scenario::CThreadPerRequest);
        let upstream = needs_upstream.then(|| {
            let mut cmd = Command::new(&c_binaries().0);
            cmd.arg("upstream");
            Service::start("upstream", cmd, dir.join("upstream.log"))
        });
        let db = (self == Scenario::TomcatList).then(MariaDb::start);
        let service = match self {
            Scenario::TomcatPrice | Scenario::TomcatList | Scenario::TomcatOrder => {
                let mut cmd = Command::new("java");
                cmd.args(java_logging(&dir))
                    .arg(format!("-Dbase={}", dir.join("tomcat").display()))
                    .arg(format!("-Daudit={}", dir.join("audit.log").display()));
                if let Some(upstream) = &upstream {
                    cmd.arg(format!("-Dupstream={}", upstream.port));
                }
                if let Some(db) = &db {
                    cmd.arg(format!("-Djdbc.url={}", db.jdbc_url()));
                }
                cmd.args(["-cp", java_classpath(), "OrderService"]);
                Service::start("OrderService", cmd, dir.join("service.log"))
            }
            Scenario::NettyBlocking => {
                let mut cmd = Command::new("java");
                cmd.args(java_logging(&dir))
                    .args(["-cp", java_classpath(), "NettyService"]);
                Service::start("NettyService", cmd, dir.join("service.log"))
            }
            Scenario::CThreadPerRequest => {
                let mut cmd = Command::new(&c_binaries().1);
                cmd.arg("server");
                cmd.arg(upstream.as_ref().expect("an upstream").port.to_string());
                Service::start("tpr-server", cmd, dir.join("service.log"))
            }
        };
        // One request through the whole path before the load: a broken fixture fails here,
        // with its log, rather than as wrk's errors.
        let _ = service.get(self.path());
        Running {
            scenario: self,
            dir,
            service,
            db,
            upstream,
        }
    }
}

/// A scenario's processes; dropped in reverse order of start (the service before what it
/// calls).
pub struct Running {
    pub scenario: Scenario,
    /// Its scratch directory: logs, and the capture's outputs.
    pub dir: PathBuf,
    pub service: Service,
    pub db: Option<MariaDb>,
    pub upstream: Option<Service>,
}

impl Running {
    /// What the profiler is pointed at: the service, and the database with it.
    pub fn targets(&self) -> Vec<u32> {
        let mut pids = vec![self.service.pid()];
        pids.extend(self.db.as_ref().map(MariaDb::pid));
        pids
    }
}

/// `wrk -t2 -c32 --latency` in the background until stopped (killed when dropped).
pub struct Load {
    child: Option<Child>,
}

impl Load {
    pub fn start(url: &str) -> Load {
        let child = dies_with_the_test(Command::new("/usr/bin/wrk"))
            .args(["-t2", "-c32", "-d600s", "--latency", url])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start wrk (`cargo xtask test` installs it)");
        Load { child: Some(child) }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Stops it as Ctrl-C does (wrk then prints its summary) and reads the summary.
    pub fn stop(mut self) -> Wrk {
        let child = self.child.take().expect("wrk running");
        // SAFETY: kill has no memory effects; the pid is our child's, not yet reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let out = child.wait_with_output().expect("wait for wrk");
        Wrk::parse(&String::from_utf8_lossy(&out.stdout))
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// wrk's summary of the whole run (warm-up and capture).
#[derive(Clone, Debug, Default)]
pub struct Wrk {
    pub requests: u64,
    pub secs: f64,
    pub requests_per_s: f64,
    /// Socket errors (connect, read, write, timeout) and answers other than 2xx/3xx.
    pub errors: u64,
    pub latency_avg_ms: f64,
    /// The latency distribution's 50, 75, 90 and 99 % lines, in ms.
    pub latency_pct_ms: Vec<(String, f64)>,
    pub text: String,
}

impl Wrk {
    fn parse(text: &str) -> Wrk {
        let mut wrk = Wrk {
            text: text.to_string(),
            ..Wrk::default()
        };
        for line in text.lines().map(str::trim) {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                [n, "requests", "in", secs, ..] => {
                    wrk.requests = n.parse().unwrap_or(0);
                    wrk.secs = secs
                        .trim_end_matches(',')
                        .trim_end_matches('s')
                        .parse()
                        .unwrap_or(0.0);
                }
                ["Requests/sec:", n] => wrk.requests_per_s = n.parse().unwrap_or(0.0),
                // Not the `Latency Distribution` heading of --latency.
                ["Latency", avg, _, _, ..] => wrk.latency_avg_ms = millis(avg),
                [pct, value] if pct.ends_with('%') => {
                    wrk.latency_pct_ms.push((pct.to_string(), millis(value)));
                }
                ["Socket", "errors:", rest @ ..] => {
                    wrk.errors += rest
                        .iter()
                        .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                        .sum::<u64>();
                }
                ["Non-2xx", "or", "3xx", "responses:", n] => {
                    wrk.errors += n.parse::<u64>().unwrap_or(0);
                }
                _ => {}
            }
        }
        wrk
    }
}

/// wrk's `20.86ms`, `642.50us`, `1.02s` in ms.
fn millis(value: &str) -> f64 {
    let split = value
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(value.len());
    let (n, unit) = value.split_at(split);
    let n: f64 = n.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => f64::NAN,
    }
}

/// CPU time of the machine and of every process, read at one instant.
struct CpuSnapshot {
    /// Busy and total ticks of all CPUs (/proc/stat).
    busy: u64,
    total: u64,
    /// utime + stime ticks and comm, by PID.
    processes: BTreeMap<u32, (String, u64)>,
}

fn cpu_snapshot() -> CpuSnapshot {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    // cpu user nice system idle iowait irq softirq steal …
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = ticks.iter().sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    let mut processes = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state … : comm may hold spaces and parentheses, the last ')' ends it.
        let (Some(open), Some(close)) = (text.find('('), text.rfind(')')) else {
            continue;
        };
        let comm = text[open + 1..close].to_string();
        let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the comm.
        let cpu: u64 = fields
            .get(11..13)
            .map(|f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum())
            .unwrap_or(0);
        processes.insert(pid, (comm, cpu));
    }
    CpuSnapshot {
        busy: total - idle.min(total),
        total,
        processes,
    }
}

/// The capture window as the machine and the services saw it.
#[derive(Clone, Debug)]
pub struct Window {
    pub secs: f64,
    /// The service's counters over the window.
    pub stats: Counters,
    /// The upstream's counters over the window, when there is one.
    pub upstream_stats: Option<Counters>,
    /// The CPUs' busy share over the window, %.
    pub cpus_busy_pct: f64,
    /// The processes that used the most CPU over the window: name, PID, % of one CPU.
    pub top_processes: Vec<(String, u32, f64)>,
}

/// The counters' growth over the window; a maximum (`…_max_…`) is since the start, as is.
fn delta(after: &Counters, before: &Counters) -> Counters {
    after
        .iter()
        .map(|(k, v)| {
            let since = if k.contains("_max_") {
                0
            } else {
                before.get(k).copied().unwrap_or(0)
            };
            (k.clone(), v.saturating_sub(since))
        })
        .collect()
}

/// One scenario's capture with what the window really held.
pub struct Captured {
    pub scenario: Scenario,
    /// The profiler's terminal summary (its stdout).
    pub summary: String,
    pub report: serde_json::Value,
    pub verdict: String,
    pub lines: Vec<Line>,
    pub wrk: Wrk,
    pub window: Window,
    /// Threads (tid) that served the load in the window (see `Scenario::load_frame`).
    pub request_threads: BTreeSet<u32>,
    /// Where the outputs are: report.json, profile.capture, profile.folded, profile.svg,
    /// summary.txt (the terminal summary), profiler.stderr, wrk.txt, truth.json, the services'
    /// logs.
    pub dir: PathBuf,
    /// The counters behind `truth.json`, derived per scenario.
    pub truth: serde_json::Value,
}

/// Runs `scenario` under `wrk -t2 -c32`, warm for `warm_s` (the JIT compiles the request
/// path, pools fill), then captures `capture_s` with the profiler (`--per-thread`, folded
/// stacks, the JSON report, the saved capture) while reading the ground truth at the window's
/// ends. Writes everything into the scenario's directory.
pub fn run(scenario: Scenario, warm_s: u64, capture_s: u64) -> Captured {
    let begun = Instant::now();
    let running = scenario.start();
    eprintln!(
        "{}: started in {:.1} s",
        scenario.name(),
        begun.elapsed().as_secs_f64()
    );
    let load = Load::start(&running.service.url(scenario.path()));
    std::thread::sleep(Duration::from_secs(warm_s));

    let dir = running.dir.clone();
    let path = |name: &str| dir.join(name).to_str().expect("UTF-8 path").to_string();
    let (svg, folded, report, capture) = (
        path("profile.svg"),
        path("profile.folded"),
        path("report.json"),
        path("profile.capture"),
    );
    let pids = running
        .targets()
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let secs = capture_s.to_string();
    let args = [
        "--pid",
        &pids,
        "--secs",
        &secs,
        "--per-thread",
        "-o",
        &svg,
        "--folded",
        &folded,
        "--report",
        &report,
        "--save",
        &capture,
    ];
    prompt();
    let asked = Instant::now();
    let capturing = Capturing::start(&args);
    let started = Instant::now();
    eprintln!(
        "{}: the profiler took {:.1} s to start capturing",
        scenario.name(),
        (started - asked).as_secs_f64()
    );
    let (stats_before, upstream_before, cpu_before) = (
        running.service.stats(),
        running.upstream.as_ref().map(Service::stats),
        cpu_snapshot(),
    );
    std::thread::sleep(Duration::from_secs(capture_s).saturating_sub(started.elapsed()));
    let (stats_after, upstream_after, cpu_after) = (
        running.service.stats(),
        running.upstream.as_ref().map(Service::stats),
        cpu_snapshot(),
    );
    let secs = started.elapsed().as_secs_f64();
    unprompt();
    // The load ends with the window: the profiler then writes its outputs on CPUs of its own.
    let wrk = load.stop();
    let result = capturing.finish();
    eprintln!(
        "{}: the profiler took {:.1} s after the window",
        scenario.name(),
        started.elapsed().as_secs_f64() - secs
    );
    // The terminal summary is the profiler's stdout; its stderr says what it wrote.
    let summary = String::from_utf8_lossy(&result.stdout).into_owned();
    std::fs::write(dir.join("summary.txt"), &summary).expect("write the summary");
    std::fs::write(dir.join("profiler.stderr"), &result.stderr).expect("write the stderr");
    std::fs::write(dir.join("wrk.txt"), &wrk.text).expect("write wrk's summary");
    assert_success(&result);

    let ticks = (cpu_after.total - cpu_before.total).max(1) as f64;
    let mut top_processes: Vec<(String, u32, f64)> = cpu_after
        .processes
        .iter()
        .map(|(pid, (comm, after))| {
            let before = cpu_before.processes.get(pid).map_or(0, |(_, b)| *b);
            // USER_HZ ticks over the window's seconds: % of one CPU.
            let pct = (after.saturating_sub(before)) as f64 / secs;
            (comm.clone(), *pid, pct)
        })
        .filter(|(_, _, pct)| *pct >= 0.5)
        .collect();
    top_processes.sort_by(|a, b| b.2.total_cmp(&a.2));
    top_processes.truncate(8);
    let window = Window {
        secs,
        stats: delta(&stats_after, &stats_before),
        upstream_stats: upstream_after
            .zip(upstream_before)
            .map(|(a, b)| delta(&a, &b)),
        cpus_busy_pct: 100.0 * (cpu_after.busy - cpu_before.busy) as f64 / ticks,
        top_processes,
    };

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("read the JSON report"))
            .expect("the report is JSON");
    let verdict = report["verdict"].as_str().unwrap_or_default().to_string();
    let lines = read_folded(Path::new(&folded));
    let request_threads = threads_running(&lines, scenario.load_frame());
    let truth = ground_truth(scenario, &window, &wrk, &request_threads);
    std::fs::write(
        dir.join("truth.json"),
        serde_json::to_string_pretty(&truth).expect("JSON"),
    )
    .expect("write the ground truth");
    eprintln!(
        "{}: outputs in {}\n{summary}\nground truth: {}",
        scenario.name(),
        dir.display(),
        serde_json::to_string_pretty(&truth).expect("JSON")
    );
    drop(running);
    Captured {
        scenario,
        summary,
        report,
        verdict,
        lines,
        wrk,
        window,
        request_threads,
        dir,
        truth,
    }
}

/// Back to the normal scheduling class after [`prompt`]: what the test does after the window
/// (reading tens of MB of outputs) must not hold a CPU against the profiler and the machine.
fn unprompt() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a valid sched_param for the calling thread; failure leaves the policy unchanged.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_OTHER, &param);
    }
}

/// The tids (from `--per-thread`'s `<name>-<tid>`) of threads with `frame` on a stack.
pub fn threads_running(lines: &[Line], frame: &str) -> BTreeSet<u32> {
    lines
        .iter()
        .filter(|l| l.frames.iter().any(|f| is_frame(f, frame)))
        .filter_map(|l| l.frames.get(1)?.rsplit_once('-')?.1.parse().ok())
        .collect()
}

/// Whether the profiler's frame `name` is `frame`: inlined (`_[i]`) or not, and for Java
/// with or without its package (`CompletableFuture.get` is
/// `java.util.concurrent.CompletableFuture.get`).
pub fn is_frame(name: &str, frame: &str) -> bool {
    let name = name.strip_suffix("_[i]").unwrap_or(name);
    name == frame
        || name
            .strip_suffix(frame)
            .is_some_and(|package| package.ends_with('.'))
}

/// The time (µs) of the stacks of `threads` with `frame` on them.
pub fn time_under(lines: &[Line], threads: &BTreeSet<u32>, frame: &str) -> u64 {
    lines
        .iter()
        .filter(|l| {
            l.frames
                .get(1)
                .and_then(|t| t.rsplit_once('-')?.1.parse().ok())
                .is_some_and(|tid| threads.contains(&tid))
        })
        .filter(|l| l.frames.iter().any(|f| is_frame(f, frame)))
        .map(|l| l.count)
        .sum()
}

/// What the window held, from the services' counters: rates, latencies, and the share of the
/// request threads' time each wait takes (the request threads' time is the window times
/// their number: those that wait for a turn at a pool or loop are counted from the frame's
/// threads as the profiler saw them).
fn ground_truth(
    scenario: Scenario,
    window: &Window,
    wrk: &Wrk,
    request_threads: &BTreeSet<u32>,
) -> serde_json::Value {
    let stat = |name: &str| window.stats.get(name).copied().unwrap_or(0) as f64;
    let requests = stat("requests").max(1.0);
    let ms_per_request = |name: &str| stat(name) / requests / 1e6;
    let threads = request_threads.len().max(1) as f64;
    let thread_ns = window.secs * 1e9 * threads;
    // Shares of all request threads' time in the window, %.
    let share = |name: &str| 100.0 * stat(name) / thread_ns;
    let mut derived = serde_json::Map::new();
    derived.insert(
        "requests_per_s".into(),
        json!(stat("requests") / window.secs),
    );
    derived.insert(
        "handler_ms_per_request".into(),
        json!(ms_per_request("handler_ns")),
    );
    derived.insert(
        "handler_share_of_request_threads_pct".into(),
        json!(share("handler_ns")),
    );
    match scenario {
        Scenario::TomcatPrice => {
            derived.insert(
                "upstream_ms_per_request".into(),
                json!(ms_per_request("upstream_ns")),
            );
            derived.insert(
                "sign_ms_per_request".into(),
                json!(ms_per_request("sign_ns")),
            );
            derived.insert(
                "upstream_share_of_request_threads_pct".into(),
                json!(share("upstream_ns")),
            );
        }
        Scenario::CThreadPerRequest => {
            derived.insert(
                "upstream_ms_per_request".into(),
                json!(ms_per_request("upstream_ns")),
            );
            derived.insert(
                "upstream_max_ms_since_start".into(),
                json!(stat("upstream_max_ns") / 1e6),
            );
            derived.insert(
                "upstream_share_of_request_threads_pct".into(),
                json!(share("upstream_ns")),
            );
        }
        Scenario::TomcatOrder => {
            for (name, counter) in [
                ("audit_lock_wait", "audit_lock_wait_ns"),
                ("audit_held", "audit_held_ns"),
            ] {
                derived.insert(
                    format!("{name}_ms_per_request"),
                    json!(ms_per_request(counter)),
                );
                derived.insert(
                    format!("{name}_share_of_request_threads_pct"),
                    json!(share(counter)),
                );
            }
        }
        Scenario::TomcatList => {
            for (name, counter) in [
                ("pool_wait", "pool_wait_ns"),
                ("audit_lock_wait", "audit_lock_wait_ns"),
                ("audit_held", "audit_held_ns"),
            ] {
                derived.insert(
                    format!("{name}_ms_per_request"),
                    json!(ms_per_request(counter)),
                );
                derived.insert(
                    format!("{name}_share_of_request_threads_pct"),
                    json!(share(counter)),
                );
            }
            // query_ns is JdbcTemplate.query whole: the pool's wait, then the query.
            let query = (stat("query_ns") - stat("pool_wait_ns")).max(0.0);
            derived.insert(
                "query_after_pool_ms_per_request".into(),
                json!(query / requests / 1e6),
            );
            derived.insert(
                "query_after_pool_share_of_request_threads_pct".into(),
                json!(100.0 * query / thread_ns),
            );
        }
        Scenario::NettyBlocking => {
            derived.insert(
                "sleep_ms_per_request".into(),
                json!(ms_per_request("sleep_ns")),
            );
            derived.insert(
                "sleep_share_of_event_loops_pct".into(),
                json!(share("sleep_ns")),
            );
        }
    }
    json!({
        "scenario": scenario.name(),
        "window_s": window.secs,
        "request_threads": request_threads.len(),
        "counters": window.stats,
        "upstream_counters": window.upstream_stats,
        "derived": derived,
        "wrk_whole_run": {
            "requests": wrk.requests,
            "secs": wrk.secs,
            "requests_per_s": wrk.requests_per_s,
            "errors": wrk.errors,
            "latency_avg_ms": wrk.latency_avg_ms,
            "latency_pct_ms": wrk.latency_pct_ms,
        },
        "cpus_busy_pct": window.cpus_busy_pct,
        "top_processes_pct_of_one_cpu": window
            .top_processes
            .iter()
            .map(|(name, pid, pct)| json!({"name": name, "pid": pid, "pct": pct}))
            .collect::<Vec<_>>(),
    })
}
