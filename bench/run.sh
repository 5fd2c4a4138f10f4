#!/usr/bin/env bash
# bench/run.sh — throughput and latency of pow-shield's green path against
# stock nginx and limit_req, measured in the same run (what `make bench` runs).
#
#   make build && bench/run.sh
#   BENCH_SECONDS=10 BENCH_ROUNDS=3 BENCH_CONNECTIONS=50 bench/run.sh
#   BENCH_CASES=red bench/run.sh      the red zone: blocked clients, and
#                                     cluster mode's one EVALSHA per request
#
# One nginx (1 worker) serves the same small static JSON file on several
# ports: stock, limit_req (green), pow-shield local mode (green) and, with
# a yellow flood, pow-shield local mode over the limit, and a client whose
# circuit breaker is open (403, or 444: connection closed); a second nginx
# runs pow-shield in cluster mode against a redis-server started here; a
# third runs the local green case with metrics counting on (a
# pow_shield_status location exists), compared with the first's (off). wrk runs
# against each in turn, interleaved for BENCH_ROUNDS rounds, nginx and wrk
# pinned to different cores. The order rotates by one case a round (round
# 2 starts with the second case, the first last), so that no case always
# runs in the same place of a round: with a fixed order, stock and
# pow-shield's headers-off case came out 1.21x/1.10x limit_req's req/s in
# the same runs as headers off 1.22x/1.09x (bench/README.md, item 9's
# fifth round), a place's bias, not a case's. Only loopback; every step is bounded in time;
# everything started here is stopped on exit.
#
# Environment (defaults in brackets):
#   BENCH_SECONDS      seconds per wrk run [10]
#   BENCH_ROUNDS       interleaved rounds [3]
#   BENCH_CONNECTIONS  wrk connections [50]
#   BENCH_THREADS      wrk threads [1]
#   BENCH_WARMUP       warm-up seconds per case before round 1 [2]
#   BENCH_CASES        subset/order of: stock limit_req local local_noheaders
#                      local_status cluster yellow local_many cluster_many blocked
#                      blocked_quiet stock_close blocked_444 [all thirteen]; red = stock limit_req
#                      blocked blocked_quiet stock_close blocked_444 cluster;
#                      status = stock local local_status (metrics on vs off)
#   BENCH_NGINX_CPU    core for both nginx instances [0]
#   BENCH_WRK_CPU      core for wrk [1]
#   BENCH_REDIS_CPU    core for redis-server [same as BENCH_NGINX_CPU]
#   BENCH_KEEP=1       keep the temp dir (configs, logs, raw wrk output)
#   NGINX, MODULE      binaries [objs/nginx, objs/ngx_http_pow_shield_module.so]

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
DURATION=${BENCH_SECONDS:-10}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNECTIONS:-50}
THREADS=${BENCH_THREADS:-1}
WARMUP=${BENCH_WARMUP:-2}
CASES=${BENCH_CASES:-stock limit_req local local_noheaders local_status cluster local_many cluster_many yellow blocked blocked_quiet stock_close blocked_444}
[[ $CASES == red ]] && CASES="stock limit_req blocked blocked_quiet stock_close blocked_444 cluster"
[[ $CASES == status ]] && CASES="stock local local_status"
NGINX_CPU=${BENCH_NGINX_CPU:-0}
WRK_CPU=${BENCH_WRK_CPU:-1}
REDIS_CPU=${BENCH_REDIS_CPU:-$NGINX_CPU}
WRK=${WRK:-wrk}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}

die() { echo "bench/run.sh: $*" >&2; exit 1; }

for n in BENCH_SECONDS:DURATION BENCH_ROUNDS:ROUNDS BENCH_CONNECTIONS:CONNS BENCH_THREADS:THREADS \
    BENCH_WARMUP:WARMUP; do
    v=${n#*:}
    [[ ${!v} =~ ^[0-9]+$ ]] || die "${n%%:*} must be a whole number, not '${!v}'"
done
((DURATION >= 1 && ROUNDS >= 1 && CONNS >= THREADS && THREADS >= 1)) ||
    die "need BENCH_SECONDS >= 1, BENCH_ROUNDS >= 1, BENCH_CONNECTIONS >= BENCH_THREADS >= 1"
[[ -x $NGINX ]] || die "$NGINX not found: run 'make build' first"
[[ -f $MODULE ]] || die "$MODULE not found: run 'make build' first"
command -v "$WRK" >/dev/null || die "wrk not found: apt-get install -y wrk"
command -v curl >/dev/null || die "curl not found: apt-get install -y curl"
for c in $CASES; do
    case $c in
    stock | stock_close | limit_req | local | local_noheaders | local_status | local_many | yellow | blocked | blocked_quiet | blocked_444) ;;
    cluster | cluster_many)
        if ! command -v "$REDIS_SERVER" >/dev/null || ! command -v "$REDIS_CLI" >/dev/null; then
            die "cluster case needs redis-server and redis-cli: apt-get install -y redis-server"
        fi
        ;;
    *) die "unknown case '$c' in BENCH_CASES" ;;
    esac
