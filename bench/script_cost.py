#!/usr/bin/env python3
"""Redis's CPU a call of cluster mode's check scripts, two versions side by
side: each case (a script and a realistic call mix, the KEYS and ARGV the
node sends) runs on one redis-server of its own, before and after in turn,
at the same fixed rate, so that the logs hold as many entries for both.

    bench/script_cost.py BEFORE AFTER [case ...]

BEFORE and AFTER are script printers (objs/pow_shield_scripts, or
target/debug/examples/scripts of a worktree), or directories of the texts
(`<name>.lua`, a Redis Cluster's `<name>-c.lua`). Per round and version:
FLUSHALL, SCRIPT LOAD, a warm-up (COST_WARMUP [2] s, the windows fill),
CONFIG RESETSTAT, then COST_SECONDS [3] s at COST_RATE [10000] calls a
second (pipelined 100 at a time). Printed: the median over COST_ROUNDS [5]
rounds of INFO commandstats' usec_per_call of EVALSHA (the script with its
commands) and Redis's CPU a call (used_cpu_user + used_cpu_sys, the
event loop and the network included). The load: 2,000 clients in 100 /24s
(as bench/net_limits.sh's green load), windows of 2 s, limits far off.
COST_CLIENTS [2000] and COST_PER_NET [20] set the clients and how many
share a /24. Run it under `nice`; Redis is pinned to COST_CPU [0] where
taskset exists.

COST_CALLGRIND=1: Redis runs under valgrind's callgrind, counting only
inside EVALSHA, zeroed after the warm-up; the first column is then the
instructions a call (exact for a given call sequence; wall-clock times on
a shared machine are not). Slow: keep the rate low and the clients few
enough that the logs hold what the real load's do, e.g.
    COST_CALLGRIND=1 COST_RATE=50 COST_CLIENTS=12 COST_PER_NET=12
    COST_ROUNDS=3 COST_SECONDS=4 bench/script_cost.py BEFORE AFTER window-c
COST_KEEP=<dir> keeps each case's callgrind dumps (callgrind_annotate).
"""

import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PREFIX = "pow:"
DEADLINE = "9999999999999"
LIMIT = "100000"
WINDOW = "2000"
RULES = ["5", "60000", "0", "0"]


CLIENTS = int(os.environ.get("COST_CLIENTS", "2000"))
PER_NET = int(os.environ.get("COST_PER_NET", "20"))


def client(rng):
    n = rng.randrange(CLIENTS)
    return f"10.0.{n // PER_NET}.{n % PER_NET + 1}"


def tags(rng):
    """A client's tag and its /24's (`key=$pow_shield_net`)."""
    ip = client(rng)
    return "@" + ip, "=" + ip.rsplit(".", 1)[0] + ".0/24"


def member(seq):
    return f"5f3a9c21d0e4b7a8:1f2e:{seq:x}"


def gen_key(tag):
    return f"{PREFIX}{{{tag}}}:gen"


def window_keys(tag, kind="w"):
    p = f"{PREFIX}{{{tag}}}"
    return [f"{p}:{kind}:{LIMIT}:{WINDOW}", f"{p}:o:{LIMIT}:{WINDOW}", p + ":s", p + ":t",
            p + ":u"]


def count_keys(tag, kind="w"):
    p = f"{PREFIX}{{{tag}}}"
    return [f"{p}:{kind}:{LIMIT}:{WINDOW}", f"{p}:o:{LIMIT}:{WINDOW}"]


# Each case: (script, cluster mode, a call's KEYS and ARGV given rng and seq).
def case_window(rng, seq, kind="w"):
    own, _ = tags(rng)
    keys = window_keys(own, kind) + [gen_key(own)]
    return keys, [LIMIT, WINDOW, member(seq), "1"] + RULES + ["1", DEADLINE]


