#!/usr/bin/env bash
# Benchmark: Herald's HTTP API, end to end, against `herald serve` (release build) with its
# in-process APNsSandbox, on a temporary config, tenants copy and data directory.
#
#   (a) wrk POSTs single notifications to /v1/notifications (each waits for APNs' answer) for
#       DURATION seconds over CONNECTIONS connections: requests/s, latency percentiles, non-2xx;
#   (b) one POST /v1/notifications/batch of BATCH device tokens: time to the 202, and time until
#       GET /v1/jobs/{id} shows the job finished, and the notifications/s that gives.
#
#   scripts/bench-api.sh                                   # defaults below
#   DURATION=30 CONNECTIONS=64 BATCH=100000 scripts/bench-api.sh
#   SKIP_BUILD=1 scripts/bench-api.sh                      # reuse .build/release/herald
#   SKIP_WRK=1 / SKIP_BATCH=1                              # run only one half
#   JOB_CONCURRENCY=100 POLL_INTERVAL=1                    # jobs.concurrency_per_tenant; seconds between job polls
#                                                          # (each GET /v1/jobs/{id} takes some of the server's
#                                                          # CPU, so polling very often slows the job it
#                                                          # measures)
#
# Only 127.0.0.1 is used; every process and wait is bounded; the server started here is stopped
# with SIGTERM on exit and its temporary directory removed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-32}
WRK_THREADS=${WRK_THREADS:-1}
BATCH=${BATCH:-100000}
JOB_CONCURRENCY=${JOB_CONCURRENCY:-100}   # jobs.concurrency_per_tenant (the default)
TENANT=demo-token
API_KEY=hk_demo-token_local-sandbox-only   # the demo tenant's DEMO key (local sandbox only)

require_tools wrk:wrk curl:curl python3:python3
build_herald
make_workdir herald-bench-api

# A private copy of the demo setup: the sandbox on a free port, the demo tenant pointed at it,
# the store under the temporary directory, the API on a free port, warnings only.
SANDBOX_PORT=$(free_port)
mkdir -p "$WORK/config" "$WORK/data"
sed -e "s#^  port: 2197#  port: $SANDBOX_PORT#" -e "s#^  channels_port: 2198#  channels_port: 0#" -e "s#: sandbox/#: $ROOT/config/sandbox/#" \
    "$ROOT/config/sandbox.yaml" > "$WORK/config/sandbox.yaml"
grep -q "port: $SANDBOX_PORT" "$WORK/config/sandbox.yaml" || { echo "cannot set the sandbox port" >&2; exit 1; }
demo_tenant "$TENANT" "$SANDBOX_PORT" "$WORK/tenants"
cat > "$WORK/config/herald.yaml" <<YAML
tenants_dir: $WORK/tenants
listen:
  host: 127.0.0.1
  port: 0
storage_path: $WORK/data/herald.sqlite
log_level: warning
api:
  max_batch_items: $(( BATCH > 100000 ? BATCH : 100000 ))
jobs:
  concurrency_per_tenant: $JOB_CONCURRENCY
http:
  rate_limit:                # the benchmark measures the API's own speed, not the per-key limit
    requests_per_second: 1000000
    burst: 1000000
sandbox:
  enabled: true
  config: $WORK/config/sandbox.yaml
YAML

"$HERALD" serve --config "$WORK/config/herald.yaml" > "$WORK/serve.log" 2> "$WORK/serve.err" &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
for _ in $(seq 1 300); do grep -q '^Herald API listening on' "$WORK/serve.log" 2>/dev/null && break; sleep 0.1; done
API_PORT=$(sed -n 's#^Herald API listening on http://127.0.0.1:\([0-9]*\)$#\1#p' "$WORK/serve.log")
[[ -n "$API_PORT" ]] || { echo "herald serve did not start:" >&2; cat "$WORK/serve.log" "$WORK/serve.err" >&2; exit 1; }
grep -q "^tenants: $TENANT" "$WORK/serve.log" || { echo "the demo tenant did not load:" >&2; cat "$WORK/serve.log" >&2; exit 1; }
BASE="http://127.0.0.1:$API_PORT"

