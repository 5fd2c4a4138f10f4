"""``pow_shield.aiohttp.PowShieldMiddleware`` against ``fakeserver``: it
pays, pays ahead, holds (one round trip per paid request, gathered or one
by one), waits when told, and raises on a block."""

import asyncio
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pow_shield  # noqa: E402
from fakeserver import FakeServer, Shield  # noqa: E402

try:
    import aiohttp
    import aiohttp.client_middlewares  # noqa: F401 - 3.12 and later

    import pow_shield.aiohttp
except ImportError:  # pragma: no cover - optional dependency
    aiohttp = None


@unittest.skipIf(aiohttp is None, "aiohttp 3.12 or later not installed")
class AiohttpMiddlewareTest(unittest.TestCase):
    def setUp(self):
        self.server = FakeServer().__enter__()
        self.addCleanup(self.server.__exit__)

    def fetch(self, n, gather=False, data=None, **options):
        """``n`` GETs (POSTs with ``data``) through one middleware: their statuses."""
        options.setdefault("ahead", pow_shield.Ahead())

        async def main():
            mw = pow_shield.aiohttp.PowShieldMiddleware(**options)
            async with aiohttp.ClientSession(middlewares=(mw,)) as session:
                async def one():
                    method = session.post if data is not None else session.get
                    kwargs = {} if data is None else {"data": data}
                    async with method(self.server.url(), **kwargs) as r:
                        await r.read()
                        return r.status

                if gather:
                    return await asyncio.gather(*(one() for _ in range(n)))
                return [await one() for _ in range(n)]

        return asyncio.run(main())

    def test_one_by_one_over_the_limit_each_paid_request_is_one_round_trip(self):
        shield = Shield(limit=5, difficulty=1)
        self.server.responder = shield
        self.assertEqual(self.fetch(35), [200] * 35)
        self.assertEqual((len(shield.results), shield.results.count("solved")), (35, 30))

    def test_a_gather_of_35_over_the_limit_gets_no_429(self):
        shield = Shield(limit=5, difficulty=1)
        self.server.responder = shield
        self.assertEqual(self.fetch(35, gather=True), [200] * 35)
        self.assertEqual(shield.results.count("challenge"), 0)
        self.assertEqual((len(shield.results), shield.results.count("solved")), (35, 30))

    def test_without_pay_ahead_a_429_is_solved_and_the_request_sent_again(self):
        shield = Shield(limit=1, difficulty=1, pay_ahead=False)
        self.server.responder = shield
        self.assertEqual(self.fetch(3, pay_ahead=False), [200] * 3)
        self.assertEqual(shield.results, ["pass", "challenge", "solved", "challenge", "solved"])

    def test_a_body_is_sent_again_with_the_solution(self):
        shield = Shield(limit=0, difficulty=1, pay_ahead=False)
        self.server.responder = shield
        self.assertEqual(self.fetch(1, data=b"payload", pay_ahead=False), [200])
        self.assertEqual([r.body for r in self.server.requests], [b"payload", b"payload"])

    def test_prefer_wait_sleeps_retry_after_instead_of_paying(self):
        self.server.script = [self.server.challenge(retry_after="0"), self.server.ok()]
        self.assertEqual(self.fetch(1, prefer_wait=True), [200])
        self.assertIsNone(self.server.requests[1].header("X-PoW-Nonce"))

    def test_a_bot_signer_when_asked_sends_the_request_again_signed(self):
        try:
            from test_bots import INVITATION, RFC_KEY
            import cryptography  # noqa: F401
        except ImportError:  # pragma: no cover
            self.skipTest("cryptography not installed")
        plain = self.server.challenge()

        def invited():
            status, headers, body = plain()
            return status, dict(headers, **{"Accept-Signature": INVITATION}), body

        self.server.script = [invited, self.server.ok(), self.server.ok()]
        bot = pow_shield.BotSigner(RFC_KEY, when_asked=True)
        self.assertEqual(self.fetch(2, bot=bot, max_retries=0), [200, 200])
        first, second, third = self.server.requests
        self.assertIsNone(first.header("Signature-Input"))
        self.assertIsNotNone(second.header("Signature-Input"))
        self.assertIsNone(second.header("X-PoW-Nonce"))
        self.assertIsNotNone(third.header("Signature-Input"))

    def test_a_block_raises_blocked_and_is_not_retried(self):
        self.server.script = [self.server.blocked()]
        with self.assertRaises(pow_shield.Blocked) as caught:
            self.fetch(1)
        self.assertEqual(caught.exception.response.status, 403)
        self.assertEqual(len(self.server.requests), 1)

    def test_a_price_above_max_bits_raises_too_difficult_before_any_work(self):
        self.server.script = [self.server.challenge(difficulty=5)]
        with self.assertRaises(pow_shield.TooDifficult):
            self.fetch(1, max_bits=16)
        self.assertEqual(len(self.server.requests), 1)


if __name__ == "__main__":
    unittest.main()
