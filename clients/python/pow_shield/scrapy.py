"""``pow_shield.scrapy.PowShieldMiddleware``: a Scrapy downloader middleware
that pays its way through pow-shield.

    # settings.py
    DOWNLOADER_MIDDLEWARES = {"pow_shield.scrapy.PowShieldMiddleware": 560}

Why a middleware of its own, and not Scrapy's retries: a ``429`` retried
without paying is one more strike, and the breaker blocks the crawler
(``403``) for every page after; Scrapy frees a download slot before the
response reaches the middlewares, so unpaid requests would go out while
one is being paid.  This middleware therefore

* holds each request in ``process_request`` until it may go: at most
  ``POW_SHIELD_IN_FLIGHT`` (4, one less than the server's strikes) per
  origin while the crawler may be over the limit, and, over it, until a
  payment is ready (the next challenge that an answer in flight brings is
  solved ahead), so that each paid page is one round trip;
* pays in ``process_response``: a challenge is solved in a worker thread
  (never on the reactor's) and the request sent again through the engine,
  its place in the gate kept, until an answer that is not a challenge;
* honours ``Retry-After`` instead of paying with ``POW_SHIELD_WAIT``, caps
  the price with ``POW_SHIELD_MAX_BITS`` (above it, it waits for
  ``Retry-After`` when that is within ``POW_SHIELD_MAX_WAIT``, else gives
  the page up), and counts what it paid in the crawl's stats
  (``pow_shield/...``);
* never retries a block: the breaker's answer is logged as an error, the
  page is handed back as it came (``dont_retry``), requests to that origin
  are dropped until the block ends, and the spider is closed with the
  reason ``pow_shield_blocked`` (``POW_SHIELD_CLOSE_ON_BLOCK``).

Settings (all optional):

=============================  =======  ======================================
``POW_SHIELD_ENABLED``         True     the middleware does nothing when False
``POW_SHIELD_MAX_BITS``        None     highest price paid, in bits
``POW_SHIELD_WAIT``            False    True: sleep ``Retry-After`` instead of
                                        paying; seconds: only up to that
``POW_SHIELD_MAX_WAIT``        60       longest ``Retry-After`` ever slept
``POW_SHIELD_PAY_AHEAD``       True     solve the next challenge ahead
``POW_SHIELD_PACE``            False    wait for the reset instead of paying
``POW_SHIELD_IN_FLIGHT``       4        requests in flight per origin
``POW_SHIELD_MAX_SOLVE_TIME``  30       seconds per challenge
``POW_SHIELD_MAX_RETRIES``     5        paid or waited resends per page
``POW_SHIELD_CLOSE_ON_BLOCK``  True     close the spider at a block
=============================  =======  ======================================

``request.meta["dont_pow_shield"] = True`` leaves one request alone.
Works with Scrapy's asyncio reactor (its default) and with Twisted's own.
"""

import asyncio
import logging
import math
import threading
import time
import weakref
from typing import Any, Dict, Optional, Tuple, Union

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Request, Response

from ._ahead import Ahead, PaceTurn
from ._challenge import HEADER_CHALLENGE, HEADER_NONCE, HEADER_SOLUTION, Challenge, retry_after
from ._errors import Banned, Blocked, PowShieldError, TooDifficult
from ._gate import Pass, origin
from ._policy import MAX_WAIT, Pay, Policy, Resend, Wait

__all__ = ["PowShieldMiddleware"]

logger = logging.getLogger(__name__)

#: ``request.meta`` keys of the middleware's own (not for spiders).
_STATE = "_pow_shield_state"
_TOKEN = "_pow_shield_token"
_RESEND = "_pow_shield_resend"

#: Seconds a block is assumed to last when its answer has no Retry-After.
BLOCK_SECONDS = 60.0


def _plain(headers: Any) -> Dict[str, str]:
    """Scrapy's ``Headers`` (bytes, lists) as one ``str`` per name."""
    return {
        key.decode("latin-1"): b", ".join(values).decode("latin-1")
        for key, values in headers.items()
        if values
    }


def _wait_setting(value: Any) -> Union[bool, float]:
    """``POW_SHIELD_WAIT``: True or False, or seconds (``-s`` gives text)."""
    if isinstance(value, bool) or value is None:
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "yes", "on"):
            return True
        if word in ("false", "no", "off", ""):
            return False
    seconds = float(value)
    return seconds if seconds > 0 else False


