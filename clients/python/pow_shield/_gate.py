"""The per-origin in-flight gate: how many requests a client has on the wire
to one origin (scheme, host, port) at a time.

The server's breaker blocks a client at its ``n + 1``-th unpaid 429 (``n`` =
5 by default), and a request in flight over the limit holds at most one
unpaid 429 until it pays.  So a client never has more than ``n - 1``
requests in flight while it may be over the limit: the gate starts at
``DEFAULT_IN_FLIGHT`` (4), before the first response too, and opens as far
as the server's ``Remaining`` shows room, closing back on a 429 or
``Remaining: 0``.  A ``Pass`` is held for the whole of one request (its
sends, solves and ``Retry-After`` waits); threads block in ``enter``,
coroutines await ``aenter``.

Holding (``hold``, for the clients that ask it): the gate also keeps an
estimate of the requests an origin still lets through free, never above
the truth: an answer's ``Remaining`` less every request the server may
have counted after it (those still out, those answered since it went).  At 0 or
below, a request with no solution ahead waits for the answer of one in
flight (which brings the next challenge) instead of going out to collect
a ``429``: one round trip per paid request.
"""

import asyncio
import threading
import time
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from ._challenge import _header

#: Requests in flight per origin while over the limit: ``n - 1`` for the
#: server's default ``pow_shield_strikes 5``.
DEFAULT_IN_FLIGHT = 4

#: How often a coroutine outside asyncio (trio) looks again.
_POLL_SECONDS = 0.005

