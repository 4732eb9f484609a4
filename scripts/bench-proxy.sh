#!/usr/bin/env bash
# Benchmark: `herald bench` through an outbound proxy against direct, the same tenant and
# workload, alternated in one window: tinyproxy (HTTP CONNECT) and danted (SOCKS5), each started
# here on a free port of 127.0.0.1 with `herald sandbox` as the target.
#
#   scripts/bench-proxy.sh                          # defaults below
#   SKIP_BUILD=1 ROUNDS=5 scripts/bench-proxy.sh    # reuse .build/release/herald
#   COUNT=100000 CONCURRENCY=200 scripts/bench-proxy.sh
#
# Printed per round: notifications a second and herald's CPU a notification, direct and through
# each proxy; then each proxy's rate and CPU as medians of the rounds' ratios to direct. The
# proxies' own CPU is not herald's and is not counted. Every process started here is stopped on
# exit.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

COUNT=${COUNT:-50000}
CONNECTIONS=${CONNECTIONS:-1}
CONCURRENCY=${CONCURRENCY:-100}
ROUNDS=${ROUNDS:-3}
TENANT=${TENANT:-demo-token}

require_tools tinyproxy:tinyproxy danted:dante-server python3:python3
build_herald
make_workdir herald-bench-proxy

start_sandbox "$WORK/sandbox.log" --log-level warning
demo_tenant "$TENANT" "$SANDBOX_PORT" "$WORK/tenants"

TINY_PORT=$(free_port)
cat > "$WORK/tinyproxy.conf" <<CONF
Port $TINY_PORT
Listen 127.0.0.1
Timeout 600
LogLevel Critical
MaxClients 64
Allow 127.0.0.1
CONF
setsid tinyproxy -d -c "$WORK/tinyproxy.conf" > "$WORK/tinyproxy.log" 2>&1 &
PIDS+=($!)
wait_for_port "$TINY_PORT"

SOCKS_PORT=$(free_port)
unprivileged=""
[[ $(id -u) -eq 0 ]] && unprivileged=$'user.privileged: root\nuser.unprivileged: nobody'
cat > "$WORK/danted.conf" <<CONF
logoutput: $WORK/danted.log
internal: 127.0.0.1 port = $SOCKS_PORT
external: 127.0.0.1
socksmethod: none
clientmethod: none
$unprivileged
client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }
socks pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }
CONF
setsid danted -f "$WORK/danted.conf" -p "$WORK/danted.pid" > /dev/null 2>&1 &
PIDS+=($!)
wait_for_port "$SOCKS_PORT"

stop_proxies() { # setsid made each proxy a group leader: its workers go with it
    local pid
    for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
    cleanup_workdir
}
trap stop_proxies EXIT

run_bench() { # proxy-argument -> "rate cpu_us"
    local out
    out=$(timeout 600 "$HERALD" bench --tenants "$WORK/tenants" --tenant "$TENANT" --count "$COUNT" \
        --connections "$CONNECTIONS" --concurrency "$CONCURRENCY" --proxy "$1" --json 2>&1) || true
    bench_rate_cpu <<<"$out"
}

echo "== $COUNT notifications through the router, $CONNECTIONS connection(s), $CONCURRENCY in flight, $ROUNDS rounds, cores $(nproc)"
run_bench none > /dev/null   # warm-up
rate_ratios=(); cpu_ratios=(); socks_rate=(); socks_cpu=()
for round in $(seq 1 "$ROUNDS"); do
    read -r d_rate d_cpu < <(run_bench none)
    read -r h_rate h_cpu < <(run_bench "http://127.0.0.1:$TINY_PORT")
    read -r s_rate s_cpu < <(run_bench "socks5://127.0.0.1:$SOCKS_PORT")
    printf "   round %d: direct %8.0f/s %5.1f us   tinyproxy %8.0f/s %5.1f us   danted %8.0f/s %5.1f us\n" \
        "$round" "$d_rate" "$d_cpu" "$h_rate" "$h_cpu" "$s_rate" "$s_cpu"
    rate_ratios+=("$(awk -v a="$h_rate" -v b="$d_rate" 'BEGIN { printf "%.0f", (b > 0 ? 100 * a / b : 0) }')")
    cpu_ratios+=("$(awk -v a="$h_cpu" -v b="$d_cpu" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')")
    socks_rate+=("$(awk -v a="$s_rate" -v b="$d_rate" 'BEGIN { printf "%.0f", (b > 0 ? 100 * a / b : 0) }')")
    socks_cpu+=("$(awk -v a="$s_cpu" -v b="$d_cpu" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')")
done
printf "through tinyproxy: %s%% of the direct rate, %sx herald's CPU a notification (medians of the rounds)\n" \
    "$(median "${rate_ratios[@]}")" "$(median "${cpu_ratios[@]}")"
printf "through danted:    %s%% of the direct rate, %sx herald's CPU a notification (medians of the rounds)\n" \
    "$(median "${socks_rate[@]}")" "$(median "${socks_cpu[@]}")"