done
has_case() { [[ " $CASES " == *" $1 "* ]]; }
# Which nginx instance serves a case.
instance() {
    case $1 in
    cluster*) echo cluster ;;
    local_status) echo status ;;
    *) echo local ;;
    esac
}
uses() { # uses <instance>: whether any selected case runs on it
    local c
    for c in $CASES; do [[ $(instance "$c") == "$1" ]] && return 0; done
    return 1
}

# Pin to cores only where there are enough of them.
CPUS=$(nproc)
pin() { # pin <cpu> cmd...
    local cpu=$1
    shift
    if command -v taskset >/dev/null && ((CPUS >= 2)); then
        taskset -c "$cpu" "$@"
    else
        "$@"
    fi
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pow-shield-bench.XXXXXX")
chmod 0755 "$TMP"
# Run private copies: `make build` overwrites objs/ in place (cp -f), and a
# module .so rewritten under a running nginx kills its workers (SIGBUS).
mkdir -p "$TMP/bin"
cp "$NGINX" "$TMP/bin/nginx"
cp "$MODULE" "$TMP/bin/ngx_http_pow_shield_module.so"
NGINX_SRC=$NGINX MODULE_SRC=$MODULE
NGINX=$TMP/bin/nginx MODULE=$TMP/bin/ngx_http_pow_shield_module.so
NGINX_PIDFILES=()
REDIS_PID=""

# shellcheck disable=SC2317  # run by the EXIT trap (shellcheck 0.9 cannot see it)
cleanup() {
    local rc=$?
    set +e
    for pidfile in "${NGINX_PIDFILES[@]}"; do
        [[ -s $pidfile ]] || continue
        local pid
        pid=$(<"$pidfile")
        kill -QUIT "$pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    done
    [[ -z $REDIS_PID && -s $TMP/redis.pid ]] && REDIS_PID=$(<"$TMP/redis.pid")
    if [[ -n $REDIS_PID ]]; then
        kill -CONT "$REDIS_PID" 2>/dev/null
        kill -TERM "$REDIS_PID" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$REDIS_PID" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$REDIS_PID" 2>/dev/null && kill -KILL "$REDIS_PID"
    fi
    if [[ ${BENCH_KEEP:-0} == 1 ]]; then
        echo "kept: $TMP"
    else
        rm -rf "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

read -r P_STOCK P_LIMIT_REQ P_LOCAL P_LOCAL_MANY P_YELLOW P_BLOCKED P_BLOCKED_QUIET P_BLOCKED_444 \
    P_CLUSTER P_CLUSTER_MANY P_REDIS P_STATUS P_METRICS P_LOCAL_NOHEADERS <<<"$(free_ports 14)"
declare -A PORT=([stock]=$P_STOCK [stock_close]=$P_STOCK [limit_req]=$P_LIMIT_REQ [local]=$P_LOCAL
    [local_noheaders]=$P_LOCAL_NOHEADERS [local_many]=$P_LOCAL_MANY
    [yellow]=$P_YELLOW [blocked]=$P_BLOCKED [blocked_quiet]=$P_BLOCKED_QUIET [blocked_444]=$P_BLOCKED_444
    [cluster]=$P_CLUSTER
    [cluster_many]=$P_CLUSTER_MANY [local_status]=$P_STATUS)
declare -A LABEL=([stock]="stock nginx" [stock_close]="stock, Connection: close" [limit_req]="limit_req (green)"
    [local]="pow-shield local (green)" [local_noheaders]="local (green), headers off"
    [local_status]="local (green), metrics on"
    [cluster]="pow-shield cluster (green)"
    [local_many]="pow-shield local, key/request" [cluster_many]="pow-shield cluster, key/request"
    [yellow]="pow-shield local, yellow (429)" [blocked]="pow-shield local, blocked (403)"
    [blocked_quiet]="blocked (403), not logged"
    [blocked_444]="blocked, 444 (closes/s)")
declare -A EXPECT=([stock]=200 [stock_close]=200 [limit_req]=200 [local]=200 [local_noheaders]=200 [local_status]=200 [local_many]=200 [cluster]=200
    [cluster_many]=200 [yellow]=429 [blocked]=403 [blocked_quiet]=403 [blocked_444]=444)
# The blocked cases' client keys; their breakers are opened before the run.
declare -A BLOCKED_KEY=([blocked]=bench-blocked [blocked_quiet]=bench-blocked-quiet
    [blocked_444]=bench-blocked-444)


# ---- the served file and the configurations --------------------------------

mkdir -p "$TMP/html" "$TMP/res"
printf '{"id":42,"name":"pow-shield bench","items":[1,2,3],"ok":true}\n' >"$TMP/html/api.json"
chmod -R a+rX "$TMP/html"
URI=/api.json

# Common part of both nginx configurations: $1 = prefix dir.
conf_head() {
    bench_conf_head "$1" "$MODULE" "$TMP/html" 4096
    echo "    pow_shield_zone 10m;"
}

# Instance 1: stock, limit_req, local green, local yellow.
mkdir -p "$TMP/local"
{
    conf_head "$TMP/local"
    cat <<EOF
    # Green: 1e6 r/s with a burst of 1e6, so nothing is ever refused
    # (burst 0 would refuse a second request within the same millisecond).
    limit_req_zone \$binary_remote_addr zone=bench:10m rate=1000000r/s;

    server {            # stock
        listen 127.0.0.1:$P_STOCK;
        location = $URI { }
    }
    server {            # limit_req, green
        listen 127.0.0.1:$P_LIMIT_REQ;
        location = $URI { limit_req zone=bench burst=1000000 nodelay; }
    }
    server {            # pow-shield local mode, green: the largest limit
        listen 127.0.0.1:$P_LOCAL;   # parse_limit allows (1e6 per 1 s)
        location = $URI { pow_shield_limit 1000000 1s; }
    }
    server {            # the same without the rate-limit headers (what
        listen 127.0.0.1:$P_LOCAL_NOHEADERS;  # they cost; limit_req sends none)
        location = $URI { pow_shield_limit 1000000 1s; pow_shield_headers off; }
    }
    server {            # the same, but every request is a new client:
        listen 127.0.0.1:$P_LOCAL_MANY;  # one new zone entry per request
        location = $URI {
            pow_shield_limit 1000000 1s;
            pow_shield_key \$request_id;
        }
    }
    server {            # pow-shield local mode, yellow: one request a day,
        listen 127.0.0.1:$P_YELLOW;  # then every request gets 429 + challenge
        location = $URI {
            pow_shield_limit 1 1d;
            pow_shield_log_level info;   # not written: error_log is at notice
            # Else the 6th 429 opens the breaker, and 127.0.0.1 is the
            # green cases' client too: this case is the yellow path.
            pow_shield_strikes off;
        }
    }
EOF
    for c in blocked blocked_quiet blocked_444; do
        cat <<EOF
    server {            # $c: a client (a fixed key) whose breaker the
        listen 127.0.0.1:${PORT[$c]};  # trap opens before the run
        pow_shield_key ${BLOCKED_KEY[$c]};
        pow_shield_strikes 5 1h;       # 1h: still open at the end
        pow_shield_block_status $([[ $c == blocked_444 ]] && echo 444 || echo 403);
        # blocked_quiet: the block's log line is not written (error_log is
        # at notice); the others write one line per blocked request (warn).
        pow_shield_log_level $([[ $c == blocked_quiet ]] && echo info || echo warn);
        location = $URI { pow_shield_limit 1000000 1s; }
        location = /trap { pow_shield_trap; }
    }
EOF
    done
    echo "}"
} >"$TMP/local/nginx.conf"

# Instance 2: cluster mode (pow_shield_redis is an http-level setting).
mkdir -p "$TMP/cluster"
{
    conf_head "$TMP/cluster"
    cat <<EOF
    pow_shield_redis redis://127.0.0.1:$P_REDIS;

    server {            # pow-shield cluster mode, green
        listen 127.0.0.1:$P_CLUSTER;
        location = $URI { pow_shield_limit 1000000 1s; }
    }
    server {            # the same, but every request is a new client:
        listen 127.0.0.1:$P_CLUSTER_MANY;  # one new sorted set per request
        location = $URI {
            pow_shield_limit 1000000 1s;
            pow_shield_key \$request_id;
        }
    }
}
EOF
} >"$TMP/cluster/nginx.conf"

# Instance 3: the local green case again, with metrics counting on: a
# pow_shield_status location exists (in another server; scraped once at the
# end, as a check that the run was counted).
mkdir -p "$TMP/status"
{
    conf_head "$TMP/status"
    cat <<EOF
    server {            # pow-shield local mode, green, metrics on
        listen 127.0.0.1:$P_STATUS;
        location = $URI { pow_shield_limit 1000000 1s; }
    }
    server {
        listen 127.0.0.1:$P_METRICS;
        location = /metrics { pow_shield_status; allow 127.0.0.1; deny all; }
    }
}
EOF
} >"$TMP/status/nginx.conf"

