#!/usr/bin/env bash
# Where the two cores go while h2load and `herald bench` each drive one `herald sandbox` (the
# requests of scripts/bench-herald.sh): per process and per thread CPU, context switches, the
# machine's idle and softirq time (scripts/anatomy.py), and with STRACE=1 the syscalls a request
# (`strace -c -f`, on a smaller run: strace slows both down).
#
#   SKIP_BUILD=1 scripts/bench-client-anatomy.sh
#   VARIANTS="h2load-one|--through transport|--through transport --threads 1" SKIP_BUILD=1 scripts/bench-client-anatomy.sh
#   STRACE=1 SKIP_BUILD=1 scripts/bench-client-anatomy.sh
#
# Only 127.0.0.1 is used; every run is bounded; the sandbox is stopped on exit.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

REQUESTS=${REQUESTS:-200000}
CONCURRENCY=${CONCURRENCY:-1000}
VARIANTS=${VARIANTS:---through transport}
STRACE=${STRACE:-}
H2LOAD_THREADS=${H2LOAD_THREADS:-1}
# AFFINITY=1: the sandbox pinned to core 0 and every client to core 1 (to understand the
# scheduling only: the benchmark itself pins nothing).
AFFINITY=${AFFINITY:-}
# PERF=1: also `perf record` the sandbox during each run and print its busiest symbols.
PERF=${PERF:-}

require_tools h2load:nghttp2-client python3:python3
build_herald
make_workdir herald-bench-anatomy
start_sandbox "$WORK/sandbox.log" --threads 1 --log-level warning
SANDBOX_PID=${PIDS[-1]}
demo_tenant demo-token "$SANDBOX_PORT" "$WORK/tenants"
demo_body "$WORK/body.json" 256
TOKEN=$("$HERALD" sandbox demo-token --key "$ROOT/tenants/keys/AuthKey_DEMOKEY001.p8")
ANATOMY="$ROOT/scripts/anatomy.py"
PIN=""
if [[ -n "$AFFINITY" ]]; then
    taskset -a -p -c 0 "$SANDBOX_PID" >/dev/null
    PIN="taskset -c 1"
fi

# h2load sends herald bench's own 1,024 device paths in its order (as scripts/bench-herald.sh
# does); the variant h2load-one sends one repeated path (the sandbox's lightest request shape).
"$HERALD" bench --tenants "$WORK/tenants" --tenant demo-token --print-paths \
    | sed "s#^#https://127.0.0.1:$SANDBOX_PORT#" > "$WORK/uris.txt"
h2load_command() { # count [one]
    local target="-i $WORK/uris.txt"
    [[ -n "${2:-}" ]] && target="https://127.0.0.1:$SANDBOX_PORT/3/device/$DEMO_DEVICE"
    echo $PIN h2load -n "$1" -c 2 -m $((CONCURRENCY / 2)) -t "$H2LOAD_THREADS" -H "'host: localhost'" \
        -H "'authorization: bearer $TOKEN'" -H "'apns-id: 3f6c4d8e-2a1b-4c5d-8e9f-0a1b2c3d4e5f'" \
        -H "'apns-push-type: alert'" -H "'apns-topic: $DEMO_TOPIC'" -d "$WORK/body.json" $target
}
herald_command() { # count variant
    local bin=$HERALD args=$2
    if [[ "$args" == /* ]]; then bin=${args%% *}; args=${args#* }; fi
    echo $PIN "$bin" bench --tenants "$WORK/tenants" --tenant demo-token --count "$1" --connections 2 \
        --concurrency "$CONCURRENCY" --payload-bytes 256 --json "$args"
}

IFS='|' read -ra VS <<< "$VARIANTS"
eval "$(h2load_command 20000)" >/dev/null
eval "$(herald_command 20000 "--through transport")" >/dev/null

for variant in "h2load" "${VS[@]}"; do
    case "$variant" in
        h2load) cmd=$(h2load_command "$REQUESTS") ;;
        h2load-one) cmd=$(h2load_command "$REQUESTS" one) ;;
        *) cmd=$(herald_command "$REQUESTS" "$variant") ;;
    esac
    if [[ -n "$PERF" ]]; then
        perf record -F 1999 -g -p "$SANDBOX_PID" -o "$WORK/sandbox.perf" >/dev/null 2>&1 &
        perf_pid=$!
        sleep 0.5
    fi
    eval "python3 $ANATOMY $SANDBOX_PID '$variant' $REQUESTS -- $cmd"
    if [[ -n "$PERF" ]]; then
        kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
        echo "   sandbox's busiest symbols (self):"
        perf report -i "$WORK/sandbox.perf" --no-children --sort dso,sym --percent-limit 0.8 --stdio -g none 2>/dev/null \
            | grep -v '^#' | grep -v '^$' | head -40 | sed 's/^/      /'
    fi
done

if [[ -n "$STRACE" ]]; then
    small=$((REQUESTS / 4))
    for variant in "h2load" "${VS[@]}"; do
        case "$variant" in
            h2load) cmd=$(h2load_command "$small") ;;
            h2load-one) cmd=$(h2load_command "$small" one) ;;
            *) cmd=$(herald_command "$small" "$variant") ;;
        esac
        echo "== strace -c -f, $small requests: $variant (client)"
        eval "strace -c -f -o $WORK/strace.txt $cmd" >/dev/null 2>&1 || true
        awk -v n="$small" 'NR > 2 && $NF != "total" && $4 ~ /^[0-9]+$/ { printf "   %-16s %9d calls  %6.3f/req\n", $NF, $4, $4 / n }' "$WORK/strace.txt" | sort -k2 -n -r | head -8
    done
fi
