"""Paying ahead and pacing (docs/protocol.md sections 6 and 8), in every
entry point, against ``fakeserver.Shield``: the module's decision simulated,
each request counted."""

import asyncio
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pow_shield  # noqa: E402
from fakeserver import FakeServer, Shield, make_token  # noqa: E402
from pow_shield._gate import reset_in  # noqa: E402

try:
    import requests
except ImportError:  # pragma: no cover - optional dependency
    requests = None
try:
    import httpx
except ImportError:  # pragma: no cover - optional dependency
    httpx = None


class PayAhead:
    """The behaviours, written once; subclasses say how to send."""

    def setUp(self):
        self.server = FakeServer().__enter__()
        self.addCleanup(self.server.__exit__)
        # a store of its own: a port a finished test used may come back
        self.store = pow_shield.Ahead()

    def fetch_all(self, n, **options):
        """Sends ``n`` GETs in turn through one client; their statuses."""
        raise NotImplementedError

    def shield(self, **settings):
        shield = Shield(**settings)
        self.server.responder = shield
        return shield

    def sent(self, i, name="X-PoW-Challenge"):
        return self.server.requests[i].header(name)

    def test_1_plus_30_requests_are_31_round_trips_and_none_is_429(self):
        shield = self.shield(limit=1, difficulty=2)
        self.assertEqual(self.fetch_all(31), [200] * 31)
        self.assertEqual(len(self.server.requests), 31)
        self.assertNotIn(429, shield.statuses)
        self.assertEqual(shield.results.count("solved"), 30)

    def test_each_request_sends_the_challenge_the_last_answer_sent_ahead(self):
        shield = self.shield(limit=1)
        self.fetch_all(4)
        self.assertIsNone(self.sent(0))
        self.assertEqual([self.sent(i) for i in (1, 2, 3)], shield.next_tokens[:3])
        self.assertTrue(all(self.sent(i, "X-PoW-Nonce") for i in (1, 2, 3)))

    def test_a_solution_ahead_refused_with_409_is_paid_from_its_fresh_challenge(self):
        shield = self.shield(limit=1, refuse=(409,))
        self.assertEqual(self.fetch_all(2), [200, 200])
        self.assertEqual(shield.statuses, [200, 409, 200])

    def test_a_solution_ahead_refused_with_403_falls_back_to_the_429_path(self):
        shield = self.shield(limit=1, refuse=(403,))
        self.assertEqual(self.fetch_all(2), [200, 200])
        self.assertEqual(shield.statuses, [200, 403, 429, 200])
        self.assertIsNone(self.sent(2))

    def test_a_solution_ahead_past_its_exp_is_dropped_unsent(self):
        shield = self.shield(limit=1, ahead_lifetime_ms=0)
        self.assertEqual(self.fetch_all(2), [200, 200])
        self.assertEqual(shield.statuses, [200, 429, 200])
        self.assertIsNone(self.sent(1))

    def test_pay_ahead_off_takes_the_429_path(self):
        shield = self.shield(limit=1)
        self.assertEqual(self.fetch_all(3, pay_ahead=False), [200] * 3)
        self.assertEqual(shield.statuses, [200, 429, 200, 429, 200])

    def test_pacing_waits_for_the_reset_instead_of_paying(self):
        # 2 per second: the third request waits for a free one (t=1)
        shield = self.shield(limit=2, window=1.0)
        self.assertEqual(self.fetch_all(4, pace=True), [200] * 4)
        self.assertEqual(shield.results, ["pass"] * 4)
        self.assertEqual(self.store.count(self.server.url()), 0, "nothing solved ahead while pacing")


