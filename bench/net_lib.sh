# shellcheck shell=bash
# Shared by bench/scraper.sh, bench/net_limits.sh and bench/net_memory.sh
# (sourced after bench/lib.sh; the caller defines ROOT, die, TMP and the
# array PIDS of processes to stop): Redis (one, or a Redis Cluster of three
# masters), nginx nodes behind realip, Redis's CPU and commands, wrk
# scripts that rotate X-Real-IP, medians.

REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
WRK=${WRK:-wrk}
NGINX_CPU=${BENCH_NGINX_CPU:-0}
WRK_CPU=${BENCH_WRK_CPU:-1}
REDIS_CPU=${BENCH_REDIS_CPU:-$NGINX_CPU}

pin() { # pin <cpu> cmd...
    local cpu=$1
    shift
    if command -v taskset >/dev/null && (($(nproc) >= 2)); then taskset -c "$cpu" "$@"; else "$@"; fi
}

# redis_up PORT DIR [redis-server args]: a redis-server pinned to REDIS_CPU.
redis_up() {
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

# redis_cluster_up DIR PORT...: a Redis Cluster of those masters (no
# replicas), as t/lib/Test/PowShield.pm's run_redis_cluster makes one.
redis_cluster_up() {
    local dir=$1 p ok=0 nodes=()
    shift
    for p in "$@"; do
        redis_up "$p" "$dir/$p" --cluster-enabled yes --cluster-config-file nodes.conf \
            --cluster-node-timeout 2000
        nodes+=("127.0.0.1:$p")
    done
    timeout 30 "$REDIS_CLI" --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
        >"$dir/create.log" 2>&1 || die "redis-cli --cluster create failed: $(tail -3 "$dir/create.log")"
    for _ in $(seq 100); do
        ok=1
        for p in "$@"; do "$REDIS_CLI" -p "$p" cluster info | grep -q 'cluster_state:ok' || ok=0; done
        ((ok)) && return 0
        sleep 0.1
    done
    die "Redis Cluster did not reach cluster_state:ok"
}

# redis_line PORT...: the pow_shield_redis directive for one Redis or a
# cluster (a cluster's with `slot=$REDIS_SLOT` when that is set).
redis_line() {
    local p urls=()
    for p in "$@"; do urls+=("redis://127.0.0.1:$p"); done
    if (($# == 1)); then echo "pow_shield_redis ${urls[0]} timeout=1s;"; else
        local IFS=,
        echo "pow_shield_redis ${urls[*]} cluster${REDIS_SLOT:+ slot=$REDIS_SLOT} timeout=1s;"
    fi
}

flush_all() { local p; for p in "$@"; do "$REDIS_CLI" -p "$p" flushall >/dev/null; done; }

# redis_cpu PORT...: used_cpu_user + used_cpu_sys (s), summed.
redis_cpu() {
    local p
    for p in "$@"; do "$REDIS_CLI" -p "$p" info cpu | tr -d '\r'; done |
        awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'
}

# commandstats PORT...: "name calls usec" per command, summed over the ports.
commandstats() {
    local p
    for p in "$@"; do "$REDIS_CLI" -p "$p" info commandstats | tr -d '\r'; done |
        awk -F'[:=,]' '/^cmdstat_/ {c[substr($1, 9)] += $3; u[substr($1, 9)] += $5}
            END {for (k in c) print k, c[k], u[k]}' | sort
}

# per_request BEFORE AFTER N: the commands run between two commandstats
# snapshots, per request ("evalsha 1.00/5.2": calls per request / own usec
# a call), the bench's own (info, flushall, ...) left out; then the total.
per_request() {
    join "$1" "$2" | awk -v n="$3" '
        $4 > $2 && $1 !~ /^(info|config|flushall|ping|script|cluster|command|memory|scan|type|zcard|hlen)/ {
            c = ($4 - $2) / n; t += c
            printf "%s %.3f/%.1f ", $1, c, ($5 - $3) / ($4 - $2)}
        END {printf "(all %.3f)", t}'
}

# commands_total BEFORE AFTER: every command counted (the bench's left out).
commands_total() {
    join "$1" "$2" | awk '$1 !~ /^(info|config|flushall|ping|script|cluster|command|memory|scan|type|zcard|hlen)/ {
        t += $4 - $2} END {print t + 0}'
}

# shellcheck disable=SC2034 # used by the scripts that source this file
HZ=$(getconf CLK_TCK)
# script_calls BEFORE AFTER: the script calls Redis got (EVALSHA, EVAL):
# the module's calls (the commands they run are counted apart).
script_calls() {
    join "$1" "$2" | awk '$1 ~ /^(evalsha|eval|evalsha_ro|eval_ro|fcall)$/ {t += $4 - $2} END {print t + 0}'
}

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
worker_of() { ps -o pid= --ppid "$(<"$1/nginx.pid")" | head -1 | tr -d ' '; }

# nginx_up DIR: start the nginx of DIR/nginx.conf (pinned to NGINX_CPU).
nginx_up() {
    local dir=$1
    "$NGINX" -t -q -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" || die "nginx -t failed: $dir/nginx.conf"
    pin "$NGINX_CPU" "$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" ||
        die "nginx did not start: $(tail -3 "$dir/error.log")"
    for _ in $(seq 50); do [[ -s $dir/nginx.pid ]] && break; sleep 0.1; done
    [[ -s $dir/nginx.pid ]] || die "nginx in $dir wrote no pid"
    NGINX_PIDFILES+=("$dir/nginx.pid")
}

# realip: the address is X-Real-IP's (wrk and curl connect from 127.0.0.1).
# shellcheck disable=SC2034 # used by the scripts that source this file
REALIP='set_real_ip_from 127.0.0.1; real_ip_header X-Real-IP;'

# wrk_rotate FILE URI NETS HOSTS [FIRST_NET] [DELAY_MS] [HOT_PERCENT]: a wrk
# script cycling through NETS x HOSTS addresses 10.<a>.<b>.<host> (the /24s
# numbered from FIRST_NET [0], hosts 1..HOSTS), one /24 after another so
# that every /24 gets its share evenly; an address comes back after
# NETS x HOSTS requests. DELAY_MS [0]: a pause per connection between
# requests (a rate); it may have a fraction (wrk's pauses are whole ms: a
# connection's pauses then alternate between the two whole numbers around
# it, so that they average DELAY_MS). HOT_PERCENT [0]: that share from one
# hot address (10.255.255.1). Requests are prebuilt in init (wrk's own CPU
# stays low).
wrk_rotate() {
    local file=$1 uri=$2 nets=$3 hosts=$4 first=${5:-0} delay=${6:-0} hot=${7:-0}
    cat >"$file" <<EOF
local reqs, n = {}, 0
init = function()
    local hot, k = $hot, 0
    for h = 1, $hosts do
        for i = $first, $first + $nets - 1 do
            k = k + 1
            local ip = string.format("10.%d.%d.%d", math.floor(i / 256) % 256, i % 256, h)
            if hot > 0 and (k % 100) < hot then ip = "10.255.255.1" end
            n = n + 1
            reqs[n] = wrk.format("GET", "$uri", { ["Host"] = "127.0.0.1", ["X-Real-IP"] = ip })
        end
    end
end
local i = 0
request = function() i = i % n + 1; return reqs[i] end
EOF
    if [[ $delay =~ ^[0-9]+$ ]]; then
        ((delay == 0)) || echo "delay = function() return $delay end" >>"$file"
    else
        [[ $delay =~ ^[0-9]*\.[0-9]+$ ]] || die "wrk_rotate: bad pause '$delay'"
        cat >>"$file" <<EOF
local owed = 0
delay = function() owed = owed + $delay; local ms = math.floor(owed); owed = owed - ms; return ms end
EOF
    fi
}

# wrk_run CONNS SECONDS OUT URL [wrk args]: wrk pinned to WRK_CPU.
wrk_run() {
    local conns=$1 secs=$2 out=$3 url=$4
    shift 4
    pin "$WRK_CPU" timeout $((secs + 15)) "$WRK" -t1 -c"$conns" -d"${secs}s" "$@" "$url" >"$out" 2>&1 ||
        die "wrk failed ($url): $(tail -3 "$out")"
}
wrk_requests() { awk '/requests in/ {print $1}' "$1"; }
wrk_non2xx() { awk '/Non-2xx/ {print $NF} END {}' "$1" | awk '{s += $1} END {print s + 0}'; }
wrk_rps() { awk '/^Requests\/sec/ {printf "%.0f", $2}' "$1"; }

# (median and ratio: bench/lib.sh's.)

# no_errors DIR...: no line at error or above in any DIR/error.log.
no_errors() {
    local d bad
    for d in "$@"; do
        [[ -f $d/error.log ]] || continue
        bad=$(grep -cE '\[(error|crit|alert|emerg)\]' "$d/error.log" || true)
        ((bad == 0)) || die "$bad lines at error or above in $d/error.log: $(grep -m1 -E '\[(error|crit|alert|emerg)\]' "$d/error.log")"
    done
}
