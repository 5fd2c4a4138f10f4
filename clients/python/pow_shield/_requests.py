"""pow-shield for ``requests``, the ways its users compose it:

* ``RequestsAuth``: an ``auth=`` object (``requests.get(url,
  auth=pow_shield.RequestsAuth())``) that pays from the response hook and
  sends the request again, as ``requests.auth.HTTPDigestAuth`` does;
* ``HTTPAdapter``: a transport adapter to ``mount`` on any session,
  including your own ``Session`` subclass;
* ``Session``: a ``requests.Session`` with that adapter mounted, for one
  line of code.

All three take the same options and follow ``Policy``, as the httpx flow
and the CLI do.
"""

import io
import time
import weakref
from typing import Any, Callable, Iterator, Optional, Union

import requests
import requests.adapters
from requests.utils import rewind_body

from ._ahead import Ahead
from ._challenge import HEADER_CHALLENGE, HEADER_NONCE, HEADER_SOLUTION
from ._errors import PowShieldError
from ._gate import DEFAULT_IN_FLIGHT, Pass
from ._policy import DEFAULT_MAX_RETRIES, MAX_WAIT, Pay, Policy, Resend, Sign, Wait
from ._solver import DEFAULT_MAX_SOLVE_TIME


def _replayable(request: requests.PreparedRequest) -> bool:
    body = request.body
    if body is None or isinstance(body, (bytes, str)):
        return True
    # a file: requests noted where it started (prepare_body)
    return getattr(request, "_body_position", None) is not None


class _Rest:
    """A response body whose first bytes were read already: those, then
    the rest as it comes (``requests`` reads ``raw`` through ``read``)."""

    def __init__(self, head: bytes, chunks: Iterator[bytes], raw: Any) -> None:
        self._head = head
        self._chunks = chunks
        self._raw = raw

    def read(self, amt: Optional[int] = None, **_: Any) -> bytes:
        if self._head:
            head, self._head = self._head, b""
            return head
        return next(self._chunks, b"")

    def close(self) -> None:
        self._raw.close()

    def release_conn(self) -> None:
        release = getattr(self._raw, "release_conn", None)
        if release is not None:
            release()


def _read_rest(response: requests.Response) -> None:
    """Reads a body handed back unbuffered into ``response.content``,
    holding it once (not its chunks and their join)."""
    whole = io.BytesIO()
    for chunk in response.iter_content(1 << 16):
        whole.write(chunk)
    response._content = whole.getvalue()
    response._content_consumed = True


def _discard(response: requests.Response, policy: Policy) -> None:
    """Done with an answer paid past: a small body is read (the connection
    goes back to the pool), a large one is not (the connection closes)."""
    if not response._content_consumed:
        policy.read_capped(response.iter_content(8192))
    response.close()


def _pay(
    policy: Policy,
    request: requests.PreparedRequest,
    response: requests.Response,
    send: Callable[[requests.PreparedRequest], requests.Response],
    stream: bool,
    gate_pass: Optional[Pass] = None,
    ahead_sent: bool = False,
) -> requests.Response:
    """Follows ``response`` (to a streamed send of ``request``) through its
    challenges: solve or wait, ``send`` again, until an answer that is not
    the shield's.  The answers paid for go first in its ``history``; its
    body is read unless ``stream``.  ``gate_pass`` hears of every answer,
    and ``policy.saw`` too, before the body is read (a next challenge
    solves meanwhile).  ``ahead_sent``: ``request`` carries a solution paid
    ahead."""
    retries = 0
    history = []
    while True:
        if gate_pass is not None:
            gate_pass.saw(response.status_code, response.headers)
        policy.saw(request.url or "", response.status_code, response.headers)
        body = None
        if policy.needs_body(response.status_code, response.headers, ahead_sent):
            chunks = response.iter_content(8192)
            head, whole = policy.read_capped(chunks)
            body = head if whole else None
            if whole:
                response._content = head
                response._content_consumed = True
            else:
                # Not the shield's: handed back unbuffered, the rest unread.
                response.raw = _Rest(head, chunks, response.raw)
        step = policy.step(
            response.status_code, response.headers, body, retries, response, ahead_sent, url=request.url
        )
        if step is None:
            if isinstance(response.raw, _Rest) and not stream:
                _read_rest(response)
            elif not stream:
                response.content  # noqa: B018 - read it now, as requests would
            break
        if not _replayable(request):
            raise PowShieldError(
                f"HTTP {response.status_code} asks to send the request again, "
                "but its body is a stream that cannot be sent twice",
                response,
            )
        retries += 0 if isinstance(step, Sign) else 1
        ahead_sent = False
        request = request.copy()
        if isinstance(step, Wait):
            time.sleep(step.seconds)
        elif isinstance(step, Pay):
            nonce = policy.solve(step.challenge, response)
            request.headers.update(step.challenge.headers(nonce))
        elif isinstance(step, Resend):
            _drop_solution(request)
        if request.body is not None and not isinstance(request.body, (bytes, str)):
            rewind_body(request)
        _discard(response, policy)
        history.append(response)
        if gate_pass is not None:
            gate_pass.resending()
        policy.sign(request.headers, request.url or "")
        response = send(request)
    if history:
        response.history = history + list(response.history)
    return response


