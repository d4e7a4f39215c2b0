"""``AsyncTransactionProducer``: the asyncio twin of :class:`~framework.producer.TransactionProducer`,
on ``httpx.AsyncClient`` and the same flows (:mod:`framework.producer_base`), driven by
:meth:`AsyncBrokerClient.run <framework.transport.AsyncBrokerClient.run>`.

Handlers may be coroutine functions (awaited) or plain functions (run in a worker thread so the
event loop never blocks).  ``@producer.transactional`` takes an ``async_sessionmaker`` (handlers
get an ``AsyncSession``) or a plain ``sessionmaker`` (run in a worker thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import httpx

from framework import protocol
from framework.client_trace import TaskReporter
from framework.errors import HalfMQError
from framework.member import ONCE, AsyncFace
from framework.message import LocalTransactionState, Message, SendResult, TransactionSendResult
from framework.oneway import TaskOneWay
from framework.producer_base import ProducerBase
from framework.transport import AsyncBrokerClient, Verify

log = logging.getLogger("halfmq.producer")


class AsyncTransactionProducer(ProducerBase[httpx.AsyncBaseTransport], AsyncFace):
    """``async with AsyncTransactionProducer("bob-bank", brokers=[...]) as producer: ...``"""

    oneway_sender: TaskOneWay

    def _connect(self, transport: httpx.AsyncBaseTransport | None, verify: Verify) -> None:
        self.client = self._client(AsyncBrokerClient, transport, verify)
        self.reporter = TaskReporter(self.client_trace, self.client)
        self.oneway_sender = TaskOneWay(self.client)
        self._tasks: list[asyncio.Task[None]] = []
        self._checking: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    # -- life ------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.started:
            return
        self.require_callback()
        if self.check_mode.kind != "none":
            await self.heartbeat()
            self._tasks.append(asyncio.create_task(self._heartbeat_loop()))
        if self.check_mode.kind == "pull":
            self._tasks.append(asyncio.create_task(self._pull_loop()))
        self.started = True

    async def shutdown(self) -> None:
        await self.oneway_sender.close(self.client.close_wait)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._checking:
            await asyncio.wait(self._checking, timeout=self.timeout.read)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        await self.reporter.close()
        await self.client.aclose()
        self.started = False

    async def serve_checks(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Push mode without a web framework (see :mod:`framework.checkserver`)."""
        from framework.checkserver import start_async_server

        self._server, self.callback_url = await start_async_server(
            self.answer_check, host, port, credentials=self.credentials
        )
        return self.callback_url

    # -- sending: as TransactionProducer's, awaited ------------------------------------------------

    async def send(self, message: Message) -> SendResult:
        return await self.client.run(self.send_flow(message))

    async def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        return await self.client.run(self.send_batch_flow(messages))

    async def send_oneway(self, message: Message) -> None:
        """As :meth:`TransactionProducer.send_oneway`: the send runs in a task of its own; this
        returns without waiting for it."""
        self.oneway_sender.submit(self.oneway_job(message))

    async def create_topic(self, name: str, queues: int | None = None, order: bool = False) -> None:
        await self.client.call(protocol.create_topic(name, queues, order))

    async def send_message_in_transaction(
        self, message: Message, arg: Any = None
    ) -> TransactionSendResult:
        return await self.client.run(self.send_in_transaction_flow(message, arg))

    async def end(
        self, transaction_id: str, state: LocalTransactionState, *, from_check: bool
    ) -> str:
        return await self.client.call(self.end_call(transaction_id, state, from_check=from_check))

    async def transaction(self, transaction_id: str) -> dict[str, Any]:
        return await self.client.call(protocol.get_transaction(transaction_id))

    # -- check-back ------------------------------------------------------------------------------

    async def answer_check(self, message: Message) -> LocalTransactionState:
        return await self.client.run(self.check_flow(message))

    async def heartbeat(self) -> None:
        await self.client.call(self.heartbeat_call())

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                await self.heartbeat()
            except HalfMQError as exc:
                log.warning("heartbeat of %s failed: %s", self.client_id, exc)

    async def _pull_loop(self) -> None:
        pull, limit = self.pull_call(), asyncio.Semaphore(self.check_mode.workers)
        while True:
            try:
                checks = await self.client.call(pull, ONCE)
            except HalfMQError as exc:
                log.warning("pulling checks failed: %s", exc)
                await asyncio.sleep(min(1.0, self.check_mode.pull_wait_seconds))
                continue
            for check in checks:
                task = asyncio.create_task(self._answer_pulled(check, limit))
                self._checking.add(task)
                task.add_done_callback(self._checking.discard)

    async def _answer_pulled(self, check: Message, limit: asyncio.Semaphore) -> None:
        async with limit:
            await self.client.run(self.pulled_check_flow(check))
