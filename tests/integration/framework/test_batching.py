"""Shared requests (issue 20) through both faces against the real broker in process, on both
stores: concurrent transactions in one producer send their halves in one request and their
decisions in another, with each transaction's guarantees -- its half durable before its local
transaction runs, its decision applied exactly once under retries, its failure its own (an
unknown topic, a topic the account may not send to, a message over the limit fail that call
only).  Plain sends and consumer acks share requests the same way; ``batch_linger_ms=0`` is one
request per call, as before.

To make a gathering certain rather than likely, the tests hold the first call's request (a call
with nothing else in flight goes alone at once) until the others have gathered behind it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from framework import (
    AsyncPushConsumer,
    AsyncTransactionProducer,
    CheckMode,
    LocalTransactionState,
    Message,
    MessageTooLargeError,
    NotFoundError,
    PermissionDeniedError,
    PushConsumer,
    TransactionProducer,
)
from framework.protocol import HALVES, SENDS, Lane
from halfmq.testing import InProcessBroker
from tests.integration.framework.conftest import FAST
from tests.support import BOB, OPERATOR, wait_until

COMMIT = LocalTransactionState.COMMIT_MESSAGE
NONE = CheckMode.none()
HALVES_PATH, DECISIONS_PATH = "/v1/transactions:batch", "/v1/transactions/decisions:batch"
SENDS_PATH = "/v1/messages:batch"


class Recorder(httpx.BaseTransport):
    """The broker's transport, recording every request (path, JSON body); ``before`` runs
    before a request goes on, ``after`` may replace what came back."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.seen: list[tuple[str, Any]] = []
        self.before: Callable[[httpx.Request], None] | None = None
        self.after: Callable[[httpx.Request, httpx.Response], httpx.Response] | None = None
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content) if request.content else None
        with self._lock:
            self.seen.append((request.url.path, body))
        if self.before is not None:
            self.before(request)
        response = self.inner.handle_request(request)
        if self.after is not None:
            response.read()
            response = self.after(request, response)
        return response

    def paths(self) -> list[str]:
        return [path for path, _ in self.seen]

    def bodies(self, path: str) -> list[Any]:
        return [body for seen, body in self.seen if seen == path]


