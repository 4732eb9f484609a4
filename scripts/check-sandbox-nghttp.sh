#!/usr/bin/env bash
# Conformance check of `herald sandbox` with clients no one here wrote: Debian's nghttp and h2load
# (nghttp2-client). Starts the sandbox on a free port with config/sandbox.yaml, sends requests that
# must get each answer, and fails loudly on the first surprise. Only 127.0.0.1; everything bounded.
#
#   scripts/check-sandbox-nghttp.sh              # uses .build/debug/herald (builds it)
#   HERALD=.build/release/herald SKIP_BUILD=1 scripts/check-sandbox-nghttp.sh
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
for tool in nghttp h2load; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install nghttp2-client)" >&2; exit 2; }
done
if [[ -z "${SKIP_BUILD:-}" ]]; then swift build --product herald 2>&1 | tail -1; fi
HERALD=${HERALD:-"$ROOT/.build/debug/herald"}

WORK=$(mktemp -d /tmp/herald-nghttp.XXXXXX)
SANDBOX_PID=""
cleanup() {
    [[ -n "$SANDBOX_PID" ]] && kill "$SANDBOX_PID" 2>/dev/null && wait "$SANDBOX_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

"$HERALD" sandbox --config "$ROOT/config/sandbox.yaml" --port 0 --log-level warning > "$WORK/sandbox.log" 2>&1 &
SANDBOX_PID=$!
for _ in $(seq 1 100); do grep -q '^port:' "$WORK/sandbox.log" 2>/dev/null && break; sleep 0.1; done
PORT=$(awk '/^port:/ {print $2}' "$WORK/sandbox.log")
CHANNELS_PORT=$(awk '/^channels port:/ {print $3}' "$WORK/sandbox.log")
[[ -n "$PORT" && -n "$CHANNELS_PORT" ]] || { cat "$WORK/sandbox.log"; exit 1; }
BASE="https://localhost:$PORT"
MANAGE="https://localhost:$CHANNELS_PORT"
CA="$ROOT/config/sandbox/demo-ca.pem"
TOKEN=$("$HERALD" sandbox demo-token --key "$ROOT/tenants/keys/AuthKey_DEMOKEY001.p8")
DEVICE=00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0
GONE=0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de   # unregistered in sandbox.yaml
printf '{"aps":{"alert":"Hello from nghttp"}}' > "$WORK/body.json"
python3 -c 'print("{\"aps\":{\"alert\":\"" + "x" * 4100 + "\"}}", end="")' > "$WORK/large.json"
: > "$WORK/empty.json"

failures=0
# check NAME EXPECTED_STATUS EXPECTED_REASON -- nghttp arguments…
check() {
    local name=$1 status=$2 reason=$3
    shift 4
    local out
    # nghttp does not verify the server certificate; the openssl step below checks it.
    out=$(timeout 20 nghttp -v --no-dep "$@" 2>&1 || true)
    local got_status got_reason
    got_status=$(grep -oE 'recv \(stream_id=[0-9]+\) :status: [0-9]+' <<<"$out" | tail -1 | awk '{print $NF}' || true)
    got_reason=$(grep -oE '"reason":"[A-Za-z]+"' <<<"$out" | tail -1 | sed 's/.*:"\(.*\)"/\1/' || true)
    local got_id
    # The sandbox sends apns-id as a never-indexed literal (it changes with every answer); nghttp
    # marks such fields "sensitive".
    # Broadcasts and channel calls answer apns-request-id instead.
    got_id=$(grep -oE 'recv \(stream_id=[0-9]+(, sensitive)?\) apns-(request-)?id: [0-9a-f-]{36}' <<<"$out" | tail -1 | awk '{print $NF}' || true)
    LAST_OUT=$out
    if [[ "$got_status" == "$status" && "$got_reason" == "$reason" && -n "$got_id" ]]; then
        printf "ok    %-34s %s %s\n" "$name" "$got_status" "${got_reason:-}"
    else
        printf "FAIL  %-34s expected %s %s, got '%s' '%s' (apns-id '%s')\n" "$name" "$status" "$reason" \
            "$got_status" "$got_reason" "$got_id"
        failures=$((failures + 1))
    fi
}

AUTH=(-H "authorization: bearer $TOKEN")
TOPIC=(-H "apns-topic: com.example.herald.demo")
check "valid alert" 200 "" -- "${AUTH[@]}" "${TOPIC[@]}" -d "$WORK/body.json" "$BASE/3/device/$DEVICE"
check "valid voip" 200 "" -- "${AUTH[@]}" -H "apns-topic: com.example.herald.demo.voip" -H "apns-push-type: voip" \
    -d "$WORK/body.json" "$BASE/3/device/$DEVICE"
check "GET" 405 MethodNotAllowed -- "${AUTH[@]}" "${TOPIC[@]}" "$BASE/3/device/$DEVICE"
check "bad path" 404 BadPath -- "${AUTH[@]}" "${TOPIC[@]}" -d "$WORK/body.json" "$BASE/3/devices/$DEVICE"
check "bad device token" 400 BadDeviceToken -- "${AUTH[@]}" "${TOPIC[@]}" -d "$WORK/body.json" "$BASE/3/device/xyz"
check "no token" 403 MissingProviderToken -- "${TOPIC[@]}" -d "$WORK/body.json" "$BASE/3/device/$DEVICE"
check "forged token" 403 InvalidProviderToken -- -H "authorization: bearer ${TOKEN%??}AA" "${TOPIC[@]}" \
    -d "$WORK/body.json" "$BASE/3/device/$DEVICE"
check "no topic" 400 MissingTopic -- "${AUTH[@]}" -d "$WORK/body.json" "$BASE/3/device/$DEVICE"
check "foreign topic" 400 TopicDisallowed -- "${AUTH[@]}" -H "apns-topic: com.other.app" -d "$WORK/body.json" \
    "$BASE/3/device/$DEVICE"
check "bad priority" 400 BadPriority -- "${AUTH[@]}" "${TOPIC[@]}" -H "apns-priority: 3" -d "$WORK/body.json" \
    "$BASE/3/device/$DEVICE"
check "bad apns-id" 400 BadMessageId -- "${AUTH[@]}" "${TOPIC[@]}" -H "apns-id: 42" -d "$WORK/body.json" \
    "$BASE/3/device/$DEVICE"
check "empty payload" 400 PayloadEmpty -- "${AUTH[@]}" "${TOPIC[@]}" -d "$WORK/empty.json" "$BASE/3/device/$DEVICE"
check "payload too large" 413 PayloadTooLarge -- "${AUTH[@]}" "${TOPIC[@]}" -d "$WORK/large.json" \
    "$BASE/3/device/$DEVICE"
check "unregistered device" 410 Unregistered -- "${AUTH[@]}" "${TOPIC[@]}" -d "$WORK/body.json" "$BASE/3/device/$GONE"

# Broadcast channels: the channel management port, then the broadcast route on the device port.
printf '{"message-storage-policy": 0, "push-type": "LiveActivity"}' > "$WORK/channel.json"
printf '{"aps":{"event":"update","timestamp":1764460800,"content-state":{"score":"1-0"}}}' > "$WORK/update.json"
APP=com.example.herald.demo
check "create a channel" 201 "" -- "${AUTH[@]}" -d "$WORK/channel.json" "$MANAGE/1/apps/$APP/channels"
CHANNEL=$(grep -oE 'apns-channel-id: [A-Za-z0-9+/=]+' <<<"$LAST_OUT" | tail -1 | awk '{print $NF}' || true)
[[ -n "$CHANNEL" ]] || { echo "FAIL  the creation answered no apns-channel-id"; failures=$((failures + 1)); CHANNEL=none; }
check "read the channel" 200 "" -- "${AUTH[@]}" -H "apns-channel-id: $CHANNEL" "$MANAGE/1/apps/$APP/channels"
grep -q '"message-storage-policy":0' <<<"$LAST_OUT" || { echo "FAIL  the read's body: no storage policy 0"; failures=$((failures + 1)); }
check "list the channels" 200 "" -- "${AUTH[@]}" "$MANAGE/1/apps/$APP/all-channels"
grep -qF "\"$CHANNEL\"" <<<"$LAST_OUT" || { echo "FAIL  the list does not hold $CHANNEL"; failures=$((failures + 1)); }
check "channel without its ID" 400 MissingChannelId -- "${AUTH[@]}" "$MANAGE/1/apps/$APP/channels"
check "channel of another team" 403 TopicMismatch -- "${AUTH[@]}" -H "apns-channel-id: $CHANNEL" \
    "$MANAGE/1/apps/com.other.app/channels"
BROADCAST=(-H "apns-channel-id: $CHANNEL" -H "apns-push-type: liveactivity" -H "apns-priority: 10")
check "broadcast" 200 "" -- "${AUTH[@]}" "${BROADCAST[@]}" -H "apns-expiration: 0" -d "$WORK/update.json" \
    "$BASE/4/broadcasts/apps/$APP"
grep -qE 'apns-unique-id: [0-9a-f-]{36}' <<<"$LAST_OUT" || { echo "FAIL  the broadcast's answer has no apns-unique-id"; failures=$((failures + 1)); }
check "broadcast storing on a no-storage channel" 400 BadExpirationDate -- "${AUTH[@]}" "${BROADCAST[@]}" \
    -H "apns-expiration: 1900000000" -d "$WORK/update.json" "$BASE/4/broadcasts/apps/$APP"
check "delete the channel" 204 "" -- "${AUTH[@]}" -H ":method: DELETE" -H "apns-channel-id: $CHANNEL" \
    "$MANAGE/1/apps/$APP/channels"
check "broadcast on the deleted channel" 400 ChannelNotRegistered -- "${AUTH[@]}" "${BROADCAST[@]}" -H "apns-expiration: 0" \
    -d "$WORK/update.json" "$BASE/4/broadcasts/apps/$APP"

# The server certificate chains to the demo CA and names localhost.
if timeout 10 openssl s_client -connect "127.0.0.1:$PORT" -servername localhost -alpn h2 -CAfile "$CA" \
    -verify_return_error -verify_hostname localhost </dev/null 2>&1 | grep -q "Verify return code: 0 (ok)"; then
    echo "ok    server certificate verifies against $CA (ALPN h2)"
else
    echo "FAIL  server certificate does not verify against $CA"
    failures=$((failures + 1))
fi

# h2load: many streams on several connections, all answered 200.
out=$(timeout 120 h2load -n 5000 -c 4 -m 50 -H "authorization: bearer $TOKEN" -H "apns-topic: com.example.herald.demo" \
    -d "$WORK/body.json" "$BASE/3/device/$DEVICE" 2>&1)
if grep -q "status codes: 5000 2xx" <<<"$out"; then
    echo "ok    h2load 5000 requests, 4 connections x 50 streams: all 200"
else
    echo "FAIL  h2load:"; grep -E "requests:|status codes:" <<<"$out"
    failures=$((failures + 1))
fi

if [[ $failures -eq 0 ]]; then echo "all checks passed"; else echo "$failures check(s) failed"; exit 1; fi
