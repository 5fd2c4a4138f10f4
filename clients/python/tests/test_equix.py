"""Equi-X challenges (``pow_shield_work equix``; docs/protocol.md section 5):
read from the token's ``alg`` and the body's ``algorithm``, sent back with
``X-PoW-Solution``, and refused at once, naming the algorithm, where the
native module is missing."""

import base64
import json
import os
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pow_shield  # noqa: E402
from pow_shield import _equix  # noqa: E402


def token(**payload):
    fields = {"ip": "127.0.0.1", "ts": 1, "difficulty": 1, "salt": "ab" * 16, "bits": 2}
    fields.update(payload)
    text = base64.urlsafe_b64encode(json.dumps(fields).encode()).rstrip(b"=").decode()
    return text + "." + "A" * 43


class ReadingTest(unittest.TestCase):
    def test_an_equix_token_says_so_and_a_sha256_one_is_unchanged(self):
        self.assertEqual(pow_shield.Challenge.from_token(token(alg="equix")).algorithm, "equix")
        self.assertEqual(pow_shield.Challenge.from_token(token()).algorithm, "sha256")

    def test_an_unknown_algorithm_is_unsolvable_before_any_work(self):
        with self.assertRaisesRegex(pow_shield.Unsolvable, "argon2"):
            pow_shield.Challenge.from_token(token(alg="argon2"))
        body = json.dumps({"challenge": token(), "algorithm": "argon2"}).encode()
        with self.assertRaisesRegex(pow_shield.Unsolvable, "argon2"):
            pow_shield.Challenge.from_response(429, {}, body)

    def test_an_equix_body_is_read(self):
        body = json.dumps({"challenge": token(alg="equix"), "algorithm": "equix"}).encode()
        c = pow_shield.Challenge.from_response(429, {}, body)
        self.assertEqual((c.algorithm, c.bits), ("equix", 2))


class HeadersTest(unittest.TestCase):
    def test_an_equix_proof_goes_as_nonce_and_solution(self):
        c = pow_shield.Challenge.from_token(token(alg="equix"))
        proof = _equix.proof_text("42", "A" * 22)
        self.assertEqual(
            c.headers(proof),
            {"X-PoW-Challenge": c.token, "X-PoW-Nonce": "42", "X-PoW-Solution": "A" * 22},
        )
        self.assertEqual(c.headers("42"), {"X-PoW-Challenge": c.token, "X-PoW-Nonce": "42"})


class WithoutNativeTest(unittest.TestCase):
    def test_without_the_native_module_an_equix_challenge_is_refused_naming_it(self):
        with mock.patch.object(_equix, "_native", None):
            self.assertFalse(pow_shield.equix_available())
            with self.assertRaisesRegex(pow_shield.Unsolvable, "equix proof of work"):
                pow_shield.solve_equix("ab" * 16, 2)
            c = pow_shield.Challenge.from_token(token(alg="equix"))
            with self.assertRaisesRegex(pow_shield.Unsolvable, "equix"):
                pow_shield.Policy().solve(c)


if __name__ == "__main__":
    unittest.main()
