#!/usr/bin/env bash
# bench/net_limits.sh — what limits per network and site-wide cost in
# cluster mode (bench/README.md, "net_limits.sh"): Redis CPU and nginx CPU
# per request of a location with one, two and three limits of different
# keys (the client, its /24, the site), a /24 flooding over its limit, and
# a site-wide `approx` limit over two nginx nodes; against one Redis and a
# Redis Cluster of three masters, stock nginx in the same run.
#
#   make build && bench/net_limits.sh
#   NET_CASES="one two" NET_BACKENDS=redis NET_ROUNDS=5 bench/net_limits.sh
#
# Cases (the address in X-Real-IP, realip on; windows of 2 s unless said):
#   stock       no limit
#   one         pow_shield_limit 100000 2s;                      (per client)
#   two         one + pow_shield_limit 100000 2s name=net key=$pow_shield_net;
#   three       two + pow_shield_limit 1000000 2s name=site key=site;
#   flood       one + pow_shield_limit 40 1h name=net key=$pow_shield_net;
#               254 addresses of one /24 (10.40.0.x) over its 40
#   one2        `one` over two nginx nodes (the base of the site cases)
#   site2       pow_shield_limit 1000000 2s name=site key=site approx; two nodes
#   siteover2   pow_shield_limit 100 1h name=site key=site approx; two nodes:
#               the site over its limit (a surge), every request a 429
#   clsite2     pow_shield_limit 100000 2s approx; + the site line of
#               `site2`, two nodes (both lines `approx`)
#   clsiteover2 pow_shield_limit 100000 2s approx; + the site line of
#               `siteover2`, two nodes
# Before the cases, a probe per backend: a lone `key=site` limit of 5 with
# `pow_shield_fail open` must admit 5 of 8 new addresses (Redis decides: a
# request that fell back would pass).
# Green load (all but flood, siteover2): 2,000 addresses in 100 /24s,
# none near a limit.
#
# Per backend, case and round: FLUSHALL, a warm-up of one window (2 s), then
# NET_SECONDS [4] of wrk -t1 (-c32 on one node, -c16 on each of two);
# nginx (one worker a node) and Redis on core 0, wrk on core 1; medians of
# NET_ROUNDS [3] rounds:
#   nginx us/req = delta(utime + stime) of the workers / requests (and
#                  stime alone: what of it the kernel spent)
#   redis us/req = delta(used_cpu_user + used_cpu_sys) of INFO cpu, all masters / requests
#   cmd/req      = commands Redis ran (INFO commandstats) / requests
#   sw/req       = context switches of the workers (/proc/<pid>/status,
#                  voluntary and not) / requests
#   x stock      = nginx us/req / stock's
# Then each round's nginx us/req, in the order run, with each case's
# difference from stock in the same round and the median of those
# differences: paired, a round's load shared by both, so it swings less
# than the difference of the two medians in the table.
# NET_SYSCALLS=1: after the rounds, one more load a backend and case under
# `perf stat -e 'syscalls:sys_enter_*'` on the workers (not measured
# otherwise): syscalls a request, in all and the most frequent ones.
# BENCH_REDIS_CPU [BENCH_NGINX_CPU's, 0]: the core of the Redis processes.
# NET_PROFILE=<dir>: after the rounds, one more load a backend and case
# under `perf record -e cpu-clock -F 20000 -g` on the workers (not measured
# otherwise), kept as <dir>/<backend>.<case>.data with the requests it served
# in <dir>/<backend>.<case>.requests: where the workers' time goes, the
# kernel's included (a sample is 50 us of CPU).
# NET_RATE=<req/s>: every case paced to about that many requests a second
# (all its nodes together), below what each reaches flat out, so that stock
# and the module's cases are measured at the same load: a pause a
# connection between requests (wrk's delay, fractions dithered), set from
# the rate and calibrated on each round's warm-up (the round trip the
# warm-up took beyond its pause is taken off). Flat out (the default), a
# case's nginx us a request carries what its own rate does to batching:
# stock at 30,000 requests a second gathers many responses into each wake
# of wrk and each epoll_wait, a case at 6,000 gathers few. Paced, every
# case pays the same per-request system costs, and what is left over stock
# is the module's and its Redis calls'. The table shows the rate reached.
# NET_SLOT=net: the Redis Cluster's nodes with `slot=net` (a client's keys
# in its network's slot: `two` is one call a request, not two).
# NET_MODULE_B=<module .so>: a second module (before/after in one run):
# each backend B gets B_b, nginx nodes with that module on the same Redis,
# measured next to B's in every round (the same load for both): right
# after it in odd rounds, right before it in even ones, so that neither
# module always runs second.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
die() { echo "bench/net_limits.sh: $*" >&2; exit 1; }
# shellcheck source=bench/net_lib.sh
. "$ROOT/bench/net_lib.sh"

