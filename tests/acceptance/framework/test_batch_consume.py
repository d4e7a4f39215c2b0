"""Batch consumption and cumulative client acknowledgement (issue 31, items 2 and 3), against a
real broker process on SQLite and on PostgreSQL:

* a batch handler (``batch_max=N``) gets up to N messages of one queue, in the queue's order on
  an orderly group; the index of the first failed message acks those before it and redelivers
  exactly the rest;
* ``AckMode.CLIENT``: acking the fifth of ten handled messages settles five in one ack request,
  and the other five come back after their invisibility; ``MANUAL`` still acks one.

The in-process test broker, the inbox inside a batch and the FastAPI lifespan are in
``test_batch_consume_inproc.py``."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import create_engine, text

from framework import (
    AckMode,
    AsyncPushConsumer,
    CheckMode,
    ConfigurationError,
    ConsumeResult,
    HalfMQError,
    Message,
    PushConsumer,
    TransactionProducer,
)
from framework.acks import FAILED, BatchVerdict, Unsettled, batch_verdict
from tests.integration.framework.conftest import FAST_FLAGS
from tests.support import PG_BASE_URL, BrokerProcess, free_port, wait_until

ACK_PATH = "/ack"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def process(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """One real broker process per store for this module (each test has its own topic and
    group), with fast retries (retry k waits 300 ms + 100 ms x k)."""
    from broker_service.store import migrate

    tmp_path = tmp_path_factory.mktemp("broker")
    schema = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'broker.db'}"
    else:
        schema = f"halfmq_t_{uuid.uuid4().hex[:12]}"
        _pg(f'CREATE SCHEMA "{schema}"')
        url = f"{PG_BASE_URL}?options=-csearch_path%3D{schema}"
    migrate.upgrade(url)
    broker = BrokerProcess(url, free_port(), tmp_path / "broker.log", *FAST_FLAGS)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
        if schema is not None:
            _pg(f'DROP SCHEMA "{schema}" CASCADE')


def _pg(statement: str) -> None:
    engine = create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(statement))
    finally:
        engine.dispose()


def _topic(process: BrokerProcess, queues: int, order: bool = False) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    with TransactionProducer("admin", brokers=[process.url], check=CheckMode.none()) as admin:
        admin.create_topic(name, queues=queues, order=order)
    return name


def _send(process: BrokerProcess, messages: list[Message]) -> None:
    with TransactionProducer("sender", brokers=[process.url], check=CheckMode.none()) as producer:
        for message in messages:
            producer.send(message)


def _view(process: BrokerProcess, group: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"{process.url}/v1/consumer-groups/{group}").json()
    return answer


class Batches:
    """What a batch handler got, call by call, from several threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[list[Message]] = []

    def add(self, messages: list[Message]) -> None:
        with self.lock:
            self.calls.append(list(messages))

    def bodies(self) -> list[str]:
        with self.lock:
            return [m.text for call in self.calls for m in call]


