"""``AsyncPushConsumer``: the asyncio twin of :class:`~framework.consumer.PushConsumer` -- one
receiver task, ``concurrency`` worker tasks, the same prefetch, ack modes, orderly lanes and
graceful shutdown.  Coroutine handlers are awaited; plain ones run in a worker thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import httpx

from framework import inbox, protocol, txlog
from framework.aio_producer import call_handler
from framework.consumer import ONCE, RELEASE_SECONDS, lanes
from framework.consumer_base import AckBuffer, AckMode, ConsumerBase, succeeded
from framework.errors import HalfMQError
from framework.message import Message
from framework.registry import Registered
from framework.transport import AsyncBrokerClient, Verify

log = logging.getLogger("halfmq.consumer")


class AsyncPushConsumer(ConsumerBase):
    def __init__(
        self,
        group: str,
        brokers: Sequence[str],
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        verify: Verify = True,
        **options: Any,
    ) -> None:
        super().__init__(group, brokers, **options)
        self.client = AsyncBrokerClient(
            self.brokers,
            timeout=self.timeout,
            retry=self.retry,
            transport=transport,
            verify=verify,
            credentials=self.credentials,
        )
        self._stopping = False
        self._work: asyncio.Queue[list[Message] | None] = asyncio.Queue()
        self._held = 0
        self._room = asyncio.Condition()
        self._receiver: asyncio.Task[None] | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._acks = AckBuffer(self.batch_ack)

    # -- life ------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.started:
            return
        self.require_subscriptions()
        await self.client.call(
            protocol.create_group(
                self.group,
                message_model=self.message_model,
                consume_from=self.consume_from,
                orderly=self.orderly,
                max_reconsume_times=self.max_reconsume_times,
            )
        )
        for topic, expression in self.subscriptions():
            await self.client.call(protocol.subscribe(self.group, topic, expression))
        self._stopping = False
        self._receiver = asyncio.create_task(self._receive_loop())
        self._workers = [asyncio.create_task(self._work_loop()) for _ in range(self.concurrency)]
        if any(h.options.ack_mode is AckMode.BATCH for h in self.handlers):
            self._flusher = asyncio.create_task(self._flush_loop())
        self.started = True

    async def shutdown(self) -> None:
        if not self.started:
            await self.client.aclose()
            return
        self._stopping = True
        async with self._room:
            self._room.notify_all()
        if self._receiver is not None:  # let a long-poll in flight finish: it may hold messages
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.shield(self._receiver), self.wait_seconds + self.timeout.read + 5
                )
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
        await self._send_acks(self._acks.take())
        await self.client.aclose()
        self.started = False

    async def __aenter__(self) -> AsyncPushConsumer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()

    # -- acknowledgement ---------------------------------------------------------------------------

    async def ack(self, message: Message) -> None:
        await self._send_acks([_handle(message)])

    async def nack(self, message: Message, delay_level: int | None = None) -> str:
        return await self.client.call(protocol.nack(self.group, _handle(message), delay_level))

    async def release(self, message: Message) -> None:
        await self.client.call(
            protocol.change_invisible(self.group, _handle(message), RELEASE_SECONDS)
        )

    # -- the tasks -------------------------------------------------------------------------------

    async def _receive_loop(self) -> None:
        while not self._stopping:
            async with self._room:
                await self._room.wait_for(lambda: self._held <= self.low_water or self._stopping)
                if self._stopping:
                    return
                free = self.batch_size - self._held
            call = protocol.receive(
                self.group, self.client_id, free, self.invisible_seconds, self.wait_seconds
            )
            try:
                messages = await self.client.call(call, ONCE)
            except HalfMQError as exc:
                log.warning("receive failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            self._held += len(messages)
            for lane in lanes(messages, self.orderly):
                self._work.put_nowait(lane)

    async def _work_loop(self) -> None:
        while True:
            lane = await self._work.get()
            if lane is None:
                return
            for n, message in enumerate(lane):
                if self._stopping and n > 0:
                    await self._release(lane[n:])
                    break
                await self._consume(message)
                await self._done(1)

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
            await self._give_back(message)
        await self._done(len(messages))

    async def _give_back(self, message: Message) -> None:
        try:
            await self.release(message)
        except HalfMQError as exc:
            log.info("release of %s failed (it comes back later): %s", message.msg_id, exc)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.batch_ack.max_delay / 2)
            await self._send_acks(self._acks.due())

    # -- one message -----------------------------------------------------------------------------

    async def _consume(self, message: Message) -> None:
        handler = self.handler_for(message)
        if handler is None:
            await self._give_back(message)
            return
        ok, error = await self._run(handler, message)
        if error is not None:
            log.warning("consuming %s failed: %r", message.msg_id, error)
        await self._settle(handler.options.ack_mode, message, ok)

    async def _run(self, handler: Registered[..., Any], message: Message) -> tuple[bool, Any]:
        options = handler.options
        try:
            if options.session_factory is None:
                return succeeded(await call_handler(handler.fn, message)), None
            key = options.dedup_key(message) if options.idempotent else None
            factory = options.session_factory
            if txlog.is_async_factory(factory):
                result = await inbox.consume_async(factory, handler.fn, message, self.group, key)
            else:
                result = await asyncio.to_thread(
                    inbox.consume, factory, handler.fn, message, self.group, key
                )
            return result.ok, result.error
        except Exception as exc:
            return False, exc

    async def _settle(self, mode: AckMode, message: Message, ok: bool) -> None:
        try:
            if not ok:
                await self.nack(message)
            elif mode is AckMode.BATCH:
                await self._send_acks(self._acks.add(_handle(message)))
            elif mode is not AckMode.MANUAL:
                await self._send_acks([_handle(message)])
        except HalfMQError as exc:
            log.info("settling %s failed: %s", message.msg_id, exc)

    async def _send_acks(self, handles: list[str]) -> None:
        if not handles:
            return
        try:
            result = await self.client.call(protocol.ack(self.group, handles))
        except HalfMQError as exc:
            log.warning("ack of %d messages failed (they come again): %s", len(handles), exc)
            return
        if result.stale:
            log.info("%d stale acks: those messages come again", len(result.stale))


def _handle(message: Message) -> str:
    if message.receipt_handle is None:
        raise HalfMQError("only a delivered message can be acked", msg_id=message.msg_id)
    return message.receipt_handle
