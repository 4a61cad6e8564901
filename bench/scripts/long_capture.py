#!/usr/bin/env python3
"""Long captures of real services under load (issue 23: no loss at all in 60 s and in 10 minutes
of each service the README shows).

For each service: start a private instance in a scratch directory under /tmp (private data
directory, private port, never the system's own instance or configuration), drive load, and
~3 s after the load starts run

    PROFILER --pid <service pid> --secs S --mode wall -o <svg> --report <json> -v

measuring the profiler's max RSS and user+system CPU (os.wait4 rusage) and the post-processing
time it logs with -v ("post-processing took X s"). Prints the host CPU model and a Markdown
table: losses (capture.lost_total, capture.lost), threads and processes seen, RSS, CPU,
post-processing, and whether the load was still running when the capture window closed.
Every process started is stopped at the end, even on error; only the scratch directories are
removed (--keep leaves them). Missing packages are installed with apt-get (and it says so).

usage (root): long_capture.py [--profiler PATH] [--secs 60] [--services nginx,postgres,redis,mariadb,java]
Stdlib only.
"""
import argparse
import glob
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
JAVA_SRC = os.path.join(REPO, "profiler", "tests", "fixtures", "JavaService.java")
ALL = ["nginx", "postgres", "redis", "mariadb", "java"]


