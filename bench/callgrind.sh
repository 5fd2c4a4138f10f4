#!/usr/bin/env bash
# bench/callgrind.sh — instructions a request (valgrind's callgrind), for
# stock nginx, limit_req and pow-shield's local mode (green), in one nginx:
# the figure that does not swing with the machine's load, unlike req/s.
#
#   make build && bench/callgrind.sh
#   CG_REQUESTS=5000 CG_CASES="limit_req local_noheaders" bench/callgrind.sh
#   CG_ANNOTATE=local bench/callgrind.sh    also the module's functions for
#                                           that case (callgrind_annotate)
#
# One nginx, single process (`master_process off; daemon off;
# worker_processes 1`), runs under `valgrind --tool=callgrind` and serves
# the same 62-byte static file as bench/run.sh on a port per case, with
# the same configurations (`limit_req ... burst=1000000 nodelay`,
# `pow_shield_limit 1000000 1s`, with and without `pow_shield_headers
# off`). Per case: a check of the answer, CG_WARMUP requests and more
# until CG_STEADY_MS have passed (a steady client: every slot of the 1 s
# window holds requests, as it does for any client sending on for longer
# than a window), then
# callgrind's counters are zeroed (`callgrind_control -z`), CG_REQUESTS
# requests are sent on one keep-alive connection (curl -K), and the
# counters dumped (`callgrind_control -d`): the dump's total divided by
# CG_REQUESTS is the instructions a request, the whole of nginx's work for
# it (reading, the phases, the static file, the filters, writing). That
# is done CG_REPEAT times back to back per case, and the median is the
# case's figure (min..max and each beside it): the first measurement of
# a case runs ~40-70 higher than the rest in every case, stock's too
# (what the connection before it left to do: its close, a timer), and
# one measurement alone moved by ±20 between runs of the same build; the
# median of 5 moves by a few instructions.
# Loopback only; everything started here is stopped on exit.
#
# Environment (defaults in brackets):
#   CG_REQUESTS   requests measured per case [2000]
#   CG_REPEAT     measurements per case, the median reported [5]
#   CG_WARMUP     requests before measuring, per case [50]
#   CG_STEADY_MS  warm-up goes on (CG_WARMUP requests at a time, at least
#                 50) until this long after it started [1100: longer than
#                 the cases' 1 s window; 0: CG_WARMUP requests only]
#   CG_CASES      subset/order of: stock limit_req local local_noheaders
#                 local_many local_stacked local_over cluster_over
#                 [stock limit_req local local_noheaders]
#                 local_stacked: two limits (`1000000 1s` and
#                 `1000000 1h`), headers off
#                 local_over: one client over its limit (`pow_shield_limit
#                 1 1d`, strikes off, log level info as in
#                 bench/cluster_flood.sh): every measured request a 429
#                 with its challenge; cluster_over: the same in cluster
#                 mode (a redis-server started here), refused on the node
#   CG_STRUCK=1   one struck client in the zone before any case is
#                 measured: a location `pow_shield_key bench-struck;
#                 pow_shield_limit 1 1h; pow_shield_strikes 5 1d` asked 3
#                 times (200, 429, 429), so that the zone's breaker table
#                 holds an entry (as a real zone's almost always does:
#                 one 429 anywhere within the strikes time) while the
#                 local cases run; their clients have no breaker [0]
#   CG_ANNOTATE   a case whose profile is printed (callgrind_annotate,
#                 inclusive, the module's and nginx's top functions) of
#                 its measurement number (CG_REPEAT+1)/2 in time order
#                 (the 3rd of 5, not necessarily the median's) []
#   CG_KEEP=1     keep the temp dir (config, log, callgrind dumps)
#   CG_VALGRIND_ARGS  more callgrind options, e.g. --dump-instr=yes (costs
#                 by instruction address, for a profile inside the
#                 module's inlined handler) []
#   NGINX, MODULE binaries [objs/nginx, objs/ngx_http_pow_shield_module.so]

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
REQUESTS=${CG_REQUESTS:-2000}
WARMUP=${CG_WARMUP:-50}
REPEAT=${CG_REPEAT:-5}
STEADY_MS=${CG_STEADY_MS:-1100}
CASES=${CG_CASES:-stock limit_req local local_noheaders}
ANNOTATE=${CG_ANNOTATE:-}
STRUCK=${CG_STRUCK:-0}

die() { echo "bench/callgrind.sh: $*" >&2; exit 1; }

if ! [[ $REQUESTS =~ ^[0-9]+$ ]] || ((REQUESTS < 1)); then
    die "CG_REQUESTS must be a whole number >= 1"
