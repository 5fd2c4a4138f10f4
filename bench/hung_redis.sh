#!/usr/bin/env bash
# bench/hung_redis.sh — what a hung Redis costs in cluster mode.
#
#   make build && bench/hung_redis.sh
#
# nginx (1 worker) in cluster mode with `pow_shield_redis ... timeout=50ms`
# (default `pow_shield_fail local`) serves one unshielded and one shielded
# location; Redis is frozen with SIGSTOP (the process is alive and its
# socket accepts connections, but nothing answers: the worst kind of
# failure), then thawed with SIGCONT. Latencies are curl's time_total for
# one request on a fresh connection, sequential, loopback only.
#
# Phases: healthy; frozen (the first requests after the freeze, then a
# series; plus a short wrk load on the shielded location if wrk is
# installed); thawed (the first request, then a series, and how long until
# Redis decides requests again); with wrk, a second freeze in the middle of
# a wrk load (what the requests in flight at the freeze pay). Everything is
# bounded in time and stopped on exit.
#
# Environment: HUNG_SAMPLES requests per series [20], HUNG_GAP_MS pause
# between requests of a series [50], HUNG_TIMEOUT the pow_shield_redis
# timeout= [50ms], HUNG_LOAD_SECONDS wrk seconds while frozen, 0 = skip [3],
# BENCH_KEEP=1 keeps the temp dir; NGINX, MODULE as for bench/run.sh.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
SAMPLES=${HUNG_SAMPLES:-20}
GAP_MS=${HUNG_GAP_MS:-50}
TIMEOUT=${HUNG_TIMEOUT:-50ms}
LOAD_SECONDS=${HUNG_LOAD_SECONDS:-3}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}

die() { echo "bench/hung_redis.sh: $*" >&2; exit 1; }

[[ $SAMPLES =~ ^[0-9]+$ && $SAMPLES -ge 1 && $SAMPLES -le 1000 ]] || die "HUNG_SAMPLES must be 1..1000"
[[ $GAP_MS =~ ^[0-9]+$ && $GAP_MS -le 10000 ]] || die "HUNG_GAP_MS must be 0..10000"
[[ $LOAD_SECONDS =~ ^[0-9]+$ && $LOAD_SECONDS -le 60 ]] || die "HUNG_LOAD_SECONDS must be 0..60"
[[ -x $NGINX && -f $MODULE ]] || die "objs/nginx or the module is missing: run 'make build' first"
for c in curl perl "$REDIS_SERVER" "$REDIS_CLI"; do
    command -v "$c" >/dev/null || die "$c not found"
done
HAVE_WRK=0
command -v wrk >/dev/null && ((LOAD_SECONDS > 0)) && HAVE_WRK=1

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pow-shield-hung.XXXXXX")
chmod 0755 "$TMP"
REDIS_PID=""
cleanup() {
    local rc=$?
    set +e
    if [[ -s $TMP/nginx.pid ]]; then
        local pid
        pid=$(<"$TMP/nginx.pid")
        kill -QUIT "$pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    [[ -z $REDIS_PID && -s $TMP/redis.pid ]] && REDIS_PID=$(<"$TMP/redis.pid")
    if [[ -n $REDIS_PID ]]; then
        kill -CONT "$REDIS_PID" 2>/dev/null
        kill -TERM "$REDIS_PID" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$REDIS_PID" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$REDIS_PID" 2>/dev/null && kill -KILL "$REDIS_PID"
    fi
    if [[ ${BENCH_KEEP:-0} == 1 ]]; then echo "kept: $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Private copies, so a concurrent `make build` cannot pull them away.
mkdir -p "$TMP/bin" "$TMP/html"
cp "$NGINX" "$TMP/bin/nginx"
cp "$MODULE" "$TMP/bin/module.so"
read -r P_HTTP P_REDIS <<<"$(free_ports 2)"

printf '{"id":42,"name":"pow-shield bench","items":[1,2,3],"ok":true}\n' >"$TMP/html/api.json"
cp "$TMP/html/api.json" "$TMP/html/open.json"
chmod -R a+rX "$TMP/html"

{
    bench_conf_head "$TMP" "$TMP/bin/module.so" "$TMP/html" 1024
    cat <<EOF
    pow_shield_redis redis://127.0.0.1:$P_REDIS timeout=$TIMEOUT;

    server {
        listen 127.0.0.1:$P_HTTP;
        location = /open.json { }                                # unshielded
        location = /api.json { pow_shield_limit 1000000 1s; }   # shielded, green
    }
}
EOF
} >"$TMP/nginx.conf"

"$REDIS_SERVER" --port "$P_REDIS" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --pidfile "$TMP/redis.pid" --dir "$TMP" --logfile "$TMP/redis.log" || die "redis-server did not start"
for _ in $(seq 50); do
    [[ -s $TMP/redis.pid && $("$REDIS_CLI" -p "$P_REDIS" ping 2>/dev/null) == PONG ]] && break
    sleep 0.1