def log(msg):
    print(f"[long_capture {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- packages

_apt_updated = False


def have(binary):
    return shutil.which(binary) is not None or os.path.exists(binary)


def pg_bin(name):
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return found[-1] if found else None


def ensure(checks):
    """checks: [(present?, package)]: apt-get install the packages whose check fails."""
    global _apt_updated
    missing = [pkg for ok, pkg in checks if not ok()]
    if not missing:
        return
    missing = sorted(set(missing))
    if not _apt_updated:
        log("apt-get update")
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        _apt_updated = True
    log(f"installing missing packages with apt-get install -y: {' '.join(missing)}")
    print(f"Installed missing packages: {' '.join(missing)}", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True, env=env,
                   stdout=subprocess.DEVNULL)


PACKAGES = {
    "nginx": [(lambda: have("nginx"), "nginx"), (lambda: have("wrk"), "wrk")],
    "postgres": [(lambda: pg_bin("initdb") is not None, "postgresql"),
                 (lambda: have("pgbench"), "postgresql-contrib")],
    "redis": [(lambda: have("redis-server"), "redis-server"),
              (lambda: have("redis-benchmark"), "redis-tools")],
    "mariadb": [(lambda: have("mariadbd") or have("/usr/sbin/mariadbd"), "mariadb-server"),
                (lambda: have("mariadb-install-db"), "mariadb-server"),
                (lambda: have("mariadb"), "mariadb-client"),
                (lambda: have("sysbench"), "sysbench")],
    "java": [(lambda: have("javac") and have("java"), "openjdk-17-jdk-headless"),
             (lambda: have("wrk"), "wrk")],
}


# ---------------------------------------------------------------- process bookkeeping

class Procs:
    """Processes this script started, stopped in reverse order at the end."""

    def __init__(self):
        self.items = []  # (name, Popen)
        self.stoppers = []  # callables run before the Popen list (pg_ctl stop, ...)

    def spawn(self, name, args, **kw):
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(args, **kw)
        self.items.append((name, p))
        log(f"started {name} (pid {p.pid}): {' '.join(args)}")
        return p

    def stop_all(self):
        for fn in reversed(self.stoppers):
            try:
                fn()
            except Exception as e:  # keep cleaning up
                log(f"cleanup step failed: {e}")
        for name, p in reversed(self.items):
            if p.poll() is None:
                try:
                    p.terminate()
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    log(f"{name} (pid {p.pid}) ignored SIGTERM: SIGKILL")
                    p.kill()
                    p.wait()
                except ProcessLookupError:
                    pass
        self.items.clear()
        self.stoppers.clear()


def wait_for(what, pred, timeout=120, interval=0.25, alive=None):
    end = time.time() + timeout
    while time.time() < end:
        if alive is not None and alive.poll() is not None:
            raise RuntimeError(f"{what}: {alive.args[0]} exited with {alive.returncode}")
        try:
            if pred():
                return
        except Exception:
            pass
        time.sleep(interval)
    raise RuntimeError(f"timed out waiting for {what}")


def run(args, **kw):
    kw.setdefault("check", True)
    log("run: " + " ".join(args))
    return subprocess.run(args, **kw)


def read_pid(path):
    with open(path) as f:
        return int(f.readline().strip())


def port_open(port):
    import socket
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# ---------------------------------------------------------------- services
# Each setup(ctx) starts the service and its load and returns (pid to profile, load Popen,
# seconds to wait between the load start and the profiler start).

def setup_nginx(ctx):
    d, secs, procs = ctx["dir"], ctx["secs"], ctx["procs"]
    port = 18080
    if port_open(port):
        raise RuntimeError(f"port {port} is already in use")
    www = os.path.join(d, "www")
    os.makedirs(www)
    with open(os.path.join(www, "index.html"), "w") as f:
        f.write("<html><body>" + "hello long capture " * 30 + "</body></html>\n")
    for sub in ("logs", "tmp"):
        os.makedirs(os.path.join(d, sub))
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off;
master_process on;
worker_processes 2;
pid {d}/nginx.pid;
error_log {d}/logs/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {www};
        location / {{ }}
    }}
}}
""")
    master = procs.spawn("nginx", ["nginx", "-c", conf, "-p", d + "/"])
    wait_for("nginx to listen", lambda: port_open(port), 30, alive=master)
    if master.poll() is not None:
        raise RuntimeError("nginx exited")
    load = procs.spawn("wrk", ["wrk", "-t2", "-c32", f"-d{secs + ctx['extra']}s",
                               f"http://127.0.0.1:{port}/index.html"],
                       stdout=open(os.path.join(d, "wrk.out"), "w"), stderr=subprocess.STDOUT)
    return master.pid, load, 3


def setup_postgres(ctx):
    d, secs, procs = ctx["dir"], ctx["secs"], ctx["procs"]
    port = 21999
    if port_open(port):
        raise RuntimeError(f"port {port} is already in use")
    initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
    pgw = pwd.getpwnam("postgres")
    # Everything the server writes is in a directory of its own user's.
    top = os.path.join(d, "pg")
    os.makedirs(top)
    os.chown(top, pgw.pw_uid, pgw.pw_gid)
    data, sock = os.path.join(top, "data"), top
    as_pg = ["runuser", "-u", "postgres", "--"]
    run(as_pg + [initdb, "-D", data, "-A", "trust", "-U", "postgres"],
        stdout=subprocess.DEVNULL)
    opts = f"-p {port} -k {sock} -c listen_addresses=''"

    def stop():
        if os.path.exists(os.path.join(data, "postmaster.pid")):
            run(as_pg + [pg_ctl, "-D", data, "-m", "fast", "-w", "stop"], check=False,
                stdout=subprocess.DEVNULL)
    procs.stoppers.append(stop)
    run(as_pg + [pg_ctl, "-D", data, "-o", opts, "-l", os.path.join(top, "pg.log"), "-w", "start"],
        stdout=subprocess.DEVNULL)
    pid = read_pid(os.path.join(data, "postmaster.pid"))
    conn = ["-h", sock, "-p", str(port), "-U", "postgres"]
    run(["pgbench", *conn, "-i", "-s", "10", "postgres"], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    load = procs.spawn("pgbench", ["pgbench", *conn, "-c4", "-j2", "-T", str(secs + ctx["extra"]),
                                   "postgres"],
                       stdout=open(os.path.join(d, "pgbench.out"), "w"), stderr=subprocess.STDOUT)
    return pid, load, 3


def setup_redis(ctx):
    d, secs, procs = ctx["dir"], ctx["secs"], ctx["procs"]
    port = 6390
    if port_open(port):
        raise RuntimeError(f"port {port} is already in use")
    conf = os.path.join(d, "redis.conf")
    with open(conf, "w") as f:
        f.write(f"""port {port}
