#!/usr/bin/env bash
# Benchmark: the CPU an idle `herald serve` spends with many tenants. COUNT tenant files from
# `herald bench-tenants --directory` (token tenants with the rate-limit, feedback and metrics
# plugins, their endpoints never opened), `herald serve` on them as an operator runs it (the
# tenants directory watched, the job runner's scans, the webhook outbox, the embedded SQLite
# store), nothing sent: once it answers /readyz and SETTLE seconds have passed, its CPU time
# (user + system, from /proc) over SECONDS_IDLE seconds, per ROUNDS rounds. STORE=postgres: the
# store is a throwaway PostgreSQL cluster (scripts/postgres.sh), whose own CPU is printed beside.
#
#   scripts/bench-idle.sh                                     # 10,000 tenants, 3 rounds of 30 s
#   SKIP_BUILD=1 COUNT=1000 SECONDS_IDLE=20 scripts/bench-idle.sh
#   SKIP_BUILD=1 STORE=postgres scripts/bench-idle.sh
#   HERALD=/path/to/other/herald SKIP_BUILD=1 scripts/bench-idle.sh   # another build, same files
#
# Printed per round: CPU milliseconds a second of wall time. Only 127.0.0.1 is used; every
# process started here (PostgreSQL too) is stopped on exit.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

COUNT=${COUNT:-10000}
SECONDS_IDLE=${SECONDS_IDLE:-30}
SETTLE=${SETTLE:-10}
ROUNDS=${ROUNDS:-3}
STORE=${STORE:-sqlite}

require_tools curl:curl
build_herald
make_workdir herald-bench-idle
TICKS=$(getconf CLK_TCK)

STORAGE_YAML=""
PG_DIR=""
if [[ "$STORE" == postgres ]]; then
    # A directory of its own: the cluster runs as the postgres user, who cannot enter WORK.
    PG_DIR=$(mktemp -d /tmp/herald-bench-idle-pg.XXXXXX)
    trap 'HERALD_POSTGRES_DIR=$PG_DIR "$ROOT/scripts/postgres.sh" stop >/dev/null 2>&1 || true; rm -rf "$PG_DIR"; cleanup_workdir' EXIT
    exported=$(HERALD_POSTGRES_DIR=$PG_DIR "$ROOT/scripts/postgres.sh" start)
    url=${exported#export HERALD_TEST_POSTGRES_URL=}
    # The URL without its password; the password apart, from the environment.
    export HERALD_POSTGRES_PASSWORD
    HERALD_POSTGRES_PASSWORD=$(sed -E 's#^postgres://[^:]*:([^@]*)@.*#\1#' <<<"$url")
    STORAGE_YAML="storage:
  postgres:
    url: $(sed -E 's#^postgres://([^:]*):[^@]*@#postgres://\1@#' <<<"$url")
    password: env:HERALD_POSTGRES_PASSWORD"
elif [[ "$STORE" != sqlite ]]; then
    echo "STORE must be sqlite or postgres" >&2
    exit 2
fi

# PostgreSQL's CPU ticks: the postmaster's own and its children's, live and ended; 0 without it.
postgres_ticks() {
    local pidfile=$PG_DIR/data/postmaster.pid main
    [[ -n "$PG_DIR" && -f "$pidfile" ]] || { echo 0; return; }
    main=$(head -n1 "$pidfile")
    { awk '{print $14 + $15 + $16 + $17}' "/proc/$main/stat"
      for child in $(pgrep -P "$main"); do awk '{print $14 + $15}' "/proc/$child/stat" 2>/dev/null || true; done
    } | awk '{t += $1} END {print t + 0}'
}

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
$STORAGE_YAML
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
    pg_before=$(postgres_ticks)
    sleep "$SECONDS_IDLE"
    after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    pg_after=$(postgres_ticks)
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    awk -v t=$((after - before)) -v p=$((pg_after - pg_before)) -v hz="$TICKS" -v s="$SECONDS_IDLE" -v r="$round" -v store="$STORE" \
        'BEGIN { printf "   round %d (%s): %.0f ms of CPU a second idle (%.2f s over %d s)", r, store, t * 1000 / hz / s, t / hz, s
                 if (store == "postgres") printf "; PostgreSQL %.0f ms a second", p * 1000 / hz / s
                 printf "\n" }'
done
