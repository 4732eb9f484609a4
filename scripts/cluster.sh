#!/usr/bin/env bash
# Several Herald instances on one machine: a throwaway PostgreSQL cluster (scripts/postgres.sh),
# one `herald sandbox` holding Apple's strict token-update rule (any second provider token for a
# key within 20 minutes is 429 TooManyProviderTokenUpdates, on every connection), and INSTANCES
# `herald serve` processes sharing the database. For a demo, and for scripts/bench-batch.sh.
#
#   scripts/cluster.sh                     # 3 instances; prints their URLs, runs until Ctrl-C
#   INSTANCES=2 SKIP_BUILD=1 scripts/cluster.sh
#   CLAIM_SIZE=2000 JOB_CONCURRENCY=100 POOL_SIZE=10 ...   # the instances' jobs.claim_size (default 500) and more
#   ON_CONNECTION_LOOP=false ...           # the instances' jobs.on_connection_loop (default true)
#   CALL_TIMEOUT=5s ...                    # the instances' storage.postgres.call_timeout (default 30s; none: left out)
#   FRACTION_503=0.05 ...                  # the sandbox answers that share of requests 503 (its faults.fraction_503)
#   HERALD=.build/debug/herald SKIP_BUILD=1 scripts/cluster.sh
#
# Sourced (`source scripts/cluster.sh`), it only defines cluster_start / cluster_stop; cluster_start
# sets CLUSTER_PORTS (the API ports, in order), CLUSTER_PIDS, CLUSTER_SANDBOX_PORT, CLUSTER_DIR.
# Everything listens on 127.0.0.1 only; every wait is bounded; everything started is stopped on
# exit (trap), PostgreSQL included. The demo tenant's API key and the admin token below are DEMO
# values for this local sandbox only.

CLUSTER_API_KEY=hk_demo-token_local-sandbox-only   # the demo-token tenant's DEMO key
CLUSTER_ADMIN_TOKEN=${CLUSTER_ADMIN_TOKEN:-cluster-demo-admin-token}
CLUSTER_PORTS=()
CLUSTER_PIDS=()
CLUSTER_PG_DIR=""

