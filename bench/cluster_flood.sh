#!/usr/bin/env bash
# bench/cluster_flood.sh — run by bench/cluster.sh when BENCH_MODE=flood
# (bench/README.md, "cluster.sh, flood mode"): what abuse costs the shared
# store. The issue-17 table: req/s, nginx CPU us/req and Redis CPU us/req of
#
#   stock      stock nginx serving the small file
#   green      one client under a 1,000,000/s limit
#   over1      one client over its limit (1 per day): every request a 429
#   over2000   2,000 clients in rotation, all over their limits
#   over2000r  the same under a rising price (`pow_shield_difficulty 1 max=8`:
#              Redis must count every refusal, so the node's batches carry them)
#
# for this build and, with BENCH_BASELINE_MODULE (and the nginx it was
# built with, BENCH_BASELINE_NGINX), for another build in the same run;
# `pow_shield_strikes off` so that nothing blocks. One worker; nginx and
# Redis pinned to core BENCH_NGINX_CPU [0], wrk to BENCH_WRK_CPU [1];
# BENCH_ROUNDS [5] rounds of every case for BENCH_SECONDS [5] s each, after
# a 1 s warm-up per case; medians over the rounds, then ratios against the
# baseline and stock nginx.
#
#   make build && BENCH_MODE=flood bench/cluster.sh
#   BENCH_MODE=flood BENCH_BASELINE_MODULE=/work/wt-old/objs/ngx_http_pow_shield_module.so \
#       BENCH_BASELINE_NGINX=/work/wt-old/objs/nginx bench/cluster.sh
#
# Per case and round, over the measured run only:
#   nginx us/req = delta(utime + stime) of the worker (/proc/<pid>/stat) / requests
#   redis us/req = delta(used_cpu_user + used_cpu_sys) of INFO cpu / requests
#   calls/req    = delta(evalsha + eval calls) of INFO commandstats / requests

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

NGINX=${NGINX:-$ROOT/objs/nginx}
MODULE=${MODULE:-$ROOT/objs/ngx_http_pow_shield_module.so}
BASE_MODULE=${BENCH_BASELINE_MODULE:-}
BASE_NGINX=${BENCH_BASELINE_NGINX:-$NGINX}
DURATION=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-5}
CONNS=${BENCH_CONNECTIONS:-50}
NGINX_CPU=${BENCH_NGINX_CPU:-0}
WRK_CPU=${BENCH_WRK_CPU:-1}
WRK=${WRK:-wrk}
REDIS_CLI=${REDIS_CLI:-redis-cli}

die() { echo "bench/cluster.sh (flood): $*" >&2; exit 1; }
for v in DURATION ROUNDS CONNS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a whole number, not '${!v}'"
done
for f in "$NGINX" "$MODULE"; do [[ -f $f ]] || die "$f not found: run 'make build'"; done
if [[ -n $BASE_MODULE ]]; then
    for f in "$BASE_MODULE" "$BASE_NGINX"; do [[ -f $f ]] || die "$f not found"; done
fi
for t in "$WRK" "${REDIS_SERVER:-redis-server}" "$REDIS_CLI" taskset; do
    command -v "$t" >/dev/null || die "$t not found (make deps-bench)"