@unittest.skipIf(requests is None, "requests is not installed")
class SessionPayAheadTest(PayAhead, unittest.TestCase):
    def fetch_all(self, n, **options):
        with pow_shield.Session(ahead=self.store, **options) as s:
            return [s.get(self.server.url(), timeout=10).status_code for _ in range(n)]

    def test_threads_in_flight_use_each_solution_once(self):
        # 4 threads over one Session: one green, at most 3 unpaid 429s
        # before every request has a solution ahead; none sent twice
        shield = self.shield(limit=1, difficulty=2)
        statuses = []
        with pow_shield.Session(ahead=self.store) as s:

            def worker():
                for _ in range(8):
                    statuses.append(s.get(self.server.url(), timeout=10).status_code)

            threads = [threading.Thread(target=worker) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        self.assertEqual(statuses, [200] * 32)
        self.assertLessEqual(shield.statuses.count(429), 3)
        self.assertEqual(len(self.server.requests), 32 + shield.statuses.count(429))
        tokens = [r.header("X-PoW-Challenge") for r in self.server.requests if r.header("X-PoW-Challenge")]
        self.assertEqual(len(tokens), len(set(tokens)))


    def test_after_a_reset_one_request_goes_and_the_others_wait_for_its_answer(self):
        # 1 per second, 3 threads held for the reset: going all at once,
        # two of them would be over the limit (429, or paid).
        shield = self.shield(limit=1, window=1.0)
        with pow_shield.Session(ahead=self.store, pace=True) as s:
            self.assertEqual(s.get(self.server.url(), timeout=10).status_code, 200)
            statuses = []

            def worker():
                statuses.append(s.get(self.server.url(), timeout=10).status_code)

            threads = [threading.Thread(target=worker) for _ in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        self.assertEqual(statuses, [200] * 3)
        self.assertEqual(shield.results, ["pass"] * 4)
        self.assertEqual(len(self.server.requests), 4)


@unittest.skipIf(requests is None, "requests is not installed")
class RequestsAuthPayAheadTest(PayAhead, unittest.TestCase):
    """A new ``RequestsAuth`` for each ``requests.get``: the store outlives it."""

    def fetch_all(self, n, **options):
        return [
            requests.get(self.server.url(), timeout=10,
                         auth=pow_shield.RequestsAuth(ahead=self.store, **options)).status_code
            for _ in range(n)
        ]

    def test_every_entry_point_shares_one_store_by_default(self):
        stores = {id(pow_shield.RequestsAuth().policy.ahead), id(pow_shield.Session().pow_policy.ahead),
                  id(pow_shield.HTTPAdapter().pow_policy.ahead)}
        if httpx is not None:
            stores.add(id(pow_shield.HttpxAuth().policy.ahead))
        self.assertEqual(len(stores), 1)


@unittest.skipIf(requests is None, "requests is not installed")
class HTTPAdapterPayAheadTest(PayAhead, unittest.TestCase):
    def fetch_all(self, n, **options):
        with requests.Session() as s:
            s.mount("http://", pow_shield.HTTPAdapter(ahead=self.store, **options))
            return [s.get(self.server.url(), timeout=10).status_code for _ in range(n)]


@unittest.skipIf(httpx is None, "httpx is not installed")
class HttpxSyncPayAheadTest(PayAhead, unittest.TestCase):
    def fetch_all(self, n, **options):
        with httpx.Client(auth=pow_shield.HttpxAuth(ahead=self.store, **options), timeout=10) as c:
            return [c.get(self.server.url()).status_code for _ in range(n)]


@unittest.skipIf(httpx is None, "httpx is not installed")
class HttpxAsyncPayAheadTest(PayAhead, unittest.TestCase):
    def fetch_all(self, n, **options):
        async def go():
            async with httpx.AsyncClient(auth=pow_shield.HttpxAuth(ahead=self.store, **options), timeout=10) as c:
                return [(await c.get(self.server.url())).status_code for _ in range(n)]

        return asyncio.run(go())

    def test_a_gather_uses_each_solution_once(self):
        # at most 4 in flight: 3 unpaid 429s beside the free one, then each
        # request finds a solution ahead
        shield = self.shield(limit=1, difficulty=2)

        async def go():
            async with httpx.AsyncClient(auth=pow_shield.HttpxAuth(ahead=self.store), timeout=10) as c:
                answers = await asyncio.gather(*(c.get(self.server.url()) for _ in range(12)))
                return [r.status_code for r in answers]

        self.assertEqual(asyncio.run(go()), [200] * 12)
        self.assertLessEqual(shield.statuses.count(429), 3)
        self.assertEqual(len(self.server.requests), 12 + shield.statuses.count(429))

    def test_awaiting_a_solution_ahead_leaves_the_event_loop_free(self):
        # The solve ahead finishes only once another task of the loop has
        # run: a request that blocked the loop while waiting for it would
        # see it fail (after 30 s) and fall back to a 429.
        shield = self.shield(limit=1)
        auth = pow_shield.HttpxAuth(ahead=self.store)
        released = threading.Event()
        real = auth.policy._solve_ahead

        def held(challenge, stop):
            if not released.wait(30):
                raise pow_shield.Cancelled("the event loop never ran the releasing task")
            return real(challenge, stop)

        auth.policy._solve_ahead = held

        async def release():
            released.set()

        async def go():
            async with httpx.AsyncClient(auth=auth, timeout=10) as c:
                first = (await c.get(self.server.url())).status_code
                releasing = asyncio.ensure_future(release())
                second = (await c.get(self.server.url())).status_code
                await releasing
                return [first, second]

        self.assertEqual(asyncio.run(go()), [200, 200])
        self.assertEqual(shield.statuses, [200, 200])
        self.assertEqual(shield.results, ["pass", "solved"])

    def test_pacing_sleeps_on_the_event_loop(self):
        # While one origin's request waits for its reset, another task's
        # requests to another origin go through: the arrival order shows it.
        other = FakeServer().__enter__()
        self.addCleanup(other.__exit__)
        order = []
        for name, server, shield in (("A", self.server, Shield(limit=2, window=2.0)),
                                     ("B", other, Shield(limit=100))):
            server.responder = lambda request, name=name, shield=shield: (order.append(name), shield(request))[1]

        async def go():
            full = asyncio.Event()
            async with httpx.AsyncClient(auth=pow_shield.HttpxAuth(ahead=self.store, pace=True), timeout=10) as c:

                async def paced():
                    for _ in range(2):
                        await c.get(self.server.url())
                    full.set()
                    return (await c.get(self.server.url())).status_code

                async def elsewhere():
                    await full.wait()
                    return [(await c.get(other.url())).status_code for _ in range(3)]

                return await asyncio.gather(paced(), elsewhere())

        self.assertEqual(asyncio.run(go()), [200, [200, 200, 200]])
        self.assertEqual(order, ["A", "A", "B", "B", "B", "A"])


def next_headers(lifetime_ms=30000, bits=4):
    token = make_token("ab" * 16, -(-bits // 4), ts=1_000_000, exp=1_000_000 + lifetime_ms, bits=bits)
    return {"X-PoW-Next-Challenge": token, "X-PoW-Next-Bits": str(bits), "X-PoW-Next-Difficulty": str(-(-bits // 4))}


class AheadStoreTest(unittest.TestCase):
    URL = "http://127.0.0.1:9/api"

    def setUp(self):
        self.store = pow_shield.Ahead(per_origin=2)
        self.policy = pow_shield.Policy(ahead=self.store)

    def test_a_next_challenge_is_solved_and_taken_once(self):
        self.policy.saw(self.URL, 200, next_headers())
        headers = self.policy.take_ahead(self.URL, {})
        self.assertEqual(set(headers), {"X-PoW-Challenge", "X-PoW-Nonce"})
        self.assertTrue(pow_shield.is_solution("ab" * 16, headers["X-PoW-Nonce"], 1, bits=4))
        self.assertIsNone(self.policy.take_ahead(self.URL, {}))

    def test_solutions_are_kept_per_origin(self):
        self.policy.saw(self.URL, 200, next_headers())
        self.assertIsNone(self.policy.take_ahead("http://127.0.0.1:10/api", {}))
        self.assertIsNotNone(self.policy.take_ahead("HTTP://127.0.0.1:9/other", {}))

    def test_a_next_challenge_already_past_its_exp_is_not_solved(self):
        self.policy.saw(self.URL, 200, next_headers(lifetime_ms=0))
        self.assertEqual(self.store.count(self.URL), 0)

    def test_a_next_challenge_within_2_s_of_its_exp_is_not_solved(self):
        self.policy.saw(self.URL, 200, next_headers(lifetime_ms=1500))
        self.assertEqual(self.store.count(self.URL), 0)

    def test_a_solution_is_dropped_2_s_before_its_exp(self):
        self.policy.saw(self.URL, 200, next_headers(lifetime_ms=10_000))
        solution = self.store._solutions[pow_shield._gate.origin(self.URL)][0]
        arrived = solution.deadline + 2.0 - 10.0
        self.assertFalse(solution.expired(arrived + 7.9))
        self.assertTrue(solution.expired(arrived + 8.01))

    def test_a_solution_that_expires_while_kept_is_dropped_unsent(self):
        self.policy.saw(self.URL, 200, next_headers())
        self.store._solutions[pow_shield._gate.origin(self.URL)][0].deadline = 0.0
        self.assertIsNone(self.policy.take_ahead(self.URL, {}))
        self.assertEqual(self.store.count(self.URL), 0)

    def test_the_pool_keeps_the_newest_per_origin(self):
        for _ in range(3):
            self.policy.saw(self.URL, 200, next_headers())
        self.assertEqual(self.store.count(self.URL), 2)

    def test_a_request_with_a_solution_of_its_own_keeps_it(self):
        self.policy.saw(self.URL, 200, next_headers())
        self.assertIsNone(self.policy.take_ahead(self.URL, {"x-pow-challenge": "a.b"}))
        self.assertEqual(self.store.count(self.URL), 1)

    def test_a_next_challenge_above_max_difficulty_is_not_solved(self):
        policy = pow_shield.Policy(ahead=self.store, max_difficulty=2)
        policy.saw(self.URL, 200, next_headers(bits=12))
        self.assertEqual(self.store.count(self.URL), 0)

    def test_pay_ahead_off_neither_solves_nor_sends(self):
        policy = pow_shield.Policy(ahead=self.store, pay_ahead=False)
        policy.saw(self.URL, 200, next_headers())
        self.assertEqual(self.store.count(self.URL), 0)

    def test_an_unreadable_next_challenge_is_ignored(self):
        self.policy.saw(self.URL, 200, {"X-PoW-Next-Challenge": "not a token\r\n"})
        self.assertEqual(self.store.count(self.URL), 0)

    def test_no_request_left_sets_the_pacing_wait_and_requests_left_clear_it(self):
        pacing = pow_shield.Policy(ahead=self.store, pace=True)
        pacing.saw(self.URL, 200, {"RateLimit": '"pow-shield";r=0;t=30'})
        self.assertGreater(pacing.pace_delay(self.URL), 29)
        self.assertEqual(self.policy.pace_delay(self.URL), 0, "pace is off by default")
        pacing.saw(self.URL, 200, {"RateLimit": '"pow-shield";r=3;t=30'})
        self.assertEqual(pacing.pace_delay(self.URL), 0)

    def test_a_reset_beyond_max_wait_is_paid_not_waited(self):
        pacing = pow_shield.Policy(ahead=self.store, pace=True, max_wait=10)
        pacing.saw(self.URL, 200, {"RateLimit": '"pow-shield";r=0;t=3600', **next_headers()})
        self.assertEqual(pacing.pace_delay(self.URL), 0)
        self.assertEqual(self.store.count(self.URL), 1, "solved ahead instead")

    def test_prefer_wait_does_not_solve_ahead_for_a_reset_it_would_wait_for(self):
        waiting = pow_shield.Policy(ahead=self.store, prefer_wait=True)
        waiting.saw(self.URL, 200, {"RateLimit": '"pow-shield";r=0;t=30', **next_headers()})
        self.assertEqual(self.store.count(self.URL), 0)
        waiting.saw(self.URL, 200, {"RateLimit": '"pow-shield";r=0;t=3600', **next_headers()})
        self.assertEqual(self.store.count(self.URL), 1, "beyond max_wait it pays, ahead")


class PacingTurnTest(unittest.TestCase):
    URL = "http://127.0.0.1:9/api"

    def test_after_the_reset_one_goes_and_the_next_waits_until_it_is_answered_or_over(self):
        store = pow_shield.Ahead()
        store.note_limits(self.URL, {"RateLimit": '"pow-shield";r=0;t=0'})
        first = store.pace(self.URL, max_wait=10)
        self.assertIsNotNone(first._turn)
        # held back: with a wait of 0 it goes unturned at once
        self.assertIsNone(store.pace(self.URL, max_wait=0)._turn)
        first.release()
        self.assertIsNone(store.pace(self.URL, max_wait=10)._turn, "nobody is held back after it")
        store.note_limits(self.URL, {"RateLimit": '"pow-shield";r=0;t=0'})
        with store.pace(self.URL, max_wait=10):
            store.note_limits(self.URL, {"RateLimit": '"pow-shield";r=2;t=9'})
            self.assertEqual(store.pace_delay(self.URL), 0, "its answer: requests left, nobody waits")


class ResetTest(unittest.TestCase):
    def test_the_ietf_field_gives_the_longest_t_of_the_limits_run_out(self):
        self.assertEqual(reset_in({"RateLimit": '"a";r=0;t=5, "b";r=0;t=9, "c";r=4;t=60'}), 9.0)
        self.assertIsNone(reset_in({"RateLimit": '"a";r=2;t=5'}))

    def test_x_ratelimit_reset_is_epoch_seconds(self):
        import time

        wait = reset_in({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(time.time()) + 100)})
        self.assertTrue(98 <= wait <= 100)
        self.assertIsNone(reset_in({"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "5"}))


class RefusalTest(unittest.TestCase):
    def test_the_shields_403_to_a_solution_ahead_is_resent_without_it(self):
        body = b'{"type":"tag:pow-shield,2026:invalid-signature","error":"Invalid challenge signature"}'
        step = pow_shield.Policy().step(403, {}, body, 0, ahead_sent=True)
        self.assertEqual(type(step).__name__, "Resend")

    def test_the_applications_own_403_is_handed_back(self):
        for body in (b'{"error":"not yours"}', b"<html>forbidden</html>", b'{"error":["x"]}', None):
            self.assertIsNone(pow_shield.Policy().step(403, {}, body, 0, ahead_sent=True))

    def test_a_403_to_a_request_without_a_solution_ahead_is_handed_back(self):
        body = b'{"error":"Invalid challenge signature"}'
        self.assertIsNone(pow_shield.Policy().step(403, {}, body, 0))


if __name__ == "__main__":
    unittest.main()
