//! Shared pieces of the end-to-end tests: building the workload, running it and the profiler
//! as a user would, and reading the folded output.
#![allow(dead_code)]

pub mod frameworks;
pub mod services;
// The schema check profiler-core's golden test uses.
#[path = "../../../profiler-core/tests/support/schema.rs"]
mod schema;
pub use schema::schema_errors;

use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::{Mutex, MutexGuard, OnceLock},
    time::Duration,
};

/// The profiler binary cargo built for this test run.
pub const PROFILER: &str = env!("CARGO_BIN_EXE_profiler");

/// Captures measure CPU time on a 2-core machine: tests of one binary take turns.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The privileged tests are the point of this suite: without root they fail, loudly.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the end-to-end tests load eBPF programs and must run as root: use `cargo xtask test`"
    );
}

pub fn scratch_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e");
    std::fs::create_dir_all(&dir).expect("create the test scratch directory");
    dir
}

/// Compiler flags of a build variant of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Build {
    /// Frame pointers everywhere, leaf functions included; no sibling calls.
    FramePointers,
    /// What distributions ship: `-O2 -fomit-frame-pointer`. Only `.eh_frame` can unwind it.
    NoFramePointers,
}

impl Build {
    fn flags(self) -> &'static [&'static str] {
        match self {
            Build::FramePointers => &[
                "-O2",
                "-g",
                "-fno-omit-frame-pointer",
                "-mno-omit-leaf-frame-pointer",
                "-fno-optimize-sibling-calls",
            ],
            Build::NoFramePointers => &[
                "-O2",
                "-g",
                "-fomit-frame-pointer",
                "-fno-optimize-sibling-calls",
            ],
        }
    }
}

