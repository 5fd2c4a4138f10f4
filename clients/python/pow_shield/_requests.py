"""``pow_shield.Session``: a ``requests.Session`` that pays its way."""

import time
from typing import Any, Optional, Union

import requests
from requests.utils import rewind_body

from ._errors import PowShieldError
from ._policy import Pay, Policy, Wait
from ._solver import DEFAULT_MAX_SOLVE_TIME


def _replayable(request: requests.PreparedRequest) -> bool:
    body = request.body
    if body is None or isinstance(body, (bytes, str)):
        return True
    # a file: requests noted where it started (prepare_body)
    return getattr(request, "_body_position", None) is not None


class Session(requests.Session):
    """A ``requests.Session`` that answers pow-shield challenges.

    >>> s = pow_shield.Session(max_difficulty=6)
    >>> s.get("https://api.example.com/items").json()

    A 429 with a challenge is solved and the request sent again with the
    solution; so is the fresh challenge of a 409, 410 or 422.  The circuit
    breaker's answer raises ``Blocked`` or ``Banned``; a challenge that
    cannot be read or sent back (CR/LF in its token, JSON nested too deep)
    raises ``BadChallenge`` before any work.

    ``max_difficulty``: raise ``TooDifficult`` instead of solving above it.
    ``max_solve_time`` (30): seconds per challenge; ``SolveTimeout`` beyond;
    ``None`` for no limit.  The client cannot check a challenge's signature,
    so without a bound a hostile server's forged difficulty 12 would keep
    every core busy for months.
    ``prefer_wait``: True to sleep ``Retry-After`` on 429/503 instead of
    paying; a number of seconds to sleep only when ``Retry-After`` is at
    most that, paying otherwise.
    ``max_wait`` (60): the longest ``Retry-After`` ever slept, whatever
    ``prefer_wait`` says; a longer one is paid (as the CLI's ``--max-wait``).
    ``max_retries``: paid or waited resends per request before
    ``RetriesExhausted``.
    ``processes``: solver processes (see ``pow_shield.solve``).

    Bodies are sent again as they were: bytes and strings always, files by
    seeking back; a generator body cannot be sent twice and raises
    ``PowShieldError`` when a challenge comes back.
    """

    def __init__(
        self,
        *,
        max_difficulty: Optional[int] = None,
        max_solve_time: Optional[float] = DEFAULT_MAX_SOLVE_TIME,
        prefer_wait: Union[bool, float] = False,
        max_wait: float = 60.0,
        max_retries: int = 3,
        processes: Optional[int] = None,
    ) -> None:
        super().__init__()
        self.pow_policy = Policy(
            max_difficulty=max_difficulty,
            max_solve_time=max_solve_time,
            prefer_wait=prefer_wait,
            max_wait=max_wait,
            max_retries=max_retries,
            processes=processes,
        )

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        # Session.send also runs for each redirect hop, so every hop pays
        # for itself.
        policy = self.pow_policy
        # Streamed, so that a challenge's body is read only as far as needed;
        # the answer handed back is read whole unless the caller streams.
        stream = kwargs.pop("stream", False)
        kwargs["stream"] = True
        response = super().send(request, **kwargs)
        retries = 0
        history = []
        while True:
            body = None
            if policy.needs_body(response.status_code, response.headers):
                chunks = response.iter_content(8192)
                head, whole = policy.read_capped(chunks)
                body = head if whole else None
                response._content = head if whole else head + b"".join(chunks)
                response._content_consumed = True
            step = policy.step(response.status_code, response.headers, body, retries, response)
            if step is None:
                if not stream:
                    response.content  # noqa: B018 - read it now, as requests would
                break
            if not _replayable(request):
                raise PowShieldError(
                    f"HTTP {response.status_code} asks to send the request again, "
                    "but its body is a stream that cannot be sent twice",
                    response,
                )
            retries += 1
            request = request.copy()
            if isinstance(step, Wait):
                time.sleep(step.seconds)
            elif isinstance(step, Pay):
                nonce = policy.solve(step.challenge, response)
                request.headers.update(step.challenge.headers(nonce))
            if request.body is not None and not isinstance(request.body, (bytes, str)):
                rewind_body(request)
            response.close()
            history.append(response)
            response = super().send(request, **kwargs)
        if history:
            # the paid-for answers first, then the redirects that followed
            response.history = history + list(response.history)
        return response
