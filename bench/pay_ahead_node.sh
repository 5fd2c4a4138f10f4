#!/usr/bin/env bash
# bench/pay_ahead_node.sh — what paying ahead changes for the Node client
# (clients/node, withPowShield): round trips and the mean time per paid
# request at 16 bits, before (`pow_shield_pay_ahead off`: the 429 path, a
# 429 and then the paid request) and after (`on`: the solution of the next
# challenge sent with the request), in one run.
#
#   make build && bench/pay_ahead_node.sh
#   BENCH_PAID=30 bench/pay_ahead_node.sh
#
# One nginx (1 worker), two locations with `pow_shield_limit 1 60s` and
# `pow_shield_difficulty 16b`, one with pay-ahead off. Per location, a
# fresh client key makes 1 free request, then BENCH_PAID [30] paid ones in
# turn, each timed from the call to its body read (the solve included);
# round trips are the access log's lines for that key.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "bench/pay_ahead_node.sh: $*" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
PAID=${BENCH_PAID:-30}
[[ -x $NGINX && -f $MODULE ]] || die "build first: make build"
command -v node >/dev/null || die "node is missing: make deps-node"

TMP=$(mktemp -d /tmp/pow-pay-ahead-node.XXXXXX)
cleanup() {
    [[ -s $TMP/nginx.pid ]] && stop_pid "$(<"$TMP/nginx.pid")" QUIT
    rm -rf "$TMP"
}
trap cleanup EXIT
pay_ahead_server "$TMP"

# prints "<mean ms> <max ms>" of the paid requests
run() { # run LOCATION KEY
    # shellcheck disable=SC2016 # JavaScript, not shell
    NODE_NO_WARNINGS=1 node -e '
const { withPowShield, engineName } = require(process.argv[1]);
const [url, key, paid] = process.argv.slice(2);
const f = withPowShield(fetch);
const headers = { "X-Client": key };
(async () => {
  await (await f(url, { headers })).arrayBuffer();
  const ms = [];
  for (let i = 0; i < Number(paid); i++) {
    const t = process.hrtime.bigint();
    const r = await f(url, { headers });
    await r.arrayBuffer();
    if (r.status !== 200) throw new Error(`HTTP ${r.status}`);
    ms.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  const mean = ms.reduce((a, b) => a + b, 0) / ms.length;
  console.log(mean.toFixed(2), Math.max(...ms).toFixed(2), engineName());
})().catch((e) => { console.error(String(e)); process.exit(1); });
' "$ROOT/clients/node" "http://127.0.0.1:$PORT/$1/data.json" "$2" "$PAID"
}

echo "Node client (withPowShield), 1 free + $PAID paid requests at 16 bits, $(nproc) cores"
printf '%-22s %12s %6s %10s %10s %8s\n' '' 'round trips' '429s' 'mean ms' 'max ms' solver
for how in off on; do
    key="bench-$how-$$"
    read -r mean max solver < <(run "$how" "$key")
    trips=$(grep -c "^$key " "$TMP/ahead.log" || true)
    c429=$(grep -c "^$key 429 " "$TMP/ahead.log" || true)
    label=$([[ $how == off ]] && echo 'before (pay_ahead off)' || echo 'after (pay_ahead on)')
    printf '%-22s %12s %6s %10s %10s %8s\n' "$label" "$trips" "$c429" "$mean" "$max" "$solver"
done
