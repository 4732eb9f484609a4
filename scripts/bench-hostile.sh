#!/usr/bin/env bash
# Benchmark (printed figures, not a test): one hostile tenant beside a steady one.
#
# Tenant B (demo-token) sends a steady RATE notifications/s through POST /v1/notifications (h2load
# over HTTP/1.1 at a fixed request rate, open loop) in every phase; tenant A (demo-cert, its own key) in turn:
#   alone      nothing (B's baseline)
#   malformed  floods malformed bodies (wrk, full speed)
#   idle       holds IDLE_SOCKETS idle sockets
#   webhooks   one batch of STORM_TOKENS unregistered devices, the feedback webhook posting each
#              to a local receiver
#   batches    posts BATCHES batches of BATCH_TOKENS tokens (4 at a time; quotas refuse most)
# Prints B's rate and p99 in each phase next to B alone, Herald's peak RSS, and whether Herald
# is still running. Goals: B >= 95% of its rate, p99 < 3x alone, RSS < 500 MB.
#
#   scripts/bench-hostile.sh                        # release build
#   SKIP_BUILD=1 PHASE=20 RATE=2000 scripts/bench-hostile.sh
#   ON_CONNECTION_LOOP=false SKIP_BUILD=1 scripts/bench-hostile.sh  # jobs.on_connection_loop off
#   HERALD=.build/debug/herald SKIP_BUILD=1 scripts/bench-hostile.sh   # figures of a debug build
#
# Only 127.0.0.1; every process started here is stopped on exit and its directory removed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

PHASE=${PHASE:-20}
RATE=${RATE:-2000}
# B's requests go out at a fixed rate (h2load --rps, open loop), so the figures show whether Herald
# serves B at the rate B asks for: with a closed loop such as wrk's (each connection waiting after
# its answer) B's rate would fall with every millisecond of latency, counting latency twice.
B_CONNECTIONS=${B_CONNECTIONS:-100}
BATCHES=${BATCHES:-200}
BATCH_TOKENS=${BATCH_TOKENS:-100000}
IDLE_SOCKETS=${IDLE_SOCKETS:-2000}
STORM_TOKENS=${STORM_TOKENS:-20000}
KEY_A=hk_demo-cert_local-sandbox-only    # DEMO keys (local sandbox only)
KEY_B=hk_demo-token_local-sandbox-only
TOPIC_A=com.example.herald.certdemo
UNREGISTERED=0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de

require_tools wrk:wrk h2load:nghttp2-client curl:curl python3:python3
build_herald
make_workdir herald-bench-hostile

SANDBOX_PORT=$(free_port)
HOOK_PORT=$(free_port)
mkdir -p "$WORK/config" "$WORK/data"
sed -e "s#^  port: 2197#  port: $SANDBOX_PORT#" -e "s#^  channels_port: 2198#  channels_port: 0#" -e "s#: sandbox/#: $ROOT/config/sandbox/#" \
    "$ROOT/config/sandbox.yaml" > "$WORK/config/sandbox.yaml"
demo_tenant demo-token "$SANDBOX_PORT" "$WORK/tenants"
demo_tenant demo-cert "$SANDBOX_PORT" "$WORK/tenants"
echo "webhook-secret-for-the-benchmark" > "$WORK/tenants/hook.secret"
python3 - "$WORK/tenants/demo-cert.yaml" "$HOOK_PORT" <<'PY'
import sys
path, port = sys.argv[1], sys.argv[2]
text = open(path).read()
old = "  - name: feedback\n    options: {refuse: []}\n"
assert old in text, "demo-cert.yaml changed: update bench-hostile.sh"
text = text.replace(old, "  - name: feedback\n    options: {refuse: [], webhook: 'http://127.0.0.1:%s/hook', secret: 'file:hook.secret', webhook_allow_private_addresses: true}\n" % port)
open(path, "w").write(text)
PY
cat > "$WORK/config/herald.yaml" <<YAML
tenants_dir: $WORK/tenants
listen:
  host: 127.0.0.1
  port: 0
storage_path: $WORK/data/herald.sqlite
log_level: error
jobs:
  on_connection_loop: ${ON_CONNECTION_LOOP:-true}
http:
  rate_limit:
    requests_per_second: 5000
    burst: 5000
sandbox:
  enabled: true
  config: $WORK/config/sandbox.yaml
YAML

