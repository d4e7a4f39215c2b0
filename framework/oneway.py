"""One-way sends (RocketMQ's ``sendOneway``): the only send whose loss is accepted.

``producer.send_oneway(message)`` hands the message to the background and returns at once: it
never waits for the broker, and never raises for the broker's refusal or a broker that does not
answer.  What became of each is counted (:class:`OneWayCounts`, ``producer.oneway``) and, with
the client-side trace on, recorded as a PUB record like every send.

The send itself is the producer's plain send (:meth:`~framework.producer_base.ProducerBase.
oneway_flow`: the same request, retries and failover, so concurrent one-way sends share requests
as plain sends do), run by :class:`ThreadOneWay` on a few worker threads (sync face) or by
:class:`TaskOneWay` in tasks (asyncio face).  At most :data:`PENDING_MAX` wait; beyond that a
one-way send is dropped and counted, never blocking the caller.  ``shutdown()`` gives the waiting
ones one request's time-outs, then drops the rest (counted).

A local transaction may not send one way (:func:`refuse_in_local_transaction`): a transaction's
messages must not be lost, and a one-way send gives no answer to roll back on.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from framework.errors import BrokerError, OneWayInTransactionError
from framework.flow import Flow, Invoke
from framework.message import Message

if TYPE_CHECKING:
    from framework.transport import AsyncBrokerClient, BrokerClient

log = logging.getLogger("halfmq.producer")

PENDING_MAX = 10_000  # one-way sends waiting at most; beyond: dropped and counted
WORKERS = 4  # threads sending them (sync face); concurrent sends share requests

_LOCAL_TRANSACTION: contextvars.ContextVar[Message | None] = contextvars.ContextVar(
    "halfmq_local_transaction", default=None
)


@dataclass(frozen=True, slots=True)
class OneWayStats:
    """A reading of :class:`OneWayCounts`: ``sent`` handed to the background; of those,
    ``stored`` (the broker answered 2xx), ``refused`` (it answered 4xx: nothing was stored),
    ``failed`` (no answer, or 5xx / 429 after the retries: it may have been stored) and
    ``dropped`` (not sent: too many were waiting, or the producer shut down before its answer)."""

    sent: int = 0
    stored: int = 0
    refused: int = 0
    failed: int = 0
    dropped: int = 0

    @property
    def pending(self) -> int:
        return self.sent - self.stored - self.refused - self.failed - self.dropped


class OneWayCounts:
    """What became of a producer's one-way sends (thread-safe); :meth:`read` for a reading."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = {"sent": 0, "stored": 0, "refused": 0, "failed": 0, "dropped": 0}

    def add(self, what: str, count: int = 1) -> None:
        with self._lock:
            self._counts[what] += count

    def ended(self, error: BaseException | None) -> None:
        """One one-way send ended with ``error`` (None: stored)."""
        if error is None:
            self.add("stored")
        elif isinstance(error, BrokerError) and error.status < 500 and error.status != 429:
            self.add("refused")
        else:
            self.add("failed")

    def read(self) -> OneWayStats:
        with self._lock:
            return OneWayStats(**self._counts)


# -- no one-way send in a local transaction --------------------------------------------------------


def refuse_in_local_transaction(message: Message) -> None:
    """Raise :class:`OneWayInTransactionError` when called from a local transaction."""
    current = _LOCAL_TRANSACTION.get()
    if current is None:
        return
    raise OneWayInTransactionError(
        f"send_oneway of a message to {message.topic!r} inside the local transaction of "
        f"{current.transaction_id} (topic {current.topic!r}) is refused: a one-way send may be "
        "lost, and a transaction's messages must not be. Use producer.send(...), which raises "
        "when the message is not stored, so the local transaction can roll back",
        topic=message.topic,
        transaction_id=current.transaction_id,
        msg_id=message.msg_id,
    )


def in_local_transaction(step: Invoke, message: Message) -> Invoke:
    """``step`` (a local transaction), marked so that a one-way send from inside it is refused.

    The mark is a context variable set around the call, wherever the face runs it: in this
    thread, awaited on the loop, or in a worker thread (``asyncio.to_thread`` copies the
    context)."""
    aio = _marked_async(step.aio, message) if step.aio is not None else None
    if inspect.iscoroutinefunction(step.fn):
        return Invoke(_marked_async(step.fn, message), step.args, aio)
    return Invoke(_marked(step.fn, message), step.args, aio)


