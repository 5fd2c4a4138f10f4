#!/usr/bin/env bash
# bench/soak.sh — a long soak that proves the module under abuse (what
# `make soak` runs): saturating mixed load against cluster mode while Redis
# is killed, restarted, frozen and thawed, and nginx is reloaded.
#
#   make build && bench/soak.sh                 # 10 minutes
#   SOAK_SECONDS=60 bench/soak.sh
#
# nginx (2 workers, `listen ... reuseport`) runs pow-shield in cluster mode
# against a redis-server started here on a free port, with `pow_shield_fail
# local` and a zone sized for the solve rate: spent records are never evicted
# before their token expires (~400 solutions/s x 65 s is ~3 MB), while the
# drivers' fresh keys fill the rest with buckets, which are. Load,
# all on loopback, bounded in time, stopping by itself:
#   - wrk (bench/soak.lua): green requests from many client keys, over-limit
#     requests (429) and garbage PoW headers (malformed, huge, odd bytes);
#   - SOAK_DRIVERS Perl drivers (bench/soak_driver.pl): get challenged, solve
#     (difficulty 2), spend alone or on two connections at once, replay at
#     once and up to 50 s later, and send wrong nonces and forged tokens;
#     every token answered 200 as a spend is tracked.
# Faults on a schedule (seconds from the start of the load):
#   every SOAK_FAULT_EVERY s, at 7 s into the period, alternately Redis is
#   frozen (SIGSTOP) or killed (SIGKILL; it loses its data), and thawed
#   (SIGCONT) or restarted on the same port SOAK_FAULT_FOR s later;
#   every SOAK_RELOAD_EVERY s nginx is reloaded (SIGHUP).
# Then the load stops, nginx is stopped gracefully (SIGQUIT) and the run is
# judged. Exit status 1 if any check fails:
#   worker crashes ("exited on signal" in error.log)        must be 0
#   [alert] / [emerg] lines (incl. "open socket left")      must be 0
#   5xx responses (access log, every request)               must be 0
#   tokens answered 200 as a spend twice (double spends)    must be 0
#   requests never answered (the drivers wait 10 s)         must be 0
#   workers' private memory (RssAnon, summed over the current workers,
#     idle, before and after the load)       end <= start + SOAK_RSS_SLACK_KB
#   workers' open file descriptors (same)    end <= start + SOAK_FD_SLACK x workers
#   the master's open file descriptors       end <= start + SOAK_FD_SLACK
# Workers are replaced on every reload, so "end" is the workers of the last
# reload, after up to SOAK_RELOAD_EVERY s of load; the samples taken every
# 5 s during the load are printed too.
#
# Environment (defaults in brackets):
#   SOAK_SECONDS        length of the load [600]
#   SOAK_CONNECTIONS    wrk connections [32]
#   SOAK_DRIVERS        Perl drivers (one connection each, two in a race) [2]
#   SOAK_GREEN_KEYS     client keys of the green traffic [5000]
#   SOAK_RELOAD_EVERY   seconds between reloads, 0 = none [30]
#   SOAK_FAULT_EVERY    seconds between Redis faults, 0 = none [20]
#   SOAK_FAULT_FOR      seconds Redis stays frozen or down [3]
#   SOAK_ZONE           pow_shield_zone size [16m]
#   SOAK_REDIS_TIMEOUT  pow_shield_redis timeout= [100ms]
#   SOAK_RSS_SLACK_KB   allowed RssAnon growth, summed over workers [8192]
#   SOAK_FD_SLACK       allowed fd growth per process [2]
#   NGINX, MODULE       binaries [objs/nginx, objs/ngx_http_pow_shield_module.so]
# The temp dir (configs, logs, wrk and driver output) is always kept and
# its path printed; the access log is gzipped at the end.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
DURATION=${SOAK_SECONDS:-600}
CONNS=${SOAK_CONNECTIONS:-32}
DRIVERS=${SOAK_DRIVERS:-2}
GREEN_KEYS=${SOAK_GREEN_KEYS:-5000}
RELOAD_EVERY=${SOAK_RELOAD_EVERY:-30}
FAULT_EVERY=${SOAK_FAULT_EVERY:-20}
FAULT_FOR=${SOAK_FAULT_FOR:-3}
ZONE=${SOAK_ZONE:-16m}
REDIS_TIMEOUT=${SOAK_REDIS_TIMEOUT:-100ms}
RSS_SLACK_KB=${SOAK_RSS_SLACK_KB:-8192}
FD_SLACK=${SOAK_FD_SLACK:-2}
WRK=${WRK:-wrk}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
WORKERS=2

