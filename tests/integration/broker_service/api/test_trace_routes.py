"""``POST /v1/trace`` (the clients' reports) and ``GET /v1/transactions/{id}/checks`` over the real
app, on both stores: recorded and refused per event, malformed input 422, the ACL's per-event
needs, the operator's access key in the trace, and the ``trace`` setting off."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support import BOB, OPERATOR, SMITH, BrokerApp, signed

AT = "2026-11-25T06:00:00.125Z"
# A malformed report is refused as it is read, before any store is asked: one store is enough
# (the rest of this module runs on SQLite and PostgreSQL).
ONE_STORE = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)


def event(
    msg_id: str, kind: str = "PUB", group: str = "bob-bank", **changes: Any
) -> dict[str, Any]:
    return {"msg_id": msg_id, "type": kind, "topic": "transfers", "group": group,
            "client_id": f"{group}-1", "at": AT, "cost_ms": 2.5, "status": "OK", **changes}  # fmt: skip


async def _send(client: httpx.AsyncClient, topic: str = "transfers") -> str:
    sent = await client.post(f"/v1/topics/{topic}/messages", json={"body": "x"})
    assert sent.status_code == 201, sent.text
    return str(sent.json()["msg_id"])


async def _events(client: httpx.AsyncClient, msg_id: str) -> list[dict[str, Any]]:
    answer = await client.get(f"/v1/messages/{msg_id}/trace")
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


async def test_reports_are_recorded_and_an_unknown_message_refused_by_its_index(
    broker: BrokerApp,
) -> None:
    await broker.topic("transfers", queues=1)
    msg_id = await _send(broker.client)
    answer = await broker.client.post("/v1/trace", json={"events": [
        event(msg_id), event("no-such-message"), event(msg_id, "SUB", "smith-bank", status="RETRY"),
    ]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.json()["recorded"] == 2
    (refused,) = answer.json()["refused"]
    assert refused["index"] == 1
    assert refused["error"]["code"] == "MESSAGE_NOT_FOUND"

    reported = [e for e in await _events(broker.client, msg_id) if e["event"].startswith("CLIENT")]
    assert [(e["event"], e["by"], e["at"]) for e in reported] == [
        ("CLIENT_PUB", "bob-bank-1", AT),
        ("CLIENT_SUB", "smith-bank-1", AT),
    ]
    assert reported[1]["detail"] == {"group": "smith-bank", "topic": "transfers",
                                     "cost_ms": 2.5, "status": "RETRY"}  # fmt: skip


@pytest.mark.parametrize(
    "body",
    [
        {"events": []},
        {"events": [event("m")] * 1001},
        {"events": [event("m", cost_ms=-1)]},
        {"events": [event("m", cost_ms="2")]},
        {"events": [event("m", status="MAYBE")]},
        {"events": [event("m", type="ACK")]},
        {"events": [event("m", at="yesterday")]},
        {"events": [event("")]},
        {"events": [{**event("m"), "extra": 1}]},
        {"events": [{k: v for k, v in event("m").items() if k != "client_id"}]},
        {},
        [],
    ],
)
@ONE_STORE
async def test_a_malformed_report_is_422_with_the_envelope(broker: BrokerApp, body: Any) -> None:
    answer = await broker.client.post("/v1/trace", json=body)
    assert answer.status_code == 422, answer.text
    assert "code" in answer.json()["error"]


async def test_the_check_audit_of_an_unknown_transaction_is_404(broker: BrokerApp) -> None:
    answer = await broker.client.get("/v1/transactions/no-such-tx/checks")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "TRANSACTION_NOT_FOUND"


async def test_the_new_routes_are_in_the_openapi_with_their_errors(broker: BrokerApp) -> None:
    paths = (await broker.client.get("/openapi.json")).json()["paths"]
    assert {"200", "422"} <= set(paths["/v1/trace"]["post"]["responses"])
    assert {"200", "404"} <= set(
        paths["/v1/transactions/{transaction_id}/checks"]["get"]["responses"]
    )


async def test_with_trace_off_reports_are_answered_and_not_kept(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, trace=False) as broker:
        await broker.topic("transfers", queues=1)
        msg_id = await _send(broker.client)
        answer = await broker.client.post("/v1/trace", json={"events": [event(msg_id)]})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"recorded": 0, "refused": []}
        assert [e["event"] for e in await _events(broker.client, msg_id)] == ["SENT"]


# -- with the ACL on ----------------------------------------------------------------------------


async def test_an_account_writes_only_the_trace_of_what_it_could_send_or_receive(
    acl_app: BrokerApp,
) -> None:
    async with signed(acl_app, OPERATOR) as operator, signed(acl_app, BOB) as bob, \
            signed(acl_app, SMITH) as smith:  # fmt: skip
        for topic in ("transfers", "audit"):
            created = await operator.post("/v1/topics", json={"name": topic, "queues": 1})
            assert created.status_code == 201, created.text
        half = await bob.post("/v1/transactions", json={
            "topic": "transfers", "producer_group": "bob-bank", "body": "x"})  # fmt: skip
        assert half.status_code == 201, half.text
        mine, txid = half.json()["msg_id"], half.json()["transaction_id"]
        audit_msg = await _send(operator, "audit")

        answer = await bob.post("/v1/trace", json={"events": [
            event(mine), event(audit_msg), event(mine, "SUB", "smith-bank"),
        ]})  # fmt: skip
        assert answer.status_code == 200, answer.text
        assert answer.json()["recorded"] == 1
        refusals = {r["index"]: r["error"]["code"] for r in answer.json()["refused"]}
        assert refusals == {1: "PERMISSION_DENIED", 2: "PERMISSION_DENIED"}
        sub = await smith.post("/v1/trace", json={"events": [event(mine, "SUB", "smith-bank")]})
        assert sub.json() == {"recorded": 1, "refused": []}
        unsigned = await acl_app.client.post("/v1/trace", json={"events": [event(mine)]})
        assert unsigned.status_code == 401

        audit = await bob.get(f"/v1/transactions/{txid}/checks")
        assert audit.status_code == 200, audit.text
        assert (await smith.get(f"/v1/transactions/{txid}/checks")).status_code == 403

        committed = await operator.post(f"/v1/transactions/{txid}/commit", json={})
        assert committed.status_code == 200, committed.text
        events = [(e["event"], e["by"]) for e in await _events(operator, mine)]
        assert ("OPERATOR_COMMIT", "operator-key") in events
        assert ("COMMITTED", "operator") in events
        assert [e for e, _ in events].count("CLIENT_PUB") == 1
