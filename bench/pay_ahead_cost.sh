#!/usr/bin/env bash
# bench/pay_ahead_cost.sh — what a response carrying the next challenge
# (pow_shield_pay_ahead, docs/directives.md) costs nginx, measured in one run
# against stock nginx.
#
#   make build && bench/pay_ahead_cost.sh
#   BENCH_SECONDS=10 BENCH_ROUNDS=3 bench/pay_ahead_cost.sh
#
# One nginx (1 worker, pinned) serves the same static file on three ports:
# stock; pow-shield with `pow_shield_pay_ahead off`; the same with `on`.
# Every wrk request carries a valid solution paid ahead under the limit (a
# paid request: verified, admitted green, not spent), so `on` signs a next
# challenge for every response and `off` does not: the difference of the
# worker's CPU per request between the two is the cost of one. The token
# comes from the module itself (a stacked limit whose key= only the first
# request sets leaves that one with no free request: it gets a next
# challenge).
#
# Environment: BENCH_SECONDS [10], BENCH_ROUNDS [3], BENCH_CONNECTIONS [50],
# BENCH_NGINX_CPU [0], BENCH_WRK_CPU [1], NGINX, MODULE [objs/...].

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "bench/pay_ahead_cost.sh: $*" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
DURATION=${BENCH_SECONDS:-10}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNECTIONS:-50}
NGINX_CPU=${BENCH_NGINX_CPU:-0}
WRK_CPU=${BENCH_WRK_CPU:-1}
[[ -x $NGINX && -f $MODULE ]] || die "build first: make build"
command -v wrk >/dev/null || die "wrk is missing: apt-get install -y wrk"
command -v curl >/dev/null || die "curl is missing: apt-get install -y curl"

TMP=$(mktemp -d /tmp/pow-pay-ahead.XXXXXX)
cleanup() {
    [[ -s $TMP/nginx.pid ]] && stop_pid "$(<"$TMP/nginx.pid")" QUIT
    rm -rf "$TMP"
}
trap cleanup EXIT
mkdir -p "$TMP/html/a"
echo '{"ok":true}' >"$TMP/html/a/data.json"

read -r P_STOCK P_OFF P_ON < <(free_ports 3)
shielded() { # shielded PORT on|off
    cat <<CONF
    server {
        listen 127.0.0.1:$1;
        pow_shield_limit 1000000 1s;
        pow_shield_limit 1 1h key=\$http_x_first;
        pow_shield_difficulty 8b;
        pow_shield_pay_ahead $2;
    }
CONF
}
{
    bench_conf_head "$TMP" "$MODULE" "$TMP/html" 4096
    echo "    server { listen 127.0.0.1:$P_STOCK; }"
    shielded "$P_OFF" off
    shielded "$P_ON" on
    echo "}"
} >"$TMP/nginx.conf"
pin() { taskset -c "$1" "${@:2}"; }
pin "$NGINX_CPU" "$NGINX" -p "$TMP" -c "$TMP/nginx.conf" -e "$TMP/error.log" ||
    die "nginx did not start: $(tail -3 "$TMP/error.log")"
for p in $P_STOCK $P_OFF $P_ON; do wait_port "$p" nginx; done

# A challenge sent ahead by the `on` server, and its solution: valid at
# both shielded servers (the same policy, key and secret).
token=$(curl -s -D - -o /dev/null -H 'X-First: 1' "http://127.0.0.1:$P_ON/a/data.json" |
    tr -d '\r' | awk -F': ' 'tolower($1) == "x-pow-next-challenge" {print $2}')
[[ -n $token ]] || die "no X-PoW-Next-Challenge from the pay-ahead server"
nonce=$("$ROOT/objs/pow-shield" solve "$token") || die "objs/pow-shield solve failed"
for p in $P_OFF $P_ON; do
    got=$(curl -s -D - -o /dev/null -H "X-PoW-Challenge: $token" -H "X-PoW-Nonce: $nonce" \
        "http://127.0.0.1:$p/a/data.json" | tr -d '\r')
    grep -q '^HTTP/1.1 200' <<<"$got" || die "a paid request to $p was not 200"
    next=$(grep -ci '^x-pow-next-challenge:' <<<"$got" || true)
    [[ $p == "$P_ON" && $next == 1 || $p == "$P_OFF" && $next == 0 ]] ||
        die "port $p: $next next challenges"
done

worker=$(ps -o pid= --ppid "$(<"$TMP/nginx.pid")" | head -1 | tr -d ' ')
ticks() { awk '{print $14 + $15}' "/proc/$worker/stat"; }
HZ=$(getconf CLK_TCK)
declare -A RPS CPU
for round in $(seq "$ROUNDS"); do
    for c in stock off on; do
        case $c in stock) p=$P_STOCK ;; off) p=$P_OFF ;; on) p=$P_ON ;; esac
        before=$(ticks)
        out=$(pin "$WRK_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" \
            -H "X-PoW-Challenge: $token" -H "X-PoW-Nonce: $nonce" "http://127.0.0.1:$p/a/data.json")
        after=$(ticks)
        grep -q 'Non-2xx' <<<"$out" && die "$c: non-2xx responses: $(grep Non-2xx <<<"$out")"
        reqs=$(awk '/requests in/ {print $1}' <<<"$out")
        rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
        us=$(awk -v t=$((after - before)) -v hz="$HZ" -v n="$reqs" 'BEGIN {printf "%.3f", t / hz * 1e6 / n}')
        printf '%-6s round %d: %10.0f req/s, %7s us of worker CPU per request\n' "$c" "$round" "$rps" "$us"
        RPS[$c]+="$rps "
        CPU[$c]+="$us "
    done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
s=$(median "${RPS[stock]}") off=$(median "${RPS[off]}") on=$(median "${RPS[on]}")
c_off=$(median "${CPU[off]}") c_on=$(median "${CPU[on]}")
echo
awk -v s="$s" -v off="$off" -v on="$on" -v coff="$c_off" -v con="$c_on" 'BEGIN {
    printf "median req/s: stock %.0f, pay-ahead off %.0f (%.2fx stock), on %.0f (%.2fx stock, %.3fx off)\n",
        s, off, off / s, on, on / s, on / off
    printf "a next challenge costs %.2f us of worker CPU per response (on %.3f - off %.3f us/request; budget 2 us)\n",
        con - coff, con, coff
}'
