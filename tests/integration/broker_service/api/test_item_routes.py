"""The routes answered item by item (issue 20): ``POST /v1/transactions:batch``, ``POST
/v1/transactions/decisions:batch`` and ``POST /v1/messages:batch``, over the real app on both
stores.  Each item is answered as its single route would answer it -- one bad item (an unknown or
system topic, a bad name, a message over the limit, a decision that loses) is refused on its own
and its neighbours are stored; exactly one decision wins per transaction, within one request too;
with the ACL on, an item the account may not send is 403 on its own, and a replayed request is
refused whole with none of its items run again."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from framework.signing import sign_headers
from tests.support import BOB, OPERATOR, TELLER, BrokerApp, signed


def half(topic: str = "transfers", group: str = "bob-bank", **fields: Any) -> dict[str, Any]:
    return {"topic": topic, "producer_group": group, "body": "100", **fields}


def statuses(answer: httpx.Response) -> list[int]:
    assert answer.status_code == 200, answer.text
    return [item["status"] for item in answer.json()["results"]]


def codes(answer: httpx.Response) -> list[str | None]:
    return [item.get("error", {}).get("code") for item in answer.json()["results"]]


async def state(client: httpx.AsyncClient, transaction_id: str) -> str:
    answer = await client.get(f"/v1/transactions/{transaction_id}")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["state"])


async def stored(client: httpx.AsyncClient, topic: str = "transfers") -> list[dict[str, Any]]:
    answer = await client.get("/v1/messages", params={"topic": topic, "limit": 1000})
    messages: list[dict[str, Any]] = answer.json()["messages"]
    return messages


@pytest.fixture
async def small(migrated_url: str) -> Any:
    """The broker with a 1,000-byte message limit, so one item can be over it."""
    async with BrokerApp.start(database_url=migrated_url, max_message_bytes=1000) as running:
        await running.topic("transfers", queues=2)
        yield running


async def test_each_half_is_answered_alone_and_the_good_ones_are_stored(small: BrokerApp) -> None:
    client = small.client
    answer = await client.post(
        "/v1/transactions:batch",
        json={
            "halves": [
                half(msg_id="h-1"),
                half(topic="nowhere"),
                half(topic="bad name!"),
                half(topic="RMQ_SYS_TRANS_HALF_TOPIC"),
                half(body="x" * 1001),
                half(group="bad group!"),
                half(msg_id="h-2", keys=["k-2"]),
                half(msg_id="h-1"),  # the same half again: a retransmit, answered the same
            ]
        },
    )
    assert statuses(answer) == [201, 404, 400, 400, 413, 400, 201, 201]
    assert codes(answer) == [None, "TOPIC_NOT_FOUND", "INVALID_TOPIC_NAME", "SYSTEM_TOPIC",
                             "MESSAGE_TOO_LARGE", "INVALID_PRODUCER_GROUP_NAME", None, None]  # fmt: skip
    results = answer.json()["results"]
    assert results[4]["error"]["detail"] == {"size": 1001, "limit": 1000}
    first, second, again = results[0]["result"], results[6]["result"], results[7]["result"]
    assert first["state"] == "PREPARED"
    assert first["duplicate"] is False
    assert again == {**first, "duplicate": True}
    for result in (first, second):
        assert await state(client, result["transaction_id"]) == "PREPARED"
    listed = await client.get("/v1/transactions", params={"producer_group": "bob-bank"})
    assert sorted(t["msg_id"] for t in listed.json()["transactions"]) == ["h-1", "h-2"]


async def test_each_decision_is_answered_alone_and_exactly_one_wins(broker: BrokerApp) -> None:
    client = broker.client
    await broker.topic("transfers", queues=2)
    halves = await client.post(
        "/v1/transactions:batch", json={"halves": [half() for _ in range(4)]}
    )
    a, b, c, d = (r["result"]["transaction_id"] for r in halves.json()["results"])
    decisions = [
        {"transaction_id": a, "decision": "COMMIT", "producer_group": "bob-bank"},
        {"transaction_id": b, "decision": "ROLLBACK", "producer_group": "bob-bank"},
        {"transaction_id": c, "decision": "COMMIT", "producer_group": "bob-bank"},
        {"transaction_id": c, "decision": "ROLLBACK", "producer_group": "bob-bank"},  # loses
        {"transaction_id": c, "decision": "COMMIT", "producer_group": "bob-bank"},  # a repeat
        {"transaction_id": d, "decision": "COMMIT", "producer_group": "other-group"},
        {"transaction_id": "NO-SUCH-TRANSACTION", "decision": "COMMIT", "producer_group": "x"},
        {
            "transaction_id": a,
            "decision": "COMMIT",
            "producer_group": "bob-bank",
            "client_id": "bob-1",
            "from_check": True,
        },
    ]
    answer = await client.post("/v1/transactions/decisions:batch", json={"decisions": decisions})
    assert statuses(answer) == [200, 200, 200, 409, 200, 409, 404, 200]
    assert codes(answer)[3:7] == ["TRANSACTION_ALREADY_RESOLVED", None,
                                  "PRODUCER_GROUP_MISMATCH", "TRANSACTION_NOT_FOUND"]  # fmt: skip
    results = answer.json()["results"]
    committed = results[0]["result"]
    assert committed["state"] == "COMMITTED"
    assert committed["topic"] == "transfers"
    assert results[1]["result"]["state"] == "ROLLED_BACK"
    assert results[1]["result"]["queue_offset"] is None
    assert results[2]["result"] == results[4]["result"]  # the repeat answers the same
    assert results[7]["result"] == committed
    assert [await state(client, t) for t in (a, b, c, d)] == [
        "COMMITTED",
        "ROLLED_BACK",
        "COMMITTED",
        "PREPARED",
    ]
    # exactly one real message per committed transaction, whatever the repeats
    assert sorted(m["transaction_id"] for m in await stored(client)) == sorted([a, c])


async def test_each_send_goes_to_its_own_topic_in_order(broker: BrokerApp) -> None:
    client = broker.client
    await broker.topic("transfers", queues=4)
    await broker.topic("audit", queues=1)
    messages = [
        {"topic": "transfers", "body": "t-1", "sharding_key": "acct-1", "msg_id": "s-1"},
        {"topic": "audit", "body": "a-1"},
        {"topic": "nowhere", "body": "lost"},
        {"topic": "transfers", "body": "t-2", "sharding_key": "acct-1"},
        {"topic": "transfers", "body": "bad", "tags": "a|b"},
        {"topic": "transfers", "body": "t-3", "sharding_key": "acct-1"},
        {"topic": "transfers", "body": "t-1", "sharding_key": "acct-1", "msg_id": "s-1"},
    ]
    answer = await client.post("/v1/messages:batch", json={"messages": messages})
    assert statuses(answer) == [201, 201, 404, 201, 422, 201, 201]
    assert codes(answer)[4] == "INVALID_TAG"
    results = [item.get("result") for item in answer.json()["results"]]
    assert results[6] == {**results[0], "duplicate": True}
    ordered = [results[0], results[3], results[5]]  # one sharding key: one queue, in order
    assert len({r["queue_id"] for r in ordered}) == 1
    assert [r["queue_offset"] for r in ordered] == sorted(r["queue_offset"] for r in ordered)
    assert sorted(m["body"] for m in await stored(client)) == ["t-1", "t-2", "t-3"]
    assert [m["body"] for m in await stored(client, "audit")] == ["a-1"]


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/v1/transactions:batch", {"halves": []}, 422, "INVALID_REQUEST"),
        ("/v1/transactions:batch", {"halves": [half()] * 1001}, 422, "INVALID_REQUEST"),
        ("/v1/transactions:batch", {"halves": [{"topic": "transfers"}]}, 422, "INVALID_REQUEST"),
        ("/v1/transactions:batch", {"halves": [half(extra=1)]}, 422, "INVALID_REQUEST"),
        ("/v1/transactions:batch", [half()], 422, "INVALID_REQUEST"),
        (
            "/v1/transactions/decisions:batch",
            {"decisions": [{"transaction_id": "x", "decision": "MAYBE"}]},
            422,
            "INVALID_REQUEST",
        ),
        ("/v1/messages:batch", {"messages": [{"body": "no topic"}]}, 422, "INVALID_REQUEST"),
        ("/v1/messages:batch", b'{"messages": [', 400, "INVALID_JSON"),
    ],
)
async def test_a_malformed_request_is_refused_whole(
    broker: BrokerApp, path: str, body: Any, status: int, code: str
) -> None:
    """The request's shape is checked whole, as every body of the API: a client's bug."""
    await broker.topic("transfers")
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    answer = await broker.client.post(
        path, content=content, headers={"content-type": "application/json"}
    )
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
    listed = await broker.client.get("/v1/transactions")
    assert listed.json()["transactions"] == []


async def test_the_openapi_documents_the_items_and_their_answers(broker: BrokerApp) -> None:
    schema = (await broker.client.get("/openapi.json")).json()
    for path, body, item in (
        ("/v1/transactions:batch", "HalvesIn", "HalfItemOut"),
        ("/v1/transactions/decisions:batch", "DecisionsIn", "ResolutionItemOut"),
        ("/v1/messages:batch", "SendsIn", "SendItemOut"),
    ):
        operation = schema["paths"][path]["post"]
        request = operation["requestBody"]["content"]["application/json"]["schema"]
        assert request["$ref"].endswith(body)
        assert body in schema["components"]["schemas"]
        assert item in schema["components"]["schemas"]
        assert "ItemErrorOut" in schema["components"]["schemas"]
        assert {"200", "401", "403", "422"} <= set(operation["responses"])


# -- the ACL -----------------------------------------------------------------------------------


@pytest.fixture
async def acl_broker(acl_app: BrokerApp) -> BrokerApp:
    """The broker with the ACL on, and the topics ``transfers`` and ``audit``."""
    async with signed(acl_app, OPERATOR) as operator:
        for topic in ("transfers", "audit"):
            created = await operator.post("/v1/topics", json={"name": topic, "queues": 1})
            assert created.status_code == 201, created.text
    return acl_app


async def test_an_item_the_account_may_not_send_is_refused_on_its_own(
    acl_broker: BrokerApp,
) -> None:
    async with signed(acl_broker, BOB) as bob, signed(acl_broker, OPERATOR) as operator:
        halves = await bob.post(
            "/v1/transactions:batch",
            json={"halves": [half(), half(topic="audit"), half(group="smith-bank"), half()]},
        )
        assert statuses(halves) == [201, 403, 403, 201]
        assert codes(halves) == [None, "PERMISSION_DENIED", "PERMISSION_DENIED", None]
        assert "audit" in halves.json()["results"][1]["error"]["message"]
        mine = [r["result"]["transaction_id"] for r in halves.json()["results"] if "result" in r]
        theirs = await operator.post("/v1/transactions", json=half(topic="audit"))
        audit_tx = theirs.json()["transaction_id"]
        decisions = await bob.post(
            "/v1/transactions/decisions:batch",
            json={
                "decisions": [
                    {"transaction_id": mine[0], "decision": "COMMIT", "producer_group": "bob-bank"},
                    {  # Bob's group, but the half's topic is audit: no PUB there
                        "transaction_id": audit_tx,
                        "decision": "COMMIT",
                        "producer_group": "bob-bank",
                    },
                    {"transaction_id": mine[1], "decision": "ROLLBACK"},  # an operator's: admin
                    {
                        "transaction_id": mine[1],
                        "decision": "ROLLBACK",
                        "producer_group": "bob-bank",
                    },
                ]
            },
        )
        assert statuses(decisions) == [200, 403, 403, 200]
        sends = await bob.post(
            "/v1/messages:batch",
            json={
                "messages": [{"topic": "audit", "body": "x"}, {"topic": "transfers", "body": "y"}]
            },
        )
        assert statuses(sends) == [403, 201]
        states = [await state(operator, t) for t in (*mine, audit_tx)]
        assert states == ["COMMITTED", "ROLLED_BACK", "PREPARED"]
    async with signed(acl_broker, TELLER) as teller:  # PUB on the group is not enough
        refused = await teller.post(
            "/v1/transactions/decisions:batch",
            json={
                "decisions": [
                    {
                        "transaction_id": audit_tx,
                        "decision": "ROLLBACK",
                        "producer_group": "bob-bank",
                    }
                ]
            },
        )
        assert statuses(refused) == [403]
        assert "audit" in refused.json()["results"][0]["error"]["message"]


async def test_a_replayed_batch_is_refused_whole_and_runs_nothing_again(
    acl_broker: BrokerApp,
) -> None:
    """The nonce is remembered before any item runs: halves without a msg_id (each would be a
    new transaction if it ran again) are stored once."""
    body = orjson.dumps({"halves": [half(), half(), half(topic="audit")]})
    path = "/v1/transactions:batch"
    headers = {**sign_headers(BOB, "POST", path, "", body), "content-type": "application/json"}
    first = await acl_broker.client.post(path, content=body, headers=headers)
    assert statuses(first) == [201, 201, 403]
    for _ in range(2):
        again = await acl_broker.client.post(path, content=body, headers=headers)
        assert (again.status_code, again.json()["error"]["code"]) == (401, "NONCE_REPLAYED")
    async with signed(acl_broker, OPERATOR) as operator:
        listed = await operator.get("/v1/transactions", params={"producer_group": "bob-bank"})
    assert len(listed.json()["transactions"]) == 2


async def test_a_replayed_batch_of_refused_items_is_refused_whole(acl_broker: BrokerApp) -> None:
    """A request whose every item was refused wrote nothing of its own: its nonce is kept all
    the same, and a replay is 401."""
    body = orjson.dumps({"messages": [{"topic": "audit", "body": "x"}]})
    path = "/v1/messages:batch"
    headers = {**sign_headers(BOB, "POST", path, "", body), "content-type": "application/json"}
    first = await acl_broker.client.post(path, content=body, headers=headers)
    assert statuses(first) == [403]
    again = await acl_broker.client.post(path, content=body, headers=headers)
    assert (again.status_code, again.json()["error"]["code"]) == (401, "NONCE_REPLAYED")
