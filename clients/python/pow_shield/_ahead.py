"""Paying ahead and pacing (docs/protocol.md sections 6 and 8), per origin
(scheme, host, port), in one place every adapter shares.

* A response after which the client has no free request left, and every
  response to a paid request, sends the next challenge
  (``X-PoW-Next-Challenge``).  ``Ahead.offer`` starts solving it in a worker
  thread at once, while the adapter reads the response; the next request to
  that origin takes it (``ready`` / ``aready``, waiting for the solve if it
  is still running) and sends it: over the limit it is spent at once (one
  round trip, no 429), under it the request passes and the server keeps it
  unspent.  Either way the client uses a solution once, and the response
  brings the next one.  A few are kept per origin (one per challenge
  received, for requests in flight side by side); one within 2 s of its
  ``exp`` (``exp - ts`` from its arrival, by the monotonic clock) is
  dropped unsent.
* Pacing: an answer with no request left and the seconds until one frees
  (``RateLimit`` ``r=0;t=``, or ``X-RateLimit-Reset``) sets the time before
  which a pacing client sends nothing more to that origin.  Once it has
  passed, how many requests it freed only the next answer says: one
  request goes, and the others wait for an answer (not all at once, when
  only the limit's worth is free).
"""

import asyncio
import concurrent.futures
import threading
import time
from collections import deque
from typing import Any, Awaitable, Callable, Deque, Dict, Mapping, Optional, Tuple

from ._challenge import Challenge
from ._gate import origin, remaining, reset_in

#: Solutions kept per origin: one per request in flight (``in_flight``, 4
#: by default) and some to spare; beyond it the oldest is dropped.
PER_ORIGIN = 8

#: Seconds before its ``exp`` a solution is dropped unsent: it would arrive
#: too late (the same margin in every client).
EXPIRY_MARGIN = 2.0

#: How often a coroutine outside asyncio (trio) looks at a running solve.
_POLL_SECONDS = 0.005

#: ``solve(challenge, stop)``: the nonce, or raises.
Solve = Callable[[Challenge, threading.Event], str]


