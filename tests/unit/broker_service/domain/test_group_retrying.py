"""A consumer group's ``retrying`` total counts what its rows count (issue 29, item 9): a
lease that expired, an orderly retry at the head of its queue and a retry copy waiting for its
delay are each retrying in their queue's row and in the group's total, on both stores."""

from __future__ import annotations

import pytest

from broker_service.domain.consumers.model import ConsumerGroup, GroupView, Receiving, retry_topic
from broker_service.domain.messages.model import MessageDraft
from broker_service.domain.ports import Store
from tests.unit.broker_service.domain.conftest import Domain


@pytest.fixture
def store(any_store: Store) -> Store:
    """The domain's services on every store (the domain conftest's are on SQLite and memory)."""
    return any_store


async def _three_queues(domain: Domain, group: ConsumerGroup) -> None:
    await domain.messages.create_topic("orders", 3, False)
    await domain.consumers.create_group(group)
    await domain.consumers.subscribe(group.name, "orders", "*")
    for i in range(3):  # one by one: round robin, one a queue
        await domain.messages.send("orders", [MessageDraft(f"m{i}".encode())])


def _rows(view: GroupView) -> dict[tuple[str, int], int]:
    return {(q.topic, q.queue_id): q.retrying for q in view.queues if q.retrying}


def _rows_total(view: GroupView) -> int:
    """What the page's rows add up to: the subscribed topics' retrying, the retry topic's lag."""
    retry = retry_topic(view.group.name)
    return sum(q.retrying for q in view.queues if q.topic != retry) + view.retry_lag


async def test_expired_leases_are_retrying_in_their_rows_and_in_the_total(domain: Domain) -> None:
    await _three_queues(domain, ConsumerGroup("late"))
    got = await domain.consumers.receive(Receiving("late", "c1", None, 10, 1, 0))
    assert len(got) == 3
    domain.clock.advance(5_000)  # every lease has run out: each waits to be handed out again

    view = await domain.consumers.view("late")
    assert _rows(view) == {("orders", 0): 1, ("orders", 1): 1, ("orders", 2): 1}
    assert view.retrying == 3 == _rows_total(view)

    # Handed out again and nacked: now three retry copies wait for their delay, still 3.
    got = await domain.consumers.receive(Receiving("late", "c1", None, 10, 30, 0))
    assert len(got) == 3
    for d in got:
        assert (await domain.consumers.nack("late", d.receipt_handle, None)).outcome == "RETRY"
    view = await domain.consumers.view("late")
    assert _rows(view) == {("orders", 0): 1, ("orders", 1): 1, ("orders", 2): 1}
    assert view.retrying == 3 == _rows_total(view)


async def test_orderly_retries_are_retrying_in_their_rows_and_in_the_total(
    domain: Domain,
) -> None:
    await _three_queues(domain, ConsumerGroup("ordered", orderly=True))
    got = await domain.consumers.receive(Receiving("ordered", "c1", None, 10, 30, 0))
    assert len(got) == 3
    for d in got[:2]:  # two stay at the head of their queues (RETRYING)
        nacked = await domain.consumers.nack("ordered", d.receipt_handle, None)
        assert nacked.outcome == "RETRY_IN_PLACE"
    view = await domain.consumers.view("ordered")
    assert sorted(_rows(view).values()) == [1, 1]
    assert view.retrying == 2 == _rows_total(view)
