#!/usr/bin/env bash
# bench/scraper.sh — a rotating scraper against per-address and per-/24
# limits (docs/operations.md, "Scrapers on many addresses"; bench/README.md,
# "scraper.sh"): 10,000 addresses in 50 /24s at 20x the /24 limit, the
# address in X-Real-IP (realip on), against one Redis and a Redis Cluster of
# three masters, in one run. Prints the share of the scraper's requests
# challenged (target: >= 90 %) and of a steady client's of another /24
# (target: 0 %).
#
#   make build && bench/scraper.sh
#   SCRAPER_ROUNDS=5 SCRAPER_BACKENDS=cluster3 bench/scraper.sh
#
# The location (the recipe's first two lines, its window cut to 10 s so
# that a round is one window):
#
#   pow_shield_limit 10 10s;                               # each address
#   pow_shield_limit 50 10s name=net key=$pow_shield_net;  # each /24
#
# The scraper: wrk -t1 -c50 cycling through 10.0.<n>.<h> (n 0..49, h
# 1..200), one /24 after the other, each connection pausing between requests (calibrated on
# the warm-up) so that each /24 sends SCRAPER_TIMES (20) x 50 requests a window;
# each address sends 5 a window, under its own limit of 10: only the /24
# limit can catch it. It ignores challenges (a 429 is challenged). The
# steady client, 10.99.0.7, sends one request every 2 s (5 a window). Per
# backend: FLUSHALL, one window of warm-up, then SCRAPER_ROUNDS [3] rounds of
# one window each; medians over the rounds.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
die() { echo "bench/scraper.sh: $*" >&2; exit 1; }
# shellcheck source=bench/net_lib.sh
. "$ROOT/bench/net_lib.sh"

ROUNDS=${SCRAPER_ROUNDS:-3}
TIMES=${SCRAPER_TIMES:-20}
CONNS=${SCRAPER_CONNECTIONS:-100}
BACKENDS=${SCRAPER_BACKENDS:-redis cluster3}
NETS=50 HOSTS=200 WINDOW=10 LIMIT_ADDR=10 LIMIT_NET=50
for v in ROUNDS TIMES CONNS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a whole number, not '${!v}'"
done
for b in $BACKENDS; do [[ $b == redis || $b == cluster3 ]] || die "unknown backend '$b'"; done
[[ -x $NGINX && -f $MODULE ]] || die "build first: make build"
for t in "$WRK" "$REDIS_SERVER" "$REDIS_CLI" curl; do command -v "$t" >/dev/null || die "$t not found"; done

# The rate: NETS x LIMIT_NET x TIMES requests a window, over CONNS
# connections each waiting DELAY ms between requests (plus the round trip,
# well under a millisecond here: the measured rate is printed).
RATE=$((NETS * LIMIT_NET * TIMES / WINDOW))
DELAY=$((CONNS * 1000 / RATE))
((DELAY >= 1)) || die "$RATE req/s needs more than $CONNS connections"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pow-shield-scraper.XXXXXX")
chmod 0755 "$TMP"
PIDS=() NGINX_PIDFILES=() STEADY_PID=
cleanup() {
    local rc=$? p
    set +e
    [[ -n $STEADY_PID ]] && kill "$STEADY_PID" 2>/dev/null
    for p in "${NGINX_PIDFILES[@]}"; do [[ -s $p ]] && stop_pid "$(<"$p")" QUIT; done
    for p in "${PIDS[@]}"; do stop_pid "$p"; done
    if [[ ${BENCH_KEEP:-0} == 1 ]]; then echo "kept: $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$TMP/html"
printf '{"ok":true}\n' >"$TMP/html/page.json"
chmod -R a+rX "$TMP/html"
read -r P_ONE P_C1 P_C2 P_C3 H_redis H_cluster3 <<<"$(free_ports 6)"
declare -A HTTP=([redis]=$H_redis [cluster3]=$H_cluster3) RPORTS=([redis]=$P_ONE [cluster3]="$P_C1 $P_C2 $P_C3")

for b in $BACKENDS; do
    read -r -a ports <<<"${RPORTS[$b]}"
    if [[ $b == redis ]]; then redis_up "$P_ONE" "$TMP/redis"; else redis_cluster_up "$TMP/cluster" "${ports[@]}"; fi
    mkdir -p "$TMP/$b"
    {
        bench_conf_head "$TMP/$b" "$MODULE" "$TMP/html" 4096
        cat <<EOF
    pow_shield_zone 32m;
    $(redis_line "${ports[@]}")
    log_format st '\$remote_addr \$status';
    server {
        listen 127.0.0.1:${HTTP[$b]};
        $REALIP
        pow_shield_log_level info;
        location = /page.json {
            pow_shield_limit $LIMIT_ADDR ${WINDOW}s;
            pow_shield_limit $LIMIT_NET ${WINDOW}s name=net key=\$pow_shield_net;
        }
    }
}
EOF
    } >"$TMP/$b/nginx.conf"
    nginx_up "$TMP/$b"
    wait_port "${HTTP[$b]}" "nginx ($b)"
