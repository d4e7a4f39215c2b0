"""A transaction's end sent one way (``end_oneway=True``, issue 33): ``send_message_in_transaction``
returns once the local transaction has answered, with no resolution; the commit or rollback
reaches the broker from the background, shares requests with the others in flight, is counted in
``producer.oneway_ends``, and is given its time at shutdown.  A lost end is the check-back's
(tests/acceptance/framework/test_oneway_end_crash.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session

from framework import (
    AsyncTransactionProducer,
    LocalTransactionState,
    Message,
    TransactionProducer,
)
from tests.integration.framework.conftest import Bank, effects

State = LocalTransactionState


def _debit(session: Session, message: Message, arg: Any) -> LocalTransactionState | None:
    """The local transaction: the effect, then the caller's answer (``arg``: roll back)."""
    session.execute(insert(effects).values(key=message.keys[0], amount=1))
    return State.ROLLBACK_MESSAGE if arg == "refuse" else None


def test_the_ends_arrive_from_the_background_and_shutdown_waits_for_them(
    bank: Bank, producers: Callable[..., TransactionProducer]
) -> None:
    producer = producers(end_oneway=True)
    producer.transactional("transfers", session_factory=bank.Session)(_debit)
    with producer:
        kept = producer.send_message_in_transaction(Message("transfers", keys=["kept"]))
        refused = producer.send_message_in_transaction(
            Message("transfers", keys=["refused"]), arg="refuse"
        )
    # The caller had the local transaction's answer, not the broker's ...
    assert (kept.local_state, kept.resolution, kept.error) == (State.COMMIT_MESSAGE, None, None)
    assert (refused.local_state, refused.resolution) == (State.ROLLBACK_MESSAGE, None)
    # ... and shutdown() gave both ends their time: each reached the broker, once.
    ends = producer.oneway_ends.read()
    assert (ends.sent, ends.stored, ends.pending, ends.dropped) == (2, 2, 0, 0)
    assert producer.oneway.read().sent == 0  # the one-way *sends* are counted apart
    reader = producers(group="reader")
    assert (reader.transaction(kept.transaction_id)["state"], bank.effects()) == (
        "COMMITTED",
        ["kept"],
    )
    record = reader.transaction(refused.transaction_id)
    assert (record["state"], record["resolved_by"]) == ("ROLLED_BACK", "producer")


def test_an_unknow_hands_nothing_over(
    bank: Bank, producers: Callable[..., TransactionProducer]
) -> None:
    producer = producers(end_oneway=True)

    @producer.execute_local_transaction("transfers")
    def undecided(message: Message, arg: Any) -> LocalTransactionState:
        return State.UNKNOW

    with producer:
        result = producer.send_message_in_transaction(Message("transfers", keys=["maybe"]))
    assert (result.local_state, result.resolution) == (State.UNKNOW, None)
    assert producer.oneway_ends.read().sent == 0
    assert producers(group="reader").transaction(result.transaction_id)["state"] == "PREPARED"


async def test_concurrent_ends_share_requests_on_the_async_face(
    bank: Bank, aproducers: Callable[..., AsyncTransactionProducer]
) -> None:
    producer = aproducers(end_oneway=True)
    producer.transactional("transfers", session_factory=bank.Session)(_debit)
    keys = [f"t-{n}" for n in range(24)]
    async with producer:
        results = await asyncio.gather(
            *(
                producer.send_message_in_transaction(
                    Message("transfers", keys=[key]), arg="refuse" if n % 4 == 0 else None
                )
                for n, key in enumerate(keys)
            )
        )
        assert all(r.resolution is None for r in results)
    ends = producer.oneway_ends.read()
    assert (ends.sent, ends.stored, ends.pending) == (24, 24, 0)
    committed = sorted(key for n, key in enumerate(keys) if n % 4)
    assert sorted(bank.effects()) == committed
    reader = aproducers(group="reader")
    async with reader:
        states = [(await reader.transaction(r.transaction_id))["state"] for r in results]
    assert states == ["ROLLED_BACK" if n % 4 == 0 else "COMMITTED" for n in range(24)]