def _asyncio_mode() -> bool:
    """Whether Scrapy runs asyncio (its asyncio reactor, the default since
    2.13) rather than a Twisted reactor of its own."""
    try:
        from scrapy.utils.asyncio import is_asyncio_available
    except ImportError:  # Scrapy before 2.14
        from scrapy.utils.reactor import is_asyncio_reactor_installed

        return is_asyncio_reactor_installed()
    return is_asyncio_available()


class _Asyncio:
    """Sleeping and solving on Scrapy's asyncio loop."""

    sleep = staticmethod(asyncio.sleep)

    @staticmethod
    async def solve(policy: Policy, challenge: Challenge, response: Any) -> str:
        return await policy.asolve(challenge, response)


class _Twisted:
    """The same with Deferreds, for a Twisted reactor other than asyncio's."""

    @staticmethod
    def sleep(seconds: float) -> Any:
        from twisted.internet import reactor, task

        return task.deferLater(reactor, seconds, lambda: None)

    @staticmethod
    async def solve(policy: Policy, challenge: Challenge, response: Any) -> str:
        from twisted.internet import defer, reactor

        stop = threading.Event()
        future = policy.solve_in_thread(challenge, response, stop)
        done: "defer.Deferred[str]" = defer.Deferred()

        def settle(_: Any) -> None:
            if done.called:
                return
            try:
                done.callback(future.result())
            except BaseException:  # noqa: BLE001 - handed to the awaiting request
                done.errback()

        future.add_done_callback(lambda _: reactor.callFromThread(settle, None))
        try:
            return await done
        finally:
            stop.set()


class _State:
    """One request's place: its pacing turn and gate pass, given back once."""

    def __init__(self, turn: PaceTurn, gate_pass: Pass) -> None:
        self.turn = turn
        self.gate_pass = gate_pass
        self.ahead_sent = False

    def release(self) -> None:
        self.gate_pass.release()
        self.turn.release()