# ---- start everything -------------------------------------------------------


start_nginx() { # start_nginx <dir> <port to wait for>
    local dir=$1
    "$NGINX" -t -q -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" ||
        die "nginx -t failed for $dir/nginx.conf"
    NGINX_PIDFILES+=("$dir/nginx.pid")
    pin "$NGINX_CPU" "$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log"
    wait_port "$2" "nginx ($dir)"
}

CMD_REDIS=""
if uses cluster; then
    CMD_REDIS="$REDIS_SERVER --port $P_REDIS --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir $TMP"
    pin "$REDIS_CPU" "$REDIS_SERVER" --port "$P_REDIS" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize yes --pidfile "$TMP/redis.pid" --dir "$TMP" --logfile "$TMP/redis.log" ||
        die "redis-server did not start"
    wait_port "$P_REDIS" "redis-server"
    for _ in $(seq 50); do [[ -s $TMP/redis.pid ]] && break; sleep 0.1; done
    REDIS_PID=$(<"$TMP/redis.pid")
    for _ in $(seq 50); do
        [[ $("$REDIS_CLI" -p "$P_REDIS" ping 2>/dev/null) == PONG ]] && break
        sleep 0.1
    done
fi
if uses local; then start_nginx "$TMP/local" "$P_STOCK"; fi
if uses cluster; then start_nginx "$TMP/cluster" "$P_CLUSTER"; fi
if uses status; then start_nginx "$TMP/status" "$P_STATUS"; fi