done

wrk_rotate "$TMP/scraper.lua" /page.json "$NETS" "$HOSTS" 0 "$DELAY"

# next_pause RPS PAUSE: the pause (ms) that brings a run at RPS with PAUSE
# to RATE (CONNS connections, each waiting PAUSE + its round trip).
next_pause() {
    awk -v c="$CONNS" -v r="$1" -v d="$2" -v rate="$RATE" \
        'BEGIN {l = c * 1000 / r - d; d = c * 1000 / rate - l; printf "%d", d < 1 ? 1 : d + 0.5}'
}

# steady URL OUT: one request every 2 s, "<status>" a line, until killed.
steady() {
    while :; do
        curl -s -o /dev/null -w '%{http_code}\n' -H 'X-Real-IP: 10.99.0.7' "$1" >>"$2"
        sleep 2
    done
}

declare -A CALLS DELAYS SHARE STEADY_N STEADY_C TIMESX CMDS
for b in $BACKENDS; do
    read -r -a ports <<<"${RPORTS[$b]}"
    url="http://127.0.0.1:${HTTP[$b]}/page.json"
    flush_all "${ports[@]}"
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Real-IP: 10.99.0.8' "$url")
    [[ $code == 200 ]] || die "$b: expected 200 before the run, got $code"
    wrk_run "$CONNS" "$WINDOW" "$TMP/$b.warm" "$url" -s "$TMP/scraper.lua"
    # The pause, calibrated on the warm-up and then on each round: the
    # round trip the last run took (beyond its pause) is taken off.
    d=$(next_pause "$(wrk_rps "$TMP/$b.warm")" "$DELAY")
    wrk_rotate "$TMP/$b.lua" /page.json "$NETS" "$HOSTS" 0 "$d"
    wrk_run "$CONNS" 3 "$TMP/$b.calib" "$url" -s "$TMP/$b.lua"
    d=$(next_pause "$(wrk_rps "$TMP/$b.calib")" "$d")
    wrk_rotate "$TMP/$b.lua" /page.json "$NETS" "$HOSTS" 0 "$d"
    : >"$TMP/$b.steady"
    steady "$url" "$TMP/$b.steady" &
    STEADY_PID=$!
    for r in $(seq "$ROUNDS"); do
        commandstats "${ports[@]}" >"$TMP/c0"
        wrk_run "$CONNS" "$WINDOW" "$TMP/$b.$r" "$url" -s "$TMP/$b.lua"
        commandstats "${ports[@]}" >"$TMP/c1"
        n=$(wrk_requests "$TMP/$b.$r")
        ((n > 0)) || die "$b: no requests in round $r"
        c=$(wrk_non2xx "$TMP/$b.$r")
        SHARE[$b]+="$(awk -v c="$c" -v n="$n" 'BEGIN {printf "%.1f", 100 * c / n}') "
        TIMESX[$b]+="$(awk -v n="$n" 'BEGIN {printf "%.1f", n / '"$NETS"' / '"$LIMIT_NET"'}') "
        CMDS[$b]+="$(awk -v t="$(commands_total "$TMP/c0" "$TMP/c1")" -v n="$n" 'BEGIN {printf "%.4f", t / n}') "
        CALLS[$b]+="$(awk -v t="$(script_calls "$TMP/c0" "$TMP/c1")" -v n="$n" 'BEGIN {printf "%.4f", t / n}') "
        ! grep -q 'Socket errors' "$TMP/$b.$r" || die "$b: $(grep 'Socket errors' "$TMP/$b.$r")"
        DELAYS[$b]+="$d "
        d=$(next_pause "$(wrk_rps "$TMP/$b.$r")" "$d")
        wrk_rotate "$TMP/$b.lua" /page.json "$NETS" "$HOSTS" 0 "$d"
    done
    kill "$STEADY_PID" 2>/dev/null || true
    wait "$STEADY_PID" 2>/dev/null || true
    STEADY_PID=
    STEADY_N[$b]=$(grep -c . "$TMP/$b.steady" || true)
    STEADY_C[$b]=$(grep -vcx 200 "$TMP/$b.steady" || true)
