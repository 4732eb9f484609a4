# Shared setup for the benchmark scripts (source it; it is not run on its own):
#   ROOT, require_tools, build_herald / build_herald_debug (honour SKIP_BUILD=1 and HERALD=...),
#   make_workdir with cleanup of the processes in PIDS, wait_for_port, free_port,
#   start_sandbox_command.
# Only 127.0.0.1 is used; every wait is bounded.

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
DEMO_DEVICE=00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0
DEMO_TOPIC=com.example.herald.demo

require_tools() { # "tool:package" ...
    local spec tool
    for spec in "$@"; do
        tool=${spec%%:*}
        command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install ${spec#*:})" >&2; exit 2; }
    done
}

build_herald_debug() { # sets HERALD to the debug binary (unless set), building it unless SKIP_BUILD=1
    if [[ -z "${HERALD:-}" ]]; then
        if [[ -z "${SKIP_BUILD:-}" ]]; then
            echo "== building herald (debug)"
            swift build --product herald 2>&1 | tail -1
        fi
        HERALD="$ROOT/.build/debug/herald"
    fi
    [[ -x "$HERALD" ]] || { echo "no herald binary at $HERALD" >&2; exit 2; }
}

# start_herald_serve CONFIG: `herald serve --no-watch` in the background (logs in $WORK/serve.log
# and serve.err, its PID in SERVE_PID and PIDS); waits (60 s at most) until the API listens and
# sets API_PORT, or prints the logs and exits 1.
start_herald_serve() {
    "$HERALD" serve --config "$1" --no-watch > "$WORK/serve.log" 2> "$WORK/serve.err" &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
    for _ in $(seq 1 600); do grep -q '^Herald API listening on' "$WORK/serve.log" 2>/dev/null && break; sleep 0.1; done
    API_PORT=$(sed -n 's#^Herald API listening on http://127.0.0.1:\([0-9]*\)$#\1#p' "$WORK/serve.log")
    [[ -n "$API_PORT" ]] || { echo "herald serve did not start:" >&2; cat "$WORK/serve.log" "$WORK/serve.err" >&2; exit 1; }
}

build_herald() { # sets HERALD to the release binary, building it unless SKIP_BUILD=1
    if [[ -z "${SKIP_BUILD:-}" ]]; then
        echo "== building herald (release)"
        swift build -c release --product herald 2>&1 | tail -1
    fi
    HERALD=${HERALD:-"$ROOT/.build/release/herald"}
    [[ -x "$HERALD" ]] || { echo "no herald binary at $HERALD (run without SKIP_BUILD)" >&2; exit 2; }
}

# make_workdir NAME: a fresh temporary directory in WORK; on exit the processes in PIDS are
# stopped (SIGTERM, then waited for) and the directory is removed.
PIDS=()
make_workdir() {
    WORK=$(mktemp -d "/tmp/$1.XXXXXX")
    trap cleanup_workdir EXIT
}
cleanup_workdir() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    [[ -n "${WORK:-}" ]] && rm -rf "$WORK"
}

