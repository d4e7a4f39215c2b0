"""PushConsumer (sync) against the real broker in process: acks and nacks, concurrency and the
prefetch bound, orderly mode, the four ack modes, the inbox under forced redelivery, graceful
shutdown."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
import pytest
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from framework import ConsumeResult, Message, TransactionProducer
from framework.acks import AckMode, BatchAck, DedupKey
from framework.consumer import PushConsumer
from framework.tables import inbox
from halfmq.testing import InProcessBroker
from tests.integration.framework.conftest import Bank, effects
from tests.support import wait_until

MakeConsumer = Callable[..., PushConsumer]
MakeProducer = Callable[..., TransactionProducer]


class Seen:
    """What handlers saw, from several threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[Message] = []
        self.running = 0
        self.peak = 0

    def add(self, message: Message) -> None:
        with self.lock:
            self.items.append(message)

    def enter(self) -> None:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)

    def leave(self) -> None:
        with self.lock:
            self.running -= 1

    def bodies(self) -> list[str]:
        with self.lock:
            return [m.text for m in self.items]


def _has(seen: Seen, count: int) -> bool:
    return len(seen.items) >= count


def _send(producers: MakeProducer, count: int, **fields: Any) -> list[Message]:
    producer = producers("sender")
    messages = [Message("transfers", body=str(i), keys=[f"k-{i}"], **fields) for i in range(count)]
    for message in messages:
        producer.send(message)
    return messages


def _group(inproc: InProcessBroker, group: str = "smith-bank") -> dict[str, Any]:
    with inproc.client() as client:
        answer: dict[str, Any] = client.get(f"/v1/consumer-groups/{group}").json()
        return answer


def _settled(inproc: InProcessBroker, group: str = "smith-bank") -> bool:
    view = _group(inproc, group)
    return bool(view["lag"] == 0 and view["in_flight"] == 0 and view["retrying"] == 0)


def test_success_acks_each_message_once(
    consumers: MakeConsumer, producers: MakeProducer, inproc: InProcessBroker
) -> None:
    seen = Seen()
    consumer = consumers()

    @consumer.subscribe("transfers", tags="*")
    def credit(message: Message) -> ConsumeResult | None:
        seen.add(message)
        return ConsumeResult.CONSUME_SUCCESS if int(message.text) % 2 else None

    sent = _send(producers, 10)
    with consumer:
        wait_until(lambda: len(seen.items) >= 10, 10, "ten deliveries")
        wait_until(lambda: _settled(inproc), 10, "every ack")
    assert sorted(seen.bodies()) == sorted(m.text for m in sent)
    assert {m.msg_id for m in seen.items} == {m.msg_id for m in sent}
    assert all(m.receipt_handle and m.topic == "transfers" for m in seen.items)


@pytest.mark.parametrize("failure", ["reconsume_later", "raise"])
def test_failure_nacks_and_the_message_comes_again(
    consumers: MakeConsumer, producers: MakeProducer, failure: str
) -> None:
    seen = Seen()
    consumer = consumers()

    @consumer.subscribe("transfers")
    def credit(message: Message) -> ConsumeResult:
        seen.add(message)
        if message.reconsume_times == 0:
            if failure == "raise":
                raise RuntimeError("smith's ledger is locked")
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.CONSUME_SUCCESS

    _send(producers, 1)
    with consumer:
        wait_until(lambda: len(seen.items) >= 2, 10, "the retry")
    assert [m.reconsume_times for m in seen.items] == [0, 1]
    assert seen.items[0].msg_id == seen.items[1].msg_id


def test_tag_filter(consumers: MakeConsumer, producers: MakeProducer) -> None:
    seen = Seen()
    consumer = consumers()
    consumer.subscribe("transfers", tags=["TagA", "TagB"])(seen.add)
    producer = producers("sender")
    for tag in ("TagA", "TagB", "TagC", "TagA"):
        producer.send(Message("transfers", body=tag, tags=tag))
    with consumer:
        wait_until(lambda: len(seen.items) >= 3, 10, "tagged deliveries")
        time.sleep(0.5)
    assert sorted(seen.bodies()) == ["TagA", "TagA", "TagB"]


@pytest.mark.parametrize(("concurrency", "batch_size", "bound"), [(3, 32, 3), (8, 2, 2)])
def test_concurrency_pool_and_prefetch_bound_what_runs(
    consumers: MakeConsumer,
    producers: MakeProducer,
    concurrency: int,
    batch_size: int,
    bound: int,
) -> None:
    seen = Seen()
    consumer = consumers(concurrency=concurrency, batch_size=batch_size)

    @consumer.subscribe("transfers")
    def slow(message: Message) -> None:
        seen.enter()
        time.sleep(0.1)
        seen.add(message)
        seen.leave()

    _send(producers, 12)
    with consumer:
        wait_until(lambda: len(seen.items) >= 12, 20, "twelve deliveries")
    assert 1 < seen.peak <= bound


