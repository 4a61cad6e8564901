//! Privileged: the JVM reader (`profiler::jvm`) against a live JVM run with default flags (no
//! `-XX:+PreserveFramePointer`). What it reads from the JVM's memory is checked against what
//! the JVM says about itself: `jcmd <pid> Compiler.perfmap` lists every code blob with its
//! code start, size and name.

mod common;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::*;
use profiler::{
    jvm::{BlobKind, CodeBlob, Jvm},
    procmap::{MappingKind, parse_maps},
};

const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";

/// A JVM's perf map is named after its pid; removed when the test ends.
struct PerfMap(String);

impl Drop for PerfMap {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// JitWork compiled once per test binary (class files run on any newer JVM).
fn classes() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| javac(Some(JDK17), "JitWork")).clone()
}

/// Starts JitWork on the JVM in `home` and returns once it printed "ready".
fn start(home: &str) -> Workload {
    let args = [
        "-XX:CompileCommand=quiet",
        // Keep leaf() and middle() nmethods of their own.
        "-XX:CompileCommand=dontinline,JitWork::*",
    ];
    let (jvm, ready) = start_java(Some(home), &args, &classes(), "JitWork");
    assert_eq!(ready, "ready");
    jvm
}

/// `Class.method` of a perf map name that is a Java method (the JVM writes `return-type
/// Class.method(argument types)`: `void JitWork.leaf()`); None for stubs ("StubRoutines (1)",
/// "Interpreter").
fn java_method(name: &str) -> Option<&str> {
    let before = &name[..name.find('(')?];
    let method = before.rsplit(' ').next()?;
    method.contains('.').then_some(method)
}

/// The perf map's entries: code start → (size, name).
fn perf_map(pid: u32) -> HashMap<u64, (u64, String)> {
    let out = Command::new(format!("{JDK17}/bin/jcmd"))
        .args([&pid.to_string(), "Compiler.perfmap"])
        .output()
        .expect("run jcmd");
    assert!(
        out.status.success(),
        "jcmd Compiler.perfmap failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(format!("/tmp/perf-{pid}.map")).expect("read the perf map");
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ' ');
            let start = u64::from_str_radix(f.next()?.trim_start_matches("0x"), 16).ok()?;
            let size = u64::from_str_radix(f.next()?.trim_start_matches("0x"), 16).ok()?;
            Some((start, (size, f.next()?.to_string())))
        })
        .collect()
}

/// The code before `frame_complete` allocates the frame `frame_size_words` says (x86_64
/// prologue of C1 and C2: `push rbp; sub rsp, (size - 2) * 8`, or `sub rsp, (size - 1) * 8`
/// and rbp stored in the frame): `frame_complete` counts from the code's start, and the size
/// is the whole frame, return address included.
fn builds_frame(pid: u32, b: &CodeBlob) -> bool {
    use std::os::unix::fs::FileExt as _;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("open the JVM's memory");
    let mut code = vec![0u8; (b.frame_complete - b.start) as usize];
    // Room for the windows to reach an instruction ending at frame_complete.
    code.extend_from_slice(&[0; 6]);
    let prologue = code.len() - 6;
    mem.read_exact_at(&mut code[..prologue], b.start)
        .expect("read the prologue");
    let sizes = [
        (b.frame_size_words as u64 - 2) * 8,
        (b.frame_size_words as u64 - 1) * 8,
    ];
    code.windows(7).any(|w| {
        // sub rsp, imm8 (48 83 ec ib) or sub rsp, imm32 (48 81 ec id)
        let imm = match w {
            [0x48, 0x83, 0xec, i, ..] => u64::from(*i),
            [0x48, 0x81, 0xec, a, b, c, d] => u64::from(u32::from_le_bytes([*a, *b, *c, *d])),
            _ => return false,
        };
        sizes.contains(&imm)
    })
}

