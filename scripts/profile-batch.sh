#!/usr/bin/env bash
# Where the batch path's time goes: one `herald serve` (MODE=sqlite or postgres) and a
# strict sandbox (scripts/cluster.sh), one BATCH-token template batch posted and polled to the
# end; prints the time to the 202 and to the finished job and the CPU `herald serve`, the
# sandbox and (MODE=postgres) the PostgreSQL server spent a notification (from /proc). PERF=1
# records `perf` on `herald serve` for the run
# (PERF_ARGS="--call-graph dwarf,16384" for call graphs; REPORT_ARGS for `perf report`); with
# MODE=postgres the statements slower than 30 ms are listed from PostgreSQL's log. PERF_OUT=<file>
# keeps the recording for further `perf report`s; FREQ=none samples by PERF_ARGS' own period
# (e.g. PERF_ARGS="-e probe_libc:malloc -c 7 -g" with a malloc uprobe). PERF_STAT=<events> counts events on `herald serve`
# for the run (e.g. PERF_STAT=syscalls:sys_enter_write,syscalls:sys_enter_futex).
#
#   SKIP_BUILD=1 scripts/profile-batch.sh
#   MODE=postgres BATCH=10000 SKIP_BUILD=1 scripts/profile-batch.sh
#   MODE=postgres PGPROCS=1 SKIP_BUILD=1 scripts/profile-batch.sh     # CPU by PostgreSQL process
#   BATCH=20000 PERF=1 PERF_ARGS="--call-graph dwarf,16384" REPORT_ARGS="--children -g none" scripts/profile-batch.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/cluster.sh"
BATCH=${BATCH:-100000}
MODE=${MODE:-sqlite}
# PGSTAT=1 (MODE=postgres): pg_stat_statements on (planning tracked too), and the statements that
# took the server's time listed. PG_LOG_OUT=<file> keeps the server's log (e.g. with HERALD_POSTGRES_OPTIONS turning on
# auto_explain).
[[ -z "${PGSTAT:-}" ]] || export HERALD_POSTGRES_OPTIONS="${HERALD_POSTGRES_OPTIONS:-} -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on"
export MAX_BATCH_ITEMS=200000 LOG_LEVEL=warning JOB_CONCURRENCY=${JOB_CONCURRENCY:-100}
build_herald
WORK=$(mktemp -d /tmp/herald-prof.XXXXXX)
trap 'cluster_stop; rm -rf "$WORK"' EXIT
cluster_start "$WORK/c" 1 "$MODE"
port=${CLUSTER_PORTS[0]}; serve=${CLUSTER_PIDS[1]}; sandbox=${CLUSTER_PIDS[0]}
as_postgres() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if [[ "$MODE" == postgres ]]; then
  pgport=$(sed -E 's#.*:([0-9]+)/herald#\1#' "$CLUSTER_PG_DIR/url")
  as_postgres psql -h "$CLUSTER_PG_DIR" -p "$pgport" -U postgres -d herald -c "ALTER SYSTEM SET log_min_duration_statement = 30" -c "SELECT pg_reload_conf()" >/dev/null
  [[ -z "${PGSTAT:-}" ]] || as_postgres psql -h "$CLUSTER_PG_DIR" -p "$pgport" -U postgres -d herald -c "CREATE EXTENSION pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null
fi
template_batch "$BATCH" "$DEMO_TOPIC" > "$WORK/batch.json"
curl -s -m 30 "http://127.0.0.1:$port/v1/notifications" -H "Authorization: Bearer $CLUSTER_API_KEY" -H 'Content-Type: application/json' \
  -d "{\"device_token\": \"$DEMO_DEVICE\", \"topic\": \"$DEMO_TOPIC\", \"payload\": {\"aps\": {}}}"; echo
