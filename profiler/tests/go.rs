//! End-to-end, privileged: a Go program. Go's linker writes `.debug_frame`, no `.eh_frame`,
//! and Go assembly may use BP as a general register (crypto/sha256's block function does):
//! frame pointers stop there, `.debug_frame` rows get through. The fixture
//! (`tests/fixtures/gohot`) spins in such an assembly function and sleeps in a raw system
//! call on another goroutine; both stacks must run from the goroutine's root,
//! `runtime.goexit`, to the leaf, and the runtime's scheduler stacks from where they begin.

mod common;

use std::{
    io::{BufRead as _, BufReader},
    path::PathBuf,
    process::{Command, Stdio},
};

use common::*;

const SECS: u64 = 4;
const WINDOW_US: f64 = SECS as f64 * 1e6;

/// Where Go stacks begin: a goroutine's at `goexit`; a thread's scheduler (g0) stack at
/// `mstart` when the thread started there, or where a goroutine switched to it: `mcall` (to
/// park), `morestack` (to grow its stack, or to be preempted), `systemstack`. Go's own
/// traceback stops at the same functions.
const ROOTS: [&str; 5] = [
    "runtime.goexit",
    "runtime.mstart",
    "runtime.mcall",
    "runtime.morestack",
    "runtime.systemstack",
];

/// The fixture, built offline (see `common::build_go`).
fn build_gohot() -> PathBuf {
    build_go("gohot", "gohot", &[])
}

/// The user frames of a line, root first: what lies between the thread and the kernel frames.
fn user_frames(line: &Line) -> Vec<&str> {
    line.frames
        .iter()
        .skip(2)
        .map(String::as_str)
        .filter(|f| !f.ends_with("_[k]") && !f.starts_with('['))
        .collect()
}

fn dump(lines: &[&Line]) -> String {
    lines
        .iter()
        .map(|l| format!("{} {}", l.frames.join(";"), l.count))
        .collect::<Vec<_>>()
        .join("\n")
}

fn total(lines: &[&Line]) -> u64 {
    lines.iter().map(|l| l.count).sum()
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn go_stacks_reach_the_goroutine_root_through_assembly_that_clobbers_bp() {
    require_root();
    let _serial = serial();
    let gohot = start_gohot();
    let (_, out) = capture(&gohot, "go", SECS, &["--mode", "wall"]);
    let lines = read_folded(&out.folded);
    assert!(lines.iter().all(|l| l.frames[0] == "gohot"));
    check_on_cpu(&lines);
    check_asleep(&lines);
}

/// gohot started, once it said it is ready.
fn start_gohot() -> Workload {
    let binary = build_gohot();
    let mut child = Command::new(&binary)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start gohot");
    let stdout = child.stdout.take().expect("piped stdout");
    let gohot = Workload { child };
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read gohot's ready line");
    assert_eq!(line.trim(), "ready");
    gohot
}

/// Whether a line's user frames start at one of Go's stack roots.
fn rooted(l: &&Line) -> bool {
    user_frames(l).first().is_some_and(|f| ROOTS.contains(f))
}

/// On the CPU: the spinning goroutine, in the assembly function, under its whole chain.
fn check_on_cpu(lines: &[Line]) {
    // On-CPU code: not the CPU time that has no stack (`[on-cpu: switching in]`, charged from
    // a wakeup before the thread runs, `[on-cpu: between samples]`, `[profiler overhead]`),
    // which a loaded machine makes large for Go's sysmon thread.
    let on: Vec<&Line> = lines
        .iter()
        .filter(|l| l.state().is_none() && !l.frames.get(2).is_some_and(|f| f.starts_with('[')))
        .collect();
    let spin_chain = ["runtime.goexit", "main.worker", "main.hot", "main.spin"];
    let in_spin: Vec<&Line> = on
        .iter()
        .copied()
        .filter(|l| user_frames(l).last() == Some(&"main.spin"))
        .collect();
    let whole: Vec<&Line> = in_spin
        .iter()
        .copied()
        .filter(|l| user_frames(l) == spin_chain)
        .collect();
    assert!(
        total(&whole) as f64 >= 0.95 * total(&in_spin) as f64,
        "{} of {} µs in main.spin under exactly {spin_chain:?}:\n{}",
        total(&whole),
        total(&in_spin),
        dump(&in_spin)
    );
    assert!(
        total(&whole) as f64 > 0.5 * WINDOW_US,
        "only {} µs on the CPU in main.spin:\n{}",
        total(&whole),
        dump(&on)
    );
    let on_rooted: Vec<&Line> = on.iter().copied().filter(rooted).collect();
    assert!(
        total(&on_rooted) as f64 >= 0.95 * total(&on) as f64,
        "{} of {} µs on the CPU in stacks rooted at {ROOTS:?}:\n{}",
        total(&on_rooted),
        total(&on),
        dump(&on)
    );
}

/// Asleep: the goroutine blocked in nanosleep(2) keeps its thread, under its chain; every
/// other sleep is a runtime thread's scheduler stack.
fn check_asleep(lines: &[Line]) {
    let asleep: Vec<&Line> = lines
        .iter()
        .filter(|l| l.state() == Some("sleep"))
        .collect();
    let sleeper = ["runtime.goexit", "main.sleeper", "syscall.Nanosleep"];
    let sleeping: Vec<&Line> = asleep
        .iter()
        .copied()
        .filter(|l| user_frames(l).starts_with(&sleeper))
        .collect();
    assert!(
        total(&sleeping) as f64 > 0.5 * WINDOW_US,
        "only {} µs asleep under {sleeper:?}:\n{}",
        total(&sleeping),
        dump(&asleep)
    );
    let mentions_sleeper: Vec<&Line> = asleep
        .iter()
        .copied()
        .filter(|l| l.has("main.sleeper"))
        .collect();
    assert!(
        total(&sleeping) as f64 >= 0.95 * total(&mentions_sleeper) as f64,
        "{} of {} µs of main.sleeper's sleep under exactly {sleeper:?} from the root:\n{}",
        total(&sleeping),
        total(&mentions_sleeper),
        dump(&mentions_sleeper)
    );
    let asleep_rooted: Vec<&Line> = asleep.iter().copied().filter(rooted).collect();
    assert!(
        total(&asleep_rooted) as f64 >= 0.95 * total(&asleep) as f64,
        "{} of {} µs asleep in stacks rooted at {ROOTS:?}:\n{}",
        total(&asleep_rooted),
        total(&asleep),
        dump(&asleep)
    );
}
