#!/bin/sh
# Post-processing cost of the profiler (issue 23 item 4), on two captures:
#   make   40 one-function C files built by `make -j2` (~120 short processes, ~1 s)
#   nginx  2 nginx workers under `wrk -t2 -c64` for SECS seconds (default 20)
# Prints the profiler's -v timing lines (symbolization per file with -v) and /usr/bin/time -v's
# CPU figures; KEEP=1 keeps the scratch directory (the outputs and the whole stderr).
# Run as root: bench/scripts/postproc.sh make|nginx [SECS] [PROFILER]
# (PROFILER defaults to target/release/profiler; SECS applies to nginx.)
set -eu
what=${1:-make}
secs=${2:-20}
here=$(cd "$(dirname "$0")/../.." && pwd)
profiler=${3:-$here/target/release/profiler}
dir=$(mktemp -d /tmp/postproc-XXXXXX)
# Anything started here is stopped on the way out, whatever happened.
nginx_pid=
wrk_pid=
cleanup() {
    [ -n "$wrk_pid" ] && kill "$wrk_pid" 2>/dev/null && wait "$wrk_pid" 2>/dev/null
    [ -n "$nginx_pid" ] && kill -QUIT "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null
    [ -n "${KEEP:-}" ] && echo "kept $dir" >&2 || rm -rf "$dir"
}
trap cleanup EXIT INT TERM

report() {
    grep -E 'post-processing took|symboliz|took|Elapsed|User time|System time|Maximum resident' "$dir/err" || true
}

case $what in
make)
    mkdir -p "$dir/src"
    i=0
    objs=
    while [ $i -lt 40 ]; do
        printf 'int f%d(int x) { return x * %d + 1; }\n' $i $i >"$dir/src/f$i.c"
        objs="$objs f$i.o"
        i=$((i + 1))
    done
    printf 'int main(void) { return 0; }\n' >"$dir/src/main.c"
    {
        printf 'all: prog\n'
        printf 'prog: main.o%s\n\t$(CC) -o $@ $^\n' "$objs"
        printf '%%.o: %%.c\n\t$(CC) -O2 -c -o $@ $<\n'
    } >"$dir/src/Makefile"
    /usr/bin/time -v "$profiler" -v --secs 30 -o "$dir/out.svg" -- make -s -j2 -C "$dir/src" \
        >"$dir/out" 2>"$dir/err"
    report
    ;;
nginx)
    mkdir -p "$dir/html" "$dir/logs"
    head -c 512 /dev/zero | tr '\0' x >"$dir/html/index.html"
    port=$((18000 + $$ % 2000))
    cat >"$dir/nginx.conf" <<EOF
worker_processes 2;
daemon off;
master_process on;
pid $dir/nginx.pid;
error_log $dir/logs/error.log;
events { worker_connections 1024; }
http { access_log off; server { listen 127.0.0.1:$port; root $dir/html; } }
EOF
    /usr/sbin/nginx -c "$dir/nginx.conf" -p "$dir" >/dev/null &
    nginx_pid=$!
    sleep 1
    wrk -t2 -c64 -d$((secs + 5))s "http://127.0.0.1:$port/" >/dev/null &
    wrk_pid=$!
    sleep 1
    /usr/bin/time -v "$profiler" -v -p "$nginx_pid" --secs "$secs" -o "$dir/out.svg" \
        >"$dir/out" 2>"$dir/err"
    report
    ;;
*)
    echo "usage: $0 make|nginx [SECS] [PROFILER]" >&2
    exit 2
    ;;
esac
