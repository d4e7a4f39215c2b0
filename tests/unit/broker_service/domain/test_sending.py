"""Sending: single, batch, dedup by msg_id, ordered, delayed -- on both stores."""

from __future__ import annotations

import asyncio
import base64

import orjson
import pytest
from pydantic import ValidationError

from broker_service.api.schemas.messages import BatchIn, plain_batch
from broker_service.domain.messages.model import MessageDraft, PlainBatch
from broker_service.domain.messages.queues import queue_for_sharding_key
from broker_service.domain.ports import RequestNonce
from tests.support import BrokerApp
from tests.unit.broker_service.domain.conftest import SQL_STORES


async def test_send_answers_where_the_message_is(broker: BrokerApp) -> None:
    await broker.topic("t", queues=2)
    first = (await broker.client.post("/v1/topics/t/messages", json={"body": "a"})).json()
    second = (await broker.client.post("/v1/topics/t/messages", json={"body": "b"})).json()
    assert first["status"] == "SEND_OK"
    assert {first["queue_id"], second["queue_id"]} == {0, 1}, "round-robin over the queues"
    stored = (await broker.client.get(f"/v1/messages/{first['msg_id']}")).json()
    assert stored["body"] == "a"
    assert stored["queue_offset"] == first["queue_offset"]


async def test_retransmit_is_stored_once_and_answered_the_same(broker: BrokerApp) -> None:
    await broker.topic("t")
    message = {"body": "pay 10", "keys": ["order-1"], "msg_id": "m-1"}
    first = await broker.client.post("/v1/topics/t/messages", json=message)
    again = await broker.client.post("/v1/topics/t/messages", json=message)
    assert first.status_code == again.status_code == 201
    assert again.json()["duplicate"] is True
    assert {k: v for k, v in again.json().items() if k != "duplicate"} == {
        k: v for k, v in first.json().items() if k != "duplicate"
    }
    found = (await broker.client.get("/v1/messages", params={"key": "order-1"})).json()
    assert len(found["messages"]) == 1


async def test_same_msg_id_with_other_content_is_409(broker: BrokerApp) -> None:
    await broker.topic("t")
    await broker.client.post("/v1/topics/t/messages", json={"body": "a", "msg_id": "m-1"})
    other = await broker.client.post("/v1/topics/t/messages", json={"body": "b", "msg_id": "m-1"})
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "MESSAGE_ID_CONFLICT"


