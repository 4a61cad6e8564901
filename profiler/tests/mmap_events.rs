//! Privileged: the kernel's side-band records (`profiler::process::mmap_events`) of processes that
//! live a few milliseconds — the ones a 200 ms `/proc/PID/maps` tick never sees — and what
//! reading them costs on a machine that execs a thousand processes a second.

mod common;

use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::{require_root, scratch_dir, serial};
use profiler::process::mmap_events::{Config, Event, Mmap2, MmapEvents};

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Root: system-wide events need CAP_PERFMON or CAP_SYS_ADMIN whatever
/// kernel.perf_event_paranoid says (2 here; Debian's 3 refuses only the unprivileged). A
/// refusal fails `MmapEvents::open` with `Error::Privilege`, which names the setting.
fn require_perf() {
    require_root();
}

/// Compiles a C program that returns from `main` at once (dynamically linked: ld.so maps
/// libc into it before it exits).
fn quick_exit_binary() -> PathBuf {
    let dir = scratch_dir().join(format!("mmap-events-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    let source = dir.join("quickexit.c");
    std::fs::write(&source, "int main(void) { return 0; }\n").expect("write the C source");
    let out = dir.join("quickexit");
    let status = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed on {}", source.display());
    out
}

/// Everything read until `done` says so or `timeout` passes.
fn collect_until(
    events: &mut MmapEvents,
    timeout: Duration,
    mut done: impl FnMut(&[Event]) -> bool,
) -> Vec<Event> {
    let deadline = Instant::now() + timeout;
    let mut all = Vec::new();
    while Instant::now() < deadline {
        events
            .wait(Duration::from_millis(20))
            .expect("poll the perf fds");
        events.read(&mut |e| all.push(e));
        if done(&all) {
            break;
        }
    }
    all
}

fn is_exit_of(e: &Event, pid: u32) -> bool {
    matches!(e, Event::Exit(t) if t.pid == pid && t.tid == pid)
}

/// The executable mappings of the program `exe` (its file: inode and device) and of libc
/// among the events of process `pid` (`dump`: them all, for the message).
fn exec_mappings(
    mine: &[&Event],
    pid: u32,
    exe: &Path,
    dump: &dyn Fn() -> String,
) -> (Mmap2, Mmap2) {
    let mapping = |what: &str, keep: &dyn Fn(&Mmap2) -> bool| -> Mmap2 {
        mine.iter()
            .find_map(|e| match e {
                Event::Mmap2(m) if m.is_exec() && keep(m) => Some(m.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no executable mapping of {what} in {pid}: {}", dump()))
    };
    let meta = std::fs::metadata(exe).expect("stat the program");
    let exe_map = mapping("the executable", &|m| m.filename == exe);
    assert_eq!(exe_map.ino, meta.ino(), "the executable's inode");
    assert_eq!(
        (exe_map.maj, exe_map.min),
        (libc::major(meta.dev()), libc::minor(meta.dev())),
        "the executable's device"
    );
    assert!(exe_map.len > 0 && exe_map.addr > 0);
    let libc_map = mapping("libc", &|m| {
        m.filename.to_string_lossy().contains("libc.so")
    });
    (exe_map, libc_map)
}

/// The times, named, in order on CLOCK_MONOTONIC (`dump`: the events, for the message).
fn assert_in_order(times: &[(&str, u64)], dump: &dyn Fn() -> String) {
    for pair in times.windows(2) {
        assert!(
            pair[0].1 <= pair[1].1,
            "{} ({}) after {} ({}): times on CLOCK_MONOTONIC out of order\n{}",
            pair[0].0,
            pair[0].1,
            pair[1].0,
            pair[1].1,
            dump()
        );
    }
}

/// Runs `program` once and checks that its fork, exec name, executable mapping, libc mapping
/// and exit all arrived, with times in that order and inside the run.
fn assert_whole_life_seen(events: &mut MmapEvents, program: &Path) {
    let exe = std::fs::canonicalize(program).expect("canonicalize the program");
    let name: String = exe
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .chars()
        .take(15)
        .collect();

    let before = monotonic_ns();
    let mut child = Command::new(program).spawn().expect("spawn the program");
    let pid = child.id();
    let status = child.wait().expect("wait for the program");
    let after = monotonic_ns();
    assert!(status.success(), "{} failed: {status}", program.display());

    let all = collect_until(events, Duration::from_secs(5), |all| {
        all.iter().any(|e| is_exit_of(e, pid))
    });
    let mine: Vec<&Event> = all.iter().filter(|e| e.pid() == Some(pid)).collect();
    let dump = || format!("{mine:#?}");

    let find = |what: &str, pick: &dyn Fn(&Event) -> bool| -> &Event {
        mine.iter()
            .copied()
            .find(|e| pick(e))
            .unwrap_or_else(|| panic!("no {what} of {pid}: {}", dump()))
    };
    let Event::Fork(fork) = find("fork", &|e| matches!(e, Event::Fork(t) if t.tid == pid)) else {
        unreachable!()
    };
    assert_eq!(
        fork.ppid,
        std::process::id(),
        "forked by the test: {}",
        dump()
    );
    let Event::Comm(comm) = find(
        "exec comm",
        &|e| matches!(e, Event::Comm(c) if c.exec && c.tid == pid),
    ) else {
        unreachable!()
    };
    assert_eq!(comm.name, name);
    let (exe_map, libc_map) = exec_mappings(&mine, pid, &exe, &dump);
    let Event::Exit(exit) = find("exit", &|e| matches!(e, Event::Exit(t) if t.tid == pid)) else {
        unreachable!()
    };
    assert_in_order(
        &[
            ("start", before),
            ("fork", fork.time_ns),
            ("exec comm", comm.time_ns),
            ("executable mmap", exe_map.time_ns),
            ("libc mmap", libc_map.time_ns),
            ("exit", exit.time_ns),
            ("wait returned", after),
        ],
        &dump,
    );
    eprintln!(
        "{}: pid {pid} lived {:.2} ms from exec to exit; {} events of it read, \
         libc at {:#x} from {}",
        program.display(),
        (exit.time_ns - comm.time_ns) as f64 / 1e6,
        mine.len(),
        libc_map.addr,
        libc_map.filename.display(),
    );
}

#[test]
#[ignore = "privileged: opens system-wide perf events as root (cargo xtask test runs it)"]
fn a_process_that_lives_milliseconds_is_seen_whole() {
    require_perf();
    let _serial = serial();
    let quick = quick_exit_binary();
    let mut events = MmapEvents::open().expect("open the side-band events");
    assert!(events.fds().count() >= 1);
    assert_whole_life_seen(&mut events, Path::new("/bin/true"));
    assert_whole_life_seen(&mut events, &quick);
    let stats = events.stats();
    eprintln!("{stats:?}");
    assert_eq!(stats.malformed, 0, "{stats:?}");
    assert_eq!(stats.lost, 0, "{stats:?}");
    let cpus = events.fds().count();
    assert_eq!(
        perf_fds_and_mappings(),
        (cpus, cpus),
        "one fd and ring per CPU"
    );
    drop(events);
    assert_eq!(
        perf_fds_and_mappings(),
        (0, 0),
        "dropped: all closed and unmapped"
    );
}

/// This process's perf event fds and mapped perf rings.
fn perf_fds_and_mappings() -> (usize, usize) {
    let fds = std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.as_os_str() == "anon_inode:[perf_event]")
        .count();
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    let rings = maps
        .lines()
        .filter(|l| l.ends_with("anon_inode:[perf_event]"))
        .count();
    (fds, rings)
}

#[test]
#[ignore = "privileged: opens system-wide perf events as root (cargo xtask test runs it)"]
fn a_full_ring_reports_what_it_dropped_and_recovers() {
    require_perf();
    let _serial = serial();
    // One data page per CPU (4 KiB, ~6 short-lived processes' records) and no reading while
    // 40 processes run: the kernel drops records and says how many in PERF_RECORD_LOST,
    // which it writes once there is room again.
    let mut events = MmapEvents::open_with(Config {
        data_pages_log2: 0,
        wakeup_bytes: 1,
    })
    .expect("open the side-band events");
    for _ in 0..40 {
        let status = Command::new("/bin/true").status().expect("run /bin/true");
        assert!(status.success());
    }
    events.read(&mut |_| {});
    // The kernel writes a ring's PERF_RECORD_LOST before the next record that ring takes:
    // the burst may have run on one CPU alone (the other busy), so one process runs on
    // every CPU after it.
    let pids = run_true_on_every_cpu();
    let all = collect_until(&mut events, Duration::from_secs(5), |all| {
        pids.iter()
            .all(|&pid| all.iter().any(|e| is_exit_of(e, pid)))
    });
    let pid = pids[0];
    let stats = events.stats();
    eprintln!("{stats:?}");
    assert!(stats.lost > 0, "nothing lost: {stats:?}");
    assert!(
        all.iter()
            .any(|e| matches!(e, Event::Lost { count, .. } if *count > 0)),
        "no PERF_RECORD_LOST read after the burst"
    );
    assert!(
        all.iter()
            .any(|e| matches!(e, Event::Comm(c) if c.pid == pid && c.exec)),
        "after the loss, a new process is read again"
    );
    assert_eq!(stats.malformed, 0, "{stats:?}");
}

/// Runs `/bin/true` pinned to each CPU this process may use, one after the other, and
/// returns their pids (at least one).
fn run_true_on_every_cpu() -> Vec<u32> {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: an all-zero cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a live cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&allowed), &mut allowed) };
    assert_eq!(
        rc,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &allowed) })
        .collect();
    assert!(!cpus.is_empty(), "no CPU in this process's affinity mask");
    cpus.into_iter()
        .map(|cpu| {
            let mut command = Command::new("/bin/true");
            // SAFETY: between fork and exec only sched_setaffinity runs (async-signal-safe).
            unsafe {
                command.pre_exec(move || {
                    let mut one: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut one);
                    match libc::sched_setaffinity(0, std::mem::size_of_val(&one), &one) {
                        0 => Ok(()),
                        _ => Err(std::io::Error::last_os_error()),
                    }
                })
            };
            let mut child = command.spawn().expect("spawn /bin/true pinned to a CPU");
            let pid = child.id();
            assert!(child.wait().expect("wait for /bin/true").success());
            pid
        })
        .collect()
}

