"""``AsyncPushConsumer``: the asyncio twin of :class:`~framework.consumer.PushConsumer` -- one
receiver task, ``concurrency`` worker tasks, the same prefetch, ack modes, orderly lanes, graceful
shutdown and flows (:mod:`framework.consumer_base`), driven by
:meth:`AsyncBrokerClient.run <framework.transport.AsyncBrokerClient.run>`.  ``shutdown()`` cancels
a long poll in flight rather than waiting it out.  Coroutine handlers
are awaited; plain ones run in a worker thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import httpx

from framework.client_trace import TaskReporter
from framework.consumer_base import ConsumerBase
from framework.errors import HalfMQError
from framework.member import ONCE, AsyncFace
from framework.message import Message
from framework.transport import AsyncBrokerClient, Verify

log = logging.getLogger("halfmq.consumer")


class AsyncPushConsumer(ConsumerBase[httpx.AsyncBaseTransport], AsyncFace):
    def _connect(self, transport: httpx.AsyncBaseTransport | None, verify: Verify) -> None:
        self.client = self._client(AsyncBrokerClient, transport, verify)
        self.reporter = TaskReporter(self.client_trace, self.client)
        self._stopping = False
        self._work: asyncio.Queue[list[Message] | None] = asyncio.Queue()
        self._held = 0
        self._room = asyncio.Condition()
        self._receiver: asyncio.Task[None] | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._flusher: asyncio.Task[None] | None = None

    # -- life ------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.started:
            return
        await self.client.run(self.register_flow())
        self._stopping = False
        self._receiver = asyncio.create_task(self._receive_loop())
        self._workers = [asyncio.create_task(self._work_loop()) for _ in range(self.concurrency)]
        if self.batching:
            self._flusher = asyncio.create_task(self._flush_loop())
        self.started = True

    async def shutdown(self) -> None:
        if not self.started:
            await self.reporter.close()
            await self.client.aclose()
            return
        self._stopping = True
        async with self._room:
            self._room.notify_all()
        # A long poll in flight is cancelled, not waited out: a message the broker was handing
        # it comes again after its invisibility (at least once).
        for task in (self._receiver, self._flusher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self._release_queued()
        for _ in self._workers:
            self._work.put_nowait(None)
        _, pending = await asyncio.wait(self._workers, timeout=self.shutdown_timeout)
        for task in pending:
            task.cancel()
        self._workers.clear()
        await self.client.run(self.acks_flow(self.acks.take()))
        await self.reporter.close()
        await self.client.aclose()
        self.started = False

    # -- acknowledgement: as PushConsumer's, awaited ----------------------------------------------

    async def ack(self, message: Message) -> None:
        await self.client.run(self.acks_flow(self.ack_handles(message)))

    async def nack(self, message: Message, delay_level: int | None = None) -> str:
        self.unsettled.settled([message])
        return await self.client.call(self.nack_call(message, delay_level))

    async def release(self, message: Message) -> None:
        self.unsettled.settled([message])
        await self.client.call(self.release_call(message))

    # -- the tasks -------------------------------------------------------------------------------

    async def _receive_loop(self) -> None:
        while not self._stopping:
            async with self._room:
                await self._room.wait_for(lambda: self._held <= self.low_water or self._stopping)
                if self._stopping:
                    return
                free = self.batch_size - self._held
            try:
                messages = await self.client.call(self.receive_call(free), ONCE)
            except HalfMQError as exc:
                log.warning("receive failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            self._held += len(messages)
            for lane in self.lanes(messages):
                self._work.put_nowait(lane)

    async def _work_loop(self) -> None:
        while (lane := await self._work.get()) is not None:
            units = self.units(lane)
            for n, unit in enumerate(units):
                if self._stopping and n > 0:
                    await self._release([m for rest in units[n:] for m in rest])
                    break
                await self.client.run(self.unit_flow(unit))
                await self._done(len(unit))

    async def _done(self, count: int) -> None:
        async with self._room:
            self._held -= count
            self._room.notify()

    async def _release_queued(self) -> None:
        while not self._work.empty():
            lane = self._work.get_nowait()
            if lane is not None:
                await self._release(lane)

    async def _release(self, messages: Sequence[Message]) -> None:
        for message in messages:
            await self.client.run(self.give_back_flow(message))
        await self._done(len(messages))

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.batch_ack.max_delay / 2)
            await self.client.run(self.acks_flow(self.acks.due()))