bind 127.0.0.1
daemonize no
dir {d}
logfile {d}/redis.log
appendonly yes
appendfsync always
save ""
""")
    server = procs.spawn("redis-server", ["redis-server", conf])
    wait_for("redis to listen", lambda: port_open(port), 30, alive=server)
    load = procs.spawn("redis-benchmark",
                       ["redis-benchmark", "-p", str(port), "-t", "set", "-n", "100000000",
                        "-c", "50", "-q"],
                       stdout=open(os.path.join(d, "redis-benchmark.out"), "w"),
                       stderr=subprocess.STDOUT)
    return server.pid, load, 3


def setup_mariadb(ctx):
    d, secs, procs = ctx["dir"], ctx["secs"], ctx["procs"]
    port = 23306
    if port_open(port):
        raise RuntimeError(f"port {port} is already in use")
    my = pwd.getpwnam("mysql")
    # Everything the server writes is in a directory of its own user's.
    top = os.path.join(d, "my")
    os.makedirs(top)
    os.chown(top, my.pw_uid, my.pw_gid)
    data, sock = os.path.join(top, "data"), os.path.join(top, "mysqld.sock")
    run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=mysql",
         "--auth-root-authentication-method=normal", "--skip-test-db"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "install-db.log"), "w"))
    mariadbd = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
    server = procs.spawn("mariadbd", [mariadbd, "--no-defaults", f"--datadir={data}",
                                      f"--socket={sock}", f"--port={port}",
                                      "--bind-address=127.0.0.1", "--user=mysql",
                                      "--skip-grant-tables",
                                      f"--pid-file={top}/mariadbd.pid",
                                      f"--log-error={top}/mariadbd.err"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cli = ["mariadb", "--no-defaults", f"--socket={sock}", "-uroot"]
    wait_for("mariadbd to accept connections",
             lambda: subprocess.run(cli + ["-e", "select 1"], capture_output=True).returncode == 0,
             120, alive=server)
    run(cli + ["-e", "create database if not exists sbtest"])
    sb = ["sysbench", "oltp_read_write", f"--mysql-socket={sock}", "--mysql-user=root",
          "--mysql-db=sbtest", "--tables=4", "--table-size=10000"]
    run(sb + ["prepare"], stdout=subprocess.DEVNULL)
    load = procs.spawn("sysbench", sb + ["--threads=8", f"--time={secs + ctx['extra']}", "run"],
                       stdout=open(os.path.join(d, "sysbench.out"), "w"), stderr=subprocess.STDOUT)
    return server.pid, load, 3


def setup_java(ctx):
    d, secs, procs = ctx["dir"], ctx["secs"], ctx["procs"]
    classes = os.path.join(d, "classes")
    os.makedirs(classes)
    run(["javac", "-d", classes, JAVA_SRC])
    # Stock JDK 17 flags: nothing added.
    jvm = procs.spawn("java", ["java", "-cp", classes, "JavaService"], stdout=subprocess.PIPE,
                      text=True)
    line = jvm.stdout.readline().strip()
    if not line.startswith("ready "):
        raise RuntimeError(f"JavaService not ready: {line!r}")
    port = int(line.split()[1])
    warm = 10
    # As tests/jit.rs drives it: wrk on /item; profiled warm (10 s of load before the window).
    load = procs.spawn("wrk", ["wrk", "-t2", "-c32", f"-d{secs + ctx['extra'] + warm}s",
                               f"http://127.0.0.1:{port}/item"],
                       stdout=open(os.path.join(d, "wrk.out"), "w"), stderr=subprocess.STDOUT)
    return jvm.pid, load, warm


SETUP = {"nginx": setup_nginx, "postgres": setup_postgres, "redis": setup_redis,
         "mariadb": setup_mariadb, "java": setup_java}


# ---------------------------------------------------------------- the capture

def capture(profiler, pid, secs, outdir, name, load):
    svg = os.path.join(outdir, f"{name}-{secs}s.svg")
    report = os.path.join(outdir, f"{name}-{secs}s.json")
    errlog = os.path.join(outdir, f"{name}-{secs}s.stderr")
    args = [profiler, "--pid", str(pid), "--secs", str(secs), "--mode", "wall", "-o", svg,
            "--report", report, "-v"]
    log("profiler: " + " ".join(args))
    # Watch when the load ends, to tell whether it covered the whole window.
    load_end = {}
    threading.Thread(target=lambda: (load.wait(), load_end.setdefault("t", time.time())),
                     daemon=True).start()
    t0 = time.time()
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    marks = {}
    lines = []

    def reader():
        for l in p.stderr:
            lines.append(l)
            if "capturing" in l and "t" not in marks:
                marks["t"] = time.time()
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    th.join(timeout=10)
    wall = time.time() - t0
    with open(errlog, "w") as f:
        f.writelines(lines)
    text = "".join(lines)
    m = re.search(r"post-processing took ([0-9.]+) s", text)
    row = {
        "service": name, "secs": secs, "exit": p.returncode, "wall_s": wall,
        "rss_mb": ru.ru_maxrss / 1024.0, "cpu_s": ru.ru_utime + ru.ru_stime,
        "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
        "post_s": float(m.group(1)) if m else None,
        "svg": svg, "report": report, "stderr": errlog,
    }
    if "t" in marks:
        window_end = marks["t"] + secs
        row["start_s"] = marks["t"] - t0
        le = load_end.get("t")
        row["load_covered"] = le is None or le >= window_end
    else:
        row["load_covered"] = None
    if p.returncode == 0 and os.path.exists(report):
        with open(report) as f:
            c = json.load(f)["capture"]
        row.update(duration=c["duration_s"], lost_total=c["lost_total"], lost=c["lost"],
                   threads=c["threads"], processes=c["processes"], counters=c["counters"],
                   ended_early=c.get("ended_early"))
    else:
        row["error"] = f"profiler exited {p.returncode}; tail of stderr: " + \
            " | ".join(l.strip() for l in lines[-5:])
    return row


def run_service(name, args, outdir):
    ensure(PACKAGES[name])
    scratch = tempfile.mkdtemp(prefix=f"lc-{name}-", dir="/tmp")
    os.chmod(scratch, 0o755)
    procs = Procs()
    ctx = {"dir": scratch, "secs": args.secs, "procs": procs, "extra": args.load_extra}
    try:
        pid, load, delay = SETUP[name](ctx)
        log(f"{name}: profiling pid {pid} {delay} s after the load started")
        time.sleep(delay)
        if load.poll() is not None:
            raise RuntimeError(f"the load ({load.args[0]}) exited early with {load.returncode}")
        return capture(args.profiler, pid, args.secs, outdir, name, load)
    except Exception as e:
        log(f"{name} failed: {e}")
        return {"service": name, "secs": args.secs, "error": str(e)}
    finally:
        procs.stop_all()
        if args.keep:
            log(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for l in f:
            if l.startswith("model name"):
                return l.split(":", 1)[1].strip()
    return "unknown"


def fmt(v, spec):
    return "–" if v is None else format(v, spec)


def table(rows):
    out = ["| service | seconds (captured) | lost_total | non-zero losses | threads | processes "
           "| profiler max RSS MB | profiler CPU s (user+sys) | post-processing s | load covered window |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "lost_total" not in r:
            out.append(f"| {r['service']} | {r['secs']} | – | not run: {r.get('error')} | – | – "
                       f"| {fmt(r.get('rss_mb'), '.1f')} | {fmt(r.get('cpu_s'), '.2f')} | – | – |")
            continue
        losses = ", ".join(f"{l['what']}: {l['count']}" for l in r["lost"]) or "none"
        cov = {True: "yes", False: "NO", None: "?"}[r["load_covered"]]
        out.append(f"| {r['service']} | {r['secs']} ({r['duration']:.2f}) | {r['lost_total']} "
                   f"| {losses} | {r['threads']} | {r['processes']} | {r['rss_mb']:.1f} "
                   f"| {r['cpu_s']:.2f} ({r['user_s']:.2f}+{r['sys_s']:.2f}) "
                   f"| {fmt(r['post_s'], '.3f')} | {cov} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiler", default=os.path.join(REPO, "target", "release", "profiler"))
    ap.add_argument("--secs", type=int, default=60)
    ap.add_argument("--services", default=",".join(ALL))
    # The profiler's own start (reading the target's unwind tables, loading the programs)
    # took 7-14 s on a busy 2-CPU host: with only 10 s more, the load ended before the
    # window did. The load is stopped as soon as the capture ends anyway.
    ap.add_argument("--load-extra", type=int, default=60,
                    help="the load lasts --secs plus this many seconds (default 60); "
                         "the table says whether it still ran when the window closed")
    ap.add_argument("--out", help="directory for the SVGs, reports and profiler stderr "
                                  "(default: a new /tmp/long_capture-* directory)")
    ap.add_argument("--keep", action="store_true", help="keep the services' scratch directories")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("long_capture.py: run as root (the profiler loads eBPF programs)")
    args.profiler = os.path.abspath(args.profiler)
    services = [s.strip() for s in args.services.split(",") if s.strip()]
    for s in services:
        if s not in SETUP:
            sys.exit(f"unknown service {s!r} (known: {', '.join(ALL)})")
    outdir = args.out or tempfile.mkdtemp(prefix="long_capture-", dir="/tmp")
    os.makedirs(outdir, exist_ok=True)

    def on_term(signum, _frame):
        raise SystemExit(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)

    rows = []
    for s in services:
        log(f"=== {s}: {args.secs} s")
        rows.append(run_service(s, args, outdir))
    print()
    print(f"Host CPU: {cpu_model()} ({os.cpu_count()} CPUs); profiler: {args.profiler}; "
          f"outputs in {outdir}")
    print()
    print(table(rows))
    print()
    for r in rows:
        if "counters" in r:
            nz = {k: v for k, v in sorted(r["counters"].items()) if v}
            print(f"- {r['service']}: capture.lost = {json.dumps(r['lost'])}; "
                  f"non-zero counters: {json.dumps(nz)}"
                  + (f"; ended early: {r['ended_early']}" if r.get("ended_early") else ""))
    clean = all(r.get("lost_total") == 0 for r in rows)
    sys.exit(0 if clean else 1)


if __name__ == "__main__":
    main()
