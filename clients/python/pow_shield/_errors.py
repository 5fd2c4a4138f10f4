"""Typed errors: every way a paying client can fail to get through."""

from typing import Any, Optional


class PowShieldError(Exception):
    """Base class of every error this package raises.

    ``response`` is the HTTP response that led to the error (a
    ``requests.Response`` or an ``httpx.Response``) when there is one.
    """

    def __init__(self, message: str, response: Optional[Any] = None) -> None:
        super().__init__(message)
        self.response = response


class Blocked(PowShieldError):
    """The circuit breaker is open for this client (``X-PoW-Shield: blocked``).

    Paying does not help: every request is refused until the block ends.
    """


class Banned(Blocked):
    """The client is banned (``X-PoW-Shield: banned``): a longer block."""


class Unsolvable(PowShieldError):
    """A challenge this client will not or cannot solve."""


class BadChallenge(Unsolvable):
    """A challenge that cannot be read or sent back, refused before any work:
    a token that is not base64url text and one dot (a hostile body's CR/LF
    would inject headers), a payload or body that is not the JSON the
    protocol describes (or JSON nested too deep to read), a payload without
    a string ``salt`` and an integer ``difficulty``."""


class TooDifficult(Unsolvable):
    """The challenge's difficulty is above ``max_difficulty``; nothing was computed."""

    def __init__(self, difficulty: int, max_difficulty: int, response: Optional[Any] = None) -> None:
        super().__init__(
            f"challenge difficulty {difficulty} is above max_difficulty {max_difficulty}",
            response,
        )
        self.difficulty = difficulty
        self.max_difficulty = max_difficulty
        #: the price and the cap in bits, when the cap was ``max_bits``
        self.bits: Optional[int] = None
        self.max_bits: Optional[int] = None

    @classmethod
    def in_bits(cls, bits: int, max_bits: int, response: Optional[Any] = None) -> "TooDifficult":
        """A challenge of ``bits`` above ``max_bits``."""
        exc = cls(-(-bits // 4), max_bits // 4, response)
        exc.args = (f"challenge of {bits} bits is above max_bits {max_bits}",)
        exc.bits, exc.max_bits = bits, max_bits
        return exc


class SolveTimeout(Unsolvable):
    """No solution was found within ``max_solve_time`` seconds (30 by
    default: the client cannot check a challenge's signature, and a forged
    difficulty 12 would otherwise keep every core busy for months)."""

    def __init__(self, difficulty: int, seconds: float, response: Optional[Any] = None) -> None:
        super().__init__(
            f"no solution for difficulty {difficulty} within {seconds:g} s", response
        )
        self.difficulty = difficulty
        self.seconds = seconds


class RetriesExhausted(PowShieldError):
    """The server still refused after ``max_retries`` paid or waited retries."""


class Cancelled(PowShieldError):
    """The solve was stopped from outside (its ``stop`` event was set)."""