REDIS_SLOT=${NET_SLOT:-} # redis_line's
[[ -z $REDIS_SLOT || $REDIS_SLOT == net || $REDIS_SLOT == client ]] || die "NET_SLOT must be net or client"
DURATION=${NET_SECONDS:-4}
ROUNDS=${NET_ROUNDS:-3}
CONNS=${NET_CONNECTIONS:-32}
RATE=${NET_RATE:-0}
HOT=${NET_HOT:-0}
CASES=${NET_CASES:-stock one two three flood one2 site2 siteover2 clsite2 clsiteover2}
BACKENDS=${NET_BACKENDS:-redis cluster3}
for v in DURATION ROUNDS CONNS HOT RATE; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
((DURATION >= 1 && ROUNDS >= 1 && CONNS >= 2 && HOT < 100)) || die "bad NET_* values"
declare -A URI=([stock]=/stock.json [one]=/one.json [two]=/two.json [three]=/three.json [flood]=/flood.json
    [one2]=/one.json [site2]=/site.json [siteover2]=/siteover.json [clsite2]=/clsite.json
    [clsiteover2]=/clsiteover.json)
for c in $CASES; do [[ -n ${URI[$c]:-} ]] || die "unknown case '$c'"; done
for b in $BACKENDS; do [[ $b == redis || $b == cluster3 ]] || die "unknown backend '$b'"; done
MODULE_B=${NET_MODULE_B:-}
if [[ -n $MODULE_B ]]; then
    [[ -f $MODULE_B ]] || die "NET_MODULE_B: $MODULE_B not found"
    BACKENDS=$(for b in $BACKENDS; do echo "$b ${b}_b"; done | tr '\n' ' ')