class AsyncRecorder(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.seen: list[tuple[str, Any]] = []
        self.before: Callable[[httpx.Request], Awaitable[None]] | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        content = await request.aread()
        self.seen.append((request.url.path, orjson.loads(content) if content else None))
        if self.before is not None:
            await self.before(request)
        return await self.inner.handle_async_request(request)

    def bodies(self, path: str) -> list[Any]:
        return [body for seen, body in self.seen if seen == path]


def ack_bodies(recorder: Recorder | AsyncRecorder) -> list[Any]:
    """The bodies of every request that acked something: an ack alone, or acks riding on the
    next receive (``ack-and-receive``, which carries none when there was nothing to ack).  A
    riding request that shutdown cancels in its long poll may have applied its acks already:
    the consumer cannot know, and sends them again alone (an ack of an acked message changes
    nothing), so a handle may be in two of them; the receive after the invisibility below is
    what shows that every message was acked, and acked for good."""
    alone = recorder.bodies("/v1/consumer-groups/smith-bank/ack")
    riding = recorder.bodies("/v1/consumer-groups/smith-bank/ack-and-receive")
    return alone + [body for body in riding if body.get("receipt_handles")]


def hold_first(
    recorder: Recorder, producer: TransactionProducer, lane: Lane, single: str, others: int
) -> None:
    """Hold the first request to ``single`` until ``others`` calls of ``lane`` wait gathered
    (the producer's ``max_batch`` is more, so the gathering waits: once the first call is
    answered, nothing else of the lane is in flight, and its leader sends it)."""
    held = threading.Event()

    def before(request: httpx.Request) -> None:
        if request.url.path == single and not held.is_set():
            held.set()
            gatherings = producer.client.gatherings
            assert gatherings is not None
            wait_until(lambda: gatherings.gathered(lane) >= others, 20, "the others to gather")

    recorder.before = before


def concurrently(first: Callable[[], Any], rest: list[Callable[[], Any]]) -> list[Any]:
    """``first`` in a thread of its own, then (once its request is held) each of ``rest``; their
    results or exceptions, in order."""
    results: list[Any] = [None] * (1 + len(rest))

    def run(n: int, fn: Callable[[], Any]) -> None:
        try:
            results[n] = fn()
        except Exception as exc:
            results[n] = exc

    threads = [threading.Thread(target=run, args=(0, first))]
    threads[0].start()
    time.sleep(0.2)
    threads += [threading.Thread(target=run, args=(n + 1, fn)) for n, fn in enumerate(rest)]
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


@pytest.fixture
def store_broker(store_url: str) -> Iterator[InProcessBroker]:
    """The real broker in process on SQLite and on PostgreSQL, a 2,000-byte message limit."""
    with InProcessBroker(database_url=store_url, max_message_bytes=2000, **FAST) as broker:
        broker.create_topic("transfers")
        yield broker


def producer_on(broker: InProcessBroker, recorder: Recorder, **options: Any) -> TransactionProducer:
    options.setdefault("check", NONE)
    options.setdefault("batch_linger_ms", 2000)  # the tests send gatherings when they are full
    producer = TransactionProducer("bob-bank", brokers=[broker.url], transport=recorder, **options)
    return producer


def transactions_of(broker: InProcessBroker, group: str = "bob-bank") -> list[dict[str, Any]]:
    with broker.client() as client:
        listed = client.get("/v1/transactions", params={"producer_group": group, "limit": 1000})
    found: list[dict[str, Any]] = listed.json()["transactions"]
    return found


def committed_messages(broker: InProcessBroker, topic: str = "transfers") -> list[dict[str, Any]]:
    with broker.client() as client:
        found = client.get("/v1/messages", params={"topic": topic, "limit": 1000})
    messages: list[dict[str, Any]] = found.json()["messages"]
    return messages


# -- transactions, sync ------------------------------------------------------------------------


def test_one_bad_half_in_a_shared_request_fails_its_own_call_only(
    store_broker: InProcessBroker,
) -> None:
    recorder = Recorder(store_broker.transport)
    producer = producer_on(store_broker, recorder)
    ran: list[tuple[str, str]] = []

    @producer.execute_local_transaction
    def local(message: Message, arg: Any) -> LocalTransactionState:
        assert message.transaction_id is not None
        with store_broker.client() as client:  # the half is durable before this runs
            state = client.get(f"/v1/transactions/{message.transaction_id}").json()["state"]
        ran.append((message.text, state))
        return COMMIT

    bad = {2: Message("nowhere", body="to a topic that does not exist"),
           4: Message("transfers", body="x" * 2001)}  # fmt: skip
    rest = [bad.get(n, Message("transfers", body=f"good-{n}")) for n in range(7)]
    hold_first(recorder, producer, HALVES, "/v1/transactions", 7)
    with producer:
        results = concurrently(
            lambda: producer.send_message_in_transaction(Message("transfers", body="first")),
            [lambda m=m: producer.send_message_in_transaction(m) for m in rest],
        )
    assert isinstance(results[3], NotFoundError)
    assert results[3].code == "TOPIC_NOT_FOUND"
    assert results[3].topic == "nowhere"
    assert isinstance(results[5], MessageTooLargeError)
    good = [r for n, r in enumerate(results) if n not in (3, 5)]
    assert [r.resolution for r in good] == ["COMMITTED"] * 6
    (shared,) = recorder.bodies(HALVES_PATH)  # the seven halves went in one request
    assert len(shared["halves"]) == 7
    assert sorted(body for body, _ in ran) == sorted(["first", *(f"good-{n}" for n in
                                                                 (0, 1, 3, 5, 6))])  # fmt: skip
    assert {state for _, state in ran} == {"PREPARED"}
    assert sorted(t["state"] for t in transactions_of(store_broker)) == ["COMMITTED"] * 6
    assert len(committed_messages(store_broker)) == 6


def test_a_lost_answer_is_retried_and_each_decision_applies_exactly_once(
    store_broker: InProcessBroker,
) -> None:
    """The first shared halves and decisions requests reach the broker and their answers are
    lost: every call retries its own item (the same msg_id, the same decision), the broker
    answers the retries the same, and each transaction has one half and one real message."""
    recorder = Recorder(store_broker.transport)
    producer = producer_on(store_broker, recorder)
    producer.execute_local_transaction("transfers")(lambda m, a: COMMIT)
    lost: set[str] = set()

    def after(request: httpx.Request, response: httpx.Response) -> httpx.Response:
        if request.url.path in (HALVES_PATH, DECISIONS_PATH) and request.url.path not in lost:
            lost.add(request.url.path)
            raise httpx.ReadError("the answer was lost", request=request)
        return response

    recorder.after = after
    hold_first(recorder, producer, HALVES, "/v1/transactions", 5)
    with producer:
        results = concurrently(
            lambda: producer.send_message_in_transaction(Message("transfers", body="first")),
            [lambda n=n: producer.send_message_in_transaction(Message("transfers", body=f"b-{n}"))
             for n in range(5)],
        )  # fmt: skip
    assert lost == {HALVES_PATH, DECISIONS_PATH}
    assert [r.resolution for r in results] == ["COMMITTED"] * 6
    assert len({r.transaction_id for r in results}) == 6
    listed = transactions_of(store_broker)
    assert sorted(t["transaction_id"] for t in listed) == sorted(r.transaction_id for r in results)
    assert {t["state"] for t in listed} == {"COMMITTED"}
    messages = committed_messages(store_broker)
    assert sorted(m["transaction_id"] for m in messages) == sorted(
        r.transaction_id for r in results
    )


def test_an_item_the_broker_sheds_is_retried_by_its_call_alone(inproc: InProcessBroker) -> None:
    """A 503 for one item of a shared answer: that call tries again (its half was in fact
    stored: the retry answers the same transaction), the others are done."""
    recorder = Recorder(inproc.transport)
    producer = producer_on(inproc, recorder)
    producer.execute_local_transaction("transfers")(lambda m, a: COMMIT)
    shed: list[str] = []

    def after(request: httpx.Request, response: httpx.Response) -> httpx.Response:
        if request.url.path != HALVES_PATH or shed:
            return response
        answer = response.json()
        shed.append(answer["results"][1]["result"]["transaction_id"])
        answer["results"][1] = {"status": 503, "error": {"code": "STORE_UNAVAILABLE",
                                "message": "failing over", "detail": {}}}  # fmt: skip
        return httpx.Response(200, json=answer, request=request)

    recorder.after = after
    hold_first(recorder, producer, HALVES, "/v1/transactions", 4)
    with producer:
        results = concurrently(
            lambda: producer.send_message_in_transaction(Message("transfers", body="first")),
            [lambda n=n: producer.send_message_in_transaction(Message("transfers", body=f"b-{n}"))
             for n in range(4)],
        )  # fmt: skip
    assert [r.resolution for r in results] == ["COMMITTED"] * 5
    assert shed[0] in {r.transaction_id for r in results}  # the retry found the stored half
    assert len(transactions_of(inproc)) == 5


def test_linger_zero_is_one_request_per_call(inproc: InProcessBroker) -> None:
    recorder = Recorder(inproc.transport)
    producer = producer_on(inproc, recorder, batch_linger_ms=0)
    producer.execute_local_transaction("transfers")(lambda m, a: COMMIT)
    with producer:
        results = concurrently(
            lambda: producer.send_message_in_transaction(Message("transfers", body="0")),
            [lambda n=n: producer.send_message_in_transaction(Message("transfers", body=str(n)))
             for n in range(7)],
        )  # fmt: skip
        sent = concurrently(lambda: producer.send(Message("transfers", body="s")),
                            [lambda: producer.send(Message("transfers", body="s"))] * 3)  # fmt: skip
    assert producer.client.gatherings is None
    assert [r.resolution for r in results] == ["COMMITTED"] * 8
    assert len(sent) == 4
    paths = recorder.paths()
    assert not any(":batch" in path for path in paths)
    assert paths.count("/v1/transactions") == 8
    assert sum(path.endswith("/commit") for path in paths) == 8
    assert paths.count("/v1/topics/transfers/messages") == 4


def test_one_call_at_a_time_never_waits_and_goes_to_its_single_route(
    inproc: InProcessBroker,
) -> None:
    recorder = Recorder(inproc.transport)
    producer = producer_on(inproc, recorder)  # a 2-second linger, that it must not wait out
    producer.execute_local_transaction("transfers")(lambda m, a: COMMIT)
    began = time.monotonic()
    with producer:
        for n in range(3):
            assert producer.send_message_in_transaction(Message("transfers", body=str(n)))
            producer.send(Message("transfers", body=str(n)))
    assert time.monotonic() - began < 2
    assert not any(":batch" in path for path in recorder.paths())


# -- plain sends, the ACL, the limits, shutdown, an older broker -------------------------------


def test_plain_sends_share_a_request_and_a_bad_one_fails_alone(inproc: InProcessBroker) -> None:
    recorder = Recorder(inproc.transport)
    producer = producer_on(inproc, recorder)
    hold_first(recorder, producer, SENDS, "/v1/topics/transfers/messages", 4)
    with producer:
        results = concurrently(
            lambda: producer.send(Message("transfers", body="first")),
            [
                lambda: producer.send(Message("transfers", body="a")),
                lambda: producer.send(Message("nowhere", body="b")),
                lambda: producer.send(Message("transfers", body="c")),
                lambda: producer.send(Message("transfers", body="d")),
            ],
        )
    assert isinstance(results[2], NotFoundError)
    assert [r.send_status.value for n, r in enumerate(results) if n != 2] == ["SEND_OK"] * 4
    (shared,) = recorder.bodies(SENDS_PATH)
    topics = sorted(m["topic"] for m in shared["messages"])
    assert topics == ["nowhere", "transfers", "transfers", "transfers"]
    assert sorted(m["body"] for m in committed_messages(inproc)) == ["a", "c", "d", "first"]


def test_under_the_acl_a_topic_without_pub_is_refused_for_its_call_only(acl_file: Path) -> None:
    with InProcessBroker(acl_file=acl_file, credentials=OPERATOR, **FAST) as broker:
        broker.create_topic("transfers")
        broker.create_topic("audit")
        recorder = Recorder(broker.transport)
        producer = producer_on(broker, recorder, credentials=BOB)
        producer.execute_local_transaction(lambda m, a: COMMIT)
        hold_first(recorder, producer, HALVES, "/v1/transactions", 3)
        with producer:
            results = concurrently(
                lambda: producer.send_message_in_transaction(Message("transfers", body="0")),
                [lambda t=t: producer.send_message_in_transaction(Message(t, body="x"))
                 for t in ("transfers", "audit", "transfers")],
            )  # fmt: skip
        assert isinstance(results[2], PermissionDeniedError)
        assert results[2].code == "PERMISSION_DENIED"
        assert [r.resolution for n, r in enumerate(results) if n != 2] == ["COMMITTED"] * 3
        (shared,) = recorder.bodies(HALVES_PATH)
        assert [h["topic"] for h in shared["halves"]].count("audit") == 1
        assert len(recorder.bodies(DECISIONS_PATH)) <= 1  # the decisions shared one at most
        assert len(transactions_of(broker)) == 3


def test_a_request_over_the_brokers_limit_is_sent_again_call_by_call() -> None:
    """Three 55,000-byte bodies each fit a broker with max_message_bytes 60,000 -- not together
    (its request limit: 60,000 x 4/3 + 64 KiB): the shared request is 413 whole, and each call
    goes alone."""
    with InProcessBroker(max_message_bytes=60_000, **FAST) as broker:
        broker.create_topic("transfers")
        recorder = Recorder(broker.transport)
        producer = producer_on(broker, recorder, max_batch_bytes=1_000_000)
        hold_first(recorder, producer, SENDS, "/v1/topics/transfers/messages", 3)
        with producer:
            results = concurrently(
                lambda: producer.send(Message("transfers", body="first")),
                [lambda: producer.send(Message("transfers", body="y" * 55_000))] * 3,
            )
        assert [r.send_status.value for r in results] == ["SEND_OK"] * 4
        assert len(recorder.bodies(SENDS_PATH)) == 1
        assert recorder.paths().count("/v1/topics/transfers/messages") == 4
        assert len(committed_messages(broker)) == 4


def test_an_older_broker_without_the_routes_is_served_call_by_call(
    inproc: InProcessBroker,
) -> None:
    recorder = Recorder(inproc.transport)

    def before(request: httpx.Request) -> None:
        if request.url.path == "/v1/topics/transfers/messages":
            time.sleep(0.05)  # so the others gather behind it

    def after(request: httpx.Request, response: httpx.Response) -> httpx.Response:
        if request.url.path.endswith(":batch"):  # a broker from before issue 20
            return httpx.Response(404, json={"error": {"code": "NOT_FOUND", "message":
                                  "Not Found", "detail": {}}}, request=request)  # fmt: skip
        return response

    recorder.before, recorder.after = before, after
    producer = producer_on(inproc, recorder, batch_linger_ms=20)
    with producer:
        for _ in range(2):
            results = concurrently(lambda: producer.send(Message("transfers", body="x")),
                                   [lambda: producer.send(Message("transfers", body="x"))] * 5)  # fmt: skip
            assert [r.send_status.value for r in results] == ["SEND_OK"] * 6
    assert len(recorder.bodies(SENDS_PATH)) <= 1  # tried once, then never again
    assert len(committed_messages(inproc)) == 12


def test_shutdown_sends_what_is_gathered_without_waiting_for_the_linger(
    inproc: InProcessBroker,
) -> None:
    recorder = Recorder(inproc.transport)
    producer = producer_on(inproc, recorder, batch_linger_ms=30_000)
    release = threading.Event()

    def before(request: httpx.Request) -> None:
        if request.url.path == "/v1/topics/transfers/messages":
            release.wait(20)  # the first call stays in flight until the gathering is sent
        elif request.url.path == SENDS_PATH:
            release.set()

    recorder.before = before
    producer.start()
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(
        producer.send(Message("transfers", body="x")))) for _ in range(4)]  # fmt: skip
    threads[0].start()
    time.sleep(0.2)
    for thread in threads[1:]:
        thread.start()
    gatherings = producer.client.gatherings
    assert gatherings is not None
    wait_until(lambda: gatherings.gathered(SENDS) == 3, 20, "three sends to gather")
    began = time.monotonic()
    producer.shutdown()
    for thread in threads:
        thread.join(20)
    assert time.monotonic() - began < 10
    assert len(results) == 4
    (shared,) = recorder.bodies(SENDS_PATH)
    assert len(shared["messages"]) == 3