# The webhook receiver: counts posts, answers 204.
python3 - "$HOOK_PORT" > "$WORK/hooks.log" 2>&1 <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    count = 0
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        H.count += 1
        self.send_response(204); self.end_headers()
        print(H.count, flush=True)
    def log_message(self, *args): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
PIDS+=($!)

"$HERALD" serve --config "$WORK/config/herald.yaml" --no-watch > "$WORK/serve.log" 2> "$WORK/serve.err" &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
for _ in $(seq 1 600); do grep -q '^Herald API listening on' "$WORK/serve.log" 2>/dev/null && break; sleep 0.1; done
API_PORT=$(sed -n 's#^Herald API listening on http://127.0.0.1:\([0-9]*\)$#\1#p' "$WORK/serve.log")
[[ -n "$API_PORT" ]] || { echo "herald serve did not start:" >&2; cat "$WORK/serve.log" "$WORK/serve.err" >&2; exit 1; }
BASE="http://127.0.0.1:$API_PORT"
for key in "$KEY_B:$DEMO_TOPIC" "$KEY_A:$TOPIC_A"; do
    warm=$(curl -s -m 30 "$BASE/v1/notifications" -H "Authorization: Bearer ${key%%:*}" -H 'Content-Type: application/json' \
        -d "{\"device_token\": \"$DEMO_DEVICE\", \"topic\": \"${key#*:}\", \"payload\": {\"aps\": {\"alert\": \"warm-up\"}}}")
    grep -q '"status":200' <<<"$warm" || { echo "warm-up failed: $warm" >&2; cat "$WORK/serve.err" >&2; exit 1; }
done
echo "== herald serve ($HERALD) on $BASE; cores $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg)"

# B: a steady RATE a second, open loop: h2load (HTTP/1.1) sends each of B_CONNECTIONS connections'
# requests at RATE/B_CONNECTIONS a second whatever the answers' latency (as long as a connection
# is free), and logs every request (status, microseconds); the figures come from that log.
printf '%s' '{"device_token": "'"$DEMO_DEVICE"'", "topic": "'"$DEMO_TOPIC"'", "payload": {"aps": {"alert": "steady"}}}' > "$WORK/b.json"
b_figures() { # the h2load log of a phase -> "figures: rps=… p50=… p99=… non2xx=… errors=…"
    python3 - "$1" "$PHASE" "$2" <<'PY'
import sys
path, phase, h2load_out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
lat, ok, bad = [], 0, 0
for line in open(path):
    parts = line.split("\t")
    if len(parts) < 3: continue
    status, micros = int(parts[1]), int(parts[2])
    if 200 <= status < 300: ok += 1; lat.append(micros / 1000)
    else: bad += 1
lat.sort()
pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else 0
errors = 0
for line in open(h2load_out):
    if line.startswith("requests:"):
        words = line.replace(",", "").split()
        errors = int(words[words.index("failed") - 1]) + int(words[words.index("errored") - 1])
print("figures: rps=%.1f p50=%.3f p99=%.3f non2xx=%d errors=%d" % (ok / phase, pct(0.5), pct(0.99), bad, errors))
PY
}
cat > "$WORK/malformed.lua" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $KEY_A"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"device_token": "00", "payload": {"aps": {"alert": tru'
LUA
python3 - "$BATCH_TOKENS" "$TOPIC_A" > "$WORK/batch.json" <<'PY'
import json, sys
count, topic = int(sys.argv[1]), sys.argv[2]
json.dump({"notification": {"topic": topic, "payload": {"aps": {"alert": "x" * 64}}},
           "device_tokens": ["%064x" % (0xA11CE << 200 | i) for i in range(count)]}, sys.stdout, separators=(",", ":"))
PY
python3 - "$STORM_TOKENS" "$TOPIC_A" "$UNREGISTERED" > "$WORK/storm.json" <<'PY'
import json, sys
count, topic, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
json.dump({"notification": {"topic": topic, "payload": {"aps": {"alert": "gone"}}}, "device_tokens": [token] * count},
          sys.stdout, separators=(",", ":"))
PY