done
pin() { local cpu=$1; shift; if (($(nproc) >= 2)); then taskset -c "$cpu" "$@"; else "$@"; fi; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pow-shield-flood.XXXXXX")
chmod 0755 "$TMP"
PIDFILES=() REDIS_PID=
cleanup() {
    local rc=$? p
    set +e
    for p in "${PIDFILES[@]}"; do [[ -s $p ]] && stop_pid "$(<"$p")" QUIT; done
    [[ -n $REDIS_PID ]] && stop_pid "$REDIS_PID"
    if [[ ${BENCH_KEEP:-0} == 1 ]]; then echo "kept: $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Private copies: `make build` rewrites objs/ in place.
mkdir -p "$TMP/new" "$TMP/base" "$TMP/html" "$TMP/redis"
cp "$NGINX" "$TMP/new/nginx" && cp "$MODULE" "$TMP/new/module.so"
if [[ -n $BASE_MODULE ]]; then cp "$BASE_NGINX" "$TMP/base/nginx" && cp "$BASE_MODULE" "$TMP/base/module.so"; fi
printf '{"id":42,"name":"pow-shield bench","items":[1,2,3],"ok":true}\n' >"$TMP/html/api.json"
chmod -R a+rX "$TMP/html"

read -r P_REDIS P_STOCK P_NEW P_BASE <<<"$(free_ports 4)"
redis_start "$P_REDIS" "$TMP/redis" || die "redis-server did not start"
REDIS_PID=$(<"$TMP/redis/redis.pid")
taskset -pc "$NGINX_CPU" "$REDIS_PID" >/dev/null 2>&1 || true

BENCH_SECRET=flood-bench-secret-0123456789abcdef
write_conf() { # <dir> <port> <stock port or empty>
    local dir=$1 port=$2 stock=${3:-}
    {
        bench_conf_head "$dir" "$dir/module.so" "$TMP/html" 4096
        echo "    pow_shield_redis redis://127.0.0.1:$P_REDIS timeout=${BENCH_REDIS_TIMEOUT:-1s};"
        echo "    pow_shield_zone 32m;"
        [[ -n $stock ]] && echo "    server { listen 127.0.0.1:$stock; location = /api.json { } }"
        cat <<EOF
    server {
        listen 127.0.0.1:$port;
        pow_shield_key \$http_x_client;
        pow_shield_strikes off;
        pow_shield_log_level info;
        location = /green.json { pow_shield_limit 1000000 1s; alias $TMP/html/api.json; }
        location = /api.json { pow_shield_limit 1 1d; }
        location = /rise.json { pow_shield_limit 1 1d; pow_shield_difficulty 1 max=8; alias $TMP/html/api.json; }
    }
}
EOF
    } >"$dir/nginx.conf"
}
start_nginx() { # <dir>
    local dir=$1
    "$dir/nginx" -t -q -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" || die "nginx -t failed in $dir"
    pin "$NGINX_CPU" "$dir/nginx" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" ||
        die "nginx did not start: $(tail -3 "$dir/error.log")"
    PIDFILES+=("$dir/nginx.pid")
    for _ in $(seq 50); do [[ -s $dir/nginx.pid ]] && break; sleep 0.1; done
}
write_conf "$TMP/new" "$P_NEW" "$P_STOCK"
start_nginx "$TMP/new"
BUILDS=new
if [[ -n $BASE_MODULE ]]; then
    write_conf "$TMP/base" "$P_BASE"
    start_nginx "$TMP/base"
    BUILDS="base new"
fi
wait_port "$P_STOCK" nginx
wait_port "$P_NEW" nginx
[[ -n $BASE_MODULE ]] && wait_port "$P_BASE" "baseline nginx"
worker_of() { ps -o pid= --ppid "$(<"$1/nginx.pid")" | head -1 | tr -d ' '; }
declare -A WORKER=([new]=$(worker_of "$TMP/new")) PORT=([new]=$P_NEW [base]=$P_BASE)
[[ -n $BASE_MODULE ]] && WORKER[base]=$(worker_of "$TMP/base")

cat >"$TMP/rotate.lua" <<'EOF'
local reqs, n = {}, 2000
init = function()
    for i = 1, n do
        reqs[i] = wrk.format("GET", "/api.json", { ["Host"] = "127.0.0.1", ["X-Client"] = "c" .. i })
    end
end
local i = 0
request = function() i = i % n + 1; return reqs[i] end
EOF
sed 's|/api.json|/rise.json|' "$TMP/rotate.lua" >"$TMP/rotate_rise.lua"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
redis_cpu() { "$REDIS_CLI" -p "$P_REDIS" info cpu | tr -d '\r' |
    awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
script_calls() { "$REDIS_CLI" -p "$P_REDIS" info commandstats | tr -d '\r' |
    awk -F'[:=,]' '$1 == "cmdstat_evalsha" || $1 == "cmdstat_eval" {c += $3} END {print c + 0}'; }

# wrk for one case: <build> <case> <seconds> <out>
run_case() {
    local build=$1 case=$2 secs=$3 out=$4 port uri=/api.json args=()
    port=${PORT[$build]}
    case $case in
        stock) port=$P_STOCK ;;
        green) uri=/green.json args=(-H 'X-Client: green') ;;
        over1) args=(-H 'X-Client: over') ;;
        over2000) args=(-s "$TMP/rotate.lua") ;;
        over2000r) uri=/rise.json args=(-s "$TMP/rotate_rise.lua") ;;
    esac
    pin "$WRK_CPU" timeout $((secs + 10)) "$WRK" -t1 -c"$CONNS" -d"${secs}s" "${args[@]}" \
        "http://127.0.0.1:$port$uri" >"$out" 2>&1 || die "wrk failed ($build $case): $(tail -3 "$out")"
}

