"""Push check-back without a web framework: a small HTTP server that answers the broker's checks.

The broker POSTs ``{"transaction_id", "msg_id", "topic", "tags", "keys", "body", "encoding",
"properties", "check_times"}`` and reads ``{"state": "COMMIT|ROLLBACK|UNKNOWN"}``.  Services with
FastAPI mount :func:`framework.fastapi.check_router` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from framework.message import LocalTransactionState, Message
from framework.protocol import check_message

CHECK_PATH = "/halfmq/check"


def answer_body(state: LocalTransactionState) -> bytes:
    return orjson.dumps({"state": state.check_answer})


def parse_check(content: bytes) -> Message:
    return check_message(orjson.loads(content))


def start_thread_server(
    answer: Callable[[Message], LocalTransactionState], host: str, port: int
) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            try:
                check = parse_check(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            except (ValueError, KeyError, TypeError):
                self._reply(400, b'{"error": "not a check"}')
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

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="halfmq-check-server", daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}{CHECK_PATH}"


async def start_async_server(
    answer: Callable[[Message], Awaitable[LocalTransactionState]], host: str, port: int
) -> tuple[asyncio.Server, str]:
    """The same on asyncio streams: one POST per connection, answered, closed."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            check = parse_check(await asyncio.wait_for(reader.readexactly(length), 10))
            status, body = b"200 OK", answer_body(await answer(check))
        except (ValueError, KeyError, TypeError, asyncio.IncompleteReadError, TimeoutError):
            status, body = b"400 Bad Request", b'{"error": "not a check"}'
        writer.write(
            b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, host, port)
    bound = server.sockets[0].getsockname()[1]
    return server, f"http://{host}:{bound}{CHECK_PATH}"