/// Builds `tests/fixtures/workload.c` once per variant and test binary.
pub fn workload_binary(build: Build) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<(Build, PathBuf)>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(b, _)| *b == build) {
        return path.clone();
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workload.c");
    // The binary's name is the process name the profiler reports: keep it `workload`.
    let dir = scratch_dir().join(format!("{build:?}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the workload build directory");
    let out = dir.join("workload");
    let status = Command::new("gcc")
        .args(build.flags())
        .args(["-pthread", "-ldl", "-Wall", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .expect("run gcc (the tests build their C workload with it)");
    assert!(status.success(), "gcc failed to build {}", source.display());
    built.push((build, out.clone()));
    out
}

/// Builds `tests/fixtures/<source>` with gcc and `flags` into `<scratch>/<name>-<pid>/<name>`.
pub fn build_fixture(source: &str, name: &str, flags: &[&str]) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(source);
    let dir = scratch_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the fixture's build directory");
    let out = dir.join(name);
    let status = Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&source)
        .status()
        .expect("run gcc (the tests build their C fixtures with it)");
    assert!(status.success(), "gcc failed to build {}", source.display());
    out
}

/// Builds `tests/fixtures/plugin.c` as a shared library without frame pointers.
pub fn plugin_library() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/plugin.c");
    let dir = scratch_dir().join(format!("plugin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the plugin build directory");
    let out = dir.join("libplugin.so");
    let status = Command::new("gcc")
        .args([
            "-O2",
            "-g",
            "-fomit-frame-pointer",
            "-fno-optimize-sibling-calls",
            "-fPIC",
            "-shared",
            "-o",
        ])
        .arg(&out)
        .arg(&source)
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc failed to build {}", source.display());
    out
}

/// A running workload, killed when dropped.
pub struct Workload {
    pub child: Child,
}

impl Workload {
    pub fn spawn(build: Build, args: &[&str]) -> Self {
        let mut child = Command::new(workload_binary(build))
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the workload");
        if matches!(
            args.first(),
            Some(&"mixed")
                | Some(&"latency")
                | Some(&"dlopen")
                | Some(&"fsync")
                | Some(&"accuracy")
                | Some(&"sleeps")
                | Some(&"sites")
                | Some(&"service")
        ) {
            // Wait until every thread exists.
            let stdout = child.stdout.take().expect("piped stdout");
            let mut line = String::new();
            BufReader::new(stdout)
                .read_line(&mut line)
                .expect("read the workload's ready line");
            assert_eq!(line.trim(), "ready");
        }
        // Let threads settle into their loops (the blocked thread blocks now, before capture).
        std::thread::sleep(Duration::from_millis(300));
        Self { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(self.pid() as i32, sig) };
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A profiler running in the background whose capture window is open.
pub struct Capturing {
    pub child: Child,
    stderr: std::thread::JoinHandle<String>,
}

impl Capturing {
    /// Starts the profiler and returns once it prints that it is capturing, so whatever the
    /// test does next happens inside the capture window.
    pub fn start(args: &[&str]) -> Self {
        let mut child = Command::new(PROFILER)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the profiler");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = std::thread::spawn(move || {
            // The test reads the kernel's figures the moment the window opens: a reader that
            // a loaded machine lets wait would shift the test's window against the profiler's.
            prompt();
            let mut all = String::new();
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("capturing")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(());
                }
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the profiler never started capturing");
        Self { child, stderr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the profiler to exit; stderr holds everything it printed.
    pub fn finish(self) -> Output {
        let Self { child, stderr } = self;
        let mut out = child.wait_with_output().expect("wait for the profiler");
        out.stderr = stderr.join().expect("stderr reader").into_bytes();
        out
    }
}

/// Runs the profiler to completion.
pub fn profile(args: &[&str]) -> Output {
    Command::new(PROFILER)
        .args(args)
        .output()
        .expect("run the profiler")
}

pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "profiler failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One folded line: frames root→leaf and the count.
#[derive(Clone, Debug)]
pub struct Line {
    pub frames: Vec<String>,
    pub count: u64,
}

impl Line {
    /// Whether `chain` appears as consecutive frames, each the direct caller of the next:
    /// nothing skipped between them, nothing bogus inserted.
    pub fn has_chain(&self, chain: &[&str]) -> bool {
        !chain.is_empty()
            && self
                .frames
                .windows(chain.len())
                .any(|w| w.iter().zip(chain).all(|(f, c)| f == c))
    }
    /// Whether `wanted` appear in this order with anything between them. Only where frames
    /// between them are expected (and then the call site says which ones): for a caller and
    /// its callee use [`Line::has_chain`].
    pub fn has_with_gaps(&self, wanted: &[&str]) -> bool {
        let mut it = self.frames.iter();
        wanted.iter().all(|w| it.any(|f| f == w))
    }
    pub fn has(&self, frame: &str) -> bool {
        self.frames.iter().any(|f| f == frame)
    }
    /// `--per-thread` puts `<name>-<tid>` second.
    pub fn thread(&self) -> &str {
        let t = self.frames.get(1).map(String::as_str).unwrap_or("");
        t.rsplit_once('-').map_or(t, |(name, _)| name)
    }
    pub fn state(&self) -> Option<&str> {
        self.frames
            .last()
            .and_then(|f| f.strip_prefix("[off-cpu:"))
            .and_then(|f| f.strip_suffix(']'))
    }
}

pub fn read_folded(path: &Path) -> Vec<Line> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read folded output {}: {e}", path.display()));
    text.lines()
        .map(|l| {
            let (stack, count) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad folded line {l:?}"));
            Line {
                frames: stack.split(';').map(str::to_string).collect(),
                count: count
                    .parse()
                    .unwrap_or_else(|_| panic!("bad count in {l:?}")),
            }
        })
        .collect()
}

/// Sum of counts per thread name (with `--per-thread`).
pub fn per_thread(lines: &[Line]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for l in lines {
        *out.entry(l.thread().to_string()).or_default() += l.count;
    }
    out
}

pub fn sum(lines: &[Line], keep: impl Fn(&Line) -> bool) -> u64 {
    lines.iter().filter(|l| keep(l)).map(|l| l.count).sum()
}

/// `value` is within `tolerance` (a fraction) of `expected`.
pub fn assert_close(what: &str, value: f64, expected: f64, tolerance: f64) {
    let err = (value - expected).abs() / expected;
    assert!(
        err <= tolerance,
        "{what}: {value} is {:.1} % off {expected} (allowed {:.1} %)",
        err * 100.0,
        tolerance * 100.0
    );
}

/// Profiles `workload` for `secs` seconds with `--per-thread`, writing `<name>.svg` and
/// `<name>.folded`, plus `extra` arguments; the profiler must succeed.
pub fn capture(workload: &Workload, name: &str, secs: u64, extra: &[&str]) -> (Output, Outputs) {
    let out = outputs(name);
    let pid = workload.pid().to_string();
    let secs = secs.to_string();
    let mut args = capture_args(&pid, &secs, &out);
    args.extend_from_slice(extra);
    let result = profile(&args);
    assert_success(&result);
    (result, out)
}

/// The arguments of a `--per-thread` capture of `pid` for `secs` seconds into `out`.
pub fn capture_args<'a>(pid: &'a str, secs: &'a str, out: &'a Outputs) -> Vec<&'a str> {
    vec![
        "--pid",
        pid,
        "--secs",
        secs,
        "--per-thread",
        "-o",
        out.svg.to_str().unwrap(),
        "--folded",
        out.folded.to_str().unwrap(),
    ]
}

/// Paths for one capture's outputs.
pub struct Outputs {
    pub svg: PathBuf,
    pub folded: PathBuf,
}

pub fn outputs(name: &str) -> Outputs {
    let dir = scratch_dir();
    Outputs {
        svg: dir.join(format!("{name}.svg")),
        folded: dir.join(format!("{name}.folded")),
    }
}

/// CPU and run-queue seconds per thread of `pid`, from the kernel's own accounting
/// (`/proc/<pid>/task/<tid>/schedstat`): the ground truth captures are checked against.
/// The frame of time a thread held the CPU while the hypervisor ran something else (steal:
/// the kernel does not charge it to the thread, and a busy host can take half a CPU).
pub const STEAL: &str = "[held the CPU, not charged: hypervisor steal]";

/// Seconds the hypervisor ran something else on this machine's CPUs (all CPUs summed): the
/// `steal` column of /proc/stat, in USER_HZ (100 Hz) ticks. Zero on bare metal.
pub fn machine_steal_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("read /proc/stat");
    let cpu = stat.lines().next().expect("the cpu line of /proc/stat");
    // cpu user nice system idle iowait irq softirq steal …
    let steal: f64 = cpu
        .split_whitespace()
        .nth(8)
        .and_then(|v| v.parse().ok())
        .expect("steal in /proc/stat");
    steal / 100.0
}

