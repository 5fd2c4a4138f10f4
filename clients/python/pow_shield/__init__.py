"""Client side of pow-shield: solve proof-of-work challenges and pay your way
through a shielded HTTP API.

    >>> import pow_shield
    >>> pow_shield.Session().get("https://api.example.com/items")

``solve`` needs only the standard library.  ``Session`` needs ``requests``
and ``HttpxAuth`` needs ``httpx``; each is imported when first used, so
installing neither is fine for code that only solves.
"""

from typing import Any

from ._challenge import Challenge, check_blocked, retry_after
from ._errors import (
    Banned,
    Blocked,
    Cancelled,
    PowShieldError,
    RetriesExhausted,
    SolveTimeout,
    TooDifficult,
    Unsolvable,
)
from ._policy import Policy
from ._solver import is_solution, solve

__version__ = "0.1.0"

__all__ = [
    "Banned",
    "Blocked",
    "Cancelled",
    "Challenge",
    "HttpxAuth",
    "Policy",
    "PowShieldError",
    "RetriesExhausted",
    "Session",
    "SolveTimeout",
    "TooDifficult",
    "Unsolvable",
    "check_blocked",
    "is_solution",
    "retry_after",
    "solve",
]


def __getattr__(name: str) -> Any:
    # Optional dependencies: import requests / httpx only when asked for.
    if name == "Session":
        from ._requests import Session

        return Session
    if name == "HttpxAuth":
        from ._httpx import HttpxAuth

        return HttpxAuth
    raise AttributeError(f"module 'pow_shield' has no attribute {name!r}")
