"""Signing as a known bot (Web Bot Auth, docs/bots.md): every request, each
resend too, carries a fresh RFC 9421 signature of the bot's Ed25519 key, so
that a pow-shield server holding the bot's keys (``pow_shield_bot_keys``)
sets ``$pow_shield_bot`` for it.

    >>> bot = pow_shield.BotSigner.from_file("mybot.jwk",
    ...     signature_agent="https://mybot.example/.well-known/http-message-signatures-directory")
    >>> pow_shield.Session(bot=bot).get("https://api.example.com/items")

The key is a private JWK (``pow-shield bot-key new`` writes one).  The
Ed25519 signature is the ``cryptography`` package's (``pip install
pow-shield[bots]``); this module only lays out what is signed: the
signature base of RFC 9421 section 2.5, covering ``@authority`` (and
``signature-agent``, by its Dictionary member, when sent), with the
parameters in the draft's order (``created``, ``keyid``, ``alg``,
``expires``, ``nonce``, ``tag``), the same bytes as the Rust client's.

A signer made with ``when_asked=True`` stays anonymous until an origin asks
for a Web Bot Auth signature (a ``429`` with ``Accept-Signature``, RFC 9421
section 5.1): that request is sent again once, signed, and every later one
to the origin is signed.
"""

import base64
import hashlib
import json
import os
import re
import threading
import time
from typing import Any, Dict, Mapping, MutableMapping, Optional, Union
from urllib.parse import urlsplit

#: The label of the clients' signatures.
LABEL = "sig1"
#: How long each signature is good for, seconds (the server allows 1 h).
DEFAULT_LIFETIME = 60
MAX_LIFETIME = 3600
#: The headers a signature sets (a caller's own are replaced).
SIGNATURE_HEADERS = ("Signature-Agent", "Signature-Input", "Signature")
#: The response header that asks for a signature (RFC 9421 section 5.1).
ACCEPT_SIGNATURE = "Accept-Signature"
#: The components a signature of this module covers.
_SIGNED = frozenset({"@authority", "signature-agent"})
class _Fields:
    """Just enough of an RFC 8941 parser for ``Accept-Signature``: a
    Dictionary of Inner Lists of Strings, with parameters."""

    KEY = re.compile(r"[a-z*][a-z0-9_.*-]*")
    TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~:/-]+")

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def _space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def _eat(self, char: str) -> bool:
        if self.text.startswith(char, self.pos):
            self.pos += 1
            return True
        return False

    def _match(self, pattern: "re.Pattern[str]") -> str:
        m = pattern.match(self.text, self.pos)
        if m is None:
            raise ValueError(self.pos)
        self.pos = m.end()
        return m.group(0)

    def _string(self) -> str:
        if not self._eat('"'):
            raise ValueError(self.pos)
        out = []
        while self.pos < len(self.text):
            c = self.text[self.pos]
            self.pos += 1
            if c == "\\" and self.pos < len(self.text):
                out.append(self.text[self.pos])
                self.pos += 1
            elif c == '"':
                return "".join(out)
            else:
                out.append(c)
        raise ValueError(self.pos)

    def _bare(self) -> object:
        if self.text.startswith('"', self.pos):
            return self._string()
        return self._match(self.TOKEN)

    def _params(self) -> Dict[str, object]:
        params: Dict[str, object] = {}
        while self._eat(";"):
            self._space()
            key = self._match(self.KEY)
            params[key] = self._bare() if self._eat("=") else True
        return params

    def dictionary(self) -> list:
        """[(key, items, params)], items as [(value, params)]."""
        members = []
        self._space()
        while self.pos < len(self.text):
            key = self._match(self.KEY)
            if not self._eat("=") or not self._eat("("):
                raise ValueError(self.pos)
            items = []
            while True:
                self._space()
                if self._eat(")"):
                    break
                items.append((self._bare(), self._params()))
                if self.pos < len(self.text) and self.text[self.pos] not in " )":
                    raise ValueError(self.pos)
            members.append((key, items, self._params()))
            self._space()
            if self.pos < len(self.text):
                if not self._eat(","):
                    raise ValueError(self.pos)
                self._space()
                if self.pos == len(self.text):
                    raise ValueError(self.pos)
        return members


def asks_web_bot_auth(value: Optional[str]) -> bool:
    """Whether an ``Accept-Signature`` value asks for the signature this
    module makes: a member with ``tag="web-bot-auth"``, whose ``alg``, if
    any, is ``ed25519``, covering nothing but ``@authority`` (and
    ``signature-agent``).  A value that does not parse asks nothing."""
    if not value:
        return False
    try:
        members = _Fields(value.strip()).dictionary()
    except ValueError:
        return False
    return any(
        params.get("tag") == "web-bot-auth"
        and params.get("alg", "ed25519") == "ed25519"
        and all(item in _SIGNED for item, _ in items)
        for _, items, params in members
    )


