//! Symbolization against programs the test builds itself: a PIE executable, a shared library
//! (load bias), a stripped library (`libfoo.so+0x…`), C++ (demangling), a JIT region with a
//! perf map, libc's `start_thread` from its detached debug file — and all of it still named
//! after the process has exited. No root needed.

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use object::{Object as _, ObjectSymbol as _};
use profiler_core::{
    perfmap::PerfMap,
    procmap::ProcessMaps,
    symbolize::{FileTable, Stats, Symbolizer, UserStacks},
};

const LIB: &str = r#"
__attribute__((noinline)) int exported_fn(int x) { return x * 3 + 1; }
"#;

const STRIPPED: &str = r#"
static volatile int sink;
__attribute__((noinline)) static int secret_fn(int x) { sink += x; return sink; }
void *secret_address(void) { return (void *)secret_fn; }
"#;

const CPP: &str = r#"
namespace ns { struct Widget { static int spin(int n); }; }
__attribute__((noinline)) int ns::Widget::spin(int n) { return n * 7; }
extern "C" void *cpp_address(void) { return (void *)&ns::Widget::spin; }
"#;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
int exported_fn(int);
void *secret_address(void);
void *cpp_address(void);
__attribute__((noinline)) int main_level_fn(int x) { return exported_fn(x) + 1; }
int main(void) {
    // An anonymous executable region, announced in a perf map like a JIT would.
    unsigned char *jit = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (jit == MAP_FAILED) return 1;
    memset(jit, 0xc3, 4096);
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "%lx 100 jitted_handler\n", (unsigned long)jit + 0x200);
    fclose(f);
    printf("main_level_fn %lx\nexported_fn %lx\nsecret_fn %lx\nspin %lx\njit %lx\n",
           (unsigned long)main_level_fn, (unsigned long)exported_fn,
           (unsigned long)secret_address(), (unsigned long)cpp_address(),
           (unsigned long)jit + 0x210);
    printf("ready\n");
    fflush(stdout);
    pause();
    return 0;
}
"#;

fn run(cmd: &mut Command) {
    let status = cmd.status().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed");
}

/// Builds the program and its libraries into a fresh directory, once per test run (tests
/// run in parallel: a second build would rewrite the program while the first test runs it).
fn build() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_once).clone()
}

fn build_once() -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("symbolize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in [
        ("lib.c", LIB),
        ("stripped.c", STRIPPED),
        ("cpp.cpp", CPP),
        ("prog.c", PROGRAM),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    run(Command::new("gcc").current_dir(&dir).args([
        "-O1",
        "-g",
        "-fPIC",
        "-shared",
        "-o",
        "libsym.so",
        "lib.c",
    ]));
    run(Command::new("gcc").current_dir(&dir).args([
        "-O1",
        "-fPIC",
        "-shared",
        "-s",
        "-o",
        "libstripped.so",
        "stripped.c",
    ]));
    run(Command::new("g++").current_dir(&dir).args([
        "-O1",
        "-g",
        "-fPIC",
        "-shared",
        "-o",
        "libcppsym.so",
        "cpp.cpp",
    ]));
    run(Command::new("gcc").current_dir(&dir).args([
        "-O1",
        "-g",
        "-fPIE",
        "-pie",
        "-o",
        "prog",
        "prog.c",
        "-L.",
        "-lsym",
        "-lstripped",
        "-lcppsym",
        "-Wl,-rpath,$ORIGIN",
    ]));
    dir
}

/// Starts the program and reads the addresses it prints.
fn start(dir: &Path) -> (Child, HashMap<String, u64>) {
    let mut child = Command::new(dir.join("prog"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the test program");
    let mut addrs = HashMap::new();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    for line in stdout.lines() {
        let line = line.unwrap();
        if line == "ready" {
            break;
        }
        let (name, hex) = line.split_once(' ').unwrap();
        addrs.insert(name.to_string(), u64::from_str_radix(hex, 16).unwrap());
    }
    (child, addrs)
}

/// Name of a single address (a leaf frame: looked up as is).
fn name_of(maps: &ProcessMaps, perf_map: &PerfMap, addr: u64) -> String {
    let stack = [addr];
    let names = Symbolizer::new().user_stacks(maps, perf_map, [(1u64, &stack[..])]);
    names[&1].last().expect("one frame").to_string()
}

/// `start_thread`'s address in this process, from libc's detached debug file, if installed.
fn start_thread_address(pid: u32) -> Option<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let line = maps
        .lines()
        .find(|l| l.ends_with("/libc.so.6") && l.split_whitespace().nth(2) == Some("00000000"))?;
    let base = u64::from_str_radix(line.split('-').next()?, 16).ok()?;
    let libc = std::fs::read(line.split_whitespace().last()?).ok()?;
    let build_id = object::File::parse(&*libc).ok()?.build_id().ok()??;
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    let debug = PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &hex[..2],
        &hex[2..]
    ));
    let data = std::fs::read(debug).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let sym = file.symbols().find(|s| s.name() == Ok("start_thread"))?;
    // libc's first PT_LOAD has vaddr 0: the load bias is the base of its first mapping.
    Some(base + sym.address() + 4)
}

