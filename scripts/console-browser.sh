#!/usr/bin/env bash
# The operator console in a real browser: Debian's chromium and chromium-driver, driven by
# python3-selenium (Tests/Browser/console_test.py), against `herald serve` with its in-process
# APNsSandbox, on 127.0.0.1, with a temporary config, tenants directory and store.
#
#   scripts/console-browser.sh                  # debug build of herald (builds it)
#   SKIP_BUILD=1 scripts/console-browser.sh     # the herald already built
#
# The test checks that a wrong admin token stays out, logs in, onboards a token tenant by
# uploading a .p8, sends a test notification and sees the 200, rotates the tenant's key, sends
# again, changes its settings, cancels a running batch from the tenant's page, deletes it and logs
# out. Screenshots of every page go to
# .build/console-screenshots/ (CI artifacts). A second signing key (DEMOKEY002, generated here
# for the run, never committed) is given to the sandbox so that the rotation is a real one.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

require_tools chromium:chromium chromedriver:chromium-driver openssl:openssl curl:curl
PYTHON=${PYTHON:-/usr/bin/python3}   # Debian's, which has python3-selenium
"$PYTHON" -c 'import selenium' 2>/dev/null || { echo "missing selenium for $PYTHON (apt-get install python3-selenium)" >&2; exit 2; }

build_herald_debug
make_workdir herald-console

SHOTS=${SHOTS:-"$ROOT/.build/console-screenshots"}
rm -rf "$SHOTS"
mkdir -p "$SHOTS" "$WORK/config" "$WORK/data" "$WORK/upload"

# The onboarding upload is the demo .p8 (DEMOKEY001, known to the sandbox); the rotation
# uploads a key made now (DEMOKEY002), whose public half the sandbox is given below.
cp "$ROOT/tenants/keys/AuthKey_DEMOKEY001.p8" "$WORK/upload/AuthKey_DEMOKEY001.p8"
openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null \
    | openssl pkcs8 -topk8 -nocrypt -out "$WORK/upload/AuthKey_DEMOKEY002.p8"
openssl ec -in "$WORK/upload/AuthKey_DEMOKEY002.p8" -pubout -out "$WORK/config/AuthKey_DEMOKEY002.pub.pem" 2>/dev/null

SANDBOX_PORT=$(free_port)
CHANNELS_PORT=$(free_port)
while [[ "$CHANNELS_PORT" == "$SANDBOX_PORT" ]]; do CHANNELS_PORT=$(free_port); done
sed -e "s#^  port: 2197#  port: $SANDBOX_PORT#" -e "s#^  channels_port: 2198#  channels_port: $CHANNELS_PORT#" \
    -e "s#: sandbox/#: $ROOT/config/sandbox/#" "$ROOT/config/sandbox.yaml" > "$WORK/config/sandbox.yaml"
grep -q "port: $SANDBOX_PORT" "$WORK/config/sandbox.yaml" || { echo "cannot set the sandbox port" >&2; exit 1; }
grep -q "channels_port: $CHANNELS_PORT" "$WORK/config/sandbox.yaml" || { echo "cannot set the channels port" >&2; exit 1; }
"$PYTHON" - "$WORK/config/sandbox.yaml" "$WORK/config/AuthKey_DEMOKEY002.pub.pem" <<'PY'
import sys
path, pub = sys.argv[1], sys.argv[2]
text = open(path).read()
marker = "token_keys:\n"
assert marker in text, "no token_keys: in the sandbox config"
entry = ("  - team_id: DEMOTEAM01\n    key_id: DEMOKEY002\n    public_key: %s\n"
         "    topics: [com.example.herald.demo, com.example.herald.demo.voip]\n" % pub)
open(path, "w").write(text.replace(marker, marker + entry, 1))
PY
# Each answer held 20 ms: the batch the test cancels is still running when its button is clicked
# (100,000 tokens at the tenant's 100 in hand take ~20 s).
sed -i 's/^  added_latency_ms: 0$/  added_latency_ms: 20/' "$WORK/config/sandbox.yaml"
grep -q "^  added_latency_ms: 20$" "$WORK/config/sandbox.yaml" || { echo "cannot set the sandbox's latency" >&2; exit 1; }
demo_tenant demo-token "$SANDBOX_PORT" "$WORK/tenants" "$CHANNELS_PORT"
demo_tenant demo-cert "$SANDBOX_PORT" "$WORK/tenants" "$CHANNELS_PORT"
# demo-token's key is copied beside its file: a rotation writes the new key next to the old one,
# which must be in the run's directory, never in the repository.
mkdir -p "$WORK/tenants/keys"
install -m 600 "$ROOT/tenants/keys/AuthKey_DEMOKEY001.p8" "$WORK/tenants/keys/AuthKey_DEMOKEY001.p8"
sed -i "s#key_file: $ROOT/tenants/keys/#key_file: keys/#" "$WORK/tenants/demo-token.yaml"
grep -q "key_file: keys/AuthKey_DEMOKEY001.p8" "$WORK/tenants/demo-token.yaml" || { echo "cannot localise demo-token's key" >&2; exit 1; }
cat > "$WORK/config/herald.yaml" <<YAML
tenants_dir: $WORK/tenants
listen:
  host: 127.0.0.1
  port: 0
storage_path: $WORK/data/herald.sqlite
log_level: info
sandbox:
  enabled: true
  config: $WORK/config/sandbox.yaml
YAML

export HERALD_ADMIN_TOKEN="console-admin-$RANDOM$RANDOM$RANDOM"
start_herald_serve "$WORK/config/herald.yaml"
BASE="http://127.0.0.1:$API_PORT"
echo "== herald serve on $BASE (sandbox on $SANDBOX_PORT); chromium $(chromium --version 2>/dev/null | awk '{print $2}')"

status=0
CONSOLE_URL="$BASE" ADMIN_TOKEN="$HERALD_ADMIN_TOKEN" UPLOADS="$WORK/upload" SHOTS="$SHOTS" \
    SANDBOX_PORT="$SANDBOX_PORT" TENANTS_DIR="$WORK/tenants" DEVICE="$DEMO_DEVICE" \
    timeout 600 "$PYTHON" "$ROOT/Tests/Browser/console_test.py" || status=$?
if [[ $status -ne 0 ]]; then
    echo "== herald serve's log (last 60 lines)" >&2
    tail -n 60 "$WORK/serve.log" "$WORK/serve.err" >&2 || true
fi
echo "== screenshots in $SHOTS: $(ls "$SHOTS" | tr '\n' ' ')"
exit $status
