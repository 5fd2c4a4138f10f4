"""A scripted stand-in for a shielded server: each request gets the next
scripted answer, and every request is recorded for the test to inspect."""

import base64
import hashlib
import http.server
import json
import math
import os
import threading
import time
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Tuple

Answer = Tuple[int, Dict[str, str], bytes]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_token(salt: str, difficulty: int, **extra) -> str:
    """A token for (salt, difficulty); ``extra`` adds payload fields (``exp``...)."""
    payload = json.dumps({"ip": "127.0.0.1", "ts": 0, "difficulty": difficulty, "salt": salt, **extra})
    return token_of(payload.encode())


def token_of(payload: bytes) -> str:
    """A token whose payload is these bytes."""
    # the client never checks the MAC; any second part will do
    return b64url(payload) + "." + b64url(b"not-a-real-mac")


class Recorded:
    def __init__(self, method: str, path: str, headers: Dict[str, str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body

    def header(self, name: str) -> Optional[str]:
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return None


class FakeServer:
    """``server.script`` is a list of answers (or callables returning one),
    consumed one per request; ``server.requests`` what came in.  With
    ``server.responder`` set (a ``Shield``), it answers every request instead."""

    def __init__(self) -> None:
        self.script: List = []
        self.responder: Optional[Callable[[Recorded], Answer]] = None
        self.requests: List[Recorded] = []
        #: token -> (salt, difficulty) of every challenge handed out
        self.issued: Dict[str, Tuple[str, int]] = {}
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle(self) -> None:
                try:
                    super().handle()
                except ConnectionResetError:  # a client that stopped reading a body
                    pass

            def log_message(self, *args) -> None:  # quiet
                pass

            def _answer(self) -> None:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    body = self._read_chunked()
                else:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = self.rfile.read(length) if length else b""
                recorded = Recorded(self.command, self.path, dict(self.headers), body)
                with outer.lock:
                    outer.requests.append(recorded)
                    if outer.responder is not None:
                        entry = outer.responder(recorded)
                    else:
                        entry = outer.script.pop(0) if outer.script else (500, {}, b"script exhausted")
                status, headers, payload = entry() if callable(entry) else entry
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _read_chunked(self) -> bytes:
                body = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return body
                    body += self.rfile.read(size)
                    self.rfile.readline()

            do_GET = do_POST = do_PUT = _answer

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> "FakeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def url(self, path: str = "/api/items") -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    # -- scripted answers -------------------------------------------------

    def challenge(
        self,
        status: int = 429,
        difficulty: int = 1,
        retry_after: Optional[str] = "1",
        error: str = "PoW challenge required",
        **payload_extra,
    ) -> Callable[[], Answer]:
        """A challenge answer with a new salt, issued when it is sent;
        ``payload_extra`` adds fields to the token's payload (``exp``...)."""

        def answer() -> Answer:
            salt = os.urandom(16).hex()
            token = make_token(salt, difficulty, **payload_extra)
            with self.lock:
                self.issued[token] = (salt, difficulty)
            body = json.dumps(
                {
                    "error": error,
                    "challenge": token,
                    "difficulty": difficulty,
                    "salt": salt,
                    "algorithm": "sha256",
                    "expires_in": 30,
                    "instructions": "...",
                }
            ).encode()
            headers = {
                "Content-Type": "application/json",
                "X-PoW-Challenge": token,
                "X-PoW-Difficulty": str(difficulty),
                "Cache-Control": "no-store",
            }
            if retry_after is not None:
                headers["Retry-After"] = retry_after
            return status, headers, body

        return answer

    def body_challenge(self, token_suffix: str = "", difficulty: int = 1) -> Callable[[], Answer]:
        """A 429 whose challenge is only in the JSON body, its token followed
        by ``token_suffix`` (a hostile server's CR/LF)."""
        plain = self.challenge(difficulty=difficulty)

        def answer() -> Answer:
            status, headers, body = plain()
            del headers["X-PoW-Challenge"]
            doc = json.loads(body)
            doc["challenge"] += token_suffix
            return status, headers, json.dumps(doc).encode()

        return answer

    @staticmethod
    def ok(body: bytes = b'{"ok":true}') -> Answer:
        return 200, {"Content-Type": "application/json"}, body

    @staticmethod
    def blocked(kind: str = "blocked", status: int = 403) -> Answer:
        return status, {"Content-Type": "text/plain", "X-PoW-Shield": kind}, b"Blocked by Circuit Breaker"

    @staticmethod
    def unavailable(retry_after: str = "0") -> Answer:
        return 503, {"Content-Type": "application/json", "Retry-After": retry_after}, b'{"error":"Rate limiter unavailable"}'

    @staticmethod
    def error(status: int, message: str) -> Answer:
        return status, {"Content-Type": "application/json"}, json.dumps({"error": message}).encode()


class Shield:
    """The module's decision, simulated for one client (SPEC sections 3 and
    4): ``limit`` requests per sliding ``window`` seconds, then 429 with a
    challenge; a valid unspent solution admits one request over the limit
    (spent), under the limit it passes unspent.  With ``pay_ahead``, the
    next challenge (``X-PoW-Next-*``) goes on every answer after which no
    request is left and on every answer to a request with a valid solution.
    Tokens live 30 s (``exp - ts``), those sent ahead ``ahead_lifetime_ms``.  ``refuse``: statuses (403,
    409) that answer the next solutions over the limit instead of checking
    them.  ``results`` has one ``$pow_shield_result`` per request."""

    def __init__(self, limit: int = 1, window: float = 3600.0, difficulty: int = 1,
                 pay_ahead: bool = True, ahead_lifetime_ms: int = 30000, refuse: Tuple[int, ...] = ()) -> None:
        self.limit = limit
        self.window = window
        self.difficulty = difficulty
        self.pay_ahead = pay_ahead
        self.ahead_lifetime_ms = ahead_lifetime_ms
        self.refuse = list(refuse)
        self.results: List[str] = []
        self.statuses: List[int] = []
        #: token -> (salt, exp) of every challenge handed out
        self.tokens: Dict[str, Tuple[str, int]] = {}
        #: the tokens handed out as X-PoW-Next-Challenge, in order
        self.next_tokens: List[str] = []
        self.spent: set = set()
        self.counted: Deque[float] = deque()

    def _token(self, lifetime_ms: int = 30000) -> str:
        salt = os.urandom(16).hex()
        now_ms = int(time.time() * 1000)
        exp = now_ms + lifetime_ms
        token = make_token(salt, self.difficulty, ts=now_ms, exp=exp, bits=4 * self.difficulty)
        self.tokens[token] = (salt, exp)
        return token

    def _valid(self, token: Optional[str], nonce: Optional[str]) -> Optional[str]:
        """None for a valid unspent solution, else why not (a status name)."""
        if token not in self.tokens or not nonce:
            return "forged"
        salt, exp = self.tokens[token]
        if time.time() * 1000 > exp:
            return "expired"
        if not hashlib.sha256((salt + nonce).encode()).hexdigest().startswith("0" * self.difficulty):
            return "wrong"
        return "spent" if token in self.spent else None

    def _limits(self, now: float) -> Dict[str, str]:
        left = self.limit - len(self.counted)
        reset = math.ceil(self.counted[0] + self.window - now) if self.counted else 0
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(left),
            "X-RateLimit-Reset": str(math.ceil(time.time() + reset)),
            "RateLimit": f'"pow-shield";r={left};t={reset}',
        }

    def _answer(self, status: int, result: str, headers: Dict[str, str], body: dict) -> Answer:
        self.statuses.append(status)
        self.results.append(result)
        headers = {"Content-Type": "application/json", **headers}
        return status, headers, json.dumps(body).encode()

    def _challenge(self, status: int, error: str, headers: Dict[str, str]) -> Answer:
        token = self._token()
        headers = {**headers, "X-PoW-Challenge": token, "X-PoW-Difficulty": str(self.difficulty)}
        if status == 429:
            headers["Retry-After"] = "1"
        body = {"error": error, "challenge": token, "difficulty": self.difficulty, "algorithm": "sha256"}
        return self._answer(status, "challenge" if status == 429 else "invalid", headers, body)

    def _with_next(self, headers: Dict[str, str]) -> Dict[str, str]:
        if not self.pay_ahead:
            return headers
        token = self._token(self.ahead_lifetime_ms)
        self.next_tokens.append(token)
        return {**headers, "X-PoW-Next-Challenge": token, "X-PoW-Next-Bits": str(4 * self.difficulty),
                "X-PoW-Next-Difficulty": str(self.difficulty)}

    def __call__(self, request: Recorded) -> Answer:
        now = time.monotonic()
        while self.counted and self.counted[0] <= now - self.window:
            self.counted.popleft()
        token, nonce = request.header("X-PoW-Challenge"), request.header("X-PoW-Nonce")
        valid = token is not None and self._valid(token, nonce) is None
        if len(self.counted) < self.limit:
            self.counted.append(now)
            headers = self._limits(now)
            if valid or len(self.counted) == self.limit:
                headers = self._with_next(headers)
            return self._answer(200, "pass", headers, {"ok": True})
        headers = self._limits(now)
        if token is None:
            return self._challenge(429, "PoW challenge required", headers)
        if self.refuse:
            status = self.refuse.pop(0)
            if status == 403:
                body = {"type": "tag:pow-shield,2026:invalid-signature", "error": "Invalid challenge signature"}
                return self._answer(403, "invalid", headers, body)
            return self._challenge(status, "Challenge already spent", headers)
        why = self._valid(token, nonce)
        if why == "forged":
            return self._answer(403, "invalid", headers, {"error": "Invalid challenge signature"})
        if why is not None:
            status = {"expired": 410, "wrong": 422, "spent": 409}[why]
            return self._challenge(status, why, headers)
        self.spent.add(token)
        return self._answer(200, "solved", self._with_next(headers), {"ok": True})
