"""Reading the shield's answers: challenges (docs/protocol.md section 3), the
breaker's block (section 7.4), Retry-After."""

import email.utils
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pow_shield  # noqa: E402
from fakeserver import b64url, make_token, token_of  # noqa: E402

SALT = "6c17a261001047c8b3e83591c3269c2e"
TOKEN = make_token(SALT, 4)


def body(**fields):
    doc = {"error": "PoW challenge required", "challenge": TOKEN, "difficulty": 4, "salt": SALT,
           "algorithm": "sha256", "expires_in": 60, "instructions": "..."}
    doc.update(fields)
    return json.dumps(doc).encode()


class BitsChallengeTest(unittest.TestCase):
    def test_an_x_pow_bits_that_is_not_ascii_digits_raises_bad_challenge(self):
        token = make_token(SALT, 5, bits=18)
        for bits in ("²", "١٨", "18x", "-1"):
            with self.assertRaises(pow_shield.BadChallenge, msg=bits):
                pow_shield.Challenge.from_response(429, {"X-PoW-Challenge": token, "X-PoW-Bits": bits})

    def test_a_token_with_bits_is_solved_for_its_bits(self):
        token = make_token(SALT, 5, bits=18)
        c = pow_shield.Challenge.from_response(429, {"X-PoW-Challenge": token, "X-PoW-Bits": "18"})
        self.assertEqual((c.difficulty, c.bits), (5, 18))

    def test_a_token_without_bits_asks_four_bits_per_hex_digit(self):
        c = pow_shield.Challenge.from_response(429, {"X-PoW-Challenge": TOKEN})
        self.assertEqual((c.difficulty, c.bits), (4, 16))

    def test_an_x_pow_bits_header_above_the_token_wins(self):
        token = make_token(SALT, 5, bits=18)
        c = pow_shield.Challenge.from_response(422, {"X-PoW-Challenge": token, "X-PoW-Bits": "19"})
        self.assertEqual(c.bits, 19)

    def test_bits_that_are_not_a_whole_number_are_a_bad_challenge(self):
        for bits in ("18", 1.5, -1, True):
            with self.assertRaises(pow_shield.BadChallenge):
                pow_shield.Challenge.from_token(make_token(SALT, 5, bits=bits))


