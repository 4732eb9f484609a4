#!/usr/bin/env bash
# Profile of Herald's APNs client (`herald bench --through transport`) against a `herald sandbox`,
# as scripts/bench-herald.sh runs it, without h2load:
#
#   SKIP_BUILD=1 scripts/profile-client.sh                 # CPU a notification (perf stat), no profile
#   PROFILE=1 SKIP_BUILD=1 scripts/profile-client.sh       # + perf record -g of the client, report to stdout
#   THROUGH=router SKIP_BUILD=1 scripts/profile-client.sh  # the same through the router
#
# CPU time a notification is robust to load (unlike the rate). Only 127.0.0.1 is used; the sandbox
# is stopped on exit.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

REQUESTS=${REQUESTS:-200000}
CONNECTIONS=${CONNECTIONS:-2}
CONCURRENCY=${CONCURRENCY:-1000}
THROUGH=${THROUGH:-transport}
TENANT=${TENANT:-demo-token}
PROFILE=${PROFILE:-}

build_herald
make_workdir herald-profile-client
start_sandbox "$WORK/sandbox.log" --threads 1 --log-level warning
demo_tenant "$TENANT" "$SANDBOX_PORT" "$WORK/tenants"
BENCH=("$HERALD" bench --tenants "$WORK/tenants" --tenant "$TENANT" --count "$REQUESTS"
       --connections "$CONNECTIONS" --concurrency "$CONCURRENCY" --through "$THROUGH" --json)
if [[ -n "$PROFILE" ]]; then
    timeout 300 perf record -F 2000 -g -o "$WORK/perf.data" -- "${BENCH[@]}" | tail -1
    perf report -i "$WORK/perf.data" --no-children --percent-limit 0.7 --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -70
    perf report -i "$WORK/perf.data" --children --percent-limit 3 --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -60
else
    timeout 300 "${BENCH[@]}" | tail -1
fi
