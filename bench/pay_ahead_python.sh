#!/usr/bin/env bash
# bench/pay_ahead_python.sh — what paying ahead saves the Python client.
#
#   make build && bench/pay_ahead_python.sh
#
# nginx (1 worker, local mode) shields two locations alike,
# `pow_shield_limit 1 60s; pow_shield_difficulty 16b;`, one of them with
# `pow_shield_pay_ahead off` (before: the 429 path), the other as shipped
# (after: pay-ahead on). Each Python entry point (Session, requests.get with
# RequestsAuth, HTTPAdapter, httpx sync and async) makes 1 free + PAID
# requests to each, as a client of its own (X-Client): the round trips are
# the access log's entries for that client, the time per paid request the
# client's own clock around each call (mean over the PAID, sequential,
# loopback). The native solver is built with pip into a temporary directory
# when setuptools-rust and cargo are there, else the pure-Python one runs
# (the first line says which).
#
# Environment: PAID paid requests per client [30]; PYTHON [/usr/bin/python3];
# BENCH_KEEP=1 keeps the temp dir; NGINX, MODULE as for bench/run.sh.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
PAID=${PAID:-30}
PYTHON=${PYTHON:-/usr/bin/python3}

die() { echo "bench/pay_ahead_python.sh: $*" >&2; exit 1; }

[[ $PAID =~ ^[0-9]+$ && $PAID -ge 1 && $PAID -le 1000 ]] || die "PAID must be 1..1000"
[[ -x $NGINX && -f $MODULE ]] || die "objs/nginx or the module is missing: run 'make build' first"
[[ -x $PYTHON ]] || die "$PYTHON not found"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pow-shield-ahead.XXXXXX")
chmod 0755 "$TMP"
cleanup() {
    local rc=$?
    set +e
    if [[ -s $TMP/nginx.pid ]]; then
        stop_pid "$(<"$TMP/nginx.pid")" QUIT
    fi
    if [[ ${BENCH_KEEP:-0} == 1 ]]; then echo "kept: $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pay_ahead_server "$TMP"

pythonpath=$ROOT/clients/python
if "$PYTHON" -m pip install --quiet --no-build-isolation --no-deps --no-index \
        --target "$TMP/site" "$ROOT/clients/python" >"$TMP/pip.log" 2>&1 \
        && ls "$TMP"/site/pow_shield/_native*.so >/dev/null 2>&1; then
    pythonpath=$TMP/site
fi

# The driver: for each entry point and location, 1 + PAID GETs; prints
# "<kind> <before|after> <mean ms per paid request> <non-200 count>".
cat >"$TMP/drive.py" <<'EOF'
import asyncio, sys, time
import pow_shield

base, paid = sys.argv[1], int(sys.argv[2])
print("solver:", pow_shield.solver_info())

def timed(get, n):
    spent, bad = [], 0
    for i in range(n):
        start = time.perf_counter()
        status = get().status_code
        spent.append(time.perf_counter() - start)
        bad += status != 200
    return spent[1:], bad

def run(kind, where):
    url = f"{base}/{where}/data.json"
    headers = {"X-Client": f"{kind}-{where}"}
    if kind == "session":
        with pow_shield.Session() as s:
            return timed(lambda: s.get(url, headers=headers, timeout=30), paid + 1)
    if kind == "requests-auth":
        import requests
        return timed(lambda: requests.get(url, headers=headers, timeout=30, auth=pow_shield.RequestsAuth()), paid + 1)
    if kind == "adapter":
        import requests
        with requests.Session() as s:
            s.mount("http://", pow_shield.HTTPAdapter())
            return timed(lambda: s.get(url, headers=headers, timeout=30), paid + 1)
    if kind == "httpx":
        import httpx
        with httpx.Client(auth=pow_shield.HttpxAuth(), timeout=30) as c:
            return timed(lambda: c.get(url, headers=headers), paid + 1)
    import httpx

    async def go():
        spent, bad = [], 0
        async with httpx.AsyncClient(auth=pow_shield.HttpxAuth(), timeout=30) as c:
            for i in range(paid + 1):
                start = time.perf_counter()
                status = (await c.get(url, headers=headers)).status_code
                spent.append(time.perf_counter() - start)
                bad += status != 200
        return spent[1:], bad

    return asyncio.run(go())

for kind in ("session", "requests-auth", "adapter", "httpx", "httpx-async"):
    for where in ("off", "on"):
        spent, bad = run(kind, where)
        print(kind, where, "%.2f" % (1000 * sum(spent) / len(spent)), bad, flush=True)
EOF

PYTHONPATH=$pythonpath "$PYTHON" "$TMP/drive.py" "http://127.0.0.1:$PORT" "$PAID" >"$TMP/drive.out" ||
    die "the driver failed: $(tail -3 "$TMP/drive.out")"

head -1 "$TMP/drive.out"
echo "1 free + $PAID paid requests per client, pow_shield_limit 1 60s, 16 bits, loopback"
printf '%-14s | %-34s | %-34s\n' client 'before (pay-ahead off: 429 path)' 'after (pay-ahead on)'
printf '%-14s | %11s %8s %13s | %11s %8s %13s\n' '' 'round trips' '429s' 'ms/paid req' 'round trips' '429s' 'ms/paid req'
tail -n +2 "$TMP/drive.out" | while read -r kind where ms bad; do
    trips=$(grep -c "^$kind-$where " "$TMP/ahead.log" || true)
    c429=$(grep -c "^$kind-$where 429 " "$TMP/ahead.log" || true)
    [[ $bad == 0 ]] || ms="$ms ($bad not 200)"
    if [[ $where == off ]]; then
        line=$(printf '%-14s | %11s %8s %13s' "$kind" "$trips" "$c429" "$ms")
    else
        printf '%s | %11s %8s %13s\n' "$line" "$trips" "$c429" "$ms"
    fi
done