done
no_errors "${TMP:?}/redis" "$TMP/cluster3"

echo "nginx:   $("$NGINX" -v 2>&1 | sed 's/^nginx version: //'), module $MODULE; one worker"
echo "redis:   $("$REDIS_SERVER" --version | awk '{print $3}'); one Redis, and a Redis Cluster of 3 masters"
echo "limits:  pow_shield_limit $LIMIT_ADDR ${WINDOW}s; pow_shield_limit $LIMIT_NET ${WINDOW}s name=net key=\$pow_shield_net; (realip from X-Real-IP)"
echo "scraper: $((NETS * HOSTS)) addresses in $NETS /24s, wrk -t1 -c$CONNS, a pause between requests a connection (from ${DELAY} ms)" \
    "(aimed at $RATE req/s, ${TIMES}x); $ROUNDS rounds of ${WINDOW} s after a ${WINDOW} s warm-up; medians"
echo "steady:  10.99.0.7, one request every 2 s during the rounds"
echo
printf '%-9s %9s %16s %14s %16s %10s %10s %16s %8s\n' backend "pause ms" "x /24 limit" "challenged %" "rounds" "calls/req" "cmd/req" "steady chall." "targets"
for b in $BACKENDS; do
    share=$(median "${SHARE[$b]}")
    met=no
    awk -v s="$share" 'BEGIN {exit !(s >= 90)}' && ((STEADY_C[$b] == 0)) && met=yes
    printf '%-9s %9s %16s %14s %16s %10s %10s %16s %8s\n' "$b" "$(tr ' ' '/' <<<"${DELAYS[$b]% }")" \
        "$(tr ' ' '/' <<<"${TIMESX[$b]% }")" "$share" \
        "$(tr ' ' '/' <<<"${SHARE[$b]% }")" "$(median "${CALLS[$b]}")" "$(median "${CMDS[$b]}")" \
        "${STEADY_C[$b]} of ${STEADY_N[$b]}" "$met"
done
echo
echo "  x /24 limit: the scraper's requests per /24 per window / the /24 limit ($LIMIT_NET), each round"
echo "  challenged %: the scraper's non-2xx answers (429 with a challenge) / its requests (target >= 90 %)"
echo "  calls/req: script calls Redis got (EVALSHA + EVAL, INFO commandstats, all masters) per scraper request"
echo "  cmd/req: commands Redis ran, those of the scripts included, per scraper request"
echo "  pause: the pause (ms) between requests a connection in each round, calibrated on the run before"
echo "  steady chall.: the steady client's answers other than 200 (target 0)"
