#!/usr/bin/env bash
# bench/cluster_all.sh — run by bench/cluster.sh when BENCH_MODE=all
# (bench/README.md, "cluster.sh, all"): the green table (Debian's nginx,
# loads hot and new, stock and the Lua peer) and the flood table (the
# vendored nginx: over1, over2000, over2000r), both against the build in
# BENCH_BASELINE, in one run; then the speed goals checked on the medians:
#
#   new key per request: Redis CPU <= 0.5x the Lua peer's (same load)
#   over1 (the over-limit flood): nginx CPU <= 1.2x stock nginx's
#   hot and new (Redis and nginx), over2000 and over2000r (nginx; Redis
#   where it is at least 1 us/req): within 5 % of the baseline or better
#
#   BENCH_MODE=all BENCH_BASELINE=/work/wt-old bench/cluster.sh
#
# Needs objs/debian (make build-debian) and objs/nginx (make build) here
# and in BENCH_BASELINE. Every other BENCH_* setting goes to both tables.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "bench/cluster.sh (all): $*" >&2; exit 1; }
BASE=${BENCH_BASELINE:-}
[[ -n $BASE ]] || die "BENCH_MODE=all needs BENCH_BASELINE=<another build's tree>"
for f in "$ROOT/objs/debian/ngx_http_pow_shield_module.so" "$ROOT/objs/nginx" \
    "$BASE/objs/debian/ngx_http_pow_shield_module.so" "$BASE/objs/nginx" "$BASE/objs/ngx_http_pow_shield_module.so"; do
    [[ -f $f ]] || die "$f not found (make build build-debian in that tree)"
done
SUMMARY=$(mktemp "${TMPDIR:-/tmp}/pow-shield-all.XXXXXX")
trap 'rm -f "$SUMMARY"' EXIT

echo "== green: bench/cluster.sh (Debian nginx), baseline $BASE"
BENCH_SUMMARY=$SUMMARY BENCH_MODE=green BENCH_LOADS=${BENCH_LOADS:-hot new} bash "$ROOT/bench/cluster.sh"
echo
echo "== flood: bench/cluster_flood.sh (vendored nginx), baseline $BASE"
BENCH_SUMMARY=$SUMMARY NGINX=$ROOT/objs/nginx MODULE=$ROOT/objs/ngx_http_pow_shield_module.so \
    BENCH_BASELINE_MODULE=$BASE/objs/ngx_http_pow_shield_module.so BENCH_BASELINE_NGINX=$BASE/objs/nginx \
    bash "$ROOT/bench/cluster_flood.sh"

# field <line prefix> <name>: the value after <name> on the summary line
# that starts with the prefix.
field() {
    awk -v p="$1" -v n="$2" 'index($0, p " ") == 1 {for (i = 1; i < NF; i++) if ($i == n) print $(i + 1)}' "$SUMMARY" |
        head -1
}
FAILED=0
goal() { # <what> <value> <op: le> <limit>
    local verdict=ok
    if [[ $2 == - || -z $2 ]]; then
        verdict="not measured"
    elif ! awk -v v="$2" -v l="$4" 'BEGIN {exit !(v <= l)}'; then
        verdict=MISSED FAILED=1
    fi
    printf '  %-58s %7s  (goal <= %s)  %s\n' "$1" "$2" "$4" "$verdict"
}
echo
echo "== the speed goals (medians of the rounds' ratios)"
goal "new key/request: Redis CPU x the Lua peer's" "$(field "green new shield" x_peer)" le 0.5
goal "over1 (over-limit flood): nginx CPU x stock's" "$(field "flood over1" ng_x_stock)" le 1.2
for load in hot new; do
    goal "green $load: Redis CPU x baseline" "$(field "green $load shield" x_base)" le 1.05
    goal "green $load: nginx CPU x baseline" "$(field "green $load shield" ng_x_base)" le 1.05
done
for case in over2000 over2000r; do
    goal "$case: nginx CPU x baseline" "$(field "flood $case" ng_x_base)" le 1.05
    rd=$(field "flood $case" redis_us)
    if awk -v v="${rd:-0}" 'BEGIN {exit !(v >= 1)}'; then
        goal "$case: Redis CPU x baseline" "$(field "flood $case" rd_x_base)" le 1.05
    else
        printf '  %-58s %7s  (under 1 us/req: not compared)\n' "$case: Redis CPU per request" "${rd:--}"
    fi
done
exit "$FAILED"
