"""A scripted stand-in for a shielded server: each request gets the next
scripted answer, and every request is recorded for the test to inspect."""

import base64
import http.server
import json
import os
import threading
from typing import Callable, Dict, List, Optional, Tuple

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
    consumed one per request; ``server.requests`` what came in."""

    def __init__(self) -> None:
        self.script: List = []
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
                with outer.lock:
                    outer.requests.append(Recorded(self.command, self.path, dict(self.headers), body))
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