class ChallengeTest(unittest.TestCase):
    def test_headers_alone_are_enough(self):
        c = pow_shield.Challenge.from_response(429, {"X-PoW-Challenge": TOKEN, "Retry-After": "2"})
        self.assertEqual((c.token, c.salt, c.difficulty, c.status, c.retry_after), (TOKEN, SALT, 4, 429, 2.0))

    def test_the_json_body_alone_is_enough(self):
        c = pow_shield.Challenge.from_response(409, {}, body())
        self.assertEqual((c.token, c.salt, c.difficulty, c.expires_in), (TOKEN, SALT, 4, 60))

    def test_a_problem_details_body_alone_is_enough(self):
        problem = body(type="tag:pow-shield,2026:challenge-spent", title="Challenge already spent",
                       status=409, detail="solve the fresh challenge", error="Challenge already spent")
        c = pow_shield.Challenge.from_response(409, {"Content-Type": "application/problem+json"}, problem)
        self.assertEqual((c.token, c.salt, c.difficulty, c.status), (TOKEN, SALT, 4, 409))

    def test_header_names_are_case_insensitive(self):
        c = pow_shield.Challenge.from_response(422, {"x-pow-challenge": TOKEN})
        self.assertEqual(c.difficulty, 4)

    def test_only_challenge_statuses_carry_one(self):
        for status in (200, 400, 403, 503):
            self.assertIsNone(pow_shield.Challenge.from_response(status, {"X-PoW-Challenge": TOKEN}))
        for status in (409, 410, 422, 429):
            self.assertIsNotNone(pow_shield.Challenge.from_response(status, {"X-PoW-Challenge": TOKEN}))

    def test_a_429_without_a_token_has_no_challenge(self):
        self.assertIsNone(pow_shield.Challenge.from_response(429, {}, b"slow down"))

    def test_another_algorithm_is_unsolvable(self):
        with self.assertRaises(pow_shield.Unsolvable):
            pow_shield.Challenge.from_response(429, {}, body(algorithm="scrypt"))

    def test_an_unreadable_token_is_unsolvable(self):
        for token in ("garbage", "a.b", "!!!.x", make_token(SALT, 4).replace(".", "")):
            with self.subTest(token=token), self.assertRaises(pow_shield.Unsolvable):
                pow_shield.Challenge.from_response(429, {"X-PoW-Challenge": token})

    def test_a_body_over_64_kb_is_not_parsed(self):
        padded = body(instructions="x" * 70000)
        self.assertIsNone(pow_shield.Challenge.from_response(429, {}, padded))
        self.assertIsNotNone(pow_shield.Challenge.from_response(429, {}, body()))

    def test_a_token_with_exp_and_other_new_fields_is_read(self):
        # tokens gain a signed exp (epoch ms) and bits; unknown fields are ignored
        for extra in ({"exp": 1796034552000}, {"exp": 1796034552000, "bits": 14, "later": {"a": [1]}}):
            with self.subTest(extra=extra):
                token = make_token(SALT, 4, **extra)
                c = pow_shield.Challenge.from_response(429, {"X-PoW-Challenge": token})
                self.assertEqual((c.token, c.salt, c.difficulty), (token, SALT, 4))
                c = pow_shield.Challenge.from_response(429, {}, body(challenge=token))
                self.assertEqual((c.token, c.salt, c.difficulty), (token, SALT, 4))

    def test_a_token_nested_60000_deep_is_a_bad_challenge_not_a_recursion_error(self):
        for payload in (b"[" * 60000, b"[" * 60000 + b"]" * 60000, b'{"salt":' + b"[" * 60000):
            token = token_of(payload)
            with self.assertRaises(pow_shield.BadChallenge):
                pow_shield.Challenge.from_token(token)
            with self.assertRaises(pow_shield.BadChallenge):
                pow_shield.Challenge.from_response(429, {"X-PoW-Challenge": token})

    def test_a_429_body_nested_60000_deep_is_a_bad_challenge_not_a_recursion_error(self):
        for deep in (b"[" * 60000, b'{"challenge":' + b"[" * 30000 + b"]" * 30000 + b"}"):
            with self.subTest(size=len(deep)), self.assertRaises(pow_shield.BadChallenge) as cm:
                pow_shield.Challenge.from_response(429, {}, deep, response="the response")
            self.assertEqual(cm.exception.response, "the response")
            self.assertIsInstance(cm.exception, pow_shield.PowShieldError)

    def test_a_body_token_with_cr_or_lf_is_refused(self):
        for suffix in ("\r\nX-Injected: 1", "\nX-Injected: 1", "\r", "\n", " ", "\r\n"):
            with self.subTest(suffix=suffix), self.assertRaises(pow_shield.BadChallenge):
                pow_shield.Challenge.from_response(429, {}, body(challenge=TOKEN + suffix))
        for token in (TOKEN[:10] + "\r\n" + TOKEN[10:], TOKEN + "\r\nX: 1"):
            with self.subTest(token=token), self.assertRaises(pow_shield.BadChallenge):
                pow_shield.Challenge.from_token(token)

    def test_a_header_token_is_trimmed_of_surrounding_spaces(self):
        c = pow_shield.Challenge.from_response(429, {"X-PoW-Challenge": f"  {TOKEN} "})
        self.assertEqual(c.token, TOKEN)

    def test_an_unreadable_token_is_a_bad_challenge(self):
        for token in ("garbage", "a.b", b64url(b'{"salt": 1, "difficulty": 2}') + ".x", b64url(b"[]") + ".x"):
            with self.subTest(token=token), self.assertRaises(pow_shield.BadChallenge):
                pow_shield.Challenge.from_token(token)

    def test_solution_headers(self):
        c = pow_shield.Challenge.from_token(TOKEN)
        self.assertEqual(c.headers("123"), {"X-PoW-Challenge": TOKEN, "X-PoW-Nonce": "123"})


class BlockedTest(unittest.TestCase):
    def test_blocked_and_banned_are_typed(self):
        with self.assertRaises(pow_shield.Blocked) as cm:
            pow_shield.check_blocked(403, {"X-PoW-Shield": "blocked"})
        self.assertNotIsInstance(cm.exception, pow_shield.Banned)
        with self.assertRaises(pow_shield.Banned):
            pow_shield.check_blocked(403, {"x-pow-shield": "Banned"})

    def test_other_responses_are_not_blocks(self):
        pow_shield.check_blocked(403, {"Content-Type": "application/json"})
        pow_shield.check_blocked(200, {})


class RetryAfterTest(unittest.TestCase):
    def test_delay_seconds(self):
        self.assertEqual(pow_shield.retry_after({"Retry-After": "7"}), 7.0)

    def test_http_date(self):
        later = email.utils.formatdate(time.time() + 120, usegmt=True)
        self.assertTrue(100 < pow_shield.retry_after({"Retry-After": later}) <= 121)

    def test_only_ascii_digits_are_delay_seconds(self):
        # '²' made float() raise on any response; '١٢' was read as 12 s
        for value in ("²", "١٢", "٣", "1²"):
            with self.subTest(value=value):
                self.assertIsNone(pow_shield.retry_after({"Retry-After": value}))

    def test_a_non_text_value_is_none(self):
        self.assertIsNone(pow_shield.retry_after({"Retry-After": b"7"}))

    def test_absent_or_garbage_is_none(self):
        self.assertIsNone(pow_shield.retry_after({}))
        self.assertIsNone(pow_shield.retry_after({"Retry-After": "soon"}))


if __name__ == "__main__":
    unittest.main()