fi
[[ -x $NGINX && -f $MODULE ]] || die "build first: make build"
for t in "$WRK" "$REDIS_SERVER" "$REDIS_CLI" curl; do command -v "$t" >/dev/null || die "$t not found"; done
has_case() { [[ " $CASES " == *" $1 "* ]]; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pow-shield-net.XXXXXX")
chmod 0755 "$TMP"
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

mkdir -p "$TMP/html"
printf '{"id":42,"name":"pow-shield bench","items":[1,2,3],"ok":true}\n' >"$TMP/html/api.json"
for c in "${URI[@]}"; do cp "$TMP/html/api.json" "$TMP/html$c"; done
chmod -R a+rX "$TMP/html"
cp "$MODULE" "$TMP/module.so" # a private copy: `make build` rewrites objs/
[[ -z $MODULE_B ]] || cp "$MODULE_B" "$TMP/module_b.so"
read -r P_ONE P_C1 P_C2 P_C3 H_ra H_rb H_ca H_cb H_rba H_rbb H_cba H_cbb <<<"$(free_ports 12)"
declare -A RPORTS=([redis]=$P_ONE [cluster3]="$P_C1 $P_C2 $P_C3" [redis_b]=$P_ONE [cluster3_b]="$P_C1 $P_C2 $P_C3")
declare -A HTTP=([redis.a]=$H_ra [redis.b]=$H_rb [cluster3.a]=$H_ca [cluster3.b]=$H_cb
    [redis_b.a]=$H_rba [redis_b.b]=$H_rbb [cluster3_b.a]=$H_cba [cluster3_b.b]=$H_cbb)

ONE='pow_shield_limit 100000 2s;'
# shellcheck disable=SC2016 # nginx's variable, not the shell's
NET='pow_shield_limit 100000 2s name=net key=$pow_shield_net;'
SITE='pow_shield_limit 1000000 2s name=site key=site approx;'
write_conf() { # <module> <dir> <http port> <redis ports...>
    local module=$1 dir=$2 port=$3
    shift 3
    mkdir -p "$dir"
    {
        bench_conf_head "$dir" "$module" "$TMP/html" 4096
        cat <<EOF
    pow_shield_zone 32m;
    $(redis_line "$@")
    server {
        listen 127.0.0.1:$port;
        $REALIP
        pow_shield_log_level info;
        location = /stock.json { }
        location = /one.json { $ONE }
        location = /two.json { $ONE $NET }
        location = /three.json { $ONE $NET pow_shield_limit 1000000 2s name=site key=site; }
        location = /flood.json { $ONE pow_shield_limit 40 1h name=net key=\$pow_shield_net; }
        location = /site.json { $SITE }
        location = /siteover.json { pow_shield_limit 100 1h name=site key=site approx; }
        location = /clsite.json { pow_shield_limit 100000 2s approx; $SITE }
        location = /clsiteover.json {
            pow_shield_limit 100000 2s approx; pow_shield_limit 100 1h name=site key=site approx;
        }
        location = /probe.json {
            pow_shield_fail open; pow_shield_limit 5 1h name=site key=site approx; alias $TMP/html/api.json;
        }
    }
}
EOF
    } >"$dir/nginx.conf"
}

declare -A WORKER
for b in $BACKENDS; do
    read -r -a ports <<<"${RPORTS[$b]}"
    module=$TMP/module.so
    case $b in
    redis) redis_up "$P_ONE" "$TMP/redis" ;;
    cluster3) redis_cluster_up "$TMP/cluster" "${ports[@]}" ;;
    *) module=$TMP/module_b.so ;; # the same Redis as its backend's
    esac
    for n in a b; do
        write_conf "$module" "$TMP/$b.$n" "${HTTP[$b.$n]}" "${ports[@]}"
        nginx_up "$TMP/$b.$n"
        wait_port "${HTTP[$b.$n]}" "nginx ($b.$n)"
        WORKER[$b.$n]=$(worker_of "$TMP/$b.$n")
        [[ -n ${WORKER[$b.$n]} ]] || die "no worker in $b.$n"
    done
done

# wrk scripts: green (2,000 addresses in 100 /24s, 10.0.0.x-10.0.99.x,
# NET_HOT % from one hot address) for each uri; the flood's /24 10.40.0.x.
# case_script FILE CASE [PAUSE_MS]: the case's wrk script, paced by PAUSE_MS.
case_script() {
    if [[ $2 == flood ]]; then
        wrk_rotate "$1" "${URI[$2]}" 1 254 $((40 * 256)) "${3:-0}"
    else
        wrk_rotate "$1" "${URI[$2]}" 100 20 0 "${3:-0}" "$HOT"
    fi
}
for c in $CASES; do case_script "$TMP/$c.lua" "$c"; done
# next_pause RPS PAUSE: the pause (ms, two decimals) that brings a run that
# reached RPS with PAUSE to RATE (CONNS connections, each waiting PAUSE and
# its round trip between requests).
next_pause() {
    awk -v c="$CONNS" -v r="$1" -v d="$2" -v rate="$RATE" \
        'BEGIN {l = c * 1000 / r - d; d = c * 1000 / rate - l; printf "%.2f", d < 0.01 ? 0.01 : d}'
}
declare -A PAUSE # per backend/case when paced: the pause of its next run
nodes_of() { [[ $1 == *2 ]] && echo "a b" || echo a; }
refused_case() { [[ $1 == flood || $1 == *over2 ]]; }