def case_count(rng, seq):
    _, net = tags(rng)
    return count_keys(net) + [gen_key(net)], [LIMIT, WINDOW, member(seq), "1", "0", DEADLINE]


def case_counts(rng, seq, n=4):
    keys, members = [], []
    _, net = tags(rng)
    for i in range(n):
        keys += count_keys(net)
        members.append(member(seq * n + i))
    return keys + [gen_key(net)], ["1", str(n), LIMIT, WINDOW, "1", "0"] + members + [DEADLINE]


def case_standing(rng, _seq):
    own, _ = tags(rng)
    p = f"{PREFIX}{{{own}}}"
    return [p + ":s", p + ":t", gen_key(own)], RULES + [DEADLINE]


def stacked_keys(rng):
    own, net = tags(rng)
    p = f"{PREFIX}{{{own}}}"
    return [p + ":s", p + ":t", p + ":u"] + count_keys(own) + count_keys(net)


def stacked_args():
    return ["1"] + RULES + ["00", "10", LIMIT, WINDOW, LIMIT, WINDOW]


def case_stacked(rng, seq):
    return stacked_keys(rng), [member(seq)] + stacked_args() + [DEADLINE]


def case_stacks(rng, seq, n=4):
    keys = []
    for _ in range(n):
        keys += stacked_keys(rng)
    members = [member(seq * n + i) for i in range(n)]
    return keys, ["*", "1", str(n)] + stacked_args() + members + [DEADLINE]


def case_checks(rng, seq, n=4):
    keys = [window_keys(tags(rng)[0])[0] for _ in range(n)]
    return keys, ["1", str(n), LIMIT, WINDOW, "1"] + RULES + [member(seq), DEADLINE]


CASES = {
    "window-c": ("window", True, case_window),
    "approx-c": ("approx", True, lambda rng, seq: case_window(rng, seq, "a")),
    "count-c": ("count", True, case_count),
    "counts-c": ("counts", True, case_counts),
    "standing-c": ("standing", True, case_standing),
    "stacked": ("stacked", False, case_stacked),
    "stacks": ("stacked", False, case_stacks),
    "checks": ("checks", False, case_checks),
}


def resp(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.f = self.s.makefile("rb")

    def read(self):
        line = self.f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind in (b"+", b":"):
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"bad reply {line!r}")

    def call(self, *args):
        self.s.sendall(resp(list(args)))
        return self.read()

    def batch(self, payload, n):
        self.s.sendall(payload)
        for _ in range(n):
            self.read()


def script_text(printer, name, cluster):
    if os.path.isdir(printer):
        path = os.path.join(printer, name + ("-c" if cluster else "") + ".lua")
        with open(path, "rb") as f:
            return f.read()
    args = [printer] + (["--cluster"] if cluster else []) + [name]
    return subprocess.run(args, check=True, capture_output=True).stdout