die() { echo "bench/soak.sh: $*" >&2; exit 1; }

for v in SOAK_SECONDS:DURATION SOAK_CONNECTIONS:CONNS SOAK_DRIVERS:DRIVERS SOAK_GREEN_KEYS:GREEN_KEYS \
    SOAK_RELOAD_EVERY:RELOAD_EVERY SOAK_FAULT_EVERY:FAULT_EVERY SOAK_FAULT_FOR:FAULT_FOR \
    SOAK_RSS_SLACK_KB:RSS_SLACK_KB SOAK_FD_SLACK:FD_SLACK; do
    n=${v#*:}
    [[ ${!n} =~ ^[0-9]+$ ]] || die "${v%%:*} must be a whole number, not '${!n}'"
done
((DURATION >= 10 && DURATION <= 86400)) || die "SOAK_SECONDS must be 10..86400"
((CONNS >= 1 && CONNS <= 1000 && DRIVERS <= 16 && GREEN_KEYS >= 1)) ||
    die "need 1 <= SOAK_CONNECTIONS <= 1000, SOAK_DRIVERS <= 16, SOAK_GREEN_KEYS >= 1"
((FAULT_EVERY == 0 || (FAULT_EVERY >= 10 && FAULT_FOR >= 1 && FAULT_FOR <= FAULT_EVERY - 8))) ||
    die "need SOAK_FAULT_EVERY >= 10 and 1 <= SOAK_FAULT_FOR <= SOAK_FAULT_EVERY - 8 (or SOAK_FAULT_EVERY=0)"
[[ -x $NGINX && -f $MODULE ]] || die "$NGINX or $MODULE not found: run 'make build' first"
for c in "$WRK" "$REDIS_SERVER" "$REDIS_CLI" perl curl timeout gzip; do
    command -v "$c" >/dev/null || die "$c not found (apt-get install -y wrk redis-server perl curl)"
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pow-shield-soak.XXXXXX")
chmod 0755 "$TMP"
# Private copies: `make build` rewriting the module under a running nginx
# would kill its workers (SIGBUS), which this script would report as crashes.
mkdir -p "$TMP/bin" "$TMP/html" "$TMP/redis"
cp "$NGINX" "$TMP/bin/nginx"
cp "$MODULE" "$TMP/bin/ngx_http_pow_shield_module.so"
NGINX_SRC=$NGINX MODULE_SRC=$MODULE
NGINX=$TMP/bin/nginx MODULE=$TMP/bin/ngx_http_pow_shield_module.so
LOAD_PIDS=()

# shellcheck disable=SC2317 # reached through the trap
cleanup() {
    local rc=$?
    set +e
    for pid in "${LOAD_PIDS[@]}"; do stop_pid "$pid"; done
    [[ -s $TMP/nginx.pid ]] && stop_pid "$(<"$TMP/nginx.pid")" QUIT
    [[ -s $TMP/redis/redis.pid ]] && stop_pid "$(<"$TMP/redis/redis.pid")"
    rm -rf "${TMP:?}/bin"
    echo "logs: $TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

read -r P_HTTP P_REDIS <<<"$(free_ports 2)"
printf '{"id":42,"name":"pow-shield soak","items":[1,2,3],"ok":true}\n' >"$TMP/html/api.json"
for f in g y s; do cp "$TMP/html/api.json" "$TMP/html/$f"; done
chmod -R a+rX "$TMP/html"

# ---- configuration ----------------------------------------------------------

# Directives newer builds may have: used only where `nginx -t` accepts them.
accepts() { # accepts <http-level text> <location-level text>
    mkdir -p "$TMP/probe"
    {
        bench_conf_head "$TMP/probe" "$MODULE" "$TMP/html" 64
        printf '    %s\n    server { listen 127.0.0.1:%s; location / { %s } }\n}\n' "$1" "$P_HTTP" "$2"
    } >"$TMP/probe/nginx.conf"
    "$NGINX" -t -q -p "$TMP/probe" -c "$TMP/probe/nginx.conf" -e "$TMP/probe/error.log" 2>/dev/null
}
STRIKES_OFF="" STATUS_LOC=""
# The circuit breaker would block the drivers' keys (every 429 and every
# refused replay is a strike); the soak is about spends, not about blocks.
accepts "" "pow_shield_limit 1 1d; pow_shield_strikes off;" && STRIKES_OFF="pow_shield_strikes off;"
accepts "" "pow_shield_status;" && STATUS_LOC="location = /soak-status { pow_shield_status; }"

{
    bench_conf_head "$TMP" "$MODULE" "$TMP/html" 4096 "$WORKERS"
    cat <<EOF
    pow_shield_zone $ZONE;
    pow_shield_redis redis://127.0.0.1:$P_REDIS timeout=$REDIS_TIMEOUT connect_timeout=$REDIS_TIMEOUT;
    pow_shield_fail local;
    pow_shield_key \$http_x_soak_key;
    pow_shield_log_level info;      # rejects are not written (error_log is at notice)

    log_format soak '\$status \$uri \$pow_shield_result';

    server {
        listen 127.0.0.1:$P_HTTP reuseport;
        access_log $TMP/access.log soak buffer=64k flush=1s;
        add_header X-Soak-Result \$pow_shield_result always;

        location = /g { pow_shield_limit 1000 1s; }                       # green
        location = /y { pow_shield_limit 1 1d; pow_shield_difficulty 1; $STRIKES_OFF }   # 429
        location = /s { pow_shield_limit 1 1d; pow_shield_difficulty 2; $STRIKES_OFF }   # solve
        $STATUS_LOC
    }
}
EOF
} >"$TMP/nginx.conf"

# ---- start -----------------------------------------------------------------

T0=$EPOCHREALTIME
since() { awk -v t0="$T0" -v now="$EPOCHREALTIME" 'BEGIN {printf "%.1f", now - t0}'; }
event() { echo "$(since) $*" >>"$TMP/events"; }
: >"$TMP/events"

redis_start "$P_REDIS" "$TMP/redis"
REDIS_PID=$(<"$TMP/redis/redis.pid")
"$NGINX" -t -q -p "$TMP" -c "$TMP/nginx.conf" -e "$TMP/error.log" || die "nginx -t failed: $TMP/nginx.conf"
"$NGINX" -p "$TMP" -c "$TMP/nginx.conf" -e "$TMP/error.log" || die "nginx did not start"
wait_port "$P_HTTP" nginx
MASTER=$(<"$TMP/nginx.pid")

# The module must be active: rate-limit headers on green, 429 over the limit.
hdr=$(curl -s -m 5 -o /dev/null -D - -H 'X-Soak-Key: probe' "http://127.0.0.1:$P_HTTP/g" || true)
[[ $hdr == "HTTP/1.1 200"* && $hdr == *[Xx]-[Rr]ate[Ll]imit-[Ll]imit:* ]] ||
    die "no 200 with X-RateLimit-Limit from /g: is the module active? ($(head -1 <<<"$hdr"))"
for _ in 1 2; do
    code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H 'X-Soak-Key: probe' "http://127.0.0.1:$P_HTTP/s" || true)