# load <backend> <case> <seconds> <out prefix>: wrk on each node at once.
load() {
    local b=$1 c=$2 secs=$3 out=$4 n nodes conns pids=() script=$TMP/$2.lua
    ((RATE == 0)) || script=$TMP/$b.$c.lua
    read -r -a nodes <<<"$(nodes_of "$c")"
    conns=$((CONNS / ${#nodes[@]}))
    for n in "${nodes[@]}"; do
        wrk_run "$conns" "$secs" "$out.$n" "http://127.0.0.1:${HTTP[$b.$n]}${URI[$c]}" -s "$script" &
        pids+=($!)
    done
    for n in "${pids[@]}"; do wait "$n" || die "wrk failed ($b $c)"; done
}
warm_rps() { local o s=0; for o in "$TMP"/warm.?; do s=$((s + $(wrk_rps "$o"))); done; echo "$s"; }
# switches_of PID: the context switches of a process so far (it slept, or was put off the core).
switches_of() { awk '/^(non)?voluntary_ctxt_switches:/ {s += $2} END {print s + 0}' "/proc/$1/status"; }
worker_switches() { local b=$1 c=$2 n s=0; for n in $(nodes_of "$c"); do s=$((s + $(switches_of "${WORKER[$b.$n]}"))); done; echo "$s"; }
worker_ticks() { local b=$1 c=$2 n s=0; for n in $(nodes_of "$c"); do s=$((s + $(ticks "${WORKER[$b.$n]}"))); done; echo "$s"; }
# worker_sys_ticks: the kernel's part (stime) of worker_ticks.
worker_sys_ticks() {
    local b=$1 c=$2 n s=0
    for n in $(nodes_of "$c"); do s=$((s + $(awk '{print $15}' "/proc/${WORKER[$b.$n]}/stat"))); done
    echo "$s"
}

# The probe: does Redis decide a lone keyed limit (5 of 8 admitted)?
declare -A PROBE
for b in $BACKENDS; do
    read -r -a ports <<<"${RPORTS[$b]}"
    flush_all "${ports[@]}"
    ok=0
    for i in $(seq 8); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Real-IP: 10.77.0.$i" \
            "http://127.0.0.1:${HTTP[$b.a]}/probe.json")
        [[ $code == 200 ]] && ok=$((ok + 1))
    done
    PROBE[$b]=$ok
done

declare -A RPS NG NGSYS RD CMD CALLS BUSY DETAIL SW
for r in $(seq "$ROUNDS"); do
    order=$BACKENDS
    if [[ -n $MODULE_B ]] && ((r % 2 == 0)); then
        order=$(for b in $BACKENDS; do [[ $b == *_b ]] || echo "${b}_b $b"; done | tr '\n' ' ')
    fi
    for b in $order; do
        read -r -a ports <<<"${RPORTS[$b]}"
        for c in $CASES; do
            k=$b/$c
            # (Stock once a round: the first backend's, which every row is against.)
            [[ $c == stock && $b != "${BACKENDS%% *}" ]] && continue
            flush_all "${ports[@]}"
            if ((RATE > 0)); then
                pause=${PAUSE[$k]:-$(awk -v c="$CONNS" -v rate="$RATE" 'BEGIN {printf "%.2f", c * 1000 / rate}')}
                case_script "$TMP/$b.$c.lua" "$c" "$pause"
                rm -f "$TMP"/warm.?
                load "$b" "$c" 2 "$TMP/warm"
                pause=$(next_pause "$(warm_rps)" "$pause")
                case_script "$TMP/$b.$c.lua" "$c" "$pause"
            else
                load "$b" "$c" 2 "$TMP/warm"
            fi
            t0=$(worker_ticks "$b" "$c") r0=$(redis_cpu "${ports[@]}") s0=$(worker_switches "$b" "$c")
            k0=$(worker_sys_ticks "$b" "$c")
            mapfile -t each0 < <(for p in "${ports[@]}"; do redis_cpu "$p"; echo; done)
            commandstats "${ports[@]}" >"$TMP/c0"
            load "$b" "$c" "$DURATION" "$TMP/run"
            commandstats "${ports[@]}" >"$TMP/c1"
            t1=$(worker_ticks "$b" "$c") r1=$(redis_cpu "${ports[@]}") s1=$(worker_switches "$b" "$c")
            k1=$(worker_sys_ticks "$b" "$c")
            mapfile -t each1 < <(for p in "${ports[@]}"; do redis_cpu "$p"; echo; done)
            n=0 non=0 rps=0
            for o in "$TMP"/run.?; do
                ! grep -q 'Socket errors' "$o" || die "$k: $(grep 'Socket errors' "$o")"
                n=$((n + $(wrk_requests "$o"))) non=$((non + $(wrk_non2xx "$o"))) rps=$((rps + $(wrk_rps "$o")))
            done
            rm -f "$TMP"/run.?
            ((n > 0)) || die "$k: no requests"
            if refused_case "$c"; then
                ((non >= n - CONNS)) || die "$k: only $non of $n requests refused"
            else
                ((non == 0)) || die "$k: $non non-2xx answers of $n on a green path"
            fi
            RPS[$k]+="$rps "
            ((RATE == 0)) || PAUSE[$k]=$(next_pause "$rps" "$pause")
            NG[$k]+="$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" -v n="$n" 'BEGIN {printf "%.2f", (b - a) / hz * 1e6 / n}') "
            NGSYS[$k]+="$(awk -v a="$k0" -v b="$k1" -v hz="$HZ" -v n="$n" 'BEGIN {printf "%.2f", (b - a) / hz * 1e6 / n}') "
            # The busiest master's share of Redis's CPU (a hot spot: 33 % is even on three).
            BUSY[$k]+="$(for i in "${!each0[@]}"; do echo "${each0[$i]} ${each1[$i]}"; done |
                awk '{d = $2 - $1; t += d; if (d > m) m = d} END {printf "%.0f", (t > 0) ? 100 * m / t : 0}') "
            RD[$k]+="$(awk -v a="$r0" -v b="$r1" -v n="$n" 'BEGIN {printf "%.3f", (b - a) * 1e6 / n}') "
            CMD[$k]+="$(awk -v t="$(commands_total "$TMP/c0" "$TMP/c1")" -v n="$n" 'BEGIN {printf "%.4f", t / n}') "
            SW[$k]+="$(awk -v a="$s0" -v b="$s1" -v n="$n" 'BEGIN {printf "%.3f", (b - a) / n}') "
            CALLS[$k]+="$(awk -v t="$(script_calls "$TMP/c0" "$TMP/c1")" -v n="$n" 'BEGIN {printf "%.4f", t / n}') "
            ((r == ROUNDS)) && DETAIL[$k]=$(per_request "$TMP/c0" "$TMP/c1" "$n")
        done
    done
done
for b in $BACKENDS; do no_errors "$TMP/$b.a" "$TMP/$b.b"; done

# One more load of backend $1's case $2 after a warm-up, under `perf
# <the rest> -p <its workers>` (its output to $TMP/perf.err), stopped
# when the load ends, not later (idle timers after it would count
# against its requests); prints the requests it served.
under_perf() {
    local b=$1 c=$2 n o pp ports workers=()
    shift 2
    read -r -a ports <<<"${RPORTS[$b]}"
    for n in $(nodes_of "$c"); do workers+=("${WORKER[$b.$n]}"); done
    flush_all "${ports[@]}"
    load "$b" "$c" 2 "$TMP/warm"
    perf "$@" -p "$(IFS=,; echo "${workers[*]}")" 2>"$TMP/perf.err" &
    pp=$!
    load "$b" "$c" "$DURATION" "$TMP/run"
    kill -INT "$pp"
    wait "$pp" || true
    n=0
    for o in "$TMP"/run.?; do n=$((n + $(wrk_requests "$o"))); done
    rm -f "$TMP"/run.?
    echo "$n"
}

if [[ -n ${NET_PROFILE:-} ]]; then
    command -v perf >/dev/null || die "NET_PROFILE: perf not found"
    mkdir -p "$NET_PROFILE"
    for b in $BACKENDS; do
        for c in $CASES; do
            n=$(under_perf "$b" "$c" record -q -e cpu-clock -F 20000 -g -o "$NET_PROFILE/$b.$c.data")
            [[ -s $NET_PROFILE/$b.$c.data ]] || die "perf record failed: $(tail -3 "$TMP/perf.err")"
            echo "$n" >"$NET_PROFILE/$b.$c.requests"
        done
    done
fi

if [[ ${NET_SYSCALLS:-0} == 1 ]]; then
    command -v perf >/dev/null || die "NET_SYSCALLS=1: perf not found"
    declare -A SYS
    for b in $BACKENDS; do
        for c in $CASES; do
            n=$(under_perf "$b" "$c" stat -x, -e 'syscalls:sys_enter_*' -o "$TMP/perf")
            grep -q 'syscalls:sys_enter_' "$TMP/perf" || die "perf stat failed: $(tail -3 "$TMP/perf.err")"
            SYS[$b/$c]=$(awk -F, -v n="$n" '$3 ~ /^syscalls:sys_enter_/ && $1 + 0 > 0 {
                    name = substr($3, 20); t += $1; c[name] = $1}
                END {printf "%.2f:", t / n; for (k in c) if (c[k] / n >= 0.05) printf " %s %.2f", k, c[k] / n}' "$TMP/perf")
        done
    done
fi

echo "nginx:   $("$NGINX" -v 2>&1 | sed 's/^nginx version: //'), module $MODULE; one worker a node"
[[ -z $MODULE_B ]] || echo "         *_b: module $MODULE_B (NET_MODULE_B), measured next to each backend's own in every round (after it in odd rounds, before it in even)"
echo "redis:   $("$REDIS_SERVER" --version | awk '{print $3}'); redis = one Redis, cluster3 = a Redis Cluster of 3 masters"
echo "load:    wrk -t1 -c$CONNS (-c$((CONNS / 2)) a node on two), $ROUNDS rounds x $DURATION s after a 2 s warm-up;" \
    "medians; 2,000 addresses in 100 /24s${HOT:+, $HOT % from one hot address}"
((RATE == 0)) || echo "paced:   each case at about $RATE requests a second (NET_RATE; a pause a connection, calibrated on each round's warm-up)"
echo
printf '%-10s %-11s %8s %9s %9s %8s %9s %9s %9s %7s %10s %10s %7s\n' backend case req/s "nginx us" "vs stock" "x stock" "of it sys" \
    "redis us" "vs base" "busiest" "calls/req" "cmd/req" "sw/req"
for b in $BACKENDS; do
    for c in $CASES; do
        k=$b/$c
        [[ $c == stock && $b != "${BACKENDS%% *}" ]] && continue
        ng=$(median "${NG[$k]}") rd=$(median "${RD[$k]}")
        vs_stock=- x_stock=- vs_base=-
        if [[ -n ${NG[${BACKENDS%% *}/stock]:-} && $c != stock ]]; then
            vs_stock=$(awk -v a="$ng" -v s="$(median "${NG[${BACKENDS%% *}/stock]}")" 'BEGIN {printf "%+.2f", a - s}')
            x_stock=$(ratio "$ng" "$(median "${NG[${BACKENDS%% *}/stock]}")")x
        fi
        base=one
        [[ $c == *2 ]] && base=one2
        if [[ $c != "$base" && $c != stock && -n ${RD[$b/$base]:-} ]]; then
            vs_base=$(ratio "$rd" "$(median "${RD[$b/$base]}")")x
        fi
        [[ $c == stock ]] && rd=-
        busy=$(median "${BUSY[$k]}")%
        [[ $b == redis* || $c == stock ]] && busy=-
        printf '%-10s %-11s %8s %9s %9s %8s %9s %9s %9s %7s %10s %10s %7s\n' "$b" "$c" "$(median "${RPS[$k]}")" "$ng" "$vs_stock" "$x_stock" \
            "$(median "${NGSYS[$k]}")" "$rd" "$vs_base" "$busy" "$(median "${CALLS[$k]}")" "$(median "${CMD[$k]}")" "$(median "${SW[$k]}")"
    done
done
echo
echo "each round, nginx us a request (in the order run; a case's difference from stock in the same round, and its median):"
for b in $BACKENDS; do
    for c in $CASES; do
        k=$b/$c
        [[ $c == stock && $b != "${BACKENDS%% *}" ]] && continue
        line=$(awk -v v="${NG[$k]}" -v s="${NG[${BACKENDS%% *}/stock]:-}" -v stock="$c" 'BEGIN {
            n = split(v, a, " "); m = split(s, z, " ")
            for (i = 1; i <= n; i++) {
                out = out sprintf(" %.2f", a[i])
                if (stock != "stock" && m == n) { d[i] = a[i] - z[i]; out = out sprintf(" (%+.2f)", d[i]) }
            }
            if (stock != "stock" && m == n) {
                for (i = 2; i <= n; i++) for (j = i; j > 1 && d[j - 1] > d[j]; j--) { t = d[j]; d[j] = d[j - 1]; d[j - 1] = t }
                md = d[int((n + 1) / 2)]
                out = out sprintf("; median difference %+.2f", md)
            }
            print out}')
        printf '  %-9s %-11s%s\n' "$b" "$c" "$line"
    done
done
echo
echo "  nginx us / redis us: CPU per request of the nginx workers / of Redis (all masters); vs stock: nginx us - stock's; x stock: nginx us / stock's"
echo "  of it sys: the kernel's part of nginx us (stime; the rest is the workers' own code, the module's included)"
echo "  vs base: redis us against the per-client limit alone (one; one2 for the two-node cases)"
echo "  busiest: the busiest master's share of the cluster's Redis CPU (33 % is even)"
echo "  calls/req: script calls (EVALSHA + EVAL) per request; cmd/req: every command Redis ran, the scripts' own included"
echo "  sw/req: the workers' context switches a request (voluntary and not: each time a worker slept or was put off its core)"
echo "  targets: two <= 2.00x one (redis us), two <= stock + 8 (nginx us); flood <= 1 redis us; site2 and clsite2 <= 1.5x one2"
if ((RATE > 0)); then
    slow=$(for k in "${!RPS[@]}"; do
        awk -v r="$(median "${RPS[$k]}")" -v rate="$RATE" -v k="$k" 'BEGIN {if (r < 0.9 * rate) printf " %s (%d)", k, r}'
    done)
    echo "  paced at $RATE req/s${slow:+; more than 10 % short of it (not at the same load):$slow}"
fi
echo
echo "commands per request in the last round (calls a request / own usec a call):"
for b in $BACKENDS; do
    for c in $CASES; do
        [[ $c == stock ]] && continue
        printf '  %-9s %-11s %s\n' "$b" "$c" "${DETAIL[$b/$c]}"
    done
done
echo
if [[ ${NET_SYSCALLS:-0} == 1 ]]; then
    echo "syscalls a request of the workers (perf stat, one more load of $DURATION s; all: each >= 0.05):"
    for b in $BACKENDS; do
        for c in $CASES; do printf '  %-9s %-11s %s\n' "$b" "$c" "${SYS[$b/$c]}"; done
    done
    echo
fi
for b in $BACKENDS; do
    verdict="Redis decides it"
    ((PROBE[$b] == 5)) || verdict="NOT decided by Redis: the requests fell back (pow_shield_fail); site2 and siteover2 measure the fallback"
    echo "probe, $b: a lone key=site limit of 5 (pow_shield_fail open) admitted ${PROBE[$b]} of 8 new addresses: $verdict"
done
