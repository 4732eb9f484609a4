#!/usr/bin/env bash
# Benchmark: `herald sandbox` against Debian's nghttpd serving a static file, with h2load sending
# the same fixed valid APNs request (same headers, same body) to both, in one run.
#
#   scripts/bench-sandbox.sh                 # defaults below
#   REQUESTS=400000 CLIENTS=8 STREAMS=100 scripts/bench-sandbox.sh
#   SKIP_BUILD=1 scripts/bench-sandbox.sh    # reuse .build/release/herald
#
# Goal: the sandbox answers at least 60% of nghttpd's request rate, so it is never the bottleneck
# when Herald itself is measured. Only 127.0.0.1 is used; every process and wait is bounded.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

REQUESTS=${REQUESTS:-200000}
CLIENTS=${CLIENTS:-4}
STREAMS=${STREAMS:-100}
H2LOAD_THREADS=${H2LOAD_THREADS:-1}
SANDBOX_THREADS=${SANDBOX_THREADS:-1}
NGHTTPD_THREADS=${NGHTTPD_THREADS:-1}
ROUNDS=${ROUNDS:-3}
DEVICE=$DEMO_DEVICE
TOPIC=$DEMO_TOPIC

require_tools h2load:nghttp2-client nghttpd:nghttp2-server openssl:openssl
build_herald
make_workdir herald-bench

# The fixed request: body and headers identical for both servers.
printf '{"aps":{"alert":{"title":"Herald","body":"Benchmark notification"},"badge":1}}' > "$WORK/body.json"
TOKEN=$("$HERALD" sandbox demo-token --key "$ROOT/tenants/keys/AuthKey_DEMOKEY001.p8")
HEADERS=(-H "authorization: bearer $TOKEN" -H "apns-topic: $TOPIC" -H "apns-push-type: alert"
         -H "apns-priority: 10" -H "apns-expiration: 0")
URL_PATH="/3/device/$DEVICE"

# nghttpd: a throwaway self-signed certificate and the same path as a static file.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj "/CN=localhost" -keyout "$WORK/nghttpd.key" -out "$WORK/nghttpd.pem" 2>/dev/null
mkdir -p "$WORK/docroot/3/device"
: > "$WORK/docroot$URL_PATH"   # empty file: a 200 with no body, like APNs' success answer

NGHTTPD_PORT=$((20000 + RANDOM % 10000))
nghttpd -n "$NGHTTPD_THREADS" -d "$WORK/docroot" "$NGHTTPD_PORT" "$WORK/nghttpd.key" "$WORK/nghttpd.pem" \
    > "$WORK/nghttpd.log" 2>&1 &
PIDS+=($!)

start_sandbox "$WORK/sandbox.log" --threads "$SANDBOX_THREADS" --log-level warning
wait_for_port "$NGHTTPD_PORT"
wait_for_port "$SANDBOX_PORT"

run_h2load() { # port -> prints req/s
    local out
    out=$(timeout 300 h2load -n "$REQUESTS" -c "$CLIENTS" -m "$STREAMS" -t "$H2LOAD_THREADS" \
        "${HEADERS[@]}" -d "$WORK/body.json" "https://127.0.0.1:$1$URL_PATH" 2>&1)
    if ! grep -q "status codes: $REQUESTS 2xx" <<<"$out"; then
        echo "h2load against port $1 did not get $REQUESTS successes:" >&2
        grep -E "requests:|status codes:|finished in" <<<"$out" >&2
        echo 0
        return
    fi
    awk '/^finished in/ {gsub(",", "", $4); print $4}' <<<"$out"
}

echo "== h2load -n $REQUESTS -c $CLIENTS -m $STREAMS -t $H2LOAD_THREADS, POST $URL_PATH with $(wc -c < "$WORK/body.json")-byte body"
echo "   sandbox threads: $SANDBOX_THREADS, nghttpd threads: $NGHTTPD_THREADS, cores: $(nproc), rounds: $ROUNDS (best of)"
# Warm-up (JIT-free, but the first TLS handshakes and allocations).
REQUESTS_SAVED=$REQUESTS; REQUESTS=20000
run_h2load "$SANDBOX_PORT" >/dev/null; run_h2load "$NGHTTPD_PORT" >/dev/null
REQUESTS=$REQUESTS_SAVED

best_sandbox=0; best_nghttpd=0
for round in $(seq 1 "$ROUNDS"); do
    s=$(run_h2load "$SANDBOX_PORT"); n=$(run_h2load "$NGHTTPD_PORT")
    printf "   round %d: sandbox %10.0f req/s   nghttpd %10.0f req/s\n" "$round" "$s" "$n"
    best_sandbox=$(best_of "$best_sandbox" "$s")
    best_nghttpd=$(best_of "$best_nghttpd" "$n")
done
ratio=$(awk -v s="$best_sandbox" -v n="$best_nghttpd" 'BEGIN { if (n > 0) printf "%.0f", 100 * s / n; else print 0 }')
printf "sandbox: %.0f req/s   nghttpd: %.0f req/s   ratio: %s%% (goal >= 60%%)\n" "$best_sandbox" "$best_nghttpd" "$ratio"
[[ "$ratio" -ge 60 ]] && echo "PASS" || echo "BELOW GOAL"
