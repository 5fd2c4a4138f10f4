"""``pow_shield.HttpxAuth``: an ``httpx.Auth`` flow that pays its way."""

import functools
import inspect
import threading
import time
from typing import AsyncGenerator, Generator, Optional, Tuple, Union

import httpx

from ._ahead import Ahead
from ._challenge import HEADER_CHALLENGE, HEADER_NONCE, HEADER_SOLUTION, MAX_CHALLENGE_BODY
from ._gate import DEFAULT_IN_FLIGHT, Pass
from ._policy import DEFAULT_MAX_RETRIES, MAX_WAIT, Pay, Policy, Resend, Sign, Wait
from ._solver import DEFAULT_MAX_SOLVE_TIME


@functools.lru_cache(maxsize=None)
def _abandon_on_cancel() -> dict:
    # A cancelled request must not wait for its solve: anyio 4.1 calls this
    # abandon_on_cancel, older ones (Debian's 3.6) cancellable.
    import anyio.to_thread

    params = inspect.signature(anyio.to_thread.run_sync).parameters
    return {"abandon_on_cancel": True} if "abandon_on_cancel" in params else {"cancellable": True}


async def _read_capped(response: httpx.Response) -> Tuple[bytes, bool]:
    # Policy.read_capped for an async body; the response keeps it whole.
    chunks = response.aiter_bytes()
    parts = []
    size = 0
    async for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if size > MAX_CHALLENGE_BODY:
            head = b"".join(parts)
            response._content = head + b"".join([c async for c in chunks])
            return head, False
    response._content = b"".join(parts)
    return response._content, True


def _drop_solution(request: httpx.Request) -> None:
    for name in (HEADER_CHALLENGE, HEADER_NONCE, HEADER_SOLUTION):
        request.headers.pop(name, None)


class HttpxAuth(httpx.Auth):
    """An ``httpx`` auth flow that answers pow-shield challenges, for both
    ``httpx.Client`` and ``httpx.AsyncClient``.

    >>> client = httpx.Client(auth=pow_shield.HttpxAuth(max_difficulty=6))
    >>> client.get("https://api.example.com/items").json()

    Same behaviour and parameters as ``pow_shield.Session`` (among them
    ``max_solve_time``: 30 seconds per challenge by default, ``None`` for no
    limit; ``SolveTimeout`` beyond).  In the async
    flow the solve runs in a worker thread and waits use the event loop's
    sleep, so other tasks keep running; a cancelled request stops waiting at
    once and stops its solver too.  The request body is read before the first send so
    that it can be sent again.  ``in_flight`` (4): requests in flight per
    origin through this auth (an ``asyncio.gather`` of 50 waits its turn)
    while the client may be over the limit; the server's ``Remaining``
    opens it further.  ``bot``: a ``BotSigner``; every request (each resend
    too) is signed as that known bot (Web Bot Auth).  ``pay_ahead`` (True),
    ``pace`` (False) and ``ahead`` as for ``pow_shield.Session``: the next
    challenge is solved in a worker thread while the response is read, and
    an async request awaits that solve (or paces with the event loop's
    sleep) without blocking the loop.
    """

    requires_request_body = True

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
        bot: Optional[object] = None,
        pay_ahead: bool = True,
        pace: bool = False,
        ahead: Optional[Ahead] = None,
    ) -> None:
        self.policy = Policy(
            max_difficulty=max_difficulty,
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
        )

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        policy = self.policy
        request.read()
        url = str(request.url)
        with policy.paced(url), policy.gate.enter(url) as gate_pass:
            paid = policy.take_ahead(url, request.headers)
            if paid is not None:
                request.headers.update(paid)
            yield from self._sync_flow(request, gate_pass, paid is not None)

    def _sync_flow(
        self, request: httpx.Request, gate_pass: Pass, ahead_sent: bool
    ) -> Generator[httpx.Request, httpx.Response, None]:
        policy = self.policy
        policy.sign(request.headers, str(request.url))
        response = yield request
        retries = 0
        while True:
            gate_pass.saw(response.status_code, response.headers)
            policy.saw(str(response.url), response.status_code, response.headers)
            body = None
            if policy.needs_body(response.status_code, response.headers, ahead_sent):
                chunks = response.iter_bytes()
                head, whole = policy.read_capped(chunks)
                body = head if whole else None
                # what response.read() returns: the whole body
                response._content = head if whole else head + b"".join(chunks)
            step = policy.step(
                response.status_code, response.headers, body, retries, response, ahead_sent, url=str(request.url)
            )
            if step is None:
                return
            retries += 0 if isinstance(step, Sign) else 1
            ahead_sent = False
            if isinstance(step, Wait):
                time.sleep(step.seconds)
            elif isinstance(step, Pay):
                nonce = policy.solve(step.challenge, response)
                request.headers.update(step.challenge.headers(nonce))
            elif isinstance(step, Resend):
                _drop_solution(request)
            gate_pass.resending()
            policy.sign(request.headers, str(request.url))
            response = yield request

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        import anyio  # httpx's own dependency (through httpcore)
        import anyio.to_thread

        policy = self.policy
        await request.aread()
        url = str(request.url)
        turn = await policy.apaced(url, anyio.sleep)
        try:
            gate_pass = await policy.gate.aenter(url)
        except BaseException:
            turn.release()
            raise
        try:
            paid = await policy.atake_ahead(url, request.headers)
            if paid is not None:
                request.headers.update(paid)
            ahead_sent = paid is not None
            policy.sign(request.headers, url)
            response = yield request
            retries = 0
            while True:
                gate_pass.saw(response.status_code, response.headers)
                policy.saw(str(response.url), response.status_code, response.headers)
                body = None
                if policy.needs_body(response.status_code, response.headers, ahead_sent):
                    head, whole = await _read_capped(response)
                    body = head if whole else None
                step = policy.step(
                    response.status_code, response.headers, body, retries, response, ahead_sent, url=str(request.url)
                )
                if step is None:
                    return
                retries += 0 if isinstance(step, Sign) else 1
                ahead_sent = False
                if isinstance(step, Resend):
                    _drop_solution(request)
                elif isinstance(step, Wait):
                    await anyio.sleep(step.seconds)
                elif isinstance(step, Pay):
                    stop = threading.Event()
                    solve = functools.partial(policy.solve, step.challenge, response, stop)
                    try:
                        # Its own limiter: a long solve holds none of the places
                        # anyio shares among every to_thread call.
                        nonce = await anyio.to_thread.run_sync(
                            solve, limiter=anyio.CapacityLimiter(1), **_abandon_on_cancel()
                        )
                    finally:
                        stop.set()  # cancelled: the solver thread ends too
                    request.headers.update(step.challenge.headers(nonce))
                gate_pass.resending()
                policy.sign(request.headers, str(request.url))
                response = yield request
        finally:
            gate_pass.release()
            turn.release()

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        # httpx calls sync_auth_flow / async_auth_flow; this is for callers
        # that drive the generic flow themselves.
        return self.sync_auth_flow(request)
