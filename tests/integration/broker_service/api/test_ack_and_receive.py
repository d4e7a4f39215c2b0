"""``POST /v1/consumer-groups/{group}/ack-and-receive``: the acks applied as ``.../ack`` applies
them and the next messages as ``.../receive`` hands them out, in one answer; bad bodies and
unknown groups in the error envelope, and a refused receive applying no ack."""

from __future__ import annotations

from tests.support import BrokerApp

GROUP = "shop"
PATH = f"/v1/consumer-groups/{GROUP}"


async def _setup(broker: BrokerApp, count: int) -> None:
    client = broker.client
    assert (await client.post("/v1/topics", json={"name": "orders", "queues": 2})).is_success
    group = {"name": GROUP, "consume_from": "FIRST_OFFSET"}
    assert (await client.post("/v1/consumer-groups", json=group)).is_success
    assert (await client.post(f"{PATH}/subscriptions", json={"topic": "orders"})).is_success
    for n in range(count):
        sent = await client.post("/v1/topics/orders/messages", json={"body": f"m{n}"})
        assert sent.is_success, sent.text


def _body(handles: list[str], **extra: object) -> dict[str, object]:
    return {"receipt_handles": handles, "client_id": "c-1", "max_messages": 2, **extra}


async def _receive(broker: BrokerApp, most: int) -> list[dict[str, object]]:
    body = {"client_id": "c-1", "max_messages": most}
    answer = await broker.client.post(f"{PATH}/receive", json=body)
    assert answer.status_code == 200, answer.text
    messages: list[dict[str, object]] = answer.json()["messages"]
    return messages


async def test_acks_and_receives_in_one_answer(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url) as broker:
        await _setup(broker, 4)
        first = await _receive(broker, 2)
        handles = [str(m["receipt_handle"]) for m in first]
        answer = await broker.client.post(f"{PATH}/ack-and-receive", json=_body([*handles, "x"]))
        assert answer.status_code == 200, answer.text
        data = answer.json()
        assert (data["acked"], data["stale"]) == (2, ["x"])
        bodies = {m["body"] for m in data["messages"]} | {m["body"] for m in first}
        assert bodies == {"m0", "m1", "m2", "m3"}
        assert all(m["receipt_handle"] and m["invisible_until"] for m in data["messages"])
        again = await broker.client.post(f"{PATH}/ack", json={"receipt_handles": handles})
        assert again.json() == {"acked": 0, "stale": handles}, "acked once"
        view = (await broker.client.get(PATH)).json()
        assert view["in_flight"] == 2


async def test_bad_bodies_and_unknown_groups_are_answered_in_the_envelope(
    migrated_url: str,
) -> None:
    async with BrokerApp.start(database_url=migrated_url) as broker:
        await _setup(broker, 1)
        for body in (
            _body([]),
            _body(["h"] * 1001),
            {"receipt_handles": ["h"]},
            _body(["h"], invisible_seconds=0),
            _body(["h"], extra=1),
        ):
            answer = await broker.client.post(f"{PATH}/ack-and-receive", json=body)
            assert answer.status_code == 422, (body, answer.text)
            assert answer.json()["error"]["code"], answer.text
        unknown = await broker.client.post(
            "/v1/consumer-groups/nobody/ack-and-receive", json=_body(["h"])
        )
        assert unknown.status_code == 404, unknown.text
        assert unknown.json()["error"]["code"] == "CONSUMER_GROUP_NOT_FOUND"


async def test_a_refused_receive_applies_no_ack(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url) as broker:
        await _setup(broker, 1)
        assert (await broker.client.post("/v1/topics", json={"name": "other"})).is_success
        (delivered,) = await _receive(broker, 1)
        handle = str(delivered["receipt_handle"])
        refused = await broker.client.post(
            f"{PATH}/ack-and-receive", json=_body([handle], topic="other")
        )
        assert refused.status_code == 404, refused.text
        assert refused.json()["error"]["code"] == "SUBSCRIPTION_NOT_FOUND"
        acked = await broker.client.post(f"{PATH}/ack", json={"receipt_handles": [handle]})
        assert acked.json() == {"acked": 1, "stale": []}
