#!/usr/bin/env bash
# bench/pay_ahead_rust.sh — what paying ahead (SPEC §4) saves the Rust
# clients: round trips and mean time per paid request, before and after.
#
#   make build && bench/pay_ahead_rust.sh
#
# One nginx serves one file under `pow_shield_limit 1 60s;
# pow_shield_difficulty 16b`, at /off/ with `pow_shield_pay_ahead off`
# (before: every paid request meets a 429 first, then goes again) and at
# /on/ with it on (after: the next challenge is solved while the response
# is read, and sent with the next request). Each client makes 1 free + 30
# paid requests in one process, to each location, with a key of its own:
#
#   cli         `pow-shield get` with 31 URLs (-w '%{time_total}')
#   blocking    the library's blocking::Client (objs/pay_loop --blocking)
#   middleware  the reqwest middleware (objs/pay_loop)
#
# It prints, per client and location, the access log's entries for those
# 31 requests, how many were 429, and the mean time of the 30 paid ones
# (each one's whole request: sends, solves, waits). Run once; the machine
# may be shared, so compare the figures of one run.
#
# Environment: NGINX, MODULE [objs/...], BENCH_PAID [30].

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "bench/pay_ahead_rust.sh: $*" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
PAID=${BENCH_PAID:-30}
N=$((PAID + 1))
CLI=$ROOT/objs/pow-shield
PAY_LOOP=$ROOT/objs/pay_loop
[[ -x $NGINX && -f $MODULE && -x $CLI && -x $PAY_LOOP ]] || die "build first: make build"

TMP=$(mktemp -d /tmp/pow-pay-ahead-rust.XXXXXX)
cleanup() {
    [[ -s $TMP/nginx.pid ]] && stop_pid "$(<"$TMP/nginx.pid")" QUIT
    rm -rf "$TMP"
}
trap cleanup EXIT
pay_ahead_server "$TMP"

# times CLIENT URL KEY: each request's milliseconds, one a line, in order.
times() {
    local client=$1 url=$2 key=$3
    case $client in
    cli)
        local args=() i
        for ((i = 0; i < N; i++)); do args+=(-o /dev/null "$url"); done
        "$CLI" get -sS -H "X-Client: $key" -w '%{time_total}\n' "${args[@]}" |
            awk '{printf "%.3f\n", $1 * 1000}'
        ;;
    blocking) "$PAY_LOOP" --blocking --time "$url" "$N" "X-Client: $key" | awk '{print $3}' ;;
    middleware) "$PAY_LOOP" --time "$url" "$N" "X-Client: $key" | awk '{print $3}' ;;
    esac
}

printf '%-11s %-16s %12s %6s %16s\n' client pay-ahead 'round trips' 429s 'ms per paid'
for client in cli blocking middleware; do
    for where in off on; do
        key="$client-$where"
        ms=$(times "$client" "http://127.0.0.1:$PORT/$where/data.json" "$key")
        mean=$(tail -n +2 <<<"$ms" | awk '{s += $1; n++} END {printf "%.2f", n ? s / n : 0}')
        trips=$(grep -c "^$key " "$TMP/ahead.log" || true)
        refused=$(grep -c "^$key 429 " "$TMP/ahead.log" || true)
        label=$([[ $where == on ]] && echo "on (after)" || echo "off (before)")
        printf '%-11s %-16s %12s %6s %16s\n' "$client" "$label" "$trips" "$refused" "$mean"
    done
done
echo "($N requests each: 1 free, $PAID paid at 16 bits; round trips = access-log entries)"
