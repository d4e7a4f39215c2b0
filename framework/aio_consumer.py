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
        self._carried: list[str] = []  # the acks riding on the receive in flight

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
        # Acks riding on a receive that was cancelled are sent again alone (an ack the broker
        # had applied is answered stale): none is lost.
        carried, self._carried = [*self._carried, *self.riders.take()], []
        await self.client.run(self.acks_flow(carried))
        await self._release_queued()
        for _ in self._workers:
            self._work.put_nowait(None)
        _, pending = await asyncio.wait(self._workers, timeout=self.shutdown_timeout)
        for task in pending:
            task.cancel()
        self._workers.clear()
        await self.client.run(self.acks_flow([*self.riders.take(), *self.acks.take()]))
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
            await self._wait_for_room()
            if self._stopping:
                return
            self._carried = await self._riders()
            free = self.batch_size - self._held
            try:
                messages = await self._receive(self._carried, free)
            except HalfMQError as exc:
                self._carried = []  # sent alone (_receive)
                log.warning("receive failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            self._carried = []
            self._held += len(messages)
            for lane in self.lanes(messages):
                self._work.put_nowait(lane)

    async def _wait_for_room(self) -> None:
        """Until the prefetch runs low (or the consumer stops).  Meanwhile the handlers' acks
        ride on the next receive (:class:`~framework.acks.AckRiders`); those that waited the
        linger without one going (slow handlers: the prefetch drains slowly) are sent alone."""
        if self.riding:
            self.riders.open()
        while True:
            async with self._room:
                while self._held > self.low_water and not self._stopping:
                    linger = self.linger.seconds if self.riders.pending else None
                    try:
                        await asyncio.wait_for(self._room.wait(), linger)
                    except TimeoutError:
                        break
                else:
                    return
                self._carried = self.riders.take()
            await self.client.run(self.acks_flow(self._carried))
            self._carried = []
            self.riders.open()

    async def _riders(self) -> list[str]:
        """While messages received are still being handled, wait for them a little (at most
        the linger), taking their acks along."""
        if not self.riding:
            return []
        if self._held:
            async with self._room:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._room.wait_for(lambda: self._held == 0 or self._stopping),
                        self.linger.seconds,
                    )
        return self.riders.take()

    async def _receive(self, handles: list[str], free: int) -> list[Message]:
        """A receive of up to ``free`` messages, carrying the acks of ``handles`` (sent alone, as
        ever, when the ack-and-receive fails)."""
        if not handles:
            return await self.client.call(self.receive_call(free), ONCE)
        try:
            _, messages = await self.client.call(self.ack_and_receive_call(handles, free), ONCE)
        except HalfMQError as exc:
            self.riders_failed(exc)
            await self.client.run(self.acks_flow(handles))
            raise
        return messages

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
