"""``pow_shield.HttpxAuth``: an ``httpx.Auth`` flow that pays its way."""

import functools
import time
from typing import AsyncGenerator, Generator, Optional, Union

import httpx

from ._policy import Pay, Policy, Wait


class HttpxAuth(httpx.Auth):
    """An ``httpx`` auth flow that answers pow-shield challenges, for both
    ``httpx.Client`` and ``httpx.AsyncClient``.

    >>> client = httpx.Client(auth=pow_shield.HttpxAuth(max_difficulty=6))
    >>> client.get("https://api.example.com/items").json()

    Same behaviour and parameters as ``pow_shield.Session``.  In the async
    flow the solve runs in a worker thread and waits use the event loop's
    sleep, so other tasks keep running; a cancelled request stops waiting at
    once, while its solver thread ends on its own (at the solution or
    ``max_solve_time``).  The request body is read before the first send so
    that it can be sent again.
    """

    requires_request_body = True

    def __init__(
        self,
        *,
        max_difficulty: Optional[int] = None,
        max_solve_time: Optional[float] = None,
        prefer_wait: Union[bool, float] = False,
        max_retries: int = 3,
        processes: Optional[int] = None,
    ) -> None:
        self.policy = Policy(
            max_difficulty=max_difficulty,
            max_solve_time=max_solve_time,
            prefer_wait=prefer_wait,
            max_retries=max_retries,
            processes=processes,
        )

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        policy = self.policy
        request.read()
        response = yield request
        retries = 0
        while True:
            body = response.read() if policy.needs_body(response.status_code, response.headers) else None
            step = policy.step(response.status_code, response.headers, body, retries, response)
            if step is None:
                return
            retries += 1
            if isinstance(step, Wait):
                time.sleep(step.seconds)
            elif isinstance(step, Pay):
                nonce = policy.solve(step.challenge, response)
                request.headers.update(step.challenge.headers(nonce))
            response = yield request

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        import anyio  # httpx's own dependency (through httpcore)
        import anyio.to_thread

        policy = self.policy
        await request.aread()
        response = yield request
        retries = 0
        while True:
            body = await response.aread() if policy.needs_body(response.status_code, response.headers) else None
            step = policy.step(response.status_code, response.headers, body, retries, response)
            if step is None:
                return
            retries += 1
            if isinstance(step, Wait):
                await anyio.sleep(step.seconds)
            elif isinstance(step, Pay):
                solve = functools.partial(policy.solve, step.challenge, response)
                nonce = await anyio.to_thread.run_sync(solve)
                request.headers.update(step.challenge.headers(nonce))
            response = yield request

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        # httpx calls sync_auth_flow / async_auth_flow; this is for callers
        # that drive the generic flow themselves.
        return self.sync_auth_flow(request)