/// A loop that runs `/bin/true` `rate` times a second for `seconds` (fork, exec, wait, then
/// sleeps to the next slot) and prints how many it ran.
fn exec_loop_binary() -> PathBuf {
    let dir = scratch_dir().join(format!("mmap-events-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    let source = dir.join("execloop.c");
    std::fs::write(
        &source,
        r#"#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
int main(int argc, char **argv) {
    long rate = atol(argv[1]), total = (long)(rate * atof(argv[2])), done = 0;
    long period = 1000000000L / rate;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (long i = 0; i < total; i++) {
        pid_t pid = fork();
        if (pid == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
        if (pid > 0 && waitpid(pid, 0, 0) == pid) done++;
        next.tv_nsec += period;
        while (next.tv_nsec >= 1000000000L) { next.tv_nsec -= 1000000000L; next.tv_sec++; }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, 0);
    }
    printf("%ld\n", done);
    return 0;
}
"#,
    )
    .expect("write the C source");
    let out = dir.join("execloop");
    let status = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed on {}", source.display());
    out
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec; the calling thread's CPU clock always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// How the reader thread waits between reads.
#[derive(Clone, Copy, Debug)]
enum Reading {
    /// Woken by the kernel at every record, reads at once.
    Eager,
    /// Woken the same way, but reads at most once per `Duration`.
    Batched(Duration),
    /// Does not poll: reads on a timer, like the capture's 200 ms tick.
    Tick(Duration),
}

struct Run {
    execs: u64,
    seconds: f64,
    /// CPU time of the exec loop and its children (kernel work of fork, exec, mmap, exit
    /// included, and so the writing of the records).
    loop_cpu_s: f64,
    reader: Option<ReaderCost>,
}

struct ReaderCost {
    cpu_s: f64,
    reads: u64,
    events: u64,
    records: u64,
    lost: u64,
    /// For every exec: when the reader had its COMM record, minus when the kernel wrote it.
    exec_latency_ns: Vec<u64>,
}

/// The `q` quantile of sorted values, in milliseconds.
fn quantile_ms(sorted: &[u64], q: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(at).map_or(f64::NAN, |&ns| ns as f64 / 1e6)
}

const LOOPS: u32 = 2;

/// Runs the exec loops, with a reader of `reading` kind on its own thread when given one.
fn exec_storm(exec_loop: &Path, rate: u32, seconds: f64, reading: Option<Reading>) -> Run {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = reading.map(|reading| spawn_reader(reading, stop.clone()));
    // Let the reader settle into its loop.
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    let (execs, loop_cpu_s) = run_exec_loops(exec_loop, rate, seconds);
    let elapsed = started.elapsed().as_secs_f64();
    // Let the reader read the last records.
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    Run {
        execs,
        seconds: elapsed,
        loop_cpu_s,
        reader: reader.map(|r| r.join().expect("the reader thread")),
    }
}

/// A reader of the side-band events on its own thread, waiting as `reading` says, until
/// `stop`; what it cost.
fn spawn_reader(
    reading: Reading,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<ReaderCost> {
    let mut events = MmapEvents::open().expect("open the side-band events");
    std::thread::spawn(move || {
        let start = thread_cpu_ns();
        let (mut reads, mut delivered) = (0u64, 0u64);
        let mut latency = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            match reading {
                Reading::Eager => {
                    events.wait(Duration::from_millis(100)).expect("poll");
                }
                Reading::Batched(every) => {
                    events.wait(Duration::from_millis(100)).expect("poll");
                    std::thread::sleep(every);
                }
                Reading::Tick(every) => std::thread::sleep(every),
            }
            let now = monotonic_ns();
            delivered += events.read(&mut |e| {
                if let Event::Comm(c) = &e
                    && c.exec
                {
                    latency.push(now.saturating_sub(c.time_ns));
                }
                std::hint::black_box(e);
            }) as u64;
            reads += 1;
        }
        let cpu = thread_cpu_ns() - start;
        let stats = events.stats();
        ReaderCost {
            cpu_s: cpu as f64 / 1e9,
            reads,
            events: delivered,
            records: stats.records,
            lost: stats.lost,
            exec_latency_ns: {
                latency.sort_unstable();
                latency
            },
        }
    })
}

/// The exec loops sharing `rate` execs a second for `seconds`, waited for: the execs they
/// made, and their CPU time with that of the children they waited for.
fn run_exec_loops(exec_loop: &Path, rate: u32, seconds: f64) -> (u64, f64) {
    // Several loops share the rate: one fork + exec + wait of /bin/true takes ~1 ms of CPU
    // here, so a single loop cannot reach 1 000 a second.
    let loops: Vec<std::process::Child> = (0..LOOPS)
        .map(|_| {
            Command::new(exec_loop)
                .arg((rate / LOOPS).to_string())
                .arg(seconds.to_string())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("start the exec loop")
        })
        .collect();
    let (mut execs, mut loop_cpu_s) = (0u64, 0.0);
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    for child in loops {
        let pid = child.id() as libc::pid_t;
        // wait4 for the loop's rusage, which includes the /bin/true children it waited for.
        // SAFETY: zeroed rusage is a valid value to overwrite.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let mut status = 0;
        // SAFETY: our own child, valid out-pointers.
        let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
        loop_cpu_s += tv(usage.ru_utime) + tv(usage.ru_stime);
        let mut stdout = String::new();
        std::io::Read::read_to_string(&mut child.stdout.expect("piped stdout"), &mut stdout)
            .expect("read the loop's count");
        execs += stdout
            .trim()
            .parse::<u64>()
            .expect("the loop prints its count");
    }
    (execs, loop_cpu_s)
}

/// The reader's CPU time while the machine runs `/bin/true` ~1 000 times a second, for each
/// way of waiting; and the exec loop's own CPU time with and without the events open (what
/// writing the records costs every process on the machine). Prints a table (the one check:
/// more records than execs); as root, on a quiet machine: `cargo test --release -p profiler
/// --test mmap_events -- --ignored --nocapture measurement_`.
#[test]
#[ignore = "measurement, not a check: prints what reading the records costs (run it with --ignored; cargo xtask test runs it with PROFILER_MEASURE=1)"]
fn measurement_reader_cost_under_an_exec_storm() {
    require_perf();
    let _serial = serial();
    let exec_loop = exec_loop_binary();
    let (rate, seconds) = (1000, 5.0);
    let cases = [
        ("no events open", None),
        ("eager (woken per record)", Some(Reading::Eager)),
        (
            "batched, >= 2 ms apart",
            Some(Reading::Batched(Duration::from_millis(2))),
        ),
        (
            "200 ms tick, no poll",
            Some(Reading::Tick(Duration::from_millis(200))),
        ),
        ("no events open (again)", None),
    ];
    eprintln!(
        "{:<26} {:>7} {:>10} {:>12} {:>9} {:>9} {:>11} {:>8} {:>6} {:>22}",
        "reader",
        "execs/s",
        "records/s",
        "reader CPU%",
        "us/record",
        "reads/s",
        "loop us/exec",
        "events",
        "lost",
        "exec->read p50/p99/max"
    );
    for (name, reading) in cases {
        let run = exec_storm(&exec_loop, rate, seconds, reading);
        let per_exec_us = run.loop_cpu_s / run.execs.max(1) as f64 * 1e6;
        match &run.reader {
            Some(r) => eprintln!(
                "{:<26} {:>7.0} {:>10.0} {:>11.2}% {:>9.2} {:>9.0} {:>11.1} {:>8} {:>6} {:>6.2}/{:>6.2}/{:>6.1} ms",
                name,
                run.execs as f64 / run.seconds,
                r.records as f64 / run.seconds,
                r.cpu_s / run.seconds * 100.0,
                r.cpu_s / r.records.max(1) as f64 * 1e6,
                r.reads as f64 / run.seconds,
                per_exec_us,
                r.events,
                r.lost,
                quantile_ms(&r.exec_latency_ns, 0.5),
                quantile_ms(&r.exec_latency_ns, 0.99),
                quantile_ms(&r.exec_latency_ns, 1.0),
            ),
            None => eprintln!(
                "{:<26} {:>7.0} {:>10} {:>12} {:>9} {:>9} {:>11.1} {:>8} {:>6}",
                name,
                run.execs as f64 / run.seconds,
                "-",
                "-",
                "-",
                "-",
                per_exec_us,
                "-",
                "-"
            ),
        }
        if let Some(r) = &run.reader {
            assert!(r.records > run.execs, "fewer records than execs");
        }
    }
}
