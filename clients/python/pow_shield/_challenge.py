"""Reading the shield's answers (docs/protocol.md sections 3 and 7): challenges, blocks."""

import base64
import binascii
import email.utils
import json
import re
import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ._errors import BadChallenge, Banned, Blocked, Unsolvable

#: Statuses that carry a challenge: 429 (over the limit) and the
#: verification failures that come with a fresh one.
CHALLENGE_STATUSES = frozenset({409, 410, 422, 429})

HEADER_CHALLENGE = "X-PoW-Challenge"
HEADER_NONCE = "X-PoW-Nonce"
#: An Equi-X solution, beside the nonce (``pow_shield_work equix``).
HEADER_SOLUTION = "X-PoW-Solution"
#: The algorithm of the challenge a response carries, when not SHA-256.
HEADER_ALGORITHM = "X-PoW-Algorithm"
#: The proofs of work this client knows: SHA-256, and Equi-X (which needs
#: the native module: ``pow_shield._equix``).
ALGORITHMS = ("sha256", "equix")
HEADER_DIFFICULTY = "X-PoW-Difficulty"
HEADER_BITS = "X-PoW-Bits"
HEADER_SHIELD = "X-PoW-Shield"
#: The next challenge, sent ahead of need (docs/protocol.md section 6,
#: "Paying ahead"), with its price in bits and in hex digits.
HEADER_NEXT_CHALLENGE = "X-PoW-Next-Challenge"
HEADER_NEXT_BITS = "X-PoW-Next-Bits"
HEADER_NEXT_DIFFICULTY = "X-PoW-Next-Difficulty"

#: Statuses of a refused solution that brings no fresh challenge
#: (docs/protocol.md section 7.2): malformed, bad signature, another address.
REFUSAL_STATUSES = frozenset({400, 403})
#: The ``type`` of the shield's own verification failures starts so.
REFUSAL_TYPE = "tag:pow-shield,"
#: Their ``error`` texts, for a server that predates problem details.
REFUSAL_ERRORS = frozenset(
    {
        "Malformed challenge token",
        "Invalid challenge signature",
        "Invalid payload encoding",
        "Challenge was not issued for this IP",
        "Challenge was not issued for this client",
    }
)

#: Most bytes of a response body read to find a challenge in it (as the
#: Rust client): the shield's own answers are a few hundred bytes.
MAX_CHALLENGE_BODY = 64 * 1024


#: A token is base64url text and one dot (docs/protocol.md section 4); it is
#: sent back in a header, so anything else (a hostile body's CR/LF, spaces)
#: is refused before any work is spent on it.
_TOKEN = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def _loads(text: Any) -> Any:
    """``json.loads``, with JSON nested too deep to read (which raises
    ``RecursionError``, not ``ValueError``) refused as ``BadChallenge``."""
    try:
        return json.loads(text)
    except RecursionError:
        raise BadChallenge("challenge JSON nested too deep to read") from None


