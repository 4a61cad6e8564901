//! Privileged: the JVM reader (`profiler_core::jvm`) against a live JVM run with default flags (no
//! `-XX:+PreserveFramePointer`). What it reads from the JVM's memory is checked against what
//! the JVM says about itself: `jcmd <pid> Compiler.perfmap` lists every code blob with its
//! code start, size and name.

mod common;

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::*;
use profiler::process::{hotspot::HotSpot, jvm_attach};
use profiler_core::{
    jvm::{BlobKind, CodeBlob, Jvm},
    procmap::{MappingKind, parse_maps},
};

const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
/// Temurin's JDK 25 (Adoptium's package or tarball): Debian 12 packages no JDK 25, so
/// `cargo xtask test` installs none and leaves the two JDK 25 tests out where it is missing
/// (xtask/src/main.rs, `JDK25`); run by hand, they fail without it.
const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";

/// The JDK 25 tests fail, saying why, where it is not installed.
fn require_jdk25() {
    assert!(
        Path::new(JDK25).exists(),
        "{JDK25} not found: these tests need Temurin's JDK 25 there (Debian 12 packages no \
         JDK 25; `cargo xtask test` leaves them out without it)"
    );
}

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

    let mut jvm = jvm_attach::attach(pid)
        .expect("attach to the JVM")
        .expect("a JVM maps libjvm.so");
    let version = jvm.version().expect("the JVM's release string");
    println!("{home}: version {version}");
    assert!(version.starts_with(version_prefix), "version {version}");
    assert_eq!(jvm.interpreter_method_offset_words(), -3);
    let interpreter = check_interpreter(&jvm, pid);
    check_compiled(&mut jvm, pid, interpreter);
    time_reads(home, &mut jvm);
    let after = check_against_perf_map(home, &mut jvm, pid);

    // Method names through a fresh reader (no cache), and a Method* that is not one.
    let mut fresh = jvm_attach::attach(pid).expect("attach").expect("a JVM");
    for b in &after {
        if let BlobKind::Nmethod { method } = b.kind
            && b.name.starts_with("JitWork.")
        {
            assert_eq!(fresh.method_name(method).expect("name a Method*"), b.name);
        }
    }
    assert!(
        fresh.method_name(interpreter.0).is_err(),
        "the interpreter's code named as a method"
    );
    assert!(fresh.method_name(8).is_err(), "address 8 named as a method");
}

/// The interpreter's range, which lies in the code cache: anonymous executable memory.
fn check_interpreter(jvm: &Jvm, pid: u32) -> (u64, u64) {
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
    (istart, iend)
}

/// leaf() and middle() compiled (retried while the JIT works), each building the frame it
/// says; the interpreter among the blobs, spanning `interpreter`.
fn check_compiled(jvm: &mut Jvm, pid: u32, (istart, iend): (u64, u64)) {
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
}

/// What walks of the code cache (about once a second in the profiler) and reads of inlining
/// cost; every nmethod's debug information read once, then reused.
fn time_reads(home: &str, jvm: &mut Jvm) {
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
    let mut blobs = jvm.code_blobs().expect("walk the code cache");
    let t = Instant::now();
    let cold = jvm.read_inlining(&mut blobs, Duration::MAX);
    let cold_time = t.elapsed();
    let t = Instant::now();
    let warm = jvm.read_inlining(&mut blobs, Duration::MAX);
    println!(
        "{home}: read_inlining of {count} blobs: {cold:?} in {cold_time:?}; again: {warm:?} in {:?}",
        t.elapsed()
    );
    assert!(
        cold.decoded > 0 && cold.failed * 10 <= cold.decoded,
        "{cold:?}"
    );
}

