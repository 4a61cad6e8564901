#!/usr/bin/env python3
"""Kernel memory of one capture, by target kind: what the profiler reports
(`kernel_memory_bytes` in the JSON report: the most its maps held at a drain) beside the most
the kernel itself accounted while the capture ran (the sum of `memlock` in the profiler's
/proc/PID/fdinfo for its BPF maps, read every 50 ms; what `bpftool map show` prints).

usage (root): kernel_memory.py PROFILER [SECS] [extra profiler args...]
Targets: a 2-thread process, a 64-thread process (64 threads sleeping and waking every
millisecond), 64 one-thread processes (children of one shell, profiled with descendants)
a 5 000-thread process (threads sleeping and waking every 100 ms) and a 5 000-thread JVM (a
request pool: each thread sleeps 200 ms, takes one of 16 monitors, hashes a little, and every
tenth round hands a task through a queue to a 64-thread worker pool; `javac` builds it), and
a 64-worker nginx under `wrk -t2 -c128` (profiled by its master's PID, with its workers).
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


JVM = r"""
import java.util.concurrent.*;
public class Pool {
    static final Object[] LOCKS = new Object[16];
    static final BlockingQueue<Integer> WORK = new LinkedBlockingQueue<>();
    static volatile long sink;
    public static void main(String[] a) throws Exception {
        int n = Integer.parseInt(a[0]);
        for (int i = 0; i < LOCKS.length; i++) LOCKS[i] = new Object();
        for (int i = 0; i < 64; i++) new Thread(null, Pool::worker, "worker-" + i, 256 << 10).start();
        for (int i = 0; i < n - 66; i++) {
            final int id = i;
            new Thread(null, () -> request(id), "request-" + i, 256 << 10).start();
        }
        System.out.println("ready");
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }
    static void request(int id) {
        try {
            for (long round = 0;; round++) {
                Thread.sleep(200);
                synchronized (LOCKS[id % LOCKS.length]) { sink += hash(id, 200); }
                if (round % 10 == 0) WORK.put(id);
            }
        } catch (InterruptedException e) { }
    }
    static void worker() {
        try { for (;;) sink += hash(WORK.take(), 2000); } catch (InterruptedException e) { }
    }
    static long hash(long x, int n) {
        for (int i = 0; i < n; i++) x = x * 6364136223846793005L + 1442695040888963407L;
        return x;
    }
}
"""


def jvm_process(n):
    d = tempfile.mkdtemp(prefix="kmem-jvm-")
    with open(os.path.join(d, "Pool.java"), "w") as f:
        f.write(JVM)
    subprocess.run(["javac", "-d", d, os.path.join(d, "Pool.java")], check=True)
    p = subprocess.Popen(["java", "-Xss256k", "-XX:+UseSerialGC", "-cp", d, "Pool", str(n)],
                         stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    time.sleep(2)  # past the JIT's first compilations
    return p


NGINX = """
daemon off;
master_process on;
worker_processes 64;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 "hello"; }}
    }}
}}
"""


class Nginx:
    """nginx's master (the PID profiled) and the wrk that loads its workers."""

    def __init__(self, workers_loaded_for):
        d = tempfile.mkdtemp(prefix="kmem-nginx-")
        port = 41000 + os.getpid() % 1000
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(NGINX.format(d=d, port=port))
        self.master = subprocess.Popen(["nginx", "-c", os.path.join(d, "nginx.conf"), "-p", d],
                                       stderr=subprocess.DEVNULL)
        self.pid = self.master.pid
        time.sleep(1)
        self.wrk = subprocess.Popen(["wrk", "-t2", "-c128", f"-d{workers_loaded_for}s",
                                     f"http://127.0.0.1:{port}/"], stdout=subprocess.DEVNULL)

    def kill(self):
        self.wrk.kill()
        self.master.terminate()

    def wait(self):
        self.wrk.wait()
        self.master.wait()


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
    ("5 000-thread JVM", lambda: jvm_process(5000)),
    ("64-worker nginx under wrk (with descendants)", lambda: Nginx(SECS + 5)),
]:
    if ONLY in name:
        measure(name, start())
