#!/usr/bin/env bash
# A/B of `herald bench` variants against one `herald sandbox`, with one h2load run (the same
# requests as scripts/bench-herald.sh: herald bench's device paths) at the start of each round, so that every variant and the
# yardstick meet the same machine state. Prints rate / CPU a notification per variant and round.
#
#   VARIANTS="--through transport|--through transport --threads 1|--through router" scripts/bench-client-ab.sh
#   VARIANTS="/path/to/other/herald --through transport|--through transport" SKIP_BUILD=1 scripts/bench-client-ab.sh
#
# A variant that starts with a path runs that binary as the client (the sandbox is always
# $HERALD). Only 127.0.0.1 is used; every run is bounded; the sandbox is stopped on exit.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

REQUESTS=${REQUESTS:-200000}
ROUNDS=${ROUNDS:-3}
VARIANTS=${VARIANTS:---through transport|--through router}

require_tools h2load:nghttp2-client python3:python3
build_herald
make_workdir herald-bench-ab
start_sandbox "$WORK/sandbox.log" --threads 1 --log-level warning
demo_tenant demo-token "$SANDBOX_PORT" "$WORK/tenants"
demo_body "$WORK/body.json" 256
TOKEN=$("$HERALD" sandbox demo-token --key "$ROOT/tenants/keys/AuthKey_DEMOKEY001.p8")
# The same requests as herald bench: its 1,024 device paths, in its order (see scripts/bench-herald.sh).
"$HERALD" bench --tenants "$WORK/tenants" --tenant demo-token --print-paths \
    | sed "s#^#https://127.0.0.1:$SANDBOX_PORT#" > "$WORK/uris.txt"

run_h2load() {
    timeout 300 h2load -n "$REQUESTS" -c 2 -m 500 -t 1 -H "host: localhost" -H "authorization: bearer $TOKEN" \
        -H "apns-id: 3f6c4d8e-2a1b-4c5d-8e9f-0a1b2c3d4e5f" -H "apns-push-type: alert" -H "apns-topic: $DEMO_TOPIC" \
        -d "$WORK/body.json" -i "$WORK/uris.txt" 2>&1 \
        | awk '/^finished in/ {gsub(",", "", $4); printf "%.0f", $4}'
}

run_herald() { # "[binary] args" -> rate/cpu
    local bin=$HERALD args=$1
    if [[ "$args" == /* ]]; then bin=${args%% *}; args=${args#* }; fi
    # shellcheck disable=SC2086
    timeout 600 "$bin" bench --tenants "$WORK/tenants" --tenant demo-token --count "$REQUESTS" --connections 2 \
        --concurrency 1000 --payload-bytes 256 --json $args 2>&1 | python3 -c '
import json, sys
try:
    f = json.loads(sys.stdin.read().strip().splitlines()[-1])
    print("%d/s %.1fus%s" % (f["notifications_per_second"], f["cpu_us_per_notification"], "" if f["failed"] == 0 else " FAILED %d" % f["failed"]), end="")
except Exception:
    print("failed", end="")'
}

IFS='|' read -ra VS <<< "$VARIANTS"
run_h2load >/dev/null; run_herald "--through transport --count 20000" >/dev/null
for round in $(seq 1 "$ROUNDS"); do
    line="round $round: h2load $(run_h2load)/s"
    for variant in "${VS[@]}"; do line="$line | [$variant] $(run_herald "$variant")"; done
    echo "$line"
done