/// The code cache against the JVM's own perf map, with snapshots before and after it as the
/// JIT runs on: the same blobs under the same names. The snapshot after.
fn check_against_perf_map(home: &str, jvm: &mut Jvm, pid: u32) -> Vec<CodeBlob> {
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
    after
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
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
#[ignore = "privileged, and needs Temurin's JDK 25, which Debian 12 does not package (cargo xtask test runs it where /usr/lib/jvm/temurin-25-jdk-amd64 is installed)"]
fn jvm_reader_jdk25() {
    require_root();
    require_jdk25();
    let _serial = serial();
    check(JDK25, "25.");
}

#[test]
fn jvm_reader_not_a_jvm() {
    // A C workload maps no libjvm.so.
    let _serial = serial();
    let workload = Workload::spawn(Build::FramePointers, &["spin"]);
    assert!(
        jvm_attach::attach(workload.pid())
            .expect("read its maps")
            .is_none()
    );
}

/// InlineWork compiled once per test binary.
fn inline_classes() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| javac(Some(JDK17), "InlineWork"))
        .clone()
}

/// One line of `jcmd PID Compiler.codelist` (`CodeCache::print_codelist`: `compile_id
/// comp_level state Class.method(signature) [header, code_begin - code_end]`).
#[derive(Debug)]
struct Compiled {
    id: i32,
    level: i32,
    method: String,
    code: u64,
}

fn codelist(home: &str, pid: u32) -> Vec<Compiled> {
    let out = Command::new(format!("{home}/bin/jcmd"))
        .args([&pid.to_string(), "Compiler.codelist"])
        .output()
        .expect("run jcmd");
    assert!(
        out.status.success(),
        "jcmd Compiler.codelist failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (head, addrs) = l.split_once(" [")?;
            let mut f = head.splitn(4, ' ');
            let id = f.next()?.parse().ok()?;
            let level = f.next()?.parse().ok()?;
            let _state = f.next()?;
            let method = f.next()?.to_string();
            let code = addrs.split(", ").nth(1)?.split(' ').next()?;
            let code = u64::from_str_radix(code.trim_start_matches("0x"), 16).ok()?;
            Some(Compiled {
                id,
                level,
                method,
                code,
            })
        })
        .collect()
}

/// `Class.method` of each `Method*` of a chain.
fn names(jvm: &mut Jvm, chain: &[u64]) -> Vec<String> {
    chain
        .iter()
        .map(|&m| {
            jvm.method_name(m)
                .unwrap_or_else(|e| panic!("Method* {m:#x} of a scope names no method: {e}"))
        })
        .collect()
}

/// Every PcDesc of every nmethod among `blobs` whose inlining was read, decoded whole (bcis
/// included), agrees with the compact chains; every chain starts at the nmethod's own method;
/// every `Method*` names a method. The nmethods checked and their PcDescs in inlined code.
fn check_scopes(home: &str, jvm: &mut Jvm, blobs: &[CodeBlob]) -> (usize, usize) {
    let mut methods = HashSet::new();
    let (mut nmethods, mut pc_descs, mut inlined_pcs, mut gone) = (0, 0, 0, 0);
    for b in blobs {
        let BlobKind::Nmethod { method } = b.kind else {
            continue;
        };
        let Ok(pcs) = jvm.pc_scopes(b) else {
            // Freed since the walk.
            gone += 1;
            continue;
        };
        nmethods += 1;
        for pc in &pcs {
            pc_descs += 1;
            let chain: Vec<u64> = pc.scopes.iter().map(|s| s.method).collect();
            assert!(pc.scopes.iter().all(|s| s.bci >= -1), "{b:x?}: {pc:?}");
            if let Some(&first) = chain.first() {
                assert_eq!(first, method, "{b:x?}: {pc:?}");
            }
            inlined_pcs += usize::from(chain.len() > 1);
            methods.extend(chain.iter().copied());
            let lookup = u64::from(pc.pc_offset).checked_sub(1);
            match (&b.inlining, lookup) {
                (Some(i), Some(o)) if b.start + o < b.end => {
                    let want = (!chain.is_empty()).then_some(&chain[..]);
                    assert_eq!(i.at(o), want, "{b:x?} at PcDesc +{:#x}", pc.pc_offset);
                }
                (None, _) => assert!(chain.len() <= 1, "{b:x?} inlined at {pc:?}"),
                _ => {}
            }
        }
    }
    let unnamed: Vec<u64> = methods
        .iter()
        .copied()
        .filter(|&m| jvm.method_name(m).is_err())
        .collect();
    assert!(
        unnamed.is_empty(),
        "Method*s of scopes naming no method: {unnamed:x?}"
    );
    println!(
        "{home}: {nmethods} nmethods decoded whole ({gone} gone), {pc_descs} PcDescs \
         ({inlined_pcs} in inlined code), {} distinct methods named",
        methods.len()
    );
    (nmethods, inlined_pcs)
}

