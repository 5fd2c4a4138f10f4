"""Equi-X challenges (``pow_shield_work equix``; docs/protocol.md section 5).

A challenge whose algorithm is ``equix`` is paid by a decimal nonce and an
Equi-X solution of ``salt + nonce`` (16 bytes, sent base64url in
``X-PoW-Solution``) whose ``sha256(salt + nonce + solution)`` starts with
the bits asked.  Only the native module (``pow_shield._native``, built with
Tor's ``equix`` crate, LGPL-3.0-only: README, "Equi-X") can solve one; the
pure-Python client raises ``Unsolvable`` naming the algorithm, at once,
rather than search for what it cannot find.

The search runs on threads, each calling the native solver for a few
nonces at a time with the GIL released (each with about 1.9 MB of solver
memory).
"""

import os
import threading
import time
from typing import List, Optional, Tuple

from ._errors import Cancelled, SolveTimeout, Unsolvable
from ._solver import _NATIVE_CALLS, DEFAULT_MAX_SOLVE_TIME, _native, check_bits, check_max_solve_time

#: The algorithm's name in tokens, bodies and ``X-PoW-Algorithm``.
EQUIX = "equix"
#: The request header that carries the solution, beside ``X-PoW-Nonce``.
HEADER_SOLUTION = "X-PoW-Solution"
#: Nonces one native call tries (each some milliseconds): the stop event
#: and the deadline are looked at between calls.
CHUNK = 4


def equix_available() -> bool:
    """Whether this installation can solve Equi-X challenges (its native
    module was built with the Equi-X solver)."""
    return _native is not None and hasattr(_native, "equix_search")


def equix_info() -> dict:
    """How Equi-X runs here: ``{"runtime": "compiled" | "interpreted",
    "memory": bytes per solving thread}``; raises ``Unsolvable`` without it."""
    _require()
    runtime, memory = _native.equix_info()
    return {"runtime": runtime, "memory": memory}


def _require() -> None:
    if not equix_available():
        raise Unsolvable(
            f"the server asks for {EQUIX} proof of work, which needs pow_shield's native module "
            "(built from its Rust extension with the Equi-X solver); this installation has the "
            "pure-Python SHA-256 solver only"
        )


def solve_equix(
    salt: str,
    bits: int,
    *,
    max_solve_time: Optional[float] = DEFAULT_MAX_SOLVE_TIME,
    threads: Optional[int] = None,
    stop: Optional[threading.Event] = None,
) -> Tuple[str, str]:
    """Finds ``(nonce, solution)`` for an Equi-X challenge: send them in
    ``X-PoW-Nonce`` and ``X-PoW-Solution`` with the token.  About
    ``2 ** bits / 2`` nonces are tried.  ``threads``: one per available
    core when None.  Raises ``Unsolvable`` without the native solver,
    ``SolveTimeout`` past ``max_solve_time`` seconds, ``Cancelled`` once
    ``stop`` is set."""
    _require()
    if not isinstance(salt, str):
        raise TypeError(f"salt must be a str, not {type(salt).__name__}")
    check_bits(bits)
    check_max_solve_time(max_solve_time)
    if threads is None:
        try:
            threads = max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # not on every platform
            threads = max(1, os.cpu_count() or 1)
    if threads < 1:
        raise ValueError("threads must be >= 1")
    deadline = None if max_solve_time is None else time.monotonic() + max_solve_time
    lock = threading.Lock()
    state = {"next": 0}
    found: List[Tuple[int, str]] = []
    done = threading.Event()

    def worker() -> None:
        while not done.is_set() and not (stop is not None and stop.is_set()):
            if deadline is not None and time.monotonic() >= deadline:
                return
            with lock:
                start = state["next"]
                state["next"] = start + CHUNK
            # (At exit no new call starts and those running are waited
            # for: _solver._NativeCalls.)
            try:
                with _NATIVE_CALLS:
                    hit = _native.equix_search(salt, bits, start, start + CHUNK)
            except Cancelled:
                return
            if hit is not None:
                with lock:
                    found.append(hit)
                done.set()
                return

    pool = [threading.Thread(target=worker, name="pow-shield-equix", daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if found:
        nonce, solution = min(found)
        return str(nonce), solution
    if (stop is not None and stop.is_set()) or _NATIVE_CALLS.closed:
        raise Cancelled(f"the Equi-X solve of {bits} bits was stopped")
    raise SolveTimeout(-(-bits // 4), float(max_solve_time or 0))


def proof_text(nonce: str, solution: str) -> str:
    """An Equi-X proof as ``Policy.solve`` returns it, for
    ``Challenge.headers``: ``nonce:solution`` (neither has a colon)."""
    return f"{nonce}:{solution}"
