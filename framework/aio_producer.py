"""``AsyncTransactionProducer``: the asyncio twin of :class:`~framework.producer.TransactionProducer`,
on ``httpx.AsyncClient`` and the same protocol core.

Handlers may be coroutine functions (awaited) or plain functions (run in a worker thread so the
event loop never blocks).  ``@producer.transactional`` takes an ``async_sessionmaker`` (handlers
get an ``AsyncSession``) or a plain ``sessionmaker`` (run in a worker thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import httpx

from framework import protocol, txlog
from framework.config import CheckMode, Retry, Timeout
from framework.errors import HalfMQError
from framework.message import (
    LocalTransactionState,
    Message,
    SendResult,
    SendStatus,
    TransactionSendResult,
)
from framework.producer_base import TRANSACTIONAL, ProducerBase, batch_topic, to_state
from framework.signing import CredentialsLike
from framework.transport import AsyncBrokerClient, Verify

log = logging.getLogger("halfmq.producer")
State = LocalTransactionState


async def call_handler(fn: Callable[..., Any], *args: Any) -> Any:
    """Await a coroutine function; run a plain one in a worker thread."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    return await asyncio.to_thread(fn, *args)


class AsyncTransactionProducer(ProducerBase):
    """``async with AsyncTransactionProducer("bob-bank", brokers=[...]) as producer: ...``"""

    def __init__(
        self,
        group: str,
        brokers: Sequence[str],
        *,
        client_id: str | None = None,
        check: CheckMode | None = None,
        timeout: Timeout | None = None,
        retry: Retry | None = None,
        heartbeat_interval: float = 30.0,
        check_immunity_seconds: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        credentials: CredentialsLike = None,
        verify: Verify = True,
    ) -> None:
        super().__init__(
            group,
            brokers,
            client_id=client_id,
            check=check,
            timeout=timeout,
            retry=retry,
            heartbeat_interval=heartbeat_interval,
            check_immunity_seconds=check_immunity_seconds,
            credentials=credentials,
        )
        self.client = AsyncBrokerClient(
            self.brokers,
            timeout=self.timeout,
            retry=self.retry,
            transport=transport,
            verify=verify,
            credentials=self.credentials,
        )
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
        await self.client.aclose()
        self.started = False

    async def __aenter__(self) -> AsyncTransactionProducer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()

    async def serve_checks(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Push mode without a web framework (see :mod:`framework.checkserver`)."""
        from framework.checkserver import start_async_server

        self._server, self.callback_url = await start_async_server(
            self.answer_check, host, port, credentials=self.credentials
        )
        return self.callback_url

    # -- sending ---------------------------------------------------------------------------------

    async def send(self, message: Message) -> SendResult:
        return await self.client.call(protocol.send(message))

    async def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        return await self.client.call(protocol.send_batch(batch_topic(messages), messages))

    async def create_topic(self, name: str, queues: int | None = None, order: bool = False) -> None:
        await self.client.call(protocol.create_topic(name, queues, order))

    async def send_message_in_transaction(
        self, message: Message, arg: Any = None
    ) -> TransactionSendResult:
        executor = self.executor_for(message)
        receipt = await self.client.call(
            protocol.prepare(message, self.group, self.check_immunity_seconds)
        )
        message = message.evolve(transaction_id=receipt.transaction_id)
        if executor.role == TRANSACTIONAL:
            state, error = await self._run_transactional(
                executor.options, executor.fn, message, arg
            )
        else:
            try:
                state, error = (
                    to_state(await call_handler(executor.fn, message, arg), message),
                    None,
                )
            except Exception as exc:
                log.warning("local transaction of %s raised: UNKNOW", receipt.transaction_id)
                state, error = State.UNKNOW, exc
        resolution = None
        if state is not State.UNKNOW:
            try:
                resolution = await self.end(receipt.transaction_id, state, from_check=False)
            except HalfMQError as exc:
                log.warning("end of %s failed: %s", receipt.transaction_id, exc)
                error = error or exc
        return TransactionSendResult(
            SendStatus.SEND_OK,
            receipt.transaction_id,
            receipt.msg_id,
            state,
            message,
            resolution,
            error,
        )

    async def _run_transactional(
        self, factory: Any, fn: Callable[..., Any], message: Message, arg: Any
    ) -> tuple[State, BaseException | None]:
        if txlog.is_async_factory(factory):
            return await txlog.run_local_async(factory, fn, message, arg, self.group)
        return await asyncio.to_thread(txlog.run_local, factory, fn, message, arg, self.group)

    async def end(
        self, transaction_id: str, state: LocalTransactionState, *, from_check: bool
    ) -> str:
        commit = state is State.COMMIT_MESSAGE
        return await self.client.call(
            protocol.end(transaction_id, self.group, commit, from_check=from_check)
        )

    async def transaction(self, transaction_id: str) -> dict[str, Any]:
        return await self.client.call(protocol.get_transaction(transaction_id))

    # -- check-back ------------------------------------------------------------------------------

    async def answer_check(self, message: Message) -> LocalTransactionState:
        handler = self.checkers.find(message.topic)
        if handler is None:
            log.warning("no check handler for topic %s: UNKNOW", message.topic)
            return State.UNKNOW
        try:
            if handler.role != TRANSACTIONAL:
                return to_state(await call_handler(handler.fn, message), message)
            factory = handler.options
            if txlog.is_async_factory(factory):
                return await txlog.check_async(factory, message, self.group)
            return await asyncio.to_thread(txlog.check, factory, message, self.group)
        except Exception:
            log.exception("check of %s failed: UNKNOW", message.transaction_id)
            return State.UNKNOW

    async def heartbeat(self) -> None:
        await self.client.call(
            protocol.heartbeat(self.group, self.client_id, self.callback_url, self.topics())
        )

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                await self.heartbeat()
            except HalfMQError as exc:
                log.warning("heartbeat of %s failed: %s", self.client_id, exc)

    async def _pull_loop(self) -> None:
        mode = self.check_mode
        call = protocol.pull_checks(
            self.group, self.client_id, mode.pull_max, mode.pull_wait_seconds
        )
        limit = asyncio.Semaphore(mode.workers)
        while True:
            try:
                checks = await self.client.call(call, Retry(attempts=1))
            except HalfMQError as exc:
                log.warning("pulling checks failed: %s", exc)
                await asyncio.sleep(min(1.0, mode.pull_wait_seconds))
                continue
            for check in checks:
                task = asyncio.create_task(self._answer_pulled(check, limit))
                self._checking.add(task)
                task.add_done_callback(self._checking.discard)

    async def _answer_pulled(self, check: Message, limit: asyncio.Semaphore) -> None:
        async with limit:
            state = await self.answer_check(check)
            if state is State.UNKNOW or check.transaction_id is None:
                return
            try:
                await self.end(check.transaction_id, state, from_check=True)
            except HalfMQError as exc:
                log.info("answer to the check of %s not applied: %s", check.transaction_id, exc)