# -- the async face ----------------------------------------------------------------------------


async def test_async_transactions_share_requests_and_fail_alone(ainproc: InProcessBroker) -> None:
    recorder = AsyncRecorder(ainproc.async_transport)
    producer = AsyncTransactionProducer(
        "bob-bank", brokers=[ainproc.url], transport=recorder, check=NONE,
        batch_linger_ms=2000,
    )  # fmt: skip
    ran: list[str] = []

    @producer.execute_local_transaction
    async def local(message: Message, arg: Any) -> LocalTransactionState:
        ran.append(message.text)
        return COMMIT

    held = asyncio.Event()

    async def before(request: httpx.Request) -> None:
        if request.url.path == "/v1/transactions" and not held.is_set():
            held.set()
            gatherings = producer.client.gatherings
            assert gatherings is not None
            for _ in range(400):
                if gatherings.gathered(HALVES) >= 5:
                    return
                await asyncio.sleep(0.05)

    recorder.before = before
    async with producer:
        first = asyncio.create_task(
            producer.send_message_in_transaction(Message("transfers", body="first"))
        )
        await held.wait()
        topics = ["transfers", "transfers", "nowhere", "transfers", "transfers"]
        rest = await asyncio.gather(
            *(producer.send_message_in_transaction(Message(t, body=f"b-{n}"))
              for n, t in enumerate(topics)),
            return_exceptions=True,
        )  # fmt: skip
        results = [await first, *rest]
    assert isinstance(results[3], NotFoundError)
    assert [r.resolution for n, r in enumerate(results) if n != 3] == ["COMMITTED"] * 5
    assert "b-2" not in ran  # its half was never stored: its local transaction never ran
    (shared,) = recorder.bodies(HALVES_PATH)
    assert len(shared["halves"]) == 5
    decisions = recorder.bodies(DECISIONS_PATH)
    assert sum(len(d["decisions"]) for d in decisions) >= 2  # the decisions shared a request