fi
[[ $WARMUP =~ ^[0-9]+$ ]] || die "CG_WARMUP must be a whole number"
if ! [[ $REPEAT =~ ^[0-9]+$ ]] || ((REPEAT < 1)); then
    die "CG_REPEAT must be a whole number >= 1"
fi
[[ $STEADY_MS =~ ^[0-9]+$ ]] || die "CG_STEADY_MS must be a whole number"
[[ $STRUCK == 0 || $STRUCK == 1 ]] || die "CG_STRUCK must be 0 or 1"
[[ -x $NGINX ]] || die "$NGINX not found: run 'make build' first"
[[ -f $MODULE ]] || die "$MODULE not found: run 'make build' first"
TOOLS="valgrind callgrind_control callgrind_annotate curl"
[[ " $CASES " == *" cluster_over "* ]] && TOOLS+=" ${REDIS_SERVER:-redis-server}"
for tool in $TOOLS; do
    command -v "$tool" >/dev/null || die "$tool not found: apt-get install -y valgrind curl"
done
declare -A LABEL=([stock]="stock nginx" [limit_req]="limit_req (green)"
    [local]="pow-shield local (green)" [local_noheaders]="local (green), headers off"
    [local_many]="local, key/request" [local_stacked]="local, 2 limits, no hdrs"
    [local_over]="local, over: 429"
    [cluster_over]="cluster, over: 429")

# --- Cluster mode's green path, one and two limits (issue 38) -----------
# redis_one, redis_two: cluster mode on one Redis; cluster3_one,
# cluster3_two: on a Redis Cluster of three masters (bench/net_lib.sh's,
# started here). `one` is `pow_shield_limit 1000000 1s;`, `two` adds
# `pow_shield_limit 1000000 1s name=net key=$pow_shield_net;` (the
# client's /24): bench/net_limits.sh's one and two, every request
# admitted. One nginx under callgrind a backend (cluster mode is
# http-wide); the client is 127.0.0.1 throughout (its keys, and so their
# slots, are the same on every request). The kernel's time is not
# counted: bench/net_limits.sh with NET_SYSCALLS=1 counts syscalls.
# cluster3net_one, cluster3net_two: the same with `slot=net` (a client's
# keys in its /24's slot: two limits, one call), on a cluster of its own.
NET_CG_CASES="redis_one redis_two cluster3_one cluster3_two cluster3net_one cluster3net_two"
LABEL+=([redis_one]="cluster, 1 Redis, 1 limit" [redis_two]="cluster, 1 Redis, 2 limits"
    [cluster3_one]="cluster, 3 masters, 1 limit" [cluster3_two]="cluster, 3 masters, 2 limits"
    [cluster3net_one]="cluster slot=net, 1 limit" [cluster3net_two]="cluster slot=net, 2 limits")
