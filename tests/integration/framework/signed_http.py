"""Helpers of the signing tests: a real HTTP server that records what clients put on the wire and
answers what a test tells it, and the broker's own verifier applied to what it recorded."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import orjson

from broker_service.acl.signature import SignedRequest, verify
from framework.signing import Credentials

BOB = Credentials("bob-bank", "bob-bank-secret-2026")
SMITH = Credentials("smith-bank", "smith-bank-secret-2026")
SECRETS = {c.access_key: c.secret_key for c in (BOB, SMITH)}
SIGNATURE_HEADERS = (
    "authorization",
    "x-halfmq-accesskey",
    "x-halfmq-timestamp",
    "x-halfmq-nonce",
    "x-halfmq-signature",
)

# One answer every call of the framework and the CLI can read (each takes the fields it needs).
ANY_ROUTE: dict[str, Any] = {
    "msg_id": "msg-1",
    "topic": "transfers",
    "queue_id": 0,
    "queue_offset": 0,
    "duplicate": False,
    "transaction_id": "tx-1",
    "state": "COMMITTED",
    "messages": [],
    "checks": [],
    "topics": [],
    "transactions": [],
    "acked": 0,
    "results": [],
}


@dataclass(frozen=True)
class Captured:
    """One request as it arrived: the target (path and query) exactly as sent."""

    method: str
    target: str
    headers: dict[str, str]  # names in lower case
    body: bytes

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def signed(self) -> bool:
        return any(name in self.headers for name in SIGNATURE_HEADERS)


Reply = Callable[[Captured], tuple[int, Any]]


def answer_everything(_: Captured) -> tuple[int, Any]:
    return 200, ANY_ROUTE


def refuse(status: int, code: str, message: str, **detail: Any) -> Reply:
    """Answer every request as the broker's ACL refuses one."""
    envelope = {"error": {"code": code, "message": message, "detail": detail}}
    return lambda _: (status, envelope)


class CaptureServer:
    """``with CaptureServer() as server:`` a real HTTP server on 127.0.0.1 (any method), recording
    each request in ``server.requests`` and answering ``reply(request)`` as JSON."""

    def __init__(self, reply: Reply = answer_everything) -> None:
        self.reply = reply
        self.requests: list[Captured] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def handle_one(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {name.lower(): value for name, value in self.headers.items()}
                request = Captured(self.command, self.path, headers, body)
                with capture._lock:
                    capture.requests.append(request)
                status, answer = capture.reply(request)
                content = orjson.dumps(answer)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_DELETE = handle_one

            def log_message(self, *_: Any) -> None:
                pass

        return Handler

    def __enter__(self) -> CaptureServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def broker_verifies(
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes,
    now: int | None = None,
) -> SignedRequest:
    """What the broker's own verifier makes of a request (raises AclUnauthenticated)."""
    path, _, query = target.partition("?")
    digest = hashlib.sha256(body).hexdigest()
    return verify(dict(headers), method, path, query, digest, now or now_ms(), SECRETS.get)


def verified(request: Captured) -> SignedRequest:
    return broker_verifies(request.method, request.target, request.headers, request.body)
