"""Client side of pow-shield: solve proof-of-work challenges and pay your way
through a shielded HTTP API.

    >>> import pow_shield, requests
    >>> requests.get("https://api.example.com/items", auth=pow_shield.RequestsAuth())
    >>> pow_shield.Session().get("https://api.example.com/items")

``solve`` needs only the standard library.  ``RequestsAuth``,
``HTTPAdapter`` and ``Session`` need ``requests``, and ``HttpxAuth`` needs
``httpx``; each is imported when first used, so installing neither is fine
for code that only solves.

Every solve gives up after ``DEFAULT_MAX_SOLVE_TIME`` (30 s) unless told
otherwise (``max_solve_time=None``: no limit), raising ``SolveTimeout``: the
client cannot check a challenge's signature, and a hostile server's forged
difficulty 12 would otherwise keep every core busy for months.

Every adapter pays ahead (``pay_ahead=True``): the next challenge a
response sends (``X-PoW-Next-Challenge``) is solved in a worker thread
while the response is read and goes with the next request to that origin,
so a client over the limit makes one round trip per request and gets no
429.  ``pace=True`` waits for the server's reset instead of paying.
"""

from typing import Any

from ._ahead import Ahead
from ._bots import BotSigner
from ._challenge import Challenge, check_blocked, retry_after
from ._errors import (
    BadChallenge,
    Banned,
    Blocked,
    Cancelled,
    PowShieldError,
    RetriesExhausted,
    SolveTimeout,
    TooDifficult,
    Unsolvable,
)
from ._policy import DEFAULT_MAX_RETRIES, Policy
from ._equix import equix_available, equix_info, solve_equix
from ._solver import DEFAULT_MAX_SOLVE_TIME, hash_rate, is_solution, solve, solver_info

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MAX_SOLVE_TIME",
    "Ahead",
    "BadChallenge",
    "BotSigner",
    "Banned",
    "Blocked",
    "Cancelled",
    "Challenge",
    "HTTPAdapter",
    "HttpxAuth",
    "Policy",
    "PowShieldError",
    "RequestsAuth",
    "RetriesExhausted",
    "Session",
    "SolveTimeout",
    "TooDifficult",
    "Unsolvable",
    "check_blocked",
    "equix_available",
    "equix_info",
    "hash_rate",
    "is_solution",
    "retry_after",
    "solve",
    "solve_equix",
    "solver_info",
]


def __getattr__(name: str) -> Any:
    # Optional dependencies: import requests / httpx only when asked for.
    if name in ("Session", "RequestsAuth", "HTTPAdapter"):
        from . import _requests

        return getattr(_requests, name)
    if name == "HttpxAuth":
        from ._httpx import HttpxAuth

        return HttpxAuth
    raise AttributeError(f"module 'pow_shield' has no attribute {name!r}")
