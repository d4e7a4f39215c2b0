"""Push check-back without a web framework: a small HTTP server that answers the broker's checks.

The broker POSTs ``{"transaction_id", "msg_id", "topic", "tags", "keys", "body", "encoding",
"properties", "check_times"}`` and reads ``{"state": "COMMIT|ROLLBACK|UNKNOWN"}``, one request per
connection.  Services with FastAPI mount :func:`framework.fastapi.check_router` instead.

After a producer outage every broker pushes a burst of checks at once (up to 32 each, from several
brokers), so both servers listen with a backlog of :data:`BACKLOG` connections (the defaults, 5 for
``socketserver`` and 100 for asyncio, make the kernel refuse or drop them) and answer at most
:data:`MAX_CONCURRENT_CHECKS` checks at a time: the thread server with that many daemon worker
threads, the asyncio server with a semaphore.  Checks beyond the bound wait their turn instead of
being refused; the ones still waiting when the server closes are dropped (the broker checks again
on its next round), so closing never waits for a burst to drain.

A broker that goes away before its answer is written -- it timed out, or died -- costs one WARNING
line naming it (:func:`connection_lost`), no traceback: the broker counts or retries the check on
its side, and the server goes on.

With credentials (a broker with the ACL on), the broker signs each check with the producer's own
keys, and both servers verify it before anything else (:func:`refusal`): a check that is unsigned,
signed with another key, forged, altered, older than the window or replayed is answered 401 with
the broker's error shape and never reaches the producer's checker.  Without credentials checks
are accepted unsigned, as a broker without ACL sends them.  The signature covers the path the
broker posted to, so a proxy in front of the server must not rewrite it.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from framework.errors import SignatureRejected
from framework.message import LocalTransactionState, Message
from framework.protocol import check_message
from framework.signing import CheckVerifier, Credentials, check_verifier

log = logging.getLogger("halfmq.checks")

CHECK_PATH = "/halfmq/check"
# Room for every broker's whole burst in the kernel's accept queue (Linux caps it at somaxconn).
BACKLOG = max(1024, socket.SOMAXCONN)
# Checks answered at once: each runs the user's check (often a database query), so an unbounded
# burst would only contend for the same connections; the rest wait for a free slot.
MAX_CONCURRENT_CHECKS = 16
# A connection that sends no complete request within this long is closed, so a silent client
# cannot hold one of the bounded slots.
READ_TIMEOUT_SECONDS = 10.0

_NOT_A_CHECK = b'{"error": "not a check"}'
_Connection = tuple[socket.socket, Any]


def answer_body(state: LocalTransactionState) -> bytes:
    return orjson.dumps({"state": state.check_answer})


def parse_check(content: bytes) -> Message:
    data = orjson.loads(content)
    if not isinstance(data, dict):
        raise TypeError("a check is a JSON object")
    return check_message(data)


def refusal(
    verifier: CheckVerifier | None,
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes,
) -> SignatureRejected | None:
    """Why a check sent to ``target`` (path and query, as received) must not be answered, or
    ``None`` when it may: it verified, or there is no verifier (the producer has no credentials)."""
    if verifier is None:
        return None
    path, _, raw_query = target.partition("?")
    try:
        verifier.verify(headers, method, path, raw_query, body)
    except SignatureRejected as exc:
        log.warning("refused a push check: %s", exc)
        return exc
    return None


def refusal_body(refused: SignatureRejected) -> bytes:
    return orjson.dumps(refused.envelope())


def connection_lost(peer: Any, error: BaseException) -> None:
    """The one line for a broker that closed its connection before its answer was written."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        peer = f"{peer[0]}:{peer[1]}"
    what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    log.warning(
        "push check from %s: the broker closed the connection before the answer was written (%s)",
        peer,
        what,
    )


