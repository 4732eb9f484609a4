#!/usr/bin/env bash
# Benchmark: the CPU an idle `herald serve` spends with many tenants. COUNT tenant files from
# `herald bench-tenants --directory` (token tenants with the rate-limit, feedback and metrics
# plugins, their endpoints never opened), `herald serve` on them as an operator runs it (the
# tenants directory watched, the job runner's scans, the webhook outbox, the embedded SQLite
# store), nothing sent: once it answers /readyz and SETTLE seconds have passed, its CPU time
# (user + system, from /proc) over SECONDS seconds, per ROUNDS rounds.
#
#   scripts/bench-idle.sh                                     # 10,000 tenants, 3 rounds of 30 s
#   SKIP_BUILD=1 COUNT=1000 SECONDS_IDLE=20 scripts/bench-idle.sh
#   HERALD=/path/to/other/herald SKIP_BUILD=1 scripts/bench-idle.sh   # another build, same files
#
# Printed per round: CPU milliseconds a second of wall time. Only 127.0.0.1 is used; every
# process started here is stopped on exit.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

COUNT=${COUNT:-10000}
SECONDS_IDLE=${SECONDS_IDLE:-30}
SETTLE=${SETTLE:-10}
ROUNDS=${ROUNDS:-3}

require_tools curl:curl
build_herald
make_workdir herald-bench-idle
TICKS=$(getconf CLK_TCK)

echo "== $COUNT tenant files"
"$HERALD" bench-tenants --count "$COUNT" --directory "$WORK/files" | grep -E '^tenants loaded' || true

for round in $(seq 1 "$ROUNDS"); do
    rm -rf "$WORK/data"
    cat > "$WORK/herald.yaml" <<EOF
tenants_dir: $WORK/files/tenants
listen:
  host: 127.0.0.1
  port: 0
storage_path: $WORK/data/herald.sqlite
log_level: warning
EOF
    "$HERALD" serve --config "$WORK/herald.yaml" > "$WORK/serve.log" 2> "$WORK/serve.err" &
    pid=$!
    PIDS+=("$pid")
    port=""
    for _ in $(seq 1 600); do
        port=$(sed -n 's#^Herald API listening on http://127.0.0.1:\([0-9]*\)$#\1#p' "$WORK/serve.log")
        [[ -n "$port" ]] && break
        sleep 0.1
    done
    [[ -n "$port" ]] || { echo "herald serve did not start:" >&2; cat "$WORK/serve.log" "$WORK/serve.err" >&2; exit 1; }
    for _ in $(seq 1 600); do
        [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" == 200 ]] && break
        sleep 0.1
    done
    sleep "$SETTLE"
    before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    sleep "$SECONDS_IDLE"
    after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    awk -v t=$((after - before)) -v hz="$TICKS" -v s="$SECONDS_IDLE" -v r="$round" \
        'BEGIN { printf "   round %d: %.0f ms of CPU a second idle (%.2f s over %d s)\n", r, t * 1000 / hz / s, t / hz, s }'
done
