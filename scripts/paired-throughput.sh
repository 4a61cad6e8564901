#!/bin/bash
# Paired throughput, ours vs libbpf-tools offcputime, for narrowing down where a throughput
# gap comes from (an investigation tool; `cargo xtask bench` is the benchmark of record).
#
#   scripts/paired-throughput.sh PORT [PAIRS] [SECS] [-- extra profiler args]
#
# Needs an nginx with its workers listening on 127.0.0.1:PORT (e.g. the bench's, or any),
# wrk, /usr/sbin/offcputime and target/release/profiler (`cargo xtask build`); run as root.
# Each pair runs wrk once under ours and once under offcputime (order alternating), one
# instance per worker, 4 s after the tools start; prints ours/offcputime per pair and the
# median and wins at the end. The first pair runs cold: judge by the later ones.
set -euo pipefail
PORT=${1:?usage: $0 PORT [PAIRS] [SECS] [-- profiler args]}
PAIRS=${2:-12}
SECS=${3:-6}
shift $(( $# < 3 ? $# : 3 ))
[ "${1:-}" = "--" ] && shift
OURS_ARGS=("$@")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d)
mapfile -t WORKERS < <(ss -ltnpH "sport = :$PORT" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -un)
[ ${#WORKERS[@]} -gt 0 ] || { echo "nothing listens on port $PORT" >&2; exit 1; }

run() {
  local pids=()
  for w in "${WORKERS[@]}"; do
    if [ "$1" = ours ]; then
      "$ROOT/target/release/profiler" -p "$w" -d 600 -o "$OUT/ours-$w.svg" "${OURS_ARGS[@]}" \
        > /dev/null 2>&1 &
    else
      /usr/sbin/offcputime -p "$w" 600 > /dev/null 2>&1 &
    fi
    pids+=($!)
  done
  sleep 4
  wrk -t2 -c64 -d"${SECS}"s "http://127.0.0.1:$PORT/" | awk '/Requests\/sec/{print $2}'
  kill -INT "${pids[@]}"
  wait "${pids[@]}" || true
}

ratios=()
for i in $(seq 1 "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then a=$(run ours); b=$(run off); else b=$(run off); a=$(run ours); fi
  r=$(python3 -c "print(f'{$a/$b:.3f}')")
  ratios+=("$r")
  echo "pair $i: ours $a req/s, offcputime $b req/s, ratio $r"
done
python3 - "${ratios[@]}" <<'PY'
import statistics, sys
r = [float(x) for x in sys.argv[1:]]
print(f"ours/offcputime: median {statistics.median(r):.3f}, ours ahead in {sum(x >= 1 for x in r)} of {len(r)} pairs")
PY
rm -rf "$OUT"
