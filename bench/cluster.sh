#!/usr/bin/env bash
# bench/cluster.sh — what one shielded request costs in cluster mode, in
# Redis CPU and nginx CPU, against stock nginx and the OpenResty-style Lua
# peer, measured in the same run (bench/README.md, "cluster.sh").
#
#   make build-debian && bench/cluster.sh
#   LUA_RESTY_REDIS=/path/to/lua-resty-redis bench/cluster.sh
#   BENCH_CASES="stock shield" BENCH_SECONDS=8 bench/cluster.sh
#   BENCH_CASES="shield cluster3" bench/cluster.sh   3-shard Redis Cluster
#   BENCH_BASELINE_MODULE=/tmp/old.so bench/cluster.sh  before/after, same run
#   BENCH_MODE=flood bench/cluster.sh      what abuse costs Redis: the flood table
#                                          (bench/cluster_flood.sh, vendored nginx)
#   BENCH_MODE=all BENCH_BASELINE=/work/wt-old bench/cluster.sh
#                                          both tables against another build's
#                                          objs/ (make build build-debian there),
#                                          then the speed goals checked
#
# One nginx, one worker, serves the same static file on several ports:
# stock (no shield), pow-shield in cluster mode and, when LUA_RESTY_REDIS
# names lua-resty-redis, the Lua peer (access_by_lua_block, lua-resty-redis
# over a cosocket keepalive pool, EVALSHA of pow-shield's own sliding-window
# script, 429 when over). All are green, under a limit no client reaches,
# in each load of BENCH_LOADS: `hot` (one client), `new` (a new client key
# per request, `$request_id`: the many-clients extreme), `mix` (BENCH_CLIENTS
# distinct clients, header X-Client, plus one hot client taking BENCH_HOT %
# of the requests, so each client's log holds what a window of real traffic
# leaves there). The case `cluster3` runs pow-shield against a 3-master
# Redis Cluster in a second nginx; it is skipped (with a note) when the
# module has no `cluster` option. The case `baseline` runs the shield case
# in a second nginx that loads BENCH_BASELINE_MODULE (another build of the
# module): before and after a change in one run.
#
# Per round, load and case: FLUSHALL, a warm-up of one window, then wrk for
# BENCH_SECONDS; over the measured run only:
#   redis us/req = delta(used_cpu_user + used_cpu_sys) of INFO cpu / requests
#   evalsha us   = INFO commandstats usec_per_call of evalsha (script only)
#   nginx us/req = delta(utime + stime) of the worker (/proc/<pid>/stat) / requests
# and the ratios against stock, the Lua peer and the baseline in the same
# round; the table shows medians over BENCH_ROUNDS rounds. Figures are
# absolute CPU time, which moves less than req/s on a shared machine.
#
# Environment (defaults in brackets):
#   BENCH_SECONDS      measured seconds per case [4]
#   BENCH_ROUNDS       rounds of every load and case; medians [5]
#   BENCH_LOADS        subset/order of: hot new mix [hot new]
#   BENCH_CASES        subset/order of: stock shield baseline lua cluster3
#                      [stock shield lua, and baseline after shield when
#                      BENCH_BASELINE_MODULE is set]
#   BENCH_CONNECTIONS  wrk connections [32]
#   BENCH_CLIENTS      distinct client keys of `mix` [2000]
#   BENCH_HOT          percent of `mix` requests from the one hot client [10]
#   BENCH_LIMIT        pow_shield_limit (requests window) [1000000 2s]
#   BENCH_NGINX_CPU    core for nginx [0]; BENCH_WRK_CPU core for wrk [1];
#   BENCH_REDIS_CPU    core for redis-server(s) [same as nginx]
#   BENCH_REDIS_TIMEOUT  pow_shield_redis timeout= [1s]
#   LUA_RESTY_REDIS    lua-resty-redis checkout (holds resty/redis.lua)
#                      [../shared/peers/lua-resty-redis beside the repo, if there];
#                      without it the lua case is skipped with a note
#   BENCH_BASELINE     a build's tree: its objs/debian module is the baseline
#                      (and, BENCH_MODE=all or flood, its objs/nginx + module)
#   NGINX, MODULE      [/usr/sbin/nginx, objs/debian/ngx_http_pow_shield_module.so]
#                      (the Lua module is built for Debian's nginx: same binary)
#   BENCH_KEEP=1       keep the temp dir
#   BENCH_COMMANDS=1   also print, per load and case (last round), the
#                      commands the script ran per request and their own
#                      usec per call (commandstats)
#   BENCH_SUMMARY      a file the medians are appended to (BENCH_MODE=all)

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -n ${BENCH_BASELINE:-} ]]; then
    [[ -d $BENCH_BASELINE/objs ]] || { echo "bench/cluster.sh: no $BENCH_BASELINE/objs" >&2; exit 1; }
    FLOOD_BASE=(BENCH_BASELINE_MODULE="$BENCH_BASELINE/objs/ngx_http_pow_shield_module.so"
        BENCH_BASELINE_NGINX="$BENCH_BASELINE/objs/nginx")
    BENCH_BASELINE_MODULE=${BENCH_BASELINE_MODULE:-$BENCH_BASELINE/objs/debian/ngx_http_pow_shield_module.so}