now() { date +%s.%N; }
cpu_seconds() { # user + system CPU of herald serve (its in-process sandbox included)
    awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$SERVE_PID/stat"
}

# One notification first: the tenant's TLS connections to the sandbox open at the first send.
first=$(curl -s -m 30 "$BASE/v1/notifications" -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' \
    -d "{\"device_token\": \"$DEMO_DEVICE\", \"topic\": \"$DEMO_TOPIC\", \"payload\": {\"aps\": {\"alert\": \"warm-up\"}}}")
grep -q '"status":200' <<<"$first" || { echo "the warm-up send failed: $first" >&2; cat "$WORK/serve.err" >&2; exit 1; }

echo "== herald serve (release) on 127.0.0.1:$API_PORT, in-process sandbox on $SANDBOX_PORT, cores $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg)"

# (a) single sends with wrk.
if [[ -z "${SKIP_WRK:-}" ]]; then
    cat > "$WORK/send.lua" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $API_KEY"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"device_token": "$DEMO_DEVICE", "topic": "$DEMO_TOPIC", "payload": {"aps": {"alert": {"title": "Herald", "body": "Benchmark notification"}}}}'

done = function(summary, latency, requests)
    local non2xx = summary.errors.status
    local failed = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
    io.write(string.format("figures: requests=%d seconds=%.3f rps=%.1f non2xx=%d socket_errors=%d p50=%.3f p90=%.3f p99=%.3f p999=%.3f max=%.3f\n",
        summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6), non2xx, failed,
        latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000,
        latency:percentile(99.9) / 1000, latency.max / 1000))
end
LUA
    echo "== (a) wrk -t $WRK_THREADS -c $CONNECTIONS -d ${DURATION}s --latency: POST /v1/notifications (one notification, answered after APNs)"
    timeout $(( DURATION + 60 )) wrk -t "$WRK_THREADS" -c "$CONNECTIONS" -d "${DURATION}s" --timeout 30s --latency \
        -s "$WORK/send.lua" "$BASE/v1/notifications" > "$WORK/wrk.out" 2>&1 || true
    sed 's/^/   /' "$WORK/wrk.out" | grep -v '^   figures:'
    WRK_FIGURES=$(grep '^figures:' "$WORK/wrk.out" || true)
    [[ -n "$WRK_FIGURES" ]] || { echo "wrk gave no figures" >&2; exit 1; }
fi

# (b) one batch of BATCH distinct device tokens.
if [[ -z "${SKIP_BATCH:-}" ]]; then
    python3 - "$BATCH" "$DEMO_TOPIC" > "$WORK/batch.json" <<'PY'
import json, sys
count, topic = int(sys.argv[1]), sys.argv[2]
tokens = ["%064x" % (0x5EED << 200 | i) for i in range(count)]
json.dump({"notification": {"topic": topic, "payload": {"aps": {"alert": {"title": "Herald", "body": "Batch notification"}}}},
           "device_tokens": tokens}, sys.stdout, separators=(",", ":"))