done
REDIS_PID=$(<"$TMP/redis.pid")
"$TMP/bin/nginx" -p "$TMP" -c "$TMP/nginx.conf" -e "$TMP/error.log" || die "nginx did not start"
wait_port "$P_HTTP" nginx

OPEN=http://127.0.0.1:$P_HTTP/open.json
SHIELD=http://127.0.0.1:$P_HTTP/api.json

# One request: "<status> <ms>" (curl's time_total, fresh connection).
req() {
    curl -s -o /dev/null -m 5 -w '%{http_code} %{time_total}\n' "$1" |
        awk '{printf "%s %.3f\n", $1, $2 * 1000}' || echo "000 5000.000"
}
evalsha() {
    timeout 2 "$REDIS_CLI" -p "$P_REDIS" info commandstats 2>/dev/null |
        awk -F'[=,:]' '/^cmdstat_evalsha:/ {print $3}' | tr -d '\r' | grep . || echo 0
}
gap() { ((GAP_MS == 0)) || sleep "$(awk -v g="$GAP_MS" 'BEGIN {print g / 1000}')"; }

# series <file prefix>: SAMPLES requests to each location, interleaved.
series() {
    for _ in $(seq "$SAMPLES"); do
        req "$OPEN" >>"$TMP/$1.open"
        req "$SHIELD" >>"$TMP/$1.shield"
        gap
    done
}

ROWS=$TMP/rows
: >"$ROWS"
# row <label> <file>: min/median/max ms and the statuses seen.
row() {
    sort -k2 -g "$2" | awk -v label="$1" '
        { ms[NR] = $2; st[$1]++ }
        END {
            med = NR % 2 ? ms[(NR + 1) / 2] : (ms[NR / 2] + ms[NR / 2 + 1]) / 2
            s = ""; for (k in st) s = s (s == "" ? "" : ",") k "x" st[k]
            printf "%-52s %5d %9.3f %9.3f %9.3f  %s\n", label, NR, ms[1], med, ms[NR], s
        }' >>"$ROWS"
}

# ---- healthy ------------------------------------------------------------------
for _ in 1 2 3; do req "$SHIELD" >/dev/null; req "$OPEN" >/dev/null; done   # warm up
series healthy
row "healthy: unshielded" "$TMP/healthy.open"
row "healthy: shielded" "$TMP/healthy.shield"
E_HEALTHY=$(evalsha)

# ---- frozen -------------------------------------------------------------------
kill -STOP "$REDIS_PID"
T_FREEZE=$(date +%s%N)
# The first shielded request after the freeze waits for the timeout; an
# unshielded request sent while it waits must not wait with it.
{ req "$SHIELD" >"$TMP/first.shield"; date +%s%N >"$TMP/first.shield.end"; } &
FIRST=$!
sleep 0.02
req "$OPEN" >"$TMP/first.open"
OPEN_END=$(date +%s%N)
wait "$FIRST"
# Overlap: the shielded request was at nginx (its end minus its duration)
# before the unshielded one was answered, and was answered after it.
SHIELD_END=$(<"$TMP/first.shield.end")
SHIELD_START=$((SHIELD_END - $(awk '{printf "%d", $2 * 1000000}' "$TMP/first.shield")))
if ((SHIELD_START < OPEN_END && OPEN_END < SHIELD_END)); then
    OVERLAP="yes: answered $(((SHIELD_END - OPEN_END) / 1000000)) ms before the waiting shielded request"
else
    OVERLAP="no (curl start-up skew; rerun)"
fi
row "frozen: 1st unshielded (sent while 1st shielded waits)" "$TMP/first.open"
row "frozen: 1st shielded" "$TMP/first.shield"
req "$SHIELD" >"$TMP/second.shield"
row "frozen: 2nd shielded (right after the 1st)" "$TMP/second.shield"
series frozen
row "frozen: unshielded, series" "$TMP/frozen.open"
row "frozen: shielded, series" "$TMP/frozen.shield"
if ((HAVE_WRK)); then
    timeout -k 5 $((LOAD_SECONDS + 20)) wrk -t1 -c10 -d"${LOAD_SECONDS}s" --latency "$SHIELD" >"$TMP/wrk.frozen" 2>&1 || true
fi
FROZEN_MS=$((($(date +%s%N) - T_FREEZE) / 1000000))

# ---- thawed -------------------------------------------------------------------
kill -CONT "$REDIS_PID"
T_THAW=$(date +%s%N)
req "$SHIELD" >"$TMP/thaw1.shield"
row "thawed: 1st shielded" "$TMP/thaw1.shield"
# Until Redis decides requests again (its EVALSHA count moves), at most 10 s.
E0=$(evalsha)
RECOVERED_MS=""
for _ in $(seq 200); do
    req "$SHIELD" >>"$TMP/recovering.shield"
    if (($(evalsha) > E0)); then
        RECOVERED_MS=$((($(date +%s%N) - T_THAW) / 1000000))
        break
    fi
    sleep 0.05