fi
case ${BENCH_MODE:-green} in
    flood) exec env "${FLOOD_BASE[@]}" bash "$ROOT/bench/cluster_flood.sh" ;;
    all) exec bash "$ROOT/bench/cluster_all.sh" ;;
    green) ;;
    *) echo "bench/cluster.sh: BENCH_MODE is green, flood or all" >&2; exit 1 ;;
esac
NGINX=${NGINX:-/usr/sbin/nginx}
MODULE=${MODULE:-$ROOT/objs/debian/ngx_http_pow_shield_module.so}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
DURATION=${BENCH_SECONDS:-4}
ROUNDS=${BENCH_ROUNDS:-5}
LOADS=${BENCH_LOADS:-hot new}
CASES=${BENCH_CASES:-stock shield ${BENCH_BASELINE_MODULE:+baseline }lua}
# (the project's shared/ beside the repository holds third-party peers)
if [[ -z ${LUA_RESTY_REDIS:-} && -f $ROOT/../shared/peers/lua-resty-redis/resty/redis.lua ]]; then
    LUA_RESTY_REDIS=$(cd "$ROOT/../shared/peers/lua-resty-redis" && pwd)
fi
CONNS=${BENCH_CONNECTIONS:-32}
CLIENTS=${BENCH_CLIENTS:-2000}
HOT=${BENCH_HOT:-10}
read -r LIMIT_N LIMIT_W <<<"${BENCH_LIMIT:-1000000 2s}"
NGINX_CPU=${BENCH_NGINX_CPU:-0}
WRK_CPU=${BENCH_WRK_CPU:-1}
REDIS_CPU=${BENCH_REDIS_CPU:-$NGINX_CPU}
WRK=${WRK:-wrk}
# Above the default 50ms: on a shared 2-core machine a reply can wait that
# long behind other work, and a fallback decision would skew the figures.
REDIS_TIMEOUT=${BENCH_REDIS_TIMEOUT:-1s}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
LUA_MODULES=${LUA_MODULES:-/usr/lib/nginx/modules}

die() { echo "bench/cluster.sh: $*" >&2; exit 1; }
note() { echo "note: $*"; }

for v in DURATION ROUNDS CONNS CLIENTS HOT LIMIT_N; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
[[ $LIMIT_W =~ ^([0-9]+)(ms|s)$ ]] || die "BENCH_LIMIT window must be <n>s or <n>ms, not '$LIMIT_W'"
WINDOW_MS=${BASH_REMATCH[1]}
[[ ${BASH_REMATCH[2]} == s ]] && WINDOW_MS=$((WINDOW_MS * 1000))
((DURATION >= 1 && ROUNDS >= 1 && CONNS >= 1 && CLIENTS >= 1 && HOT <= 100)) || die "bad BENCH_* values"
for l in $LOADS; do
    case $l in hot | new | mix) ;; *) die "unknown load '$l' in BENCH_LOADS (hot new mix)" ;; esac
done
[[ -x $NGINX ]] || die "$NGINX not found"
[[ -f $MODULE ]] || die "$MODULE not found: run 'make build-debian' (or set NGINX and MODULE)"
for t in "$WRK" "$REDIS_SERVER" "$REDIS_CLI" curl perl; do
    command -v "$t" >/dev/null || die "$t not found (make deps-bench)"
