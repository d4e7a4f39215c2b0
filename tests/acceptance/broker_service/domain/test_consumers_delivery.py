"""Consumer groups against a real broker process over real HTTP, on both stores: retry schedule
and dead letters, orderly groups under random nacks, broadcasting and clustering with competing
members, delayed messages."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import BrokerProcess, free_port
from tests.unit.broker_service.domain.conftest import SQL_STORES

pytestmark = [
    pytest.mark.slow,
    # SQL stores only: its brokers are processes (``halfmq broker serve``), whose store is SQL.
    pytest.mark.parametrize("store_url", SQL_STORES, indirect=True),
]

# Level 3 (the first retry) is 300 ms, level 4 400 ms, ...
LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms"

StartBroker = Callable[..., BrokerProcess]


@pytest.fixture
def start_broker(migrated_url: str, tmp_path: Path) -> Iterator[StartBroker]:
    started: list[BrokerProcess] = []

    def start(*extra: str) -> BrokerProcess:
        log = tmp_path / f"broker-{len(started)}.log"
        process = BrokerProcess(
            migrated_url, free_port(), log, "--message-delay-level", LEVELS, *extra
        )
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


async def _post(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(path, json=body)
    assert response.status_code in (200, 201), response.text
    answer: dict[str, Any] = response.json()
    return answer


async def _setup(
    client: httpx.AsyncClient, topic: str, queues: int, group: str, **config: Any
) -> None:
    await _post(client, "/v1/topics", {"name": topic, "queues": queues})
    await _post(client, "/v1/consumer-groups", {"name": group, **config})
    await _post(client, f"/v1/consumer-groups/{group}/subscriptions", {"topic": topic})


async def _receive(
    client: httpx.AsyncClient, group: str, client_id: str, **options: Any
) -> list[dict[str, Any]]:
    answer = await _post(
        client, f"/v1/consumer-groups/{group}/receive", {"client_id": client_id, **options}
    )
    messages: list[dict[str, Any]] = answer["messages"]
    return messages


async def test_retry_schedule_dead_letter_and_resend(start_broker: StartBroker) -> None:
    broker = start_broker()
    async with httpx.AsyncClient(base_url=broker.url, timeout=10) as client:
        await _setup(client, "t", 1, "g", consume_from="FIRST_OFFSET", max_reconsume_times=2)
        await _post(client, "/v1/topics/t/messages", {"body": "x", "msg_id": "m-1"})
        [first] = await _receive(client, "g", "c1")
        nacked_at = time.time()
        nack = await _post(
            client, "/v1/consumer-groups/g/nack", {"receipt_handle": first["receipt_handle"]}
        )
        assert nack["outcome"] == "RETRY"
        assert nack["reconsume_times"] == 1
        assert await _receive(client, "g", "c1") == [], "not before its delay"
        [second] = await _receive(client, "g", "c1", wait_seconds=5)
        assert time.time() - nacked_at >= 0.3, "level 3 = 300 ms"
        assert second["msg_id"] == "m-1"
        assert second["topic"] == "t", "a retry shows its original topic"
        assert second["reconsume_times"] == 1
        nacked_at = time.time()  # before the request: the broker's clock starts the delay on it
        nack = await _post(
            client, "/v1/consumer-groups/g/nack", {"receipt_handle": second["receipt_handle"]}
        )
        [third] = await _receive(client, "g", "c2", wait_seconds=5)
        assert time.time() - nacked_at >= 0.4, "level 4 = 400 ms"
        assert third["reconsume_times"] == 2
        view = (await client.get("/v1/consumer-groups/g")).json()
        assert view["dead"] == 0
        dead = await _post(
            client, "/v1/consumer-groups/g/nack", {"receipt_handle": third["receipt_handle"]}
        )
        assert dead["outcome"] == "DLQ"
        await asyncio.sleep(0.8)
        assert await _receive(client, "g", "c1") == [], "dead: not delivered again"
        view = (await client.get("/v1/consumer-groups/g")).json()
        assert view["dead"] == 1
        assert view["retrying"] == 0
        listed = (await client.get("/v1/consumer-groups/g/dlq")).json()["messages"]
        assert [(m["msg_id"], m["original_topic"], m["resent_at"]) for m in listed] == [
            ("m-1", "t", None)
        ]
        assert listed[0]["topic"] == "%DLQ%g"
        assert listed[0]["reconsume_times"] == 3
        resent = await client.post("/v1/consumer-groups/g/dlq/m-1/resend")
        assert resent.status_code == 200, resent.text
        again = await client.post("/v1/consumer-groups/g/dlq/m-1/resend")
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "MESSAGE_ALREADY_RESENT"
        missing = await client.post("/v1/consumer-groups/g/dlq/nope/resend")
        assert missing.status_code == 404
        [back] = await _receive(client, "g", "c1", wait_seconds=5)
        assert (back["msg_id"], back["topic"], back["reconsume_times"]) == ("m-1", "t", 0)
        acked = await _post(
            client, "/v1/consumer-groups/g/ack", {"receipt_handles": [back["receipt_handle"]]}
        )
        assert acked["acked"] == 1
        view = (await client.get("/v1/consumer-groups/g")).json()
        assert (view["dead"], view["retrying"], view["in_flight"], view["lag"]) == (0, 0, 0, 0)
        trace = (await client.get("/v1/messages/m-1")).json()
        topics = Counter(c["topic"] for c in trace["copies"])
        assert topics["%DLQ%g"] == 1
        assert topics["%RETRY%g"] == 3  # two retries and the resend
        trace = (await client.get("/v1/messages/m-1/trace")).json()["events"]
        kinds = Counter(e["event"] for e in trace)
        assert kinds["SENT"] == 1
        assert kinds["DELIVERED"] == 4
        assert kinds["NACKED"] == 2
        assert kinds["RETRIED"] == 2
        assert kinds["DEAD"] == 1
        assert kinds["RESENT"] == 1
        assert kinds["ACKED"] == 1


async def test_orderly_group_keeps_send_order_per_key_under_random_nacks(
    start_broker: StartBroker,
) -> None:
    broker = start_broker()
    keys, per_key = ["k-a", "k-b", "k-c"], 100
    async with httpx.AsyncClient(base_url=broker.url, timeout=10) as client:
        await _setup(client, "orders", 4, "og", consume_from="FIRST_OFFSET", orderly=True)
        for i in range(per_key):
            batch = [{"body": f"{key}:{i}", "sharding_key": key} for key in keys]
            await _post(client, "/v1/topics/orders/messages:batch", {"messages": batch})
    processed: dict[str, list[int]] = defaultdict(list)
    rng = random.Random(7)
    done = asyncio.Event()

    async def consumer(name: str) -> None:
        async with httpx.AsyncClient(base_url=broker.url, timeout=10) as client:
            while not done.is_set():
                got = await _receive(client, "og", name, max_messages=8, wait_seconds=0.5)
                acks = []
                for message in got:
                    key, index = message["body"].split(":")
                    if rng.random() < 0.1:
                        await _post(
                            client,
                            "/v1/consumer-groups/og/nack",
                            {"receipt_handle": message["receipt_handle"], "delay_level": 1},
                        )
                        continue
                    processed[key].append(int(index))
                    acks.append(message["receipt_handle"])
                if acks:
                    answer = await _post(
                        client, "/v1/consumer-groups/og/ack", {"receipt_handles": acks}
                    )
                    assert answer["stale"] == []
                if sum(len(v) for v in processed.values()) >= len(keys) * per_key:
                    done.set()

    workers = [asyncio.create_task(consumer(f"c{n}")) for n in range(3)]
    await asyncio.wait_for(done.wait(), 90)
    await asyncio.gather(*workers)
    for key in keys:
        assert processed[key] == list(range(per_key)), f"{key} out of order or lost"


async def test_broadcasting_gives_every_member_every_message(start_broker: StartBroker) -> None:
    broker = start_broker()
    async with httpx.AsyncClient(base_url=broker.url, timeout=10) as client:
        await _setup(
            client, "news", 2, "bg", message_model="BROADCASTING", consume_from="FIRST_OFFSET"
        )
        batch = [{"body": f"n{i}"} for i in range(60)]
        await _post(client, "/v1/topics/news/messages:batch", {"messages": batch})
        seen: dict[str, list[str]] = {}
        for member in ("b1", "b2", "b3"):
            got: list[dict[str, Any]] = []
            while True:
                more = await _receive(client, "bg", member, max_messages=16)
                if not more:
                    break
                got.extend(more)
                handles = [m["receipt_handle"] for m in more]
                await _post(client, "/v1/consumer-groups/bg/ack", {"receipt_handles": handles})
            seen[member] = sorted(m["body"] for m in got)
        expected = sorted(f"n{i}" for i in range(60))
        assert seen == {"b1": expected, "b2": expected, "b3": expected}
        view = (await client.get("/v1/consumer-groups/bg")).json()
        members = {q["client_id"] for q in view["queues"] if q["topic"] == "news"}
        assert members == {"b1", "b2", "b3"}
        assert all(q["lag"] == 0 for q in view["queues"])


async def test_clustering_competing_members_ack_each_message_once(
    start_broker: StartBroker,
) -> None:
    broker = start_broker()
    total = 600
    async with httpx.AsyncClient(base_url=broker.url, timeout=10) as client:
        await _setup(client, "work", 4, "cg", consume_from="FIRST_OFFSET")
    acked: Counter[str] = Counter()
    done = asyncio.Event()

    async def producer() -> None:
        async with httpx.AsyncClient(base_url=broker.url, timeout=10) as client:
            for start in range(0, total, 50):
                batch = [{"body": str(i), "msg_id": f"w-{i}"} for i in range(start, start + 50)]
                await _post(client, "/v1/topics/work/messages:batch", {"messages": batch})

    async def consumer(name: str) -> None:
        async with httpx.AsyncClient(base_url=broker.url, timeout=10) as client:
            while not done.is_set():
                got = await _receive(client, "cg", name, max_messages=32, wait_seconds=0.5)
                if got:
                    answer = await _post(
                        client,
                        "/v1/consumer-groups/cg/ack",
                        {"receipt_handles": [m["receipt_handle"] for m in got]},
                    )
                    assert answer["acked"] == len(got)
                    acked.update(m["msg_id"] for m in got)
                if len(acked) >= total:
                    done.set()

    workers = [asyncio.create_task(consumer(f"c{n}")) for n in range(3)]
    await producer()
    await asyncio.wait_for(done.wait(), 60)
    await asyncio.gather(*workers)
    assert len(acked) == total
    assert max(acked.values()) == 1, "each message acked exactly once"


async def test_delayed_messages_are_delivered_not_early_and_not_lost(
    start_broker: StartBroker,
) -> None:
    broker = start_broker()
    async with httpx.AsyncClient(base_url=broker.url, timeout=10) as client:
        await _setup(client, "later", 2, "dg", consume_from="FIRST_OFFSET")
        sent_at = time.time() * 1000
        due: dict[str, float] = {}
        for i in range(10):
            level = 1 + i % 3  # 100, 200, 300 ms
            answer = await _post(
                client, "/v1/topics/later/messages", {"body": f"d{i}", "delay_level": level}
            )
            due[answer["msg_id"]] = sent_at + (100, 200, 300)[level - 1]
        half = await _post(
            client,
            "/v1/transactions",
            {"body": "tx", "topic": "later", "producer_group": "p", "delay_level": 2},
        )
        await asyncio.sleep(0.4)
        committed_at = time.time() * 1000
        await _post(
            client, f"/v1/transactions/{half['transaction_id']}/commit", {"producer_group": "p"}
        )
        due[half["msg_id"]] = committed_at + 200
        got: dict[str, int] = Counter()
        deadline = time.monotonic() + 10
        while len(got) < len(due) and time.monotonic() < deadline:
            for message in await _receive(client, "dg", "c", wait_seconds=1):
                received = time.time() * 1000
                assert received >= due[message["msg_id"]] - 5, "not early"
                got[message["msg_id"]] += 1
                await _post(
                    client,
                    "/v1/consumer-groups/dg/ack",
                    {"receipt_handles": [message["receipt_handle"]]},
                )
        await asyncio.sleep(0.5)
        assert await _receive(client, "dg", "c") == []
        assert got == dict.fromkeys(due, 1), "each delayed message once, none lost"
