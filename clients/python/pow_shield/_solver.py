"""The proof-of-work search (docs/protocol.md section 5), standard library only.

A nonce solves ``(salt, difficulty)`` when the lower-case hex SHA-256 of
``salt + nonce`` starts with ``difficulty`` ``'0'`` characters.  That is the
same as the 256-bit digest being below ``2 ** (256 - 4 * difficulty)``, and
comparing two 32-byte strings compares them as big-endian numbers, so the
hot loop is one ``copy``, one ``update``, one ``digest`` and one ``<``.
"""

import hashlib
import multiprocessing
import numbers
import os
import queue
import threading
import time
from typing import Any, Optional

from ._errors import Cancelled, SolveTimeout, TooDifficult, Unsolvable

#: Largest difficulty the protocol allows (docs/protocol.md): the client
#: cannot verify the token's signature, so a forged difficulty of 20 would
#: otherwise keep every core busy for years.
MAX_DIFFICULTY = 12
#: Seconds one challenge is searched by default before ``SolveTimeout``
#: (``Session``, ``HttpxAuth``, ``Policy`` and ``solve``; ``None`` for no
#: limit): a forged difficulty 12 takes months on every core, and honest
#: challenges (difficulty 4 to 6) take well under a second to a few seconds.
DEFAULT_MAX_SOLVE_TIME = 30.0
#: The server accepts nonces of at most 20 decimal digits.
NONCE_LIMIT = 10**20
#: Difficulties from which ``processes=None`` searches on every core; below
#: it the expected work (16 ** difficulty hashes) takes less than process
#: start-up.
PARALLEL_FROM = 5
#: Nonces searched between two looks at the clock or the stop flag.
CHUNK = 1 << 14


def check_difficulty(difficulty: int, max_difficulty: Optional[int] = None) -> None:
    """Raises ``Unsolvable`` for an impossible difficulty and ``TooDifficult``
    for one above ``max_difficulty``."""
    if isinstance(difficulty, bool) or not isinstance(difficulty, int):
        raise Unsolvable(f"difficulty must be an integer, not {difficulty!r}")
    if not 0 <= difficulty <= MAX_DIFFICULTY:
        raise Unsolvable(f"difficulty {difficulty} is outside 0..{MAX_DIFFICULTY}")
    if max_difficulty is not None and difficulty > max_difficulty:
        raise TooDifficult(difficulty, max_difficulty)


def check_max_solve_time(max_solve_time: Optional[float]) -> None:
    """Raises ``ValueError`` unless ``max_solve_time`` is None (no limit) or
    a number of seconds >= 0 (NaN, which no clock ever reaches, is refused)."""
    if max_solve_time is None:
        return
    if isinstance(max_solve_time, bool) or not isinstance(max_solve_time, numbers.Real):
        raise ValueError(f"max_solve_time must be a number of seconds or None, not {max_solve_time!r}")
    if not max_solve_time >= 0:
        raise ValueError("max_solve_time must be >= 0 seconds (None: no limit)")


def is_solution(salt: str, nonce: str, difficulty: int) -> bool:
    """Whether ``nonce`` solves the challenge (the server's check)."""
    if not (nonce.isascii() and nonce.isdigit() and len(nonce) <= 20):
        return False
    digest = hashlib.sha256((salt + nonce).encode()).hexdigest()
    return digest.startswith("0" * difficulty)


def _threshold(difficulty: int) -> bytes:
    return (1 << (256 - 4 * difficulty)).to_bytes(33, "big")[1:]


def _search(prefix: "hashlib._Hash", threshold: bytes, start: int, end: int) -> Optional[int]:
    """The smallest solving nonce in ``[start, end)``, or None."""
    copy = prefix.copy
    for n in range(start, end):
        h = copy()
        h.update(b"%d" % n)
        if h.digest() < threshold:
            return n
    return None


def _solve_here(salt: bytes, difficulty: int, deadline: Optional[float], stop: Any) -> Optional[int]:
    prefix = hashlib.sha256(salt)
    threshold = _threshold(difficulty)
    for start in range(0, NONCE_LIMIT, CHUNK):
        found = _search(prefix, threshold, start, min(start + CHUNK, NONCE_LIMIT))
        if found is not None:
            return found
        if deadline is not None and time.monotonic() >= deadline:
            return None
        if stop is not None and stop.is_set():
            return None
    raise Unsolvable("no nonce of at most 20 digits solves this challenge")


