#!/usr/bin/env bash
# bench/net_memory.sh — Redis memory per /24 key (bench/README.md,
# "net_memory.sh"; docs/operations.md, "Sizing Redis"): a /24 makes exactly
# NET_MEM_LIMIT [1000] requests in a window of an hour from its addresses
# (4 each), then one more (a 429: its refusal count); every key of the /24
# (`pow:{@key=<the /24>}:...`) is measured with MEMORY
# USAGE ... SAMPLES 0, its log exact and `approx`, on one Redis and on a
# Redis Cluster of three masters. The per-address keys the same requests
# left are summed beside it.
#
#   make build && bench/net_memory.sh
#
# Locations (windows of an hour: nothing expires while it runs):
#   exact:  pow_shield_limit 100000 1h;        pow_shield_limit N 1h name=net key=$pow_shield_net;
#   approx: pow_shield_limit 100000 1h approx; pow_shield_limit N 1h approx name=net key=$pow_shield_net;

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
die() { echo "bench/net_memory.sh: $*" >&2; exit 1; }
# shellcheck source=bench/net_lib.sh
. "$ROOT/bench/net_lib.sh"

LIMIT=${NET_MEM_LIMIT:-1000}
BACKENDS=${NET_MEM_BACKENDS:-redis cluster3}
[[ $LIMIT =~ ^[1-9][0-9]*$ ]] || die "NET_MEM_LIMIT must be a whole number, not '$LIMIT'"
((LIMIT <= 1016)) || die "NET_MEM_LIMIT above 1016: the /24 has 254 addresses, 4 requests each"
[[ -x $NGINX && -f $MODULE ]] || die "build first: make build"
for t in "$REDIS_SERVER" "$REDIS_CLI" curl; do command -v "$t" >/dev/null || die "$t not found"; done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pow-shield-netmem.XXXXXX")
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
echo '{}' >"$TMP/html/exact.json"
echo '{}' >"$TMP/html/approx.json"
chmod -R a+rX "$TMP/html"
read -r P_ONE P_C1 P_C2 P_C3 H_redis H_cluster3 <<<"$(free_ports 6)"
declare -A HTTP=([redis]=$H_redis [cluster3]=$H_cluster3) RPORTS=([redis]=$P_ONE [cluster3]="$P_C1 $P_C2 $P_C3")

for b in $BACKENDS; do
    [[ $b == redis || $b == cluster3 ]] || die "unknown backend '$b'"
    read -r -a ports <<<"${RPORTS[$b]}"
    if [[ $b == redis ]]; then redis_up "$P_ONE" "$TMP/redis"; else redis_cluster_up "$TMP/cluster" "${ports[@]}"; fi
    mkdir -p "$TMP/$b"
    {
        bench_conf_head "$TMP/$b" "$MODULE" "$TMP/html" 256
        cat <<EOF
    pow_shield_zone 8m;
    $(redis_line "${ports[@]}")
    server {
        listen 127.0.0.1:${HTTP[$b]};
        $REALIP
        pow_shield_log_level info;
        location = /exact.json {
            pow_shield_limit 100000 1h;
            pow_shield_limit $LIMIT 1h name=net key=\$pow_shield_net;
        }
        location = /approx.json {
            pow_shield_limit 100000 1h approx;
            pow_shield_limit $LIMIT 1h approx name=net key=\$pow_shield_net;
        }
    }
}
EOF
    } >"$TMP/$b/nginx.conf"
    nginx_up "$TMP/$b"
    wait_port "${HTTP[$b]}" "nginx ($b)"
done

# all_keys PORT...: "port key" of every key.
all_keys() { local p; for p in "$@"; do "$REDIS_CLI" -p "$p" --scan | sed "s/^/$p /"; done; }

echo "redis: $("$REDIS_SERVER" --version | awk '{print $3}'); MEMORY USAGE <key> SAMPLES 0; a /24 made $LIMIT requests in a window of 1 h, then one more"
echo
printf '%-9s %-7s %-26s %-5s %8s %9s %26s\n' backend log "/24 key" type entries bytes "its addresses' keys (bytes)"
for b in $BACKENDS; do
    read -r -a ports <<<"${RPORTS[$b]}"
    net=50
    for kind in exact approx; do
        flush_all "${ports[@]}"
        url="http://127.0.0.1:${HTTP[$b]}/$kind.json"
        # LIMIT requests, 4 an address (10.<net>.0.1, .1, .1, .1, .2, ...), on one connection.
        for i in $(seq 0 "$LIMIT"); do
            ((i == 0)) || echo next
            printf 'url = "%s"\nheader = "X-Real-IP: 10.%d.0.%d"\noutput = /dev/null\nwrite-out = "%%{http_code}\\n"\n' \
                "$url" "$net" $((i / 4 + 1))
        done >"$TMP/curl.cfg"
        curl -s -K "$TMP/curl.cfg" >"$TMP/codes"
        ok=$(grep -cx 200 "$TMP/codes" || true)
        last=$(tail -1 "$TMP/codes")
        [[ $ok == "$LIMIT" && $last == 429 ]] || die "$b $kind: $ok of $LIMIT admitted, the one after answered $last"
        tag="@key=10.$net.0.0/24"
        own=0
        while read -r port key; do
            bytes=$("$REDIS_CLI" -p "$port" memory usage "$key" samples 0)
            if [[ $key == "pow:{$tag}:"* ]]; then
                type=$("$REDIS_CLI" -p "$port" type "$key")
                entries=-
                case $type in
                    zset) entries=$("$REDIS_CLI" -p "$port" zcard "$key") ;;
                    hash) entries=$("$REDIS_CLI" -p "$port" hlen "$key") ;;
                esac
                printf '%-9s %-7s %-26s %-5s %8s %9s\n' "$b" "$kind" "pow:{/24}:${key#"pow:{$tag}:"}" "$type" "$entries" "$bytes"
            elif [[ $key == "pow:{"* ]]; then
                own=$((own + bytes))
            fi
        done < <(all_keys "${ports[@]}")
        printf '%-9s %-7s %-26s %-5s %8s %9s %26s\n' "$b" "$kind" "(addresses)" - - - \
            "$own ($((LIMIT / 4 + 1)) addresses)"
        net=$((net + 1))
    done
done
echo
echo "  /24 key: pow:{@key=<the /24>}:<w (exact) | a (approx) | o (refusals)>:<requests>:<window ms>"
echo "  its addresses' keys: every other pow:{...} key (the addresses' own windows), summed"
