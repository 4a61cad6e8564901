#!/bin/bash
# Where the profiler's cost goes on a whole PostgreSQL cluster (the postmaster's PID, its
# backends followed) under `pgbench -c 4 -j 2`: transactions/s before, during and after a
# capture, the BPF programs' time (bpf_stats, two `bpftool prog show` snapshots around an 8 s
# pgbench inside the window) and the profiler process's own CPU (user + system, /proc/PID/stat)
# over the same seconds. One run is noisy (checkpoints): read the ms/s, not the tps.
#
# usage (root): pg_cost.sh PROFILER_BINARY [profiler args...]
# Needs the cluster ab_postgres.py uses: /tmp/wc-pg, port 55432 (initdb -A trust; pg_ctl -o
# "-p 55432 -k /tmp/wc-pg -c listen_addresses='' -c synchronous_commit=on"; pgbench -i -s 10).
set -euo pipefail
BIN=$1; shift
PG=$(head -1 /tmp/wc-pg/data/postmaster.pid)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo 1 > /proc/sys/kernel/bpf_stats_enabled
pb() { pgbench -h /tmp/wc-pg -p 55432 -U postgres -c 4 -j 2 -T "$1" postgres 2>/dev/null | grep -o "tps = [0-9.]*"; }
snap() {
    bpftool prog show --json | python3 -c '
import json, sys
ours = {"sched_switch", "sched_waking", "on_cpu_sample", "sched_wakeup_new", "sched_process_e", "sched_process_f"}
print(json.dumps({p["name"]: (p["run_time_ns"], p["run_cnt"]) for p in json.load(sys.stdin)
                  if p["name"] in ours and p.get("run_time_ns")}))'
}
echo "before:  $(pb 6)"
"$BIN" --pid "$PG" --secs 12 -o "$OUT/pg.svg" "$@" 2>"$OUT/err" >/dev/null &
P=$!
until grep -q capturing "$OUT/err"; do sleep 0.1; done
s1=$(snap); c1=$(awk '{print $14 + $15}' "/proc/$P/stat"); t1=$(date +%s.%N)
during=$(pb 8)
s2=$(snap); c2=$(awk '{print $14 + $15}' "/proc/$P/stat"); t2=$(date +%s.%N)
wait "$P"
echo "during:  $during"
python3 - "$s1" "$s2" "$c1" "$c2" "$t1" "$t2" "$(getconf CLK_TCK)" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
c1, c2, t1, t2, hz = map(float, sys.argv[3:])
secs = t2 - t1
total = 0
for name in sorted(b):
    ns = b[name][0] - a.get(name, (0, 0))[0]
    n = b[name][1] - a.get(name, (0, 0))[1]
    total += ns
    print(f"  {name}: {ns / secs / 1e6:.1f} ms/s, {n / secs / 1e3:.1f} k events/s, {ns / max(n, 1):.0f} ns/event")
print(f"  BPF programs {total / secs / 1e6:.1f} ms/s; the profiler process {(c2 - c1) / hz / secs * 1e3:.1f} ms/s of CPU")
PY
echo "after:   $(pb 6)"