fn check(home: &str, version_prefix: &str) {
    let workload = start(home);
    let pid = workload.pid();
    let _map = PerfMap(format!("/tmp/perf-{pid}.map"));

    let mut jvm = Jvm::attach(pid)
        .expect("attach to the JVM")
        .expect("a JVM maps libjvm.so");
    let version = jvm.version().expect("the JVM's release string");
    println!("{home}: version {version}");
    assert!(version.starts_with(version_prefix), "version {version}");
    assert_eq!(jvm.interpreter_method_offset_words(), -3);

    // The interpreter lies in the code cache: anonymous executable memory.
    let (istart, iend) = jvm.interpreter();
    assert!(
        istart < iend,
        "empty interpreter range {istart:#x}..{iend:#x}"
    );
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("read maps");
    let holder = parse_maps(&maps)
        .into_iter()
        .find(|m| m.start <= istart && iend <= m.end);
    assert!(
        matches!(&holder, Some(m) if matches!(&m.kind, MappingKind::Anon { name } if name.is_empty())),
        "interpreter {istart:#x}..{iend:#x} not inside one anonymous r-x mapping: {holder:?}"
    );

    // leaf() and middle() compiled: retried while the JIT works.
    let deadline = Instant::now() + Duration::from_secs(10);
    let blobs = loop {
        let blobs = jvm.code_blobs().expect("walk the code cache");
        let named = |n: &str| {
            blobs
                .iter()
                .any(|b| b.name == n && matches!(b.kind, BlobKind::Nmethod { .. }))
        };
        if named("JitWork.leaf") && named("JitWork.middle") || Instant::now() > deadline {
            break blobs;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    for name in ["JitWork.leaf", "JitWork.middle"] {
        let compiled: Vec<&CodeBlob> = blobs
            .iter()
            .filter(|b| b.name == name && matches!(b.kind, BlobKind::Nmethod { .. }))
            .collect();
        assert!(
            !compiled.is_empty(),
            "no nmethod named {name} among {} blobs",
            blobs.len()
        );
        for b in compiled {
            assert!(b.frame_size_words > 0, "{b:x?}");
            assert!(
                b.start < b.frame_complete && b.frame_complete < b.end,
                "{b:x?}"
            );
            assert!(
                builds_frame(pid, b),
                "{b:x?}: no `sub rsp, (frame size - 1 or 2 words)` before frame_complete"
            );
        }
    }
    let interpreters: Vec<&CodeBlob> = blobs
        .iter()
        .filter(|b| b.kind == BlobKind::Interpreter)
        .collect();
    assert!(
        interpreters
            .iter()
            .any(|b| b.start == istart && b.end == iend),
        "no interpreter blob spans {istart:#x}..{iend:#x}: {interpreters:x?}"
    );

    // Timing: the profiler walks the code cache about once a second.
    let runs = 20;
    let t = Instant::now();
    let mut count = 0;
    for _ in 0..runs {
        count = jvm.code_blobs().expect("walk the code cache").len();
    }
    println!(
        "{home}: code_blobs() of {count} blobs: {:?} per call ({runs} calls, names cached)",
        t.elapsed() / runs
    );

    // Against the JVM's own perf map: snapshots before and after it, as the JIT runs on.
    let before = jvm.code_blobs().expect("walk the code cache");
    let perf = perf_map(pid);
    let after = jvm.code_blobs().expect("walk the code cache");
    let ours: HashMap<u64, &CodeBlob> = before.iter().chain(&after).map(|b| (b.start, b)).collect();
    let mut java = 0;
    for (start, (size, name)) in &perf {
        let Some(method) = java_method(name) else {
            // Stubs and adapters: the same blob under the same name.
            let b = ours.get(start);
            assert!(
                matches!(b, Some(b) if b.end - b.start == *size && b.name == *name),
                "perf map {start:#x} {size:#x} {name}: ours {b:x?}"
            );
            continue;
        };
        java += 1;
        let Some(b) = ours.get(start) else {
            panic!("perf map entry {start:#x} {name} is no blob we read");
        };
        assert!(
            matches!(b.kind, BlobKind::Nmethod { .. }),
            "perf map {start:#x} {name} is our {b:x?}"
        );
        assert_eq!(b.end - b.start, *size, "size of {name}: ours {b:x?}");
        assert_eq!(b.name, method, "name of the blob at {start:#x}");
    }
    assert!(java > 10, "only {java} Java methods in the perf map");
    // Every nmethod in both snapshots is in the perf map too.
    let in_both: Vec<&CodeBlob> = before
        .iter()
        .filter(|b| matches!(b.kind, BlobKind::Nmethod { .. }) && after.contains(b))
        .collect();
    let missing: Vec<&&CodeBlob> = in_both
        .iter()
        .filter(|b| !perf.contains_key(&b.start))
        .collect();
    assert!(
        missing.is_empty(),
        "nmethods not in the perf map: {missing:x?}"
    );
    println!(
        "{home}: {java} Java methods of the perf map matched, {} blobs in all",
        perf.len()
    );

    // Method names through a fresh reader (no cache), and a Method* that is not one.
    let mut fresh = Jvm::attach(pid).expect("attach").expect("a JVM");
    for b in &after {
        if let BlobKind::Nmethod { method } = b.kind
            && b.name.starts_with("JitWork.")
        {
            assert_eq!(fresh.method_name(method).expect("name a Method*"), b.name);
        }
    }
    assert!(
        fresh.method_name(istart).is_err(),
        "the interpreter's code named as a method"
    );
    assert!(fresh.method_name(8).is_err(), "address 8 named as a method");
}

#[test]
fn jvm_reader_jdk17() {
    require_root();
    let _serial = serial();
    assert!(
        Path::new(JDK17).exists(),
        "{JDK17} not found: `cargo xtask test` installs openjdk-17-jdk-headless when run as root"
    );
    check(JDK17, "17.");
}

#[test]
fn jvm_reader_jdk25() {
    require_root();
    let _serial = serial();
    if !Path::new(JDK25).exists() {
        eprintln!("{JDK25} not installed: JDK 25 not checked");
        return;
    }
    check(JDK25, "25.");
}

#[test]
fn jvm_reader_not_a_jvm() {
    // A C workload maps no libjvm.so.
    let _serial = serial();
    let workload = Workload::spawn(Build::FramePointers, &["spin"]);
    assert!(
        Jvm::attach(workload.pid())
            .expect("read its maps")
            .is_none()
    );
}