wait_for_port() { # port [tries of 0.1 s]
    local _
    for _ in $(seq 1 "${2:-100}"); do
        (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on $1" >&2
    return 1
}

free_port() { # a port of 127.0.0.1 free right now
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# start_sandbox LOG [args...]: `herald sandbox` on a free port of 127.0.0.1 with the demo PKI;
# sets SANDBOX_PORT and appends its pid to PIDS.
start_sandbox() {
    local log=$1
    shift
    "$HERALD" sandbox --config "$ROOT/config/sandbox.yaml" --host 127.0.0.1 --port 0 "$@" > "$log" 2>&1 &
    PIDS+=($!)
    local _
    for _ in $(seq 1 100); do grep -q '^port:' "$log" 2>/dev/null && break; sleep 0.1; done
    SANDBOX_PORT=$(awk '/^port:/ {print $2}' "$log")
    CHANNELS_PORT=$(awk '/^channels port:/ {print $3}' "$log")
    [[ -n "$SANDBOX_PORT" ]] || { echo "the sandbox did not start:" >&2; cat "$log" >&2; exit 1; }
}

# demo_tenant NAME PORT DIR: the demo tenant file NAME, pointed at a sandbox on PORT, with its
# key and CA paths made absolute, written to DIR. POOL_OPEN_NEXT_AT=N adds `pool.open_next_at: N`,
# POOL_MAX_STREAMS=N `pool.max_streams: N`, POOL_CONNECTIONS=N `pool.connections: N`.
demo_tenant() { # demo_tenant NAME SANDBOX_PORT DIR [CHANNELS_PORT]
    mkdir -p "$3"
    sed -e "s#https://localhost:2197#https://localhost:$2#g" \
        -e "s#https://localhost:2198#https://localhost:${4:-2198}#g" \
        -e "s#key_file: keys/#key_file: $ROOT/tenants/keys/#" \
        -e "s#cert_file: certs/#cert_file: $ROOT/tenants/certs/#" \
        -e "s#key_file: certs/#key_file: $ROOT/tenants/certs/#" \
        -e "s#ca_file: ../config/#ca_file: $ROOT/config/#" \
        "$ROOT/tenants/$1.yaml" > "$3/$1.yaml"
    if [[ -n "${POOL_OPEN_NEXT_AT:-}${POOL_MAX_STREAMS:-}${POOL_CONNECTIONS:-}" ]]; then
        grep -q "^pool:" "$3/$1.yaml" && { echo "demo_tenant: $1.yaml has a pool section already" >&2; return 1; }
        printf '\npool:\n' >> "$3/$1.yaml"
        [[ -z "${POOL_OPEN_NEXT_AT:-}" ]] || printf '  open_next_at: %s\n' "$POOL_OPEN_NEXT_AT" >> "$3/$1.yaml"
        [[ -z "${POOL_MAX_STREAMS:-}" ]] || printf '  max_streams: %s\n' "$POOL_MAX_STREAMS" >> "$3/$1.yaml"
        [[ -z "${POOL_CONNECTIONS:-}" ]] || printf '  connections: %s\n' "$POOL_CONNECTIONS" >> "$3/$1.yaml"
    fi
}

# demo_body FILE BYTES: the body herald bench sends (`{"aps":{"alert":"xxx…"}}`, BYTES long; see
# BenchWorkload in Sources/HeraldCLI), for h2load's -d.
demo_body() {
    python3 - "$2" > "$1" <<'EOF'
import sys
size = int(sys.argv[1])
head, tail = '{"aps":{"alert":"', '"}}'
sys.stdout.write(head + "x" * max(1, size - len(head) - len(tail)) + tail)
EOF
}

template_batch() { # count topic [series] -> a template batch's JSON on stdout (the batch benchmarks')
    # COUNT device tokens 0xBA7C<<200 | series<<32 | i (series 0 by default, so that runs of one
    # script send the same tokens), one alert for all.
    python3 - "$1" "$2" "${3:-0}" <<'PY'
import json, sys
count, topic, series = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
tokens = ["%064x" % (0xBA7C << 200 | series << 32 | i) for i in range(count)]
json.dump({"notification": {"topic": topic, "payload": {"aps": {"alert": {"title": "Herald", "body": "Batch notification"}}}},
           "device_tokens": tokens}, sys.stdout, separators=(",", ":"))
PY
}

best_of() { # a b -> the larger
    awk -v a="$1" -v b="$2" 'BEGIN {print (b > a) ? b : a}'
}

# bench_rate_cpu: reads `herald bench --json`'s output on stdin and prints "rate cpu_us" (its last
# line's notifications a second and CPU a notification), or "0 0" with the reason on stderr when
# the run failed or had failures.
bench_rate_cpu() {
    python3 -c '
import json, sys
text = sys.stdin.read()
try:
    figures = json.loads(text.strip().splitlines()[-1])
except Exception:
    sys.stderr.write("herald bench failed:\n" + text + "\n"); print("0 0"); sys.exit()
if figures["failed"]:
    sys.stderr.write("herald bench failures: %s\n" % figures["failed_by_reason"]); print("0 0"); sys.exit()
print("%.0f %.1f" % (figures["notifications_per_second"], figures["cpu_us_per_notification"]))
'
}

median() { # numbers... -> their median
    printf "%s\n" "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
