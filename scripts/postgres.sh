#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for Herald's tests, CI and demos, from Debian's `postgresql`
# package (this script installs nothing: `apt-get install postgresql`).
#
#   eval "$(scripts/postgres.sh start)"   # initdb + pg_ctl start on a free port of 127.0.0.1;
#                                         # prints `export HERALD_TEST_POSTGRES_URL=...`
#   scripts/postgres.sh url               # the URL again
#   scripts/postgres.sh stop              # stops the cluster and removes its directory
#
# HERALD_POSTGRES_OPTIONS adds server options, e.g. for a profile of the statements:
#   HERALD_POSTGRES_OPTIONS="-c shared_preload_libraries=pg_stat_statements" scripts/postgres.sh start
#
# The cluster lives in $HERALD_POSTGRES_DIR (default /tmp/herald-postgres): its data directory,
# log, and the URL. It listens on 127.0.0.1 only (no Unix socket outside that directory); the
# role `herald` owns the database `herald` and signs in with a random password over
# scram-sha-256 (a test password, made anew at each start, never committed). initdb refuses to
# run as root: as root the server runs as the `postgres` user of Debian's package.
set -euo pipefail

DIR=${HERALD_POSTGRES_DIR:-/tmp/herald-postgres}

find_bin() {
    local candidate
    if [[ -n "${PG_BIN:-}" ]]; then echo "$PG_BIN"; return; fi
    for candidate in /usr/lib/postgresql/*/bin; do
        [[ -x "$candidate/initdb" ]] && { echo "$candidate"; return; }
    done
    command -v initdb >/dev/null && { dirname "$(command -v initdb)"; return; }
    echo "postgres.sh: no initdb found (apt-get install postgresql)" >&2
    exit 2
}

# as_owner COMMAND...: runs COMMAND as the cluster's owner (postgres when we are root).
as_owner() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
    local bin port password url verifier
    bin=$(find_bin)
    if [[ -f "$DIR/url" ]] && as_owner "$bin/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
        echo "postgres.sh: a cluster is already running in $DIR (scripts/postgres.sh stop)" >&2
        exit 1
    fi
    rm -rf "$DIR"
    mkdir -p "$DIR"
    chmod 0700 "$DIR"
    [[ $(id -u) -eq 0 ]] && chown postgres: "$DIR"
    port=$(free_port)
    password=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    as_owner bash -c "umask 077; printf '%s\n' '$password' > '$DIR/password'"
    as_owner "$bin/initdb" -D "$DIR/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 --no-sync >"$DIR/initdb.log" 2>&1 || {
        cat "$DIR/initdb.log" >&2
        exit 1
    }
    # Small and fast for tests: no fsync (a throwaway cluster), sockets only in our directory.
    # Room for the test suite's stores open side by side, each holding its pool's connections
    # (about 200 at the suite's peak).
    as_owner "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/postgres.log" -w -t 60 \
        -o "-h 127.0.0.1 -p $port -k $DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400 ${HERALD_POSTGRES_OPTIONS:-}" \
        start >/dev/null || {
        cat "$DIR/postgres.log" >&2
        exit 1
    }
    # The role's SCRAM-SHA-256 verifier, made here at 64 iterations instead of the server's 4,096:
    # every session of the suite's hundreds still signs in by SCRAM, and each costs the client
    # (an unoptimized build under `swift test`) 64 rounds of PBKDF2, not 4,096.
    verifier=$(PASSWORD="$password" python3 -c '
import base64, hashlib, hmac, os
password, salt, rounds = os.environ["PASSWORD"].encode(), os.urandom(16), 64
salted = hashlib.pbkdf2_hmac("sha256", password, salt, rounds)
stored = hashlib.sha256(hmac.new(salted, b"Client Key", "sha256").digest()).digest()
server = hmac.new(salted, b"Server Key", "sha256").digest()
b64 = lambda data: base64.b64encode(data).decode()
print(f"SCRAM-SHA-256${rounds}:{b64(salt)}${b64(stored)}:{b64(server)}")')
    as_owner "$bin/psql" -q -v ON_ERROR_STOP=1 -h "$DIR" -p "$port" -U postgres -d postgres >/dev/null <<SQL
CREATE ROLE herald LOGIN PASSWORD '$verifier';
CREATE DATABASE herald OWNER herald;
SQL
    url="postgres://herald:$password@127.0.0.1:$port/herald"
    as_owner bash -c "umask 077; printf '%s\n' '$url' > '$DIR/url'"
    echo "export HERALD_TEST_POSTGRES_URL=$url"
}

stop() {
    local bin
    bin=$(find_bin)
    if [[ -d "$DIR/data" ]]; then
        as_owner "$bin/pg_ctl" -D "$DIR/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
    fi
    rm -rf "$DIR"
}

url() {
    [[ -f "$DIR/url" ]] || { echo "postgres.sh: no cluster in $DIR (scripts/postgres.sh start)" >&2; exit 1; }
    cat "$DIR/url"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
url) url ;;
*)
    echo "usage: scripts/postgres.sh start|stop|url   (directory: \$HERALD_POSTGRES_DIR, default /tmp/herald-postgres)" >&2
    exit 2
    ;;
esac
