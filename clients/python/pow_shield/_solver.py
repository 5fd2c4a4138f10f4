"""The proof-of-work search (docs/protocol.md section 5).

A nonce solves a challenge of ``bits`` when the SHA-256 of ``salt + nonce``
starts with ``bits`` zero bits: the 256-bit digest is below
``2 ** (256 - bits)``.  A challenge priced in hex digits (``difficulty``, no
``bits``) asks for ``4 * difficulty`` bits.

Two solvers, one loop (chunks, deadline, stop event, workers):

* native: ``pow_shield._native``, the protocol crate's search (SHA-NI lanes
  where the CPU has them) built by ``pip install`` where a Rust toolchain
  is present; it releases the GIL, so workers are threads;
* python: the standard library only.  Comparing two 32-byte strings
  compares them as big-endian numbers, so the hot loop is one ``copy``, one
  ``update``, one ``digest`` and one ``<``; workers are processes.

``solver_info()`` says which one runs, and why not the native one (how
the package was installed: ``_build.py``, written by ``pip install``);
``POW_SHIELD_PURE_PYTHON=1`` in the environment (read at import) forces the
pure-Python one.  An install that could not build the native solver (no
Rust toolchain, its build failed) solves in pure Python with a
``RuntimeWarning`` on the first solve, saying why and how to get it.
"""

import atexit
import hashlib
import importlib
import multiprocessing
import numbers
import os
import queue
import threading
import time
import warnings
from typing import Any, Optional

from ._errors import Cancelled, SolveTimeout, TooDifficult, Unsolvable

#: How to get the native solver, for the reason and the warning.
_HOW = "install a Rust toolchain (https://rustup.rs) and reinstall pow-shield"


def _why_not_built() -> Optional[str]:
    """Why ``pip install`` did not build the native solver, as it wrote
    down (``_build.py``); None where it did not say (the source tree)."""
    try:
        from ._build import NATIVE_SKIPPED  # type: ignore[import-not-found]
    except ImportError:
        return None
    return str(NATIVE_SKIPPED)


def _missing(exc: ImportError) -> "tuple[str, bool]":
    """Why the native solver is not there, and whether to warn: not when it
    was left out on purpose, nor from the source tree."""
    if os.environ.get("POW_SHIELD_PURE_PYTHON"):
        return "POW_SHIELD_PURE_PYTHON is set", False
    if not isinstance(exc, ModuleNotFoundError) or exc.name != f"{__package__}._native":
        return f"the native solver is installed but does not load: {exc}", True
    skipped = _why_not_built()
    if skipped is None:
        return "not built: pow_shield runs from its source tree (pip install builds it where cargo is present)", False
    if skipped.startswith("POW_SHIELD_NO_NATIVE"):
        return f"not built: {skipped} at install", False
    if skipped:
        return f"not built: {skipped} at install; {_HOW}", True
    return f"not built: its build failed at install (pip install -v shows why); {_HOW}", True


_native: Any
_NATIVE_MISSING = ""
_WARN_PURE = False
try:
    if os.environ.get("POW_SHIELD_PURE_PYTHON"):
        raise ImportError("POW_SHIELD_PURE_PYTHON is set")
    _native = importlib.import_module(f"{__package__}._native")
except ImportError as exc:
    _native = None
    _NATIVE_MISSING, _WARN_PURE = _missing(exc)


def _warn_pure_python() -> None:
    """Once per process: an install that meant to have the native solver
    and has not solves some 25 times slower, and says so."""
    global _WARN_PURE
    if _WARN_PURE:
        _WARN_PURE = False
        warnings.warn(
            f"pow_shield solves in pure Python, about 25 times slower than its native solver: {_NATIVE_MISSING}",
            RuntimeWarning,
            stacklevel=3,
        )

#: Most bits the protocol asks (12 hex digits).
MAX_BITS = 48
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
#: The same for the native solver (about 10 ms of its work).
NATIVE_CHUNK = 1 << 18
#: Most seconds the exit of the program waits for the native searches in
#: progress (each is one chunk: a few milliseconds).
EXIT_WAIT = 5.0