done
has_case() { [[ " $CASES " == *" $1 "* ]]; }
for c in $CASES; do
    case $c in stock | shield | baseline | lua | cluster3) ;; *) die "unknown case '$c' in BENCH_CASES" ;; esac
done
if has_case lua; then
    if [[ -z ${LUA_RESTY_REDIS:-} || ! -f ${LUA_RESTY_REDIS:-}/resty/redis.lua ]]; then
        note "lua case skipped: set LUA_RESTY_REDIS to a lua-resty-redis checkout (holding resty/redis.lua)"
        CASES=${CASES//lua/}
    elif [[ ! -f $LUA_MODULES/ngx_http_lua_module.so ]]; then
        note "lua case skipped: no $LUA_MODULES/ngx_http_lua_module.so (apt-get install libnginx-mod-http-lua)"
        CASES=${CASES//lua/}
    fi
fi

CPUS=$(nproc)
pin() { # pin <cpu> cmd...
    local cpu=$1
    shift
    if command -v taskset >/dev/null && ((CPUS >= 2)); then taskset -c "$cpu" "$@"; else "$@"; fi
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pow-shield-cluster.XXXXXX")
chmod 0755 "$TMP"
# A private copy: `make build-debian` rewrites the .so in place.
cp "$MODULE" "$TMP/module.so"
MODULE_SRC=$MODULE MODULE=$TMP/module.so
PIDS=() NGINX_PIDFILES=()
cleanup() {
    local rc=$? p
    set +e
    for p in "${NGINX_PIDFILES[@]}"; do [[ -s $p ]] && stop_pid "$(<"$p")" QUIT; done
    for p in "${PIDS[@]}"; do stop_pid "$p"; done
    if [[ ${BENCH_KEEP:-0} == 1 ]]; then echo "kept: $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

read -r P_STOCK P_SHIELD P_BASE P_LUA P_C3 P_REDIS P_R1 P_R2 P_R3 <<<"$(free_ports 9)"
declare -A PORT=([stock]=$P_STOCK [shield]=$P_SHIELD [baseline]=$P_BASE [lua]=$P_LUA [cluster3]=$P_C3)
declare -A LABEL=([stock]="stock nginx" [shield]="pow-shield cluster mode" [lua]="Lua peer (lua-resty-redis)"
    [baseline]="pow-shield, baseline module"
    [cluster3]="pow-shield, 3-shard Redis Cluster")

mkdir -p "$TMP/html" "$TMP/main" "$TMP/c3" "$TMP/base" "$TMP/redis"
if has_case baseline; then
    [[ -f ${BENCH_BASELINE_MODULE:-} ]] || die "the baseline case needs BENCH_BASELINE_MODULE=<module .so>"
    cp "$BENCH_BASELINE_MODULE" "$TMP/baseline.so"
fi
printf '{"id":42,"name":"pow-shield bench","items":[1,2,3],"ok":true}\n' >"$TMP/html/api.json"
chmod -R a+rX "$TMP/html"
URI=/api.json

# ---- Redis -----------------------------------------------------------------

redis_pin_start() { # <port> <dir> [extra redis-server args]
    local port=$1 dir=$2
    shift 2
    mkdir -p "$dir"
    pin "$REDIS_CPU" "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize yes --pidfile "$dir/redis.pid" --dir "$dir" --logfile "$dir/redis.log" "$@" ||
        die "redis-server did not start on port $port"
    for _ in $(seq 50); do
        [[ -s $dir/redis.pid && $("$REDIS_CLI" -p "$port" ping 2>/dev/null) == PONG ]] && break
        sleep 0.1
    done
    [[ -s $dir/redis.pid ]] || die "redis-server on port $port did not start"
    PIDS+=("$(<"$dir/redis.pid")")
}
redis_pin_start "$P_REDIS" "$TMP/redis/one"

# ---- nginx -----------------------------------------------------------------

# pow-shield's sliding-window script as the module sends it (the composer's
# text, printed by core/examples/scripts.rs), for the Lua peer: the same
# text (checked below: Redis must know its SHA-1 once pow-shield has loaded
# its scripts).
script_text() {
    (cd "$ROOT" && cargo run --quiet --release -p pow-shield-core --example scripts -- window)
}
if has_case lua; then
    script_text >"$TMP/window.lua.txt" || die "could not print the window script (core/examples/scripts.rs)"
    SCRIPT_SHA=$(sha1sum "$TMP/window.lua.txt" | cut -d' ' -f1)
    {
        echo "-- generated by bench/cluster.sh from core/examples/scripts.rs (the window script)"
        echo "return { sha = \"$SCRIPT_SHA\", text = [=======["
        cat "$TMP/window.lua.txt"
        echo "]=======] }"
    } >"$TMP/bench_window.lua"
fi

# Request line shared by every green location.
LIMIT_LINE="pow_shield_limit $LIMIT_N $LIMIT_W;"

write_conf() { # <dir> <instance: main|c3|base> <pow_shield_redis line>
    local dir=$1 inst=$2 redis=$3 module=$MODULE port=$P_C3
    [[ $inst == base ]] && module=$TMP/baseline.so port=$P_BASE
    {
        if [[ $inst == main ]] && has_case lua; then
            echo "load_module $LUA_MODULES/ndk_http_module.so;"
            echo "load_module $LUA_MODULES/ngx_http_lua_module.so;"
        fi
        bench_conf_head "$dir" "$module" "$TMP/html" 4096
        echo "    pow_shield_zone 10m;"
        echo "    $redis"
        # The client key: the header's, or a new one per request (`new`).
        echo "    map \$http_x_client \$bench_key { new \$request_id; default \$http_x_client; }"
        if [[ $inst != main ]]; then
            cat <<EOF
    server { listen 127.0.0.1:$port; location = $URI { $LIMIT_LINE pow_shield_key \$bench_key; } }
}
EOF
            return
        fi
        cat <<EOF
    server { listen 127.0.0.1:$P_STOCK; location = $URI { } }
    server { listen 127.0.0.1:$P_SHIELD; location = $URI { $LIMIT_LINE pow_shield_key \$bench_key; } }
EOF
        if has_case lua; then
            # The peer: the same script, keys and arguments in the same shape
            # (limit, window ms, a member unique per node, worker and request,
            # "refusal is a strike", pow-shield's default red-zone rules 5 60s,
            # one request per call, no deadline; timeouts of 1 s, as the
            # shield's timeout=: at 50 ms they fired on a busy machine and
            # the run stopped on their error lines).
            cat <<EOF
    lua_package_path "$LUA_RESTY_REDIS/?.lua;$TMP/?.lua;/usr/share/lua/5.1/?.lua;;";
    init_worker_by_lua_block {
        bench_seq = 0
        bench_member_prefix = string.format("%x:%x:", math.random(0, 0x7fffffff), ngx.worker.pid())
    }
    server {
        listen 127.0.0.1:$P_LUA;
        location = $URI {
            access_by_lua_block {
                local redis = require "resty.redis"
                local script = require "bench_window"
                local red = redis:new()
                red:set_timeouts(1000, 1000, 1000)
                local ok = red:connect("127.0.0.1", $P_REDIS)
                if not ok then return end -- fail open
                local client = ngx.var.http_x_client or ngx.var.remote_addr
                if client == "new" then client = ngx.var.request_id end
                local tag = "lua:{" .. client .. "}"
                bench_seq = bench_seq + 1
                local w, o = tag .. ":w:$LIMIT_N:$WINDOW_MS", tag .. ":o:$LIMIT_N:$WINDOW_MS"
                local s, t, u = tag .. ":s", tag .. ":t", tag .. ":u"
                local member = bench_member_prefix .. string.format("%x", bench_seq)
                local res, err = red:evalsha(script.sha, 5, w, o, s, t, u, $LIMIT_N, $WINDOW_MS, member, 1,
                    5, 60000, 0, 0, 1, 0)
                if not res and err and err:find("NOSCRIPT", 1, true) then
                    res, err = red:eval(script.text, 5, w, o, s, t, u, $LIMIT_N, $WINDOW_MS, member, 1,
                        5, 60000, 0, 0, 1, 0)
                end
                if not res then red:close() return end -- fail open
                red:set_keepalive(10000, 64)
                if res[1] == 0 then
                    ngx.header["Retry-After"] = math.ceil(res[4] / 1000)
                    return ngx.exit(429)
                end
            }
        }
    }
EOF
        fi
        echo "}"
    } >"$dir/nginx.conf"
}

start_nginx() { # <dir>
    local dir=$1
    pin "$NGINX_CPU" "$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" ||
        die "nginx did not start: $(tail -3 "$dir/error.log")"
    NGINX_PIDFILES+=("$dir/nginx.pid")
    for _ in $(seq 50); do [[ -s $dir/nginx.pid ]] && break; sleep 0.1; done
}
write_conf "$TMP/main" main "pow_shield_redis redis://127.0.0.1:$P_REDIS timeout=$REDIS_TIMEOUT;"
"$NGINX" -t -q -p "$TMP/main" -c "$TMP/main/nginx.conf" -e "$TMP/main/error.log" ||
    die "nginx -t failed: $TMP/main/nginx.conf"
start_nginx "$TMP/main"

if has_case baseline; then
    write_conf "$TMP/base" base "pow_shield_redis redis://127.0.0.1:$P_REDIS timeout=$REDIS_TIMEOUT;"
    start_nginx "$TMP/base"
fi

# cluster3: three masters, slots spread by redis-cli; skipped cleanly when the
# module does not know `cluster` (nginx -t names the option).
if has_case cluster3; then
    write_conf "$TMP/c3" c3 "pow_shield_redis redis://127.0.0.1:$P_R1,redis://127.0.0.1:$P_R2,redis://127.0.0.1:$P_R3 cluster timeout=$REDIS_TIMEOUT;"
    if ! "$NGINX" -t -q -p "$TMP/c3" -c "$TMP/c3/nginx.conf" -e "$TMP/c3/error.log" 2>"$TMP/c3/t.err"; then
        note "cluster3 skipped: this module has no Redis Cluster support ($(grep -m1 -o 'pow_shield_redis.*' "$TMP/c3/t.err" || tail -1 "$TMP/c3/t.err"))"
        CASES=${CASES//cluster3/}
    else
        for p in "$P_R1" "$P_R2" "$P_R3"; do
            redis_pin_start "$p" "$TMP/redis/$p" --cluster-enabled yes --cluster-config-file nodes.conf
        done
        timeout 20 "$REDIS_CLI" --cluster create "127.0.0.1:$P_R1" "127.0.0.1:$P_R2" "127.0.0.1:$P_R3" \
            --cluster-replicas 0 --cluster-yes >"$TMP/c3/create.log" 2>&1 ||
            die "redis-cli --cluster create failed: $(tail -3 "$TMP/c3/create.log")"
        for _ in $(seq 100); do
            ok=1
            for p in "$P_R1" "$P_R2" "$P_R3"; do
                "$REDIS_CLI" -p "$p" cluster info | grep -q 'cluster_state:ok' || ok=0
            done
            ((ok)) && break
            sleep 0.1
        done
        ((ok)) || die "Redis Cluster did not reach cluster_state:ok"
        start_nginx "$TMP/c3"
    fi
fi
read -r -a _cases <<<"$CASES" # squeeze the blanks left by skipped cases
CASES="${_cases[*]:-}"
[[ -n $CASES ]] || die "no case left to run"

for c in $CASES; do wait_port "${PORT[$c]}" "nginx ($c)"; done
worker_of() { ps -o pid= --ppid "$(<"$1/nginx.pid")" | head -1 | tr -d ' '; }
W_MAIN=$(worker_of "$TMP/main")
[[ -n $W_MAIN ]] || die "no nginx worker"
if has_case cluster3; then W_C3=$(worker_of "$TMP/c3"); fi
if has_case baseline; then W_BASE=$(worker_of "$TMP/base"); fi
worker() {
    case $1 in cluster3) echo "$W_C3" ;; baseline) echo "$W_BASE" ;; *) echo "$W_MAIN" ;; esac
}
redis_ports() { [[ $1 == cluster3 ]] && echo "$P_R1 $P_R2 $P_R3" || echo "$P_REDIS"; }

# One request per case: the expected answer before any load.
for c in $CASES; do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Client: probe' "http://127.0.0.1:${PORT[$c]}$URI")
    [[ $code == 200 ]] || die "$c: expected 200 before the run, got $code"
done
if has_case lua; then
    "$REDIS_CLI" -p "$P_REDIS" script exists "$SCRIPT_SHA" | grep -qx 1 ||
        die "the Lua peer's script (sha $SCRIPT_SHA) is not the one pow-shield loaded into Redis"
fi

# ---- load ------------------------------------------------------------------

# wrk: a fixed cycle of requests, one in 100/HOT from the hot client, the
# others round-robin over CLIENTS keys (prebuilt: wrk's own CPU stays low).
cat >"$TMP/clients.lua" <<EOF
local reqs, n = {}, 0
-- Built in init, once wrk knows the Host header.
init = function()
    local clients, hot, c = $CLIENTS, $HOT, 0
    for i = 1, math.max(clients, 100) do
        local key
        if (i % 100) < hot then key = "hot" else c = c % clients + 1; key = "c" .. c end
        n = n + 1
        reqs[n] = wrk.format("GET", "$URI", { ["Host"] = "127.0.0.1", ["X-Client"] = key })
    end
end
local i = 0
request = function() i = i % n + 1; return reqs[i] end
EOF

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
redis_cpu() { # total used_cpu_user + used_cpu_sys (s) over the given ports
    local p sum=0
    for p in "$@"; do
        sum=$("$REDIS_CLI" -p "$p" info cpu | tr -d '\r' |
            awk -F: -v s="$sum" '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}')
    done
    echo "$sum"
}
redis_cpu_each() { local p; for p in "$@"; do redis_cpu "$p"; echo; done; }
evalsha_stats() { # calls usec over the given ports
    local p
    for p in "$@"; do "$REDIS_CLI" -p "$p" info commandstats | tr -d '\r'; done |
        awk -F'[:=,]' '$1 == "cmdstat_evalsha" {c += $3; u += $5} END {printf "%d %d\n", c, u}'
}
commandstats() { # name calls usec, summed over the given ports (+ connections accepted)
    local p
    for p in "$@"; do "$REDIS_CLI" -p "$p" info all | tr -d '\r'; done |
        awk -F'[:=,]' '/^cmdstat_/ {c[substr($1, 9)] += $3; u[substr($1, 9)] += $5}
            /^total_connections_received:/ {c["~connections"] += $2; u["~connections"] = 1}
            END {for (k in c) print k, c[k], u[k]}' | sort
}
stat_calls() { # <command> <commandstats file>: its calls
    awk -v k="$1" '$1 == k {c = $2} END {print c + 0}' "$2"
}
run_wrk() { # <case> <load> <seconds> <out>
    local how=(-s "$TMP/clients.lua")
    [[ $2 == mix ]] || how=(-H "X-Client: $2")
    pin "$WRK_CPU" timeout $(($3 + 10)) "$WRK" -t1 -c"$CONNS" -d"${3}s" --latency "${how[@]}" \
        "http://127.0.0.1:${PORT[$1]}$URI" >"$4" 2>&1 || die "wrk failed for $1 ($2): $(tail -3 "$4")"
}
to_us() {
    awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n += 0; else if (v ~ /ms$/) n *= 1000;
        else if (v ~ /s$/) n *= 1e6; printf "%.0f", n }'
}