# cluster_start DIR INSTANCES [sqlite]: starts everything under DIR (created). With `sqlite` as the
# third argument, the one instance keeps its state in its SQLite file (no PostgreSQL).
cluster_start() {
    local dir=$1 count=$2 backend=${3:-postgres} i log port
    CLUSTER_DIR=$dir
    mkdir -p "$dir/config" "$dir/tenants"
    local postgres_yaml=""
    if [[ "$backend" != sqlite ]]; then
        CLUSTER_PG_DIR=$(mktemp -d /tmp/herald-cluster-pg.XXXXXX)
        local exported url
        exported=$(HERALD_POSTGRES_DIR=$CLUSTER_PG_DIR "$ROOT/scripts/postgres.sh" start) || return 1
        url=${exported#export HERALD_TEST_POSTGRES_URL=}
        # postgres://herald:PASSWORD@127.0.0.1:PORT/herald -> the URL without it, and the password apart.
        export HERALD_POSTGRES_PASSWORD
        HERALD_POSTGRES_PASSWORD=$(sed -E 's#^postgres://[^:]*:([^@]*)@.*#\1#' <<<"$url")
        local bare
        bare=$(sed -E 's#^postgres://([^:]*):[^@]*@#postgres://\1@#' <<<"$url")
        postgres_yaml="storage:
  postgres:
    url: $bare
    password: env:HERALD_POSTGRES_PASSWORD
    pool_size: ${POOL_SIZE:-10}"
        # CALL_TIMEOUT=none leaves the key out (the server's default applies).
        [[ "${CALL_TIMEOUT:-}" == none ]] || postgres_yaml+="
    call_timeout: ${CALL_TIMEOUT:-30s}"
    fi

    # The sandbox: the demo PKI and key, a free port, the strict token rule, no fault.
    CLUSTER_SANDBOX_PORT=$(free_port)
    sed -e "s#^  port: 2197#  port: $CLUSTER_SANDBOX_PORT#" -e "s#^  channels_port: 2198#  channels_port: 0#" \
        -e "s#: sandbox/#: $ROOT/config/sandbox/#" \
        -e "s#^  token_update_scope: connection#  token_update_scope: strict#" \
        -e "s#^  fraction_503: 0.0 #  fraction_503: ${FRACTION_503:-0.0} #" \
        "$ROOT/config/sandbox.yaml" > "$dir/config/sandbox.yaml"
    grep -q "token_update_scope: strict" "$dir/config/sandbox.yaml" || { echo "cannot set the strict rule" >&2; return 1; }
    local record=()
    [[ -n "${SANDBOX_RECORD:-}" ]] && record=(--record "$SANDBOX_RECORD")
    "$HERALD" sandbox --config "$dir/config/sandbox.yaml" --host 127.0.0.1 --port "$CLUSTER_SANDBOX_PORT" \
        --log-level warning "${record[@]}" > "$dir/sandbox.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    wait_for_port "$CLUSTER_SANDBOX_PORT" 300 || { cat "$dir/sandbox.log" >&2; return 1; }
    demo_tenant demo-token "$CLUSTER_SANDBOX_PORT" "$dir/tenants"
    # REFUSE=1: the demo tenant's `feedback` with its default `refuse` (every send waits for its
    # invalid-token lookup), as a tenant file that names the plugin without options has it.
    if [[ -n "${REFUSE:-}" ]]; then
        sed -i '/^    options: {refuse: \[\]}$/d' "$dir/tenants/demo-token.yaml"
        if grep -q "^    options: {refuse: \[\]}$" "$dir/tenants/demo-token.yaml"; then
            echo "cannot drop refuse: [] from $dir/tenants/demo-token.yaml" >&2
            return 1
        fi
    fi

    for i in $(seq 1 "$count"); do
        mkdir -p "$dir/instance-$i"
        cat > "$dir/instance-$i/herald.yaml" <<YAML
tenants_dir: $dir/tenants
listen:
  host: 127.0.0.1
  port: 0
storage_path: $dir/instance-$i/herald.sqlite
log_level: ${LOG_LEVEL:-notice}
api:
  max_batch_items: ${MAX_BATCH_ITEMS:-100000}
  count_usage: ${COUNT_USAGE:-true}
  max_batch_body_bytes: $(( ${MAX_BATCH_ITEMS:-100000} > 400000 ? ${MAX_BATCH_ITEMS:-100000} * 80 : 33554432 ))
jobs:
  claimant: herald-$i
  concurrency_per_tenant: ${JOB_CONCURRENCY:-100}
  claim_size: ${CLAIM_SIZE:-500}
  on_connection_loop: ${ON_CONNECTION_LOOP:-true}
http:
  rate_limit:                # measured here: the API's own speed, not the per-key limit
    requests_per_second: 1000000
    burst: 1000000
reload:
  watch: false
$postgres_yaml
YAML
        log=$dir/instance-$i/serve.log
        HERALD_ADMIN_TOKEN=$CLUSTER_ADMIN_TOKEN "$HERALD" serve --config "$dir/instance-$i/herald.yaml" \
            > "$log" 2> "$dir/instance-$i/serve.err" &
        CLUSTER_PIDS+=($!)
        port=""
        for _ in $(seq 1 600); do
            port=$(sed -n 's#^Herald API listening on http://127.0.0.1:\([0-9]*\)$#\1#p' "$log" 2>/dev/null)
            [[ -n "$port" ]] && break
            kill -0 "${CLUSTER_PIDS[-1]}" 2>/dev/null || break
            sleep 0.1
        done
        [[ -n "$port" ]] || { echo "herald serve $i did not start:" >&2; cat "$log" "$dir/instance-$i/serve.err" >&2; return 1; }
        CLUSTER_PORTS+=("$port")
    done
}

cluster_stop() {
    local pid
    for pid in "${CLUSTER_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${CLUSTER_PIDS[@]}"; do
        timeout 30 tail --pid="$pid" -f /dev/null 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    CLUSTER_PIDS=()
    CLUSTER_PORTS=()
    if [[ -n "$CLUSTER_PG_DIR" ]]; then
        HERALD_POSTGRES_DIR=$CLUSTER_PG_DIR "$ROOT/scripts/postgres.sh" stop || true
        rm -rf "$CLUSTER_PG_DIR"
        CLUSTER_PG_DIR=""
    fi
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    source "$(dirname "$0")/lib.sh"
    INSTANCES=${INSTANCES:-3}
    require_tools python3:python3 curl:curl
    build_herald
    WORK=$(mktemp -d /tmp/herald-cluster.XXXXXX)
    trap 'cluster_stop; rm -rf "$WORK"' EXIT
    trap 'exit 130' INT TERM
    cluster_start "$WORK" "$INSTANCES"
    echo "PostgreSQL: $CLUSTER_PG_DIR   sandbox (strict token rule): https://127.0.0.1:$CLUSTER_SANDBOX_PORT"
    for i in "${!CLUSTER_PORTS[@]}"; do
        echo "instance $((i + 1)): http://127.0.0.1:${CLUSTER_PORTS[$i]}   log $WORK/instance-$((i + 1))/serve.log"
    done
    echo "API key (demo): $CLUSTER_API_KEY   admin token (demo): $CLUSTER_ADMIN_TOKEN"
    echo "e.g. curl -s http://127.0.0.1:${CLUSTER_PORTS[0]}/v1/notifications -H 'Authorization: Bearer $CLUSTER_API_KEY' \\"
    echo "       -H 'Content-Type: application/json' -d '{\"device_token\": \"$DEMO_DEVICE\", \"topic\": \"$DEMO_TOPIC\", \"payload\": {\"aps\": {}}}'"
    echo "Ctrl-C stops everything (DURATION=seconds stops it on its own)."
    # In the background and waited for, so a SIGTERM runs the trap at once.
    sleep "${DURATION:-infinity}" &
    wait $!
fi