def _marked(fn: Callable[..., Any], message: Message) -> Callable[..., Any]:
    @functools.wraps(fn)
    def marked(*args: Any) -> Any:
        token = _LOCAL_TRANSACTION.set(message)
        try:
            return fn(*args)
        finally:
            _LOCAL_TRANSACTION.reset(token)

    return marked


def _marked_async(
    fn: Callable[..., Awaitable[Any]], message: Message
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def marked(*args: Any) -> Any:
        token = _LOCAL_TRANSACTION.set(message)
        try:
            return await fn(*args)
        finally:
            _LOCAL_TRANSACTION.reset(token)

    return marked


# -- the background of each face -----------------------------------------------------------------


class ThreadOneWay:
    """Runs one-way sends on :data:`WORKERS` daemon threads (started with the first one), so a
    process that exits without ``shutdown()`` is never held up by them."""

    def __init__(
        self,
        client: BrokerClient,
        flow: Callable[[Message], Flow[None]],
        counts: OneWayCounts,
        group: str,
    ) -> None:
        self.client = client
        self.flow = flow
        self.counts = counts
        self.group = group
        self._waiting: queue.Queue[Message | None] = queue.Queue(PENDING_MAX)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, message: Message) -> None:
        self.counts.add("sent")
        try:
            if self._closed:
                raise queue.Full
            self._waiting.put_nowait(message)
        except queue.Full:
            self.counts.add("dropped")
            return
        with self._lock:
            if not self._threads:
                for n in range(WORKERS):
                    name = f"halfmq-oneway-{n}-{self.group}"
                    thread = threading.Thread(target=self._work, name=name, daemon=True)
                    thread.start()
                    self._threads.append(thread)

    def _work(self) -> None:
        while (message := self._waiting.get()) is not None:
            try:
                self.client.run(self.flow(message))
            except Exception as exc:  # the client closed under it (shutdown): never raised
                log.debug("one-way send of %s failed: %r", message.msg_id, exc)
                self.counts.ended(exc)
            finally:
                self._waiting.task_done()
        self._waiting.task_done()

    def close(self, wait_seconds: float) -> None:
        """Give the waiting sends ``wait_seconds``, then drop those not started (counted)."""
        self._closed = True
        deadline = time.monotonic() + wait_seconds
        while self._waiting.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        while True:
            try:
                self._waiting.get_nowait()
            except queue.Empty:
                break
            self.counts.add("dropped")
            self._waiting.task_done()
        with self._lock:
            for _ in self._threads:
                self._waiting.put_nowait(None)
            self._threads.clear()


class TaskOneWay:
    """Runs each one-way send in a task of its own on the producer's loop."""

    def __init__(
        self,
        client: AsyncBrokerClient,
        flow: Callable[[Message], Flow[None]],
        counts: OneWayCounts,
    ) -> None:
        self.client = client
        self.flow = flow
        self.counts = counts
        self._waiting: set[asyncio.Task[None]] = set()
        self._closed = False

    def submit(self, message: Message) -> None:
        self.counts.add("sent")
        if self._closed or len(self._waiting) >= PENDING_MAX:
            self.counts.add("dropped")
            return
        task = asyncio.get_running_loop().create_task(self._send(message))
        self._waiting.add(task)
        task.add_done_callback(self._waiting.discard)

    async def _send(self, message: Message) -> None:
        try:
            await self.client.run(self.flow(message))
        except Exception as exc:  # never raised: nobody awaits this task
            log.debug("one-way send of %s failed: %r", message.msg_id, exc)
            self.counts.ended(exc)

    async def close(self, wait_seconds: float) -> None:
        """Give the waiting sends ``wait_seconds``, then cancel the rest (counted dropped)."""
        self._closed = True
        if not self._waiting:
            return
        _, late = await asyncio.wait(set(self._waiting), timeout=wait_seconds)
        self.counts.add("dropped", len(late))
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)
