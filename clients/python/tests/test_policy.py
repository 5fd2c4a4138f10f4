"""Policy.step: the move after each answer, before any sleep or solve."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pow_shield  # noqa: E402
from pow_shield._policy import Pay, Wait  # noqa: E402
from fakeserver import make_token  # noqa: E402

SALT = "6c17a261001047c8b3e83591c3269c2e"


def challenge_headers(difficulty=3, retry_after=None):
    headers = {"X-PoW-Challenge": make_token(SALT, difficulty)}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return headers


class WaitTest(unittest.TestCase):
    def test_prefer_wait_sleeps_up_to_max_wait(self):
        step = pow_shield.Policy(prefer_wait=True).step(429, challenge_headers(retry_after="60"), None, 0)
        self.assertEqual(step, Wait(60.0))

    def test_prefer_wait_pays_beyond_max_wait_of_60_s_by_default(self):
        for value in ("61", "3600", "1" + "0" * 30):
            with self.subTest(retry_after=value):
                step = pow_shield.Policy(prefer_wait=True).step(429, challenge_headers(retry_after=value), None, 0)
                self.assertIsInstance(step, Pay)

    def test_max_wait_is_configurable(self):
        policy = pow_shield.Policy(prefer_wait=True, max_wait=5)
        self.assertIsInstance(policy.step(429, challenge_headers(retry_after="6"), None, 0), Pay)
        self.assertEqual(policy.step(429, challenge_headers(retry_after="5"), None, 0), Wait(5.0))

    def test_a_503_beyond_max_wait_is_handed_back(self):
        self.assertIsNone(pow_shield.Policy(prefer_wait=True).step(503, {"Retry-After": "3600"}, None, 0))

    def test_negative_or_nan_max_wait_is_refused(self):
        for bad in (-1, float("nan")):
            with self.subTest(max_wait=bad), self.assertRaises(ValueError):
                pow_shield.Policy(max_wait=bad)

    def test_a_non_ascii_retry_after_never_raises(self):
        policy = pow_shield.Policy(prefer_wait=True)
        for status in (200, 429, 503):
            with self.subTest(status=status):
                headers = challenge_headers() if status == 429 else {}
                headers["Retry-After"] = "²"
                policy.step(status, headers, None, 0)


class DifficultyTest(unittest.TestCase):
    def test_a_forged_difficulty_above_12_is_unsolvable_before_any_work(self):
        # the client cannot check the token's signature: 20 would run for years
        for difficulty in (13, 20, 64):
            with self.subTest(difficulty=difficulty), self.assertRaises(pow_shield.Unsolvable):
                pow_shield.Policy().step(429, challenge_headers(difficulty), None, 0)

    def test_difficulty_12_is_still_paid(self):
        self.assertIsInstance(pow_shield.Policy().step(429, challenge_headers(12), None, 0), Pay)


class SolveTimeTest(unittest.TestCase):
    def test_one_challenge_is_given_up_after_30_s_by_default(self):
        self.assertEqual(pow_shield.Policy().max_solve_time, 30.0)

    def test_none_is_no_limit_and_a_bad_bound_is_refused(self):
        self.assertIsNone(pow_shield.Policy(max_solve_time=None).max_solve_time)
        for bad in (-1, float("nan")):
            with self.subTest(max_solve_time=bad), self.assertRaises(ValueError):
                pow_shield.Policy(max_solve_time=bad)

    def test_the_bound_reaches_the_solver(self):
        policy = pow_shield.Policy(max_solve_time=0.05, processes=1)
        challenge = pow_shield.Challenge.from_token(make_token(SALT, 12))
        with self.assertRaises(pow_shield.SolveTimeout) as cm:
            policy.solve(challenge, "the response")
        self.assertEqual(cm.exception.response, "the response")


class BodyTest(unittest.TestCase):
    def test_the_body_is_needed_without_the_token_header_or_from_the_breaker(self):
        self.assertFalse(pow_shield.Policy.needs_body(429, challenge_headers()))
        self.assertTrue(pow_shield.Policy.needs_body(429, {}))
        self.assertFalse(pow_shield.Policy.needs_body(200, {}))
        self.assertTrue(pow_shield.Policy.needs_body(403, {"X-PoW-Shield": "blocked"}))

    def test_a_body_is_read_no_further_than_64_kb(self):
        pulled = []

        def chunks():
            for _ in range(1000):
                pulled.append(1)
                yield b"x" * 1024

        head, whole = pow_shield.Policy.read_capped(chunks())
        self.assertFalse(whole)
        self.assertEqual((len(pulled), len(head)), (65, 65 * 1024))
        self.assertEqual(pow_shield.Policy.read_capped(iter([b"ab", b"c"])), (b"abc", True))


if __name__ == "__main__":
    unittest.main()
