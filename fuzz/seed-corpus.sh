#!/bin/sh
# Seeds corpus/ with real inputs (never committed: corpus/ is gitignored): small ELF files
# for eh_frame, /proc maps and a perf map for proc_text, the recorded JVMs of seeds/jvm (the
# reader's unit tests check they are the JVMs they read) for jvm.
set -eu
cd "$(dirname "$0")"
mkdir -p corpus/eh_frame corpus/proc_text corpus/perf_records corpus/jvm
cp seeds/jvm/* corpus/jvm/
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/t.c" <<'C'
#include <stdio.h>
__attribute__((noinline)) long fp(long n) { long a[4] = {n, n + 1, n + 2, n + 3}; printf("%ld", a[1]); return a[0] + a[3]; }
int main(int argc, char **argv) { return (int)fp(argc); }
C
for flags in "-O0" "-O2 -fomit-frame-pointer" "-O2 -fno-omit-frame-pointer" "-O2 -Wl,-z,now" "-O2 -fcf-protection=full -Wl,-z,ibtplt" "-O2 -static-pie" "-O2 -g -fno-asynchronous-unwind-tables" "-O2 -g -gz -fno-asynchronous-unwind-tables"; do
    name=$(echo "$flags" | tr -c 'a-z0-9' '_')
    # shellcheck disable=SC2086
    gcc $flags "$tmp/t.c" -o "corpus/eh_frame/gcc$name" 2>/dev/null || true
done
for f in /bin/true /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 /lib/x86_64-linux-gnu/libc.so.6; do
    [ -f "$f" ] && cp "$f" "corpus/eh_frame/$(basename "$f")"
done
cat /proc/self/maps > corpus/proc_text/self-maps

printf '7f0000001000 20 jitted_fn\n7f0000001020 1a LazyCompile:~main /app.js:1\nzz bad line\n' \
    > corpus/proc_text/perf-map