# One measured run of <case> under <load>: the figures of this round.
declare -A RPS P99 NG_US RD_US EV_US CAP CALLS
measure() { # <case> <load> <round>
    local c=$1 load=$2 key="$1/$2" w t0 t1 r0 r1 e0 e1 u0 u1 out n calls lo busiest ports each0 each1
    read -r -a ports <<<"$(redis_ports "$c")"
    for p in "${ports[@]}"; do "$REDIS_CLI" -p "$p" flushall >/dev/null; done
    # A warm-up of one window fills the logs (stock: a second).
    run_wrk "$c" "$load" "$([[ $c == stock ]] && echo 1 || echo "$WARM_S")" "$TMP/$c.warmup"
    w=$(worker "$c")
    t0=$(ticks "$w")
    r0=$(redis_cpu "${ports[@]}")
    mapfile -t each0 < <(redis_cpu_each "${ports[@]}")
    read -r e0 u0 <<<"$(evalsha_stats "${ports[@]}")"
    commandstats "${ports[@]}" >"$TMP/$c.$load.cmd0"
    out=$TMP/$c.$load.$3.out
    run_wrk "$c" "$load" "$DURATION" "$out"
    commandstats "${ports[@]}" >"$TMP/$c.$load.cmd1"
    t1=$(ticks "$w")
    r1=$(redis_cpu "${ports[@]}")
    mapfile -t each1 < <(redis_cpu_each "${ports[@]}")
    read -r e1 u1 <<<"$(evalsha_stats "${ports[@]}")"
    n=$(awk '/requests in/ {print $1}' "$out")
    REQS[$key]=$n
    ! grep -q 'Non-2xx' "$out" || die "$key: $(grep Non-2xx "$out") on the green path ($out)"
    ! grep -q 'Socket errors' "$out" || die "$key: $(grep 'Socket errors' "$out")"
    RPS[$key]+="$(awk '/^Requests\/sec/ {printf "%.0f", $2}' "$out") "
    P99[$key]+="$(to_us "$(awk '$1 == "99%" {print $2}' "$out")") "
    NG_US[$key]+="$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" -v n="$n" 'BEGIN {printf "%.2f", (b - a) / hz * 1e6 / n}') "
    [[ $c == stock ]] && return
    # One check per request (give or take those in flight when wrk stops),
    # but a hot client's: its requests that arrive while its check is on
    # its way join it (coalescing), so they may cost fewer (the Lua peer
    # has no such thing). The module sends the checks of several clients
    # that arrive while one is on its way in one EVALSHA (up to 16): what
    # is counted for a new client is its admission (one ZADD each). A
    # fallback decision is caught below (an error line).
    calls=$((e1 - e0)) lo=$((n - CONNS)) checked=$((e1 - e0))
    [[ $c != lua && $load == hot ]] && lo=1
    [[ $c != lua && $load == mix ]] && lo=$((n * (100 - HOT) / 100 - CONNS))
    if [[ $c != lua && $load != hot ]]; then
        checked=$(($(stat_calls zadd "$TMP/$c.$load.cmd1") - $(stat_calls zadd "$TMP/$c.$load.cmd0")))
    fi
    ((checked >= lo && calls <= n + CONNS)) ||
        die "$key: Redis ran $calls EVALSHA ($checked checks) for $n requests (fallback decided some? see $TMP/main/error.log)"
    CALLS[$key]+="$(awk -v c="$calls" -v n="$n" 'BEGIN {printf "%.3f", c / n}') "
    RD_US[$key]+="$(awk -v a="$r0" -v b="$r1" -v n="$n" 'BEGIN {printf "%.2f", (b - a) * 1e6 / n}') "
    EV_US[$key]+="$(awk -v a="$u0" -v b="$u1" -v n="$calls" 'BEGIN {printf "%.2f", (b - a) / n}') "
    # What the Redis side can take: its busiest shard at 100 % of a core.
    busiest=$(for i in "${!each0[@]}"; do echo "${each0[$i]} ${each1[$i]}"; done |
        awk '{d = $2 - $1; if (d > m) m = d} END {printf "%.6f", m}')
    CAP[$key]+="$(awk -v m="$busiest" -v n="$n" 'BEGIN {printf "%.0f", (m > 0) ? n / m : 0}') "
}