def _worker(salt: bytes, difficulty: int, index: int, stride: int, stop: Any, results: Any) -> None:
    # Worker `index` searches chunks index, index + stride, ... until any
    # worker finds a solution or the parent gives up.
    prefix = hashlib.sha256(salt)
    threshold = _threshold(difficulty)
    start = index * CHUNK
    while not stop.is_set() and start < NONCE_LIMIT:
        found = _search(prefix, threshold, start, min(start + CHUNK, NONCE_LIMIT))
        if found is not None:
            results.put(found)
            stop.set()
            return
        start += stride * CHUNK


def _context() -> Any:
    # fork starts fastest and does not re-import the caller's __main__, but
    # forking a process that runs other threads (an event loop's worker
    # threads, an HTTP pool) can copy a lock some thread holds and deadlock
    # the child: then a fresh interpreter (forkserver, else spawn) it is.
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _solve_parallel(
    salt: bytes, difficulty: int, processes: int, deadline: Optional[float], cancel: Any
) -> Optional[int]:
    ctx = _context()
    stop = ctx.Event()
    results = ctx.Queue()
    workers = [
        ctx.Process(target=_worker, args=(salt, difficulty, i, processes, stop, results), daemon=True)
        for i in range(processes)
    ]
    try:
        for w in workers:
            w.start()
        while True:
            timeout = 0.1 if deadline is None else min(0.1, max(0.0, deadline - time.monotonic()))
            try:
                return int(results.get(timeout=timeout))
            except queue.Empty:
                pass
            if deadline is not None and time.monotonic() >= deadline:
                return None
            if cancel is not None and cancel.is_set():
                return None
            if not any(w.is_alive() for w in workers) and results.empty():
                raise Unsolvable("the solver processes ended without a solution")
    finally:
        stop.set()
        for w in workers:
            w.join(1.0)
            if w.is_alive():
                w.terminate()
                w.join()
        results.close()
        results.join_thread()


def default_processes(difficulty: int) -> int:
    """How many processes ``solve(..., processes=None)`` uses."""
    if difficulty < PARALLEL_FROM:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on every platform
        return max(1, os.cpu_count() or 1)


def solve(
    salt: str,
    difficulty: int,
    *,
    max_difficulty: Optional[int] = None,
    max_solve_time: Optional[float] = DEFAULT_MAX_SOLVE_TIME,
    processes: Optional[int] = None,
    stop: Optional[threading.Event] = None,
) -> str:
    """Finds a nonce for a pow-shield challenge and returns it as a string.

    The nonce is a decimal integer such that ``sha256(salt + nonce)`` in
    lower-case hex starts with ``difficulty`` zeros; send it back in the
    ``X-PoW-Nonce`` header along with the ``X-PoW-Challenge`` token.

    ``max_difficulty``: raise ``TooDifficult`` above it, before any work.
    ``max_solve_time``: seconds (30 by default, ``DEFAULT_MAX_SOLVE_TIME``);
    raise ``SolveTimeout`` when exceeded; ``None`` for no limit.
    ``processes``: how many processes search in parallel; None means one
    below difficulty 5 and one per available core from 5 on.  The expected
    work is ``16 ** difficulty`` hashes.  Worker processes are forked when
    this is the process's only thread, else started fresh (forkserver or
    spawn), which imports the caller's ``__main__`` again: guard a script's
    top level with ``if __name__ == "__main__":``.
    ``stop``: an event (``threading.Event``) another thread may set to end
    the search within a fraction of a second; it then raises ``Cancelled``.

    Difficulties above 12 (the protocol's maximum) raise ``Unsolvable``.

    >>> solve("00", 1)
    '10'
    """
    if not isinstance(salt, str):
        raise TypeError(f"salt must be a str, not {type(salt).__name__}")
    check_difficulty(difficulty, max_difficulty)
    if difficulty == 0:
        return "0"
    check_max_solve_time(max_solve_time)
    if processes is None:
        processes = default_processes(difficulty)
    if processes < 1:
        raise ValueError("processes must be >= 1")
    deadline = None if max_solve_time is None else time.monotonic() + max_solve_time
    salt_bytes = salt.encode()
    if processes == 1:
        found = _solve_here(salt_bytes, difficulty, deadline, stop)
    else:
        found = _solve_parallel(salt_bytes, difficulty, processes, deadline, stop)
    if found is None and stop is not None and stop.is_set():
        raise Cancelled(f"the solve of difficulty {difficulty} was stopped")
    if found is None:
        raise SolveTimeout(difficulty, float(max_solve_time or 0))
    return str(found)

