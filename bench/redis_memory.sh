#!/usr/bin/env bash
# Redis memory per client in cluster mode (docs/operations.md, "Sizing
# Redis"): for a few limits, one client makes exactly `limit` requests
# (filling its sliding window), one more (a 429: the refusal counter and a
# strike), and spends one solved challenge; then every key the module wrote
# is measured with MEMORY USAGE. Windows are an hour, so nothing expires
# while it runs.
#
#   bench/redis_memory.sh            (needs `make build`, redis-server, curl, python3)
#   MEM_LIMITS="60 1000" bench/redis_memory.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "redis_memory: $*" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

LIMITS=${MEM_LIMITS:-"1 10 60 100 128 129 1000"}
REDIS_CLI=${REDIS_CLI:-redis-cli}
[[ -x $NGINX && -f $MODULE ]] || die "build first: make build"
command -v "${REDIS_SERVER:-redis-server}" >/dev/null || die "redis-server not found"
command -v curl >/dev/null || die "curl not found"

TMP=$(mktemp -d /tmp/pow-redis-memory-XXXXXX)
read -r HTTP_PORT REDIS_PORT <<<"$(free_ports 2)"
NGINX_PID=""
# shellcheck disable=SC2317  # run by the EXIT trap (shellcheck 0.9 cannot see it)
cleanup() {
    [[ -n $NGINX_PID ]] && stop_pid "$NGINX_PID" QUIT
    [[ -s $TMP/redis.pid ]] && stop_pid "$(<"$TMP/redis.pid")"
    rm -rf "$TMP"
}
trap cleanup EXIT

redis_start "$REDIS_PORT" "$TMP"
mkdir -p "$TMP/html/m"
echo '{}' >"$TMP/html/m/x"
{
    bench_conf_head "$TMP" "$MODULE" "$TMP/html" 256
    cat <<CONF
    pow_shield_redis redis://127.0.0.1:$REDIS_PORT timeout=1s;
    pow_shield_difficulty 1;
    pow_shield_strikes 1000 1h;
    server {
        listen 127.0.0.1:$HTTP_PORT;
        pow_shield_key \$http_x_client;
$(for l in $LIMITS; do printf '        location = /m/%s { pow_shield_limit %s 1h; try_files /m/x =404; }\n' "$l" "$l"; done)
    }
}
CONF
} >"$TMP/nginx.conf"
"$NGINX" -p "$TMP/" -c nginx.conf -e "$TMP/error.log" -g 'daemon off;' &
NGINX_PID=$!
wait_port "$HTTP_PORT" nginx

url() { echo "http://127.0.0.1:$HTTP_PORT/m/$1"; }

printf '%-6s %-24s %-6s %8s %8s\n' limit key type entries bytes
for l in $LIMITS; do
    client="client-$l"
    # `limit` requests on one connection: the window is full.
    for _ in $(seq "$l"); do printf 'url = "%s"\noutput = /dev/null\n' "$(url "$l")"; done >"$TMP/curl.cfg"
    curl -s -H "X-Client: $client" -K "$TMP/curl.cfg"
    # One more: 429 with a challenge (refusal counted, one strike).
    challenge=$(curl -s -o /dev/null -D - -H "X-Client: $client" "$(url "$l")" |
        tr -d '\r' | sed -n 's/^X-PoW-Challenge: //Ip')
    [[ -n $challenge ]] || die "limit $l: no challenge after $l requests"
    # Solve it (difficulty 1) and spend it.
    nonce=$(python3 - "$challenge" <<'PY'
import base64, hashlib, json, sys
payload = sys.argv[1].split(".")[0]
p = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
n = 0
while not hashlib.sha256((p["salt"] + str(n)).encode()).hexdigest().startswith("0" * p["difficulty"]):
    n += 1
print(n)
PY
)
    status=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Client: $client" \
        -H "X-PoW-Challenge: $challenge" -H "X-PoW-Nonce: $nonce" "$(url "$l")")
    [[ $status == 200 ]] || die "limit $l: the solution got $status"
    tag=$client # printable ASCII: its own tag in key names (command::client_tag)
    keys=$("$REDIS_CLI" -p "$REDIS_PORT" --scan --pattern "pow:{$tag}:*")
    keys+=$'\n'$("$REDIS_CLI" -p "$REDIS_PORT" --scan --pattern 'pow:spent:*')
    while read -r key; do
        [[ -n $key ]] || continue
        type=$("$REDIS_CLI" -p "$REDIS_PORT" type "$key")
        case $type in
        zset) entries=$("$REDIS_CLI" -p "$REDIS_PORT" zcard "$key") ;;
        *) entries=- ;;
        esac
        bytes=$("$REDIS_CLI" -p "$REDIS_PORT" memory usage "$key" samples 0)
        short=${key/\{$tag\}/\{...\}}
        short=${short/spent:\{*\}/spent:\{...\}}
        printf '%-6s %-24s %-6s %8s %8s\n' "$l" "$short" "$type" "$entries" "$bytes"
    done < <(sort <<<"$keys")
    # The spent key belongs to this client's row only.
    "$REDIS_CLI" -p "$REDIS_PORT" --scan --pattern 'pow:spent:*' | while read -r k; do
        "$REDIS_CLI" -p "$REDIS_PORT" del "$k" >/dev/null
    done
done
echo "redis: $("$REDIS_CLI" -p "$REDIS_PORT" info server | tr -d '\r' | sed -n 's/^redis_version:/redis_version /p'), used_memory: $("$REDIS_CLI" -p "$REDIS_PORT" info memory | tr -d '\r' | sed -n 's/^used_memory_human://p')"
