"""The HTTP/1.1 server protocol the broker runs under uvicorn: httptools, with a bound on a request
head *while it is read*.

httptools buffers a header line of any length until it ends, so without a bound at the socket a
client could make the broker hold gigabytes before any application code (and
:class:`~broker_service.api.hardening.HeaderLimits`, which answers 431 for what fits) sees the
request.  :class:`BoundedHeadProtocol` counts the bytes of each request head as they arrive -- up
to the blank line that ends it, not the body after it -- and past the bound answers 431
``HEADERS_TOO_LARGE`` in the project's envelope and closes the connection, before the head ends.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_HEAD_END = b"\r\n\r\n"
REQUEST_LINE_ALLOWANCE = 16 * 1024  # the request line (method, path and query) beside the headers


class BoundedHeadProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; a request head over ``max_head_bytes`` is refused as it
    arrives.  Made for a limit by :func:`bounded_protocol`."""

    max_head_bytes = 16 * 1024 + REQUEST_LINE_ALLOWANCE
    max_header_bytes = 16 * 1024

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._in_head = True
        self._refused = False
        self._head_bytes = 0
        self._tail = b""
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_head:
            seen = self._tail + data
            end = seen.find(_HEAD_END)
            self._head_bytes += len(data) if end < 0 else max(0, end + 4 - len(self._tail))
            if self._head_bytes > self.max_head_bytes:
                self._refuse()
                return
            self._tail = seen[-3:]
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes, self._tail = True, 0, b""

    def _refuse(self) -> None:
        body = orjson.dumps(
            {
                "error": {
                    "code": "HEADERS_TOO_LARGE",
                    "message": f"request head over {self.max_head_bytes} bytes (max_header_bytes)",
                    "detail": {"max_header_bytes": self.max_header_bytes},
                }
            }
        )
        head = (
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n"
            b"connection: close\r\n\r\n"
        )
        self._refused = True
        self.transport.write(head + body)
        self.transport.close()


def bounded_protocol(max_header_bytes: int) -> type[BoundedHeadProtocol]:
    """The protocol class for ``uvicorn.Config(http=...)``: heads bounded at ``max_header_bytes``
    plus room for the request line."""
    attributes: dict[str, Any] = {
        "max_head_bytes": max_header_bytes + REQUEST_LINE_ALLOWANCE,
        "max_header_bytes": max_header_bytes,
    }
    return type("BoundedHeadProtocol", (BoundedHeadProtocol,), attributes)