#[test]
fn names_come_from_the_right_files_with_the_right_bias_even_after_exit() {
    let dir = build();
    let (mut child, addrs) = start(&dir);
    let pid = child.id();
    let mut maps = ProcessMaps::new(pid);
    maps.refresh().expect("read the test program's maps");
    let start_thread = start_thread_address(pid);
    let perf_map = PerfMap::load(pid);
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));

    // The process is gone before anything is symbolized.
    child.kill().unwrap();
    child.wait().unwrap();
    let name_of = |addr| name_of(&maps, &perf_map, addr);

    assert_eq!(
        name_of(addrs["main_level_fn"] + 1),
        "main_level_fn",
        "PIE executable"
    );
    assert_eq!(
        name_of(addrs["exported_fn"] + 1),
        "exported_fn",
        "shared library bias"
    );
    let spin = name_of(addrs["spin"] + 1);
    assert!(
        spin.starts_with("ns::Widget::spin"),
        "C++ demangling: {spin}"
    );
    let secret = name_of(addrs["secret_fn"]);
    assert!(
        secret.starts_with("libstripped.so+0x"),
        "no symbol, known mapping: {secret}"
    );
    assert_eq!(name_of(addrs["jit"]), "jitted_handler", "perf map");
    match start_thread {
        Some(addr) => assert_eq!(name_of(addr), "start_thread", "libc's detached debug file"),
        None => eprintln!("skipping the start_thread check: libc6-dbg is not installed"),
    }
}