class AckRecorder(httpx.HTTPTransport):
    """Real HTTP, recording the receipt handles of every ack request."""

    def __init__(self) -> None:
        super().__init__()
        self.acks: list[list[str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(ACK_PATH):
            self.acks.append(orjson.loads(request.content)["receipt_handles"])
        return super().handle_request(request)


class AsyncAckRecorder(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.acks: list[list[str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(ACK_PATH):
            self.acks.append(orjson.loads(request.content)["receipt_handles"])
        return await super().handle_async_request(request)


# -- the rules, without I/O -------------------------------------------------------------------------


def test_batch_verdicts() -> None:
    assert batch_verdict(None, 4) == BatchVerdict(4)
    assert batch_verdict(ConsumeResult.CONSUME_SUCCESS, 4) == BatchVerdict(4)
    assert batch_verdict(ConsumeResult.RECONSUME_LATER, 4) == FAILED
    assert batch_verdict(2, 4) == BatchVerdict(2)
    assert batch_verdict(4, 4) == BatchVerdict(4)
    for wrong in (-1, 5, True, "2", 1.0):  # not an index of the batch: everything is retried
        assert batch_verdict(wrong, 4) == FAILED
    batch = [Message("t", body=str(n)) for n in range(5)]
    assert BatchVerdict(2).split(batch) == (batch[:2], batch[2:3], batch[3:])
    assert FAILED.split(batch) == ([], batch, [])
    assert BatchVerdict(5).split(batch) == (batch, [], [])


def test_unsettled_is_per_queue_in_handing_order_and_forgets_expired_leases() -> None:
    now = [0.0]
    ledger = Unsettled(clock=lambda: now[0])

    def delivered(n: int, queue: int, **fields: Any) -> Message:
        return Message("t", body=str(n), queue_id=queue, receipt_handle=f"h{n}", **fields)

    q0 = [delivered(n, 0) for n in range(4)]
    q1 = [delivered(n, 1) for n in range(4, 6)]
    retry = delivered(9, 0, properties={"RETRY_TOPIC": "t"})  # the retry topic's queue 0
    ledger.handed([q0[0], q1[0], q0[1], retry, q0[2], q1[1]], invisible_seconds=10)
    assert ledger.through(q0[2]) == ["h0", "h1", "h2"]  # not q1's, not the retry copy
    assert ledger.through(q0[1]) == ["h1"]  # settled already: only its own handle
    ledger.settled([q1[0]])  # nacked
    assert ledger.through(q1[1]) == ["h5"]
    now[0] = 11.0  # the retry copy's lease ran out
    ledger.handed([q0[3]], invisible_seconds=10)
    assert ledger.through(retry) == ["h9"]  # its own handle only: nothing earlier is valid
    assert ledger.through(q0[3]) == ["h3"]
    assert len(ledger) == 0


def test_batch_max_must_be_a_count_and_ack_needs_a_delivered_message() -> None:
    consumer = PushConsumer("smith-bank", brokers=["http://127.0.0.1:9"], ack_mode=AckMode.CLIENT)
    for wrong in (0, -3, True, 2.5, "8"):
        with pytest.raises(ConfigurationError, match="batch_max must be a whole number"):
            consumer.subscribe("transfers", batch_max=wrong)
    consumer.subscribe("transfers")(lambda m: None)
    with pytest.raises(HalfMQError, match="only a delivered message can be acked"):
        consumer.ack(Message("transfers"))  # never received: no receipt handle
    consumer.shutdown()


# -- batches on a real broker -----------------------------------------------------------------------


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_orderly_batches_keep_each_queue_in_order_and_a_partial_failure_retries_the_rest(
    process: BrokerProcess, face: str
) -> None:
    topic = _topic(process, queues=3, order=True)
    group = f"orderly-{face}-{uuid.uuid4().hex[:8]}"
    batches, failed = Batches(), threading.Event()
    retried: list[list[str]] = []

    def credit(messages: list[Message]) -> int | None:
        batches.add(messages)
        bodies = [m.text for m in messages]
        if "b:1" in bodies and not failed.is_set():
            failed.set()
            retried.append(bodies[bodies.index("b:1") :])
            return bodies.index("b:1")  # b:0 (if here) done; b:1 failed; the rest not consumed
        return None

    _send(
        process, [Message(topic, body=f"{a}:{n}", sharding_key=a) for n in range(4) for a in "abc"]
    )
    options = {"orderly": True, "concurrency": 3, "wait_seconds": 0.5}
    if face == "sync":
        consumer: Any = PushConsumer(
            group, brokers=[process.url], consume_from="FIRST_OFFSET", **options
        )
        consumer.subscribe(topic, batch_max=4)(credit)
        with consumer:
            wait_until(lambda: len(batches.bodies()) >= 13, 30, "twelve messages and the retry")
            wait_until(lambda: _view(process, group)["lag"] == 0, 20, "every queue settled")
    else:
        consumer = AsyncPushConsumer(
            group, brokers=[process.url], consume_from="FIRST_OFFSET", **options
        )
        consumer.subscribe(topic, batch_max=4)(credit)

        async def run() -> None:
            async with consumer:
                await _until(lambda: len(batches.bodies()) >= 13, "twelve messages and the retry")
                await _until(lambda: _view(process, group)["lag"] == 0, "every queue settled")

        asyncio.run(run())
    calls = batches.calls
    assert all(1 <= len(call) <= 4 for call in calls)
    assert max(len(call) for call in calls) > 1  # the broker hands an orderly queue out in batches
    assert all(len({m.queue_id for m in call}) == 1 for call in calls)  # one queue per call
    for call in calls:  # each call in the queue's order
        offsets = [m.queue_offset or 0 for m in call]
        assert offsets == sorted(offsets)
    done: dict[str, list[int]] = defaultdict(list)  # what was acked, in order, per account
    for call in calls:
        bodies = [m.text for m in call]
        cut = bodies.index("b:1") if call is calls[_failing(calls)] else len(bodies)
        for body in bodies[:cut]:
            account, n = body.split(":")
            done[account].append(int(n))
    assert done == {a: [0, 1, 2, 3] for a in "abc"}
    [rest] = retried  # exactly the rest came again, once each
    counts = Counter(batches.bodies())
    assert {body for body, seen in counts.items() if seen > 1} == set(rest)
    assert all(counts[body] == 2 for body in rest)


def _failing(calls: list[list[Message]]) -> int:
    return next(n for n, call in enumerate(calls) if "b:1" in [m.text for m in call])


@pytest.mark.parametrize("face", ["sync", "asyncio"])
def test_a_returned_index_acks_the_head_and_redelivers_exactly_the_rest(
    process: BrokerProcess, face: str
) -> None:
    """Ten messages of one queue, batches of five: the first call answers 2 -- messages 0 and 1
    are acked, 2 is nacked (the retry topic), 3 and 4 are released (back at once from their
    queue); nothing else comes again."""
    topic = _topic(process, queues=1)
    group = f"partial-{face}-{uuid.uuid4().hex[:8]}"
    _send(process, [Message(topic, body=str(n)) for n in range(10)])
    batches = Batches()

    def credit(messages: list[Message]) -> int | None:
        first_call = not batches.calls
        batches.add(messages)
        return 2 if first_call else None

    options = {"wait_seconds": 0.5, "consume_from": "FIRST_OFFSET", "batch_size": 10}
    if face == "sync":
        consumer: Any = PushConsumer(group, brokers=[process.url], **options)
        consumer.subscribe(topic, batch_max=5)(credit)
        with consumer:
            wait_until(lambda: len(batches.bodies()) >= 13, 30, "ten messages and three again")
            wait_until(lambda: _view(process, group)["lag"] == 0, 20, "every message settled")
    else:
        consumer = AsyncPushConsumer(group, brokers=[process.url], **options)
        consumer.subscribe(topic, batch_max=5)(credit)

        async def run() -> None:
            async with consumer:
                await _until(lambda: len(batches.bodies()) >= 13, "ten messages and three again")
                await _until(lambda: _view(process, group)["lag"] == 0, "every message settled")

        asyncio.run(run())
    first = [m.text for m in batches.calls[0]]
    assert first == ["0", "1", "2", "3", "4"]  # one queue, in order, batch_max at most
    assert all(len(call) <= 5 for call in batches.calls)
    counts = Counter(batches.bodies())
    assert {body for body, seen in counts.items() if seen == 2} == {"2", "3", "4"}
    assert sorted(counts) == [str(n) for n in range(10)]
    assert sum(counts.values()) == 13
    again = {m.text: m for call in batches.calls[1:] for m in call}
    assert "RETRY_TOPIC" in again["2"].properties  # failed: nacked, through the retry topic
    assert again["2"].reconsume_times == 1
    for body in ("3", "4"):  # not consumed: released, back at once from their own queue
        assert "RETRY_TOPIC" not in again[body].properties


# -- cumulative client acknowledgement ------------------------------------------------------------


def test_client_ack_of_the_fifth_of_ten_settles_five_in_one_request(
    process: BrokerProcess,
) -> None:
    topic = _topic(process, queues=1)
    group = f"client-{uuid.uuid4().hex[:8]}"
    recorder = AckRecorder()
    consumer = PushConsumer(
        group, brokers=[process.url], ack_mode=AckMode.CLIENT, concurrency=1, batch_size=10,
        invisible_seconds=4, wait_seconds=0.5, consume_from="FIRST_OFFSET", transport=recorder,
    )  # fmt: skip
    seen: list[Message] = []
    consumer.subscribe(topic)(seen.append)
    _send(process, [Message(topic, body=str(n)) for n in range(10)])
    with consumer:
        wait_until(lambda: len(seen) >= 10, 20, "ten messages")
        assert recorder.acks == []  # CLIENT: nothing acked by the framework
        consumer.ack(seen[4])
        assert recorder.acks == [[m.receipt_handle for m in seen[:5]]]  # one request, five
        assert _view(process, group)["in_flight"] == 5
        wait_until(lambda: len(seen) >= 15, 20, "the five unsettled, after their invisibility")
        again = seen[10:15]
        assert sorted(m.text for m in again) == ["5", "6", "7", "8", "9"]
        assert all(m.reconsume_times == 1 for m in again)
        consumer.ack(again[-1])  # settles the five redelivered ones
        assert len(recorder.acks[-1]) == 5
        time.sleep(1.0)
    assert [m.text for m in seen[:10]] == [str(n) for n in range(10)]
    assert len(seen) == 15  # the first five never came again
    assert _view(process, group)["lag"] == 0


def test_async_client_ack_is_cumulative_and_manual_is_not(process: BrokerProcess) -> None:
    topic = _topic(process, queues=1)
    _send(process, [Message(topic, body=str(n)) for n in range(10)])

    async def ack_fifth(mode: AckMode) -> tuple[list[list[str]], list[Message]]:
        recorder = AsyncAckRecorder()
        consumer = AsyncPushConsumer(
            f"{mode.value.lower()}-{uuid.uuid4().hex[:8]}", brokers=[process.url],
            ack_mode=mode, concurrency=1, batch_size=10, invisible_seconds=30, wait_seconds=0.5,
            consume_from="FIRST_OFFSET", transport=recorder,
        )  # fmt: skip
        seen: list[Message] = []
        consumer.subscribe(topic)(seen.append)
        async with consumer:
            await _until(lambda: len(seen) >= 10, "ten messages")
            await consumer.ack(seen[4])
            view = _view(process, consumer.group)
        assert view["in_flight"] == (5 if mode is AckMode.CLIENT else 9)
        return recorder.acks, seen

    acks, seen = asyncio.run(ack_fifth(AckMode.CLIENT))
    assert acks == [[m.receipt_handle for m in seen[:5]]]
    acks, seen = asyncio.run(ack_fifth(AckMode.MANUAL))
    assert acks == [[seen[4].receipt_handle]]


async def _until(predicate: Callable[[], Any], what: str, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.05)