# Open the blocked cases' breakers: five trap hits (404 each) are five
# strikes, the fifth opens it (pow_shield_strikes 5).
for c in $CASES; do
    [[ -n ${BLOCKED_KEY[$c]:-} ]] || continue
    for i in 1 2 3 4 5; do
        code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:${PORT[$c]}/trap" || true)
        [[ $code == 404 ]] || die "$c: trap hit $i answered '$code', expected 404"
    done
done

# One request per case: the answer must be the expected status, and shielded
# cases must carry the rate-limit headers (proof the module ran); a blocked
# client gets the block response, or with 444 a closed connection.
for c in $CASES; do
    url="http://127.0.0.1:${PORT[$c]}$URI"
    if [[ $c == blocked_444 ]]; then
        rc=0
        curl -s -m 5 -o /dev/null "$url" || rc=$?
        ((rc == 52)) || die "$c: expected the connection closed without a reply (curl exit 52), got exit $rc"
        continue
    fi
    hdr=$(curl -s -m 5 -o /dev/null -D - "$url" || true)
    [[ $c == yellow ]] && hdr=$(curl -s -m 5 -o /dev/null -D - "$url" || true)
    status=$(awk 'NR==1 {print $2}' <<<"$hdr")
    [[ $status == "${EXPECT[$c]}" ]] || die "$c: expected ${EXPECT[$c]} from $url, got '${status:-no answer}'"
    case $c in
    local_noheaders)
        ! grep -qi '^X-RateLimit-Limit:' <<<"$hdr" || die "$c: X-RateLimit-Limit sent with pow_shield_headers off"
        ;;
    local* | cluster* | yellow)
        grep -qi '^X-RateLimit-Limit:' <<<"$hdr" || die "$c: no X-RateLimit-Limit header: is the module active?"
        ;;
    blocked*) grep -qi '^X-PoW-Shield: blocked' <<<"$hdr" || die "$c: no 'X-PoW-Shield: blocked' header" ;;
    esac
done

# ---- what is being measured ------------------------------------------------

