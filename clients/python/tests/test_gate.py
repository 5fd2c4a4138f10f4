"""The per-origin in-flight gate: at most 4 requests (n - 1 for the
server's default 5 strikes) in flight per origin while the client may be
over the limit, before the first answer too; RateLimit's Remaining opens
it, a 429 or Remaining 0 closes it."""

import asyncio
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pow_shield  # noqa: E402
from pow_shield._gate import Gate, origin, remaining  # noqa: E402
from fakeserver import FakeServer  # noqa: E402

try:
    import requests
except ImportError:  # pragma: no cover - optional dependency
    requests = None
try:
    import httpx
except ImportError:  # pragma: no cover - optional dependency
    httpx = None

URL = "http://api.example:8080/items"


class GateTest(unittest.TestCase):
    def test_origin_is_scheme_host_and_port_with_the_default_port_spelled_out(self):
        self.assertEqual(origin("http://API.example/x?y"), "http://api.example:80")
        self.assertEqual(origin("https://api.example"), "https://api.example:443")
        self.assertEqual(origin("http://u:p@h:8080/a"), "http://h:8080")
        self.assertEqual(origin("http://[::1]/"), "http://[::1]:80")

    def test_remaining_is_the_lowest_r_of_ratelimit_else_x_ratelimit_remaining(self):
        self.assertEqual(remaining({"RateLimit": '"pow-shield";r=7;t=3', "X-RateLimit-Remaining": "9"}), 7)
        self.assertEqual(remaining({"RateLimit": '"a";r=7;t=3, "b";r=2;t=1'}), 2)
        self.assertEqual(remaining({"x-ratelimit-remaining": " 3 "}), 3)
        self.assertIsNone(remaining({"X-RateLimit-Remaining": "²"}))

    def test_the_gate_starts_at_n_minus_1_in_flight_before_any_answer(self):
        gate = Gate()
        passes = [gate.enter(URL) for _ in range(4)]
        self.assertIsNone(gate._admit(origin(URL)), "a 5th waits")
        self.assertIsNotNone(gate._admit(origin("http://other.example/")), "another origin has its own")
        for p in passes:
            p.release()
            p.release()  # once only
        self.assertEqual(gate.in_flight(URL), 0)

    def test_remaining_opens_the_gate_and_a_429_or_remaining_0_closes_it(self):
        gate = Gate()
        with gate.enter(URL) as p:
            p.saw(200, {"X-RateLimit-Remaining": "30"})
            self.assertEqual(gate.allowed(URL), 30)
            p.saw(200, {"X-RateLimit-Remaining": "2"})
            self.assertEqual(gate.allowed(URL), 4, "never below n - 1")
            p.saw(200, {"X-RateLimit-Remaining": "10"})
            p.saw(429, {})
            self.assertEqual(gate.allowed(URL), 4)
            p.saw(200, {"X-RateLimit-Remaining": "10"})
            p.saw(200, {"X-RateLimit-Remaining": "0"})
            self.assertEqual(gate.allowed(URL), 4)

    def test_an_older_answer_only_closes_the_gate(self):
        gate = Gate()
        old, new = gate.enter(URL), gate.enter(URL)
        new.saw(200, {"X-RateLimit-Remaining": "20"})
        old.saw(200, {"X-RateLimit-Remaining": "50"})
        self.assertEqual(gate.allowed(URL), 20, "the older answer's 50 is stale")
        old.saw(200, {"X-RateLimit-Remaining": "12"})
        self.assertEqual(gate.allowed(URL), 12)

    def test_in_flight_must_be_at_least_1(self):
        for bad in (0, -1, 1.5, True):
            with self.assertRaises(ValueError):
                pow_shield.Policy(in_flight=bad)


class Concurrency:
    """The answers of a server that notes how many requests it holds at
    once (each for 30 ms)."""

    def __init__(self, server, left="0"):
        self.server = server
        self.left = left
        self.now = 0
        self.most = 0
        self.lock = threading.Lock()

    def answer(self):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.03)
        with self.lock:
            self.now -= 1
        return 200, {"X-RateLimit-Remaining": self.left}, b"ok"

    def script(self, count):
        self.server.script = [self.answer] * count


def in_threads(count, call):
    results = [None] * count

    def run(i):
        results[i] = call()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


class ClientsTest(unittest.TestCase):
    def setUp(self):
        self.server = FakeServer().__enter__()
        self.addCleanup(self.server.__exit__)

    @unittest.skipIf(requests is None, "requests is not installed")
    def test_a_session_used_from_20_threads_has_at_most_4_in_flight(self):
        seen = Concurrency(self.server)
        seen.script(20)
        with pow_shield.Session() as s:
            codes = in_threads(20, lambda: s.get(self.server.url(), timeout=10).status_code)
        self.assertEqual(codes, [200] * 20)
        self.assertEqual(seen.most, 4)

    @unittest.skipIf(requests is None, "requests is not installed")
    def test_requests_auth_from_20_threads_has_at_most_4_in_flight(self):
        seen = Concurrency(self.server)
        seen.script(20)
        auth = pow_shield.RequestsAuth()
        codes = in_threads(20, lambda: requests.get(self.server.url(), auth=auth, timeout=10).status_code)
        self.assertEqual(codes, [200] * 20)
        self.assertEqual(seen.most, 4)

    @unittest.skipIf(requests is None, "requests is not installed")
    def test_remaining_lets_more_in_flight(self):
        seen = Concurrency(self.server, left="50")
        seen.script(41)
        with pow_shield.Session() as s:
            s.get(self.server.url(), timeout=10)
            in_threads(40, lambda: s.get(self.server.url(), timeout=10))
        self.assertGreater(seen.most, 4)

    @unittest.skipIf(httpx is None, "httpx is not installed")
    def test_an_asyncio_gather_of_20_through_httpx_auth_has_at_most_4_in_flight(self):
        seen = Concurrency(self.server)
        seen.script(20)

        async def go():
            async with httpx.AsyncClient(auth=pow_shield.HttpxAuth(), timeout=10) as c:
                rs = await asyncio.gather(*(c.get(self.server.url()) for _ in range(20)))
                return [r.status_code for r in rs]

        self.assertEqual(asyncio.run(go()), [200] * 20)
        self.assertEqual(seen.most, 4)

    @unittest.skipIf(httpx is None, "httpx is not installed")
    def test_a_sync_httpx_client_from_20_threads_has_at_most_4_in_flight(self):
        seen = Concurrency(self.server)
        seen.script(20)
        with httpx.Client(auth=pow_shield.HttpxAuth(), timeout=10) as c:
            codes = in_threads(20, lambda: c.get(self.server.url()).status_code)
        self.assertEqual(codes, [200] * 20)
        self.assertEqual(seen.most, 4)

    @unittest.skipIf(httpx is None, "httpx is not installed")
    def test_a_cancelled_wait_for_the_gate_holds_no_place(self):
        auth = pow_shield.HttpxAuth()
        gate = auth.policy.gate
        held = [gate.enter(self.server.url()) for _ in range(4)]

        async def go():
            waiting = asyncio.ensure_future(gate.aenter(self.server.url()))
            await asyncio.sleep(0.05)
            waiting.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await waiting

        asyncio.run(go())
        for p in held:
            p.release()
        self.assertEqual(gate.in_flight(self.server.url()), 0)


if __name__ == "__main__":
    unittest.main()
