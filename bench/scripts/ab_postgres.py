#!/usr/bin/env python3
"""Side by side on one PostgreSQL backend: two BPF tools attached at once, so both see the
same events under the same load, bpf_stats giving each program's time (run_time_ns/run_cnt,
two `bpftool prog show` snapshots around the window). Each pair runs in both attach orders
(the one attached second runs ~15-30 % cheaper here: the first has warmed the caches); the
summary is the geometric mean of B/A over all runs.

usage (root): ab_postgres.py BIN_A BIN_B PAIRS SECS [extra profiler args...]
  BIN_A/BIN_B: profiler binaries, or a path ending in `offcputime` or `wakeuptime`
  (libbpf-tools, -p PID), or several joined by `+` (e.g. offcputime+wakeuptime: the pair of
  anchors that together do what ours does; their programs' times are summed). A profiler
  binary may carry its own arguments, quoted as one word: 'target/release/profiler
  --no-wakers' against offcputime measures ours without wakers side by side. The extra
  profiler args after SECS go to every profiler of both sides.
  env A_ARGS / B_ARGS: more arguments for that side's profiler (shell words), the same thing.
  env B_TARGET=PID: B profiles that process instead (e.g. an idle `sleep`: B's filter floor).
  env ALL_TARGET=PID: both do.
Needs a cluster at /tmp/wc-pg, port 55432 (initdb -A trust; pg_ctl -o "-p 55432 -k /tmp/wc-pg
-c listen_addresses='' -c synchronous_commit=on"; pgbench -i -s 10); runs its own
`pgbench -c 4 -j 2` and profiles its first backend. "TOTAL/switch" is all of a tool's
programs' time per context switch on the machine (its sched_switch count).
"""
import json, os, shlex, signal, subprocess, sys, time, math
A, B, pairs, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
extra = sys.argv[5:]
D = "/tmp/wc-pg"
def q(sql):
    return subprocess.run(["psql", "-h", D, "-p", "55432", "-U", "postgres", "-Atc", sql, "postgres"],
                          capture_output=True, text=True).stdout
load = subprocess.Popen(["pgbench", "-h", D, "-p", "55432", "-U", "postgres", "-c", "4", "-j", "2", "-T", "100000", "postgres"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(100):
        pids = sorted(int(x) for x in q("select pid from pg_stat_activity where application_name='pgbench'").split())
        if len(pids) == 4: break
        time.sleep(0.1)
    backend = pids[0]
    open("/proc/sys/kernel/bpf_stats_enabled", "w").write("1")
    owners = {}
    def ids_of(pid):
        ids = set()
        for fd in os.listdir(f"/proc/{pid}/fdinfo"):
            try:
                for l in open(f"/proc/{pid}/fdinfo/{fd}"):
                    if l.startswith("prog_id:"): ids.add(int(l.split()[1]))
            except Exception: pass
        return ids
    def progs():
        out = json.loads(subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True).stdout)
        r = {}
        for p in out:
            if p["id"] in owners:
                # Two tools of one side (offcputime+wakeuptime) may name a program alike:
                # times add up, the event count is one tool's.
                t, c = r.get((owners[p["id"]], p["name"]), (0, 0))
                r[(owners[p["id"]], p["name"])] = (t + p.get("run_time_ns", 0), max(c, p.get("run_cnt", 0)))
        return r
    os.makedirs("/tmp/wc", exist_ok=True)
    def start(side, spec, i):
        if "+" in spec:
            return [start(side, b, i) for b in spec.split("+")]
        binary, *own = shlex.split(spec)
        if binary.endswith("offcputime") or binary.endswith("wakeuptime"):
            p = subprocess.Popen([binary, "-p", str(backend), "3600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(3)
            return p
        tgt = os.environ.get("B_TARGET") if side == "B" and os.environ.get("B_TARGET") else str(backend)
        if os.environ.get("ALL_TARGET"): tgt = os.environ["ALL_TARGET"]
        own += shlex.split(os.environ.get(f"{side}_ARGS", ""))
        p = subprocess.Popen([binary, "--pid", tgt, "--secs", "3600", "-o", f"/tmp/wc/ab-{i}.svg"] + own + extra,
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        for line in p.stderr:
            if "capturing" in line: break
        return p
    res = {"A": [], "B": []}
    logs = []
    for pair in range(pairs):
        for a_first in (True, False):
            order = [("A", A), ("B", B)] if a_first else [("B", B), ("A", A)]
            procs = {}
            for i, (k, b) in enumerate(order):
                procs[k] = start(k, b, i)
            time.sleep(1)
            owners.clear()
            for k, p in procs.items():
                for q_ in (p if isinstance(p, list) else [p]):
                    for i in ids_of(q_.pid): owners[i] = k
            s0 = progs(); t0 = time.time()
            time.sleep(secs)
            s1 = progs(); dt = time.time() - t0
            every = [q_ for p in procs.values() for q_ in (p if isinstance(p, list) else [p])]
            for p in every: p.send_signal(signal.SIGINT)
            for p in every:
                try: p.communicate(timeout=120)
                except Exception: p.kill()
            row = {}
            for k, p in procs.items():
                per = {}
                for (owner, name), (t1, c1) in s1.items():
                    if owner != k: continue
                    t0_, c0_ = s0.get((owner, name), (0, 0))
                    per[name] = (t1 - t0_, c1 - c0_)
                sw = per.get("sched_switch", (0, 1))[1] or 1
                tot = sum(t for t, c in per.values())
                row[k] = {n: (t / c if c else 0, c / dt, t / 1e6 / dt) for n, (t, c) in per.items()}
                row[k]["TOTAL/switch"] = (tot / sw, sw / dt, tot / 1e6 / dt)
            res["A"].append(row["A"]); res["B"].append(row["B"])
            names = sorted(set(row["A"]) | set(row["B"]))
            print(f"pair {pair+1} {'A' if a_first else 'B'} first:", flush=True)
            for n in names:
                a = row["A"].get(n, (0, 0, 0)); b = row["B"].get(n, (0, 0, 0))
                if a[1] < 5 and b[1] < 5 and n != "TOTAL/switch": continue
                print(f"  {n:22} A {a[0]:7.0f} ns ({a[1]:7.0f}/s {a[2]:5.2f} ms/s)  B {b[0]:7.0f} ns ({b[2]:5.2f} ms/s)  B/A {b[0]/a[0] if a[0] else float('nan'):.3f}", flush=True)
    print("geomean B/A over runs:")
    names = sorted(set(res["A"][0]))
    for n in names:
        rs = [rb[n][0] / ra[n][0] for ra, rb in zip(res["A"], res["B"]) if n in ra and n in rb and ra[n][0] > 0 and rb[n][0] > 0]
        if not rs or res["A"][0].get(n, (0, 0))[1] < 5 and n != "TOTAL/switch": continue
        m = sum(math.log(r) for r in rs) / len(rs)
        print(f"  {n:22} {math.exp(m):.3f}  range {min(rs):.3f}-{max(rs):.3f}  (n={len(rs)})")
finally:
    load.terminate(); load.wait()
    try: open("/proc/sys/kernel/bpf_stats_enabled", "w").write("0")
    except Exception: pass