declare -A REQS
WARM_S=$(((WINDOW_MS + 999) / 1000))
for round in $(seq "$ROUNDS"); do
    for c in $CASES; do
        if [[ $c == stock ]]; then measure stock hot "$round"; continue; fi
        for load in $LOADS; do measure "$c" "$load" "$round"; done
    done
done

# Nothing at warn or above in any nginx's error.log (a crash, Redis errors,
# the Lua peer's failures).
for d in main base c3; do
    [[ -f $TMP/$d/error.log ]] || continue
    bad=$(grep -cE '\[(warn|error|crit|alert|emerg)\]' "$TMP/$d/error.log" || true)
    ((bad == 0)) || die "$bad lines at warn or above in $d's error.log: $(grep -m1 -E '\[(warn|error|crit|alert|emerg)\]' "$TMP/$d/error.log")"
done

# ---- report ----------------------------------------------------------------

echo "nginx:    $("$NGINX" -v 2>&1 | sed 's/^nginx version: //') ($NGINX), module $MODULE_SRC"
has_case baseline && echo "baseline: $BENCH_BASELINE_MODULE"
echo "redis:    $("$REDIS_SERVER" --version | awk '{print $3}')"
echo "load:     wrk -t1 -c$CONNS, $DURATION s per case after a ${WARM_S} s warm-up, $ROUNDS rounds (medians);" \
    "loads: $LOADS (mix: $CLIENTS clients + 1 hot, $HOT %)"
