#!/usr/bin/env python3
"""Kernel memory of one capture, by target kind: what the profiler reports
(`kernel_memory_bytes` in the JSON report: the most its maps held at a drain) beside the most
the kernel itself accounted while the capture ran (the sum of `memlock` in the profiler's
/proc/PID/fdinfo for its BPF maps, read every 50 ms; what `bpftool map show` prints).

usage (root): kernel_memory.py PROFILER [SECS] [extra profiler args...]
Targets: a 2-thread process, a 64-thread process (64 threads sleeping and waking every
millisecond), 64 one-thread processes (children of one shell, profiled with descendants)
and a 5 000-thread process (threads sleeping and waking every 100 ms).
"""
import json, os, subprocess, sys, tempfile, time

PROFILER = sys.argv[1]
SECS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
EXTRA = sys.argv[3:]

THREADS = r"""
import sys, threading, time
n, nap = int(sys.argv[1]), float(sys.argv[2])
threading.stack_size(64 * 1024)
def work():
    while True:
        time.sleep(nap)
for _ in range(n - 1):
    threading.Thread(target=work, daemon=True).start()
print("ready", flush=True)
work()
"""


def memlock(pid):
    total = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:bpf-map":
                continue
            for line in open(f"/proc/{pid}/fdinfo/{fd}"):
                if line.startswith("memlock:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def threads_process(n, nap):
    p = subprocess.Popen([sys.executable, "-c", THREADS, str(n), str(nap)],
                         stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    return p


def processes(n):
    p = subprocess.Popen(["bash", "-c", f"for i in $(seq {n}); do sleep 1000 & done; wait"])
    time.sleep(0.5)
    return p


def measure(name, target):
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "r.json")
        prof = subprocess.Popen([PROFILER, "--pid", str(target.pid), "--secs", str(SECS),
                                 "-o", os.path.join(d, "f.svg"), "--report", report, *EXTRA],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen = 0
        while prof.poll() is None:
            seen = max(seen, memlock(prof.pid))
            time.sleep(0.05)
        threads = len(os.listdir(f"/proc/{target.pid}/task"))
        target.kill()
        subprocess.run(["pkill", "-P", str(target.pid)], check=False)
        target.wait()
        if prof.returncode != 0:
            print(f"{name}: the profiler failed ({prof.returncode})")
            return
        c = json.load(open(report))["capture"]
        reported = c["counters"]["kernel_memory_bytes"]
        print(f"| {name} | {threads} | {reported / 2**20:.1f} MiB | {seen / 2**20:.1f} MiB "
              f"| {c['lost_total']} |")
        if c["lost_total"]:
            print(f"  lost: {c['lost']}")


print(f"profiler {PROFILER}, {SECS} s captures{' ' + ' '.join(EXTRA) if EXTRA else ''}")
print("| target | threads of the process profiled | reported | most in fdinfo | lost |")
print("|---|---:|---:|---:|---:|")
ONLY = os.environ.get("ONLY", "")
for name, start in [
    ("2-thread process", lambda: threads_process(2, 0.01)),
    ("64-thread process", lambda: threads_process(64, 0.001)),
    ("64 one-thread processes (with descendants)", lambda: processes(64)),
    ("5 000-thread process", lambda: threads_process(5000, 0.1)),
]:
    if ONLY in name:
        measure(name, start())
