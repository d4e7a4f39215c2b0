"""One-way requests: sends (RocketMQ's ``sendOneway``), the only send whose loss is accepted, and
a transaction's end sent one way (``end_oneway``, RocketMQ 4's ``endTransactionOneway``).

``producer.send_oneway(message)`` hands the message to the background and returns at once: it
never waits for the broker, and never raises for the broker's refusal or a broker that does not
answer.  What became of each is counted (:class:`OneWayCounts`, ``producer.oneway``) and, with
the client-side trace on, recorded as a PUB record like every send.

A producer made with ``end_oneway=True`` hands each commit or rollback to the same background
once its local transaction has answered, and ``send_message_in_transaction`` returns without
waiting for the broker.  Nothing is lost with it: the half is durable before the local
transaction runs, and an end that does not arrive leaves the transaction to the check-back,
which the group's members answer from their local transactions.  Those ends are counted in
``producer.oneway_ends``.

Each job is the producer's ordinary request in a flow (:meth:`~framework.producer_base.
ProducerBase.oneway_flow` for a send: the same request, retries and failover, so concurrent
one-way requests share requests as awaited ones do), run by :class:`ThreadOneWay` on a few worker
threads (sync face) or by :class:`TaskOneWay` in tasks (asyncio face).  At most
:data:`PENDING_MAX` wait; beyond that a job is dropped and counted, never blocking the caller.
``shutdown()`` gives the waiting ones one request's time-outs, then drops the rest (counted).

A local transaction may not send one way (:func:`refuse_in_local_transaction`): a transaction's
messages must not be lost, and a one-way send gives no answer to roll back on.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from framework.errors import BrokerError, OneWayInTransactionError
from framework.flow import Flow, Invoke
from framework.message import Message

if TYPE_CHECKING:
    from framework.transport import AsyncBrokerClient, BrokerClient

log = logging.getLogger("halfmq.producer")

PENDING_MAX = 10_000  # one-way jobs waiting at most; beyond: dropped and counted
WORKERS = 16  # threads running them (sync face); concurrent ones share requests

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


@dataclass(frozen=True, slots=True)
class Job:
    """One request the background runs for a caller that does not wait: ``flow`` counts its own
    end in ``counts`` and never raises for the broker's answer; ``what`` names it in a log line."""

    flow: Flow[None]
    counts: OneWayCounts
    what: str


class ThreadOneWay:
    """Runs one-way jobs on :data:`WORKERS` daemon threads (started with the first one), so a
    process that exits without ``shutdown()`` is never held up by them."""

    def __init__(self, client: BrokerClient, group: str) -> None:
        self.client = client
        self.group = group
        self._waiting: queue.Queue[Job | None] = queue.Queue(PENDING_MAX)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def handoff(self, job: Job) -> Invoke:
        """The flow step that hands ``job`` over (called in the flow's own thread)."""
        return Invoke(self.submit, (job,))

    def submit(self, job: Job) -> None:
        job.counts.add("sent")
        try:
            if self._closed:
                raise queue.Full
            self._waiting.put_nowait(job)
        except queue.Full:
            job.counts.add("dropped")
            return
        with self._lock:
            if not self._threads:
                for n in range(WORKERS):
                    name = f"halfmq-oneway-{n}-{self.group}"
                    thread = threading.Thread(target=self._work, name=name, daemon=True)
                    thread.start()
                    self._threads.append(thread)

    def _work(self) -> None:
        while (job := self._waiting.get()) is not None:
            try:
                self.client.run(job.flow)
            except Exception as exc:  # the client closed under it (shutdown): never raised
                log.debug("one-way %s failed: %r", job.what, exc)
                job.counts.ended(exc)
            finally:
                self._waiting.task_done()
        self._waiting.task_done()

    def close(self, wait_seconds: float) -> None:
        """Give the waiting jobs ``wait_seconds``, then drop those not started (counted)."""
        self._closed = True
        deadline = time.monotonic() + wait_seconds
        while self._waiting.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        for job in self._taken_out():
            if job is not None:  # not a stop sentinel of an earlier close
                job.counts.add("dropped")
            self._waiting.task_done()
        with self._lock:
            for _ in self._threads:
                self._waiting.put_nowait(None)
            self._threads.clear()

    def _taken_out(self) -> Iterator[Job | None]:
        """Whatever waits in the queue, taken out of it."""
        with contextlib.suppress(queue.Empty):
            while True:
                yield self._waiting.get_nowait()


class TaskOneWay:
    """Runs each one-way job in a task of its own on the producer's loop."""

    def __init__(self, client: AsyncBrokerClient) -> None:
        self.client = client
        self._waiting: dict[asyncio.Task[None], Job] = {}
        self._closed = False

    def handoff(self, job: Job) -> Invoke:
        """The flow step that hands ``job`` over, on the loop that drives the flow."""
        return Invoke(self.submit, (job,), aio=self._submit_here)

    async def _submit_here(self, job: Job) -> None:
        self.submit(job)

    def submit(self, job: Job) -> None:
        job.counts.add("sent")
        if self._closed or len(self._waiting) >= PENDING_MAX:
            job.counts.add("dropped")
            return
        task = asyncio.get_running_loop().create_task(self._run(job))
        self._waiting[task] = job
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._waiting.pop(task, None)

    async def _run(self, job: Job) -> None:
        try:
            await self.client.run(job.flow)
        except Exception as exc:  # never raised: nobody awaits this task
            log.debug("one-way %s failed: %r", job.what, exc)
            job.counts.ended(exc)

    async def close(self, wait_seconds: float) -> None:
        """Give the waiting jobs ``wait_seconds``, then cancel the rest (counted dropped)."""
        self._closed = True
        if not self._waiting:
            return
        _, late = await asyncio.wait(set(self._waiting), timeout=wait_seconds)
        for task in late:
            self._waiting[task].counts.add("dropped")
            task.cancel()
        if late:
            await asyncio.wait(late)