done
[[ $code == 429 ]] || die "expected 429 from /s on the second request, got $code"

# Current workers (not those shutting down after a reload) of the master.
workers() {
    ps -o pid=,args= --ppid "$MASTER" | awk '/worker process *$/ {print $1}'
}
# usage <pids...>: "<n> <VmRSS kB> <RssAnon kB> <fds>", summed.
usage() {
    local n=0 rss=0 anon=0 fds=0 p v a f
    for p in "$@"; do
        v=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null) || continue
        a=$(awk '/^RssAnon:/ {print $2}' "/proc/$p/status" 2>/dev/null) || continue
        f=$(find "/proc/$p/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
        [[ -n $v && -n $a ]] || continue
        n=$((n + 1)) rss=$((rss + v)) anon=$((anon + a)) fds=$((fds + f))
    done
    echo "$n $rss $anon $fds"
}
# shellcheck disable=SC2046 # one pid per word
read -r W0_N W0_RSS W0_ANON W0_FDS <<<"$(usage $(workers))"
read -r _ M0_RSS M0_ANON M0_FDS <<<"$(usage "$MASTER")"
((W0_N == WORKERS)) || die "expected $WORKERS workers, found $W0_N"

echo "== pow-shield bench/soak.sh — $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "machine:  $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) before the run"
echo "nginx:    $("$NGINX" -v 2>&1 | sed 's/^nginx version: //') ($NGINX_SRC, copied), $WORKERS workers, reuseport"
echo "module:   $MODULE_SRC (sha256 $(sha256sum "$MODULE" | cut -c1-12), built $(date -u -r "$MODULE_SRC" '+%F %T UTC'), git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src 2>/dev/null || echo '+dirty src'))"
echo "redis:    $("$REDIS_SERVER" --version | cut -d' ' -f1-3), port $P_REDIS, no persistence; timeout=$REDIS_TIMEOUT, pow_shield_fail local, zone $ZONE"
echo "optional: pow_shield_strikes off: $([[ -n $STRIKES_OFF ]] && echo used || echo 'not in this build')," \
    "pow_shield_status: $([[ -n $STATUS_LOC ]] && echo used || echo 'not in this build')"
