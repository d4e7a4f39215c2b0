"""AsyncTransactionProducer against the real broker in process (httpx.ASGITransport): the same
semantics as the sync face, async and plain handlers, pull and push check-back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.orm import Session

from framework import (
    AsyncTransactionProducer,
    CheckMode,
    ConflictError,
    LocalTransactionState,
    Message,
)
from framework.tables import local_transaction_log
from halfmq.testing import InProcessBroker
from tests.integration.framework.conftest import Bank, effects
from tests.integration.framework.helpers import await_resolved

State = LocalTransactionState
Make = Callable[..., AsyncTransactionProducer]


async def test_async_handler_commit(aproducers: Make) -> None:
    producer = aproducers()
    states: list[str] = []

    @producer.execute_local_transaction("transfers")
    async def debit(message: Message, arg: Any) -> LocalTransactionState:
        assert message.transaction_id is not None
        states.append((await producer.transaction(message.transaction_id))["state"])
        return arg  # type: ignore[no-any-return]

    async with producer:
        result = await producer.send_message_in_transaction(
            Message("transfers", keys=["t-1"], body="x"), arg=State.COMMIT_MESSAGE
        )
        record = await producer.transaction(result.transaction_id)
    assert states == ["PREPARED"]
    assert (result.resolution, record["state"], record["resolved_by"]) == (
        "COMMITTED",
        "COMMITTED",
        "producer",
    )


@pytest.mark.parametrize("answer", [State.COMMIT_MESSAGE, State.ROLLBACK_MESSAGE])
async def test_async_exception_is_unknow_then_pull_check(
    aproducers: Make, answer: LocalTransactionState
) -> None:
    producer = aproducers()

    @producer.execute_local_transaction("transfers")
    async def debit(message: Message, arg: Any) -> None:
        raise RuntimeError("boom")

    @producer.check_local_transaction("transfers")
    async def check(message: Message) -> LocalTransactionState:
        return answer

    async with producer:
        result = await producer.send_message_in_transaction(Message("transfers", body="x"))
        assert result.local_state is State.UNKNOW
        assert isinstance(result.error, RuntimeError)
        record = await await_resolved(producer, result.transaction_id)
    expected = "COMMITTED" if answer is State.COMMIT_MESSAGE else "ROLLED_BACK"
    assert (record["state"], record["resolved_by"]) == (expected, "check")


async def test_sync_handlers_run_off_the_loop(aproducers: Make) -> None:
    producer = aproducers()
    loop_thread: list[bool] = []

    def debit(message: Message, arg: Any) -> LocalTransactionState:
        try:
            asyncio.get_running_loop()
            loop_thread.append(True)
        except RuntimeError:
            loop_thread.append(False)
        return State.ROLLBACK_MESSAGE

    producer.execute_local_transaction("transfers")(debit)
    async with producer:
        result = await producer.send_message_in_transaction(Message("transfers", body="x"))
    assert result.resolution == "ROLLED_BACK"
    assert loop_thread == [False]


async def test_async_push_check_with_the_built_in_server(aproducers: Make) -> None:
    producer = aproducers(check=CheckMode.push())
    producer.execute_local_transaction("transfers")(lambda m, a: None)

    @producer.check_local_transaction("transfers")
    async def check(message: Message) -> LocalTransactionState:
        return State.COMMIT_MESSAGE

    await producer.serve_checks()
    async with producer:
        result = await producer.send_message_in_transaction(Message("transfers", body="x"))
        record = await await_resolved(producer, result.transaction_id)
    assert (record["state"], record["resolved_by"]) == ("COMMITTED", "check")


async def test_async_transactional_with_a_sync_sessionmaker(bank: Bank, aproducers: Make) -> None:
    producer = aproducers()

    @producer.transactional("transfers", session_factory=bank.Session)
    def debit(session: Session, message: Message, arg: Any) -> None:
        session.execute(insert(effects).values(key=message.keys[0], amount=1))

    async with producer:
        ok = await producer.send_message_in_transaction(Message("transfers", keys=["a"]))
        lost = Message("transfers", keys=["b"], transaction_id="never-ran")
        assert await producer.answer_check(lost) is State.ROLLBACK_MESSAGE
        assert await producer.answer_check(ok.message) is State.COMMIT_MESSAGE
    assert ok.resolution == "COMMITTED"
    assert bank.effects() == ["a"]
    assert bank.count(local_transaction_log) == 2


async def test_async_plain_sends(aproducers: Make) -> None:
    producer = aproducers()
    message = Message("transfers", body="hello", keys=["o-1"], sharding_key="o-1")
    first, again = await producer.send(message), await producer.send(message)
    assert again.duplicate
    assert again.queue_offset == first.queue_offset
    batch = await producer.send_batch([Message("transfers", body=str(i)) for i in range(3)])
    assert len(batch) == 3
    with pytest.raises(ConflictError):
        await producer.send(message.evolve(body="changed"))


async def test_async_test_broker_raw_client(ainproc: InProcessBroker) -> None:
    async with ainproc.async_client() as client:
        assert (await client.get("/healthz")).status_code == 200


async def test_async_transactional_with_an_async_sessionmaker(bank: Bank, aproducers: Make) -> None:
    pytest.importorskip("greenlet", reason="SQLAlchemy's asyncio needs greenlet")
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

    url = bank.url.replace("sqlite://", "sqlite+aiosqlite://")
    if url.startswith("sqlite+aiosqlite"):
        pytest.importorskip("aiosqlite")
    engine = create_async_engine(url)
    producer = aproducers()

    @producer.transactional("transfers", session_factory=async_sessionmaker(engine))
    async def debit(session: AsyncSession, message: Message, arg: Any) -> None:
        await session.execute(insert(effects).values(key=message.keys[0], amount=1))

    async with producer:
        ok = await producer.send_message_in_transaction(Message("transfers", keys=["a"]))
        assert await producer.answer_check(ok.message) is State.COMMIT_MESSAGE
    await engine.dispose()
    assert bank.effects() == ["a"]
