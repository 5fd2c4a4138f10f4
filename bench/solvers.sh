#!/usr/bin/env bash
# The rate of every solver on this machine, in one run.
#
# 1. Per core, beside OpenSSL's SHA-256 (`openssl speed -bytes 16384
#    sha256`, ÷ 64: compressions per CPU second on one core): the CLI on one
#    thread and on every core (`pow-shield bench`), the Python client's
#    native solver and its pure-Python one, the Node client's WebAssembly
#    and node:crypto searches (clients/node/bench.js) with their ratio to
#    the CLI's one thread. Per-core figures are per CPU second (as openssl
#    speed counts), so a busy machine moves them less.
# 2. Each client's solve rate on the same challenges, every core each: the
#    CLI (`pow-shield solve`, one process per challenge), the Rust library
#    (`solve`, in one process), the Python client (`pow_shield.solve`, the
#    native solver where it built) and the Node client (`solve`, worker
#    threads).
#
#   bench/solvers.sh [DIFFICULTY [COUNT]]     (make bench-solvers)
#
# Part 1: SOLVERS_SECONDS=n measures each for n seconds (default 3); the
# native Python solver is built into a temporary directory with pip
# (setuptools-rust and cargo needed; skipped with a note otherwise).
# Part 2: rate = hashes tried / seconds, where a search that stops at nonce
# k has tried about k + 1 hashes (the threads share the nonces in turn),
# summed over COUNT salts (default 6) at DIFFICULTY (default 5: about a
# million hashes each). The machine may be shared: compare the ratios of
# one run.
set -euo pipefail
cd "$(dirname "$0")/.."

repo=$PWD
secs=${SOLVERS_SECONDS:-3}
cli=${POW_SHIELD_CLI:-objs/pow-shield}
python=${PYTHON:-/usr/bin/python3}

[ -x "$cli" ] || { echo "no $cli: run make build" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== per core, beside OpenSSL (pow-shield bench)"
"$cli" bench --seconds "$secs" | tee "$work/cli-bench.txt"
# "  1 thread:      33.22 M hashes/s per core (CPU time; ...)"
cli_rate=$(sed -n 's/^ *1 thread: *\([0-9.]*\) M hashes\/s.*/\1/p' "$work/cli-bench.txt")

echo
echo "== the Python client, per core"
rate() {
    PYTHONPATH=$1 "$python" -c "
import pow_shield
info = pow_shield.solver_info()
rate = pow_shield.hash_rate($secs)
print('  %-8s %-20s %8.2f M hashes/s per core (one process)' % (info['solver'], info['engine'], rate / 1e6))
"
}
pythonpath=$repo/clients/python
if "$python" -m pip install --quiet --no-build-isolation --no-deps --no-index \
        --target "$work/native" "$repo/clients/python" >"$work/pip.log" 2>&1 \
        && ls "$work"/native/pow_shield/_native*.so >/dev/null 2>&1; then
    rate "$work/native"
    pythonpath=$work/native
else
    echo "  native: not built (needs setuptools-rust and cargo); pip said:"
    sed 's/^/    /' "$work/pip.log" | tail -5
fi
POW_SHIELD_PURE_PYTHON=1 rate "$repo/clients/python"

echo
echo "== the Node client, per core (clients/node/bench.js, one thread)"
node clients/node/bench.js "$secs" --json >"$work/node-bench.json"
node -e '
const { rates } = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const cli = Number(process.argv[2]);
for (const [engine, r] of Object.entries(rates)) {
  const m = r.perCpuSecond / 1e6;
  console.log("  %s %s M hashes/s per core (one thread)   %sx the CLI on one thread (%s M/s)",
    engine.padEnd(5), m.toFixed(2).padStart(7), (m / cli).toFixed(2), cli.toFixed(2));
}
' "$work/node-bench.json" "${cli_rate:-0}"

echo
echo "== every client on the same challenges, every core"

difficulty=${1:-5}
count=${2:-6}
cargo build --quiet --release -p pow-shield-client --example solve_rate
rust=target/release/examples/solve_rate

salts=$(i=1; while [ "$i" -le "$count" ]; do
    printf 'pow-shield bench salt %s' "$i" | sha256sum | cut -c1-32
    i=$((i + 1))
done)

now() { date +%s.%N; }

# each solver prints "<nonce> <seconds>" per salt
run_cli() {
    for s in $salts; do
        t0=$(now)
        n=$("$cli" solve --max-solve-time 0 --salt "$s" --difficulty "$difficulty")
        t1=$(now)
        echo "$n $t0 $t1" | awk '{ printf "%s %.6f\n", $1, $3 - $2 }'
    done
}
run_rust() {
    # shellcheck disable=SC2086 # one argument per salt
    "$rust" "$difficulty" $salts
}
run_python() {
    # shellcheck disable=SC2086
    PYTHONPATH=$pythonpath "$python" -c '
import sys, time, pow_shield
d = int(sys.argv[1])
for s in sys.argv[2:]:
    t = time.perf_counter()
    n = pow_shield.solve(s, d, max_solve_time=None)
    print(n, "%.6f" % (time.perf_counter() - t))
' "$difficulty" $salts
}
run_node() {
    # shellcheck disable=SC2086
    NODE_NO_WARNINGS=1 node -e '
const { solve } = require("./clients/node");
(async () => {
  const [d, ...salts] = process.argv.slice(1);
  for (const s of salts) {
    const t = process.hrtime.bigint();
    const n = await solve(s, Number(d), { maxSolveTimeMs: 0 });
    console.log(n, (Number(process.hrtime.bigint() - t) / 1e9).toFixed(6));
  }
})();
' "$difficulty" $salts
}

echo "solve rate, difficulty $difficulty, $count challenges, $(nproc) cores"
printf '%-8s %12s %10s %12s %10s\n' client hashes seconds 'M hashes/s' 'vs CLI'
base=""
for who in cli rust python node; do
    line=$("run_$who" | awk '{ h += $1 + 1; s += $2 } END { printf "%d %.3f %.3f", h, s, h / s / 1e6 }')
    # shellcheck disable=SC2086 # three numbers
    set -- $line
    [ -n "$base" ] || base=$3
    printf '%-8s %12s %10s %12s %9.2fx\n' "$who" "$1" "$2" "$3" "$(awk "BEGIN { print $3 / $base }")"
done