echo "load:     ${DURATION}s; wrk -c$CONNS (60% green over $GREEN_KEYS keys, 25% over-limit, 15% garbage) + $DRIVERS solving drivers"
echo "faults:   $( ((FAULT_EVERY)) && echo "Redis frozen / killed alternately every ${FAULT_EVERY}s for ${FAULT_FOR}s" || echo "no Redis faults");" \
    "$( ((RELOAD_EVERY)) && echo "reload every ${RELOAD_EVERY}s" || echo "no reloads")"
echo "logs:     $TMP (kept)"
echo

# ---- load and faults ----------------------------------------------------------

T0=$EPOCHREALTIME
event "load starts"
SOAK_GREEN_KEYS=$GREEN_KEYS timeout -k 5 $((DURATION + 30)) \
    "$WRK" -t1 -c"$CONNS" -d"${DURATION}s" --timeout 10s -s "$ROOT/bench/soak.lua" \
    "http://127.0.0.1:$P_HTTP/" >"$TMP/wrk.out" 2>&1 &
LOAD_PIDS+=($!)
for i in $(seq "$DRIVERS"); do
    timeout -k 5 $((DURATION + 30)) perl "$ROOT/bench/soak_driver.pl" \
        "$P_HTTP" "$DURATION" "$TMP/driver.$i.out" "$i" "$BENCH_SECRET" "$T0" 2>"$TMP/driver.$i.err" &
    LOAD_PIDS+=($!)
done

SAMPLES=$TMP/samples
echo "# t workers VmRSS_kB RssAnon_kB fds (current workers, summed)" >"$SAMPLES"
REDIS_STATE=up RELOADS=0 FREEZES=0 KILLS=0
redis_fault() { # redis_fault <k>: the k-th fault, alternately freeze and kill
    if (($1 % 2 == 0)); then
        kill -STOP "$REDIS_PID" && REDIS_STATE=frozen FREEZES=$((FREEZES + 1))
        event "redis frozen (SIGSTOP)"
    else
        kill -KILL "$REDIS_PID" && REDIS_STATE=down KILLS=$((KILLS + 1))
        event "redis killed (SIGKILL)"
    fi
}
redis_heal() {
    case $REDIS_STATE in
    frozen) kill -CONT "$REDIS_PID"; event "redis thawed (SIGCONT)" ;;
    down)
        for _ in $(seq 50); do kill -0 "$REDIS_PID" 2>/dev/null || break; sleep 0.1; done
        redis_start "$P_REDIS" "$TMP/redis"
        REDIS_PID=$(<"$TMP/redis/redis.pid")
        event "redis restarted (same port, empty)"
        ;;
    esac
    REDIS_STATE=up
}
for ((t = 1; t <= DURATION; t++)); do
    # Sleep to the next whole second from T0.
    sleep "$(awk -v t0="$T0" -v now="$EPOCHREALTIME" -v t="$t" 'BEGIN {d = t0 + t - now; print (d > 0 ? d : 0)}')"
    if ((FAULT_EVERY && t < DURATION - FAULT_FOR)); then
        if ((t % FAULT_EVERY == 7)); then
            redis_fault $((t / FAULT_EVERY))
        elif ((t % FAULT_EVERY == 7 + FAULT_FOR)); then
            redis_heal
        fi
    fi
    if ((RELOAD_EVERY && t % RELOAD_EVERY == 0 && t < DURATION)); then
        kill -HUP "$MASTER" && RELOADS=$((RELOADS + 1))
        event "nginx reloaded (SIGHUP)"
    fi
    if ((t % 5 == 0)); then
        # shellcheck disable=SC2046
        echo "$t $(usage $(workers))" >>"$SAMPLES"
    fi
