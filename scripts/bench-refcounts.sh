#!/usr/bin/env bash
# Benchmark: what one notification costs in allocations and reference counting, counted rather
# than timed. `perf` probes on glibc's `malloc` and on the Swift runtime's `swift_retain` and
# `swift_release` count every call `herald bench` makes, against one `herald sandbox`; two runs
# of different sizes are taken apart, so that start-up and warm-up cancel out and what is left is
# the count a notification. Counts do not drift with the machine's load the way CPU time does:
# a change to the send path shows here to the call, where CPU figures need many alternated rounds.
# Three ways: straight to a transport of the tenant's own (the floor), through the router by
# callbacks (as a batch item goes) and through the router by async sends (as the API's). The
# demo tenant's plugins (`feedback`, `metrics`) and a `rate-limit` far above the rate, as in
# scripts/bench-router.sh. A batch item's counts: PERF_STAT=probe_libc:herald_malloc,probe_libswiftCore:herald_retain,probe_libswiftCore:herald_release with
# scripts/profile-batch.sh once the probes exist (this script adds them and leaves them).
#
#   scripts/bench-refcounts.sh                       # as root (perf probe adds uprobes)
#   SKIP_BUILD=1 HERALD=/path/to/herald scripts/bench-refcounts.sh
#   SMALL=10000 LARGE=30000 scripts/bench-refcounts.sh
#
# Printed per way: mallocs, retains and releases a notification.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SMALL=${SMALL:-10000}
LARGE=${LARGE:-30000}
TENANT=${TENANT:-demo-token}

require_tools python3:python3 perf:linux-perf
build_herald
make_workdir herald-bench-refcounts
trap cleanup_workdir EXIT

# The libraries herald is linked with, and a probe on each counted function (added once).
libc=$(ldd "$HERALD" | awk '$1 ~ /^libc\.so/ {print $3}')
swiftcore=$(ldd "$HERALD" | awk '$1 ~ /^libswiftCore\.so/ {print $3}')
[[ -n "$libc" && -n "$swiftcore" ]] || { echo "cannot find libc or libswiftCore among herald's libraries" >&2; exit 2; }
add_probe() { # library event function
    perf probe -l 2>/dev/null | grep -q "$2 " || perf probe -q -x "$1" -a "$2=$3" > /dev/null
}
add_probe "$libc" herald_malloc malloc
add_probe "$swiftcore" herald_retain swift_retain
add_probe "$swiftcore" herald_release swift_release
events=$(perf probe -l 2>/dev/null | awk '/herald_(malloc|retain|release) / {print $1}' | paste -sd, -)

start_sandbox "$WORK/sandbox.log" --log-level warning
demo_tenant "$TENANT" "$SANDBOX_PORT" "$WORK/tenants"
sed -i 's/^plugins:$/plugins:\n  - name: rate-limit\n    options: {per_second: 10000000, burst: 10000000}/' "$WORK/tenants/$TENANT.yaml"

count() { # count N bench-arguments... -> the probes' totals, one "event count" a line
    perf stat -x, -e "$events" -o "$WORK/stat" "$HERALD" bench --tenants "$WORK/tenants" --tenant "$TENANT" --count "$1" \
        --warmup 1000 --connections 1 --concurrency 100 "${@:2}" > /dev/null 2>&1
    awk -F, '$1 ~ /^[0-9]+$/ { sub(/.*:/, "", $3); print $3, $1 }' "$WORK/stat"
}

echo "== a notification's calls: count $LARGE less count $SMALL, divided by the difference"
for way in "transport:--through transport" "router by callbacks:--through router --callers callbacks" "router by async sends:--through router"; do
    name=${way%%:*}
    read -r -a arguments <<< "${way#*:}"
    small=$(count "$SMALL" "${arguments[@]}")
    large=$(count "$LARGE" "${arguments[@]}")
    python3 -c '
import sys
name, small, large, n = sys.argv[1], dict(l.split() for l in sys.argv[2].splitlines()), dict(l.split() for l in sys.argv[3].splitlines()), int(sys.argv[4])
figure = lambda e: (int(large[e]) - int(small[e])) / n
print("%-22s mallocs %6.2f   retains %7.2f   releases %7.2f" % (name, figure("herald_malloc"), figure("herald_retain"), figure("herald_release")))
' "$name" "$small" "$large" "$((LARGE - SMALL))"
done