async def test_cancelling_the_call_that_opened_a_gathering_cancels_no_one_else(
    ainproc: InProcessBroker,
) -> None:
    """A gathering is sent by a task of its own, not by its opener's: the opener's caller may
    give up (its task cancelled) and the others still get their answers."""
    recorder = AsyncRecorder(ainproc.async_transport)
    producer = AsyncTransactionProducer(
        "bob-bank", brokers=[ainproc.url], transport=recorder, check=NONE, batch_linger_ms=2000
    )
    held, release = asyncio.Event(), asyncio.Event()

    async def before(request: httpx.Request) -> None:
        if request.url.path == "/v1/topics/transfers/messages" and not held.is_set():
            held.set()
            await asyncio.wait_for(release.wait(), 20)

    recorder.before = before
    async with producer:
        first = asyncio.create_task(producer.send(Message("transfers", body="first")))
        await held.wait()
        opener = asyncio.create_task(producer.send(Message("transfers", body="opener")))
        await asyncio.sleep(0.05)
        others = [asyncio.create_task(producer.send(Message("transfers", body=str(n))))
                  for n in range(2)]  # fmt: skip
        gatherings = producer.client.gatherings
        assert gatherings is not None
        for _ in range(200):
            if gatherings.gathered(SENDS) == 3:
                break
            await asyncio.sleep(0.02)
        opener.cancel()
        release.set()
        results = await asyncio.wait_for(asyncio.gather(first, *others), 20)
    assert opener.cancelled()
    assert [r.send_status.value for r in results] == ["SEND_OK"] * 3
    (shared,) = recorder.bodies(SENDS_PATH)
    assert sorted(m["body"] for m in shared["messages"]) == ["0", "1", "opener"]