echo "== pow-shield bench/run.sh — $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "machine:  $CPUS cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), Linux $(uname -r)"
echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, before the run)"
echo "nginx:    $("$NGINX" -v 2>&1 | sed 's/^nginx version: //') ($NGINX_SRC, copied)"
echo "module:   $MODULE_SRC (copied; sha256 $(sha256sum "$MODULE" | cut -c1-12), built $(date -u -r "$MODULE_SRC" '+%F %T UTC'), git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src 2>/dev/null || echo '+dirty src'))"
echo "wrk:      $("$WRK" -v 2>&1 | head -1 | cut -d' ' -f1-2)"
uses cluster && echo "redis:    $("$REDIS_SERVER" --version | cut -d' ' -f1-3)"
echo "pinning:  nginx cpu $NGINX_CPU, wrk cpu $WRK_CPU$(uses cluster && echo ", redis cpu $REDIS_CPU")$( ((CPUS < 2)) && echo ' (not applied: < 2 cores)')"
echo "nginx:    $(uses status && echo "metrics on in its own instance, ")$(uses cluster && uses local && echo "2 instances, ")1 worker each, access_log off, file $URI ($(stat -c %s "$TMP/html/api.json") bytes)"
echo "run:      $ROUNDS rounds x $DURATION s per case, cases interleaved, rotated by one a round: $CASES"
echo "commands:"
echo "  taskset -c $NGINX_CPU $NGINX -p <dir> -c <dir>/nginx.conf      (configs: BENCH_KEEP=1 keeps $TMP)"
[[ -n $CMD_REDIS ]] && echo "  taskset -c $REDIS_CPU $CMD_REDIS"
echo "  taskset -c $WRK_CPU $WRK -t$THREADS -c$CONNS -d${DURATION}s --latency http://127.0.0.1:<port>$URI"
has_case stock_close && echo "  (stock, Connection: close: the same wrk with -H 'Connection: close', on stock's port)"
echo

# ---- load ------------------------------------------------------------------

# Redis's command counts, one "<command> <calls>" a line. Commands a script
# runs are counted too (Redis counts them in commandstats).
redis_calls() {
    "$REDIS_CLI" -p "$P_REDIS" info commandstats | tr -d '\r' |
        awk -F'[:=,]' '/^cmdstat_/ { sub(/^cmdstat_/, "", $1); print $1, $3 }'
}
evalsha_calls() { redis_calls | awk '$1 == "evalsha" {n = $2} END {print n + 0}'; }

# The worker of the nginx serving a case, and CPU ticks a process has used.
worker_of() { ps -o pid= --ppid "$(<"$TMP/$1/nginx.pid")" | head -1 | tr -d ' '; }
declare -A WORKER
if uses local; then WORKER[local]=$(worker_of local); fi
if uses cluster; then WORKER[cluster]=$(worker_of cluster); fi
if uses status; then WORKER[status]=$(worker_of status); fi
ticks() { [[ -n $1 && -r /proc/$1/stat ]] && awk '{print $14 + $15}' "/proc/$1/stat" || echo 0; }
HZ=$(getconf CLK_TCK)

run_wrk() { # run_wrk <case> <seconds> <output file>
    local c=$1 secs=$2 out=$3 opts=()
    # A new connection per request, as a 444 forces (wrk needs the space).
    [[ $c == stock_close ]] && opts=(-H "Connection: close")
    pin "$WRK_CPU" timeout -k 5 $((secs + 30)) \
        "$WRK" -t"$THREADS" -c"$CONNS" -d"${secs}s" --latency "${opts[@]}" \
        "http://127.0.0.1:${PORT[$c]}$URI" >"$out" 2>&1 ||
        die "wrk failed for $c: $(tail -3 "$out")"
    local log
    log=$TMP/$(instance "$c")/error.log
    if grep -q 'exited on signal' "$log"; then
        cp -r "$TMP" "$TMP.crash" 2>/dev/null
        die "$c: nginx worker crashed under load: $(grep -m1 'exited on signal' "$log") (logs kept in $TMP.crash)"
    fi
}

# Latency text from wrk (e.g. 812.00us, 1.23ms, 2.01s) in ms.
to_ms() {
    awk -v v="$1" 'BEGIN {
        n = v + 0
        if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /m$/) n *= 60000; else if (v ~ /s$/) n *= 1000
        printf "%.3f", n }'
}

if ((WARMUP > 0)); then
    for c in $CASES; do run_wrk "$c" "$WARMUP" "$TMP/res/$c.warmup"; done
fi

