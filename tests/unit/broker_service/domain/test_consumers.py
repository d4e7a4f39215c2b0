"""Consumer groups over the REST contract, on both stores, against a real broker process over real
HTTP: groups, subscriptions and tag filters, receive / ack / change-invisible, consume_from, reset
by timestamp, long polling, the trace, errors.

The module's tests share one broker process per store (``shared_broker_process``), so each names
its topics, groups and messages its own (``unique``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import make_url

from broker_service.settings import BrokerSettings
from tests.support import MEMORY_URL, BrokerApp, BrokerProcess, free_port
from tests.unit.broker_service.domain.conftest import SQL_STORES


@pytest.fixture
async def broker(
    store_url: str, shared_broker_process: Callable[[str], BrokerProcess]
) -> AsyncIterator[BrokerApp]:
    """The same helper as the in-process broker, talking real HTTP to the module's broker process
    on the test's store (``store_url`` names which; the process keeps its data in a store of its
    own); on the in-memory store, which lives in one process, a fresh in-process broker."""
    if store_url == MEMORY_URL:
        async with BrokerApp.start(database_url=MEMORY_URL) as running:
            yield running
        return
    process = shared_broker_process(make_url(store_url).get_backend_name())
    async with httpx.AsyncClient(base_url=process.url, timeout=30) as client:
        yield BrokerApp(client, BrokerSettings(database_url=process.database_url))


class Group:
    """A consumer group seen through the broker's REST API."""

    def __init__(self, client: httpx.AsyncClient, name: str) -> None:
        self.client = client
        self.name = name

    async def create(self, **config: Any) -> httpx.Response:
        return await self.client.post("/v1/consumer-groups", json={"name": self.name, **config})

    async def subscribe(self, topic: str, expression: str = "*") -> httpx.Response:
        return await self.client.post(
            f"/v1/consumer-groups/{self.name}/subscriptions",
            json={"topic": topic, "expression": expression},
        )

    async def receive(self, client_id: str = "c1", **options: Any) -> list[dict[str, Any]]:
        response = await self.client.post(
            f"/v1/consumer-groups/{self.name}/receive", json={"client_id": client_id, **options}
        )
        assert response.status_code == 200, response.text
        messages: list[dict[str, Any]] = response.json()["messages"]
        return messages

    async def ack(self, *handles: str) -> dict[str, Any]:
        response = await self.client.post(
            f"/v1/consumer-groups/{self.name}/ack", json={"receipt_handles": list(handles)}
        )
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    async def show(self) -> dict[str, Any]:
        response = await self.client.get(f"/v1/consumer-groups/{self.name}")
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer


async def send(
    broker: BrokerApp, topic: str, n: int, prefix: str = "m", **fields: Any
) -> list[str]:
    """``n`` messages to ``topic``, their bodies ``prefix`` and a number; their msg_ids the same
    after the topic's name (a test's own, as its topic is)."""
    batch = [{"body": f"{prefix}{i}", "msg_id": f"{topic}-{prefix}{i}", **fields} for i in range(n)]
    response = await broker.client.post(
        f"/v1/topics/{topic}/messages:batch", json={"messages": batch}
    )
    assert response.status_code == 201, response.text
    return [r["msg_id"] for r in response.json()["results"]]


async def test_group_create_is_idempotent_and_conflicts_on_other_config(
    broker: BrokerApp, unique: Callable[[str], str]
) -> None:
    group = Group(broker.client, unique("g1"))
    first = await group.create(consume_from="FIRST_OFFSET")
    assert first.status_code == 201, first.text
    assert first.json()["retry_topic"] == f"%RETRY%{unique('g1')}"
    assert (await group.create(consume_from="FIRST_OFFSET")).status_code == 200
    other = await group.create(consume_from="FIRST_OFFSET", orderly=True)
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "CONSUMER_GROUP_EXISTS"
    bad = await Group(broker.client, "bad name").create()
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "INVALID_CONSUMER_GROUP_NAME"
    no_ts = await Group(broker.client, unique("g2")).create(consume_from="TIMESTAMP")
    assert no_ts.status_code == 422
    # The group's own topics are system topics: not listed, not sendable.
    topics = (await broker.client.get("/v1/topics")).json()["topics"]
    assert not [t for t in topics if t["name"].startswith("%")]


