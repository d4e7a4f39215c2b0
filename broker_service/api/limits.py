"""A pure ASGI middleware answering 413 for bodies over the limit (declared or streamed)."""

from __future__ import annotations

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from broker_service.api.errors import envelope


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.limit:
                    await self._too_large(scope, receive, send)
                    return
                break
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _TooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._too_large(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = envelope(
            413,
            "MESSAGE_TOO_LARGE",
            f"request body over {self.limit} bytes (max_message_bytes)",
            limit=self.limit,
        )
        await response(scope, receive, send)


class _TooLarge(HTTPException):
    """Raised from ``receive``; an HTTPException so FastAPI's body parsing lets it through."""

    def __init__(self) -> None:
        super().__init__(413, "request body over max_message_bytes")