class PowShieldMiddleware:
    """Pays pow-shield's challenges for a Scrapy crawl (see the module's
    doc for what it does and its settings)."""

    def __init__(
        self,
        crawler: Any = None,
        *,
        policy: Optional[Policy] = None,
        close_on_block: bool = True,
    ) -> None:
        self.crawler = crawler
        self.stats = getattr(crawler, "stats", None)
        self.policy = policy or Policy(ahead=Ahead(), hold=True)
        self.close_on_block = close_on_block
        #: origin -> time.monotonic() at which its block ends
        self._blocked: Dict[str, float] = {}
        self._closing: Any = None
        self._mode: Any = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> "PowShieldMiddleware":
        settings = crawler.settings
        if not settings.getbool("POW_SHIELD_ENABLED", True):
            raise NotConfigured("POW_SHIELD_ENABLED is off")
        max_bits = settings.get("POW_SHIELD_MAX_BITS")
        max_solve_time = settings.get("POW_SHIELD_MAX_SOLVE_TIME", 30.0)
        policy = Policy(
            max_bits=None if max_bits in (None, "") else int(max_bits),
            max_solve_time=None if max_solve_time in (None, "") else float(max_solve_time),
            prefer_wait=_wait_setting(settings.get("POW_SHIELD_WAIT", False)),
            max_wait=settings.getfloat("POW_SHIELD_MAX_WAIT", MAX_WAIT),
            max_retries=settings.getint("POW_SHIELD_MAX_RETRIES", 5),
            in_flight=settings.getint("POW_SHIELD_IN_FLIGHT", 4),
            pay_ahead=settings.getbool("POW_SHIELD_PAY_AHEAD", True),
            pace=settings.getbool("POW_SHIELD_PACE", False),
            ahead=Ahead(),
            hold=True,
        )
        mw = cls(crawler, policy=policy, close_on_block=settings.getbool("POW_SHIELD_CLOSE_ON_BLOCK", True))
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    def spider_closed(self, *args: Any, **kwargs: Any) -> None:
        # the solves still running ahead are of no use any more
        self.policy.ahead.clear()

    # -- helpers ----------------------------------------------------------

    def _env(self) -> Any:
        if self._mode is None:
            self._mode = _Asyncio if _asyncio_mode() else _Twisted
        return self._mode

    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"pow_shield/{key}", count)

    def _paid(self, challenge: Challenge, ahead: bool) -> None:
        self._inc("paid")
        self._inc("paid_ahead" if ahead else "paid_after_challenge")
        self._inc(f"paid_bits/{challenge.bits}")

    def _refusing(self, url: str) -> bool:
        until = self._blocked.get(origin(url))
        return until is not None and time.monotonic() < until

    def _refuse(self, request: Request) -> None:
        self._inc("dropped_while_blocked")
        raise IgnoreRequest(f"pow-shield: {origin(request.url)} has blocked this crawler")

    @staticmethod
    def _strip(request: Request) -> None:
        """Takes off the solution this middleware put on ``request`` (sent once)."""
        token = request.meta.pop(_TOKEN, None)
        if token is not None and request.headers.get(HEADER_CHALLENGE) == token.encode("latin-1"):
            for name in (HEADER_CHALLENGE, HEADER_NONCE, HEADER_SOLUTION):
                request.headers.pop(name, None)

    def _forget(self, request: Request) -> None:
        """A copy of a request already sent (a redirect, a retry) carries its
        place and its solution in ``meta`` and headers: both are spent."""
        state = request.meta.pop(_STATE, None)
        if state is not None:
            state.release()
        self._strip(request)

    async def _download(self, request: Request) -> Response:
        engine = self.crawler.engine
        if hasattr(engine, "download_async"):  # Scrapy 2.14 and later
            return await engine.download_async(request)
        from scrapy.utils.defer import maybe_deferred_to_future

        return await maybe_deferred_to_future(engine.download(request))

    # -- the downloader middleware ----------------------------------------

    async def process_request(self, request: Request, spider: Any = None) -> None:
        meta = request.meta
        if meta.get(_RESEND) or meta.get("dont_pow_shield"):
            return None
        self._forget(request)
        url = request.url
        if self._refusing(url):
            self._refuse(request)
        policy, env = self.policy, self._env()
        turn = await policy.apaced(url, env.sleep)
        try:
            gate_pass = await policy.gate.aenter(url, env.sleep)
        except BaseException:
            turn.release()
            raise
        state = _State(turn, gate_pass)
        # given back by process_response or process_exception; or, should a
        # middleware nearer the downloader turn the answer into another
        # request, when this one is dropped
        weakref.finalize(request, state.release)
        try:
            if self._refusing(url):
                self._refuse(request)
            paid = await policy.apaid(url, _plain(request.headers), gate_pass, env.sleep)
        except BaseException:
            state.release()
            raise
        if paid is not None:
            challenge, nonce = paid
            for name, value in challenge.headers(nonce).items():
                request.headers[name] = value
            meta[_TOKEN] = challenge.token
            self._paid(challenge, ahead=True)
        state.ahead_sent = paid is not None
        meta[_STATE] = state
        gate_pass.sending()
        return None

    async def process_response(self, request: Request, response: Response, spider: Any = None) -> Response:
        meta = request.meta
        if meta.get(_RESEND):
            return response  # a resend of this middleware's: its loop reads it
        state = meta.pop(_STATE, None)
        if state is None:
            return response
        try:
            return await self._follow(request, response, state)
        finally:
            state.release()
            self._strip(request)

    def process_exception(self, request: Request, exception: BaseException, spider: Any = None) -> None:
        if not request.meta.get(_RESEND):
            self._forget(request)
        return None

    # -- paying -----------------------------------------------------------

    async def _follow(self, request: Request, response: Response, state: _State) -> Response:
        """Follows ``response`` through its challenges (solve or wait, send
        again) to an answer that is not one; gives up on a block, a price
        above the cap or too many retries, handing that answer back."""
        policy, env = self.policy, self._env()
        url = request.url
        outer = request
        retries = 0
        ahead_sent = state.ahead_sent
        while True:
            headers = _plain(response.headers)
            policy.saw(url, response.status, headers)
            state.gate_pass.saw(response.status, headers)
            try:
                step = policy.step(response.status, headers, response.body, retries, response, ahead_sent)
            except Blocked as exc:
                self._on_block(outer, response, exc)
                return response
            except TooDifficult as exc:
                step = self._wait_instead(headers, retries)
                if step is None:
                    return self._give_up(outer, response, exc)
            except PowShieldError as exc:
                return self._give_up(outer, response, exc)
            if step is None:
                if request is not outer:
                    # the spider's own request (its meta, no marks of this
                    # middleware's), as for an answer that needed no resend
                    response.request = outer
                return response
            retries += 1
            ahead_sent = False
            solution: Optional[Tuple[str, str]] = None
            if isinstance(step, Wait):
                self._inc("waited")
                self._inc("waited_seconds", math.ceil(step.seconds))
                await env.sleep(step.seconds)
            elif isinstance(step, Pay):
                self._inc("challenged")
                try:
                    nonce = await env.solve(policy, step.challenge, response)
                except PowShieldError as exc:
                    return self._give_up(outer, response, exc)
                solution = (step.challenge.token, nonce)
                self._paid(step.challenge, ahead=False)
            request = self._resend(request, solution, drop=isinstance(step, Resend))
            state.gate_pass.sending()
            response = await self._download(request)

    def _resend(self, request: Request, solution: Optional[Tuple[str, str]], drop: bool) -> Request:
        """The request to send again: with ``solution`` (token, nonce), else
        without the one this middleware put on it (or, ``drop``, any)."""
        headers = request.headers.copy()
        meta = {k: v for k, v in request.meta.items() if k != _STATE}
        token = meta.pop(_TOKEN, None)
        ours = token is not None and headers.get(HEADER_CHALLENGE) == token.encode("latin-1")
        if solution is not None or drop or ours:
            for name in (HEADER_CHALLENGE, HEADER_NONCE, HEADER_SOLUTION):
                headers.pop(name, None)
        if solution is not None:
            token, proof = solution
            nonce, _, equix = proof.partition(":")
            headers[HEADER_CHALLENGE], headers[HEADER_NONCE] = token, nonce
            if equix:
                headers[HEADER_SOLUTION] = equix
            meta[_TOKEN] = token
        # this middleware reads the answer itself: no retry of Scrapy's, no cache
        meta.update({_RESEND: True, "dont_retry": True, "dont_cache": True})
        return request.replace(headers=headers, meta=meta, dont_filter=True)

    def _wait_instead(self, headers: Dict[str, str], retries: int) -> Optional[Wait]:
        """A challenge above the cap: wait out its ``Retry-After`` when it is
        within ``POW_SHIELD_MAX_WAIT`` and retries are left."""
        delay = retry_after(headers)
        policy = self.policy
        if delay is None or delay > policy.max_wait or retries >= policy.max_retries:
            return None
        self._inc("above_max_bits")
        return Wait(max(0.0, delay))

    def _give_up(self, request: Request, response: Response, exc: PowShieldError) -> Response:
        """Hands back an answer not paid; Scrapy does not retry it either
        (an unpaid ``429`` sent again is one more strike)."""
        request.meta["dont_retry"] = True
        self._inc(f"gave_up/{type(exc).__name__}")
        logger.warning(
            "pow-shield: %(url)s not paid: %(why)s (HTTP %(status)d handed back)",
            {"url": request.url, "why": exc, "status": response.status},
            extra={"spider": getattr(self.crawler, "spider", None)},
        )
        return response

    def _on_block(self, request: Request, response: Response, exc: Blocked) -> None:
        request.meta["dont_retry"] = True
        key = origin(request.url)
        seconds = retry_after(_plain(response.headers))
        seconds = BLOCK_SECONDS if seconds is None else max(1.0, seconds)
        now = time.monotonic()
        first = not self._refusing(request.url)
        self._blocked[key] = max(self._blocked.get(key, 0.0), now + seconds)
        self._inc("banned" if isinstance(exc, Banned) else "blocked")
        closing = self.close_on_block and self.crawler is not None and self._closing is None
        if first:
            logger.error(
                "pow-shield: %(origin)s %(kind)s this crawler (HTTP %(status)d) for %(seconds)d s; "
                "%(what)s. A block follows unpaid challenges: keep this middleware in "
                "DOWNLOADER_MIDDLEWARES and lower CONCURRENT_REQUESTS_PER_DOMAIN or POW_SHIELD_IN_FLIGHT",
                {
                    "origin": key,
                    "kind": "banned" if isinstance(exc, Banned) else "blocked",
                    "status": response.status,
                    "seconds": seconds,
                    "what": "closing the spider" if closing else "its requests are dropped until then",
                },
                extra={"spider": getattr(self.crawler, "spider", None)},
            )
        if closing:
            self._close("pow_shield_banned" if isinstance(exc, Banned) else "pow_shield_blocked")

    def _close(self, reason: str) -> None:
        engine = self.crawler.engine
        if hasattr(engine, "close_spider_async"):  # Scrapy 2.14 and later
            from scrapy.utils.defer import deferred_from_coro

            self._closing = deferred_from_coro(engine.close_spider_async(reason=reason))
        else:
            self._closing = engine.close_spider(self.crawler.spider, reason)