done
redis_heal
event "load ends"
for pid in "${LOAD_PIDS[@]}"; do wait "$pid" || true; done
LOAD_PIDS=()
event "wrk and drivers done"

# Idle: client connections closed, old workers gone, Redis reconnected
# (the reconnect back-off is at most 2 s).
for _ in $(seq 100); do
    pgrep -P "$MASTER" -f 'shutting down' >/dev/null || break
    sleep 0.1
done
sleep 3
# shellcheck disable=SC2046
read -r W1_N W1_RSS W1_ANON W1_FDS <<<"$(usage $(workers))"
read -r _ M1_RSS M1_ANON M1_FDS <<<"$(usage "$MASTER")"
ZONE_METRICS=""
if [[ -n $STATUS_LOC ]]; then
    ZONE_METRICS=$(curl -s -m 5 -H 'X-Soak-Key: ' "http://127.0.0.1:$P_HTTP/soak-status" |
        grep -iE 'zone|shm|slab|evict|nomem|memory|fallback' | grep -v '^#' | head -20 || true)
fi

# Graceful stop: exit_process must close everything ("open socket left").
kill -QUIT "$MASTER" 2>/dev/null || true
for _ in $(seq 100); do kill -0 "$MASTER" 2>/dev/null || break; sleep 0.1; done
STOPPED=1
if kill -0 "$MASTER" 2>/dev/null; then
    STOPPED=0
    event "nginx did not stop in 10 s after SIGQUIT"
else
    event "nginx stopped"
fi

# ---- judge -------------------------------------------------------------------

status=0
check() { # check <ok?> <label> <detail>
    if (($1)); then printf '  ok    %-34s %s\n' "$2" "$3"; else printf '  FAIL  %-34s %s\n' "$2" "$3"; status=1; fi
}
sum_driver() { awk -v k="$1" '$1 == k {n += $2} END {print n + 0}' "$TMP"/driver.*.out 2>/dev/null || echo 0; }

LOG=$TMP/error.log
count() { grep -cE "$1" "$LOG" || true; }
CRASHES=$(count 'exited on signal')
ALERTS=$(count '\[(alert|emerg)\]')
OPEN_SOCKETS=$(count 'open socket .* left')
NOMEM=$(count 'could not allocate|no memory|zone .* (is )?full')

# One pass over the access log: totals, then "count uri status result" rows.
awk '{n++; c[$2 " " $1 ($3 != "-" && $3 != "" ? " " $3 : "")]++} $1 >= 500 {e++}
     END {print n + 0, e + 0; for (k in c) print c[k], k}' "$TMP/access.log" >"$TMP/statuses"
read -r REQS FIVEXX <"$TMP/statuses"
DOUBLE=$(sum_driver double_spends)
UNANSWERED=$(sum_driver unanswered)
for i in $(seq "$DRIVERS"); do
    [[ -s $TMP/driver.$i.out ]] || { echo "driver $i left no report: $(tail -3 "$TMP/driver.$i.err")"; status=1; }
done

