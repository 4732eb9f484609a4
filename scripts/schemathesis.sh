#!/usr/bin/env bash
# The OpenAPI document against the server: schemathesis (PyPI, pinned below) runs every check,
# with a fixed seed, against `herald serve` with the demo tenants, the admin token set and the
# in-process APNsSandbox, all on 127.0.0.1, on a temporary copy of the config and store.
# Fails (exit 1) on any failure: a 5xx, an answer the document does not describe, a valid
# request refused or an invalid one accepted.
#
#   scripts/schemathesis.sh                       # debug build of herald (builds it)
#   HERALD=.build/release/herald SKIP_BUILD=1 scripts/schemathesis.sh
#   EXAMPLES=100 SEED=20261122 scripts/schemathesis.sh
#
# Needs python3 (with venv); schemathesis is installed into $VENV (default .build/schemathesis-venv).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SCHEMATHESIS_VERSION=4.32.5
SEED=${SEED:-20261122}
EXAMPLES=${EXAMPLES:-50}           # per operation and phase (12 operations): about 3,000 cases
VENV=${VENV:-"$ROOT/.build/schemathesis-venv"}
TENANT=demo-token
API_KEY=hk_demo-token_local-sandbox-only   # the demo tenant's DEMO key (local sandbox only)

require_tools python3:python3 curl:curl
if [[ ! -x "$VENV/bin/schemathesis" ]] || [[ "$("$VENV/bin/schemathesis" --version 2>/dev/null)" != *"$SCHEMATHESIS_VERSION"* ]]; then
    echo "== installing schemathesis $SCHEMATHESIS_VERSION into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "schemathesis==$SCHEMATHESIS_VERSION"
fi

build_herald_debug
make_workdir herald-schemathesis

SANDBOX_PORT=$(free_port)
CHANNELS_PORT=$(free_port)
while [[ "$CHANNELS_PORT" == "$SANDBOX_PORT" ]]; do CHANNELS_PORT=$(free_port); done
mkdir -p "$WORK/config" "$WORK/data"
sed -e "s#^  port: 2197#  port: $SANDBOX_PORT#" -e "s#^  channels_port: 2198#  channels_port: $CHANNELS_PORT#" \
    -e "s#: sandbox/#: $ROOT/config/sandbox/#" "$ROOT/config/sandbox.yaml" > "$WORK/config/sandbox.yaml"
grep -q "port: $SANDBOX_PORT" "$WORK/config/sandbox.yaml" || { echo "cannot set the sandbox port" >&2; exit 1; }
grep -q "channels_port: $CHANNELS_PORT" "$WORK/config/sandbox.yaml" || { echo "cannot set the channels port" >&2; exit 1; }
demo_tenant demo-token "$SANDBOX_PORT" "$WORK/tenants" "$CHANNELS_PORT"
demo_tenant demo-cert "$SANDBOX_PORT" "$WORK/tenants" "$CHANNELS_PORT"
# The routes that change or delete one tenant run against `scratch` (schemathesis.toml pins the
# path's id), a copy of the token tenant without API keys: a DELETE or PATCH learnt from
# GET /admin/tenants must not take the demo tenant (and with it every /v1 case) out of the run.
sed -e 's/^id: demo-token$/id: scratch/' -e '/^api_keys:/,$d' "$WORK/tenants/demo-token.yaml" > "$WORK/tenants/scratch.yaml"
grep -q '^id: scratch$' "$WORK/tenants/scratch.yaml" || { echo "cannot make the scratch tenant" >&2; exit 1; }
cat > "$WORK/config/herald.yaml" <<YAML
tenants_dir: $WORK/tenants
listen:
  host: 127.0.0.1
  port: 0
storage_path: $WORK/data/herald.sqlite
log_level: warning
http:
  rate_limit:
    requests_per_second: 100000   # the run is not about the per-key limit (HostileTenantTests is)
    burst: 100000
sandbox:
  enabled: true
  config: $WORK/config/sandbox.yaml
YAML

export HERALD_ADMIN_TOKEN="schemathesis-admin-$RANDOM$RANDOM"
start_herald_serve "$WORK/config/herald.yaml"
grep -q "$TENANT" "$WORK/serve.log" || { echo "the demo tenant did not load:" >&2; cat "$WORK/serve.log" >&2; exit 1; }
BASE="http://127.0.0.1:$API_PORT"
echo "== herald serve on $BASE (sandbox on $SANDBOX_PORT); schemathesis $SCHEMATHESIS_VERSION, seed $SEED, $EXAMPLES examples per operation"

# One worker by default: with two, hypothesis can crash inside its own code ("AST constructor
# recursion depth mismatch", CPython 3.11); a flaky CI is worse than a slower one.
status=0
(cd "$WORK" && "$VENV/bin/schemathesis" --config-file "$ROOT/scripts/schemathesis.toml" run "$BASE/openapi.yaml" \
    --url "$BASE" -H "Authorization: Bearer $API_KEY" \
    --checks all --seed "$SEED" --max-examples "$EXAMPLES" \
    --phases examples,coverage,fuzzing --workers "${SCHEMATHESIS_WORKERS:-1}" --request-timeout 30 \
    --report junit --report-dir "$WORK/report" --no-color) || status=$?

if ! kill -0 "$SERVE_PID" 2>/dev/null; then
    echo "herald serve exited during the run:" >&2
    tail -n 40 "$WORK/serve.err" >&2
    status=1
fi
if grep -q '"status":5[0-9][0-9]\|herald.status=5' "$WORK/serve.err" 2>/dev/null; then
    echo "== 5xx answers logged by herald serve:" >&2
    grep 'herald.status=5' "$WORK/serve.err" | head -n 20 >&2
fi
[[ -n "${KEEP_REPORT:-}" ]] && cp -r "$WORK/report" "$KEEP_REPORT"
exit "$status"