def _origin(url: str) -> Optional[str]:
    try:
        return f"{urlsplit(url).scheme.lower()}://{authority_of(url)}"
    except ValueError:
        return None


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sf_string(value: str) -> str:
    """An RFC 8941 String: printable ASCII, with ``\\`` and ``"`` escaped."""
    if any(not (0x20 <= ord(c) <= 0x7E) for c in value):
        raise ValueError(f"cannot sign {value!r}: not printable ASCII")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def authority_of(url: str) -> str:
    """``@authority`` of a URL (RFC 9421 section 2.2.3): the host, and the
    port unless the scheme's default, lower-case."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"cannot sign {url!r}: not an http(s) URL")
    host = parts.netloc.rpartition("@")[2].lower()
    default = ":80" if scheme == "http" else ":443"
    if host.endswith(default):
        host = host[: -len(default)]
    return host


class BotSigner:
    """Signs requests with a bot's Ed25519 private key (a JWK with ``d``).

    ``signature_agent``: the bot's key directory URL, sent (and signed) as
    ``Signature-Agent``.  ``lifetime``: seconds each signature is good for
    (60; at most 1 h).  ``when_asked`` (False): sign only once an origin
    asks (``Accept-Signature``); the asking answer's request is sent again,
    signed, once.  Give it to ``Session(bot=...)``,
    ``RequestsAuth(bot=...)``, ``HTTPAdapter(bot=...)``,
    ``HttpxAuth(bot=...)`` or ``pow_shield.aiohttp.PowShieldMiddleware(bot=...)``,
    or call ``headers(url)`` yourself.
    """

    def __init__(
        self,
        jwk: Union[str, Mapping[str, Any]],
        *,
        signature_agent: Optional[str] = None,
        lifetime: int = DEFAULT_LIFETIME,
        when_asked: bool = False,
    ) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        key = json.loads(jwk) if isinstance(jwk, str) else dict(jwk)
        if key.get("kty") != "OKP" or key.get("crv") != "Ed25519" or "d" not in key:
            raise ValueError("not a private Ed25519 JWK (kty OKP, crv Ed25519, d)")
        secret = _b64url_decode(key["d"])
        if len(secret) != 32:
            raise ValueError('"d" is not 32 bytes')
        self._key = Ed25519PrivateKey.from_private_bytes(secret)
        public = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        x = _b64url(public)
        if "x" in key and key["x"] != x:
            raise ValueError('"x" is not the public key of "d"')
        # RFC 7638: the required members, sorted, no white space.
        members = json.dumps({"crv": "Ed25519", "kty": "OKP", "x": x}, separators=(",", ":"), sort_keys=True)
        self.keyid = _b64url(hashlib.sha256(members.encode("ascii")).digest())
        self.signature_agent = signature_agent
        if not 1 <= lifetime <= MAX_LIFETIME:
            raise ValueError(f"lifetime must be 1 to {MAX_LIFETIME} seconds")
        self.lifetime = lifetime
        self.when_asked = bool(when_asked)
        self._asked: set = set()
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str, **options: Any) -> "BotSigner":
        """The signer of the private JWK in ``path``."""
        with open(path, encoding="utf-8") as f:
            return cls(f.read(), **options)

    def __repr__(self) -> str:
        return (
            f"BotSigner(keyid={self.keyid!r}, signature_agent={self.signature_agent!r}, "
            f"when_asked={self.when_asked!r})"
        )

    def signs(self, url: str) -> bool:
        """Whether a request to ``url`` is signed: always, or (``when_asked``)
        once its origin asked."""
        if not self.when_asked:
            return True
        with self._lock:
            return _origin(url) in self._asked

    def asked(self, url: str, accept_signature: Optional[str]) -> bool:
        """Takes note of an answer's ``Accept-Signature`` from ``url``'s
        origin: True when it asks for this signature and the signer (made
        ``when_asked``) was not signing there."""
        origin = _origin(url)
        if not self.when_asked or origin is None or not asks_web_bot_auth(accept_signature):
            return False
        with self._lock:
            if origin in self._asked:
                return False
            self._asked.add(origin)
            return True

    def headers(
        self,
        url: str,
        *,
        created: Optional[int] = None,
        expires: Optional[int] = None,
        nonce: Optional[str] = None,
        label: str = LABEL,
    ) -> Dict[str, str]:
        """The signature headers of one request to ``url`` (by default made
        now, good for ``lifetime``, with a random nonce)."""
        created = int(time.time()) if created is None else created
        expires = created + self.lifetime if expires is None else expires
        nonce = base64.b64encode(os.urandom(32)).decode("ascii") if nonce is None else nonce
        lines = [f'"@authority": {authority_of(url)}']
        components = '"@authority"'
        out = {}
        if self.signature_agent is not None:
            member = _sf_string(self.signature_agent)
            lines.append(f'"signature-agent";key={_sf_string(label)}: {member}')
            components += f' "signature-agent";key={_sf_string(label)}'
            out["Signature-Agent"] = f"{label}={member}"
        params = (
            f"({components});created={created};keyid={_sf_string(self.keyid)};"
            f'alg="ed25519";expires={expires};nonce={_sf_string(nonce)};tag="web-bot-auth"'
        )
        lines.append(f'"@signature-params": {params}')
        signature = self._key.sign("\n".join(lines).encode("ascii"))
        out["Signature-Input"] = f"{label}={params}"
        out["Signature"] = f"{label}=:{base64.b64encode(signature).decode('ascii')}:"
        return out

    def sign(self, headers: MutableMapping[str, str], url: str) -> None:
        """Puts a fresh signature for ``url`` into ``headers`` (a request's),
        in place of any there; with ``when_asked``, only where asked."""
        if not self.signs(url):
            return
        for name in SIGNATURE_HEADERS:
            for key in [k for k in headers if k.lower() == name.lower()]:
                del headers[key]
        headers.update(self.headers(url))
