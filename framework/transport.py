"""The only I/O of the client: two small drivers of :mod:`framework.protocol` and
:mod:`framework.flow`, one on ``httpx.Client`` (threads, ``time.sleep``) and one on
``httpx.AsyncClient`` (``asyncio.sleep``) over aiohttp's connection pool (httpx-aiohttp: httpcore's
async pool spends per request in proportion to its idle connections, the square in part).
Neither hides the other: the sync face runs no event loop.  ``call`` makes one call, retried and
failed over as :class:`~framework.protocol.Attempts` decides; ``run`` drives a decision flow.
With credentials, both sign every request (and every retry, afresh) through
:class:`~framework.signing.HalfmqAuth`, which sits on the client, so a transport given for tests
(``halfmq.testing``) is signed through as well.  Every request carries the caller's
OpenTelemetry context (:func:`framework.otel.headers`), so a broker's request spans join the
caller's trace (a shared request: the context of the call that led it).

Given a :class:`~framework.batching.Linger` that is on, a call that may share a request
(``Call.share``) is gathered with the others of its lane (:mod:`framework.batching`): the call
that leads a gathering sends it -- in its own thread, or in a task of its own on the event loop --
and every call reads its own answer with its own :class:`~framework.protocol.Attempts`.
``close()`` sends what is gathered at once and waits for the shared requests in flight."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import ssl
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from framework import otel
from framework.batching import ALONE, ONE_ATTEMPT, Alone, Gathering, Gatherings, Linger, Outcome
from framework.config import Retry, Timeout
from framework.flow import Flow, Step, Steps
from framework.protocol import Answer, Attempts, Call, Endpoints, Share
from framework.signing import Credentials, HalfmqAuth

log = logging.getLogger("halfmq.client")

T = TypeVar("T")
TransportT = TypeVar("TransportT", bound=httpx.BaseTransport | httpx.AsyncBaseTransport)
HttpT = TypeVar("HttpT", bound=httpx.Client | httpx.AsyncClient)

DEFAULT_TIMEOUT = Timeout()
DEFAULT_RETRY = Retry()
_HEADERS = {"content-type": "application/json", "user-agent": "halfmq-framework/0.1"}

Verify = ssl.SSLContext | str | os.PathLike[str] | bool
"""How a client checks an ``https://`` broker's certificate: ``True`` (the system's trusted CAs, as
httpx does), the path of a CA bundle (PEM), an ``ssl.SSLContext``, or ``False`` (no check: tests
only)."""


def _ssl(verify: Verify) -> ssl.SSLContext | bool:
    if isinstance(verify, str | os.PathLike):
        return ssl.create_default_context(cafile=os.fspath(verify))
    return verify


def _options(credentials: Credentials | None, verify: Verify) -> dict[str, Any]:
    """httpx's client options, the same on both faces."""
    return {
        "headers": _HEADERS,
        "limits": httpx.Limits(max_connections=64, max_keepalive_connections=32),
        "auth": None if credentials is None else HalfmqAuth(credentials),
        "verify": _ssl(verify),
    }


def _async_transport(options: dict[str, Any]) -> httpx.AsyncBaseTransport:
    """The async face's transport: httpx over aiohttp's connection pool (httpx-aiohttp), whose
    checkout does not grow with the pooled connections as httpcore's does (bench/README.md, "The
    async transport"); the pool's size and the TLS check are the client's.  Unlike httpx's own,
    it reads no proxy from the environment (``HTTPS_PROXY``): the brokers are reached directly."""
    return _AiohttpTransport(verify=options["verify"], limits=options["limits"])


class _AiohttpTransport(AiohttpTransport):
    """httpx-aiohttp's transport, raising what httpx's own raises when no answer comes: the
    callers' retry and fail-over (:class:`~framework.protocol.Attempts`) catch
    ``httpx.TransportError``.  httpx-aiohttp lets an answer that is not HTTP through as aiohttp's
    ``ClientResponseError`` and names a refused or dropped connection ``ConnectTimeout``."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except httpx.ConnectTimeout as exc:
            raise _untimed(exc, request) from exc.__cause__
        except aiohttp.ClientError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc


def _untimed(exc: httpx.ConnectTimeout, request: httpx.Request) -> httpx.TransportError:
    """A ``ConnectTimeout`` of httpx-aiohttp as httpx names it: a time-out stays one."""
    cause = exc.__cause__
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError(str(cause), request=request)
    if isinstance(cause, aiohttp.ClientConnectorError):
        return httpx.ConnectError(str(cause), request=request)
    if isinstance(cause, aiohttp.ClientOSError):
        return httpx.ReadError(str(cause), request=request)
    return exc


class _Client(ABC, Generic[TransportT, HttpT]):
    """What both clients share: the brokers, the time-outs and retries, and one attempt's request."""

    def __init__(
        self,
        brokers: Sequence[str],
        *,
        timeout: Timeout = DEFAULT_TIMEOUT,
        retry: Retry = DEFAULT_RETRY,
        transport: TransportT | None = None,
        credentials: Credentials | None = None,
        verify: Verify = True,
        linger: Linger | None = None,
    ) -> None:
        """``linger``: how calls share requests (None or off: one request per call)."""
        self.endpoints = Endpoints(brokers)
        self.timeout = timeout
        self.retry = retry
        self.http = self._open(transport, _options(credentials, verify))
        self.linger = linger if linger is not None and linger.on else None

    @property
    def close_wait(self) -> float:
        """How long closing waits for the shared requests in flight: one request's time."""
        return self.timeout.connect + self.timeout.write + self.timeout.read

    @abstractmethod
    def _open(self, transport: TransportT | None, options: dict[str, Any]) -> HttpT:
        """The httpx client of this face."""

    def _request(self, attempts: Attempts[Any]) -> httpx.Request:
        call = attempts.call
        timeout = self.timeout.to_httpx(extra_read=call.extra_read)
        return self.http.build_request(
            call.method,
            attempts.url,
            content=attempts.content,
            params=call.params,
            headers=otel.headers(),  # the current trace, joined by a broker's request spans
            timeout=timeout,
        )


