"""What a paying client does with each answer, shared by every HTTP adapter.

The adapters (``requests``, ``httpx`` sync and async) only send, sleep and
solve; this module decides which of those comes next, so they all behave
alike (and like the ``pow-shield`` command-line client):

* ``X-PoW-Shield: blocked`` / ``banned``: raise ``Blocked`` / ``Banned``.
* 429 with ``Retry-After`` and ``prefer_wait``: sleep, then resend unchanged
  (only up to ``max_wait``: a longer ``Retry-After`` is paid instead).
* 429, 409, 410 or 422 with a challenge: solve it and resend with the
  solution (409/410/422 carry a fresh challenge after a spent, expired or
  wrong one).
* 503 with ``Retry-After`` and ``prefer_wait``: sleep, then resend.
* 400 or 403, the shield refusing a solution paid ahead (no fresh
  challenge): resend without it, down the 429 path.
* 401, 403 or 429 with ``Accept-Signature`` asking a ``bot`` that signs
  when asked (and was not signing there): resend once, signed.
* anything else: hand the response back.

Around that loop, paying ahead and pacing (``_ahead``): ``saw`` hears every
answer (its next challenge starts solving, its limits set the pacing
deadline), ``pace_delay`` is the wait before a request when ``pace`` is on,
``take_ahead`` / ``atake_ahead`` the solution a request sends with it.

Each wait or payment is one retry; past ``max_retries`` the adapter raises
``RetriesExhausted``.
"""

import asyncio
import concurrent.futures
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterator, Mapping, Optional, Tuple, Union

from ._ahead import SHARED, Ahead, PaceTurn
from ._bots import ACCEPT_SIGNATURE
from ._challenge import (
    CHALLENGE_STATUSES,
    HEADER_CHALLENGE,
    HEADER_SHIELD,
    MAX_CHALLENGE_BODY,
    REFUSAL_STATUSES,
    Challenge,
    _header,
    check_blocked,
    is_refusal,
    retry_after,
)
from ._equix import EQUIX, proof_text, solve_equix
from ._errors import Cancelled, PowShieldError, RetriesExhausted, SolveTimeout, TooDifficult, Unsolvable
from ._gate import DEFAULT_IN_FLIGHT, Gate, Pass, Sleep, reset_in
from ._solver import DEFAULT_MAX_SOLVE_TIME, check_difficulty, check_max_solve_time, solve

#: Statuses after which ``prefer_wait`` sleeps ``Retry-After``.
WAIT_STATUSES = frozenset({429, 503})
#: Statuses whose ``Accept-Signature`` has a ``bot`` made ``when_asked``
#: send the request again, signed.
SIGN_STATUSES = frozenset({401, 403, 429})
#: Longest ``Retry-After`` slept by default, as the CLI's ``--max-wait``.
MAX_WAIT = 60.0
#: Paid or waited resends per request by default: the same number in every
#: client (the CLI's ``--retries``, Rust's ``Policy``, Node's ``maxRetries``).
DEFAULT_MAX_RETRIES = 5


@dataclass(frozen=True)
class Wait:
    """Sleep this many seconds, then resend the request as it was."""

    seconds: float


@dataclass(frozen=True)
class Pay:
    """Solve this challenge, then resend with its solution."""

    challenge: Challenge


@dataclass(frozen=True)
class Resend:
    """Send the request again without its solution headers: the solution
    paid ahead was refused without a fresh challenge (400/403)."""


@dataclass(frozen=True)
class Sign(Resend):
    """Send the request again, signed: the answer asked a ``bot`` made
    ``when_asked`` for a signature (``Accept-Signature``).  Once per origin;
    not one of ``max_retries``."""


Step = Union[None, Wait, Pay, Resend]