# One line per run: case round req/s p50 p99 requests non2xx sockerr nginx-ticks redis-ticks
# evalsha (blocked_444: req/s and requests are connections closed unanswered)
RECORDS=$TMP/res/records
: >"$RECORDS"
read -ra CASE_LIST <<<"$CASES"
for r in $(seq "$ROUNDS"); do
    # This round's order: the list rotated by r - 1.
    n_cases=${#CASE_LIST[@]}
    for ((i = 0; i < n_cases; i++)); do
        c=${CASE_LIST[$(((i + r - 1) % n_cases))]}
        f=$TMP/res/$c.$r
        w=${WORKER[$(instance "$c")]}
        n0=$(ticks "$w")
        r0=$(ticks "$REDIS_PID")
        e0=0 e1=0
        [[ $c == cluster* ]] && e0=$(evalsha_calls)
        run_wrk "$c" "$DURATION" "$f"
        n1=$(ticks "$w")
        r1=$(ticks "$REDIS_PID")
        [[ $c == cluster* ]] && e1=$(evalsha_calls)
        rps=$(awk '/^Requests\/sec:/ {print $2}' "$f")
        p50=$(to_ms "$(awk '$1 == "50%" {print $2}' "$f")")
        p99=$(to_ms "$(awk '$1 == "99%" {print $2}' "$f")")
        reqs=$(awk '/ requests in / {print $1}' "$f")
        bad=$(awk '/Non-2xx or 3xx responses:/ {n = $NF} END {print n + 0}' "$f")
        errs=$(awk -F'[ ,]+' '/Socket errors:/ {n = $5 + $7 + $9 + $11} END {print n + 0}' "$f")
        if [[ $c == blocked_444 ]]; then
            # nginx closes each connection without a reply: wrk counts a read
            # error, reconnects and sends again. Those are this case's requests.
            secs=$(awk '/ requests in / {sub(/,$/, "", $4); print $4}' "$f")
            reqs=$((reqs + errs))
            rps=$(awk -v n="$reqs" -v ms="$(to_ms "$secs")" 'BEGIN {printf "%.2f", ms ? n * 1000 / ms : 0}')
        fi
        redis_ticks=0
        [[ $c == cluster* ]] && redis_ticks=$((r1 - r0))
        echo "$c $r $rps $p50 $p99 $reqs $bad $errs $((n1 - n0)) $redis_ticks $((e1 - e0))" >>"$RECORDS"
        printf 'round %d/%d  %-32s %10.0f req/s  p99 %8.3f ms  nginx CPU %6.2f us/req%s\n' "$r" "$ROUNDS" \
            "${LABEL[$c]}" "$rps" "$p99" "$(awk -v t=$((n1 - n0)) -v n="$reqs" -v hz="$HZ" 'BEGIN {print n ? t / hz * 1e6 / n : 0}')" \
            "$([[ $c == cluster* ]] && echo "  EVALSHA $((e1 - e0)) for $reqs requests")"
    done
done
echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, after the run)"
echo

# ---- results ---------------------------------------------------------------

