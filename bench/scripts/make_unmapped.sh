#!/bin/bash
# Profiles `make -j2` over 40 small C files (the churn test's build) N times and prints, per
# run, the share of off-CPU and on-CPU time whose stack has an [unmapped] frame.
# usage: bench/scripts/make_unmapped.sh target/release/profiler N
set -eu
bin=$1 runs=${2:-5}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
for i in $(seq 0 39); do
  echo "int f$i(int x) { int s = 0; for (int i = 0; i < x; i++) s += i * $i; return s; }" > "$d/f$i.c"
done
printf 'SRCS := $(wildcard f*.c)\nall: $(SRCS:.c=.o)\n%%.o: %%.c\n\tcc -O2 -c $< -o $@\n' > "$d/Makefile"
for _ in $(seq 1 "$runs"); do
  rm -f "$d"/*.o
  "$bin" -v --secs 120 -o "$d/make.svg" --folded "$d/make.folded" -- make -s -j2 -C "$d" > "$d/log" 2>&1
  python3 - "$d/make.folded" <<'PY'
import sys
off = un = on = onun = 0
for line in open(sys.argv[1]):
    stack, count = line.rsplit(' ', 1)
    count = int(count)
    if '[off-cpu' in stack:
        off += count
        un += count if '[unmapped]' in stack else 0
    else:
        on += count
        onun += count if '[unmapped]' in stack else 0
print(f"off-CPU with [unmapped]: {un} of {off} µs ({100 * un / max(off, 1):.2f} %); "
      f"on-CPU: {onun} of {on} µs ({100 * onun / max(on, 1):.2f} %)")
PY
done