async def test_receive_ack_and_committed_offset(
    broker: BrokerApp, unique: Callable[[str], str]
) -> None:
    topic = await broker.topic(unique("t"), queues=2)
    group = Group(broker.client, unique("g"))
    assert (await group.create(consume_from="FIRST_OFFSET")).status_code == 201
    assert (await group.subscribe(topic)).status_code == 201
    assert (await group.subscribe(topic)).status_code == 200
    sent = await send(broker, topic, 10)
    got = await group.receive(max_messages=4)
    assert len(got) == 4
    assert all(m["receipt_handle"] and m["topic"] == topic for m in got)
    rest = await group.receive("c2", max_messages=32)
    assert len(rest) == 6, "a message is in flight at one member at a time"
    assert sorted(m["msg_id"] for m in got + rest) == sorted(sent)
    assert await group.receive("c3") == []

    # Ack out of order: the committed offset stops at the oldest unacked message.
    by_queue: dict[int, list[dict[str, Any]]] = {}
    for m in sorted(got + rest, key=lambda m: m["queue_offset"]):
        by_queue.setdefault(m["queue_id"], []).append(m)
    oldest = [ms[0] for ms in by_queue.values()]
    others = [m for ms in by_queue.values() for m in ms[1:]]
    answer = await group.ack(*(m["receipt_handle"] for m in others), "unknown-handle")
    assert answer == {"acked": len(others), "stale": ["unknown-handle"]}
    view = await group.show()
    queues = {q["queue_id"]: q for q in view["queues"] if q["topic"] == topic}
    for m in oldest:
        assert queues[m["queue_id"]]["committed_offset"] == m["queue_offset"]
        assert queues[m["queue_id"]]["in_flight"] == 1
    assert view["in_flight"] == len(oldest)
    await group.ack(*(m["receipt_handle"] for m in oldest))
    view = await group.show()
    for q in view["queues"]:
        if q["topic"] == topic:
            assert q["committed_offset"] == q["max_offset"]
            assert q["lag"] == 0
    assert [m["client_id"] for m in view["members"]] == ["c1", "c2", "c3"]
    again = await group.ack(got[0]["receipt_handle"])
    assert again == {"acked": 0, "stale": [got[0]["receipt_handle"]]}


async def test_expired_invisibility_redelivers_with_reconsume_times(
    broker: BrokerApp, unique: Callable[[str], str]
) -> None:
    topic = await broker.topic(unique("t"), queues=1)
    group = Group(broker.client, unique("g"))
    await group.create(consume_from="FIRST_OFFSET")
    await group.subscribe(topic)
    await send(broker, topic, 1)
    first = await group.receive(invisible_seconds=0.3)
    assert [m["reconsume_times"] for m in first] == [0]
    assert await group.receive("c2") == []
    again = await group.receive("c2", wait_seconds=3)
    assert [m["msg_id"] for m in again] == [first[0]["msg_id"]]
    assert again[0]["reconsume_times"] == 1
    stale = await group.ack(first[0]["receipt_handle"])
    assert stale["acked"] == 0, "a stale handle acks nothing"
    renewed = await broker.client.post(
        f"/v1/consumer-groups/{group.name}/change-invisible",
        json={"receipt_handle": again[0]["receipt_handle"], "invisible_seconds": 0.5},
    )
    assert renewed.status_code == 200, renewed.text
    handle = renewed.json()["receipt_handle"]
    assert handle != again[0]["receipt_handle"]
    assert (await group.ack(again[0]["receipt_handle"]))["acked"] == 0
    assert (await group.ack(handle))["acked"] == 1
    await asyncio.sleep(0.6)
    assert await group.receive() == []


async def test_a_lease_cut_short_falls_due_at_once_though_a_receive_just_looked(
    broker: BrokerApp, unique: Callable[[str], str]
) -> None:
    """A receive that finds nothing due lets the next ones skip the look for a moment (a round
    trip each); a lease the broker cuts short must end that moment at once."""
    topic = await broker.topic(unique("t"), queues=1)
    group = Group(broker.client, unique("g"))
    await group.create(consume_from="FIRST_OFFSET")
    await group.subscribe(topic)
    await send(broker, topic, 1)
    (first,) = await group.receive(invisible_seconds=30)
    assert await group.receive("c2", wait_seconds=0) == []  # looked: nothing due for 30 s
    renewed = await broker.client.post(
        f"/v1/consumer-groups/{group.name}/change-invisible",
        json={"receipt_handle": first["receipt_handle"], "invisible_seconds": 0.05},
    )
    assert renewed.status_code == 200, renewed.text
    await asyncio.sleep(0.1)
    again = await group.receive("c2", wait_seconds=0)
    assert [(m["msg_id"], m["reconsume_times"]) for m in again] == [(first["msg_id"], 1)]