#: ``sleep(seconds)``: an awaitable sleep of the caller's event loop.
Sleep = Callable[[float], Awaitable[Any]]


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``, the default port spelled out."""
    parts = urlsplit(str(url))
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if scheme == "https" else 80
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def _count(text: str) -> Optional[int]:
    text = text.strip()
    # ASCII digits only: str.isdigit() also accepts '²'.
    return int(text) if text and text.isascii() and text.isdigit() else None


def _ietf(headers: Mapping[str, str]) -> List[Tuple[int, Optional[int]]]:
    """(``r``, ``t``) of each item of the ``RateLimit`` field that has an ``r=``."""
    field = _header(headers, "RateLimit")
    items = []
    if isinstance(field, str):
        for item in field.split(","):
            params = {}
            for param in item.split(";")[1:]:
                name, _, value = param.strip().partition("=")
                params.setdefault(name, _count(value))
            if params.get("r") is not None:
                items.append((params["r"], params.get("t")))
    return items


def remaining(headers: Mapping[str, str]) -> Optional[int]:
    """The requests left unchallenged that an answer shows: the lowest
    ``r=`` of its ``RateLimit`` field (one item per policy), else
    ``X-RateLimit-Remaining``."""
    items = _ietf(headers)
    if items:
        return min(r for r, _ in items)
    plain = _header(headers, "X-RateLimit-Remaining")
    return _count(plain) if isinstance(plain, str) else None


def reset_in(headers: Mapping[str, str]) -> Optional[float]:
    """Seconds until an answer that shows no request left frees one: the
    longest ``t=`` of the ``RateLimit`` items at ``r=0``, else
    ``X-RateLimit-Reset`` (epoch seconds) from now; None when the answer
    shows requests left or says nothing of when."""
    items = _ietf(headers)
    if items:
        waits = [t for r, t in items if r == 0]
        if not waits or None in waits:
            return None
        return float(max(w for w in waits if w is not None))
    if remaining(headers) != 0:
        return None
    reset = _header(headers, "X-RateLimit-Reset")
    at = _count(reset) if isinstance(reset, str) else None
    return None if at is None else max(0.0, at - time.time())


class _Origin:
    __slots__ = ("in_flight", "allowed", "sent", "applied", "free", "answers", "awaiting")

    def __init__(self, allowed: int) -> None:
        self.in_flight = 0
        self.allowed = allowed
        self.sent = 0
        self.applied = 0
        #: requests the origin still lets through free, never more than it
        #: does (None: no answer said): the last answer's count, less every
        #: request the server may have counted after that answer's (those
        #: still out, those answered since it was sent), less those sent since
        self.free: Optional[int] = None
        #: answers seen
        self.answers = 0
        #: passes whose request is out (or about to go with a solution) and unanswered
        self.awaiting = 0

    def holds(self) -> bool:
        """Whether a request without a solution should wait: no free request
        left, and an answer still to come (which brings the next challenge)."""
        return self.free is not None and self.free <= 0 and self.awaiting > 0


class Gate:
    """Per-origin limits on requests in flight, shared by every request of
    one client (threads and coroutines alike)."""

    def __init__(self, floor: int = DEFAULT_IN_FLIGHT) -> None:
        if not isinstance(floor, int) or isinstance(floor, bool) or floor < 1:
            raise ValueError("in_flight must be an int >= 1")
        self.floor = floor
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._origins: Dict[str, _Origin] = {}
        self._waiters: List[Any] = []  # (loop, future) of waiting coroutines

    def in_flight(self, url: str) -> int:
        with self._lock:
            o = self._origins.get(origin(url))
            return o.in_flight if o else 0

    def allowed(self, url: str) -> int:
        with self._lock:
            o = self._origins.get(origin(url))
            return o.allowed if o else self.floor

    def _admit(self, key: str) -> "Optional[Pass]":
        o = self._origins.get(key)
        if o is None:
            o = self._origins[key] = _Origin(self.floor)
        if o.in_flight >= o.allowed:
            return None
        o.in_flight += 1
        o.sent += 1
        return Pass(self, key, o.sent)

    def enter(self, url: str) -> "Pass":
        """Waits (blocking the thread) until a request to ``url``'s origin
        may be sent."""
        key = origin(url)
        with self._freed:
            while True:
                p = self._admit(key)
                if p is not None:
                    return p
                self._freed.wait()

    async def aenter(self, url: str, sleep: "Optional[Sleep]" = None) -> "Pass":
        """Waits without blocking the event loop; a cancelled wait holds no
        place.  Outside asyncio (trio; Twisted's own reactor) it looks again
        every few milliseconds with ``sleep`` (anyio's by default)."""
        key = origin(url)
        while True:
            p = await self._await(lambda: self._admit(key), sleep)
            if p is not None:
                return p

    async def ahold(self, p: "Pass", sleep: "Optional[Sleep]" = None) -> bool:
        """Waits for a change (an answer, a place freed) when ``p``'s origin
        holds requests without a solution (see the module's doc); False at
        once when it does not: then send."""
        held = await self._await(lambda: None if self._origins[p._key].holds() else False, sleep)
        return held is None

    async def _await(self, test: "Callable[[], Any]", sleep: "Optional[Sleep]") -> Any:
        """``test()`` under the lock; when it gives None, waits for the next
        ``_wake`` (or one poll) and gives None, else what it gave."""
        try:
            loop: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:  # trio through anyio, Twisted's own reactor
            loop = None
        with self._lock:
            found = test()
            if found is not None:
                return found
            if loop is not None:
                waiter = (loop, loop.create_future())
                self._waiters.append(waiter)
        if loop is None:
            if sleep is None:
                import anyio

                sleep = anyio.sleep
            await sleep(_POLL_SECONDS)
            return None
        try:
            await waiter[1]
        finally:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        return None

    def _wake(self) -> None:
        # Called with the lock held.
        self._freed.notify_all()
        waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_settle, future)
            except RuntimeError:  # that loop is closed
                pass


def _settle(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)


class Pass:
    """The right to have one request in flight; ``release`` (or leaving its
    ``with``) gives it back, once."""

    def __init__(self, gate: Gate, key: str, ticket: int) -> None:
        self._gate = gate
        self._key = key
        self._ticket = ticket
        self._held = True
        self._awaiting = False
        #: the origin's answers seen when this request last went out
        self._answers_at_send: Optional[int] = None

    def _await_answer(self, o: _Origin, awaiting: bool) -> None:
        # Called with the lock held.
        if awaiting != self._awaiting:
            self._awaiting = awaiting
            o.awaiting += 1 if awaiting else -1

    def expecting(self, yes: bool = True) -> None:
        """Marks the request as about to go with a solution (counted as in
        flight for ``ahold``), or no longer (``yes=False``)."""
        gate = self._gate
        with gate._lock:
            o = gate._origins.get(self._key)
            if o is not None:
                self._await_answer(o, yes)
                if not yes:
                    gate._wake()

    def sending(self) -> None:
        """Call right before each send of a client that holds (``ahold``):
        a new ticket, and one request fewer free."""
        gate = self._gate
        with gate._lock:
            o = gate._origins.get(self._key)
            if o is None:
                return
            o.sent += 1
            self._ticket = o.sent
            self._answers_at_send = o.answers
            if o.free is not None:
                o.free -= 1
            self._await_answer(o, True)

    def resending(self) -> None:
        """Call before each resend (after a solve or a wait): its answer is
        then the newest the origin has seen."""
        with self._gate._lock:
            o = self._gate._origins.get(self._key)
            if o is not None:
                o.sent += 1
                self._ticket = o.sent

    def saw(self, status: int, headers: Mapping[str, str]) -> None:
        """What one answer says about room: a 429 or ``Remaining`` 0 closes
        the gate to its floor; a lower ``Remaining`` always applies, a
        higher one only from the newest send (an older answer may be
        stale)."""
        gate = self._gate
        left = 0 if status == 429 else remaining(headers)
        with gate._lock:
            o = gate._origins.get(self._key)
            if o is None:
                return
            was_awaiting = self._awaiting
            self._await_answer(o, False)
            if left is not None:
                # what it shows, less what the server may have counted after
                # it: whatever is still out, and what was answered since it
                # went (on another connection, it may have come first)
                since = 0 if self._answers_at_send is None else o.answers - self._answers_at_send
                o.free = left - o.awaiting - since
            o.answers += 1
            before = o.allowed
            if left is not None:
                room = gate.floor if status == 429 else max(gate.floor, left)
                if room <= o.allowed or self._ticket >= o.applied:
                    o.allowed = room
                    o.applied = max(o.applied, self._ticket)
            if o.allowed > before or was_awaiting:
                gate._wake()

    def release(self) -> None:
        with self._gate._lock:
            if not self._held:
                return
            self._held = False
            o = self._gate._origins.get(self._key)
            if o is not None:
                o.in_flight = max(0, o.in_flight - 1)
                self._await_answer(o, False)
            self._gate._wake()

    def __enter__(self) -> "Pass":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
