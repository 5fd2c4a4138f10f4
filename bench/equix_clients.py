#!/usr/bin/env python3
"""Every client's Equi-X solver on this machine (docs/equix.md): solves a
second per core and the memory a solve adds, one thread each.

    bench/equix_clients.py [BITS [COUNT]]        (make bench-equix)

Each client pays COUNT challenges (default 8) of BITS bits (default 6) on
one thread, from nonce 0: a search that stops at nonce k has made k + 1
Equi-X solves. The rate is solves per CPU second (one core, however busy
the machine); the memory is what the first solve adds to the peak
resident size of a fresh process (the CLI: its peak under /usr/bin/time
less that of a SHA-256 solve), beside Equi-X's own solver memory (1.9 MB
a thread). Clients: the
CLI (objs/pow-shield, `solve --threads 1`, a process a challenge), Python's
native module (installed with pip into a temporary directory), Node's
native addon and its WebAssembly solver (lib/equix.wasm).
"""

import base64
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BITS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
COUNT = int(sys.argv[2]) if len(sys.argv) > 2 else 8
SALTS = [f"{i:02x}" * 16 for i in range(COUNT)]
CLI = os.environ.get("POW_SHIELD_CLI", os.path.join(REPO, "objs", "pow-shield"))
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")


def token(salt, alg="equix", bits=BITS):
    payload = {"ip": "127.0.0.1", "ts": 1, "difficulty": -(-bits // 4), "salt": salt, "bits": bits}
    if alg:
        payload["alg"] = alg
    text = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    return text + "." + "A" * 43


def run(argv, env=None):
    """(stdout, CPU seconds) of one process."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env)
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"{argv[0]}: exit status {status}")
    return out, usage.ru_utime + usage.ru_stime


def peak_kb(argv):
    """The peak RSS of a process, by /usr/bin/time (a fork of this Python
    would count its own size); None without it."""
    if not os.access("/usr/bin/time", os.X_OK):
        return None
    with tempfile.NamedTemporaryFile("r") as f:
        subprocess.run(["/usr/bin/time", "-f", "%M", "-o", f.name] + argv, stdout=subprocess.DEVNULL, check=True)
        return int(f.read().split()[-1])


def show(name, solves, cpu, added_kb, note=""):
    memory = "   ? MB" if added_kb is None else f"{added_kb / 1024:4.1f} MB"
    print(f"{name:<24} {solves / cpu:7.1f} solves/s per core   +{memory} a solve  {note}")


def cli():
    if not os.access(CLI, os.X_OK):
        print(f"{'CLI':<28} skipped: no {CLI} (make build)")
        return
    solves = cpu = 0.0
    for salt in SALTS:
        out, used = run([CLI, "solve", "--threads", "1", token(salt)])
        solves += int(out.split()[0]) + 1
        cpu += used
    equix = peak_kb([CLI, "solve", "--threads", "1", token(SALTS[0])])
    sha = peak_kb([CLI, "solve", "--threads", "1", token(SALTS[0], alg=None, bits=1)])
    added = None if equix is None or sha is None else equix - sha
    show("CLI (Rust library)", solves, cpu, added, "(HashX compiled)")


PY_CODE = r"""
import json, resource, sys, time, pow_shield
salts, bits = json.loads(sys.argv[1]), int(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cpu, solves, after = time.process_time(), 0, None
for salt in salts:
    nonce, _ = pow_shield.solve_equix(salt, bits, threads=1, max_solve_time=None)
    solves += int(nonce) + 1
    after = after or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cpu = time.process_time() - cpu
info = pow_shield.equix_info()
print(json.dumps({"solves": solves, "cpu": cpu, "added": after - before, "runtime": info["runtime"]}))
"""


def python():
    with tempfile.TemporaryDirectory() as site:
        pip = subprocess.run(
            [PYTHON, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps", "--no-index",
             "--target", site, os.path.join(REPO, "clients", "python")],
            capture_output=True, text=True,
        )
        if pip.returncode:
            print(f"{'Python (native module)':<28} skipped: pip install failed: {pip.stderr.strip()[-200:]}")
            return
        env = dict(os.environ, PYTHONPATH=site)
        out, _ = run([PYTHON, "-c", PY_CODE, json.dumps(SALTS), str(BITS)], env)
        r = json.loads(out)
        show("Python (native module)", r["solves"], r["cpu"], r["added"], f"(HashX {r['runtime']})")


NODE_CODE = r"""
const { EquixSearch, equixModule } = require(process.argv[1] + '/lib/equix.js');
const { nativeAddon } = require(process.argv[1] + '/lib/native.js');
const [salts, bits, engine] = [JSON.parse(process.argv[2]), Number(process.argv[3]), process.argv[4]];
const native = engine === 'native' ? nativeAddon() : null;
if (engine === 'native' && !(native && native.equixSearch)) { console.log('null'); process.exit(0); }
const module = equixModule();
const before = process.resourceUsage().maxRSS;
const cpu = process.cpuUsage();
let solves = 0;
let after = null;
for (const salt of salts) {
  const search = new EquixSearch(salt, bits, module, native);
  for (let n = 0; ; n++) if (search.run(n, n + 1)) { solves += n + 1; break; }
  if (after === null) after = process.resourceUsage().maxRSS;
}
const used = process.cpuUsage(cpu);
console.log(JSON.stringify({ solves, cpu: (used.user + used.system) / 1e6, added: after - before }));
"""


def node():
    for engine, name in (("native", "Node (native addon)"), ("wasm", "Node (WebAssembly)")):
        try:
            out, _ = run(["node", "-e", NODE_CODE, os.path.join(REPO, "clients", "node"),
                             json.dumps(SALTS), str(BITS), engine])
        except FileNotFoundError:
            print(f"{name:<28} skipped: no node")
            return
        r = json.loads(out)
        if r is None:
            print(f"{name:<28} skipped: no addon (make node-native)")
            continue
        show(name, r["solves"], r["cpu"], r["added"], "(HashX " + ("compiled)" if engine == "native" else "interpreted)"))


def main():
    print(f"Equi-X, one thread: {COUNT} challenges of {BITS} bits each (solves = nonces tried); "
          f"CPU {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    cli()
    python()
    node()


if __name__ == "__main__":
    main()