async def test_tag_expressions(broker: BrokerApp, unique: Callable[[str], str]) -> None:
    topic = await broker.topic(unique("t"), queues=2)
    both, only_a = Group(broker.client, unique("both")), Group(broker.client, unique("only-a"))
    for group, expression in ((both, "TagA || TagB"), (only_a, "TagA")):
        await group.create(consume_from="FIRST_OFFSET")
        assert (await group.subscribe(topic, expression)).status_code == 201
    await send(broker, topic, 5, "a", tags="TagA")
    await send(broker, topic, 5, "b", tags="TagB")
    await send(broker, topic, 5, "c", tags="TagC")
    await send(broker, topic, 5, "n")
    got_both = await both.receive(max_messages=100)
    got_a = await only_a.receive(max_messages=100)
    assert sorted(m["body"][0] for m in got_both) == ["a"] * 5 + ["b"] * 5
    assert sorted(m["body"][0] for m in got_a) == ["a"] * 5
    await only_a.ack(*(m["receipt_handle"] for m in got_a))
    view = await only_a.show()
    assert all(q["lag"] == 0 for q in view["queues"]), "filtered messages count as consumed"
    bad = await only_a.subscribe(topic, "TagA || ")
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "INVALID_EXPRESSION"


async def test_consume_from_first_last_and_timestamp(
    broker: BrokerApp, unique: Callable[[str], str]
) -> None:
    topic = await broker.topic(unique("t"), queues=1)
    await send(broker, topic, 3, "old")
    await asyncio.sleep(0.05)
    middle = int(time.time() * 1000)
    await asyncio.sleep(0.05)
    await send(broker, topic, 2, "mid")
    groups = {
        "first": {"consume_from": "FIRST_OFFSET"},
        "last": {"consume_from": "LAST_OFFSET"},
        "stamp": {"consume_from": "TIMESTAMP", "consume_timestamp": middle},
    }
    for name, config in groups.items():
        group = Group(broker.client, unique(name))
        assert (await group.create(**config)).status_code == 201
        await group.subscribe(topic)
    await send(broker, topic, 1, "new")
    bodies = {
        name: sorted(
            m["body"] for m in await Group(broker.client, unique(name)).receive(max_messages=50)
        )
        for name in groups
    }
    assert bodies["first"] == ["mid0", "mid1", "new0", "old0", "old1", "old2"]
    assert bodies["last"] == ["new0"]
    assert bodies["stamp"] == ["mid0", "mid1", "new0"]


async def test_reset_offset_by_timestamp(broker: BrokerApp, unique: Callable[[str], str]) -> None:
    topic = await broker.topic(unique("t"), queues=2)
    group = Group(broker.client, unique("g"))
    await group.create(consume_from="FIRST_OFFSET")
    await group.subscribe(topic)
    await send(broker, topic, 4, "a")
    await asyncio.sleep(0.05)
    stamp = int(time.time() * 1000)
    await asyncio.sleep(0.05)
    await send(broker, topic, 4, "b")
    everything = await group.receive(max_messages=50)
    await group.ack(*(m["receipt_handle"] for m in everything))
    assert await group.receive() == []
    reset = await broker.client.post(
        f"/v1/consumer-groups/{group.name}/reset-offset", json={"topic": topic, "timestamp": stamp}
    )
    assert reset.status_code == 200, reset.text
    again = await group.receive(max_messages=50)
    assert sorted(m["body"] for m in again) == [f"b{i}" for i in range(4)]
    forward = await broker.client.post(
        f"/v1/consumer-groups/{group.name}/reset-offset",
        json={"topic": topic, "timestamp": "2100-01-01T00:00:00Z"},
    )
    assert forward.status_code == 200
    assert (await group.ack(*(m["receipt_handle"] for m in again)))["acked"] == 0
    assert await group.receive() == []
    unknown = await broker.client.post(
        f"/v1/consumer-groups/{group.name}/reset-offset",
        json={"topic": unique("other"), "timestamp": stamp},
    )
    assert unknown.status_code == 404


async def test_long_poll_wakes_on_send_and_times_out(
    broker: BrokerApp, unique: Callable[[str], str]
) -> None:
    topic = await broker.topic(unique("t"), queues=1)
    group = Group(broker.client, unique("g"))
    await group.subscribe(topic)
    started = time.monotonic()
    assert await group.receive(wait_seconds=0.3) == []
    assert 0.25 < time.monotonic() - started < 2

    async def later() -> None:
        await asyncio.sleep(0.2)
        await send(broker, topic, 1)

    sender = asyncio.create_task(later())
    started = time.monotonic()
    got = await group.receive(wait_seconds=10)
    waited = time.monotonic() - started
    await sender
    assert len(got) == 1
    assert waited < 1.0, f"woken at once, not at the end of the wait ({waited:.2f}s)"