class Solution:
    """One next challenge, its solve running in a daemon thread from the
    moment the response that sent it arrived (a solve left running when
    the program ends does not hold it up)."""

    def __init__(self, challenge: Challenge, solve: Solve, received: Optional[float] = None) -> None:
        self.challenge = challenge
        received = time.monotonic() if received is None else received
        # By this process's monotonic clock from the response's arrival,
        # less the margin; never exp against the wall clock.
        self.deadline = received + _lifetime(challenge) - EXPIRY_MARGIN
        self._stop = threading.Event()
        self._future: "concurrent.futures.Future[str]" = concurrent.futures.Future()
        # Running from now on: cancelling an awaiting coroutine never
        # cancels the solve (the solution stays usable).
        self._future.set_running_or_notify_cancel()
        threading.Thread(target=self._run, args=(solve,), name="pow-shield-ahead", daemon=True).start()

    def _run(self, solve: Solve) -> None:
        try:
            self._future.set_result(solve(self.challenge, self._stop))
        except BaseException as exc:  # the waiting request reads it
            self._future.set_exception(exc)

    def expired(self, now: Optional[float] = None) -> bool:
        """Within ``EXPIRY_MARGIN`` of its ``exp``, by this process's
        monotonic clock since the response came."""
        return (time.monotonic() if now is None else now) >= self.deadline

    def done(self) -> bool:
        return self._future.done()

    def drop(self) -> None:
        """Stops its solve, if still running."""
        self._stop.set()

    def nonce(self) -> Optional[str]:
        """Waits for the solve (blocking the thread): the nonce, or None when
        it failed (too long, too hard, stopped) or the token has expired."""
        try:
            found = self._future.result()
        except Exception:
            return None
        return None if self.expired() else found

    async def anonce(self, sleep: Optional[Callable[[float], Awaitable[Any]]] = None) -> Optional[str]:
        """``nonce`` for a coroutine: waits without blocking the event loop
        (outside asyncio, looking every few milliseconds with ``sleep``,
        anyio's by default)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # trio through anyio, Twisted's own reactor
            if sleep is None:
                import anyio

                sleep = anyio.sleep
            while not self._future.done():
                await sleep(_POLL_SECONDS)
        else:
            await asyncio.wait([asyncio.wrap_future(self._future)])
        return self.nonce()


def _lifetime(challenge: Challenge) -> float:
    """Seconds the token is valid from the moment it arrived: ``exp - ts``
    (the server's own clock, so a client clock far off does not matter),
    else ``exp`` from now by this clock; a token without ``exp``: the
    server's default challenge TTL, 60 s."""
    exp, ts = challenge.exp, challenge.ts
    if exp is None:
        return 60.0
    if ts is not None:
        return max(0.0, (exp - ts) / 1000.0)
    return max(0.0, exp / 1000.0 - time.time())


class PaceTurn:
    """A request's place in its origin's pacing (``Ahead.pace``): the one
    sent once a reset has passed holds the others back until an answer
    comes; ``release`` (or leaving the ``with``) when its request is over,
    answered or not."""

    def __init__(self, ahead: "Ahead", key: str, turn: Optional[int]) -> None:
        self._ahead, self._key, self._turn = ahead, key, turn

    def release(self) -> None:
        turn, self._turn = self._turn, None
        if turn is not None:
            self._ahead._release(self._key, turn)

    def __enter__(self) -> "PaceTurn":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class Ahead:
    """The solutions ahead and the pacing deadlines, per origin; safe to
    share between threads and event loops.  ``pow_shield.Policy`` uses one
    store per process by default (``ahead=`` gives another: a client with
    its own key, whose solutions would not fit another's requests)."""

    def __init__(self, per_origin: int = PER_ORIGIN) -> None:
        if not isinstance(per_origin, int) or isinstance(per_origin, bool) or per_origin < 1:
            raise ValueError("per_origin must be an int >= 1")
        self.per_origin = per_origin
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)
        self._solutions: Dict[str, Deque[Solution]] = {}
        self._paced: Dict[str, float] = {}
        # The turn of the request sent after a reset, per origin.
        self._probes: Dict[str, int] = {}
        self._turns = 0

    # -- solutions ahead -------------------------------------------------

    def offer(self, url: str, challenge: Challenge, solve: Solve) -> Optional[Solution]:
        """Starts solving ``challenge`` for the next request to ``url``'s
        origin; None (nothing started) when it has expired already."""
        solution = Solution(challenge, solve) if _lifetime(challenge) > EXPIRY_MARGIN else None
        if solution is None:
            return None
        with self._lock:
            pool = self._solutions.setdefault(origin(url), deque())
            pool.append(solution)
            while len(pool) > self.per_origin:
                pool.popleft().drop()
        return solution

    def take(self, url: str) -> Optional[Solution]:
        """The oldest solution ahead for ``url``'s origin, removed from the
        store (each is used once); expired ones are dropped on the way."""
        now = time.monotonic()
        with self._lock:
            pool = self._solutions.get(origin(url))
            while pool:
                solution = pool.popleft()
                if not solution.expired(now):
                    return solution
                solution.drop()
        return None

    def give_back(self, url: str, solution: Solution) -> None:
        """Returns an unsent solution (its request was cancelled) to the front."""
        with self._lock:
            self._solutions.setdefault(origin(url), deque()).appendleft(solution)

    def clear(self) -> None:
        """Drops every solution kept, stopping the solves still running."""
        with self._lock:
            pools, self._solutions = self._solutions, {}
        for pool in pools.values():
            for solution in pool:
                solution.drop()

    def count(self, url: str) -> int:
        """Solutions ahead kept for ``url``'s origin (solved or solving)."""
        with self._lock:
            return len(self._solutions.get(origin(url), ()))

    def ready(self, url: str) -> Optional[Tuple[Challenge, str]]:
        """A solved challenge ahead for ``url``, waiting (blocking the
        thread) for its solve; None when there is none usable."""
        while True:
            solution = self.take(url)
            if solution is None:
                return None
            nonce = solution.nonce()
            if nonce is not None:
                return solution.challenge, nonce

    async def aready(
        self, url: str, sleep: Optional[Callable[[float], Awaitable[Any]]] = None
    ) -> Optional[Tuple[Challenge, str]]:
        """``ready`` for a coroutine; a cancelled wait gives the solution back."""
        while True:
            solution = self.take(url)
            if solution is None:
                return None
            try:
                nonce = await solution.anonce(sleep)
            except BaseException:
                self.give_back(url, solution)
                raise
            if nonce is not None:
                return solution.challenge, nonce

    # -- pacing ----------------------------------------------------------

    def note_limits(self, url: str, headers: Mapping[str, str]) -> None:
        """What one answer says of ``url``'s origin: no request left and
        the seconds until one frees set its pacing deadline; requests left
        clear it.  Any answer ends the wait of the requests held back
        after a reset."""
        left = remaining(headers)
        key = origin(url)
        wait = reset_in(headers) if left == 0 else None
        with self._lock:
            if self._probes.pop(key, None) is not None:
                self._answered.notify_all()
            if left is None:
                return
            if wait is None:
                self._paced.pop(key, None)
            else:
                self._paced[key] = time.monotonic() + wait

    def pace_delay(self, url: str) -> float:
        """Seconds until the reset of ``url``'s origin, when its last answer
        showed no request left (0: none, or passed)."""
        with self._lock:
            until = self._paced.get(origin(url))
        return 0.0 if until is None else max(0.0, until - time.monotonic())

    def _step(self, key: str, max_wait: float) -> Tuple[str, Any]:
        """Under the lock: ("go", turn or None), ("sleep", seconds) or
        ("await", None) for the next request to ``key``."""
        if key in self._probes:
            return "await", None
        until = self._paced.get(key)
        if until is None:
            return "go", None
        delay = until - time.monotonic()
        if delay > max_wait:
            return "go", None  # too far: it pays
        if delay > 0:
            return "sleep", delay
        # The reset has passed: this request goes, the others wait for an answer.
        del self._paced[key]
        self._turns += 1
        self._probes[key] = self._turns
        return "go", self._turns

    def _release(self, key: str, turn: int) -> None:
        with self._lock:
            if self._probes.get(key) == turn:
                del self._probes[key]
                self._answered.notify_all()

    def pace(self, url: str, max_wait: float) -> PaceTurn:
        """Paces a request about to go to ``url`` (blocking the thread):
        sleeps until the reset when no request is left (at most
        ``max_wait`` away); once it has passed, one request goes and the
        others wait for an answer (at most ``max_wait``)."""
        key = origin(url)
        while True:
            with self._lock:
                kind, value = self._step(key, max_wait)
                if kind == "await":
                    if not self._answered.wait_for(lambda: key not in self._probes, timeout=max_wait):
                        return PaceTurn(self, key, None)
                    continue
            if kind == "go":
                return PaceTurn(self, key, value)
            time.sleep(value)

    async def apace(self, url: str, max_wait: float, sleep: Callable[[float], Awaitable[Any]]) -> PaceTurn:
        """``pace`` for a coroutine: ``sleep`` is its library's (asyncio's,
        anyio's); waiting for an answer looks every few milliseconds."""
        key = origin(url)
        while True:
            with self._lock:
                kind, value = self._step(key, max_wait)
            if kind == "go":
                return PaceTurn(self, key, value)
            if kind == "sleep":
                await sleep(value)
                continue
            waited = 0.0
            while waited < max_wait:
                with self._lock:
                    if key not in self._probes:
                        break
                await sleep(_POLL_SECONDS)
                waited += _POLL_SECONDS
            else:
                return PaceTurn(self, key, None)


#: The store every ``Policy`` uses unless given another.
SHARED = Ahead()