def test_orderly_keeps_each_queue_in_order_through_retries(
    consumers: MakeConsumer, producers: MakeProducer
) -> None:
    seen = Seen()
    consumer = consumers(orderly=True, concurrency=4, group="smith-orderly")
    failed_once: set[str] = set()

    @consumer.subscribe("transfers")
    def credit(message: Message) -> ConsumeResult:
        if int(message.text.split(":")[1]) % 3 == 1 and message.msg_id not in failed_once:
            failed_once.add(message.msg_id)
            return ConsumeResult.RECONSUME_LATER
        seen.add(message)
        return ConsumeResult.CONSUME_SUCCESS

    producer = producers("sender")
    for n in range(4):
        for account in ("a", "b", "c"):
            producer.send(Message("transfers", body=f"{account}:{n}", sharding_key=account))
    with consumer:
        wait_until(lambda: len(seen.items) >= 12, 30, "twelve deliveries")
    order: dict[str, list[int]] = defaultdict(list)
    for body in seen.bodies():
        account, number = body.split(":")
        order[account].append(int(number))
    assert order == {a: list(range(4)) for a in "abc"}


def test_manual_ack_mode(consumers: MakeConsumer, producers: MakeProducer) -> None:
    seen = Seen()
    consumer = consumers(ack_mode=AckMode.MANUAL, invisible_seconds=1.0)

    @consumer.subscribe("transfers")
    def credit(message: Message) -> None:
        seen.add(message)
        if message.text == "0" or len([m for m in seen.items if m.text == "1"]) > 1:
            consumer.ack(message)  # "1" is acked only on its second delivery

    _send(producers, 2)
    with consumer:
        wait_until(lambda: seen.bodies().count("1") >= 2, 10, "the unacked message again")
        time.sleep(1.0)
    counts = Counter(seen.bodies())
    assert counts["0"] == 1  # acked by the handler: never again
    assert counts["1"] >= 2  # not acked at first: delivered again after its invisibility


def test_batch_ack_mode_gathers_acks(
    consumers: MakeConsumer, producers: MakeProducer, inproc: InProcessBroker
) -> None:
    seen = Seen()
    acks: list[int] = []
    consumer = consumers(ack_mode=AckMode.BATCH, batch_ack=BatchAck(max_count=5, max_delay=0.2))

    def count_acks(request: httpx.Request) -> None:
        if request.url.path.endswith("/ack"):
            acks.append(len(httpx.Response(200, content=request.content).json()["receipt_handles"]))

    consumer.client.http.event_hooks["request"].append(count_acks)
    consumer.subscribe("transfers")(seen.add)
    _send(producers, 12)
    with consumer:
        wait_until(lambda: len(seen.items) >= 12, 10, "twelve deliveries")
        wait_until(lambda: _settled(inproc), 10, "the batched acks")
    assert sum(acks) == 12
    assert len(acks) < 12
    assert max(acks) <= 5


def test_transacted_ack_follows_the_commit(
    bank: Bank, consumers: MakeConsumer, producers: MakeProducer, inproc: InProcessBroker
) -> None:
    consumer = consumers()
    attempts: Counter[str] = Counter()

    @consumer.subscribe("transfers", session_factory=bank.Session)
    def credit(session: Session, message: Message) -> None:
        attempts[message.text] += 1
        session.execute(insert(effects).values(key=message.keys[0], amount=1))
        if message.text == "1" and message.reconsume_times == 0:
            raise RuntimeError("rolled back: no effect, nacked")

    _send(producers, 3)
    with consumer:
        wait_until(lambda: len(bank.effects()) >= 3, 15, "three effects")
        wait_until(lambda: _settled(inproc), 10, "every ack")
    assert bank.effects() == ["k-0", "k-1", "k-2"]
    assert attempts == {"0": 1, "1": 2, "2": 1}


