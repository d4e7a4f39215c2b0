"""The only I/O of the client: two small drivers of :mod:`framework.protocol`, one on
``httpx.Client`` (threads, ``time.sleep``) and one on ``httpx.AsyncClient`` (``asyncio.sleep``).
Neither hides the other: the sync face runs no event loop.  With credentials, both sign every
request (and every retry, afresh) through :class:`~framework.signing.HalfmqAuth`, which sits on
the client, so a transport given for tests (``halfmq.testing``) is signed through as well."""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Sequence
from typing import TypeVar

import httpx

from framework.config import Retry, Timeout
from framework.protocol import Answer, Attempts, Call, Endpoints
from framework.signing import Credentials, HalfmqAuth

T = TypeVar("T")

DEFAULT_TIMEOUT = Timeout()
DEFAULT_RETRY = Retry()
_HEADERS = {"content-type": "application/json", "user-agent": "halfmq-framework/0.1"}


def _limits() -> httpx.Limits:
    return httpx.Limits(max_connections=64, max_keepalive_connections=32)


Verify = ssl.SSLContext | str | os.PathLike[str] | bool
"""How a client checks an ``https://`` broker's certificate: ``True`` (the system's trusted CAs, as
httpx does), the path of a CA bundle (PEM), an ``ssl.SSLContext``, or ``False`` (no check: tests
only)."""


def _ssl(verify: Verify) -> ssl.SSLContext | bool:
    if isinstance(verify, str | os.PathLike):
        return ssl.create_default_context(cafile=os.fspath(verify))
    return verify


def _auth(credentials: Credentials | None) -> HalfmqAuth | None:
    return None if credentials is None else HalfmqAuth(credentials)


class BrokerClient:
    """Calls the brokers from threads (``httpx.Client`` is thread-safe)."""

    def __init__(
        self,
        brokers: Sequence[str],
        *,
        timeout: Timeout = DEFAULT_TIMEOUT,
        retry: Retry = DEFAULT_RETRY,
        transport: httpx.BaseTransport | None = None,
        credentials: Credentials | None = None,
        verify: Verify = True,
    ) -> None:
        self.endpoints = Endpoints(brokers)
        self.timeout = timeout
        self.retry = retry
        self.http = httpx.Client(
            headers=_HEADERS,
            transport=transport,
            limits=_limits(),
            auth=_auth(credentials),
            verify=_ssl(verify),
        )

    def call(self, call: Call[T], retry: Retry | None = None) -> T:
        attempts = Attempts(self.endpoints, retry or self.retry, call)
        content = call.content()
        while True:
            url = attempts.url
            try:
                response = self.http.request(
                    call.method,
                    url,
                    content=content,
                    params=call.params,
                    timeout=self.timeout.to_httpx(extra_read=call.extra_read),
                )
            except httpx.TransportError as exc:
                delay = attempts.unreachable(exc)
            else:
                result, again = attempts.answered(
                    Answer(response.status_code, response.content, url)
                )
                if again is None:
                    return result  # type: ignore[no-any-return]
                delay = again
            time.sleep(delay)

    def close(self) -> None:
        self.http.close()


class AsyncBrokerClient:
    """Calls the brokers from coroutines."""

    def __init__(
        self,
        brokers: Sequence[str],
        *,
        timeout: Timeout = DEFAULT_TIMEOUT,
        retry: Retry = DEFAULT_RETRY,
        transport: httpx.AsyncBaseTransport | None = None,
        credentials: Credentials | None = None,
        verify: Verify = True,
    ) -> None:
        self.endpoints = Endpoints(brokers)
        self.timeout = timeout
        self.retry = retry
        self.http = httpx.AsyncClient(
            headers=_HEADERS,
            transport=transport,
            limits=_limits(),
            auth=_auth(credentials),
            verify=_ssl(verify),
        )

    async def call(self, call: Call[T], retry: Retry | None = None) -> T:
        attempts = Attempts(self.endpoints, retry or self.retry, call)
        content = call.content()
        while True:
            url = attempts.url
            try:
                response = await self.http.request(
                    call.method,
                    url,
                    content=content,
                    params=call.params,
                    timeout=self.timeout.to_httpx(extra_read=call.extra_read),
                )
            except httpx.TransportError as exc:
                delay = attempts.unreachable(exc)
            else:
                result, again = attempts.answered(
                    Answer(response.status_code, response.content, url)
                )
                if again is None:
                    return result  # type: ignore[no-any-return]
                delay = again
            await asyncio.sleep(delay)

    async def aclose(self) -> None:
        await self.http.aclose()