async def test_auto_created_group_and_errors(
    broker: BrokerApp, unique: Callable[[str], str]
) -> None:
    topic = await broker.topic(unique("t"), queues=1)
    group = Group(broker.client, unique("auto"))
    assert (await group.subscribe(topic)).status_code == 201
    view = await group.show()
    assert view["message_model"] == "CLUSTERING"
    assert view["consume_from"] == "LAST_OFFSET"
    assert [s["topic"] for s in view["subscriptions"]] == [topic]
    missing = await broker.client.post(
        f"/v1/consumer-groups/{unique('nope')}/receive", json={"client_id": "c"}
    )
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "CONSUMER_GROUP_NOT_FOUND"
    not_subscribed = await broker.client.post(
        f"/v1/consumer-groups/{group.name}/receive",
        json={"client_id": "c", "topic": unique("other")},
    )
    assert not_subscribed.status_code == 404
    assert not_subscribed.json()["error"]["code"] == "SUBSCRIPTION_NOT_FOUND"
    no_topic = await group.subscribe(unique("ghost"))
    assert no_topic.status_code == 404
    assert no_topic.json()["error"]["code"] == "TOPIC_NOT_FOUND"
    system = await group.subscribe(f"%RETRY%{group.name}")
    assert system.status_code == 400
    nack = await broker.client.post(
        f"/v1/consumer-groups/{group.name}/nack", json={"receipt_handle": "nope"}
    )
    assert nack.status_code == 404
    assert nack.json()["error"]["code"] == "RECEIPT_HANDLE_NOT_FOUND"
    for body in ({}, {"client_id": ""}, {"client_id": "c", "max_messages": 0}):
        bad = await broker.client.post(f"/v1/consumer-groups/{group.name}/receive", json=body)
        assert bad.status_code == 422, bad.text


# SQL stores only: it starts a broker process, whose store is SQL.
@pytest.mark.parametrize("store_url", SQL_STORES, indirect=True)
async def test_groups_are_not_created_when_auto_create_is_off(
    migrated_url: str, tmp_path: Path
) -> None:
    process = BrokerProcess(
        migrated_url, free_port(), tmp_path / "broker.log", "--no-auto-create-groups"
    )
    process.start()
    try:
        async with httpx.AsyncClient(base_url=process.url, timeout=30) as client:
            await client.post("/v1/topics", json={"name": "t", "queues": 1})
            answer = await Group(client, "g").subscribe("t")
            assert answer.status_code == 404
            assert answer.json()["error"]["code"] == "CONSUMER_GROUP_NOT_FOUND"
    finally:
        process.stop()


async def test_trace_shows_the_message_and_its_consumption(
    broker: BrokerApp, unique: Callable[[str], str]
) -> None:
    topic = await broker.topic(unique("t"), queues=1)
    group = Group(broker.client, unique("g"))
    await group.create(consume_from="FIRST_OFFSET")
    await group.subscribe(topic)
    producer = unique("p")
    half = await broker.client.post(
        "/v1/transactions", json={"body": "x", "topic": topic, "producer_group": producer}
    )
    txid = half.json()["transaction_id"]
    await broker.client.post(f"/v1/transactions/{txid}/commit", json={"producer_group": producer})
    (plain,) = await send(broker, topic, 1, "plain")
    got = {m["msg_id"]: m for m in await group.receive(max_messages=10)}
    await group.ack(*(m["receipt_handle"] for m in got.values()))

    def events(answer: httpx.Response) -> list[tuple[str, str]]:
        assert answer.status_code == 200, answer.text
        return [(e["event"], e["by"]) for e in answer.json()["events"]]

    traced = events(await broker.client.get(f"/v1/messages/{half.json()['msg_id']}/trace"))
    assert traced == [
        ("HALF_STORED", producer),
        ("COMMITTED", "producer"),
        ("DELIVERED", "c1"),
        ("ACKED", "c1"),
    ]
    assert events(await broker.client.get(f"/v1/messages/{plain}/trace")) == [
        ("SENT", "producer"),
        ("DELIVERED", "c1"),
        ("ACKED", "c1"),
    ]
    missing = await broker.client.get("/v1/messages/nope/trace")
    assert missing.status_code == 404
