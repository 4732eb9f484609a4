#!/usr/bin/env bash
# Soak: Herald's APNs transport (libnghttp2 engine) on ONE connection to a `herald sandbox`
# that ends connections on purpose, with herald bench's RSS sampled every second.
#
#   scripts/soak-transport.sh                         # 2,000,000 notifications (default)
#   COUNT=200000 SKIP_BUILD=1 scripts/soak-transport.sh
#
# The sandbox counts its answers over all connections (`faults.scope: sandbox`): after every
# GOAWAY_EVERY-th answer it sends GOAWAY (reason Shutdown) on the connection that gave it, after
# every DROP_EVERY-th it closes that connection abruptly (a drop wins when both fall on one
# answer). Herald's pool keeps one connection and opens the next after each.
# Nothing lost: sent == succeeded + failed, every failure with its reason (an abrupt drop fails
# the streams in flight as "may have been processed"; they are never resent). RSS flat: the
# last sample is within 10% of the sample taken after the first tenth of the run.
# Only 127.0.0.1 is used; every process and wait is bounded; what is started here is stopped.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

COUNT=${COUNT:-2000000}
GOAWAY_EVERY=${GOAWAY_EVERY:-100000}
DROP_EVERY=${DROP_EVERY:-150000}
CONCURRENCY=${CONCURRENCY:-500}
TENANT=${TENANT:-demo-token}

require_tools python3:python3
build_herald
make_workdir herald-soak

status=0
phase=soak
config="$WORK/sandbox-$phase.yaml"
# The shipped sandbox.yaml with both faults set, counted over the sandbox.
sed -e "s#: sandbox/#: $ROOT/config/sandbox/#" -e "s#^  goaway_after: null#  goaway_after: $GOAWAY_EVERY#" \
    -e "s#^  drop_after: null#  drop_after: $DROP_EVERY#" -e "s#^  scope: connection#  scope: sandbox#" \
    "$ROOT/config/sandbox.yaml" > "$config"
for key in "goaway_after: [0-9]" "drop_after: [0-9]" "scope: sandbox"; do
    grep -q "^  $key" "$config" || { echo "config/sandbox.yaml changed: update soak-transport.sh" >&2; exit 2; }
done
{
    "$HERALD" sandbox --config "$config" --host 127.0.0.1 --port 0 --log-level warning > "$WORK/sandbox-$phase.log" 2>&1 &
    sandbox_pid=$!
    PIDS+=("$sandbox_pid")
    for _ in $(seq 1 100); do grep -q '^port:' "$WORK/sandbox-$phase.log" 2>/dev/null && break; sleep 0.1; done
    port=$(awk '/^port:/ {print $2}' "$WORK/sandbox-$phase.log")
    [[ -n "$port" ]] || { echo "the sandbox did not start:" >&2; cat "$WORK/sandbox-$phase.log" >&2; exit 1; }
    rm -rf "$WORK/tenants"
    demo_tenant "$TENANT" "$port" "$WORK/tenants"

    echo "== $COUNT notifications, 1 connection, $CONCURRENCY in flight; GOAWAY after every ${GOAWAY_EVERY}th answer, a drop after every ${DROP_EVERY}th"
    timeout 3600 "$HERALD" bench --tenants "$WORK/tenants" --tenant "$TENANT" --count "$COUNT" \
        --connections 1 --concurrency "$CONCURRENCY" --warmup 1000 --through transport --json > "$WORK/bench-$phase.json" 2> "$WORK/bench-$phase.err" &
    bench_pid=$!
    PIDS+=("$bench_pid")
    # RSS of herald bench itself (the child of `timeout`), not of the timeout process.
    herald_pid=""
    for _ in $(seq 1 50); do herald_pid=$(pgrep -P "$bench_pid" | head -n 1) && [[ -n "$herald_pid" ]] && break; sleep 0.1; done
    [[ -n "$herald_pid" ]] || { echo "herald bench did not start" >&2; cat "$WORK/bench-$phase.err" >&2; exit 1; }
    : > "$WORK/rss-$phase.txt"
    while kill -0 "$herald_pid" 2>/dev/null; do
        awk '/^VmRSS:/ {print $2}' "/proc/$herald_pid/status" 2>/dev/null >> "$WORK/rss-$phase.txt" || true
        sleep 1
    done
    wait "$bench_pid" || true
    kill "$sandbox_pid" 2>/dev/null || true
    wait "$sandbox_pid" 2>/dev/null || true

    python3 - "$WORK/bench-$phase.json" "$WORK/rss-$phase.txt" "$COUNT" <<'EOF' || status=1
import json, sys
text = open(sys.argv[1]).read().strip().splitlines()
if not text:
    print("   herald bench printed nothing"); sys.exit(1)
f = json.loads(text[-1])
rss = [int(x) for x in open(sys.argv[2]).read().split() if x.strip()]
count = int(sys.argv[3])
accounted = f["succeeded"] + f["failed"]
print("   sent %d, succeeded %d, failed %d %s; %.0f/s; %.1f us CPU a notification" % (
    f["sent"], f["succeeded"], f["failed"], json.dumps(f["failed_by_reason"]),
    f["notifications_per_second"], f["cpu_us_per_notification"]))
ok = f["sent"] == count and accounted == count
print("   nothing lost (sent == succeeded + failed == %d): %s" % (count, "yes" if ok else "NO"))
if len(rss) >= 10:
    base = rss[len(rss) // 10]
    last = rss[-2] if len(rss) > 1 else rss[-1]
    growth = (last - base) / base
    print("   RSS (KiB) after 10%%: %d, max %d, last %d: %+.1f%% (%d samples): %s" % (
        base, max(rss), last, growth * 100, len(rss), "flat" if abs(growth) <= 0.10 else "NOT flat"))
    ok = ok and abs(growth) <= 0.10
else:
    print("   RSS: too few samples (%d) to judge" % len(rss))
sys.exit(0 if ok else 1)
EOF
}
exit $status