echo "timeline (s from the start of the load):"
awk '{printf "  %7s  %s\n", $1, substr($0, length($1) + 2)}' "$TMP/events" | head -12
(($(wc -l <"$TMP/events") > 12)) && echo "  ... ($(wc -l <"$TMP/events") events in $TMP/events)"
echo "  $RELOADS reloads, $FREEZES freezes, $KILLS kills of Redis"
echo
echo "wrk: $(grep -E 'requests in' "$TMP/wrk.out" | sed 's/^ *//');" \
    "$(grep -E 'Socket errors' "$TMP/wrk.out" | sed 's/^ *//' || echo 'no socket errors')"
echo "access log: $REQS requests ($((REQS / DURATION))/s); by location and status (\$pow_shield_result):"
tail -n +2 "$TMP/statuses" | sort -k2,2 -k1,1nr | awk '{printf "  %-4s %-4s %-10s %9d\n", $2, $3, $4, $1}' | head -40
echo
echo "drivers: $(sum_driver cycles) cycles, $(sum_driver solved) challenges solved," \
    "$(sum_driver tokens_spent) tokens answered 200 as a spend, $(sum_driver retries) requests retried" \
    "(keep-alive closed by a reload), $(sum_driver green_replays) replays answered as green (nothing spent)"
echo "  by kind and status (result), all drivers:"
awk '$1 == "count" {c[$2 " " $3 " " $4] += $5} END {for (k in c) print k, c[k]}' "$TMP"/driver.*.out 2>/dev/null |
    sort -k1,1 -k4,4nr | awk '{printf "  %-14s %-4s %-10s %7d\n", $1, $2, $3, $4}'
if ((DOUBLE > 0)); then
    # When the two spends fell against the Redis outages, in this order:
    #   replayed-in-fallback  the second while Redis was out: the zone did
    #                         not know a token spent in Redis
    #   spent-in-fallback     the first while Redis was out, the second after:
    #                         Redis did not learn of a token spent in the zone
    #   redis-restarted-empty Redis was killed between the two (lost its data)
    #   redis-healthy         none of these: the module alone
    # An outage runs from the freeze or kill until the last worker logs that
    # Redis "is available again" (error.log has whole seconds: +1 s), or, if
    # none did within 10 s, 3 s after the thaw or restart.
    awk -v t0="$T0" '
        FILENAME ~ /error\.log$/ {
            if ($0 ~ /is available again/) {
                split($1 " " $2, d, /[\/: ]/)
                back[++nb] = mktime(d[1] " " d[2] " " d[3] " " d[4] " " d[5] " " d[6]) - t0 + 1
            }
            next
        }
        FILENAME ~ /events$/ {
            if ($0 ~ /redis (frozen|killed)/) { from[++n] = $1; killed[n] = $0 ~ /killed/ }
            if ($0 ~ /redis (thawed|restarted)/) {
                to[n] = $1 + 3
                for (i = 1; i <= nb; i++) if (back[i] >= $1 && back[i] <= $1 + 10 && (to[n] == $1 + 3 || back[i] > to[n])) to[n] = back[i]
            }
            next
        }
        function out(t, i) { return t >= from[i] && (!(i in to) || t <= to[i]) }
        $1 == "double" {
            why = "redis-healthy"
            for (i = 1; i <= n; i++) if (out($3, i)) why = "replayed-in-fallback"
            if (why == "redis-healthy") for (i = 1; i <= n; i++) if (out($2, i)) why = "spent-in-fallback"
            if (why == "redis-healthy") for (i = 1; i <= n; i++) if (killed[i] && $2 < from[i] && $3 > from[i]) why = "redis-restarted-empty"
            print why, $0
        }' "$LOG" "$TMP/events" "$TMP"/driver.*.out | sort -k3,3n >"$TMP/double_spends"
    echo "  double spends: $DOUBLE; by when the two spends fell against the Redis outages:"
    awk '{c[$1]++} END {for (k in c) printf "    %-22s %6d\n", k, c[k]}' "$TMP/double_spends" | sort
    echo "    (heuristic, to the second: Redis is out from the freeze or kill until the workers log it is available again;"
    echo "     replayed-in-fallback: the second while Redis was out, the zone did not know the token;"
    echo "     spent-in-fallback: the first while Redis was out, Redis never learnt of it;"
    echo "     redis-restarted-empty: Redis was killed in between; redis-healthy: none of these)"
    echo "  first examples of each (when the token was answered 200, s from the start of the load):"
    awk '{if (++c[$1] <= 3) print "    " $1 ": " $5}' "$TMP/double_spends"
    echo "  all: $TMP/double_spends"
