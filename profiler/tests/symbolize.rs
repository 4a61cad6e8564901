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
use profiler_core::{perfmap::PerfMap, procmap::ProcessMaps, symbolize::Symbolizer};

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

/// Builds the program and its libraries into a fresh directory.
fn build() -> PathBuf {
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
fn name_of(symbolizer: &Symbolizer, addr: u64) -> String {
    let stack = [addr];
    let names = symbolizer.user_stacks([(1u64, &stack[..])]);
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
    let symbolizer = Symbolizer::new(maps, perf_map);

    assert_eq!(
        name_of(&symbolizer, addrs["main_level_fn"] + 1),
        "main_level_fn",
        "PIE executable"
    );
    assert_eq!(
        name_of(&symbolizer, addrs["exported_fn"] + 1),
        "exported_fn",
        "shared library bias"
    );
    let spin = name_of(&symbolizer, addrs["spin"] + 1);
    assert!(
        spin.starts_with("ns::Widget::spin"),
        "C++ demangling: {spin}"
    );
    let secret = name_of(&symbolizer, addrs["secret_fn"]);
    assert!(
        secret.starts_with("libstripped.so+0x"),
        "no symbol, known mapping: {secret}"
    );
    assert_eq!(
        name_of(&symbolizer, addrs["jit"]),
        "jitted_handler",
        "perf map"
    );
    match start_thread {
        Some(addr) => assert_eq!(
            name_of(&symbolizer, addr),
            "start_thread",
            "libc's detached debug file"
        ),
        None => eprintln!("skipping the start_thread check: libc6-dbg is not installed"),
    }
}