peak_rss_mb() { awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$SERVE_PID/status" 2>/dev/null || echo "?"; }
alive() { kill -0 "$SERVE_PID" 2>/dev/null && echo yes || echo NO; }
RESULTS=()

run_phase() { # name, then the command of A's load (run in the background for the phase)
    local name=$1; shift
    local a_pid=""
    if [[ $# -gt 0 ]]; then "$@" > "$WORK/a-$name.log" 2>&1 & a_pid=$!; sleep 1; fi
    timeout $(( PHASE + 60 )) h2load --h1 -c "$B_CONNECTIONS" --rps "$(( RATE / B_CONNECTIONS ))" -D "$PHASE" -T 30 \
        -d "$WORK/b.json" -H "Authorization: Bearer $KEY_B" -H 'Content-Type: application/json' \
        --log-file "$WORK/b-$name.tsv" "$BASE/v1/notifications" > "$WORK/b-$name.log" 2>&1 || true
    if [[ -n "$a_pid" ]]; then
        pkill -TERM -P "$a_pid" 2>/dev/null || true   # A's processes (children of this phase's subshell)
        kill "$a_pid" 2>/dev/null || true
        wait "$a_pid" 2>/dev/null || true
    fi
    local figures
    figures=$(b_figures "$WORK/b-$name.tsv" "$WORK/b-$name.log" 2>/dev/null || echo "figures: rps=0 p50=0 p99=0 non2xx=0 errors=0")
    RESULTS+=("$name $figures rss_mb=$(peak_rss_mb) alive=$(alive) a=$( (tail -n 1 "$WORK/a-$name.log" 2>/dev/null || true) | tr ' ' '_')")
    echo "   $name: $figures; peak RSS $(peak_rss_mb) MB; herald running: $(alive)"
}

post_batches() {
    local i codes=""
    for i in $(seq 1 "$BATCHES"); do
        curl -s -o /dev/null -m 120 -w '%{http_code}\n' "$BASE/v1/notifications/batch" -H "Authorization: Bearer $KEY_A" \
            -H 'Content-Type: application/json' --data-binary "@$WORK/batch.json" &
        (( i % 4 == 0 )) && wait
    done
    wait
}
hold_idle() {
    python3 - "$API_PORT" "$IDLE_SOCKETS" <<'PY'
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
held = []
while True:
    held = [s for s in held if s.fileno() >= 0]
    while len(held) < count:
        s = socket.socket(); s.setblocking(False)
        try: s.connect(("127.0.0.1", port))
        except BlockingIOError: pass
        held.append(s)
    time.sleep(1)
    print("holding", len(held), flush=True)
PY
}
storm() {
    curl -s -m 120 "$BASE/v1/notifications/batch" -H "Authorization: Bearer $KEY_A" -H 'Content-Type: application/json' \
        --data-binary "@$WORK/storm.json"; echo
    sleep 3600
}

echo "== B at $RATE/s over $B_CONNECTIONS connections, $PHASE s a phase"
run_phase alone
run_phase malformed timeout $(( PHASE + 5 )) wrk -t 1 -c 16 -d "$(( PHASE + 2 ))s" -s "$WORK/malformed.lua" "$BASE/v1/notifications"
run_phase idle hold_idle
run_phase webhooks storm
# Last: A's accepted batches keep being delivered after their phase, and its pending items fill
# its quota (later batches of A's, such as the storm's, would be refused with 429).
run_phase batches post_batches
batch_codes=$(sort "$WORK/a-batches.log" | uniq -c | awk '{printf "%s×%s ", $1, $2}')
hooks=$(tail -n 1 "$WORK/hooks.log" 2>/dev/null || echo 0)

field() { sed -n "s/.*[ :]$1=\([^ ]*\).*/\1/p" <<<" $2"; }
base_rps=$(field rps "${RESULTS[0]}")
base_p99=$(field p99 "${RESULTS[0]}")
echo
echo "== summary (cores $(nproc), load average now $(cut -d' ' -f1-3 /proc/loadavg))"
printf "%-10s %10s %8s %10s %8s %8s\n" phase "B req/s" "of alone" "B p99 ms" "x alone" "non-2xx"
for row in "${RESULTS[@]}"; do
    rps=$(field rps "$row"); p99=$(field p99 "$row")
    printf "%-10s %10s %7s%% %10s %8s %8s\n" "${row%% *}" "$rps" \
        "$(awk -v a="$rps" -v b="$base_rps" 'BEGIN {printf "%.0f", (b > 0 ? 100 * a / b : 0)}')" "$p99" \
        "$(awk -v a="$p99" -v b="$base_p99" 'BEGIN {printf "%.1f", (b > 0 ? a / b : 0)}')" "$(field non2xx "$row")"
done
echo "A's batches (HTTP status × count): $batch_codes"
echo "webhooks received during the storm phase: $hooks"
echo "Herald peak RSS: $(peak_rss_mb) MB; still running: $(alive)"