echo "limit:    $LIMIT_N per $LIMIT_W (green); pinning nginx $NGINX_CPU, wrk $WRK_CPU, redis $REDIS_CPU"
echo
fmt='%-5s %-30s %8s %8s %8s %8s %8s %8s %8s %8s %9s %10s\n'
# shellcheck disable=SC2059 # the format is the table's
printf "$fmt" load case req/s "p99 us" "nginx us" "x stock" "redis us" "x peer" "x base" "ng xbase" "calls/req" "evalsha us"
summary() { [[ -z ${BENCH_SUMMARY:-} ]] || echo "$*" >>"$BENCH_SUMMARY"; }
for load in $LOADS; do
    for c in $CASES; do
        [[ $c == stock && $load != "${LOADS%% *}" ]] && continue
        key="$c/$load" row=$load
        [[ $c == stock ]] && key=stock/hot row=-
        vs_stock=- vs_peer=- vs_base=- ng_base=-
        [[ $c != stock ]] && has_case stock && vs_stock=$(round_ratio NG_US "$key" stock/hot)
        [[ $c != lua && $c != stock ]] && has_case lua && vs_peer=$(round_ratio RD_US "$key" "lua/$load")
        if [[ $c == shield ]] && has_case baseline; then
            vs_base=$(round_ratio RD_US "$key" "baseline/$load")
            ng_base=$(round_ratio NG_US "$key" "baseline/$load")
        fi
        rd=- calls=- ev=-
        if [[ $c != stock ]]; then
            rd=$(median "${RD_US[$key]}") calls=$(median "${CALLS[$key]}") ev=$(median "${EV_US[$key]}")
        fi
        # shellcheck disable=SC2059
        printf "$fmt" "$row" "${LABEL[$c]}" "$(median "${RPS[$key]}")" "$(median "${P99[$key]}")" \
            "$(median "${NG_US[$key]}")" "$vs_stock" "$rd" "$vs_peer" "$vs_base" "$ng_base" "$calls" "$ev"
        summary "green $load $c nginx_us $(median "${NG_US[$key]}") redis_us $rd x_stock $vs_stock x_peer $vs_peer x_base $vs_base ng_x_base $ng_base"
    done