# Per case: medians over rounds; ratios are medians of the per-round ratios
# (each round's case against the same round's baseline, run minutes apart
# at most, so slow drifts in background load cancel out).
summary() { # summary <case> [<baseline> [<second baseline>]]: baselines [stock limit_req]
    awk -v c="$1" -v b1="${2:-stock}" -v b2="${3:-limit_req}" -v hz="$HZ" '
        function med(a, n,   i, j, t) {
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        { rps[$1, $2] = $3; p50[$1, $2] = $4; p99[$1, $2] = $5; reqs[$1, $2] = $6
          bad[$1] += $7; err[$1] += $8; nt[$1, $2] = $9; rt[$1, $2] = $10; rounds[$2] = 1 }
        END {
            n = 0; lo = ""; hi = 0
            for (r in rounds) {
                n++
                R[n] = rps[c, r]; P5[n] = p50[c, r]; P9[n] = p99[c, r]
                CPU[n] = reqs[c, r] ? nt[c, r] / hz * 1e6 / reqs[c, r] : 0
                RCPU[n] = reqs[c, r] ? rt[c, r] / hz * 1e6 / reqs[c, r] : 0
                if (lo == "" || R[n] < lo) lo = R[n]; if (R[n] > hi) hi = R[n]
                S[n] = (b1, r) in rps ? R[n] / rps[b1, r] : -1
                L[n] = (b2, r) in rps ? R[n] / rps[b2, r] : -1
                SC[n] = (b1, r) in rps && reqs[b1, r] && nt[b1, r] ? (CPU[n]) / (nt[b1, r] / hz * 1e6 / reqs[b1, r]) : -1
            }
            cpu = med(CPU, n); rcpu = med(RCPU, n); s = med(S, n); l = med(L, n); sc = med(SC, n)
            printf "%.0f %.0f-%.0f %.3f %.3f %.2f %s %s %s %s %d %d\n", med(R, n), lo, hi, med(P5, n), med(P9, n), cpu,
                c ~ /^cluster/ ? sprintf("%.2f", rcpu) : "-",
                s < 0 ? "-" : sprintf("%.3f", s), l < 0 ? "-" : sprintf("%.3f", l),
                sc < 0 ? "-" : sprintf("%.2f", sc), bad[c], err[c]
        }' "$RECORDS"
}

echo "results: $ROUNDS rounds x $DURATION s, $CONNS connections, $THREADS wrk thread(s); medians over rounds"
printf '%-31s %8s %13s %7s %8s %8s %8s %8s %9s %8s %8s %7s\n' case "req/s" "min-max" "p50 ms" "p99 ms" \
    "CPU us" "redis us" "vs stock" "vs lim_req" "CPU/stk" "non-2xx" sockerr
declare -A BAD ERRS
for c in $CASES; do
    read -r rps range p50 p99 cpu rcpu s l sc bad errs <<<"$(summary "$c")"
    BAD[$c]=$bad
    ERRS[$c]=$errs
    printf '%-31s %8s %13s %7s %8s %8s %8s %8s %9s %8s %8s %7s\n' "${LABEL[$c]}" "$rps" "$range" "$p50" "$p99" \
        "$cpu" "$rcpu" "$s" "$l" "$sc" "$bad" "$errs"
done
cat <<EOF
  req/s, p50, p99: wrk's figures, median over rounds; min-max: req/s range over rounds.
  CPU us: nginx worker CPU time (user+sys, /proc) per request; redis us: the same for
    redis-server (cluster cases only). Less sensitive to background load than req/s.
  vs stock, vs lim_req: req/s ratio against that baseline in the same round, median over rounds.
  CPU/stk: CPU us per request against stock's in the same round, median over rounds.
  non-2xx: expected 0 on green paths; on the yellow path every response but the first is 429,
    on the blocked path every response is 403.
  blocked, 444: nginx closes every connection unanswered; wrk counts each as a socket (read)
    error and reconnects: req/s is those closes per second, CPU us per close, no latency.
    Each costs a TCP connect + close, which keep-alive spares stock nginx: compare it with
    "stock, Connection: close" (a new connection per request too), below.
EOF
if has_case local_status && has_case local; then
    read -r rps _ _ _ cpu _ s _ sc _ _ <<<"$(summary local_status local)"
    echo "metrics on (a pow_shield_status location) against off, local green, same rounds:" \
        "req/s $rps = $s x off's; CPU us $cpu = $sc x off's CPU us per request"
fi
if has_case local_noheaders && has_case local; then
    read -r rps _ _ _ cpu _ s _ sc _ _ <<<"$(summary local local_noheaders)"
    echo "rate-limit headers on (pow_shield_headers both) against off, local green, same rounds:" \
        "req/s $rps = $s x off's; CPU us $cpu = $sc x off's CPU us per request"
fi
if has_case blocked_444 && has_case stock_close; then
    read -r rps _ _ _ cpu _ s _ sc _ _ <<<"$(summary blocked_444 stock_close)"
    echo "blocked, 444 against stock nginx with Connection: close, same rounds:" \
        "closes/s $rps = $s x its req/s; CPU us $cpu = $sc x its CPU us per request"
fi
echo

# ---- sanity: did the module behave? ------------------------------------------

status=0
for c in $CASES; do
    if [[ ${EXPECT[$c]} == 200 && ${BAD[$c]} != 0 ]]; then
        echo "WARNING: ${LABEL[$c]}: ${BAD[$c]} non-2xx responses on a green path"
        status=1
    fi
    if [[ $c == blocked || $c == blocked_quiet ]]; then
        total=$(awk -v c="$c" '$1 == c {n += $6} END {print n + 0}' "$RECORDS")
        if [[ ${BAD[$c]} != "$total" ]]; then
            echo "WARNING: ${LABEL[$c]}: ${BAD[$c]} non-2xx of $total responses: the breaker closed during the run"
            status=1
        fi
    fi
    if [[ $c == blocked_444 ]]; then
        answered=$(cat "$TMP"/res/blocked_444.[0-9]* | awk '/ requests in / {n += $1} END {print n + 0}')
        if ((answered != 0)); then
            echo "WARNING: ${LABEL[$c]}: $answered requests were answered: the breaker closed during the run"
            status=1
        fi
    elif [[ ${ERRS[$c]} != 0 ]]; then
        echo "WARNING: ${LABEL[$c]}: ${ERRS[$c]} socket errors (connect/read/write/timeout)"
    fi
done
if uses cluster; then
    evalsha=$("$REDIS_CLI" -p "$P_REDIS" info commandstats |
        awk -F'[=,:]' '/^cmdstat_evalsha:/ {print $3}' | tr -d '\r')
    # Warm-up and the startup check ran requests too.
    reqs=$(awk '$1 ~ /^cluster/ {n += $6} END {print n + 0}' "$RECORDS")
    warm=$({ cat "$TMP"/res/cluster*.warmup 2>/dev/null || true; } | awk '/ requests in / {n += $1} END {print n + 0}')
    reqs=$((reqs + warm))
    reads=$("$REDIS_CLI" -p "$P_REDIS" info stats | awk -F: '/^total_reads_processed:/ {print $2}' | tr -d '\r')
    echo "cluster: Redis ran EVALSHA ${evalsha:-0} times; wrk counted $reqs requests (warm-up included);" \
        "$(awk -v e="${evalsha:-0}" -v r="${reads:-0}" 'BEGIN {printf "%.1f", r ? e / r : 0}') commands per socket read (pipelining);" \
        "keys now: $("$REDIS_CLI" -p "$P_REDIS" dbsize)," \
        "used_memory: $("$REDIS_CLI" -p "$P_REDIS" info memory | awk -F: '/^used_memory_human:/ {print $2}' | tr -d '\r')"
    if ((${evalsha:-0} < reqs * 99 / 100)); then
        echo "WARNING: fewer EVALSHA than requests: some cluster requests were decided by the fallback"
        status=1
    fi
    # Under wrk the counts differ by the requests in flight when it stops; an
    # exact count needs a known number of requests: 200 on one connection.
    # Per request: EVALSHA, and only the commands the script runs inside it
    # (no EVAL, no SCRIPT LOAD, no second round trip).
    if has_case cluster; then
        redis_calls >"$TMP/res/cmdstats.0"
        url="http://127.0.0.1:${PORT[cluster]}$URI"
        codes=$(for _ in $(seq 200); do echo "url = \"$url\""; echo "output = /dev/null"; done |
            curl -s -m 30 -K - -w '%{http_code}\n' | sort | uniq -c | awk '{printf " %s x %s", $1, $2}')
        redis_calls >"$TMP/res/cmdstats.1"
        delta=$(awk 'NR == FNR {n0[$1] = $2; next} $1 != "info" && $2 != n0[$1] {printf " %s %g", $1, ($2 - n0[$1]) / 200}' \
            "$TMP/res/cmdstats.0" "$TMP/res/cmdstats.1")
        echo "cluster: 200 sequential green requests (answers:$codes); Redis commands per request:$delta"
        if [[ " $delta " != *" evalsha 1 "* || " $delta " == *" eval "* || " $delta " == *" script "* ]]; then
            echo "WARNING: not exactly one EVALSHA (and no EVAL or SCRIPT) per green cluster request"
            status=1
        fi
    fi
fi
if has_case local_status; then
    # Every request of the case (warm-up, check and wrk's) was counted.
    counted=$(curl -s -m 5 "http://127.0.0.1:$P_METRICS/metrics" |
        awk '$1 == "pow_shield_requests_total{result=\"pass\"}" {print $2}')
    total=$(awk '$1 == "local_status" {n += $6} END {print n + 0}' "$RECORDS")
    echo "metrics on: pow_shield_requests_total{result=\"pass\"} ${counted:-none} after $total measured requests (plus warm-up)"
    if [[ -z $counted ]] || ((counted < total)); then
        echo "WARNING: metrics on: fewer requests counted than wrk made"
        status=1
    fi
fi
for dir in local cluster status; do
    log=$TMP/$dir/error.log
    [[ -f $log ]] || continue
    n=$(grep -cE '\[(warn|error|crit|alert|emerg)\]' "$log" || true)
    signals=$(grep -c 'exited on signal' "$log" || true)
    echo "error.log ($dir): $n lines at warn or above, $signals worker crashes"
    { grep -E '\[(warn|error|crit|alert|emerg)\]' "$log" || true; } | sed -E 's/^[0-9\/: ]+//; s/[0-9]+#[0-9]+: (\*[0-9]+ )?//; s/, client: .*//' |
        sort | uniq -c | sort -rn | head -5 | sed 's/^/    /'
    ((signals == 0)) || status=1
done
exit "$status"
