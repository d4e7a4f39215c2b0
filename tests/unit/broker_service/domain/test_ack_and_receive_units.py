"""``ConsumerService.ack_and_receive``: a member's acks and its next receive in one unit -- the
acks applied as an ack applies them (stale handles told), the next messages handed out as a
receive hands them out, an orderly queue freed by the ack handed on in the same answer, and a
refused receive applying no ack."""

from __future__ import annotations

import pytest

from broker_service.domain.consumers.model import ConsumerGroup, Delivered, Receiving
from broker_service.domain.errors import NotFound
from broker_service.domain.messages.model import MessageDraft
from tests.unit.broker_service.domain.conftest import Domain


async def _setup(domain: Domain, group: ConsumerGroup, count: int, *, order: bool = False) -> None:
    await domain.messages.create_topic("orders", 1, order)
    await domain.consumers.create_group(group)
    await domain.consumers.subscribe(group.name, "orders", "*")
    drafts = [MessageDraft(f"order-{n}".encode(), sharding_key="acct-1") for n in range(count)]
    await domain.messages.send("orders", drafts)


async def _receive(domain: Domain, most: int = 10) -> list[Delivered]:
    return await domain.consumers.receive(Receiving("shop", "member-1", None, most, 30, 0))


def _bodies(delivered: list[Delivered]) -> list[bytes]:
    return [d.message.body for d in delivered]


async def test_the_acks_are_applied_and_the_next_messages_handed_out(domain: Domain) -> None:
    await _setup(domain, ConsumerGroup("shop"), 4)
    first = await _receive(domain, 2)
    handles = [d.receipt_handle for d in first]
    acked, delivered = await domain.consumers.ack_and_receive(
        [*handles, "no-such-handle"], Receiving("shop", "member-1", None, 10, 30, 0)
    )
    assert (acked.acked, acked.stale) == (2, ["no-such-handle"])
    assert _bodies(delivered) == [b"order-2", b"order-3"]
    again = await domain.consumers.ack("shop", handles)
    assert (again.acked, again.stale) == (0, handles), "acked once: stale the second time"
    domain.clock.advance(60_000)  # past every lease: only what was not acked comes again
    redelivered = await _receive(domain)
    assert _bodies(redelivered) == [b"order-2", b"order-3"]


async def test_an_orderly_queue_freed_by_the_ack_hands_out_its_next_message_at_once(
    domain: Domain,
) -> None:
    await _setup(domain, ConsumerGroup("shop", orderly=True), 3, order=True)
    (head,) = await _receive(domain)
    assert await _receive(domain) == [], "the queue is held while its head is open"
    acked, delivered = await domain.consumers.ack_and_receive(
        [head.receipt_handle], Receiving("shop", "member-1", None, 10, 30, 0)
    )
    assert acked.acked == 1
    assert _bodies(delivered) == [b"order-1"], "the next of the queue, in the same answer"


async def test_a_refused_receive_applies_no_ack(domain: Domain) -> None:
    await _setup(domain, ConsumerGroup("shop"), 1)
    (delivered,) = await _receive(domain)
    with pytest.raises(NotFound) as refused:
        await domain.consumers.ack_and_receive(
            [delivered.receipt_handle], Receiving("shop", "member-1", "not-subscribed", 10, 30, 0)
        )
    assert refused.value.code == "SUBSCRIPTION_NOT_FOUND"
    later = await domain.consumers.ack("shop", [delivered.receipt_handle])
    assert later.acked == 1, "the handle was still in flight"


async def test_with_nothing_to_receive_the_acks_stand_and_the_answer_is_empty(
    domain: Domain,
) -> None:
    await _setup(domain, ConsumerGroup("shop"), 1)
    (delivered,) = await _receive(domain)
    acked, more = await domain.consumers.ack_and_receive(
        [delivered.receipt_handle], Receiving("shop", "member-1", None, 10, 30, 0.05)
    )
    assert (acked.acked, more) == (1, [])
    domain.clock.advance(60_000)
    assert await _receive(domain) == [], "acked: never handed out again"
