"""The client-side trace (RocketMQ's client trace): what each send and each handled message cost,
as the client saw it, reported to the broker (``POST /v1/trace``) so a message's trace shows
``CLIENT_PUB`` and ``CLIENT_SUB`` beside the broker's own events.

A PUB record is one sent message (the send request's round trip; for a transaction, the half's
send), a SUB record one handled message (the handler's duration: ``OK`` when it is acked,
``RETRY`` when it is nacked or raised).  Recording never waits and never fails: records go to a
bounded buffer, as RocketMQ's async trace dispatcher does -- when it is full a record is dropped
and counted -- and a background reporter sends them every :data:`INTERVAL` seconds or as soon as
:data:`BATCH` are waiting, and once more when the client shuts down.

A broker that has no such route (an older broker answers 404) or refuses the reports (the ACL,
a malformed record) is told nothing more by this client: one WARNING, and reporting stops.  A
broker that cannot be reached loses that batch (counted); reporting goes on.

Off by default, as RocketMQ's ``enableMsgTrace``: ``client_trace=True`` on a producer or consumer,
or ``HALFMQ_CLIENT_TRACE=true`` in the environment (read when the client is built), turns it on.
Each record is a row the broker writes, and on a busy two-core machine that cost sends and handled
messages more than a default should (bench/README.md, "The client trace's cost").

:class:`ClientTrace` is the part without I/O, shared by both faces; :class:`ThreadReporter`
(sync faces) and :class:`TaskReporter` (asyncio faces) drive its reports with the face's client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from framework import protocol
from framework.errors import BrokerBusyError, BrokerError, HalfMQError
from framework.flow import Flow, call
from framework.message import Message

if TYPE_CHECKING:
    from framework.transport import AsyncBrokerClient, BrokerClient

log = logging.getLogger("halfmq.trace")

ENV = "HALFMQ_CLIENT_TRACE"
CAPACITY = 2048  # records waiting at most (RocketMQ's trace queue); beyond: dropped and counted
BATCH = 100  # records that make a report due at once
INTERVAL = 1.0  # seconds between reports otherwise
MAX_EVENTS = 1000  # the most one report carries (the route's limit)
_ON = frozenset({"true", "1", "yes", "on"})

PUB, SUB = "PUB", "SUB"
OK, FAILED, RETRY = "OK", "FAILED", "RETRY"


def enabled(option: bool | None, environ: Mapping[str, str] = os.environ) -> bool:
    """The client's option when given; else ``HALFMQ_CLIENT_TRACE`` (off unless it says on)."""
    if option is not None:
        return option
    return environ.get(ENV, "false").strip().lower() in _ON


@dataclass(frozen=True, slots=True)
class Timing:
    """When an operation started: the wall clock (the record's time) and the monotonic clock (its
    cost)."""

    at: float
    start: float

    @classmethod
    def now(cls) -> Timing:
        return cls(time.time(), time.monotonic())

    def cost_ms(self) -> float:
        return max(0.0, (time.monotonic() - self.start) * 1000)


@dataclass(frozen=True, slots=True)
class TraceRecord:
    msg_id: str
    type: str  # PUB or SUB
    topic: str
    group: str
    client_id: str
    at: float  # epoch seconds
    cost_ms: float
    status: str  # OK, FAILED or RETRY

    def wire(self) -> dict[str, Any]:
        """One event of ``POST /v1/trace`` (docs/api.md), its time in RFC 3339 (UTC)."""
        at = datetime.fromtimestamp(self.at, UTC).isoformat(timespec="milliseconds")
        return {
            "msg_id": self.msg_id,
            "type": self.type,
            "topic": self.topic,
            "group": self.group,
            "client_id": self.client_id,
            "at": at.replace("+00:00", "Z"),
            "cost_ms": round(self.cost_ms, 3),
            "status": self.status,
        }


def _nothing(full: bool) -> None:
    pass


def _refused(error: BaseException | None) -> bool:
    """The broker answered ``error``: it refused the request (and stored nothing)."""
    return (
        isinstance(error, BrokerError)
        and error.status < 500
        and not isinstance(error, BrokerBusyError)
    )