/// Each thread's schedstat figures by tid: its CPU time and its time waiting for a CPU, in
/// seconds.
pub type Schedstat = BTreeMap<u32, (f64, f64)>;

pub fn schedstat(pid: u32) -> Schedstat {
    let mut out = BTreeMap::new();
    let dir = format!("/proc/{pid}/task");
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {dir}: {e}")) {
        let Ok(entry) = entry else { continue };
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(entry.path().join("schedstat")) else {
            continue;
        };
        let f: Vec<f64> = text
            .split_whitespace()
            .filter_map(|v| v.parse::<f64>().ok())
            .collect();
        if f.len() >= 2 {
            out.insert(tid, (f[0] / 1e9, f[1] / 1e9));
        }
    }
    out
}

/// Captures with `args` while reading the schedstat of `pid`'s threads (`prompt`ly) as the
/// window opens and `secs` later: the profiler's output, checked successful, and both
/// readings.
pub fn capture_with_schedstat(
    args: &[&str],
    pid: u32,
    secs: u64,
) -> (Output, Schedstat, Schedstat) {
    prompt();
    let capturing = Capturing::start(args);
    let before = schedstat(pid);
    std::thread::sleep(Duration::from_secs(secs));
    let after = schedstat(pid);
    let result = capturing.finish();
    assert_success(&result);
    (result, before, after)
}

/// Runs the calling thread at a real-time priority (SCHED_FIFO; children and threads it starts
/// do not inherit it), so that what it observes happens when it should even on a loaded
/// machine: the ground-truth reads of `/proc` around a capture window.
pub fn prompt() {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: a valid sched_param for the calling thread; failure leaves the policy unchanged.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param);
    }
}

