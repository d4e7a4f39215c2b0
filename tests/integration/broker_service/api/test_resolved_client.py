"""The instance that committed, on both stores: a commit or rollback that names its ``client_id``
keeps it as the transaction's ``resolved_client`` and the message trace's COMMITTED /
ROLLED_BACK event names it; one that does not (curl) still says ``producer``; a malformed
``client_id`` is a 422 envelope, not a 500.  Concurrent commits (one group commit; on PostgreSQL
their updates are deferred and sent together) each keep their own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support import BrokerApp

GROUP = "bob-bank"


async def _half(broker: BrokerApp, n: int = 0) -> dict[str, str]:
    body = {"topic": "transfers", "producer_group": GROUP, "body": f"debit {n}"}
    response = await broker.client.post("/v1/transactions", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


async def _decided(broker: BrokerApp, msg_id: str) -> dict[str, Any]:
    response = await broker.client.get(f"/v1/messages/{msg_id}/trace")
    assert response.status_code == 200, response.text
    [event] = [e for e in response.json()["events"] if e["event"] in ("COMMITTED", "ROLLED_BACK")]
    return dict(event)


@pytest.mark.parametrize("verb", ["commit", "rollback"])
async def test_a_decision_naming_its_instance_is_traced_by_it(broker: BrokerApp, verb: str) -> None:
    await broker.topic("transfers", 2)
    half = await _half(broker)
    body = {"producer_group": GROUP, "client_id": "bob-host:4242:ab12"}
    done = await broker.client.post(f"/v1/transactions/{half['transaction_id']}/{verb}", json=body)
    assert done.status_code == 200, done.text
    event = await _decided(broker, half["msg_id"])
    assert event["by"] == "bob-host:4242:ab12"
    # the instance spoke REST (no gRPC profile of it): the trace names the protocol
    assert event["detail"] == {"resolved_by": "producer", "producer_group": GROUP, "via": "rest"}
    record = (await broker.client.get(f"/v1/transactions/{half['transaction_id']}")).json()
    assert (record["resolved_by"], record["resolved_client"]) == ("producer", "bob-host:4242:ab12")


async def test_a_commit_without_client_id_is_by_producer(broker: BrokerApp) -> None:
    await broker.topic("transfers", 2)
    half = await _half(broker)
    path = f"/v1/transactions/{half['transaction_id']}/commit"
    done = await broker.client.post(path, json={"producer_group": GROUP})
    assert done.status_code == 200, done.text
    event = await _decided(broker, half["msg_id"])
    assert (event["event"], event["by"]) == ("COMMITTED", "producer")
    record = (await broker.client.get(f"/v1/transactions/{half['transaction_id']}")).json()
    assert record["resolved_client"] is None


@pytest.mark.parametrize("client_id", ["", "x" * 256, "a\u0000b", 42, ["bob"]])
async def test_a_malformed_client_id_is_422(broker: BrokerApp, client_id: object) -> None:
    await broker.topic("transfers", 2)
    half = await _half(broker)
    path = f"/v1/transactions/{half['transaction_id']}/commit"
    refused = await broker.client.post(path, json={"producer_group": GROUP, "client_id": client_id})
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "INVALID_REQUEST"
    assert "client_id" in refused.json()["error"]["message"]
    record = (await broker.client.get(f"/v1/transactions/{half['transaction_id']}")).json()
    assert record["state"] == "PREPARED"  # nothing was decided


async def test_concurrent_commits_each_keep_their_own_instance(broker: BrokerApp) -> None:
    await broker.topic("transfers", 4)
    halves = [await _half(broker, n) for n in range(20)]

    async def commit(n: int, half: dict[str, str]) -> None:
        body = {"producer_group": GROUP, "client_id": f"instance-{n}"}
        path = f"/v1/transactions/{half['transaction_id']}/commit"
        done = await broker.client.post(path, json=body)
        assert done.status_code == 200, done.text

    await asyncio.gather(*(commit(n, half) for n, half in enumerate(halves)))
    for n, half in enumerate(halves):
        record = (await broker.client.get(f"/v1/transactions/{half['transaction_id']}")).json()
        assert record["resolved_client"] == f"instance-{n}"