@pytest.mark.parametrize("dedup", [DedupKey.FIRST_KEY, DedupKey.MSG_ID])
def test_inbox_gives_one_effect_per_message_under_forced_redelivery(
    bank: Bank,
    consumers: MakeConsumer,
    producers: MakeProducer,
    inproc: InProcessBroker,
    dedup: DedupKey,
) -> None:
    """The first delivery holds its transaction longer than its invisibility: the broker hands
    the message to a second member, which waits on the inbox row, finds it committed, and acks
    without a second effect.  The business key also dedups a re-sent copy with a new msg_id."""
    ran: Counter[str] = Counter()
    lock = threading.Lock()

    def credit(session: Session, message: Message) -> None:
        with lock:
            ran[message.keys[0]] += 1
            first = ran[message.keys[0]] == 1
        session.execute(
            update(effects)
            .where(effects.c.key == message.keys[0])
            .values(amount=effects.c.amount + 1)
        )
        if first:
            time.sleep(1.2)  # past the 0.5 s invisibility: the message is delivered again

    with bank.Session.begin() as session:
        session.execute(insert(effects), [{"key": f"k-{i}", "amount": 0} for i in range(3)])
    members = [
        consumers(client_id=f"smith-{n}", invisible_seconds=0.5, concurrency=2) for n in range(2)
    ]
    for member in members:
        member.subscribe("transfers", idempotent=bank.Session, dedup=dedup)(credit)
    sent = _send(producers, 3)
    producers("resender").send(sent[0].evolve(msg_id="a-new-id"))  # the same business id
    for member in members:
        member.start()
    wait_until(lambda: _settled(inproc), 20, "every message settled")
    with bank.engine.connect() as conn:
        amounts = dict(conn.execute(select(effects.c.key, effects.c.amount)).all())
        recorded = conn.execute(select(inbox.c.dedup_key)).scalars().all()
    if dedup is DedupKey.FIRST_KEY:
        assert amounts == {"k-0": 1, "k-1": 1, "k-2": 1}
        assert sorted(recorded) == ["k-0", "k-1", "k-2"]
    else:
        assert amounts == {"k-0": 2, "k-1": 1, "k-2": 1}  # two msg_ids: two messages
        assert len(recorded) == 4


def test_graceful_shutdown_finishes_what_runs_and_releases_the_rest(
    consumers: MakeConsumer, producers: MakeProducer, inproc: InProcessBroker
) -> None:
    seen, started = Seen(), threading.Event()
    first = consumers(client_id="first", concurrency=1, batch_size=5)

    @first.subscribe("transfers")
    def slow(message: Message) -> None:
        started.set()
        time.sleep(0.5)
        seen.add(message)

    _send(producers, 5)
    first.start()
    assert started.wait(10)
    first.shutdown()
    finished_by_first = len(seen.items)
    assert finished_by_first >= 1
    second = consumers(client_id="second", invisible_seconds=30)
    second.subscribe("transfers")(seen.add)
    began = time.monotonic()
    with second:
        wait_until(lambda: len(seen.items) >= 5, 10, "the released messages")
    assert time.monotonic() - began < 5  # released, not left to their 30 s invisibility
    assert sorted(seen.bodies()) == ["0", "1", "2", "3", "4"]


def test_broadcasting_members_each_get_every_message(
    consumers: MakeConsumer, producers: MakeProducer
) -> None:
    seen = [Seen(), Seen()]
    for n in range(2):
        member = consumers(group="smith-audit", client_id=f"audit-{n}", broadcasting=True)
        member.subscribe("transfers")(seen[n].add)
        member.start()
    _send(producers, 4)
    for member_seen in seen:
        wait_until(partial(_has, member_seen, 4), 10, "every message at every member")
    assert sorted(seen[0].bodies()) == sorted(seen[1].bodies()) == ["0", "1", "2", "3"]


def test_a_transactional_message_reaches_the_consumer_only_when_committed(
    consumers: MakeConsumer, producers: MakeProducer
) -> None:
    seen = Seen()
    producer = producers()
    producer.execute_local_transaction("transfers")(lambda m, arg: arg)
    consumer = consumers()
    consumer.subscribe("transfers")(seen.add)
    from framework import LocalTransactionState as State

    with producer, consumer:
        producer.send_message_in_transaction(
            Message("transfers", body="rolled back"), arg=State.ROLLBACK_MESSAGE
        )
        committed = producer.send_message_in_transaction(
            Message("transfers", body="committed"), arg=State.COMMIT_MESSAGE
        )
        wait_until(lambda: len(seen.items) >= 1, 10, "the committed message")
        time.sleep(0.5)
    assert seen.bodies() == ["committed"]
    assert seen.items[0].transaction_id == committed.transaction_id


def test_a_delayed_message_is_consumed_after_its_delay(
    consumers: MakeConsumer, producers: MakeProducer
) -> None:
    seen = Seen()
    consumer = consumers()
    consumer.subscribe("transfers")(seen.add)
    with consumer:
        sent_at = time.monotonic()
        producers("sender").send(Message("transfers", body="later", delay_level=5))  # 500 ms here
        wait_until(lambda: len(seen.items) >= 1, 10, "the delayed message")
        waited = time.monotonic() - sent_at
    assert seen.bodies() == ["later"]
    assert waited >= 0.45