async def test_async_linger_zero_is_one_request_per_call(ainproc: InProcessBroker) -> None:
    recorder = AsyncRecorder(ainproc.async_transport)
    producer = AsyncTransactionProducer(
        "bob-bank", brokers=[ainproc.url], transport=recorder, check=NONE, batch_linger_ms=0
    )
    producer.execute_local_transaction("transfers")(lambda m, a: COMMIT)
    async with producer:
        results = await asyncio.gather(
            *(producer.send_message_in_transaction(Message("transfers", body=str(n)))
              for n in range(8)),
            *(producer.send(Message("transfers", body="s")) for _ in range(4)),
        )  # fmt: skip
    assert len(results) == 12
    paths = [path for path, _ in recorder.seen]
    assert not any(":batch" in path for path in paths)
    assert paths.count("/v1/transactions") == 8


async def test_async_shutdown_sends_what_is_gathered(ainproc: InProcessBroker) -> None:
    recorder = AsyncRecorder(ainproc.async_transport)
    producer = AsyncTransactionProducer(
        "bob-bank", brokers=[ainproc.url], transport=recorder, check=NONE,
        batch_linger_ms=30_000,
    )  # fmt: skip
    release = asyncio.Event()

    async def before(request: httpx.Request) -> None:
        if request.url.path == "/v1/topics/transfers/messages":
            await asyncio.wait_for(release.wait(), 20)
        elif request.url.path == SENDS_PATH:
            release.set()

    recorder.before = before
    await producer.start()
    sends = [asyncio.create_task(producer.send(Message("transfers", body="x"))) for _ in range(4)]
    gatherings = producer.client.gatherings
    assert gatherings is not None
    for _ in range(200):
        if gatherings.gathered(SENDS) == 3:
            break
        await asyncio.sleep(0.05)
    began = time.monotonic()
    await producer.shutdown()
    results = await asyncio.wait_for(asyncio.gather(*sends), 20)
    assert time.monotonic() - began < 10
    assert len(results) == 4
    assert len(recorder.bodies(SENDS_PATH)[0]["messages"]) == 3