done
if has_case cluster3 && has_case shield; then
    for load in $LOADS; do
        cap_a=$(median "${CAP[cluster3/$load]}") cap_b=$(median "${CAP[shield/$load]}")
        ((cap_a && cap_b)) || continue
        echo "3-shard Redis Cluster ($load): the Redis side takes $(ratio "$cap_a" "$cap_b")x the shielded" \
            "requests/s of one Redis ($cap_a vs $cap_b; busiest shard at one core)"
    done
fi
if [[ ${BENCH_COMMANDS:-0} == 1 ]]; then
    for load in $LOADS; do
        for c in $CASES; do
            [[ $c == stock ]] && continue
            read -r -a ports <<<"$(redis_ports "$c")"
            # (less the connection redis-cli opened to each port for the second look)
            echo "$c, $load, per request (calls, own usec per call):$(join "$TMP/$c.$load.cmd0" "$TMP/$c.$load.cmd1" |
                awk -v n="${REQS[$c/$load]}" -v cli="${#ports[@]}" '$1 == "~connections" {conns = $4 - $2 - cli; next}
                    $4 > $2 && $1 !~ /^(info|config|flushall|ping|script)/ {
                    printf " %s %.2f/%.2f", $1, ($4 - $2) / n, ($5 - $3) / ($4 - $2)}
                    END {printf "; %d Redis connections opened", conns}')"
        done
    done
fi
echo
echo "  nginx us: worker CPU (utime+stime) per request; x stock: against stock nginx's, same round"
echo "  redis us: Redis CPU (INFO cpu, all shards) per request; x peer: against the Lua peer's under"
echo "  the same load, x base / ng xbase: Redis / nginx CPU against the baseline module's, same round"
echo "  (ratios: median of the rounds' ratios); evalsha us: commandstats usec_per_call"
