"""Holding (``Policy(hold=True)``, the Scrapy and aiohttp middlewares):
over the limit, a request without a solution waits for the answer of one
in flight, which brings the next challenge, instead of collecting a 429;
and ``max_bits``, the price cap in bits."""

import asyncio
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pow_shield  # noqa: E402
from fakeserver import make_token  # noqa: E402
from pow_shield._gate import Gate  # noqa: E402

URL = "http://api.example:8080/items"


def run(coro):
    return asyncio.run(coro)


class HoldTest(unittest.TestCase):
    def test_nothing_holds_before_any_answer_says_how_many_are_free(self):
        async def main():
            gate = Gate()
            p = await gate.aenter(URL)
            other = await gate.aenter(URL)
            other.sending()
            return await gate.ahold(p)

        self.assertFalse(run(main()))

    def test_none_free_and_an_answer_to_come_holds_until_that_answer(self):
        async def main():
            gate = Gate()
            first, second = await gate.aenter(URL), await gate.aenter(URL)
            first.sending()
            first.saw(200, {"X-RateLimit-Remaining": "0"})
            first.sending()  # a paid request, out again
            held = asyncio.ensure_future(gate.ahold(second))
            await asyncio.sleep(0)
            self.assertFalse(held.done(), "held while the answer is to come")
            first.saw(200, {"X-RateLimit-Remaining": "0"})
            return await held

        self.assertTrue(run(main()), "woken by the answer")

    def test_none_free_and_nothing_in_flight_goes_unpaid(self):
        async def main():
            gate = Gate()
            first, second = await gate.aenter(URL), await gate.aenter(URL)
            first.sending()
            first.saw(429, {})
            first.release()
            return await gate.ahold(second)

        self.assertFalse(run(main()), "no answer would ever come: it goes (the 429 path)")

    def test_requests_still_out_count_against_the_free_ones_an_answer_shows(self):
        async def main():
            gate = Gate()
            passes = [await gate.aenter(URL) for _ in range(3)]
            for p in passes:
                p.sending()
            # 2 left, says the first answer; the 2 others out may take both
            passes[0].saw(200, {"X-RateLimit-Remaining": "2"})
            passes[0].release()
            waiter = await gate.aenter(URL)
            free = gate._origins[waiter._key].free
            try:
                await asyncio.wait_for(gate.ahold(waiter), 0.05)
            except asyncio.TimeoutError:
                return free, "held"
            return free, "went"

        self.assertEqual(run(main()), (0, "held"))

    def test_an_answer_read_after_one_counted_later_does_not_overstate_the_free_ones(self):
        async def main():
            gate = Gate()
            first, second = await gate.aenter(URL), await gate.aenter(URL)
            first.sending()
            second.sending()
            # the server counted the second first (another connection): 4
            # left after it, 3 after the first; the first's answer is read first
            first.saw(200, {"X-RateLimit-Remaining": "3"})
            second.saw(200, {"X-RateLimit-Remaining": "4"})
            return gate._origins[first._key].free

        self.assertEqual(run(main()), 3)

    def test_apaid_waits_for_the_next_challenge_an_answer_brings(self):
        ahead = pow_shield.Ahead()
        policy = pow_shield.Policy(hold=True, ahead=ahead)
        token = make_token("00112233445566778899aabbccddeeff", 1, ts=0, exp=60000, bits=4)

        async def main():
            out, waiter = await policy.gate.aenter(URL), await policy.gate.aenter(URL)
            out.sending()
            out.saw(200, {"X-RateLimit-Remaining": "0"})
            out.sending()
            paid = asyncio.ensure_future(policy.apaid(URL, {}, waiter))
            await asyncio.sleep(0.01)
            self.assertFalse(paid.done())
            answer = {"X-RateLimit-Remaining": "0", "X-PoW-Next-Challenge": token, "X-PoW-Next-Bits": "4"}
            policy.saw(URL, 200, answer)
            out.saw(200, answer)
            return await paid

        challenge, nonce = run(main())
        self.assertEqual(challenge.token, token)
        self.assertTrue(pow_shield.is_solution(challenge.salt, nonce, challenge.difficulty))

    def test_without_hold_apaid_gives_none_at_once(self):
        policy = pow_shield.Policy(ahead=pow_shield.Ahead())

        async def main():
            out, waiter = await policy.gate.aenter(URL), await policy.gate.aenter(URL)
            out.sending()
            out.saw(200, {"X-RateLimit-Remaining": "0"})
            out.sending()
            return await policy.apaid(URL, {}, waiter)

        self.assertIsNone(run(main()))


class MaxBitsTest(unittest.TestCase):
    def test_a_challenge_above_max_bits_is_too_difficult_before_any_work(self):
        policy = pow_shield.Policy(max_bits=12)
        token = make_token("00112233445566778899aabbccddeeff", 4, bits=13)
        with self.assertRaises(pow_shield.TooDifficult) as caught:
            policy.step(429, {"X-PoW-Challenge": token}, None, 0, "the response")
        self.assertEqual((caught.exception.bits, caught.exception.max_bits), (13, 12))
        self.assertIn("13 bits is above max_bits 12", str(caught.exception))
        self.assertEqual(caught.exception.response, "the response")

    def test_a_next_challenge_above_max_bits_is_not_solved_ahead(self):
        ahead = pow_shield.Ahead()
        policy = pow_shield.Policy(max_bits=12, ahead=ahead)
        token = make_token("00112233445566778899aabbccddeeff", 4, ts=0, exp=60000, bits=16)
        policy.saw(URL, 200, {"X-PoW-Next-Challenge": token, "X-PoW-Next-Bits": "16"})
        self.assertEqual(ahead.count(URL), 0)
        policy.saw(URL, 200, {"X-PoW-Next-Challenge": token, "X-PoW-Next-Bits": "12"})
        self.assertEqual(ahead.count(URL), 0, "the token's own bits count too")

    def test_max_bits_must_be_a_positive_int(self):
        for bad in (0, -1, 1.5, True, "12"):
            with self.assertRaises(ValueError):
                pow_shield.Policy(max_bits=bad)


if __name__ == "__main__":
    unittest.main()