def _whole(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _header(headers: Mapping[str, str], name: str) -> Optional[str]:
    # requests and httpx both give case-insensitive mappings; a plain dict
    # may not be, so look the name up in every case.
    value = headers.get(name)
    if value is None:
        lower = name.lower()
        for key, v in headers.items():
            if key.lower() == lower:
                return v
    return value


def retry_after(headers: Mapping[str, str]) -> Optional[float]:
    """``Retry-After`` in seconds (delay-seconds or an HTTP date), or None
    when absent or unreadable; never raises, whatever the server sent."""
    value = _header(headers, "Retry-After")
    if not isinstance(value, str):
        return None
    value = value.strip()
    # ASCII digits only: str.isdigit() also takes '²' (which float()
    # refuses) and '١٢' (which float() reads as 12).
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except Exception:  # any malformed date: TypeError, ValueError, OverflowError...
        return None


def check_blocked(status: int, headers: Mapping[str, str], response: Any = None) -> None:
    """Raises ``Banned`` or ``Blocked`` when the response is the circuit
    breaker's (header ``X-PoW-Shield``), whatever its status."""
    shield = (_header(headers, HEADER_SHIELD) or "").strip().lower()
    if shield == "banned":
        raise Banned(f"banned by the circuit breaker (HTTP {status})", response)
    if shield == "blocked":
        raise Blocked(f"blocked by the circuit breaker (HTTP {status})", response)


@dataclass(frozen=True)
class Challenge:
    """A proof-of-work challenge: solve it with ``pow_shield.solve(c.salt,
    c.difficulty, bits=c.bits)`` and resend the request with
    ``c.headers(nonce)``."""

    token: str
    salt: str
    difficulty: int
    #: leading zero bits required (the token's ``bits``; ``4 * difficulty``
    #: for a server that predates bits): what the solver searches for
    bits: int = -1
    #: status of the response that carried it (429, 409, 410 or 422)
    status: int = 429
    #: seconds the token stays valid, when the server said
    expires_in: Optional[int] = None
    #: the response's ``Retry-After`` in seconds, when present
    retry_after: Optional[float] = None
    #: the payload's ``ts`` and ``exp`` (epoch milliseconds), when integers
    ts: Optional[int] = None
    exp: Optional[int] = None
    #: what pays it: ``sha256`` (a nonce), or ``equix`` (a nonce and an
    #: Equi-X solution; the token's ``alg``)
    algorithm: str = "sha256"

    def __post_init__(self) -> None:
        if self.bits < 0:
            object.__setattr__(self, "bits", 4 * self.difficulty)

    @classmethod
    def from_token(cls, token: str, **fields: Any) -> "Challenge":
        """Reads salt and difficulty from the token's signed payload.

        Raises ``BadChallenge`` (an ``Unsolvable``) for a token that is not
        base64url text and one dot (so could not be sent back in a header:
        CR, LF, spaces), whose payload is not a JSON object (or is nested too
        deep to read), or has no string ``salt`` and integer ``difficulty``
        (or a ``bits`` that is not an integer). ``bits`` is the price; a
        token without it asks ``4 * difficulty``. ``ts`` and ``exp`` are
        kept when they are integers (a solution ahead is dropped past its
        ``exp``); other payload fields (``ip``, any later one) are not
        looked at.
        """
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            raise BadChallenge("challenge token is not base64url text and one dot: it can't be sent back")
        try:
            payload_text, _mac = token.split(".")
            payload = _loads(_b64url_decode(payload_text))
            salt = payload["salt"]
            difficulty = payload["difficulty"]
            bits = payload.get("bits")
            algorithm = payload.get("alg", "sha256")
            times = {k: _whole(payload.get(k)) for k in ("ts", "exp")}
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise BadChallenge(f"unreadable challenge token: {exc}") from None
        if not isinstance(salt, str) or isinstance(difficulty, bool) or not isinstance(difficulty, int):
            raise BadChallenge("challenge token payload has no string salt and integer difficulty")
        if bits is None:
            bits = 4 * difficulty
        if isinstance(bits, bool) or not isinstance(bits, int) or bits < 0:
            raise BadChallenge("challenge token payload has bits that are not a whole number")
        if algorithm not in ALGORITHMS:
            raise Unsolvable(f"unsupported proof-of-work algorithm {algorithm!r}")
        bits = max(bits, fields.pop("header_bits", None) or 0)
        return cls(
            token=token, salt=salt, difficulty=difficulty, bits=bits, algorithm=algorithm, **times, **fields
        )

    @classmethod
    def from_response(
        cls,
        status: int,
        headers: Mapping[str, str],
        body: Optional[bytes] = None,
        response: Any = None,
    ) -> Optional["Challenge"]:
        """The challenge a response carries, or None when it carries none.

        The token comes from the ``X-PoW-Challenge`` header (or the JSON
        body's ``challenge``); salt and difficulty from the token's payload,
        which is what the server verifies, so the body is optional.  Raises
        ``BadChallenge`` (an ``Unsolvable``) for a challenge that cannot be
        read or sent back (see ``from_token``; also a body nested too deep
        to read), and ``Unsolvable`` for an algorithm it does not know
        (SHA-256 and Equi-X are known); both before any work.
        """
        if status not in CHALLENGE_STATUSES:
            return None
        doc: Any = None
        try:
            if body and len(body) <= MAX_CHALLENGE_BODY:
                try:
                    doc = _loads(body)
                except ValueError:
                    doc = None
        except BadChallenge as exc:
            exc.response = response
            raise
        if not isinstance(doc, dict):
            doc = {}
        # A header value comes trimmed of surrounding spaces; the body's
        # token is taken as is (a CR or LF in it is refused, not cut off).
        token = _header(headers, HEADER_CHALLENGE)
        token = token.strip() if isinstance(token, str) else None
        if not token:
            token = doc.get("challenge")
        if not token or not isinstance(token, str):
            return None
        algorithm = doc.get("algorithm", "sha256")
        if algorithm not in ALGORITHMS:
            raise Unsolvable(f"unsupported proof-of-work algorithm {algorithm!r}", response)
        expires = doc.get("expires_in")
        # The server may ask more than the token (a location's minimum).
        header_bits = _header(headers, HEADER_BITS)
        header_bits = header_bits.strip() if isinstance(header_bits, str) else ""
        # ASCII digits only: str.isdigit() also takes '²', which int() refuses.
        if header_bits and not (header_bits.isascii() and header_bits.isdigit()):
            raise BadChallenge(f"{HEADER_BITS} is not a number: {header_bits!r}", response)
        fields = {
            "header_bits": int(header_bits) if header_bits else None,
            "status": status,
            "expires_in": expires if isinstance(expires, int) and not isinstance(expires, bool) else None,
            "retry_after": retry_after(headers),
        }
        try:
            return cls.from_token(token, **fields)
        except Unsolvable as exc:
            exc.response = response
            raise

    @classmethod
    def from_next(cls, status: int, headers: Mapping[str, str]) -> Optional["Challenge"]:
        """The next challenge a response sends ahead of need
        (``X-PoW-Next-Challenge``, priced by ``X-PoW-Next-Bits``), or None
        when it has none; raises ``BadChallenge`` as ``from_token`` does, or
        for ``X-PoW-Next-Bits`` that are not a number."""
        token = _header(headers, HEADER_NEXT_CHALLENGE)
        token = token.strip() if isinstance(token, str) else ""
        if not token:
            return None
        bits = _header(headers, HEADER_NEXT_BITS)
        bits = bits.strip() if isinstance(bits, str) else ""
        if bits and not (bits.isascii() and bits.isdigit()):
            raise BadChallenge(f"{HEADER_NEXT_BITS} is not a number: {bits!r}")
        return cls.from_token(token, header_bits=int(bits) if bits else None, status=status)

    def headers(self, nonce: str) -> dict:
        """The request headers that present ``nonce`` as the solution: for
        an Equi-X proof (``nonce:solution``, what ``Policy.solve`` returns
        for one), the nonce and ``X-PoW-Solution``."""
        nonce, _, solution = nonce.partition(":")
        headers = {HEADER_CHALLENGE: self.token, HEADER_NONCE: nonce}
        if solution:
            headers[HEADER_SOLUTION] = solution
        return headers


def is_refusal(status: int, body: Optional[bytes]) -> bool:
    """Whether a 400 or 403 is the shield refusing a solution without a
    fresh challenge (docs/protocol.md section 7.2: its problem ``type``, or
    its ``error`` text), not the application's own 400 or 403."""
    if status not in REFUSAL_STATUSES or not body or len(body) > MAX_CHALLENGE_BODY:
        return False
    try:
        doc = _loads(body)
    except (ValueError, BadChallenge):
        return False
    if not isinstance(doc, dict):
        return False
    kind, error = doc.get("type"), doc.get("error")
    if isinstance(kind, str) and kind.startswith(REFUSAL_TYPE):
        return True
    return isinstance(error, str) and error in REFUSAL_ERRORS
