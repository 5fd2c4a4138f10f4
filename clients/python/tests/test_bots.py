"""Web Bot Auth signing (docs/bots.md): the draft's example signature made
byte for byte (Ed25519 is deterministic), the Rust client's layout with a
Signature-Agent, the RFC 7638 keyid, and a fresh signature per request."""

import base64
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pow_shield  # noqa: E402
from pow_shield._bots import asks_web_bot_auth, authority_of  # noqa: E402
from fakeserver import FakeServer  # noqa: E402

try:
    import cryptography  # noqa: F401

    HAVE_CRYPTOGRAPHY = True
except ImportError:  # pragma: no cover
    HAVE_CRYPTOGRAPHY = False

# RFC 9421 B.1.4's test key, which the draft's examples sign with.
RFC_KEY = {
    "kty": "OKP",
    "crv": "Ed25519",
    "d": "n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU",
    "x": "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs",
}
KEYID = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U"


@unittest.skipUnless(HAVE_CRYPTOGRAPHY, "cryptography not installed (pip install pow-shield[bots])")
class BotSignerTest(unittest.TestCase):
    def test_the_keyid_is_the_rfc_7638_thumbprint(self):
        self.assertEqual(pow_shield.BotSigner(RFC_KEY).keyid, KEYID)

    def test_the_drafts_example_is_made_byte_for_byte(self):
        # draft-meunier-web-bot-auth-architecture, v1 test data, sig1
        nonce = "mYotfW3CUjI68sbGw6oKd7kyXqPjZEtU8xFPGWFrqOAf5qC6MDe3pys3SWWCudB0MvwslHy32WXUpkR7u0lt/w=="
        h = pow_shield.BotSigner(RFC_KEY).headers(
            "https://example.com/path/to/resource", created=1735689600, expires=1735693200, nonce=nonce
        )
        self.assertEqual(
            h["Signature-Input"],
            'sig1=("@authority");created=1735689600;keyid="' + KEYID + '";alg="ed25519";'
            'expires=1735693200;nonce="' + nonce + '";tag="web-bot-auth"',
        )
        self.assertEqual(
            h["Signature"],
            "sig1=:+NA/cssf4Y2bQTMTkyvTGRCaVzp9quyUevdwwMtMOWhhOOZ2T1subBj0BtvdnrpDEuwSAbiTeElXDzHL3WWKCw==:",
        )
        self.assertNotIn("Signature-Agent", h)

    def test_a_signature_agent_is_signed_as_the_rust_client_signs_it(self):
        # pow-shield bot-key sign --signature-agent https://signature-agent.test
        #   --created 1735689600 --expires 1735689660 --nonce test-nonce
        bot = pow_shield.BotSigner(RFC_KEY, signature_agent="https://signature-agent.test")
        h = bot.headers("https://example.com/path", created=1735689600, expires=1735689660, nonce="test-nonce")
        self.assertEqual(h["Signature-Agent"], 'sig1="https://signature-agent.test"')
        self.assertEqual(
            h["Signature-Input"],
            'sig1=("@authority" "signature-agent";key="sig1");created=1735689600;keyid="' + KEYID + '";'
            'alg="ed25519";expires=1735689660;nonce="test-nonce";tag="web-bot-auth"',
        )
        self.assertEqual(
            h["Signature"],
            "sig1=:A8i9MS0+Q4R/QsFYO9I1dkLCtJwdunZgw3S7lQueUEl4epGJd/ZoDHHYqf0PSLrqtoB+1JneDUphNRkr81S5Ag==:",
        )

    def test_each_request_gets_a_fresh_nonce_and_replaces_old_headers(self):
        bot = pow_shield.BotSigner(RFC_KEY, lifetime=30)
        headers = {"signature": "stale", "Accept": "*/*"}
        bot.sign(headers, "http://api.example:8080/x")
        self.assertEqual(sorted(headers), ["Accept", "Signature", "Signature-Input"])
        again = bot.headers("http://api.example:8080/x")
        self.assertNotEqual(again["Signature-Input"], headers["Signature-Input"])
        self.assertIn("expires=", headers["Signature-Input"])

    def test_the_signature_verifies_with_the_public_key(self):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        h = pow_shield.BotSigner(RFC_KEY).headers("https://example.com/", created=1, expires=2, nonce="n")
        params = h["Signature-Input"][len("sig1=") :]
        base = f'"@authority": example.com\n"@signature-params": {params}'
        signature = base64.b64decode(h["Signature"][len("sig1=:") : -1])
        public = base64.urlsafe_b64decode(RFC_KEY["x"] + "=")
        Ed25519PublicKey.from_public_bytes(public).verify(signature, base.encode())

    def test_a_public_key_or_a_mismatched_x_cannot_sign(self):
        with self.assertRaises(ValueError):
            pow_shield.BotSigner({"kty": "OKP", "crv": "Ed25519", "x": RFC_KEY["x"]})
        with self.assertRaises(ValueError):
            pow_shield.BotSigner(dict(RFC_KEY, x="AAAA" + RFC_KEY["x"][4:]))
        with self.assertRaises(ValueError):
            pow_shield.BotSigner(RFC_KEY, lifetime=0)


