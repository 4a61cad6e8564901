//! Privileged: what a capture costs the machine it runs on. The kernel memory its maps hold
//! follows the target: a busy 64-thread process stays within 16 MiB, as the kernel itself
//! accounts it (`memlock` in /proc/PID/fdinfo of each map, what `bpftool map show` prints),
//! and nothing is lost for it.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// The most kernel memory a capture of a process with at most 64 threads may hold.
const SMALL_PROCESS_BYTES: u64 = 16 << 20;

/// The kernel memory the BPF maps of process `pid` hold now: the sum of their `memlock`.
fn maps_memlock(pid: u32) -> u64 {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.filter_map(Result::ok)
        .filter(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| target.as_os_str() == "anon_inode:bpf-map")
        })
        .filter_map(|fd| {
            let info = std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .ok()?;
            info.lines()
                .find_map(|l| l.strip_prefix("memlock:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}

#[test]
#[ignore = "privileged: loads eBPF programs as root (cargo xtask test runs it)"]
fn a_busy_64_thread_process_costs_at_most_16_mib_of_kernel_memory() {
    require_root();
    let _serial = serial();
    let dir = scratch_dir().join("footprint");
    std::fs::create_dir_all(&dir).unwrap();
    // main + a write+fsync thread, a pipe ping-pong pair, two racers and 58 spinners: 64
    // threads, every kind of wait, many stacks, on a saturated machine.
    let workload = Workload::spawn(
        Build::NoFramePointers,
        &["accuracy", dir.to_str().unwrap(), "58"],
    );
    let threads = std::fs::read_dir(format!("/proc/{}/task", workload.pid()))
        .unwrap()
        .count();
    assert_eq!(threads, 64, "the workload's threads");
    let out = outputs("footprint");
    let report = scratch_dir().join("footprint.json");
    let pid = workload.pid().to_string();
    let secs = 6u64;
    let secs_arg = secs.to_string();
    let mut args = capture_args(&pid, &secs_arg, &out);
    args.extend(["--report", report.to_str().unwrap()]);
    let capturing = Capturing::start(&args);
    let opened = Instant::now();
    let mut most_seen = 0;
    while opened.elapsed() < Duration::from_secs(secs - 1) {
        most_seen = most_seen.max(maps_memlock(capturing.pid()));
        std::thread::sleep(Duration::from_millis(50));
    }
    let result = capturing.finish();
    assert_success(&result);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let capture = &r["capture"];
    assert_eq!(capture["lost_total"], 0, "losses: {}", capture["lost"]);
    for (name, value) in capture["counters"].as_object().unwrap() {
        if name.ends_with("_full") || name.ends_with("_lost") || name.ends_with("_failed") {
            assert_eq!(value, 0, "{name}");
        }
    }
    let reported = capture["counters"]["kernel_memory_bytes"].as_u64().unwrap();
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    eprintln!(
        "kernel memory: {:.1} MiB reported, at most {:.1} MiB seen in fdinfo",
        mib(reported),
        mib(most_seen)
    );
    assert!(most_seen > 0, "no BPF map of the profiler seen");
    assert!(
        most_seen <= SMALL_PROCESS_BYTES && reported <= SMALL_PROCESS_BYTES,
        "a 64-thread process: {:.1} MiB reported, {:.1} MiB seen; at most 16 MiB expected",
        mib(reported),
        mib(most_seen)
    );
    // The report states what the maps held: the most at a drain, near the most seen between.
    assert!(
        reported as f64 >= 0.9 * most_seen as f64,
        "{:.1} MiB reported, {:.1} MiB seen",
        mib(reported),
        mib(most_seen)
    );
}