declare -A CG_DIR_OF=() # case -> the dir of the nginx serving it (default $TMP)
PIDS=()                 # bench/net_lib.sh's Redis processes, stopped on exit
# shellcheck source=bench/net_lib.sh
. "$ROOT/bench/net_lib.sh"
net_cg_wanted() { # net_cg_wanted <backend>: a case of that backend in CG_CASES?
    local c
    for c in $CASES; do [[ $c == "$1"_* && " $NET_CG_CASES " == *" $c "* ]] && return 0; done
    return 1
}
# net_cg_up: the Redis (one, or a Redis Cluster) and the nginx of each
# backend CG_CASES names; their ports in PORT, their dirs in CG_DIR_OF.
net_cg_up() {
    local b dir p1 p2 ports slot
    for b in redis cluster3 cluster3net; do
        net_cg_wanted "$b" || continue
        dir=$TMP/$b slot=""
        [[ $b == cluster3net ]] && slot=net
        read -r p1 p2 <<<"$(free_ports 2)"
        if [[ $b == redis ]]; then
            read -r -a ports <<<"$(free_ports 1)"
            redis_up "${ports[0]}" "$dir/redis"
        else
            read -r -a ports <<<"$(free_ports 3)"
            redis_cluster_up "$dir/cluster" "${ports[@]}"
        fi
        {
            echo "master_process off;"
            echo "daemon off;"
            bench_conf_head "$dir" "$MODULE" "$TMP/html" 64
            cat <<EOF
    pow_shield_zone 10m;
    $(REDIS_SLOT=$slot redis_line "${ports[@]}")
    keepalive_requests 1000000;
    pow_shield_log_level info;
    server {
        listen 127.0.0.1:$p1;
        location = $URI { pow_shield_limit 1000000 1s; }
    }
    server {
        listen 127.0.0.1:$p2;
        location = $URI {
            pow_shield_limit 1000000 1s;
            pow_shield_limit 1000000 1s name=net key=\$pow_shield_net;
        }
    }
}
EOF
        } >"$dir/nginx.conf"
        PORT[${b}_one]=$p1 PORT[${b}_two]=$p2
        CG_DIR_OF[${b}_one]=$dir CG_DIR_OF[${b}_two]=$dir
        start_nginx "$dir" "$p1"
    done
}
# --- end of cluster mode's green path ------------------------------------
for c in $CASES; do [[ -n ${LABEL[$c]:-} ]] || die "unknown case '$c' in CG_CASES"; done
[[ -z $ANNOTATE || " $CASES " == *" $ANNOTATE "* ]] || die "CG_ANNOTATE=$ANNOTATE is not in CG_CASES"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pow-shield-callgrind.XXXXXX")
chmod 0755 "$TMP"
# Private copies, as bench/run.sh: `make build` rewrites objs/ in place.
mkdir -p "$TMP/bin" "$TMP/html" "$TMP/cg"
cp "$NGINX" "$TMP/bin/nginx"
cp "$MODULE" "$TMP/bin/ngx_http_pow_shield_module.so"
NGINX_SRC=$NGINX MODULE_SRC=$MODULE
NGINX=$TMP/bin/nginx MODULE=$TMP/bin/ngx_http_pow_shield_module.so
VG_PID="" REDIS_PID=""

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    local rc=$? p
    set +e
    # Single process: QUIT is nginx's graceful stop; callgrind then writes
    # its last dump (not read).
    for p in $VG_PID; do stop_pid "$p" QUIT; done
    [[ -n $REDIS_PID ]] && stop_pid "$REDIS_PID"
    for p in "${PIDS[@]}"; do stop_pid "$p"; done # net_cg_up's
    if [[ ${CG_KEEP:-0} == 1 ]]; then echo "kept: $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

printf '{"id":42,"name":"pow-shield bench","items":[1,2,3],"ok":true}\n' >"$TMP/html/api.json"
chmod -R a+rX "$TMP/html"
URI=/api.json
read -r P_STOCK P_LIMIT_REQ P_LOCAL P_LOCAL_NOHEADERS P_LOCAL_MANY P_LOCAL_OVER P_CLUSTER_OVER \
    P_REDIS P_LOCAL_STACKED P_STRUCK <<<"$(free_ports 10)"
declare -A PORT=([stock]=$P_STOCK [limit_req]=$P_LIMIT_REQ [local]=$P_LOCAL
    [local_noheaders]=$P_LOCAL_NOHEADERS [local_many]=$P_LOCAL_MANY
    [local_stacked]=$P_LOCAL_STACKED [local_over]=$P_LOCAL_OVER [cluster_over]=$P_CLUSTER_OVER)
if [[ " $CASES " == *" cluster_over "* ]]; then
    mkdir -p "$TMP/redis"
    redis_start "$P_REDIS" "$TMP/redis" || die "redis-server did not start"
    REDIS_PID=$(<"$TMP/redis/redis.pid")
fi

{
    echo "master_process off;"
    echo "daemon off;"
    bench_conf_head "$TMP" "$MODULE" "$TMP/html" 64
    cat <<EOF
    pow_shield_zone 10m;
    # One connection carries every request of a case.
    keepalive_requests 1000000;
    limit_req_zone \$binary_remote_addr zone=bench:10m rate=1000000r/s;
    server { listen 127.0.0.1:$P_STOCK; location = $URI { } }
    server {
        listen 127.0.0.1:$P_LIMIT_REQ;
        location = $URI { limit_req zone=bench burst=1000000 nodelay; }
    }
    server {
        listen 127.0.0.1:$P_LOCAL;
        location = $URI { pow_shield_limit 1000000 1s; }
    }
    server {
        listen 127.0.0.1:$P_LOCAL_NOHEADERS;
        location = $URI { pow_shield_limit 1000000 1s; pow_shield_headers off; }
    }
    server {
        listen 127.0.0.1:$P_LOCAL_MANY;
        location = $URI { pow_shield_limit 1000000 1s; pow_shield_key \$request_id; }
    }
    server {
        listen 127.0.0.1:$P_LOCAL_STACKED;
        location = $URI {
            pow_shield_limit 1000000 1s;
            pow_shield_limit 1000000 1h;
            pow_shield_headers off;
        }
    }
    server {
        listen 127.0.0.1:$P_LOCAL_OVER;
        pow_shield_strikes off;
        pow_shield_log_level info;
        location = $URI { pow_shield_limit 1 1d; }
    }
    server {
        listen 127.0.0.1:$P_STRUCK;
        location = $URI {
            pow_shield_key bench-struck;
            pow_shield_limit 1 1h;
            pow_shield_strikes 5 1d;
        }
    }
}
EOF
} >"$TMP/nginx.conf"
# Cluster mode is http-wide (`pow_shield_redis`): its case has an nginx of
# its own, in $TMP/cluster.
if [[ -n $REDIS_PID ]]; then
    mkdir -p "$TMP/cluster"
    {
        echo "master_process off;"
        echo "daemon off;"
        bench_conf_head "$TMP/cluster" "$MODULE" "$TMP/html" 64
        cat <<EOF
    pow_shield_zone 10m;
    pow_shield_redis redis://127.0.0.1:$P_REDIS timeout=1s;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$P_CLUSTER_OVER;
        pow_shield_strikes off;
        pow_shield_log_level info;
        location = $URI { pow_shield_limit 1 1d; }
    }
}
EOF
    } >"$TMP/cluster/nginx.conf"