class _NativeCalls:
    """The threads inside the native search, which runs with the GIL released.

    A daemon thread (a solve ahead, a solver worker) that takes the GIL back
    once the interpreter is finalizing is ended by ``pthread_exit``, whose
    unwinding cannot cross the extension's Rust frames: the process aborts
    (SIGABRT).  So at exit, when ``atexit`` runs (before finalization), no
    new search starts (``Cancelled``) and those in progress are waited for.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._inside = 0
        self.closed = False

    def __enter__(self) -> None:
        with self._changed:
            if self.closed:
                raise Cancelled("the program is exiting")
            self._inside += 1

    def __exit__(self, *exc: Any) -> None:
        with self._changed:
            self._inside -= 1
            self._changed.notify_all()

    def close(self, timeout: Optional[float] = EXIT_WAIT) -> None:
        """Refuses new searches and waits (``timeout`` at most) for the others."""
        with self._changed:
            self.closed = True
            self._changed.wait_for(lambda: self._inside == 0, timeout)


_NATIVE_CALLS = _NativeCalls()
if _native is not None:
    atexit.register(_NATIVE_CALLS.close)


def solver_info() -> dict:
    """Which solver ``solve`` runs: ``{"solver": "native", "engine":
    "sha-ni (4 lanes)"}`` (or engine ``"portable"``) when the native
    extension was built, else ``{"solver": "python", "engine": "hashlib",
    "reason": why the native one is missing}``."""
    if _native is not None:
        return {"solver": "native", "engine": _native.engine()}
    return {"solver": "python", "engine": "hashlib", "reason": _NATIVE_MISSING}


def hash_rate(seconds: float = 1.0) -> float:
    """Hashes per CPU second of the solver that runs (``solver_info()``),
    on one thread, measured for about ``seconds`` on a 32-character salt
    at a price it never meets."""
    searcher = _Searcher(b"00112233445566778899aabbccddeeff", 64)
    step = searcher.chunk
    hashes = 0
    wall = time.monotonic()
    cpu = time.process_time()
    while time.monotonic() - wall < seconds:
        searcher.run(hashes, hashes + step)
        hashes += step
    return hashes / max(time.process_time() - cpu, 1e-9)


def bits_of(difficulty: int, bits: Optional[int] = None) -> int:
    """The bits a challenge asks: ``bits`` when given, else four per hex digit."""
    return 4 * difficulty if bits is None else bits


def check_bits(bits: int) -> None:
    """Raises ``Unsolvable`` unless ``bits`` is an integer within 0..48."""
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise Unsolvable(f"bits must be an integer, not {bits!r}")
    if not 0 <= bits <= MAX_BITS:
        raise Unsolvable(f"{bits} bits is outside 0..{MAX_BITS}")


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


def is_solution(salt: str, nonce: str, difficulty: int, *, bits: Optional[int] = None) -> bool:
    """Whether ``nonce`` solves the challenge (the server's check): its hash
    has ``bits`` zero bits (``4 * difficulty`` when ``bits`` is None)."""
    if not (nonce.isascii() and nonce.isdigit() and len(nonce) <= 20):
        return False
    digest = hashlib.sha256((salt + nonce).encode()).digest()
    return digest < _threshold(bits_of(difficulty, bits))


def _threshold(bits: int) -> bytes:
    return (1 << (256 - bits)).to_bytes(33, "big")[1:]


class _Searcher:
    """One salt and price: ``run(start, end)`` is the smallest solving nonce
    in ``[start, end)``, or None, with the native or the Python code."""

    def __init__(self, salt: bytes, bits: int) -> None:
        self.salt = salt
        self.text = salt.decode("utf-8")
        self.bits = bits
        self.native = _native is not None
        self.chunk = NATIVE_CHUNK if self.native else CHUNK
        self.prefix = hashlib.sha256(salt)
        self.threshold = _threshold(bits)

    def run(self, start: int, end: int) -> Optional[int]:
        if self.native:
            with _NATIVE_CALLS:
                found = _native.search(self.text, self.bits, start, end)
            return None if found is None else int(found)
        return _search(self.prefix, self.threshold, start, end)


def _search(prefix: "hashlib._Hash", threshold: bytes, start: int, end: int) -> Optional[int]:
    """The smallest solving nonce in ``[start, end)``, or None."""
    copy = prefix.copy
    for n in range(start, end):
        h = copy()
        h.update(b"%d" % n)
        if h.digest() < threshold:
            return n
    return None


def _solve_here(salt: bytes, bits: int, deadline: Optional[float], stop: Any) -> Optional[int]:
    searcher = _Searcher(salt, bits)
    chunk = searcher.chunk
    for start in range(0, NONCE_LIMIT, chunk):
        found = searcher.run(start, min(start + chunk, NONCE_LIMIT))
        if found is not None:
            return found
        if deadline is not None and time.monotonic() >= deadline:
            return None
        if stop is not None and stop.is_set():
            return None
    raise Unsolvable("no nonce of at most 20 digits solves this challenge")


def _worker(salt: bytes, bits: int, index: int, stride: int, stop: Any, results: Any) -> None:
    # Worker `index` searches chunks index, index + stride, ... until any
    # worker finds a solution or the parent gives up.
    searcher = _Searcher(salt, bits)
    chunk = searcher.chunk
    start = index * chunk
    while not stop.is_set() and start < NONCE_LIMIT:
        try:
            found = searcher.run(start, min(start + chunk, NONCE_LIMIT))
        except Cancelled:  # the program is exiting: end quietly
            return
        if found is not None:
            results.put(found)
            stop.set()
            return
        start += stride * chunk


def _first_result(
    workers: list, results: Any, deadline: Optional[float], cancel: Any, what: str
) -> Optional[int]:
    """Starts the workers and waits for the first nonce one of them puts in
    ``results``: None at the deadline or once ``cancel`` is set."""
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
            if _NATIVE_CALLS.closed:  # the threads ended at exit
                raise Cancelled("the program is exiting")
            raise Unsolvable(f"the solver {what} ended without a solution")


def _solve_threads(
    salt: bytes, bits: int, threads: int, deadline: Optional[float], cancel: Any
) -> Optional[int]:
    # The native search releases the GIL: threads run it on every core,
    # without a process's start-up.
    stop = threading.Event()
    results: "queue.Queue[int]" = queue.Queue()
    workers = [
        threading.Thread(target=_worker, args=(salt, bits, i, threads, stop, results), daemon=True)
        for i in range(threads)
    ]
    try:
        return _first_result(workers, results, deadline, cancel, "threads")
    finally:
        stop.set()
        for w in workers:
            if w.ident is not None:
                w.join()


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
    salt: bytes, bits: int, processes: int, deadline: Optional[float], cancel: Any
) -> Optional[int]:
    ctx = _context()
    stop = ctx.Event()
    results = ctx.Queue()
    workers = [
        ctx.Process(target=_worker, args=(salt, bits, i, processes, stop, results), daemon=True)
        for i in range(processes)
    ]
    try:
        return _first_result(workers, results, deadline, cancel, "processes")
    finally:
        stop.set()
        for w in workers:
            w.join(1.0)
            if w.is_alive():
                w.terminate()
                w.join()
        results.close()
        results.join_thread()


def default_processes(difficulty: int, bits: Optional[int] = None) -> int:
    """How many workers ``solve(..., processes=None)`` uses: one below 20
    bits (difficulty 5), one per available core from there on."""
    if bits_of(difficulty, bits) < 4 * PARALLEL_FROM:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on every platform
        return max(1, os.cpu_count() or 1)


def solve(
    salt: str,
    difficulty: int,
    *,
    bits: Optional[int] = None,
    max_difficulty: Optional[int] = None,
    max_solve_time: Optional[float] = DEFAULT_MAX_SOLVE_TIME,
    processes: Optional[int] = None,
    stop: Optional[threading.Event] = None,
) -> str:
    """Finds a nonce for a pow-shield challenge and returns it as a string.

    The nonce is a decimal integer such that ``sha256(salt + nonce)`` starts
    with ``bits`` zero bits (a challenge's ``bits``; ``4 * difficulty``, i.e.
    ``difficulty`` lower-case hex zeros, when ``bits`` is None); send it
    back in the ``X-PoW-Nonce`` header along with the ``X-PoW-Challenge``
    token.  ``Challenge.bits`` has the price of a challenge.

    ``max_difficulty``: raise ``TooDifficult`` above it (in hex digits: a
    price of ``bits`` counts as ``ceil(bits / 4)``), before any work.
    ``max_solve_time``: seconds (30 by default, ``DEFAULT_MAX_SOLVE_TIME``);
    raise ``SolveTimeout`` when exceeded; ``None`` for no limit.
    ``processes``: how many workers search in parallel; None means one
    below 20 bits (difficulty 5) and one per available core from there on.
    The expected work is ``2 ** bits`` hashes.  With the native solver
    (``solver_info()``) the workers are threads; with the pure-Python one
    they are processes, forked when
    this is the process's only thread, else started fresh (forkserver or
    spawn), which imports the caller's ``__main__`` again: guard a script's
    top level with ``if __name__ == "__main__":``.
    ``stop``: an event (``threading.Event``) another thread may set to end
    the search within a fraction of a second; it then raises ``Cancelled``,
    as it does in a thread still solving when the program exits.

    Difficulties above 12 (the protocol's maximum) raise ``Unsolvable``.

    >>> solve("00", 1)
    '10'
    """
    if not isinstance(salt, str):
        raise TypeError(f"salt must be a str, not {type(salt).__name__}")
    if bits is None:
        check_difficulty(difficulty, max_difficulty)
    else:
        check_bits(bits)
        check_difficulty(-(-bits // 4), max_difficulty)
    price = bits_of(difficulty, bits)
    if price == 0:
        return "0"
    check_max_solve_time(max_solve_time)
    if processes is None:
        processes = default_processes(difficulty, bits)
    if processes < 1:
        raise ValueError("processes must be >= 1")
    deadline = None if max_solve_time is None else time.monotonic() + max_solve_time
    salt_bytes = salt.encode()
    if _native is None:
        _warn_pure_python()
    if processes == 1:
        found = _solve_here(salt_bytes, price, deadline, stop)
    elif _native is not None:
        found = _solve_threads(salt_bytes, price, processes, deadline, stop)
    else:
        found = _solve_parallel(salt_bytes, price, processes, deadline, stop)
    if found is None and stop is not None and stop.is_set():
        raise Cancelled(f"the solve of difficulty {difficulty} was stopped")
    if found is None:
        raise SolveTimeout(difficulty, float(max_solve_time or 0))
    return str(found)