def _drop_solution(request: requests.PreparedRequest) -> None:
    for name in (HEADER_CHALLENGE, HEADER_NONCE, HEADER_SOLUTION):
        request.headers.pop(name, None)




class RequestsAuth(requests.auth.AuthBase):
    """An ``auth=`` for ``requests`` that answers pow-shield challenges.

    >>> requests.get("https://api.example.com/items", auth=pow_shield.RequestsAuth())

    Works with ``requests.get`` and with any session (``session.auth =
    RequestsAuth()``), whatever its class.  Its response hook sees each
    answer; a challenge is solved and the request sent again on the same
    connection pool, as ``HTTPDigestAuth`` does for a 401.  The request
    carries no other authentication: for an API key as well, send it as a
    header.  The keyword options (``max_difficulty``, ``max_solve_time``,
    ``prefer_wait``, ``max_wait``, ``max_retries``, ``processes``) and the
    errors are those of ``pow_shield.Session``; or give a whole ``policy``.
    The solutions paid ahead are kept for the whole process by default,
    so that each ``RequestsAuth()`` of a ``requests.get`` finds the one the
    last response brought.
    """

    def __init__(self, *, policy: Optional[Policy] = None, **options: Any) -> None:
        self.policy = policy or Policy(**options)

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        # Its pacing turn: ended with the response hook, or when the
        # request is dropped unanswered.
        turn = self.policy.paced(request.url or "")
        request._pow_shield_turn = turn  # type: ignore[attr-defined]
        weakref.finalize(request, turn.release)
        request.register_hook("response", self.handle_response)
        # The request's place in the per-origin gate, taken before it is
        # sent: given back by the response hook, or when the request is
        # dropped unanswered (a connection error).
        gate_pass = self.policy.gate.enter(request.url or "")
        request._pow_shield_pass = gate_pass  # type: ignore[attr-defined]
        weakref.finalize(request, gate_pass.release)
        # The solution paid ahead, if any (waiting for its solve).
        paid = self.policy.take_ahead(request.url or "", request.headers)
        if paid is not None:
            request.headers.update(paid)
        request._pow_shield_ahead = paid is not None  # type: ignore[attr-defined]
        self.policy.sign(request.headers, request.url or "")
        return request

    def handle_response(self, response: requests.Response, **kwargs: Any) -> requests.Response:
        """The response hook: the answer itself, or the one the challenges
        paid for (``requests`` hands that to the caller)."""
        stream = kwargs.get("stream", False)
        kwargs["stream"] = True
        adapter = response.connection

        def send(prepared: requests.PreparedRequest) -> requests.Response:
            return adapter.send(prepared, **kwargs)

        # Redirect hops (copies of the request) pass no gate of their own.
        request = response.request
        gate_pass = getattr(request, "_pow_shield_pass", None)
        ahead_sent = getattr(request, "_pow_shield_ahead", False)
        try:
            answer = _pay(self.policy, request, response, send, stream, gate_pass, ahead_sent)
        finally:
            if gate_pass is not None:
                gate_pass.release()
            turn = getattr(request, "_pow_shield_turn", None)
            if turn is not None:
                turn.release()
        if ahead_sent and answer.is_redirect:
            # requests builds the next hop from this request: the solution
            # it carried was used once.
            _drop_solution(request)
        return answer