fi

# start_nginx <dir> <a port it listens on>: nginx of <dir>/nginx.conf under
# callgrind (valgrind execs nginx in the same process: $! is nginx's pid).
declare -A VG_OF
start_nginx() {
    local dir=$1 port=$2 pid
    "$NGINX" -t -q -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" || die "nginx -t failed ($dir)"
    # shellcheck disable=SC2086 # CG_VALGRIND_ARGS: words on purpose
    valgrind --tool=callgrind --callgrind-out-file="$TMP/cg/callgrind.out.%p" ${CG_VALGRIND_ARGS:-} \
        "$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" >"$dir/valgrind.log" 2>&1 &
    pid=$!
    VG_PID+=" $pid"
    for _ in $(seq 600); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || die "nginx under valgrind exited: $(tail -3 "$dir/valgrind.log")"
        sleep 0.1
    done
    VG_OF[$dir]=$pid
}
start_nginx "$TMP" "$P_STOCK"
[[ -n $REDIS_PID ]] && start_nginx "$TMP/cluster" "$P_CLUSTER_OVER"
net_cg_up

ms_now() { echo $((${EPOCHREALTIME/./} / 1000)); }

requests() { # requests <case> <n>: n requests on one keep-alive connection, all 200 (*_over: 429)
    local i url="http://127.0.0.1:${PORT[$1]}$URI" want=200 codes
    [[ $1 == *_over ]] && want=429
    codes=$(for ((i = 0; i < $2; i++)); do
        printf 'url = "%s"\noutput = "/dev/null"\nwrite-out = "%%{http_code}\\n"\n' "$url"
    done | timeout 600 curl -s -K - | sort | uniq -c)
    [[ $(awk '{print $2}' <<<"$codes") == "$want" ]] || die "$1: expected only $want, got: $codes"
}

echo "== pow-shield bench/callgrind.sh — $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "nginx:    $("$NGINX" -v 2>&1 | sed 's/^nginx version: //') ($NGINX_SRC, copied), single process"
echo "module:   $MODULE_SRC (sha256 $(sha256sum "$MODULE" | cut -c1-12), git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src core 2>/dev/null || echo '+dirty'))"
echo "valgrind: $(valgrind --version) --tool=callgrind; $REQUESTS requests a measurement on one keep-alive connection (curl -K), $REPEAT measurements a case (median), after $WARMUP and more for ${STEADY_MS} ms"
if ((STRUCK)); then
    # One client struck before any case: the zone's breaker table is not
    # empty (the local cases' clients have no breaker).
    codes=$(for _ in 1 2 3; do
        curl -s -m 30 -o /dev/null -w '%{http_code} ' "http://127.0.0.1:$P_STRUCK$URI" || true
    done)
    [[ $codes == "200 429 429 " ]] || die "CG_STRUCK: expected 200 429 429, got $codes"
    echo "struck:   one client (key bench-struck) has a breaker in the zone (200 429 429)"
fi
echo