fn check_inlining(home: &str) {
    let (workload, ready) = start_java(
        Some(home),
        &["-XX:CompileCommand=quiet"],
        &inline_classes(),
        "InlineWork",
    );
    assert_eq!(ready, "ready");
    let pid = workload.pid();
    let mut jvm = jvm_attach::attach(pid)
        .expect("attach to the JVM")
        .expect("a JVM maps libjvm.so");
    let (mut blobs, at) = c2_outer(home, &mut jvm, pid);
    let t = Instant::now();
    let read = jvm.read_inlining(&mut blobs, Duration::MAX);
    let cold = t.elapsed();
    println!(
        "{home}: read_inlining of {} blobs, cold: {read:?} in {cold:?}",
        blobs.len()
    );
    assert_eq!(read.deferred, 0);
    assert!(read.decoded > 0 && read.inlined > 0, "{read:?}");

    let outer = &blobs[at];
    let with_inner = check_outer_chains(home, &mut jvm, outer);
    // The profiler's follower of the code cache keeps them from its first read.
    let mut hotspot = HotSpot::attach(pid).expect("the profiler attaches to the JVM");
    let _ = hotspot.refresh(false);
    for (offset, chain) in &with_inner {
        let ret = outer.start + u64::from(*offset);
        assert_eq!(
            hotspot.inlined_at(ret - 1),
            Some(&chain[..]),
            "HotSpot::inlined_at before +{offset:#x}"
        );
    }

    let (nmethods, inlined_pcs) = check_scopes(home, &mut jvm, &blobs);
    assert!(nmethods >= 5 && inlined_pcs > 0);
    let matched = check_compile_ids(home, pid, &blobs);

    // Once read, an nmethod is not read again.
    let mut again = jvm.code_blobs().expect("walk the code cache");
    let t = Instant::now();
    let warm = jvm.read_inlining(&mut again, Duration::MAX);
    println!(
        "{home}: read_inlining again: {warm:?} in {:?}, {matched} compile ids matched jcmd's",
        t.elapsed()
    );
    assert!(warm.cached > 0 && warm.decoded < read.decoded, "{warm:?}");
}