CASES=${BENCH_FLOOD_CASES:-stock green over1 over2000 over2000r}
declare -A RPS NG RD CALLS
for _round in $(seq "$ROUNDS"); do
    for build in $BUILDS; do
        for case in $CASES; do
            [[ $case == stock && $build != new ]] && continue
            key="$build/$case"
            # Each round starts from an empty Redis; the warm-up makes the
            # clients over (or, green, fills the window) before measuring.
            [[ $case != stock ]] && "$REDIS_CLI" -p "$P_REDIS" flushall >/dev/null
            run_case "$build" "$case" 1 "$TMP/warm.out"
            w=${WORKER[$build]}
            t0=$(ticks "$w") r0=$(redis_cpu) c0=$(script_calls)
            run_case "$build" "$case" "$DURATION" "$TMP/run.out"
            t1=$(ticks "$w") r1=$(redis_cpu) c1=$(script_calls)
            n=$(awk '/requests in/ {print $1}' "$TMP/run.out")
            ((n > 0)) || die "$key: no requests ($(tail -3 "$TMP/run.out"))"
            if [[ $case == green || $case == stock ]]; then
                ! grep -q 'Non-2xx' "$TMP/run.out" || die "$key: $(grep Non-2xx "$TMP/run.out") on a green path"
            else
                non=$(awk '/Non-2xx/ {print $NF}' "$TMP/run.out")
                ((${non:-0} >= n - CONNS - 2000)) || die "$key: only ${non:-0} of $n requests refused"
            fi
            RPS[$key]+="$(awk '/^Requests\/sec/ {printf "%.0f", $2}' "$TMP/run.out") "
            NG[$key]+="$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" -v n="$n" 'BEGIN {printf "%.2f", (b - a) / hz * 1e6 / n}') "
            RD[$key]+="$(awk -v a="$r0" -v b="$r1" -v n="$n" 'BEGIN {printf "%.2f", (b - a) * 1e6 / n}') "
            CALLS[$key]+="$(awk -v a="$c0" -v b="$c1" -v n="$n" 'BEGIN {printf "%.4f", (b - a) / n}') "
        done
    done
done


for d in new base; do
    [[ -f $TMP/$d/error.log ]] || continue
    bad=$(grep -cE '\[(error|crit|alert|emerg)\]' "$TMP/$d/error.log" || true)
    ((bad == 0)) || die "$bad lines at error or above in $d's error.log: $(grep -m1 -E '\[(error|crit|alert|emerg)\]' "$TMP/$d/error.log")"
done

echo "nginx:   $("$TMP/new/nginx" -v 2>&1 | sed 's/^nginx version: //'), module $MODULE"
[[ -n $BASE_MODULE ]] && echo "baseline: $BASE_MODULE (nginx $BASE_NGINX)"
echo "redis:   $("${REDIS_SERVER:-redis-server}" --version | awk '{print $3}')"
echo "load:    wrk -t1 -c$CONNS, $ROUNDS rounds x $DURATION s per case (medians); nginx + redis on core $NGINX_CPU, wrk on core $WRK_CPU"
echo
fmt='%-10s %-5s %8s %9s %9s %9s %10s %8s %8s %8s %8s\n'
# shellcheck disable=SC2059 # the format is the table's
printf "$fmt" case build req/s "nginx us" "ng xstock" "redis us" "calls/req" "ng xbase" "rd xbase" "vs base" "vs stock"
summary() { [[ -z ${BENCH_SUMMARY:-} ]] || echo "$*" >>"$BENCH_SUMMARY"; }
stock_rps=$(median "${RPS[new/stock]:-1}")
for case in $CASES; do
    for build in $BUILDS; do
        [[ $case == stock && $build != new ]] && continue
        key="$build/$case"
        rps=$(median "${RPS[$key]}")
        vs_base=- ng_base=- rd_base=- ng_stock=-
        if [[ $build == new && -n $BASE_MODULE && $case != stock ]]; then
            vs_base=$(round_ratio RPS "$key" "base/$case")
            ng_base=$(round_ratio NG "$key" "base/$case")
            rd_base=$(round_ratio RD "$key" "base/$case")
        fi
        [[ $case != stock ]] && ng_stock=$(round_ratio NG "$key" new/stock)
        vs_stock=$(ratio "$rps" "$stock_rps")
        rd=$(median "${RD[$key]}")
        [[ $case == stock ]] && rd=-
        # shellcheck disable=SC2059
        printf "$fmt" "$case" "$build" "$rps" "$(median "${NG[$key]}")" "$ng_stock" "$rd" \
            "$(median "${CALLS[$key]}")" "$ng_base" "$rd_base" "$vs_base" "$vs_stock"
        [[ $build == new ]] && summary "flood $case nginx_us $(median "${NG[$key]}") redis_us $rd" \
            "ng_x_stock $ng_stock ng_x_base $ng_base rd_x_base $rd_base"
    done
done
echo
echo "  nginx us / redis us: CPU time per request of the nginx worker / of redis-server (medians of $ROUNDS)"
echo "  ng xstock: nginx CPU per request against stock nginx's per served file; ng xbase, rd xbase:"
echo "  nginx and Redis CPU against the baseline build's; vs base, vs stock: req/s against the baseline"
echo "  and stock (every ratio: the median of the rounds' ratios, each within one round)"
echo "  calls/req: script calls (EVALSHA + EVAL) per request"