class Policy:
    """The limits a paying client respects, and its decision per response.

    ``max_solve_time`` is 30 seconds by default (``DEFAULT_MAX_SOLVE_TIME``):
    one challenge not solved by then raises ``SolveTimeout``; ``None`` means
    no limit.

    ``in_flight`` (4): requests in flight per origin while the client may be
    over the limit, ``n - 1`` for the server's ``n`` strikes (its default
    5); the server's ``Remaining`` opens the gate further.  Every adapter
    sharing this policy shares its ``gate``.

    ``pay_ahead`` (True): solve the next challenge a response sends
    (``X-PoW-Next-Challenge``) while it is read, and send the solution with
    the next request to that origin: one round trip per paid request, no
    429.  ``pace`` (False): when an answer shows no request left, wait until
    the server's reset (at most ``max_wait``) before the next request to
    that origin, instead of paying.  ``ahead``: where the solutions ahead
    and pacing deadlines are kept, per origin (an ``Ahead``; by default one
    store for the whole process, so that each ``RequestsAuth()`` of
    ``requests.get(url, auth=...)`` finds the last one's solution).

    ``max_bits``: the highest price paid, in bits (``max_difficulty`` is
    the same in hex digits); above it ``TooDifficult``, before any work.
    ``hold`` (False; the Scrapy and aiohttp middlewares turn it on): over
    the limit, a request with no solution ahead waits for the answer of one
    in flight, which brings the next challenge, instead of going out to
    collect a ``429`` (``apaid``): one round trip per paid request, one
    paid request in flight at a time.
    """

    def __init__(
        self,
        *,
        max_difficulty: Optional[int] = None,
        max_solve_time: Optional[float] = DEFAULT_MAX_SOLVE_TIME,
        prefer_wait: Union[bool, float] = False,
        max_wait: float = MAX_WAIT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        processes: Optional[int] = None,
        in_flight: int = DEFAULT_IN_FLIGHT,
        bot: Optional[Any] = None,
        pay_ahead: bool = True,
        pace: bool = False,
        ahead: Optional[Ahead] = None,
        max_bits: Optional[int] = None,
        hold: bool = False,
    ) -> None:
        if max_bits is not None and (isinstance(max_bits, bool) or not isinstance(max_bits, int) or max_bits < 1):
            raise ValueError("max_bits must be an int >= 1")
        if not max_wait >= 0:  # also refuses NaN
            raise ValueError("max_wait must be a number of seconds >= 0")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        check_max_solve_time(max_solve_time)
        if not isinstance(prefer_wait, bool) and prefer_wait < 0:
            raise ValueError("prefer_wait must be a bool or a number of seconds >= 0")
        self.max_difficulty = max_difficulty
        self.max_solve_time = max_solve_time
        self.prefer_wait = prefer_wait
        self.max_wait = max_wait
        self.max_retries = max_retries
        self.processes = processes
        self.gate = Gate(in_flight)
        #: A ``BotSigner``: every request sent, each resend too, is signed
        #: (made ``when_asked``: once its origin asked).
        self.bot = bot
        self.pay_ahead = bool(pay_ahead)
        self.pace = bool(pace)
        self.ahead = SHARED if ahead is None else ahead
        self.max_bits = max_bits
        self.hold = bool(hold)

    def __repr__(self) -> str:
        return (
            f"Policy(max_difficulty={self.max_difficulty!r}, max_solve_time={self.max_solve_time!r}, "
            f"prefer_wait={self.prefer_wait!r}, max_wait={self.max_wait!r}, "
            f"max_retries={self.max_retries!r}, processes={self.processes!r}, "
            f"in_flight={self.gate.floor!r}, pay_ahead={self.pay_ahead!r}, pace={self.pace!r}, "
            f"max_bits={self.max_bits!r}, hold={self.hold!r})"
        )

    def sign(self, headers: Any, url: str) -> None:
        """Signs a request about to be sent, when a ``bot`` signs."""
        if self.bot is not None:
            self.bot.sign(headers, url)

    # -- paying ahead and pacing ------------------------------------------

    def pace_delay(self, url: str) -> float:
        """Seconds to wait before a request to ``url`` (``pace`` on, the
        origin's last answer showed no request left, its reset within
        ``max_wait``); 0 otherwise."""
        if not self.pace:
            return 0.0
        delay = self.ahead.pace_delay(url)
        return delay if delay <= self.max_wait else 0.0

    def paced(self, url: str) -> PaceTurn:
        """Paces a request to ``url`` (``pace`` on; blocking the thread):
        waits for the reset, and after it for the answer of the one request
        sent first; release the turn once the request is over."""
        if not self.pace:
            return PaceTurn(self.ahead, "", None)
        return self.ahead.pace(url, self.max_wait)

    async def apaced(self, url: str, sleep: Callable[[float], Awaitable[Any]]) -> PaceTurn:
        """``paced`` for a coroutine, sleeping with ``sleep``."""
        if not self.pace:
            return PaceTurn(self.ahead, "", None)
        return await self.ahead.apace(url, self.max_wait, sleep)

    def saw(self, url: str, status: int, headers: Mapping[str, str]) -> None:
        """Every answer from ``url``: its limits (pacing), and its next
        challenge, which starts solving in a worker thread unless the
        client will wait instead (``pace``, or ``prefer_wait`` for a reset
        it would wait for after a 429), it is above ``max_difficulty`` or
        unreadable (the 429 path then says why)."""
        self.ahead.note_limits(url, headers)
        if not self.pay_ahead:
            return
        try:
            challenge = Challenge.from_next(status, headers)
            if challenge is None or self.pace_delay(url) > 0 or self._wants_wait(reset_in(headers)):
                return
            self.check_price(challenge)
        except PowShieldError:
            return
        self.ahead.offer(url, challenge, self._solve_ahead)

    def check_price(self, challenge: Challenge, response: Any = None) -> None:
        """Raises ``TooDifficult`` (carrying ``response``) for a challenge
        above ``max_difficulty`` or ``max_bits``: nothing is computed."""
        try:
            check_difficulty(-(-challenge.bits // 4), self.max_difficulty)
            if self.max_bits is not None and challenge.bits > self.max_bits:
                raise TooDifficult.in_bits(challenge.bits, self.max_bits)
        except PowShieldError as exc:
            exc.response = response
            raise

    def _solve_ahead(self, challenge: Challenge, stop: threading.Event) -> str:
        return self.solve(challenge, None, stop)

    def _may_send_ahead(self, headers: Mapping[str, str]) -> bool:
        # A request that carries a solution of its own keeps it.
        return self.pay_ahead and _header(headers, HEADER_CHALLENGE) is None

    def take_ahead(self, url: str, headers: Mapping[str, str]) -> Optional[dict]:
        """The solution headers to send with a request to ``url``, waiting
        (blocking the thread) for a solve still running; None without one."""
        found = self.ahead.ready(url) if self._may_send_ahead(headers) else None
        return None if found is None else found[0].headers(found[1])

    async def atake_ahead(self, url: str, headers: Mapping[str, str]) -> Optional[dict]:
        """``take_ahead`` for a coroutine: never blocks the event loop."""
        found = await self.ahead.aready(url) if self._may_send_ahead(headers) else None
        return None if found is None else found[0].headers(found[1])

    async def apaid(
        self, url: str, headers: Mapping[str, str], gate_pass: Pass, sleep: Optional[Sleep] = None
    ) -> Optional[Tuple[Challenge, str]]:
        """The solution (challenge, nonce; send ``challenge.headers(nonce)``)
        for a request about to go to ``url`` through ``gate_pass``,
        awaiting a solve still running (never blocking the event loop;
        outside asyncio it looks every few milliseconds with ``sleep``);
        None without one.  With ``hold``, over the limit and
        with an answer still to come, it waits for that answer's next
        challenge rather than give None.  Call ``gate_pass.sending()``
        right before the request goes."""
        if not self._may_send_ahead(headers):
            return None
        while True:
            solution = self.ahead.take(url)
            if solution is not None:
                # counted as in flight: the others hold for its answer
                gate_pass.expecting()
                try:
                    nonce = await solution.anonce(sleep)
                except BaseException:
                    self.ahead.give_back(url, solution)
                    gate_pass.expecting(False)
                    raise
                if nonce is not None:
                    return solution.challenge, nonce
                gate_pass.expecting(False)
                continue
            if not self.hold or not await self.gate.ahold(gate_pass, sleep):
                return None

    # -- the 429 path -----------------------------------------------------

    @staticmethod
    def needs_body(status: int, headers: Mapping[str, str], ahead_sent: bool = False) -> bool:
        """Whether the adapter should read the body (with ``read_capped``)
        before ``step``: a challenge status without the token header (whose
        token may then be in the JSON body), the breaker's answers (so
        that ``Blocked.response`` has its body), and a 400 or 403 to a
        solution sent ahead (the shield's refusal, or the application's)."""
        if _header(headers, HEADER_SHIELD) is not None:
            return True
        if ahead_sent and status in REFUSAL_STATUSES:
            return True
        return status in CHALLENGE_STATUSES and _header(headers, HEADER_CHALLENGE) is None

    @staticmethod
    def read_capped(chunks: Iterator[bytes]) -> Tuple[bytes, bool]:
        """Reads ``chunks`` to its end or just past ``MAX_CHALLENGE_BODY``
        bytes: (what was read, whether that is the whole body).  A longer
        body is no challenge of the shield's and is not parsed (the adapter
        hands it back whole)."""
        parts = []
        size = 0
        for chunk in chunks:
            parts.append(chunk)
            size += len(chunk)
            if size > MAX_CHALLENGE_BODY:
                return b"".join(parts), False
        return b"".join(parts), True

    def _wants_wait(self, delay: Optional[float]) -> bool:
        if delay is None or self.prefer_wait is False or delay > self.max_wait:
            return False
        return self.prefer_wait is True or delay <= self.prefer_wait

    def step(
        self,
        status: int,
        headers: Mapping[str, str],
        body: Optional[bytes],
        retries: int,
        response: Any = None,
        ahead_sent: bool = False,
        url: Optional[str] = None,
    ) -> Step:
        """The next move after a response, ``retries`` moves into the request
        (``ahead_sent``: the request carried a solution paid ahead) to
        ``url`` (without it, a ``bot`` made ``when_asked`` is never asked).

        Raises ``Blocked``/``Banned``, ``Unsolvable``/``TooDifficult`` (before
        any work) and ``RetriesExhausted``.
        """
        check_blocked(status, headers, response)
        if self._asked_to_sign(url, headers) and status in SIGN_STATUSES:
            return Sign()
        move: Step = None
        delay = retry_after(headers)
        if status in WAIT_STATUSES and self._wants_wait(delay):
            move = Wait(max(0.0, delay or 0.0))
        else:
            challenge = Challenge.from_response(status, headers, body, response)
            if challenge is not None:
                self.check_price(challenge, response)
                move = Pay(challenge)
            elif ahead_sent and is_refusal(status, body):
                move = Resend()
        if move is not None and retries >= self.max_retries:
            raise RetriesExhausted(
                f"still HTTP {status} after {retries} retr{'y' if retries == 1 else 'ies'}", response
            )
        return move

    def _asked_to_sign(self, url: Optional[str], headers: Mapping[str, str]) -> bool:
        # Any answer that asks makes the origin's later requests signed.
        asked = getattr(self.bot, "asked", None)
        if url is None or asked is None:
            return False
        return bool(asked(url, _header(headers, ACCEPT_SIGNATURE)))

    def solve(
        self, challenge: Challenge, response: Any = None, stop: Optional[threading.Event] = None
    ) -> str:
        """Solves within the limits; ``SolveTimeout`` carries ``response``;
        setting ``stop`` ends the search (``Cancelled``). The proof for
        ``challenge.headers``: the nonce, or for Equi-X ``nonce:solution``
        (``Unsolvable`` without the native module)."""
        try:
            if challenge.algorithm == EQUIX:
                check_difficulty(-(-challenge.bits // 4), self.max_difficulty)
                nonce, solution = solve_equix(
                    challenge.salt, challenge.bits, max_solve_time=self.max_solve_time, stop=stop
                )
                return proof_text(nonce, solution)
            return solve(
                challenge.salt,
                challenge.difficulty,
                bits=challenge.bits,
                max_difficulty=self.max_difficulty,
                max_solve_time=self.max_solve_time,
                processes=self.processes,
                stop=stop,
            )
        except (SolveTimeout, Cancelled, Unsolvable) as exc:
            exc.response = response
            raise

    def solve_in_thread(
        self, challenge: Challenge, response: Any = None, stop: Optional[threading.Event] = None
    ) -> "concurrent.futures.Future[str]":
        """``solve`` in a daemon thread of its own, started now: its future."""
        future: "concurrent.futures.Future[str]" = concurrent.futures.Future()
        future.set_running_or_notify_cancel()

        def run() -> None:
            try:
                future.set_result(self.solve(challenge, response, stop))
            except BaseException as exc:  # the awaiting request reads it
                future.set_exception(exc)

        threading.Thread(target=run, name="pow-shield-solve", daemon=True).start()
        return future

    async def asolve(self, challenge: Challenge, response: Any = None) -> str:
        """``solve`` in a worker thread, awaited on the running asyncio loop;
        a cancelled await stops the search."""
        stop = threading.Event()
        try:
            return await asyncio.wrap_future(self.solve_in_thread(challenge, response, stop))
        finally:
            stop.set()