/// The code cache once outer() is compiled by C2 (level 4), as jcmd says and as read
/// (retried while the JIT works), and that nmethod's index in it.
fn c2_outer(home: &str, jvm: &mut Jvm, pid: u32) -> (Vec<CodeBlob>, usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c2: Vec<Compiled> = codelist(home, pid)
            .into_iter()
            .filter(|c| c.level == 4 && c.method == "InlineWork.outer(I)J")
            .collect();
        let blobs = jvm.code_blobs().expect("walk the code cache");
        let found = blobs.iter().position(|b| {
            c2.iter()
                .any(|c| c.code == b.start && Some(c.id) == b.compile_id())
        });
        if let Some(at) = found {
            return (blobs, at);
        }
        assert!(
            Instant::now() < deadline,
            "no C2 nmethod of InlineWork.outer read within 30 s; jcmd lists {c2:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// outer()'s chains: each starts at outer() and is found from a return address at its
/// PcDesc. The PcDescs with the scopes [outer, inner], and their chains.
fn check_outer_chains(home: &str, jvm: &mut Jvm, outer: &CodeBlob) -> Vec<(u32, Vec<u64>)> {
    let BlobKind::Nmethod {
        method: outer_method,
    } = outer.kind
    else {
        panic!("{outer:x?} is not an nmethod");
    };
    let inlining = outer
        .inlining
        .clone()
        .expect("the C2 nmethod of InlineWork.outer inlined nothing");
    println!(
        "{home}: InlineWork.outer compile id {:?} at {:#x}..{:#x}, {} PcDescs kept ({} bytes)",
        outer.compile_id(),
        outer.start,
        outer.end,
        inlining.chains().count(),
        inlining.heap_bytes()
    );
    let mut with_inner = Vec::new();
    for (offset, chain) in inlining.chains() {
        if chain.is_empty() {
            continue;
        }
        assert_eq!(chain[0], outer_method, "a chain of outer() at +{offset:#x}");
        let named = names(jvm, chain);
        println!("  +{offset:#x}: {}", named.join(" -> "));
        if named == ["InlineWork.outer", "InlineWork.inner"] {
            with_inner.push((offset, chain.to_vec()));
        }
        // A return address at that PcDesc, looked up as ret - 1, gets its chain.
        if offset > 0 && outer.start + u64::from(offset) <= outer.end {
            assert_eq!(
                outer.inlined_at(outer.start + u64::from(offset) - 1),
                Some(chain),
                "lookup before +{offset:#x}"
            );
        }
    }
    assert!(
        !with_inner.is_empty(),
        "no PcDesc of InlineWork.outer's C2 nmethod has the scopes [outer, inner]"
    );
    with_inner
}

/// Our nmethods' compile ids against jcmd's list, by code start; how many matched.
fn check_compile_ids(home: &str, pid: u32, blobs: &[CodeBlob]) -> usize {
    let listed: HashMap<u64, i32> = codelist(home, pid).iter().map(|c| (c.code, c.id)).collect();
    let (mut ours, mut matched) = (0, 0);
    for b in blobs {
        let Some(id) = b.compile_id() else { continue };
        ours += 1;
        if let Some(&listed) = listed.get(&b.start) {
            assert_eq!(id, listed, "compile id of {b:x?}");
            matched += 1;
        }
    }
    // The JIT may have freed a few since the walk.
    assert!(
        matched >= 5 && matched * 10 >= ours * 9,
        "only {matched} of our {ours} nmethods listed by jcmd"
    );
    matched
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn jvm_reader_inlining_jdk17() {
    require_root();
    let _serial = serial();
    assert!(
        Path::new(JDK17).exists(),
        "{JDK17} not found: `cargo xtask test` installs openjdk-17-jdk-headless when run as root"
    );
    check_inlining(JDK17);
}

#[test]
#[ignore = "privileged, and needs Temurin's JDK 25, which Debian 12 does not package (cargo xtask test runs it where /usr/lib/jvm/temurin-25-jdk-amd64 is installed)"]
fn jvm_reader_inlining_jdk25() {
    require_root();
    require_jdk25();
    let _serial = serial();
    check_inlining(JDK25);
}

/// This thread's CPU time.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// What reading inlining costs on a large code cache: javac compiling in a loop under
/// `-Xcomp` (every method compiled at its first call). A measurement, printed (the one check:
/// at most 1 % of the nmethods fail to decode); as root: `cargo test --release -p profiler
/// --test jvm_reader -- --ignored --nocapture measurement_`.
#[test]
#[ignore = "measurement, not a check: prints what reading inlining costs (run it with --ignored; cargo xtask test runs it with PROFILER_MEASURE=1)"]
fn measurement_inlining_cost_on_a_large_code_cache() {
    require_root();
    let _serial = serial();
    let classes = javac(Some(JDK17), "JavacLoop");
    let out = scratch_dir().join(format!("javac-loop-{}", std::process::id()));
    std::fs::create_dir_all(&out).expect("create javac's output directory");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/InlineWork.java");
    let (workload, ready) = start_java(
        Some(JDK17),
        &[
            "-Xcomp",
            "-XX:CompileCommand=quiet",
            &format!("-Dsource={}", source.display()),
            &format!("-Dout={}", out.display()),
        ],
        &classes,
        "JavacLoop",
    );
    assert_eq!(ready, "ready");
    let pid = workload.pid();
    let mut jvm = jvm_attach::attach(pid).expect("attach").expect("a JVM");
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut count = 0;
    while Instant::now() < deadline {
        count = jvm.code_blobs().expect("walk the code cache").len();
        if count >= 8000 {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    println!("{count} blobs");
    measure_reads(&mut jvm);
    measure_budgeted_reads(pid);
    let _ = std::fs::remove_dir_all(&out);
}

/// Walks of the code cache and reads of every nmethod's inlining, cold and warm: wall time
/// (which says little on a busy machine) and this thread's CPU time.
fn measure_reads(jvm: &mut Jvm) {
    let runs = 10;
    let (t, c) = (Instant::now(), cpu_time());
    for _ in 0..runs {
        jvm.code_blobs().expect("walk the code cache");
    }
    println!(
        "code_blobs(): {:?} per call, {:?} of CPU",
        t.elapsed() / runs,
        (cpu_time() - c) / runs
    );

    let mut blobs = jvm.code_blobs().expect("walk the code cache");
    let nmethods = blobs
        .iter()
        .filter(|b| matches!(b.kind, BlobKind::Nmethod { .. }))
        .count();
    let (t, c) = (Instant::now(), cpu_time());
    let cold = jvm.read_inlining(&mut blobs, Duration::MAX);
    println!(
        "read_inlining, cold, {} blobs ({nmethods} nmethods): {cold:?} in {:?}, {:?} of CPU",
        blobs.len(),
        t.elapsed(),
        cpu_time() - c
    );
    let kept: usize = blobs
        .iter()
        .filter_map(|b| b.inlining.as_ref())
        .map(|i| i.heap_bytes())
        .sum();
    println!("kept: {kept} bytes");
    assert!(
        cold.failed * 100 <= cold.decoded,
        "more than 1 % of the nmethods did not decode: {cold:?}"
    );
    let (nmethods, _) = check_scopes(JDK17, jvm, &blobs);
    assert!(nmethods > 1000, "{nmethods} nmethods");

    let (t, c) = (Instant::now(), cpu_time());
    for _ in 0..runs {
        let mut blobs = jvm.code_blobs().expect("walk the code cache");
        jvm.read_inlining(&mut blobs, Duration::MAX);
    }
    println!(
        "code_blobs() + read_inlining, warm: {:?} per call, {:?} of CPU",
        t.elapsed() / runs,
        (cpu_time() - c) / runs
    );
    let mut blobs = jvm.code_blobs().expect("walk the code cache");
    let (t, c) = (Instant::now(), cpu_time());
    let warm = jvm.read_inlining(&mut blobs, Duration::MAX);
    println!(
        "read_inlining alone, warm: {warm:?} in {:?}, {:?} of CPU",
        t.elapsed(),
        cpu_time() - c
    );
}

/// Reads as the profiler makes them (hotspot.rs, `INLINING_BUDGET`): a budget per read, a
/// fresh reader, until nothing is left.
fn measure_budgeted_reads(pid: u32) {
    let mut fresh = jvm_attach::attach(pid).expect("attach").expect("a JVM");
    let mut calls = 0;
    let (t, c) = (Instant::now(), cpu_time());
    let mut inlining_cpu = Duration::ZERO;
    loop {
        let mut blobs = fresh.code_blobs().expect("walk the code cache");
        let (s, sc) = (Instant::now(), cpu_time());
        let read = fresh.read_inlining(&mut blobs, Duration::from_millis(20));
        let cpu = cpu_time() - sc;
        inlining_cpu += cpu;
        calls += 1;
        println!(
            "  budget 20 ms: {read:?} in {:?}, {cpu:?} of CPU",
            s.elapsed()
        );
        if read.deferred == 0 || calls == 200 {
            break;
        }
    }
    println!(
        "budget 20 ms: {calls} reads, {:?} in all, {:?} of CPU (walks included), \
         {inlining_cpu:?} of it reading inlining",
        t.elapsed(),
        cpu_time() - c
    );
}