async def test_batch_is_stored_in_order(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    batch = {"messages": [{"body": str(i)} for i in range(10)]}
    response = await broker.client.post("/v1/topics/t/messages:batch", json=batch)
    assert response.status_code == 201
    offsets = [r["queue_offset"] for r in response.json()["results"]]
    assert offsets == list(range(10))


async def test_a_batch_goes_to_one_queue_and_the_next_batch_to_the_next(
    broker: BrokerApp,
) -> None:
    """RocketMQ's round-robin picks a queue per send: a batch's messages that name no queue and no
    sharding key share one queue, in order; a message that names one keeps it."""
    await broker.topic("t", queues=4)
    batch = {"messages": [{"body": str(i)} for i in range(5)]}
    first = (await broker.client.post("/v1/topics/t/messages:batch", json=batch)).json()
    second = (await broker.client.post("/v1/topics/t/messages:batch", json=batch)).json()
    for results in (first["results"], second["results"]):
        assert len({r["queue_id"] for r in results}) == 1
        start = results[0]["queue_offset"]
        assert [r["queue_offset"] for r in results] == list(range(start, start + 5))
    assert first["results"][0]["queue_id"] != second["results"][0]["queue_id"]
    mixed = {"messages": [{"body": "a"}, {"body": "b", "queue_id": 3}, {"body": "c"}]}
    results = (await broker.client.post("/v1/topics/t/messages:batch", json=mixed)).json()
    queue_ids = [r["queue_id"] for r in results["results"]]
    assert queue_ids[1] == 3
    assert queue_ids[0] == queue_ids[2]


async def test_a_batch_mixing_delays_sharding_keys_and_plain_messages_places_each(
    broker: BrokerApp,
) -> None:
    await broker.topic("t", queues=4)
    batch = {
        "messages": [
            {"body": "plain"},
            {"body": "later", "delay_level": 3},
            {"body": "past", "deliver_at": 1_000},  # already due: stored like a plain message
            {"body": "keyed", "sharding_key": "order-7"},
        ]
    }
    response = await broker.client.post("/v1/topics/t/messages:batch", json=batch)
    assert response.status_code == 201
    plain, later, past, keyed = response.json()["results"]
    assert later["queue_offset"] is None
    assert later["deliver_at"] is not None
    assert later["topic"] == "t"
    assert past["queue_id"] == plain["queue_id"]
    assert past["queue_offset"] == plain["queue_offset"] + 1
    assert past["deliver_at"] is None
    assert keyed["queue_id"] == queue_for_sharding_key("order-7", 4)
    stored = (await broker.client.get(f"/v1/messages/{later['msg_id']}")).json()
    assert stored["topic"] == "SCHEDULE_TOPIC_XXXX"
    assert stored["body"] == "later"


async def test_plain_and_other_messages_of_a_batch_are_stored_whole_and_in_order(
    broker: BrokerApp,
) -> None:
    """Plain messages are inserted with fewer columns (store/rows.py); a batch that mixes them
    with messages carrying tags, keys and properties keeps every field and the send order."""
    await broker.topic("t", queues=1)
    full = {"body": "full", "tags": "A", "keys": ["k1"], "properties": {"p": "v"}}
    batch = {"messages": [{"body": "p0"}, full, {"body": "p1"}, {"body": "p2"}, full]}
    results = (await broker.client.post("/v1/topics/t/messages:batch", json=batch)).json()
    assert [r["queue_offset"] for r in results["results"]] == [0, 1, 2, 3, 4]
    stored = [
        (await broker.client.get(f"/v1/messages/{r['msg_id']}")).json() for r in results["results"]
    ]
    assert [m["body"] for m in stored] == ["p0", "full", "p1", "p2", "full"]
    plain = stored[0]
    assert (plain["tags"], plain["keys"], plain["properties"]) == (None, [], {})
    assert (plain["reconsume_times"], plain["transaction_id"], plain["deliver_at"]) == (
        0,
        None,
        None,
    )
    assert plain["stored_at"] is not None
    assert plain["born_at"] is not None
    assert (stored[1]["tags"], stored[1]["keys"], stored[1]["properties"]) == (
        "A",
        ["k1"],
        {"p": "v"},
    )
    found = (await broker.client.get("/v1/messages", params={"key": "k1"})).json()
    assert sorted(m["msg_id"] for m in found["messages"]) == sorted(
        [results["results"][1]["msg_id"], results["results"][4]["msg_id"]]
    )


async def test_batch_is_all_or_nothing(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await broker.client.post("/v1/topics/t/messages", json={"body": "x", "msg_id": "taken"})
    batch = {"messages": [{"body": "ok"}, {"body": "clash", "msg_id": "taken"}]}
    response = await broker.client.post("/v1/topics/t/messages:batch", json=batch)
    assert response.status_code == 409
    topic = (await broker.client.get("/v1/topics/t")).json()
    assert topic["queue_offsets"][0]["max_offset"] == 1, "nothing of the failed batch stored"


async def test_batch_retransmit_is_deduplicated(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    batch = {"messages": [{"body": str(i), "msg_id": f"b-{i}"} for i in range(3)]}
    first = (await broker.client.post("/v1/topics/t/messages:batch", json=batch)).json()
    again = (await broker.client.post("/v1/topics/t/messages:batch", json=batch)).json()
    assert [r["duplicate"] for r in again["results"]] == [True, True, True]
    assert [r["queue_offset"] for r in again["results"]] == [
        r["queue_offset"] for r in first["results"]
    ]


async def test_one_sharding_key_lands_in_one_queue_in_send_order(broker: BrokerApp) -> None:
    await broker.topic("orders", queues=8)
    results = []
    for step in ("created", "paid", "shipped", "done"):
        body = {"body": step, "sharding_key": "order-188"}
        results.append((await broker.client.post("/v1/topics/orders/messages", json=body)).json())
    assert len({r["queue_id"] for r in results}) == 1
    offsets = [r["queue_offset"] for r in results]
    assert offsets == sorted(offsets) == list(range(offsets[0], offsets[0] + 4))


async def test_queue_id_picks_the_queue_and_is_checked(broker: BrokerApp) -> None:
    await broker.topic("t", queues=2)
    ok = await broker.client.post("/v1/topics/t/messages", json={"body": "x", "queue_id": 1})
    assert ok.json()["queue_id"] == 1
    bad = await broker.client.post("/v1/topics/t/messages", json={"body": "x", "queue_id": 2})
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "INVALID_QUEUE_ID"


async def test_base64_body_round_trips(broker: BrokerApp) -> None:
    await broker.topic("t")
    raw = bytes(range(256))
    body = {"body": base64.b64encode(raw).decode(), "encoding": "base64"}
    sent = (await broker.client.post("/v1/topics/t/messages", json=body)).json()
    stored = (await broker.client.get(f"/v1/messages/{sent['msg_id']}")).json()
    assert base64.b64decode(stored["body"]) == raw
    assert stored["encoding"] == "base64"


async def test_delayed_message_waits_in_the_schedule_topic(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    sent = await broker.client.post(
        "/v1/topics/t/messages", json={"body": "later", "delay_level": 3}
    )
    assert sent.status_code == 201
    receipt = sent.json()
    assert receipt["topic"] == "t"
    assert receipt["queue_offset"] is None
    assert receipt["deliver_at"] is not None
    life = (await broker.client.get(f"/v1/messages/{receipt['msg_id']}")).json()
    assert life["stage"] == "SCHEDULED"
    assert life["topic"] == "SCHEDULE_TOPIC_XXXX"
    assert life["properties"]["REAL_TOPIC"] == "t"
    topic = (await broker.client.get("/v1/topics/t")).json()
    assert topic["queue_offsets"][0]["max_offset"] == 0, "not in the real topic before its time"


async def test_find_by_key_and_time_range(broker: BrokerApp) -> None:
    await broker.topic("t")
    await broker.client.post("/v1/topics/t/messages", json={"body": "1", "keys": ["k", "x"]})
    await broker.client.post("/v1/topics/t/messages", json={"body": "2", "keys": ["k"]})
    await broker.client.post("/v1/topics/t/messages", json={"body": "3", "keys": ["other"]})
    found = (await broker.client.get("/v1/messages", params={"key": "k", "topic": "t"})).json()
    assert [m["body"] for m in found["messages"]] == ["1", "2"]
    future = (
        await broker.client.get(
            "/v1/messages", params={"key": "k", "begin": "2999-01-01T00:00:00Z"}
        )
    ).json()
    assert future["messages"] == []
    by_ms = (await broker.client.get("/v1/messages", params={"key": "k", "end": 0})).json()
    assert by_ms["messages"] == []


# -- plain batches: bodies alone, sent as columns (domain/messages/model.py PlainBatch) ---------------------


async def test_a_plain_batch_stores_each_body_with_its_encoding(broker: BrokerApp) -> None:
    await broker.topic("t", queues=3)
    raw = bytes(range(256))
    batch = {
        "messages": [
            {"body": "text"},
            {"body": base64.b64encode(raw).decode(), "encoding": "base64"},
            {"body": "said utf-8", "encoding": "utf-8"},
            {"body": "ünïcødé ✓"},
        ]
    }
    response = await broker.client.post("/v1/topics/t/messages:batch", json=batch)
    assert response.status_code == 201
    results = response.json()["results"]
    assert len({r["msg_id"] for r in results}) == 4
    assert len({r["queue_id"] for r in results}) == 1
    first = results[0]["queue_offset"]
    assert [r["queue_offset"] for r in results] == [first, first + 1, first + 2, first + 3]
    for result in results:
        assert (result["topic"], result["status"], result["duplicate"]) == ("t", "SEND_OK", False)
        assert result["deliver_at"] is None
    stored = [(await broker.client.get(f"/v1/messages/{r['msg_id']}")).json() for r in results]
    assert [m["body"] for m in stored] == [
        "text",
        base64.b64encode(raw).decode(),
        "said utf-8",
        "ünïcødé ✓",
    ]
    assert [m["encoding"] for m in stored] == ["utf-8", "base64", "utf-8", "utf-8"]
    for message, result in zip(stored, results, strict=True):
        assert (message["queue_id"], message["queue_offset"]) == (
            result["queue_id"],
            result["queue_offset"],
        )
        assert (message["tags"], message["keys"], message["properties"]) == (None, [], {})
        assert message["born_at"] <= message["stored_at"]


async def test_plain_batches_committed_with_other_sends_keep_offsets_dense(
    broker: BrokerApp,
) -> None:
    """Plain batches, single sends and batches with keys, concurrently, so group commits mix
    them: each queue's offsets are dense and unique, and every receipt names its own message."""
    await broker.topic("t", queues=3)

    async def plain(i: int) -> list[dict[str, object]]:
        batch = {"messages": [{"body": f"p{i}-{n}"} for n in range(7)]}
        response = await broker.client.post("/v1/topics/t/messages:batch", json=batch)
        assert response.status_code == 201, response.text
        results: list[dict[str, object]] = response.json()["results"]
        return results

    async def single(i: int) -> list[dict[str, object]]:
        response = await broker.client.post("/v1/topics/t/messages", json={"body": f"s{i}"})
        assert response.status_code == 201, response.text
        return [response.json()]

    async def keyed(i: int) -> list[dict[str, object]]:
        batch = {"messages": [{"body": f"k{i}-{n}", "keys": [f"k{i}"]} for n in range(3)]}
        response = await broker.client.post("/v1/topics/t/messages:batch", json=batch)
        assert response.status_code == 201, response.text
        results: list[dict[str, object]] = response.json()["results"]
        return results

    sends = [send(i) for i in range(20) for send in (plain, single, keyed)]
    receipts = [r for results in await asyncio.gather(*sends) for r in results]
    assert len(receipts) == 20 * (7 + 1 + 3)
    by_queue: dict[object, list[object]] = {}
    for receipt in receipts:
        by_queue.setdefault(receipt["queue_id"], []).append(receipt["queue_offset"])
    topic = (await broker.client.get("/v1/topics/t")).json()
    for queue in topic["queue_offsets"]:
        offsets = sorted(by_queue.get(queue["queue_id"], []))  # type: ignore[type-var]
        assert offsets == list(range(queue["max_offset"])), queue
    listed = await broker.client.get("/v1/messages", params={"topic": "t", "limit": 1000})
    stored = {m["msg_id"]: m for m in listed.json()["messages"]}
    assert len(stored) == len(receipts)
    for receipt in receipts:
        message = stored[receipt["msg_id"]]
        assert (message["queue_id"], message["queue_offset"]) == (
            receipt["queue_id"],
            receipt["queue_offset"],
        )
    assert sorted(m["body"] for m in stored.values()) == sorted(
        [f"p{i}-{n}" for i in range(20) for n in range(7)]
        + [f"s{i}" for i in range(20)]
        + [f"k{i}-{n}" for i in range(20) for n in range(3)]
    )


# SQL stores only: it counts the group commits of the SQL store's writer (the memory store has none).
@pytest.mark.parametrize("store_url", SQL_STORES, indirect=True)
async def test_a_failing_plain_batch_leaves_its_group_commit_whole(migrated_url: str) -> None:
    """Plain batches to a topic that does not exist fail (404) in the same group commits as good
    ones: the good ones are stored whole, their offsets dense; nothing of the others is."""
    async with BrokerApp.start(database_url=migrated_url, auto_create_topics=False) as broker:
        await broker.topic("t", queues=2)

        async def send(topic: str, i: int) -> tuple[int, list[dict[str, object]]]:
            batch = {"messages": [{"body": f"{topic}{i}-{n}"} for n in range(5)]}
            response = await broker.client.post(f"/v1/topics/{topic}/messages:batch", json=batch)
            results = response.json().get("results", [])
            return response.status_code, results

        writer = broker.state.store.writer
        batches, units = writer.batches, writer.units
        answers = await asyncio.gather(*(send(t, i) for i in range(15) for t in ("t", "nope")))
        assert writer.units - units > writer.batches - batches, "units shared group commits"
        good = [results for status, results in answers if status == 201]
        assert sorted(status for status, _ in answers) == [201] * 15 + [404] * 15
        topic = (await broker.client.get("/v1/topics/t")).json()
        by_queue: dict[object, list[object]] = {}
        for results in good:
            for r in results:
                by_queue.setdefault(r["queue_id"], []).append(r["queue_offset"])
        for queue in topic["queue_offsets"]:
            offsets = sorted(by_queue.get(queue["queue_id"], []))  # type: ignore[type-var]
            assert offsets == list(range(queue["max_offset"])), queue
        assert (await broker.client.get("/v1/topics/nope")).status_code == 404


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param({"messages": [{"body": "a"}, {"body": ""}]}, id="bodies"),
        pytest.param(
            {
                "messages": [
                    {"body": "aGk=", "encoding": "base64"},
                    {"body": "a", "encoding": "utf-8"},
                ]
            },
            id="encodings",
        ),
        pytest.param({"messages": [{"body": "a"}] * 1000}, id="a-thousand"),
        pytest.param({"messages": [{"body": "a"}, {"body": "b", "tags": "T"}]}, id="one-tagged"),
        pytest.param({"messages": [{"body": "a", "keys": []}]}, id="keys-said-empty"),
        pytest.param({"messages": [{"body": "a", "msg_id": "m1"}]}, id="msg-id"),
        pytest.param({"messages": [{"body": "a", "queue_id": None}]}, id="null-queue"),
        pytest.param({"messages": [{"body": "a", "colour": "red"}]}, id="unknown-field"),
        pytest.param({"messages": [{"body": 5}]}, id="body-not-text"),
        pytest.param({"messages": [{"body": "a", "encoding": "utf-16"}]}, id="encoding-unknown"),
        pytest.param({"messages": [{"body": "a", "encoding": None}]}, id="encoding-null"),
        pytest.param({"messages": []}, id="none"),
        pytest.param({"messages": [{"body": "a"}] * 1001}, id="too-many"),
        pytest.param({"messages": [{"body": "a"}], "extra": 1}, id="extra-top-level"),
        pytest.param({"messages": [{}]}, id="no-body"),
        pytest.param([{"body": "a"}], id="not-an-object"),
    ],
)
def test_the_plain_lane_takes_exactly_the_batches_of_bodies_alone(batch: object) -> None:
    """``plain_batch`` reads a batch as columns only where BatchIn (the contract) would accept it
    and every message sets nothing but its body and encoding; everything else goes to BatchIn."""
    raw = orjson.dumps(batch)
    plain = plain_batch(raw)
    try:
        model: BatchIn | None = BatchIn.model_validate_json(raw)
    except ValidationError:
        model = None
    bodies_alone = model is not None and all(
        m.model_fields_set <= {"body", "encoding"} for m in model.messages
    )
    assert (plain is not None) == bodies_alone
    if plain is not None and model is not None:
        assert plain.bodies == [m.body_bytes() for m in model.messages]
        assert plain.encodings == [m.encoding for m in model.messages]


async def test_a_batch_of_bodies_alone_goes_as_columns_and_any_other_message_by_message(
    broker: BrokerApp,
) -> None:
    """The route takes the plain lane (one PlainBatch per request) exactly for batches of bodies
    alone: both lanes answer alike, so this watches the service's calls."""
    await broker.topic("t", queues=2)
    service = broker.state.messages
    calls: list[tuple[str, int]] = []
    send_plain, send = service.send_plain, service.send

    async def counting_plain(
        topic: str, batch: PlainBatch, *, nonce: RequestNonce | None = None
    ) -> PlainBatch:
        calls.append(("plain", len(batch.bodies)))
        return await send_plain(topic, batch, nonce=nonce)

    async def counting_send(
        topic: str, drafts: list[MessageDraft], *, nonce: RequestNonce | None = None
    ) -> object:
        calls.append(("drafts", len(drafts)))
        return await send(topic, drafts, nonce=nonce)

    service.send_plain, service.send = counting_plain, counting_send
    plain = {"messages": [{"body": "a"}, {"body": "Yg==", "encoding": "base64"}]}
    mixed = {"messages": [{"body": "a"}, {"body": "b", "keys": ["k"]}]}
    for batch in (plain, mixed):
        response = await broker.client.post("/v1/topics/t/messages:batch", json=batch)
        assert response.status_code == 201, response.text
    assert calls == [("plain", 2), ("drafts", 2)]
    stored = await broker.client.get("/v1/messages", params={"topic": "t", "limit": 10})
    assert sorted(m["body"] for m in stored.json()["messages"]) == ["Yg==", "a", "a", "b"]


def test_a_retransmit_in_another_trace_context_has_the_same_content() -> None:
    from broker_service.domain.messages.model import MessageDraft

    first = MessageDraft(b"100", properties={"source": "web", "traceparent": "00-aa-01-01"})
    again = first._replace(properties={"source": "web", "traceparent": "00-bb-02-01"})
    changed = first._replace(properties={"source": "app", "traceparent": "00-aa-01-01"})
    assert first.content_hash("t") == again.content_hash("t")
    assert first.content_hash("t") != changed.content_hash("t")  # the rest still counts