INVITATION = 'sig1=("@authority");created;expires;alg="ed25519";tag="web-bot-auth"'


class AcceptSignatureTest(unittest.TestCase):
    def test_a_field_asks_for_web_bot_auth_only_with_its_tag_and_components(self):
        for value, asks in [
            (INVITATION, True),
            ('sig1=("@authority");tag="web-bot-auth"', True),
            ('a=("@authority" "signature-agent";key="sig1");created;tag="web-bot-auth"', True),
            ('sig1=();tag="web-bot-auth"', True),
            ('x=("@method");tag="app", y=("@authority");tag="web-bot-auth"', True),
            ('sig1=("@authority");tag="other"', False),
            ('sig1=("@authority")', False),
            ('sig1=("@authority" "@method");tag="web-bot-auth"', False),
            ('sig1=("@authority");alg="rsa-pss-sha512";tag="web-bot-auth"', False),
            ('sig1="@authority";tag="web-bot-auth"', False),
            ('sig1=("@authority";tag="web-bot-auth"', False),
            ('sig1=("@authority");tag="web-bot-auth",', False),
            ("", False),
            (None, False),
        ]:
            self.assertEqual(asks_web_bot_auth(value), asks, value)


@unittest.skipUnless(HAVE_CRYPTOGRAPHY, "cryptography not installed (pip install pow-shield[bots])")
class SignWhenAskedTest(unittest.TestCase):
    """A ``BotSigner(when_asked=True)`` sends a request unsigned, and again
    signed once its answer asks (``Accept-Signature``); later requests to
    that origin are signed from the start.  Without it, every request is."""

    def invited(self, server):
        plain = server.challenge()

        def answer():
            status, headers, body = plain()
            return status, dict(headers, **{"Accept-Signature": INVITATION}), body

        return answer

    def test_a_signer_when_asked_resends_once_signed_then_signs_the_origin(self):
        import requests  # noqa: F401

        with FakeServer() as server:
            server.script = [self.invited(server), server.ok(), server.ok()]
            bot = pow_shield.BotSigner(RFC_KEY, when_asked=True)
            with pow_shield.Session(bot=bot, max_retries=0) as s:
                self.assertEqual(s.get(server.url()).status_code, 200)
                self.assertEqual(s.get(server.url()).status_code, 200)
            first, second, third = server.requests
            self.assertIsNone(first.header("Signature-Input"))
            self.assertIsNotNone(second.header("Signature-Input"), "sent again, signed")
            self.assertIsNone(second.header("X-PoW-Nonce"), "signing instead of paying")
            self.assertIsNotNone(third.header("Signature-Input"), "the origin is signed from now on")

    def test_a_signer_when_asked_pays_a_429_that_does_not_ask(self):
        with FakeServer() as server:
            server.script = [server.challenge(), server.ok()]
            bot = pow_shield.BotSigner(RFC_KEY, when_asked=True)
            with pow_shield.Session(bot=bot) as s:
                self.assertEqual(s.get(server.url()).status_code, 200)
            self.assertTrue(all(r.header("Signature-Input") is None for r in server.requests))
            self.assertIsNotNone(server.requests[1].header("X-PoW-Nonce"))

    def test_a_signer_signs_every_try_and_an_invitation_changes_nothing(self):
        with FakeServer() as server:
            server.script = [self.invited(server), server.ok()]
            bot = pow_shield.BotSigner(RFC_KEY)
            with pow_shield.Session(bot=bot) as s:
                self.assertEqual(s.get(server.url()).status_code, 200)
            first, second = server.requests
            self.assertIsNotNone(first.header("Signature-Input"))
            self.assertNotEqual(first.header("Signature-Input"), second.header("Signature-Input"))
            self.assertIsNotNone(second.header("X-PoW-Nonce"), "signed already: the 429 is paid")

    def test_httpx_when_asked_resends_once_signed(self):
        try:
            import httpx
        except ImportError:  # pragma: no cover
            self.skipTest("httpx not installed")
        with FakeServer() as server:
            server.script = [self.invited(server), server.ok()]
            bot = pow_shield.BotSigner(RFC_KEY, when_asked=True)
            with httpx.Client(auth=pow_shield.HttpxAuth(bot=bot)) as client:
                self.assertEqual(client.get(server.url()).status_code, 200)
            first, second = server.requests
            self.assertIsNone(first.header("Signature-Input"))
            self.assertIsNotNone(second.header("Signature-Input"))


class AuthorityTest(unittest.TestCase):
    def test_the_host_and_a_port_other_than_the_default(self):
        self.assertEqual(authority_of("https://API.example/x"), "api.example")
        self.assertEqual(authority_of("http://h:80/"), "h")
        self.assertEqual(authority_of("http://h:8080?q"), "h:8080")
        self.assertEqual(authority_of("https://u:p@h:443"), "h")
        self.assertEqual(authority_of("http://[::1]:8080/"), "[::1]:8080")
        with self.assertRaises(ValueError):
            authority_of("ftp://h/")


if __name__ == "__main__":
    unittest.main()
