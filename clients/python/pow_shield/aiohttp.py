"""``pow_shield.aiohttp.PowShieldMiddleware``: an aiohttp client middleware
(aiohttp 3.12 and later) that pays its way.

    >>> mw = pow_shield.aiohttp.PowShieldMiddleware()
    >>> async with aiohttp.ClientSession(middlewares=(mw,)) as session:
    ...     async with session.get("https://api.example.com/items") as r:
    ...         items = await r.json()

It follows ``pow_shield.Policy`` as every other adapter does (the same
decisions per answer, the same pay-ahead store, in-flight gate and pacing),
with ``hold`` on: over the limit a request waits for the next challenge
that the answer of one in flight brings rather than collect a ``429``, so
each paid request is one round trip, gathered or one by one.
"""

import asyncio
from typing import Any, Awaitable, Callable, Optional, Union

import aiohttp

from ._ahead import Ahead
from ._challenge import HEADER_CHALLENGE, HEADER_NONCE, HEADER_SOLUTION
from ._errors import PowShieldError
from ._gate import DEFAULT_IN_FLIGHT, Pass
from ._policy import DEFAULT_MAX_RETRIES, MAX_WAIT, Pay, Policy, Resend, Sign, Wait
from ._solver import DEFAULT_MAX_SOLVE_TIME

__all__ = ["PowShieldMiddleware"]

Handler = Callable[[aiohttp.ClientRequest], Awaitable[aiohttp.ClientResponse]]


def _drop_solution(request: aiohttp.ClientRequest) -> None:
    for name in (HEADER_CHALLENGE, HEADER_NONCE, HEADER_SOLUTION):
        request.headers.popall(name, None)


def _replayable(request: aiohttp.ClientRequest) -> bool:
    body = request.body
    return not getattr(body, "consumed", False)


class PowShieldMiddleware:
    """An aiohttp client middleware that answers pow-shield challenges:
    ``aiohttp.ClientSession(middlewares=(PowShieldMiddleware(),))``, or
    per request (``session.get(url, middlewares=(mw,))``).

    The options and the errors are those of ``pow_shield.Session`` (and a
    whole ``policy`` may be given instead): a challenge is solved in a
    worker thread while the event loop runs on, the next challenge
    (``X-PoW-Next-Challenge``) too, and sent with the next request to that
    origin; at most ``in_flight`` (4) requests per origin are in flight
    while the client may be over the limit; ``pace`` waits for the reset
    instead of paying.  ``max_bits`` caps the price in bits.  ``hold``
    (True): over the limit, a request with no solution waits for the next
    challenge that the answer of a request in flight brings, instead of
    collecting a ``429``: one round trip per paid request.  The breaker's
    answer raises ``Blocked`` / ``Banned``.  Keep one middleware for all
    the requests of a client: its gate counts them together.
    """

    def __init__(
        self,
        *,
        policy: Optional[Policy] = None,
        max_difficulty: Optional[int] = None,
        max_bits: Optional[int] = None,
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
        hold: bool = True,
    ) -> None:
        self.policy = policy or Policy(
            max_difficulty=max_difficulty,
            max_bits=max_bits,
            max_solve_time=max_solve_time,
            prefer_wait=prefer_wait,
            max_wait=max_wait,
            max_retries=max_retries,
            processes=processes,
            in_flight=in_flight,
            bot=bot,
            pay_ahead=pay_ahead,
            pace=pace,
            ahead=ahead,
            hold=hold,
        )

    async def __call__(self, request: aiohttp.ClientRequest, handler: Handler) -> aiohttp.ClientResponse:
        policy = self.policy
        url = str(request.url)
        turn = await policy.apaced(url, asyncio.sleep)
        try:
            gate_pass = await policy.gate.aenter(url)
            try:
                return await self._send(request, handler, gate_pass)
            finally:
                gate_pass.release()
        finally:
            turn.release()

    async def _send(self, request: aiohttp.ClientRequest, handler: Handler, gate_pass: Pass) -> aiohttp.ClientResponse:
        policy = self.policy
        url = str(request.url)
        paid = await policy.apaid(url, request.headers, gate_pass)
        if paid is not None:
            request.headers.update(paid[0].headers(paid[1]))
        ahead_sent = paid is not None
        retries = 0
        while True:
            policy.sign(request.headers, url)
            gate_pass.sending()
            response = await handler(request)
            policy.saw(url, response.status, response.headers)
            gate_pass.saw(response.status, response.headers)
            body = None
            if policy.needs_body(response.status, response.headers, ahead_sent):
                body = await response.read()  # kept: the caller can read it again
            try:
                step = policy.step(response.status, response.headers, body, retries, response, ahead_sent, url=url)
            except PowShieldError:
                response.release()  # its body, if the shield's, was read: exc.response keeps it
                raise
            if step is None:
                return response
            if not _replayable(request):
                raise PowShieldError(
                    f"HTTP {response.status} asks to send the request again, "
                    "but its body is a stream that cannot be sent twice",
                    response,
                )
            retries += 0 if isinstance(step, Sign) else 1
            ahead_sent = False
            response.release()
            if isinstance(step, Wait):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Pay):
                nonce = await policy.asolve(step.challenge, response)
                _drop_solution(request)
                request.headers.update(step.challenge.headers(nonce))
            elif isinstance(step, Resend):
                _drop_solution(request)