class PooledHTTPServer(ThreadingHTTPServer):
    """A :class:`ThreadingHTTPServer` whose connections are answered by a fixed set of daemon
    worker threads: the accept loop queues each connection, and a free worker takes it.
    ``server_close()`` stops the workers; connections still queued are closed unanswered."""

    request_queue_size = BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        max_workers: int = MAX_CONCURRENT_CHECKS,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, not {max_workers}")
        super().__init__(address, handler)
        self._pending: queue.SimpleQueue[_Connection | None] = queue.SimpleQueue()
        self._closed = False
        self.workers = [
            threading.Thread(target=self._work, name=f"halfmq-check-worker-{n}", daemon=True)
            for n in range(max_workers)
        ]
        for worker in self.workers:
            worker.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        if self._closed:
            self.shutdown_request(request)
        else:
            self._pending.put((request, client_address))

    def server_close(self) -> None:
        self._closed = True
        super().server_close()
        for _ in self.workers:
            self._pending.put(None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A broker gone before its answer (reset, broken pipe) is one WARNING line; anything else
        is the standard report."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            connection_lost(client_address, error)
        else:
            super().handle_error(request, client_address)

    def _work(self) -> None:
        while (connection := self._pending.get()) is not None:
            request, client_address = connection
            if self._closed:
                self.shutdown_request(request)
            else:
                self.process_request_thread(request, client_address)


def start_thread_server(
    answer: Callable[[Message], LocalTransactionState],
    host: str,
    port: int,
    *,
    max_workers: int = MAX_CONCURRENT_CHECKS,
    credentials: Credentials | None = None,
) -> tuple[PooledHTTPServer, str]:
    """Serve checks from a background thread; stop with ``shutdown()`` then ``server_close()``.
    With ``credentials``, only checks signed with them are answered."""
    verifier = check_verifier(credentials)

    class Handler(BaseHTTPRequestHandler):
        timeout = READ_TIMEOUT_SECONDS

        def do_POST(self) -> None:
            try:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            except ValueError:
                self._reply(400, _NOT_A_CHECK)
                return
            refused = refusal(verifier, "POST", self.path, dict(self.headers.items()), body)
            if refused is not None:
                self._reply(refused.status, refusal_body(refused))
                return
            try:
                check = parse_check(body)
            except (ValueError, KeyError, TypeError):
                self._reply(400, _NOT_A_CHECK)
                return
            self._reply(200, answer_body(answer(check)))

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = PooledHTTPServer((host, port), Handler, max_workers=max_workers)
    threading.Thread(target=server.serve_forever, name="halfmq-check-server", daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}{CHECK_PATH}"


async def start_async_server(
    answer: Callable[[Message], Awaitable[LocalTransactionState]],
    host: str,
    port: int,
    *,
    max_concurrent: int = MAX_CONCURRENT_CHECKS,
    credentials: Credentials | None = None,
) -> tuple[asyncio.Server, str]:
    """The same on asyncio streams: one POST per connection, answered, closed.  With
    ``credentials``, only checks signed with them are answered."""
    slots = asyncio.Semaphore(max_concurrent)
    verifier = check_verifier(credentials)

    async def respond(reader: asyncio.StreamReader) -> bytes | None:
        """The response to write, or None to close the connection unanswered."""
        try:
            request = await read_request(reader)
        except (
            ValueError,
            UnicodeDecodeError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
        ):
            return http_response(b"400 Bad Request", _NOT_A_CHECK)
        refused = refusal(verifier, request.method, request.target, request.headers, request.body)
        if refused is not None:
            return http_response(b"401 Unauthorized", refusal_body(refused))
        try:
            check = parse_check(request.body)
        except (ValueError, KeyError, TypeError):
            return http_response(b"400 Bad Request", _NOT_A_CHECK)
        async with slots:
            if not server.is_serving():  # closed while this check waited for a slot
                return None
            state = await answer(check)
        return http_response(b"200 OK", answer_body(state))

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            response = await respond(reader)
            if response is not None:
                writer.write(response)
                await writer.drain()
        except ConnectionError as error:
            connection_lost(writer.get_extra_info("peername"), error)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port, backlog=BACKLOG)
    bound = server.sockets[0].getsockname()[1]
    return server, f"http://{host}:{bound}{CHECK_PATH}"


@dataclass(frozen=True)
class RawRequest:
    """One request as read off the socket: its method, its target (path and query, as sent), its
    headers (names in lower case) and its body."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes


async def read_request(reader: asyncio.StreamReader) -> RawRequest:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_SECONDS)
    request_line, *lines = head.decode("latin-1").split("\r\n")
    method, target, _version = request_line.split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    if length < 0:
        raise ValueError("a negative Content-Length")
    body = await asyncio.wait_for(reader.readexactly(length), READ_TIMEOUT_SECONDS)
    return RawRequest(method, target, headers, body)


def http_response(status: bytes, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