class HTTPAdapter(requests.adapters.HTTPAdapter):
    """A ``requests`` transport adapter that answers pow-shield challenges;
    mount it on any session:

    >>> s = MySession()
    >>> s.mount("https://api.example.com/", pow_shield.HTTPAdapter(max_difficulty=6))

    Each request sent through it (each redirect hop too) pays for itself.
    The options are those of ``pow_shield.Session``, except that
    ``max_retries`` keeps its meaning for ``requests.adapters.HTTPAdapter``
    (urllib3's connection retries): the number of challenges paid per
    request is ``pow_retries`` (5 by default, or a whole ``policy``).
    Other keyword arguments go to ``requests.adapters.HTTPAdapter``.
    """

    _POW_OPTIONS = (
        "max_difficulty",
        "max_solve_time",
        "prefer_wait",
        "max_wait",
        "processes",
        "in_flight",
        "bot",
        "pay_ahead",
        "pace",
        "ahead",
    )

    def __init__(
        self,
        *,
        policy: Optional[Policy] = None,
        pow_retries: int = DEFAULT_MAX_RETRIES,
        **args: Any,
    ) -> None:
        options = {k: args.pop(k) for k in self._POW_OPTIONS if k in args}
        super().__init__(**args)
        self.pow_policy = policy or Policy(max_retries=pow_retries, **options)

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        # Streamed, so that a challenge's body is read only as far as needed;
        # the answer handed back is read whole unless the caller streams.
        stream = kwargs.pop("stream", False)

        def send(prepared: requests.PreparedRequest) -> requests.Response:
            return super(HTTPAdapter, self).send(prepared, stream=True, **kwargs)

        policy = self.pow_policy
        with policy.paced(request.url or ""), policy.gate.enter(request.url or "") as gate_pass:
            paid = policy.take_ahead(request.url or "", request.headers)
            if paid is not None:
                # A copy: the caller's request (a redirect is built from
                # it) does not keep the solution sent ahead.
                request = request.copy()
                request.headers.update(paid)
            ahead_sent = paid is not None
            policy.sign(request.headers, request.url or "")
            return _pay(policy, request, send(request), send, stream, gate_pass, ahead_sent)


class Session(requests.Session):
    """A ``requests.Session`` that answers pow-shield challenges: the
    convenience of ``HTTPAdapter`` mounted for ``http://`` and ``https://``.

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
    ``max_retries`` (5, as every client): paid or waited resends per request
    before ``RetriesExhausted``.
    ``processes``: solver processes (see ``pow_shield.solve``).
    ``in_flight`` (4): requests in flight per origin (threads sharing the
    session wait their turn) while the client may be over the limit,
    ``n - 1`` for the server's ``n`` strikes; the server's ``Remaining``
    opens it further.  So 50 threads over the limit are all paid, never
    blocked.

    ``bot``: a ``BotSigner``; every request (each resend too) is signed as
    that known bot (Web Bot Auth).

    ``pay_ahead`` (True): the next challenge a response sends
    (``X-PoW-Next-Challenge``) is solved in a worker thread while the
    response is read, and sent with the next request to that origin (one
    round trip per paid request, no 429); a solution refused or expired
    falls back to the 429 path.  ``pace`` (False): when an answer shows no
    request left, wait for the server's reset (up to ``max_wait``) before
    the next request to that origin instead of paying.  ``ahead``: an
    ``Ahead`` store of your own for the solutions ahead (one per process
    by default).

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
        max_wait: float = MAX_WAIT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        processes: Optional[int] = None,
        in_flight: int = DEFAULT_IN_FLIGHT,
        bot: Optional[Any] = None,
        pay_ahead: bool = True,
        pace: bool = False,
        ahead: Optional[Ahead] = None,
    ) -> None:
        super().__init__()
        self.pow_policy = Policy(
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
        adapter = HTTPAdapter(policy=self.pow_policy)
        self.mount("http://", adapter)
        self.mount("https://", adapter)