class ClientTrace:
    """One client's records, waiting in a bounded buffer (thread-safe), and how to report them.

    ``wake(full)`` is the reporter's: called with ``False`` when a record arrives in an empty
    buffer (a reporter starts on the first record, so a client that never sends starts nothing)
    and with ``True`` when a batch is waiting (report now rather than at the next interval)."""

    def __init__(
        self,
        group: str,
        client_id: str,
        enabled: bool = True,
        *,
        capacity: int = CAPACITY,
        batch: int = BATCH,
        interval: float = INTERVAL,
    ) -> None:
        self.group = group
        self.client_id = client_id
        self.active = enabled
        self.capacity = capacity
        self.batch = batch
        self.interval = interval
        self.dropped = 0  # records the full buffer turned away
        self.lost = 0  # records reported to a broker that did not answer
        self.refused = 0  # records a broker answered it did not record
        self.wake: Callable[[bool], None] = _nothing
        self._records: deque[TraceRecord] = deque()
        self._lock = threading.Lock()
        self._warned = False

    # -- recording (from the flows: never blocks, never raises) ------------------------------------

    def published(
        self, messages: Iterable[Message], timing: Timing, error: BaseException | None = None
    ) -> None:
        """PUB records for ``messages`` sent by one request that started at ``timing`` and ended
        with ``error`` (None: sent).  A send the broker refused (a 4xx answer but 429: it stored
        nothing, and would refuse the record of an unknown message too) has none; one that got
        no answer, or a failure, may have been stored: FAILED."""
        if not self.active or _refused(error):
            return
        cost, status = timing.cost_ms(), OK if error is None else FAILED
        for message in messages:
            self.add(PUB, message, timing.at, cost, status)

    def consumed(self, message: Message, timing: Timing, ok: bool) -> None:
        """The SUB record of one handled message (``ok``: it is acked)."""
        if self.active:
            self.add(SUB, message, timing.at, timing.cost_ms(), OK if ok else RETRY)

    def add(self, kind: str, message: Message, at: float, cost_ms: float, status: str) -> None:
        record = TraceRecord(
            message.msg_id, kind, message.topic, self.group, self.client_id, at, cost_ms, status
        )
        with self._lock:
            waiting = len(self._records)
            if waiting >= self.capacity:
                self.dropped += 1
                return
            self._records.append(record)
        if waiting == 0 or waiting + 1 == self.batch:
            self.wake(waiting + 1 >= self.batch)

    def pending(self) -> int:
        with self._lock:
            return len(self._records)

    def take(self) -> list[TraceRecord]:
        """The next report's records (at most :data:`MAX_EVENTS`); none once reporting stopped."""
        with self._lock:
            if not self.active:
                self._records.clear()
                return []
            count = min(len(self._records), MAX_EVENTS)
            return [self._records.popleft() for _ in range(count)]

    # -- reporting ---------------------------------------------------------------------------------

    def report_flow(self, records: list[TraceRecord]) -> Flow[None]:
        """Report ``records``; never raises (see the module's docstring for what a failure does)."""
        if not records:
            return
        try:
            report = yield from call(protocol.report_trace([r.wire() for r in records]))
        except BrokerError as exc:
            if isinstance(exc, BrokerBusyError) or exc.status >= 500:
                self.lost += len(records)  # shed load or failed: the next batch may pass
            else:
                self.stop(exc)  # 404 (an older broker), 401, 403, 422: it will not take them
        except HalfMQError as exc:  # no broker answered
            self.lost += len(records)
            log.debug("client trace of %s not reported: %s", self.client_id, exc)
        else:
            if report.refused:
                self.refused += len(report.refused)
                log.debug("the broker refused %d client trace records", len(report.refused))

    def stop(self, reason: BrokerError) -> None:
        """The broker does not take this client's records: say so once, report nothing more."""
        self.active = False
        with self._lock:
            self._records.clear()
        if not self._warned:
            self._warned = True
            log.warning(
                "client trace of %s (group %s) is off: the broker refused it (%s %s)",
                self.client_id,
                self.group,
                reason.status,
                reason.code,
            )


class ThreadReporter:
    """Reports a :class:`ClientTrace` from a daemon thread (started on its first record) with a
    sync face's client; :meth:`close` reports what is left, before the client closes."""

    def __init__(self, trace: ClientTrace, client: BrokerClient) -> None:
        self.trace = trace
        self.client = client
        self._due = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        trace.wake = self.wake

    def wake(self, full: bool) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._closed:
                    name = f"halfmq-trace-{self.trace.group}"
                    self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
                    self._thread.start()
        if full:
            self._due.set()

    def flush(self) -> None:
        while records := self.trace.take():
            try:
                self.client.run(self.trace.report_flow(records))
            except Exception as exc:  # the client closed under it: lost, never raised
                self.trace.lost += len(records)
                log.debug("client trace report failed: %r", exc)
                return

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._due.set()
        if thread is not None:
            thread.join(self.client.timeout.read + 5)
        self.flush()

    def _loop(self) -> None:
        while not self._closed:
            self._due.wait(self.trace.interval)
            self._due.clear()
            if not self._closed:
                self.flush()


class TaskReporter:
    """Reports a :class:`ClientTrace` from a task (started on its first record) with an asyncio
    face's client; :meth:`close` reports what is left, before the client closes."""

    def __init__(self, trace: ClientTrace, client: AsyncBrokerClient) -> None:
        self.trace = trace
        self.client = client
        self._due = asyncio.Event()
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        trace.wake = self.wake

    def wake(self, full: bool) -> None:
        """Called from the face's flows, on its event loop."""
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._loop())
        if full:
            self._due.set()

    async def flush(self) -> None:
        while records := self.trace.take():
            try:
                await self.client.run(self.trace.report_flow(records))
            except Exception as exc:  # the client closed under it: lost, never raised
                self.trace.lost += len(records)
                log.debug("client trace report failed: %r", exc)
                return

    async def close(self) -> None:
        self._closed = True
        self._due.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()

    async def _loop(self) -> None:
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._due.wait(), self.trace.interval)
            self._due.clear()
            if not self._closed:
                await self.flush()