done
row "thawed: shielded, until Redis decides again" "$TMP/recovering.shield"
series thawed
row "thawed: unshielded, series (after recovery)" "$TMP/thawed.open"
row "thawed: shielded, series (after recovery)" "$TMP/thawed.shield"
E_END=$(evalsha)

# ---- frozen under load ----------------------------------------------------------
# wrk on the shielded location for LOAD_SECONDS+2 s; Redis is frozen 1 s in
# and thawed LOAD_SECONDS s later: the requests in flight at the freeze wait
# for the timeout, the rest go to the fallback.
if ((HAVE_WRK)); then
    timeout -k 5 $((LOAD_SECONDS + 22)) wrk -t1 -c10 -d"$((LOAD_SECONDS + 2))s" --latency "$SHIELD" \
        >"$TMP/wrk.freeze_under_load" 2>&1 &
    WRK_PID=$!
    sleep 1
    kill -STOP "$REDIS_PID"
    sleep "$LOAD_SECONDS"
    kill -CONT "$REDIS_PID"
    wait "$WRK_PID" || true
fi

# ---- report -------------------------------------------------------------------
echo "== pow-shield bench/hung_redis.sh — $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "machine:  $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); nginx $("$TMP/bin/nginx" -v 2>&1 | sed 's/.*\///'), 1 worker;" \
    "$("$REDIS_SERVER" --version | cut -d' ' -f3)"
echo "config:   pow_shield_redis redis://127.0.0.1:$P_REDIS timeout=$TIMEOUT; pow_shield_fail local (default);" \
    "pow_shield_limit 1000000 1s on /api.json; /open.json unshielded"
echo "freeze:   kill -STOP <redis pid> for ${FROZEN_MS} ms, then kill -CONT"
echo "request:  curl -s -o /dev/null -m 5 -w '%{http_code} %{time_total}' <url>  (fresh connection each)"
echo "series:   $SAMPLES requests per location, interleaved, ${GAP_MS} ms apart"
echo
printf '%-52s %5s %9s %9s %9s  %s\n' case n "min ms" "median ms" "max ms" statuses
cat "$ROWS"
echo
if ((HAVE_WRK)); then
    echo "wrk -t1 -c10 -d${LOAD_SECONDS}s --latency on the shielded location while frozen:" \
        "$(awk '/^Requests\/sec:/ {print $2}' "$TMP/wrk.frozen") req/s," \
        "p50 $(awk '$1 == "50%" {print $2}' "$TMP/wrk.frozen")," \
        "p99 $(awk '$1 == "99%" {print $2}' "$TMP/wrk.frozen")," \
        "max $(awk '$1 == "Latency" {print $4}' "$TMP/wrk.frozen")," \
        "non-2xx $(awk '/Non-2xx/ {n = $NF} END {print n + 0}' "$TMP/wrk.frozen")"
fi
if ((HAVE_WRK)); then
    f=$TMP/wrk.freeze_under_load
    echo "wrk -t1 -c10 -d$((LOAD_SECONDS + 2))s --latency on the shielded location, Redis frozen 1 s in for ${LOAD_SECONDS} s:" \
        "$(awk '/^Requests\/sec:/ {print $2}' "$f") req/s," \
        "p50 $(awk '$1 == "50%" {print $2}' "$f")," \
        "p99 $(awk '$1 == "99%" {print $2}' "$f")," \
        "max $(awk '$1 == "Latency" {print $4}' "$f")," \
        "non-2xx $(awk '/Non-2xx/ {n = $NF} END {print n + 0}' "$f")," \
        "socket errors $(awk -F'[ ,]+' '/Socket errors:/ {n = $5 + $7 + $9 + $11} END {print n + 0}' "$f")"
fi
echo "overlap:  1st unshielded request answered while the 1st shielded one waited on Redis: $OVERLAP"
echo "recovery: Redis decided requests again ${RECOVERED_MS:-(not within 10 s)} ms after SIGCONT" \
    "(EVALSHA: $E_HEALTHY after the healthy phase, $E0 at thaw, $E_END at the end)"
echo "error.log, pow_shield lines and anything at warn or above:"
{ grep -E 'pow_shield|\[(warn|error|crit|alert|emerg)\]' "$TMP/error.log" || echo "(none)"; } |
    sed -E 's/^[0-9\/]+ //' | sed 's/^/    /' | head -20
if grep -q 'exited on signal' "$TMP/error.log"; then
    echo "WARNING: an nginx worker crashed"
    exit 1
fi