declare -A PER LOW HIGH ALL
for c in $CASES; do
    hdr=$(curl -s -m 30 -o /dev/null -D - "http://127.0.0.1:${PORT[$c]}$URI" || true)
    [[ $(awk 'NR==1 {print $2}' <<<"$hdr") == 200 ]] || die "$c: expected 200, got '$(head -1 <<<"$hdr")'"
    case $c in
    *_over) ;;
    local_noheaders | local_stacked) ! grep -qi '^X-RateLimit-Limit:' <<<"$hdr" || die "$c: rate-limit headers sent" ;;
    local*) grep -qi '^X-RateLimit-Limit:' <<<"$hdr" || die "$c: no X-RateLimit-Limit: is the module active?" ;;
    esac
    ((WARMUP > 0)) && requests "$c" "$WARMUP"
    # A steady client, not one that has just arrived: its window's every
    # slot holds requests (the measured ones take under a second), as for
    # a client sending for longer than the window.
    warm_until=$(($(ms_now) + STEADY_MS))
    while (($(ms_now) < warm_until)); do requests "$c" $((WARMUP > 50 ? WARMUP : 50)); done
    vg=${VG_OF[$TMP]}
    [[ $c == cluster_* ]] && vg=${VG_OF[$TMP/cluster]}
    [[ -n ${CG_DIR_OF[$c]:-} ]] && vg=${VG_OF[${CG_DIR_OF[$c]}]}
    # CG_REPEAT measurements back to back, the client sending on between
    # them (each is CG_REQUESTS requests): the median is the figure.
    per=()
    for ((rep = 1; rep <= REPEAT; rep++)); do
        callgrind_control -z "$vg" >/dev/null 2>&1 || die "callgrind_control -z failed"
        requests "$c" "$REQUESTS"
        callgrind_control -d "$c.$rep" "$vg" >/dev/null 2>&1 || die "callgrind_control -d failed"
        dump=""
        for _ in $(seq 100); do
            dump=$(grep -l "^desc: Trigger: dump $c\.$rep\$" "$TMP"/cg/callgrind.out.* 2>/dev/null | head -1 || true)
            [[ -n $dump ]] && grep -q '^totals:' "$dump" && break
            sleep 0.1
        done
        [[ -n $dump ]] || die "$c: no callgrind dump"
        total=$(awk '/^totals:/ {print $2}' "$dump")
        per+=("$(awk -v t="$total" -v n="$REQUESTS" 'BEGIN {printf "%.0f", t / n}')")
        [[ $c == "$ANNOTATE" ]] && ((rep == (REPEAT + 1) / 2)) && cp "$dump" "$TMP/annotate.out"
    done
    read -r median low high < <(printf '%s\n' "${per[@]}" | sort -n |
        awk '{v[NR] = $1} END {
            m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "%.0f %d %d\n", m, v[1], v[NR] }')
    PER[$c]=$median LOW[$c]=$low HIGH[$c]=$high
    ALL[$c]="${per[*]}"
done

ratio() { # ratio <case> <baseline>
    [[ -n ${PER[$2]:-} ]] || { echo "-"; return; }
    awk -v a="${PER[$1]}" -v b="${PER[$2]}" 'BEGIN {printf "%.3f", a / b}'
}
printf '%-28s %12s %10s %10s %12s' case "instr/req" "vs stock" "vs lim_req" "over stock"
((REPEAT > 1)) && printf '  %13s  %s' "min..max" "each"
echo
for c in $CASES; do
    over=-
    [[ -n ${PER[stock]:-} ]] && over=$((PER[$c] - PER[stock]))
    printf '%-28s %12s %10s %10s %12s' "${LABEL[$c]}" "${PER[$c]}" "$(ratio "$c" stock)" \
        "$(ratio "$c" limit_req)" "$over"
    ((REPEAT > 1)) && printf '  %13s  %s' "${LOW[$c]}..${HIGH[$c]}" "${ALL[$c]}"
    echo
done
if [[ -n ${PER[local_noheaders]:-} && -n ${PER[limit_req]:-} ]]; then
    echo
    verdict=ok
    ((PER[local_noheaders] <= PER[limit_req])) || verdict="MORE than limit_req"
    echo "local, headers off vs limit_req: ${PER[local_noheaders]} vs ${PER[limit_req]} instructions a request: $verdict"
fi

if [[ -n $ANNOTATE ]]; then
    echo
    echo "== $ANNOTATE: inclusive instructions a request, top functions (callgrind_annotate)"
    callgrind_annotate --inclusive=yes --threshold=100 "$TMP/annotate.out" 2>/dev/null |
        awk -v n="$REQUESTS" 'match($0, /^ *[0-9,]+ +\( *[0-9.]+%\) +/) {
            v = substr($0, 1, RLENGTH); sub(/\(.*/, "", v); gsub(/[ ,]/, "", v)
            if (v / n >= 20) printf "%8.0f  %s\n", v / n, substr($0, RLENGTH + 1) }' |
        sed -E 's#/root/\.cargo/registry/src/[^ ]*/nginx/src/##; s# \[[^]]*\]$##' | head -70
fi