class BrokerClient(_Client[httpx.BaseTransport, httpx.Client]):
    """Calls the brokers from threads (``httpx.Client`` is thread-safe).

    A thread blocked in a socket read cannot be interrupted from another thread, so a long poll
    is not cancelled: it is *left behind*.  ``close()`` never waits for one -- it returns at once,
    and the client is really closed by the last :meth:`polling` block to end, in its own thread,
    when its poll's answer (at most ``wait_seconds`` later) has been dealt with."""

    def __init__(self, brokers: Sequence[str], **options: Any) -> None:
        super().__init__(brokers, **options)
        self._lock = threading.Lock()
        self._polls = 0
        self._closing = False
        self.gatherings: Gatherings[threading.Event] | None = None
        if self.linger is not None:
            self.gatherings = Gatherings(self.linger, threading.Event)

    def _open(self, transport: httpx.BaseTransport | None, options: dict[str, Any]) -> httpx.Client:
        return httpx.Client(transport=transport, **options)

    @contextmanager
    def polling(self) -> Iterator[None]:
        """Around a long poll and what is done with its answer: ``close()`` does not wait for it,
        and the client stays open until the block ends."""
        with self._lock:
            self._polls += 1
        try:
            yield
        finally:
            with self._lock:
                self._polls -= 1
                last = self._closing and self._polls == 0
            if last:
                self.http.close()

    def call(self, call: Call[T], retry: Retry | None = None) -> T:
        attempts = Attempts(self.endpoints, retry or self.retry, call)
        if call.share is not None and self.gatherings is not None:
            return self._shared(attempts, call.share, self.gatherings)
        return self._alone(attempts)

    def _alone(self, attempts: Attempts[T]) -> T:
        while (pause := attempts.outcome(self._send(attempts))) is not None:
            time.sleep(pause)
        return attempts.result

    def _shared(
        self, attempts: Attempts[T], share: Share, gatherings: Gatherings[threading.Event]
    ) -> T:
        """A call that may share a request: each attempt goes in a gathering (or alone, when
        told to), and its own answer decides, as it would alone."""
        gatherings.enter(share.lane)
        try:
            while True:
                outcome = self._gathered(share, gatherings)
                if isinstance(outcome, Alone):
                    return self._alone(attempts)
                pause = attempts.outcome(outcome)
                if pause is None:
                    return attempts.result
                time.sleep(pause)
        finally:
            gatherings.leave(share.lane)

    def _gathered(self, share: Share, gatherings: Gatherings[threading.Event]) -> Outcome:
        seat = gatherings.join(share)
        if seat is None:
            return ALONE
        if seat.leads:
            self._lead(seat.gathering, gatherings)
        else:
            seat.gathering.done.wait()
        return seat.pending.outcome

    def _lead(self, gathering: Gathering[threading.Event], gatherings: Gatherings[Any]) -> None:
        """Wait for company (at most the linger), then send the gathering in this thread and
        hand every call its outcome -- whatever happens, so no caller waits forever."""
        outcomes: list[Outcome] = []
        try:
            gathering.ready.wait(gatherings.linger.seconds)
            pendings = gatherings.seal(gathering)
            request = gatherings.request(pendings)
            if request is not None:
                attempts = Attempts(self.endpoints, ONE_ATTEMPT, request)
                answer = self._send(attempts)
                outcomes = gatherings.outcomes(gathering.lane, request, answer, len(pendings))
        finally:
            gatherings.finish(gathering, outcomes)

    def run(self, flow: Flow[T]) -> T:
        """Drive ``flow`` in this thread: make its calls, call its callbacks."""
        steps = Steps(flow)
        for step in steps:
            try:
                steps.reply = self.call(step) if isinstance(step, Call) else step.fn(*step.args)
            except Exception as exc:
                steps.error = exc
        return steps.result

    def close(self) -> None:
        """Send what is gathered and wait for the shared requests in flight; then close now, or
        -- with a long poll in flight -- once it ends (see :meth:`polling`)."""
        if self.gatherings is not None:
            deadline = time.monotonic() + self.close_wait
            for gathering in self.gatherings.close():
                gathering.done.wait(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._closing = True
            if self._polls:
                return
        self.http.close()

    def _send(self, attempts: Attempts[Any]) -> Answer | httpx.TransportError:
        request = self._request(attempts)
        try:
            response = self.http.send(request)
        except httpx.TransportError as exc:
            return exc
        return attempts.answer(response.status_code, response.content, response.reason_phrase)


class AsyncBrokerClient(_Client[httpx.AsyncBaseTransport, httpx.AsyncClient]):
    """Calls the brokers from coroutines."""

    def __init__(self, brokers: Sequence[str], **options: Any) -> None:
        super().__init__(brokers, **options)
        self.gatherings: Gatherings[asyncio.Event] | None = None
        if self.linger is not None:
            self.gatherings = Gatherings(self.linger, asyncio.Event)
        self._leading: set[asyncio.Task[None]] = set()

    def _open(
        self, transport: httpx.AsyncBaseTransport | None, options: dict[str, Any]
    ) -> httpx.AsyncClient:
        if transport is None:
            transport = _async_transport(options)
        return httpx.AsyncClient(transport=transport, **options)

    async def call(self, call: Call[T], retry: Retry | None = None) -> T:
        attempts = Attempts(self.endpoints, retry or self.retry, call)
        if call.share is not None and self.gatherings is not None:
            return await self._shared(attempts, call.share, self.gatherings)
        return await self._alone(attempts)

    async def _alone(self, attempts: Attempts[T]) -> T:
        while True:
            pause = attempts.outcome(await self._send(attempts))
            if pause is None:
                return attempts.result
            await asyncio.sleep(pause)

    async def _shared(
        self, attempts: Attempts[T], share: Share, gatherings: Gatherings[asyncio.Event]
    ) -> T:
        """As :meth:`BrokerClient._shared`, awaited."""
        gatherings.enter(share.lane)
        try:
            while True:
                outcome = await self._gathered(share, gatherings)
                if isinstance(outcome, Alone):
                    return await self._alone(attempts)
                pause = attempts.outcome(outcome)
                if pause is None:
                    return attempts.result
                await asyncio.sleep(pause)
        finally:
            gatherings.leave(share.lane)

    async def _gathered(self, share: Share, gatherings: Gatherings[asyncio.Event]) -> Outcome:
        seat = gatherings.join(share)
        if seat is None:
            return ALONE
        if seat.leads:
            # The gathering is sent by a task of its own: cancelling the call that opened it
            # (its caller's task) cancels no one else's request.
            task = asyncio.create_task(self._lead(seat.gathering, gatherings))
            self._leading.add(task)
            task.add_done_callback(self._leading.discard)
        await seat.gathering.done.wait()
        return seat.pending.outcome

    async def _lead(
        self, gathering: Gathering[asyncio.Event], gatherings: Gatherings[asyncio.Event]
    ) -> None:
        outcomes: list[Outcome] = []
        try:
            if not gathering.ready.is_set():
                linger = asyncio.get_running_loop().call_later(
                    gatherings.linger.seconds, gathering.ready.set
                )
                await gathering.ready.wait()
                linger.cancel()
            pendings = gatherings.seal(gathering)
            request = gatherings.request(pendings)
            if request is not None:
                attempts = Attempts(self.endpoints, ONE_ATTEMPT, request)
                answer = await self._send(attempts)
                outcomes = gatherings.outcomes(gathering.lane, request, answer, len(pendings))
        except Exception as exc:  # no one awaits this task: its calls go alone and meet it
            log.info("a shared request failed (its calls go alone): %r", exc)
        finally:
            gatherings.finish(gathering, outcomes)

    async def run(self, flow: Flow[T]) -> T:
        """Drive ``flow`` on this loop: await its calls and coroutine callbacks, run plain
        callbacks in a worker thread."""
        steps = Steps(flow)
        for step in steps:
            try:
                steps.reply = await self._take(step)
            except Exception as exc:
                steps.error = exc
        return steps.result

    async def aclose(self) -> None:
        """Send what is gathered, wait for the shared requests in flight, then close."""
        if self.gatherings is not None:
            self.gatherings.close()
            if self._leading:
                await asyncio.wait(set(self._leading), timeout=self.close_wait)
        await self.http.aclose()

    async def _take(self, step: Step) -> Any:
        if isinstance(step, Call):
            return await self.call(step)
        if step.aio is not None:
            return await step.aio(*step.args)
        if inspect.iscoroutinefunction(step.fn):
            return await step.fn(*step.args)
        return await asyncio.to_thread(step.fn, *step.args)

    async def _send(self, attempts: Attempts[Any]) -> Answer | httpx.TransportError:
        request = self._request(attempts)
        try:
            response = await self.http.send(request)
        except httpx.TransportError as exc:
            return exc
        return attempts.answer(response.status_code, response.content, response.reason_phrase)
