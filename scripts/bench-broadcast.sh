#!/usr/bin/env bash
# Benchmark: broadcasts against device sends through the same path. `herald bench` sends to one
# `herald sandbox` (its device port and its channel management port), one connection, the same
# payload size, the two kinds alternated in one window:
#   device     device notifications (`/3/device/<token>`), through the router as an API send;
#   broadcast  Live Activity updates on one channel (`/4/broadcasts/apps/<bundle>`), the channel
#              made for each run with the tenant's credential, through the same router.
#
#   scripts/bench-broadcast.sh                          # defaults below
#   SKIP_BUILD=1 ROUNDS=5 scripts/bench-broadcast.sh    # reuse .build/release/herald
#
# Printed per round: notifications a second and herald's CPU a notification for each kind; then
# the broadcasts' rate and CPU as medians of the rounds' ratios to the device sends'. Only
# 127.0.0.1 is used; the sandbox started here is stopped on exit.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

COUNT=${COUNT:-50000}
CONCURRENCY=${CONCURRENCY:-100}
PAYLOAD=${PAYLOAD:-256}
ROUNDS=${ROUNDS:-3}
TENANT=${TENANT:-demo-token}

require_tools python3:python3
build_herald
make_workdir herald-bench-broadcast
trap cleanup_workdir EXIT

start_sandbox "$WORK/sandbox.log" --log-level warning
[[ -n "${CHANNELS_PORT:-}" ]] || { echo "the sandbox printed no channels port" >&2; exit 1; }
demo_tenant "$TENANT" "$SANDBOX_PORT" "$WORK/tenants" "$CHANNELS_PORT"

run_bench() { # extra herald bench arguments -> "rate cpu_us"
    local out
    out=$(timeout 600 "$HERALD" bench --tenants "$WORK/tenants" --tenant "$TENANT" --count "$COUNT" --connections 1 \
        --concurrency "$CONCURRENCY" --payload-bytes "$PAYLOAD" --json "$@" 2>&1) || true
    bench_rate_cpu <<<"$out"
}

ratio() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { printf f, (b > 0 ? a / b : 0) }'; }

echo "== $COUNT notifications, 1 connection, $CONCURRENCY in flight, $PAYLOAD-byte payloads, $ROUNDS rounds, cores $(nproc)"
run_bench > /dev/null   # warm-up
b_cpu=(); b_rate=()
for round in $(seq 1 "$ROUNDS"); do
    read -r d_rate d_us < <(run_bench)
    read -r b_rps b_us < <(run_bench --broadcast)
    printf "   round %d: device %8.0f/s %5.1f us   broadcast %8.0f/s %5.1f us\n" "$round" "$d_rate" "$d_us" "$b_rps" "$b_us"
    b_cpu+=("$(ratio "$b_us" "$d_us" "%.2f")"); b_rate+=("$(ratio "$b_rps" "$d_rate" "%.2f")")
done
printf "broadcasts: %s of the device sends' rate, %sx their CPU a notification (medians of the rounds)\n" \
    "$(median "${b_rate[@]}")" "$(median "${b_cpu[@]}")"
