"""Half messages, commit and rollback -- on both stores."""

from __future__ import annotations

from typing import Any

from tests.support import BrokerApp


async def _half(broker: BrokerApp, **extra: Any) -> dict[str, Any]:
    body = {"body": "transfer 100", "topic": "transfers", "producer_group": "bob", **extra}
    response = await broker.client.post("/v1/transactions", json=body)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


async def test_half_is_invisible_in_its_topic(broker: BrokerApp) -> None:
    await broker.topic("transfers", queues=1)
    half = await _half(broker, keys=["t-1"])
    assert half["state"] == "PREPARED"
    topic = (await broker.client.get("/v1/topics/transfers")).json()
    assert topic["queue_offsets"][0]["max_offset"] == 0
    life = (await broker.client.get(f"/v1/messages/{half['msg_id']}")).json()
    assert life["stage"] == "HALF"
    assert life["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC"
    assert life["properties"]["REAL_TOPIC"] == "transfers"


async def test_commit_puts_the_message_in_its_topic_with_an_op_record(
    broker: BrokerApp,
) -> None:
    await broker.topic("transfers", queues=1)
    half = await _half(broker)
    txid = half["transaction_id"]
    commit = await broker.client.post(
        f"/v1/transactions/{txid}/commit", json={"producer_group": "bob"}
    )
    assert commit.status_code == 200
    assert commit.json()["state"] == "COMMITTED"
    assert commit.json()["queue_offset"] == 0
    life = (await broker.client.get(f"/v1/messages/{half['msg_id']}")).json()
    assert life["stage"] == "STORED"
    assert life["topic"] == "transfers"
    assert life["transaction_id"] == txid
    topics = {c["topic"] for c in life["copies"]}
    assert topics == {"RMQ_SYS_TRANS_HALF_TOPIC", "transfers"}
    state = (await broker.client.get(f"/v1/transactions/{txid}")).json()
    assert state["state"] == "COMMITTED"
    assert state["resolved_by"] == "producer"
    assert state["resolved_at"] >= state["created_at"]


async def test_repeat_commit_answers_the_same_and_rollback_after_is_409(
    broker: BrokerApp,
) -> None:
    await broker.topic("transfers")
    txid = (await _half(broker))["transaction_id"]
    first = await broker.client.post(
        f"/v1/transactions/{txid}/commit", json={"producer_group": "bob"}
    )
    again = await broker.client.post(
        f"/v1/transactions/{txid}/commit", json={"producer_group": "bob"}
    )
    assert again.status_code == 200
    assert again.json() == first.json()
    opposite = await broker.client.post(
        f"/v1/transactions/{txid}/rollback", json={"producer_group": "bob"}
    )
    assert opposite.status_code == 409
    assert opposite.json()["error"]["code"] == "TRANSACTION_ALREADY_RESOLVED"


async def test_rollback_never_delivers(broker: BrokerApp) -> None:
    await broker.topic("transfers", queues=1)
    txid = (await _half(broker))["transaction_id"]
    rolled = await broker.client.post(
        f"/v1/transactions/{txid}/rollback", json={"producer_group": "bob"}
    )
    assert rolled.status_code == 200
    assert rolled.json()["state"] == "ROLLED_BACK"
    again = await broker.client.post(
        f"/v1/transactions/{txid}/rollback", json={"producer_group": "bob"}
    )
    assert again.json() == rolled.json()
    commit = await broker.client.post(
        f"/v1/transactions/{txid}/commit", json={"producer_group": "bob"}
    )
    assert commit.status_code == 409
    topic = (await broker.client.get("/v1/topics/transfers")).json()
    assert topic["queue_offsets"][0]["max_offset"] == 0


async def test_unknown_transaction_is_404(broker: BrokerApp) -> None:
    for path in ("/v1/transactions/nope", "/v1/transactions/nope/commit"):
        response = await (
            broker.client.get(path) if "commit" not in path else broker.client.post(path, json={})
        )
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "TRANSACTION_NOT_FOUND"


async def test_commit_from_another_group_is_409(broker: BrokerApp) -> None:
    await broker.topic("transfers")
    txid = (await _half(broker))["transaction_id"]
    response = await broker.client.post(
        f"/v1/transactions/{txid}/commit", json={"producer_group": "mallory"}
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "PRODUCER_GROUP_MISMATCH"


async def test_half_retransmit_returns_the_same_transaction(broker: BrokerApp) -> None:
    await broker.topic("transfers")
    first = await _half(broker, msg_id="h-1")
    again = await _half(broker, msg_id="h-1")
    assert again["transaction_id"] == first["transaction_id"]
    assert again["duplicate"] is True


async def test_list_transactions_by_state_group_and_age(broker: BrokerApp) -> None:
    await broker.topic("transfers")
    a = (await _half(broker))["transaction_id"]
    b = (await _half(broker))["transaction_id"]
    await broker.client.post(f"/v1/transactions/{b}/rollback", json={"producer_group": "bob"})
    prepared = (await broker.client.get("/v1/transactions", params={"state": "PREPARED"})).json()
    assert [t["transaction_id"] for t in prepared["transactions"]] == [a]
    other_group = (
        await broker.client.get("/v1/transactions", params={"producer_group": "alice"})
    ).json()
    assert other_group["transactions"] == []
    old = (await broker.client.get("/v1/transactions", params={"older_than_seconds": 3600})).json()
    assert old["transactions"] == []


async def test_delayed_transactional_message_is_scheduled_at_commit(
    broker: BrokerApp,
) -> None:
    await broker.topic("transfers", queues=1)
    half = await _half(broker, delay_level=2)
    commit = await broker.client.post(
        f"/v1/transactions/{half['transaction_id']}/commit", json={"producer_group": "bob"}
    )
    assert commit.status_code == 200
    assert commit.json()["queue_offset"] is None
    life = (await broker.client.get(f"/v1/messages/{half['msg_id']}")).json()
    assert life["stage"] == "SCHEDULED"
    assert life["properties"]["REAL_TOPIC"] == "transfers"


async def test_operator_may_resolve_without_a_group(broker: BrokerApp) -> None:
    await broker.topic("transfers")
    txid = (await _half(broker))["transaction_id"]
    response = await broker.client.post(f"/v1/transactions/{txid}/rollback")
    assert response.status_code == 200
    state = (await broker.client.get(f"/v1/transactions/{txid}")).json()
    assert state["resolved_by"] == "operator"
