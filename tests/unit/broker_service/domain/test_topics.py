"""Topic administration, on both stores."""

from __future__ import annotations

from tests.support import BrokerApp


async def test_create_is_201_then_200_for_the_same_config(broker: BrokerApp) -> None:
    first = await broker.client.post("/v1/topics", json={"name": "orders", "queues": 3})
    again = await broker.client.post("/v1/topics", json={"name": "orders", "queues": 3})
    assert first.status_code == 201
    assert again.status_code == 200
    assert first.json()["queues"] == 3
    assert [q["queue_id"] for q in first.json()["queue_offsets"]] == [0, 1, 2]


async def test_create_with_another_config_is_409(broker: BrokerApp) -> None:
    await broker.topic("orders", queues=3)
    response = await broker.client.post("/v1/topics", json={"name": "orders", "queues": 4})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "TOPIC_EXISTS"


async def test_list_show_and_delete(broker: BrokerApp) -> None:
    await broker.topic("a", queues=1)
    await broker.topic("b", queues=2)
    await broker.client.post("/v1/topics/b/messages", json={"body": "x", "queue_id": 1})
    listed = (await broker.client.get("/v1/topics")).json()["topics"]
    assert [t["name"] for t in listed] == ["a", "b"]
    shown = (await broker.client.get("/v1/topics/b")).json()
    assert shown["queue_offsets"][1] == {"queue_id": 1, "min_offset": 0, "max_offset": 1}
    assert (await broker.client.delete("/v1/topics/b")).status_code == 204
    assert (await broker.client.get("/v1/topics/b")).status_code == 404
    assert (await broker.client.delete("/v1/topics/b")).status_code == 404


async def test_a_topic_created_again_continues_its_offsets(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await broker.client.post("/v1/topics/t/messages", json={"body": "1"})
    await broker.client.delete("/v1/topics/t")
    await broker.topic("t", queues=1)
    sent = await broker.client.post("/v1/topics/t/messages", json={"body": "2"})
    assert sent.status_code == 201
    assert sent.json()["queue_offset"] == 1


async def test_system_topics_cannot_be_created_sent_to_or_deleted(
    broker: BrokerApp,
) -> None:
    for name in ("RMQ_SYS_TRANS_HALF_TOPIC", "%RETRY%g", "%DLQ%g", "SCHEDULE_TOPIC_XXXX"):
        created = await broker.client.post("/v1/topics", json={"name": name})
        assert created.status_code == 400, name
        assert created.json()["error"]["code"] == "SYSTEM_TOPIC"
    sent = await broker.client.post(
        "/v1/topics/RMQ_SYS_TRANS_HALF_TOPIC/messages", json={"body": "x"}
    )
    assert sent.status_code == 400
    deleted = await broker.client.delete("/v1/topics/RMQ_SYS_TRANS_OP_HALF_TOPIC")
    assert deleted.status_code == 400


async def test_send_to_unknown_topic_is_404_unless_auto_create(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url) as strict:
        response = await strict.client.post("/v1/topics/nope/messages", json={"body": "x"})
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "TOPIC_NOT_FOUND"
    async with BrokerApp.start(
        database_url=migrated_url, auto_create_topics=True, default_topic_queues=2
    ) as lenient:
        response = await lenient.client.post("/v1/topics/nope/messages", json={"body": "x"})
        assert response.status_code == 201
        topic = (await lenient.client.get("/v1/topics/nope")).json()
        assert topic["queues"] == 2
