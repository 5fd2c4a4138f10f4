#!/usr/bin/env bash
# The rate of every solver on this machine, in one run, beside OpenSSL's
# SHA-256 (`openssl speed -bytes 16384 sha256`, ÷ 64: compressions per CPU
# second on one core): the CLI on one thread and on every core, the Python
# client's native solver and its pure-Python one. Per-core figures are per
# CPU second (as openssl speed counts), so a busy machine moves them less.
#
#   make bench-solvers    or    make build && bench/solvers.sh
#
# SOLVERS_SECONDS=n measures each for n seconds (default 3). The native
# Python solver is built into a temporary directory with pip (setuptools-
# rust and cargo needed; skipped with a note otherwise).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
secs=${SOLVERS_SECONDS:-3}
cli=$repo/objs/pow-shield
python=${PYTHON:-/usr/bin/python3}

[ -x "$cli" ] || { echo "no $cli: make build" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== pow-shield bench (CLI; OpenSSL measured in the same run)"
"$cli" bench --seconds "$secs"

echo
echo "== Python client"
rate() {
    PYTHONPATH=$1 "$python" -c "
import pow_shield
info = pow_shield.solver_info()
rate = pow_shield.hash_rate($secs)
print('  %-8s %-20s %8.2f M hashes/s per core (one process)' % (info['solver'], info['engine'], rate / 1e6))
"
}
if "$python" -m pip install --quiet --no-build-isolation --no-deps --no-index \
        --target "$work/native" "$repo/clients/python" >"$work/pip.log" 2>&1 \
        && ls "$work"/native/pow_shield/_native*.so >/dev/null 2>&1; then
    rate "$work/native"
else
    echo "  native: not built (needs setuptools-rust and cargo); pip said:"
    sed 's/^/    /' "$work/pip.log" | tail -5
fi
POW_SHIELD_PURE_PYTHON=1 rate "$repo/clients/python"
