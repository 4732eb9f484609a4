#!/usr/bin/env bash
# Benchmark: what the router's path costs over the transport's. `herald bench` sends the same
# workload to one `herald sandbox` four ways, alternated in one window:
#   transport  `--through transport`: the tenant's transport alone, by callback (the floor);
#   tasks      the transport alone, sent by async tasks as the router's way below is (what the
#              tasks cost, apart from the router's path);
#   router     the path of every API send: the router, the tenant's plugins (the demo tenant's
#              `feedback` and `metrics`, and a `rate-limit` far above the rate, added here), the
#              transport; async sends from tasks;
#   callbacks  the same path as a batch item takes it: one attempt each, by callback.
#
#   scripts/bench-router.sh                          # defaults below
#   SKIP_BUILD=1 ROUNDS=5 scripts/bench-router.sh    # reuse .build/release/herald
#   COUNT=100000 CONCURRENCY=200 scripts/bench-router.sh
#
# Printed per round: notifications a second and herald's CPU a notification for each way; then
# the router's and the callbacks' CPU and rate as medians of the rounds' ratios to the
# transport's, and the router's CPU against the transport sent by tasks. Goal: the router at
# most 1.25x the transport's CPU a notification and at least 80% of its rate. Only 127.0.0.1 is
# used; the sandbox started here is stopped on exit.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

COUNT=${COUNT:-50000}
CONNECTIONS=${CONNECTIONS:-1}
CONCURRENCY=${CONCURRENCY:-100}
ROUNDS=${ROUNDS:-3}
TENANT=${TENANT:-demo-token}

require_tools python3:python3
build_herald
make_workdir herald-bench-router
trap cleanup_workdir EXIT

start_sandbox "$WORK/sandbox.log" --log-level warning
demo_tenant "$TENANT" "$SANDBOX_PORT" "$WORK/tenants"
grep -q '^plugins:$' "$WORK/tenants/$TENANT.yaml" || { echo "$TENANT.yaml has no plugins: list" >&2; exit 1; }
sed -i 's/^plugins:$/plugins:\n  - name: rate-limit\n    options: {per_second: 10000000, burst: 10000000}/' "$WORK/tenants/$TENANT.yaml"

run_bench() { # extra herald bench arguments -> "rate cpu_us"
    local out
    out=$(timeout 600 "$HERALD" bench --tenants "$WORK/tenants" --tenant "$TENANT" --count "$COUNT" \
        --connections "$CONNECTIONS" --concurrency "$CONCURRENCY" --json "$@" 2>&1) || true
    bench_rate_cpu <<<"$out"
}

ratio() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { printf f, (b > 0 ? a / b : 0) }'; }

echo "== $COUNT notifications, $CONNECTIONS connection(s), $CONCURRENCY in flight, $ROUNDS rounds, cores $(nproc)"
run_bench --through transport > /dev/null   # warm-up
r_cpu=(); r_rate=(); c_cpu=(); c_rate=(); a_cpu=()
for round in $(seq 1 "$ROUNDS"); do
    read -r t_rate t_us < <(run_bench --through transport)
    read -r a_rps a_us < <(run_bench --through transport --callers loops)
    read -r r_rps r_us < <(run_bench --through router)
    read -r c_rps c_us < <(run_bench --through router --callers callbacks)
    printf "   round %d: transport %8.0f/s %5.1f us   tasks %8.0f/s %5.1f us   router %8.0f/s %5.1f us   callbacks %8.0f/s %5.1f us\n" \
        "$round" "$t_rate" "$t_us" "$a_rps" "$a_us" "$r_rps" "$r_us" "$c_rps" "$c_us"
    r_cpu+=("$(ratio "$r_us" "$t_us" "%.2f")"); r_rate+=("$(ratio "$r_rps" "$t_rate" "%.2f")")
    c_cpu+=("$(ratio "$c_us" "$t_us" "%.2f")"); c_rate+=("$(ratio "$c_rps" "$t_rate" "%.2f")")
    a_cpu+=("$(ratio "$r_us" "$a_us" "%.2f")")
done
printf "router:    %sx the transport's CPU a notification, %s of its rate (medians of the rounds)\n" \
    "$(median "${r_cpu[@]}")" "$(median "${r_rate[@]}")"
printf "router:    %sx the CPU a notification of the transport sent by tasks (median of the rounds)\n" "$(median "${a_cpu[@]}")"
printf "callbacks: %sx the transport's CPU a notification, %s of its rate (medians of the rounds)\n" \
    "$(median "${c_cpu[@]}")" "$(median "${c_rate[@]}")"