PY
    echo "== (b) POST /v1/notifications/batch with $BATCH device tokens ($(wc -c < "$WORK/batch.json") bytes), then GET /v1/jobs/{id} until finished"
    cpu_start=$(cpu_seconds)
    start=$(now)
    accepted=$(curl -s -m 300 -w '\n%{http_code}' "$BASE/v1/notifications/batch" -H "Authorization: Bearer $API_KEY" \
        -H 'Content-Type: application/json' --data-binary "@$WORK/batch.json")
    accepted_at=$(now)
    code=$(tail -n1 <<<"$accepted")
    [[ "$code" == 202 ]] || { echo "the batch was not accepted ($code): $(head -c 600 <<<"$accepted")" >&2; exit 1; }
    JOB=$(python3 -c 'import json, sys; print(json.loads(sys.stdin.read().splitlines()[0])["job_id"])' <<<"$accepted")
    deadline=$(( $(date +%s) + ${BATCH_TIMEOUT:-900} ))
    state=""
    while (( $(date +%s) < deadline )); do
        curl -s -m 60 "$BASE/v1/jobs/$JOB?limit=1" -H "Authorization: Bearer $API_KEY" > "$WORK/job.json" || true
        state=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["state"])' "$WORK/job.json" 2>/dev/null || echo "?")
        [[ "$state" == finished || "$state" == cancelled ]] && break
        sleep "${POLL_INTERVAL:-1}"
    done
    finished_at=$(now)
    cpu_end=$(cpu_seconds)
    [[ "$state" == finished ]] || { echo "the job did not finish (state $state) within ${BATCH_TIMEOUT:-900}s" >&2; exit 1; }
    BATCH_FIGURES=$(python3 - "$WORK/job.json" "$start" "$accepted_at" "$finished_at" "$BATCH" "$cpu_start" "$cpu_end" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))
start, accepted, finished, count = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
cpu = float(sys.argv[7]) - float(sys.argv[6])
counts = job["counts"]
print("accept_s=%.3f complete_s=%.3f rate=%.0f cpu_us=%.0f sent=%d failed=%d pending=%d outcomes=%s" % (
    accepted - start, finished - start, count / (finished - start), cpu * 1e6 / count,
    counts["sent"], counts["failed"], counts["pending"],
    ",".join("%s:%s:%s=%d" % (o["state"], o["status"], o["reason"], o["count"]) for o in job["outcomes"])))
PY
)
fi

# SIGTERM: the server must stop cleanly (exit 0) with nothing in flight.
kill -TERM "$SERVE_PID"
status=0
timeout 60 tail --pid="$SERVE_PID" -f /dev/null || true
wait "$SERVE_PID" || status=$?
PIDS=()

field() { sed -n "s/.*[ :]$1=\([^ ]*\).*/\1/p" <<<" $2"; }
echo
echo "== summary (cores $(nproc), load average now $(cut -d' ' -f1-3 /proc/loadavg))"
if [[ -n "${WRK_FIGURES:-}" ]]; then
    printf "single sends (wrk, %s connections, %ss): %s req/s; latency p50 %s ms, p90 %s ms, p99 %s ms, p99.9 %s ms, max %s ms; %s requests, non-2xx %s, socket errors %s\n" \
        "$CONNECTIONS" "$DURATION" "$(field rps "$WRK_FIGURES")" "$(field p50 "$WRK_FIGURES")" "$(field p90 "$WRK_FIGURES")" \
        "$(field p99 "$WRK_FIGURES")" "$(field p999 "$WRK_FIGURES")" "$(field max "$WRK_FIGURES")" \
        "$(field requests "$WRK_FIGURES")" "$(field non2xx "$WRK_FIGURES")" "$(field socket_errors "$WRK_FIGURES")"
fi
if [[ -n "${BATCH_FIGURES:-}" ]]; then
    printf "batch of %s: 202 after %s s; job finished after %s s (%s notifications/s from POST; herald serve CPU %s us/notification, sandbox included); sent %s, failed %s (%s)\n" \
        "$BATCH" "$(field accept_s "$BATCH_FIGURES")" "$(field complete_s "$BATCH_FIGURES")" "$(field rate "$BATCH_FIGURES")" \
        "$(field cpu_us "$BATCH_FIGURES")" \
        "$(field sent "$BATCH_FIGURES")" "$(field failed "$BATCH_FIGURES")" "$(field outcomes "$BATCH_FIGURES")"
fi
echo "herald serve exit status after SIGTERM: $status"
[[ "$status" == 0 ]]