#[test]
fn a_file_mapped_by_many_processes_is_looked_up_once() {
    let dir = build();
    let mut running: Vec<(Child, HashMap<String, u64>, ProcessMaps, PerfMap)> = (0..3)
        .map(|_| {
            let (child, addrs) = start(&dir);
            let mut maps = ProcessMaps::new(child.id());
            maps.refresh().expect("read the test program's maps");
            let perf_map = PerfMap::load(child.id());
            let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", child.id()));
            (child, addrs, maps, perf_map)
        })
        .collect();
    for (child, ..) in &mut running {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    // Leaf first: exported_fn called from main_level_fn, under a frame of the stripped
    // library (return addresses point after the call, hence + 1).
    let stacks: Vec<[u64; 3]> = running
        .iter()
        .map(|(_, addrs, ..)| {
            [
                addrs["exported_fn"],
                addrs["main_level_fn"] + 1,
                addrs["secret_fn"] + 1,
            ]
        })
        .collect();
    let processes: Vec<UserStacks<'_>> = running
        .iter()
        .zip(&stacks)
        .enumerate()
        .map(|(i, ((_, _, maps, perf_map), stack))| UserStacks {
            fallback: None,
            cut_at_unmapped: false,
            maps,
            perf_map,
            stacks: vec![(i as u64, &stack[..])],
        })
        .collect();
    let mut symbolizer = Symbolizer::new();
    let mut files = FileTable::default();
    let named = symbolizer.user_stacks_in_files(&processes, &mut files);
    for i in 0..running.len() as u64 {
        let (frames, _) = &named[&i];
        let frames: Vec<&str> = frames.iter().map(|f| &**f).collect();
        assert_eq!(frames.len(), 3, "process {i}: {frames:?}");
        assert!(frames[0].starts_with("libstripped.so+0x"), "{frames:?}");
        assert_eq!(frames[1..], ["main_level_fn", "exported_fn"], "process {i}");
    }
    // The processes map the same three files at different addresses (ASLR) but the same
    // offsets: each file is looked up once, each offset once.
    assert_eq!(
        symbolizer.stats(),
        Stats {
            files: 3,
            offsets: 3
        }
    );
}

/// What naming costs per distinct file and per process, on the files a C build maps: one
/// process each of cc1, as, ld and make (their files cold: each distinct file once), then
/// 39 more cc1 and as processes (the same files again). Not an assertion, a measurement:
/// `cargo test --release -p profiler --test symbolize -- --ignored --nocapture measurement_`.
#[test]
#[ignore = "measurement, not a check: prints what naming costs (run it with --ignored; cargo xtask test runs it with PROFILER_MEASURE=1)"]
fn measurement_naming_cost_per_file_and_per_process() {
    let cc1 = String::from_utf8(
        Command::new("gcc")
            .arg("-print-prog-name=cc1")
            .output()
            .expect("run gcc")
            .stdout,
    )
    .unwrap();
    // Each blocks reading its stdin, every library mapped.
    let commands: [&[&str]; 4] = [
        &[cc1.trim(), "-quiet", "-o", "/dev/null"],
        &["as", "-o", "/dev/null"],
        &["ld", "-T", "/dev/stdin", "-o", "/dev/null"],
        &["make", "-f", "-"],
    ];
    let spawn = |argv: &[&str]| {
        Command::new(argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {argv:?}: {e}"))
    };
    let mut children: Vec<Child> = commands.iter().map(|argv| spawn(argv)).collect();
    for _ in 0..39 {
        children.push(spawn(commands[0]));
        children.push(spawn(commands[1]));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let maps: Vec<ProcessMaps> = children
        .iter()
        .map(|c| {
            let mut maps = ProcessMaps::new(c.id());
            maps.refresh().expect("read maps");
            maps
        })
        .collect();
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    for per_file in [30, 300] {
        measure(&commands, &maps, per_file);
    }
}

/// Names `per_file` offsets spread over each file's executable mappings (the same in every
/// process), in stacks of 10 frames, with a cold symbolizer: one process of each command,
/// then all of them.
fn measure(commands: &[&[&str]], maps: &[ProcessMaps], per_file: u64) {
    let stacks: Vec<Vec<u64>> = maps
        .iter()
        .map(|m| {
            m.mappings()
                .iter()
                .filter(|m| matches!(m.kind, profiler_core::procmap::MappingKind::File { .. }))
                .flat_map(|m| {
                    let step = ((m.end - m.start) / per_file).max(1);
                    (0..per_file)
                        .map(move |i| m.start + i * step)
                        .filter(|&a| a < m.end)
                })
                .collect()
        })
        .collect();
    let no_jit = PerfMap::default();
    let time = |range: std::ops::Range<usize>| {
        let processes: Vec<UserStacks<'_>> = range
            .map(|i| UserStacks {
                fallback: None,
                cut_at_unmapped: false,
                maps: &maps[i],
                perf_map: &no_jit,
                stacks: stacks[i]
                    .chunks(10)
                    .enumerate()
                    .map(|(j, s)| ((i << 20 | j) as u64, s))
                    .collect(),
            })
            .collect();
        let mut symbolizer = Symbolizer::new();
        let started = thread_cpu_secs();
        let named = symbolizer.user_stacks_in_files(&processes, &mut FileTable::default());
        let secs = thread_cpu_secs() - started;
        let frames = named.values().map(|(f, _)| f.len()).sum::<usize>();
        (secs, symbolizer.stats(), frames)
    };
    eprintln!("{per_file} offsets per file, stacks of 10 frames (CPU time):");
    for (i, argv) in commands.iter().enumerate() {
        let (secs, stats, frames) = time(i..i + 1);
        eprintln!(
            "{:>6}: {:2} files, {:4} offsets, {frames:5} frames: {:6.1} ms, cold",
            Path::new(argv[0]).file_name().unwrap().to_string_lossy(),
            stats.files,
            stats.offsets,
            secs * 1e3
        );
    }
    let (distinct, stats, frames) = time(0..4);
    eprintln!(
        "4 processes, {} distinct files, {frames} frames: {:.1} ms ({:.1} ms per file)",
        stats.files,
        distinct * 1e3,
        distinct * 1e3 / stats.files as f64
    );
    let (many, stats, frames) = time(0..maps.len());
    eprintln!(
        "{} processes, the same {} files, {frames} frames: {:.1} ms ({:.0} µs per process beyond \
         the first 4)",
        maps.len(),
        stats.files,
        many * 1e3,
        (many - distinct) * 1e6 / (maps.len() - 4) as f64
    );
}

/// This thread's CPU time: the machine is shared, wall time says more about the neighbours.
fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}
