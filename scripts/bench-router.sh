#!/usr/bin/env bash
# Benchmark: what the router's path costs over the transport's. `herald bench --through router
# --alternate CHUNK` sends the workload through the router (the path of every API send: the
# tenant's plugins, the demo tenant's `feedback` and `metrics` and a `rate-limit` far above the
# rate, added here) and straight to a transport of the tenant's own by callback (the floor), in
# alternating chunks of CHUNK notifications in one process, against one `herald sandbox`: a
# machine whose speed drifts slows both alike. Two ways a round:
#   router     async sends from tasks on the loops of the tenant's connections (as the API's);
#   callbacks  one attempt each by callback (as a batch item goes).
#
#   scripts/bench-router.sh                          # defaults below
#   SKIP_BUILD=1 ROUNDS=5 scripts/bench-router.sh    # reuse .build/release/herald
#   COUNT=100000 CONCURRENCY=200 CHUNK=10000 scripts/bench-router.sh
#
# Printed per round: each way's and its transport's notifications a second and herald's CPU a
# notification; then each way's CPU and rate against the transport's, medians of the rounds.
# Goal: the router at most 1.25x the transport's CPU a notification and at least 80% of its
# rate. Only 127.0.0.1 is used; the sandbox started here is stopped on exit.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

COUNT=${COUNT:-50000}
CONNECTIONS=${CONNECTIONS:-1}
CONCURRENCY=${CONCURRENCY:-100}
ROUNDS=${ROUNDS:-3}
CHUNK=${CHUNK:-5000}
TENANT=${TENANT:-demo-token}

require_tools python3:python3
build_herald
make_workdir herald-bench-router
trap cleanup_workdir EXIT

start_sandbox "$WORK/sandbox.log" --log-level warning
demo_tenant "$TENANT" "$SANDBOX_PORT" "$WORK/tenants"
grep -q '^plugins:$' "$WORK/tenants/$TENANT.yaml" || { echo "$TENANT.yaml has no plugins: list" >&2; exit 1; }
sed -i 's/^plugins:$/plugins:\n  - name: rate-limit\n    options: {per_second: 10000000, burst: 10000000}/' "$WORK/tenants/$TENANT.yaml"

run_bench() { # extra herald bench arguments -> "rate cpu_us transport_rate transport_cpu_us"
    local out
    out=$(timeout 900 "$HERALD" bench --tenants "$WORK/tenants" --tenant "$TENANT" --count "$COUNT" \
        --connections "$CONNECTIONS" --concurrency "$CONCURRENCY" --through router --alternate "$CHUNK" --json "$@" 2>&1) || true
    python3 -c '
import json, sys
text = sys.stdin.read()
try:
    figures = json.loads(text.strip().splitlines()[-1])
    floor = figures["transport"]
except Exception:
    sys.stderr.write("herald bench failed:\n" + text + "\n"); print("0 0 0 0"); sys.exit()
if figures["failed"] or floor["failed"]:
    sys.stderr.write("herald bench failures: %s %s\n" % (figures["failed_by_reason"], floor["failed_by_reason"])); print("0 0 0 0"); sys.exit()
print("%.0f %.1f %.0f %.1f" % (figures["notifications_per_second"], figures["cpu_us_per_notification"],
    floor["notifications_per_second"], floor["cpu_us_per_notification"]))
' <<<"$out"
}

ratio() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { printf f, (b > 0 ? a / b : 0) }'; }

echo "== $COUNT notifications, $CONNECTIONS connection(s), $CONCURRENCY in flight, chunks of $CHUNK, $ROUNDS rounds, cores $(nproc)"
COUNT=10000 run_bench > /dev/null   # warm-up
r_cpu=(); r_rate=(); c_cpu=(); c_rate=()
for round in $(seq 1 "$ROUNDS"); do
    read -r r_rps r_us rt_rps rt_us < <(run_bench)
    read -r c_rps c_us ct_rps ct_us < <(run_bench --callers callbacks)
    printf "   round %d: router %8.0f/s %5.1f us (transport %8.0f/s %5.1f us)   callbacks %8.0f/s %5.1f us (transport %8.0f/s %5.1f us)\n" \
        "$round" "$r_rps" "$r_us" "$rt_rps" "$rt_us" "$c_rps" "$c_us" "$ct_rps" "$ct_us"
    r_cpu+=("$(ratio "$r_us" "$rt_us" "%.2f")"); r_rate+=("$(ratio "$r_rps" "$rt_rps" "%.2f")")
    c_cpu+=("$(ratio "$c_us" "$ct_us" "%.2f")"); c_rate+=("$(ratio "$c_rps" "$ct_rps" "%.2f")")
done
printf "router:    %sx the transport's CPU a notification, %s of its rate (medians of the rounds)\n" \
    "$(median "${r_cpu[@]}")" "$(median "${r_rate[@]}")"
printf "callbacks: %sx the transport's CPU a notification, %s of its rate (medians of the rounds)\n" \
    "$(median "${c_cpu[@]}")" "$(median "${c_rate[@]}")"
