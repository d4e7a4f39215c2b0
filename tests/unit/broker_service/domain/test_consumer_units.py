"""Consumer groups as the domain runs them, without HTTP: a lease that runs out hands the message
out again, a nack sends a copy through the retry topic on its schedule, and past the group's
``max_reconsume_times`` the message goes to the dead letters, which an operator resends once."""

from __future__ import annotations

import pytest

from broker_service.domain import names
from broker_service.domain.consumers.model import ConsumerGroup, Delivered, Receiving, retry_topic
from broker_service.domain.errors import Conflict
from broker_service.domain.messages.model import MessageDraft
from broker_service.domain.ports import MessageQuery
from tests.unit.broker_service.domain.conftest import Domain

LEVEL_3_MS = 10_000  # ConsumerConfig's third delay level: the first retry's wait


async def _one_message(domain: Domain, group: ConsumerGroup) -> None:
    await domain.messages.create_topic("orders", 1, False)
    await domain.consumers.create_group(group)
    await domain.consumers.subscribe(group.name, "orders", "*")
    await domain.messages.send("orders", [MessageDraft(b"order-1")])


async def _receive(domain: Domain, group: str = "shop") -> list[Delivered]:
    return await domain.consumers.receive(Receiving(group, "member-1", None, 10, 30, 0))


async def _release(domain: Domain, after_ms: int) -> None:
    domain.clock.advance(after_ms)
    await domain.messages.release_due(100)


async def test_an_expired_lease_hands_the_message_out_again_and_its_ack_goes_stale(
    domain: Domain,
) -> None:
    await _one_message(domain, ConsumerGroup("shop"))
    (first,) = await _receive(domain)
    assert await _receive(domain) == [], "invisible while its lease runs"
    domain.clock.advance(30_000)
    (again,) = await _receive(domain)
    assert (again.message.msg_id, again.reconsume_times) == (first.message.msg_id, 1)
    late = await domain.consumers.ack("shop", [first.receipt_handle])
    assert (late.acked, late.stale) == (0, [first.receipt_handle])
    done = await domain.consumers.ack("shop", [again.receipt_handle])
    assert done.acked == 1
    domain.clock.advance(60_000)
    assert await _receive(domain) == []


async def test_a_nack_comes_back_through_the_retry_topic_on_its_schedule(domain: Domain) -> None:
    await _one_message(domain, ConsumerGroup("shop"))
    (delivered,) = await _receive(domain)
    nacked = await domain.consumers.nack("shop", delivered.receipt_handle, None)
    assert (nacked.outcome, nacked.reconsume_times) == ("RETRY", 1)
    assert nacked.deliver_at == domain.clock.now + LEVEL_3_MS
    await _release(domain, LEVEL_3_MS - 1)
    assert await _receive(domain) == [], "not before its time"
    await _release(domain, 1)
    (retried,) = await _receive(domain)
    assert retried.message.topic == retry_topic("shop")
    assert retried.topic == "orders", "shown under the topic it was sent to"
    assert (retried.message.msg_id, retried.reconsume_times) == (delivered.message.msg_id, 1)


async def test_past_max_reconsume_times_the_message_is_dead_and_resent_once(
    domain: Domain,
) -> None:
    await _one_message(domain, ConsumerGroup("shop", max_reconsume_times=0))
    (delivered,) = await _receive(domain)
    nacked = await domain.consumers.nack("shop", delivered.receipt_handle, None)
    assert nacked.outcome == "DLQ"
    (dead,) = await domain.consumers.dead_messages("shop", 10)
    assert (dead.message.msg_id, dead.original_topic, dead.resent_at) == (
        delivered.message.msg_id,
        "orders",
        None,
    )
    resent = await domain.consumers.resend("shop", delivered.message.msg_id)
    assert resent.resent_at == domain.clock.now
    with pytest.raises(Conflict) as twice:
        await domain.consumers.resend("shop", delivered.message.msg_id)
    assert twice.value.code == "MESSAGE_ALREADY_RESENT"
    (back,) = await _receive(domain)
    assert (back.message.msg_id, back.reconsume_times) == (delivered.message.msg_id, 0)


async def test_an_orderly_nack_keeps_the_message_at_the_head_of_its_queue(domain: Domain) -> None:
    await _one_message(domain, ConsumerGroup("shop", orderly=True))
    await domain.messages.send("orders", [MessageDraft(b"order-2")])
    (head,) = await _receive(domain)
    assert head.message.body == b"order-1", "one message of a queue at a time"
    nacked = await domain.consumers.nack("shop", head.receipt_handle, 1)
    assert (nacked.outcome, nacked.deliver_at) == ("RETRY_IN_PLACE", domain.clock.now + 1_000)
    assert await _receive(domain) == [], "nothing newer while the head waits for its retry"
    parked = await domain.messages.query_messages(MessageQuery(topic=names.SCHEDULE_TOPIC))
    assert parked == [], "an orderly retry makes no copy"
    domain.clock.advance(1_000)
    (again,) = await _receive(domain)
    assert (again.message.body, again.reconsume_times) == (b"order-1", 1)
    await domain.consumers.ack("shop", [again.receipt_handle])
    (second,) = await _receive(domain)
    assert second.message.body == b"order-2"