# -- consumer acks -----------------------------------------------------------------------------


def test_concurrent_acks_share_requests_and_every_message_is_acked_once(
    inproc: InProcessBroker,
) -> None:
    with inproc.client() as client:
        for start in range(0, 60, 20):
            batch = [{"body": str(n)} for n in range(start, start + 20)]
            client.post("/v1/topics/transfers/messages:batch", json={"messages": batch})
    recorder = Recorder(inproc.transport)
    consumer = PushConsumer(
        "smith-bank", brokers=[inproc.url], transport=recorder, consume_from="FIRST_OFFSET",
        concurrency=8, wait_seconds=0.5, invisible_seconds=2, batch_linger_ms=20,
    )  # fmt: skip
    seen: list[str] = []
    lock = threading.Lock()

    @consumer.subscribe("transfers")
    def handle(message: Message) -> None:
        time.sleep(0.01)
        with lock:
            seen.append(message.text)

    consumer.start()
    try:
        wait_until(lambda: len(seen) >= 60, 30, "sixty messages")
    finally:
        consumer.shutdown()
    acks = ack_bodies(recorder)
    handles = [h for ack in acks for h in ack["receipt_handles"]]
    assert len(set(handles)) == 60  # every message acked (see ack_bodies for one acked twice)
    assert len(acks) < 60  # some acks of several workers went in one request
    time.sleep(2.5)  # past the invisibility: an unacked message would come again
    with inproc.client() as client:
        again = client.post("/v1/consumer-groups/smith-bank/receive",
                            json={"client_id": "check", "wait_seconds": 0}).json()  # fmt: skip
    assert again["messages"] == []
    assert sorted(seen, key=int) == [str(n) for n in range(60)]