/// The JSON report matches docs/report.schema.json.
pub fn validate_against_schema(report: &serde_json::Value) {
    let errors = schema_errors("report.schema.json", report);
    assert!(
        errors.is_empty(),
        "report does not match docs/report.schema.json:\n{}",
        errors.join("\n")
    );
}

/// `tool` (`javac`, `java`) of the JDK at `jdk`, or the one on PATH.
fn jdk_tool(jdk: Option<&str>, tool: &str) -> String {
    jdk.map_or_else(|| tool.to_string(), |home| format!("{home}/bin/{tool}"))
}

/// Compiles `tests/fixtures/CLASS.java` into a scratch directory of its own; returns it (the
/// class path).
pub fn javac(jdk: Option<&str>, class: &str) -> PathBuf {
    let dir = scratch_dir().join(format!("java-{class}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the Java build directory");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{class}.java"));
    let status = Command::new(jdk_tool(jdk, "javac"))
        .arg("-d")
        .arg(&dir)
        .arg(&source)
        .status()
        .expect("run javac (`cargo xtask test` installs openjdk-17-jdk-headless when run as root)");
    assert!(status.success(), "javac failed on {}", source.display());
    dir
}

/// Starts `java ARGS -cp CLASSPATH CLASS` and returns it with the first line it printed (the
/// fixtures print one when they are ready).
pub fn start_java(
    jdk: Option<&str>,
    args: &[&str],
    classpath: &Path,
    class: &str,
) -> (Workload, String) {
    let mut child = Command::new(jdk_tool(jdk, "java"))
        .args(args)
        .arg("-cp")
        .arg(classpath)
        .arg(class)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start java");
    let stdout = child.stdout.take().expect("piped stdout");
    let jvm = Workload { child };
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the JVM's first line");
    (jvm, line.trim().to_string())
}

/// The port a Java service fixture printed when ready (`ready PORT`).
pub fn ready_port(line: &str) -> String {
    line.strip_prefix("ready ")
        .unwrap_or_else(|| panic!("not ready: {line:?}"))
        .to_string()
}

/// Starts `wrk` against `url` with `threads` threads, `connections` connections, for `secs`.
pub fn start_wrk(threads: u32, connections: u32, secs: u32, url: &str) -> Child {
    Command::new("/usr/bin/wrk")
        .args([
            &format!("-t{threads}"),
            &format!("-c{connections}"),
            &format!("-d{secs}s"),
            url,
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("start wrk")
}

/// Builds the Go module `profiler-core/tests/fixtures/FIXTURE` offline (no module downloads,
/// no toolchain switch, the build cache and GOPATH under cargo's scratch directory) as NAME
/// (the process name the profiler reports), with `go build` flags `flags`.
pub fn build_go(fixture: &str, name: &str, flags: &[&str]) -> PathBuf {
    assert!(
        Path::new("/usr/bin/go").exists(),
        "go not found: `cargo xtask test` installs golang-go when run as root"
    );
    let go = Path::new(env!("CARGO_TARGET_TMPDIR")).join("go");
    let dir = scratch_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the Go build directory");
    let out = dir.join(name);
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../profiler-core/tests/fixtures")
        .join(fixture);
    let status = Command::new("go")
        .arg("build")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(".")
        .current_dir(&source)
        .env("GOCACHE", go.join("cache"))
        .env("GOPATH", go.join("gopath"))
        .env("GOPROXY", "off")
        .env("GOFLAGS", "")
        .env("GOENV", "off")
        .env("GOWORK", "off")
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .status()
        .expect("run go build");
    assert!(status.success(), "go build failed in {}", source.display());
    out
}

/// A Perfetto trace summarised by profiler-core/tests/perfetto_decode.py (PyPI `perfetto`,
/// Perfetto's own protos): processes, threads with their slices (and arguments), flows,
/// samples.
pub fn perfetto_summary(trace: &Path) -> serde_json::Value {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiler-core/tests/perfetto_decode.py");
    let python = std::env::var_os("PERFETTO_PYTHON").unwrap_or_else(|| "python3".into());
    let out = Command::new(&python)
        .arg(&script)
        .arg(trace)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "perfetto_decode.py failed (the `perfetto` Python package: `cargo xtask test` \
         installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the decoder's JSON")
}