def info(conn, section):
    text = conn.call("INFO", section).decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def cpu(conn):
    i = info(conn, "cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])


def run(conn, batches, rate):
    """Sends the batches at `rate` calls a second; returns the calls."""
    start, sent = time.monotonic(), 0
    for payload, n in batches:
        conn.batch(payload, n)
        sent += n
        ahead = sent / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
    return sent


def calls_for(case, sha, seconds, rate, seed):
    _, _, make = CASES[case]
    rng, batches, seq = random.Random(seed), [], 0
    for _ in range(int(seconds * rate) // 100):
        out = []
        for _ in range(100):
            keys, argv = make(rng, seq)
            seq += 1
            out.append(resp(["EVALSHA", sha, str(len(keys))] + keys + argv))
        batches.append((b"".join(out), 100))
    return batches


def callgrind_ir(pid, tmp, action):
    """callgrind_control's zeroing (`-z`) or dump (`-d`); after a dump, the
    instructions counted inside EVALSHA since the last zeroing."""
    before = set(os.listdir(tmp))
    subprocess.run(["callgrind_control", action, str(pid)], check=True, capture_output=True)
    if action == "-z":
        return 0
    for _ in range(200):
        new = [f for f in set(os.listdir(tmp)) - before if f.startswith("cg.")]
        if new:
            time.sleep(0.5)
            with open(os.path.join(tmp, new[0]), encoding="utf-8") as f:
                for line in f:
                    if line.startswith("totals:") or line.startswith("summary:"):
                        return int(line.split()[1])
        time.sleep(0.05)
    raise RuntimeError("no callgrind dump")


def measure(port, case, printer, rounds_env, grind=None):
    name, cluster, _ = CASES[case]
    text = script_text(printer, name, cluster)
    conn = Conn(port)
    conn.call("FLUSHALL")
    sha = conn.call("SCRIPT", "LOAD", text).decode()
    rate = int(rounds_env["rate"])
    warm = calls_for(case, sha, float(rounds_env["warmup"]), rate, 1)
    main = calls_for(case, sha, float(rounds_env["seconds"]), rate, 2)
    run(conn, warm, rate)
    conn.call("CONFIG", "RESETSTAT")
    if grind:
        callgrind_ir(grind[0], grind[1], "-z")
    c0 = cpu(conn)
    n = run(conn, main, rate)
    c1 = cpu(conn)
    if grind:
        return callgrind_ir(grind[0], grind[1], "-d") / n, 0, 0
    stats = info(conn, "commandstats")
    ev = dict(kv.split("=") for kv in stats["cmdstat_evalsha"].split(","))
    inner = sum(float(dict(kv.split("=") for kv in v.split(","))["usec"])
                for k, v in stats.items() if k.startswith("cmdstat_") and k != "cmdstat_evalsha"
                and k != "cmdstat_config")
    return float(ev["usec_per_call"]), (c1 - c0) * 1e6 / n, inner / n


def start_redis(tmp):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--dir", tmp]
    if os.environ.get("COST_CALLGRIND"):
        cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
               "--toggle-collect=evalShaCommand", f"--callgrind-out-file={tmp}/cg.%p"] + cmd
    elif shutil.which("taskset"):
        cmd = ["taskset", "-c", os.environ.get("COST_CPU", "0")] + cmd
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            Conn(port).call("PING")
            return proc, port
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    before, after = sys.argv[1:3]
    cases = sys.argv[3:] or list(CASES)
    env = {k: os.environ.get("COST_" + k.upper(), d)
           for k, d in [("rate", "10000"), ("warmup", "2"), ("seconds", "3"), ("rounds", "5")]}
    first = "evalsha Ir" if os.environ.get("COST_CALLGRIND") else "evalsha us"
    print(f"{'case':<11} {first:>21} {'redis cpu us':>21} {'commands us':>21}")
    for case in cases:
        tmp = tempfile.mkdtemp()
        proc, port = start_redis(tmp)
        try:
            got = {"before": [], "after": []}
            grind = (proc.pid, tmp) if os.environ.get("COST_CALLGRIND") else None
            for r in range(int(env["rounds"])):
                order = [("before", before), ("after", after)]
                for which, printer in order if r % 2 == 0 else order[::-1]:
                    got[which].append(measure(port, case, printer, env, grind))
        finally:
            proc.terminate()
            proc.wait()
            if os.environ.get("COST_KEEP"):
                shutil.copytree(tmp, os.path.join(os.environ["COST_KEEP"], case))
            shutil.rmtree(tmp, ignore_errors=True)
        cols = []
        for i in range(3):
            b = statistics.median(x[i] for x in got["before"])
            a = statistics.median(x[i] for x in got["after"])
            change = 100 * (a - b) / b if b else 0
            cols.append(f"{b:6.2f} -> {a:6.2f} {change:+4.0f}%")
        print(f"{case:<11} " + " ".join(f"{c:>21}" for c in cols), flush=True)


if __name__ == "__main__":
    main()