hz=$(getconf CLK_TCK)
cpu() { awk -v hz="$hz" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"; }
# The PostgreSQL server's CPU: the postmaster's own and its reaped children's, plus its live children's.
pgcpu() {
  [[ "$MODE" == postgres ]] || { echo 0; return; }
  local pm; pm=$(head -1 "$CLUSTER_PG_DIR/data/postmaster.pid")
  { awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat"; for child in $(ps -o pid= --ppid "$pm"); do awk '{print $14 + $15}' "/proc/$child/stat" 2>/dev/null; done; } \
    | awk -v hz="$hz" '{ total += $1 } END { printf "%.2f", total / hz }'
}
# PGPROCS=1 (MODE=postgres): the CPU of each PostgreSQL process over the batch (each backend
# by its client's address, the WAL writer, the checkpointer).
pgprocs() {
  local pm; pm=$(head -1 "$CLUSTER_PG_DIR/data/postmaster.pid")
  for child in $(ps -o pid= --ppid "$pm"); do
    echo "$child $(awk '{print $14 + $15}' "/proc/$child/stat" 2>/dev/null || echo 0) $(tr '\0 ' '__' < "/proc/$child/cmdline" 2>/dev/null | tr -s _ | cut -c1-60)"
  done | sort
}
if [[ -n "${PGPROCS:-}" && "$MODE" == postgres ]]; then pgprocs > "$WORK/pgprocs0"; fi
# THREADS=1: the CPU of each of `herald serve`'s and the sandbox's threads over the batch (by
# thread name).
threads() { for t in /proc/$1/task/*; do echo "$(basename "$t") $(tr ' ' _ < "$t/comm") $(awk '{print $14 + $15}' "$t/stat")"; done | sort; }
if [[ -n "${THREADS:-}" ]]; then threads "$serve" > "$WORK/threads0"; threads "$sandbox" > "$WORK/sandbox-threads0"; fi
c0=$(cpu $serve); s0=$(cpu $sandbox); p0=$(pgcpu)
if [[ -n "${PERF_STAT:-}" ]]; then perf stat -e "$PERF_STAT" -p "$serve" -o "$WORK/perf-stat.txt" & statpid=$!; sleep 0.3; fi
if [[ -n "${PERF:-}" ]]; then perf record $([[ "${FREQ:-}" == none ]] || echo "-F ${FREQ:-499}") ${PERF_ARGS:-} -p "$serve" -o "$WORK/perf.data" 2> "$WORK/perf.err" & perfpid=$!; sleep 0.5; fi
t0=$(date +%s.%N)
out=$(curl -s -m 300 -w ' %{http_code}' "http://127.0.0.1:$port/v1/notifications/batch" -H "Authorization: Bearer $CLUSTER_API_KEY" -H 'Content-Type: application/json' --data-binary "@$WORK/batch.json")
t1=$(date +%s.%N); c1=$(cpu $serve)
echo "POST: $out after $(echo "$t1 - $t0" | bc) s; serve CPU for the POST $(echo "$c1 - $c0" | bc) s"
job=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1].rsplit(" ",1)[0])["job_id"])' "$out")
t2=$("$ROOT/scripts/wait-job.py" "http://127.0.0.1:$port/v1/jobs/$job?limit=1" "$CLUSTER_API_KEY" "$WORK/job.json" "${POLL_INTERVAL:-0.05}")
c2=$(cpu $serve); s2=$(cpu $sandbox); p2=$(pgcpu)
if [[ -n "${THREADS:-}" ]]; then
  threads "$serve" > "$WORK/threads1"; threads "$sandbox" > "$WORK/sandbox-threads1"
  echo "threads of herald serve (CPU seconds over the batch, over $(echo "$t2 - $t0" | bc) s):"
  join "$WORK/threads0" "$WORK/threads1" | awk -v hz="$hz" '$5 > $3 { printf "   %6.2f %s\n", ($5 - $3) / hz, $2 }' | sort -rn | head -12
  echo "threads of the sandbox:"
  join "$WORK/sandbox-threads0" "$WORK/sandbox-threads1" | awk -v hz="$hz" '$5 > $3 { printf "   %6.2f %s\n", ($5 - $3) / hz, $2 }' | sort -rn | head -6
fi
if [[ -n "${PGPROCS:-}" && "$MODE" == postgres ]]; then
  pgprocs > "$WORK/pgprocs1"
  echo "PostgreSQL's processes (CPU seconds over the batch):"
  join "$WORK/pgprocs0" "$WORK/pgprocs1" | awk -v hz="$hz" '$4 > $2 { printf "   %6.2f %s\n", ($4 - $2) / hz, $3 }' | sort -rn | head -12
fi
if [[ -n "${PERF_STAT:-}" ]]; then kill -INT $statpid; wait $statpid || true; grep -v "^#" "$WORK/perf-stat.txt" | grep -v "^$"; fi
if [[ -n "${PERF:-}" ]]; then kill -INT $perfpid; wait $perfpid || true; [[ -z "${PERF_OUT:-}" ]] || cp "$WORK/perf.data" "$PERF_OUT"; fi
st=$(cat "$WORK/job.json")
echo "finished after $(echo "$t2 - $t0" | bc) s: rate $(echo "$BATCH / ($t2 - $t0)" | bc) /s; serve CPU $(echo "($c2 - $c0) * 1000000 / $BATCH" | bc) us/notification (sending part $(echo "($c2 - $c1) * 1000000 / $BATCH" | bc)), sandbox $(echo "($s2 - $s0) * 1000000 / $BATCH" | bc) us/n$([[ "$MODE" != postgres ]] || echo ", PostgreSQL server $(echo "($p2 - $p0) * 1000000 / $BATCH" | bc) us/n")"
echo "$st" | head -c 600; echo
if [[ "$MODE" == postgres && -n "${PGSTAT:-}" ]]; then
  as_postgres psql -h "$CLUSTER_PG_DIR" -p "$pgport" -U postgres -d herald -P pager=off -c \
    "SELECT round(total_exec_time::numeric, 0) AS ms, round(total_plan_time::numeric, 0) AS plan_ms, calls, rows, round(((total_exec_time + total_plan_time) * 1000 / $BATCH)::numeric, 1) AS us_per_n, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query FROM pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT ${PGTOP:-15}"
fi
if [[ "$MODE" == postgres && -n "${PG_LOG_OUT:-}" ]]; then cp "$CLUSTER_PG_DIR/postgres.log" "$PG_LOG_OUT"; fi
if [[ "$MODE" == postgres ]]; then grep -E "duration" "$CLUSTER_PG_DIR/postgres.log" | sed -E 's/.*duration: ([0-9.]+) ms +(statement|execute [^:]*): (.{0,160}).*/\1 ms \3/' | sort -t' ' -k1 -rn | head -${PGTOP:-25}; grep -c duration "$CLUSTER_PG_DIR/postgres.log"; fi
if [[ -n "${PERF:-}" ]]; then perf report -i "$WORK/perf.data" ${REPORT_ARGS:---no-children} --sort ${SORT:-sym} --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -${TOP:-60}; fi