fi
echo
echo "memory and descriptors (idle, current processes; RssAnon = private memory, what a leak grows):"
printf '  %-22s %12s %12s %10s\n' "" "VmRSS kB" "RssAnon kB" "fds"
printf '  %-22s %12s %12s %10s\n' "workers at start ($W0_N)" "$W0_RSS" "$W0_ANON" "$W0_FDS"
printf '  %-22s %12s %12s %10s\n' "workers at end ($W1_N)" "$W1_RSS" "$W1_ANON" "$W1_FDS"
printf '  %-22s %12s %12s %10s\n' "master at start" "$M0_RSS" "$M0_ANON" "$M0_FDS"
printf '  %-22s %12s %12s %10s\n' "master at end" "$M1_RSS" "$M1_ANON" "$M1_FDS"
echo "  during the load (every 5 s, workers of the moment): RssAnon max $(awk 'NR > 1 && $4 > m {m = $4} END {print m + 0}' "$SAMPLES") kB," \
    "fds max $(awk 'NR > 1 && $5 > m {m = $5} END {print m + 0}' "$SAMPLES") (connections included); $SAMPLES"
echo
if [[ -n $STATUS_LOC ]]; then
    echo "zone usage (pow_shield_status at the end):"
    if [[ -n $ZONE_METRICS ]]; then echo "  ${ZONE_METRICS//$'\n'/$'\n'  }"; else echo "  (no zone lines in its output)"; fi
else
    echo "zone usage: no metric in this build (pow_shield_status is not supported);" \
        "error.log lines about allocation failures: $NOMEM"
fi
echo "error.log: $(count '\[(warn|error|crit|alert|emerg)\]') lines at warn or above; most frequent:"
{ grep -E '\[(warn|error|crit|alert|emerg)\]' "$LOG" || true; } |
    sed -E 's/^[0-9\/: ]+//; s/[0-9]+#[0-9]+: (\*[0-9]+ )?//; s/, client: .*//; s/[0-9]+(\.[0-9]+)?(ms| ms|s)\b/N\2/g' |
    sort | uniq -c | sort -rn | head -8 | sed 's/^/  /'
echo
echo "checks:"
check "$((CRASHES == 0))" "worker crashes" "$CRASHES (\"exited on signal\")"
check "$((ALERTS == 0))" "[alert]/[emerg] lines" "$ALERTS ($OPEN_SOCKETS \"open socket left\")"
check "$((FIVEXX == 0))" "5xx responses" "$FIVEXX of $REQS"
check "$((DOUBLE == 0))" "tokens answered 200 twice" "$DOUBLE"
check "$((UNANSWERED == 0))" "requests never answered (10 s)" "$UNANSWERED"
check "$((W1_N == WORKERS))" "workers alive at the end" "$W1_N of $WORKERS"
check "$((W1_ANON <= W0_ANON + RSS_SLACK_KB))" "worker RssAnon (sum)" \
    "$W0_ANON -> $W1_ANON kB (allowed +$RSS_SLACK_KB)"
check "$((W1_FDS <= W0_FDS + FD_SLACK * WORKERS))" "worker fds (sum)" \
    "$W0_FDS -> $W1_FDS (allowed +$((FD_SLACK * WORKERS)))"
check "$((M1_FDS <= M0_FDS + FD_SLACK))" "master fds" "$M0_FDS -> $M1_FDS (allowed +$FD_SLACK)"
check "$STOPPED" "graceful stop" \
    "$( ((STOPPED)) && echo 'nginx exited after SIGQUIT' || echo 'nginx still running 10 s after SIGQUIT')"
gzip -1 "$TMP/access.log"
echo
((status == 0)) && echo "soak: all checks passed" || echo "soak: FAILED (details in $TMP)"
exit "$status"