async def test_async_concurrent_acks_share_requests_and_every_message_is_acked_once(
    ainproc: InProcessBroker,
) -> None:
    async with ainproc.async_client() as client:
        batch = [{"body": str(n)} for n in range(40)]
        await client.post("/v1/topics/transfers/messages:batch", json={"messages": batch})
    recorder = AsyncRecorder(ainproc.async_transport)
    consumer = AsyncPushConsumer(
        "smith-bank", brokers=[ainproc.url], transport=recorder, consume_from="FIRST_OFFSET",
        concurrency=8, wait_seconds=0.5, invisible_seconds=2, batch_linger_ms=20,
    )  # fmt: skip
    seen: list[str] = []

    @consumer.subscribe("transfers")
    async def handle(message: Message) -> None:
        await asyncio.sleep(0.01)
        seen.append(message.text)

    await consumer.start()
    try:
        for _ in range(600):
            if len(seen) >= 40:
                break
            await asyncio.sleep(0.05)
    finally:
        await consumer.shutdown()
    acks = ack_bodies(recorder)
    assert len({h for ack in acks for h in ack["receipt_handles"]}) == 40  # every one acked
    assert len(acks) < 40  # some acks of several workers went in one request
    await asyncio.sleep(2.5)  # past the invisibility: an unacked message would come again
    async with ainproc.async_client() as client:
        again = await client.post("/v1/consumer-groups/smith-bank/receive",
                                  json={"client_id": "check", "wait_seconds": 0})  # fmt: skip
    assert again.json()["messages"] == []
    assert sorted(seen, key=int) == [str(n) for n in range(40)]
