#!/usr/bin/env bash
# A PostgreSQL restart in the middle of a batch, ROUNDS times (the shared store's availability): one
# `herald serve` on a throwaway PostgreSQL cluster and a sandbox (scripts/cluster.sh); each round
# posts a BATCH-token template batch, restarts the server (`pg_ctl restart -m fast`) at a random
# moment 0.3–1.5 s later, and waits for the job to finish. Prints, per round, how long the job
# took after the restart, its counts and the store calls that timed out
# (`storage.postgres.call_timeout`, CALL_TIMEOUT here, default 30s). Exits 1 when a job did not
# finish within the call timeout + 90 s, or did not send every token. CALL_TIMEOUT=none leaves the
# setting out of the configuration (the server's default applies; each round then waits 60 s at most).
#
#   SKIP_BUILD=1 scripts/restart-postgres.sh
#   ROUNDS=10 BATCH=50000 CALL_TIMEOUT=10s HERALD=.build/release/herald SKIP_BUILD=1 scripts/restart-postgres.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/cluster.sh"
ROUNDS=${ROUNDS:-5}
BATCH=${BATCH:-50000}
export CALL_TIMEOUT=${CALL_TIMEOUT:-30s}
export MAX_BATCH_ITEMS=$(( BATCH > 100000 ? BATCH : 100000 )) LOG_LEVEL=warning
require_tools curl:curl python3:python3
build_herald
WORK=$(mktemp -d /tmp/herald-restart-pg.XXXXXX)
trap 'cluster_stop; rm -rf "$WORK"' EXIT
cluster_start "$WORK/c" 1 postgres
port=${CLUSTER_PORTS[0]}
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_postgres() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
# CALL_TIMEOUT=none: the key is left out (the server's default applies); a round then waits 60 s.
[[ "$CALL_TIMEOUT" != none ]] || limit=60
[[ -n "${limit:-}" ]] || limit=$(python3 -c 'import re,sys; v=sys.argv[1]; m=re.fullmatch(r"([0-9.]+)(ms|s|m|h)?", v); n=float(m.group(1)); print(int(n/1000 if m.group(2)=="ms" else n*60 if m.group(2)=="m" else n*3600 if m.group(2)=="h" else n) + 90)' "$CALL_TIMEOUT")
failures=0
echo "== herald $HERALD, $ROUNDS rounds of $BATCH tokens, call_timeout $CALL_TIMEOUT"
for round in $(seq 1 "$ROUNDS"); do
    template_batch "$BATCH" "$DEMO_TOPIC" "$round" > "$WORK/batch.json"   # new devices each round
    out=$(curl -s -m 120 "http://127.0.0.1:$port/v1/notifications/batch" -H "Authorization: Bearer $CLUSTER_API_KEY" \
        -H 'Content-Type: application/json' --data-binary "@$WORK/batch.json")
    job=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["job_id"])' "$out" 2>/dev/null) || { echo "round $round: POST failed: $out"; failures=$((failures + 1)); continue; }
    sleep "$(python3 -c 'import random; print(round(random.uniform(0.3, 1.5), 2))')"
    timeouts_before=$(grep -c "did not answer within" "$WORK/c/instance-1/serve.err" || true)
    restarted=$(date +%s.%N)
    as_postgres "$bin/pg_ctl" -D "$CLUSTER_PG_DIR/data" -m fast restart -w -l "$CLUSTER_PG_DIR/postgres.log" >/dev/null
    if finished=$("$ROOT/scripts/wait-job.py" "http://127.0.0.1:$port/v1/jobs/$job?limit=1" "$CLUSTER_API_KEY" "$WORK/job.json" 0.2 "$limit" 2>"$WORK/wait.err"); then
        counts=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["counts"])' "$WORK/job.json")
        sent=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["counts"]["sent"])' "$WORK/job.json")
        verdict=ok
        [[ "$sent" == "$BATCH" ]] || { verdict="NOT every token sent"; failures=$((failures + 1)); }
        after=$(echo "$finished - $restarted" | bc)
    else
        counts=$(cat "$WORK/wait.err"); verdict="NOT finished within ${limit} s"; after="-"; failures=$((failures + 1))
    fi
    timeouts=$(( $(grep -c "did not answer within" "$WORK/c/instance-1/serve.err" || true) - timeouts_before ))
    echo "round $round: finished $after s after the restart; $counts; store calls timed out: $timeouts; $verdict"
done
echo "== $((ROUNDS - failures)) of $ROUNDS rounds finished with every token sent"
# KEEP=<dir>: keep the instance's logs there (serve.log, serve.err).
[[ -z "${KEEP:-}" ]] || { mkdir -p "$KEEP"; cp "$WORK/c/instance-1/serve.log" "$WORK/c/instance-1/serve.err" "$KEEP/"; }
[[ $failures -eq 0 ]]
