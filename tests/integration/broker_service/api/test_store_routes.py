"""``GET /v1/store/stats`` and ``POST /v1/store/purge`` (retention, issue 15) on both stores: the
stats follow what is stored, a dry run deletes nothing, a purge deletes what retention lets go and
counts into the metrics, another broker's purge is 409, and both routes are an admin's."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from broker_service.api.schemas.common import rfc3339
from broker_service.domain.clock import now_ms
from broker_service.domain.retention.model import LEASE, TABLES
from framework.signing import Credentials
from tests.support import BrokerApp, signed

HOUR = 3_600_000
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
async def broker(migrated_url: str) -> AsyncIterator[BrokerApp]:
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, retention_wait_for_export=False
    ) as app:
        yield app


def run_ahead(broker: BrokerApp, hours: float) -> None:
    """The broker's retention sees the time ``hours`` from now: what is stored now is old."""
    ahead = int(hours * HOUR)
    broker.state.retention.clock = lambda: now_ms() + ahead


async def send(broker: BrokerApp, topic: str, n: int) -> list[str]:
    ids = [f"{topic}-{i}" for i in range(n)]
    body = {"messages": [{"body": i, "msg_id": i, "keys": ["k"]} for i in ids]}
    response = await broker.client.post(f"/v1/topics/{topic}/messages:batch", json=body)
    assert response.status_code == 201, response.text
    return ids


async def subscribe(broker: BrokerApp, group: str, topic: str) -> None:
    body = {"name": group, "consume_from": "FIRST_OFFSET"}
    response = await broker.client.post("/v1/consumer-groups", json=body)
    assert response.status_code in (200, 201), response.text
    response = await broker.client.post(
        f"/v1/consumer-groups/{group}/subscriptions", json={"topic": topic}
    )
    assert response.status_code in (200, 201), response.text


async def stats(broker: BrokerApp) -> dict[str, Any]:
    response = await broker.client.get("/v1/store/stats")
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def purge(broker: BrokerApp, body: dict[str, Any] | None) -> dict[str, Any]:
    response = await broker.client.post("/v1/store/purge", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert set(answer) == {
        "dry_run", "purged", "expired", "held", "complete", "export_held", "seconds",
    }  # fmt: skip
    return answer


async def metric(broker: BrokerApp, name: str, **labels: str) -> float:
    text = (await broker.client.get("/metrics")).text
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_stats_say_what_the_store_holds(broker: BrokerApp, migrated_url: str) -> None:
    empty = await stats(broker)
    assert empty["dialect"] == ("sqlite" if migrated_url.startswith("sqlite") else "postgresql")
    assert empty["size_bytes"] > 0
    assert empty["free_bytes"] >= 0
    assert empty["rows"] == dict.fromkeys(TABLES, 0)
    assert empty["oldest_message_at"] is None
    assert empty["oldest_message_age_seconds"] is None
    assert empty["export_watermark"] is None
    assert empty["expired"] == {}
    assert empty["retention"] == {
        "retention_hours": 48.0,
        "dead_letter_retention_hours": 168.0,
        "hard_limit_hours": None,
        "wait_for_export": False,
    }

    await broker.topic("t", queues=2)
    before = now_ms()
    await send(broker, "t", 3)
    full = await stats(broker)
    assert full["rows"]["messages"] == 3
    assert full["rows"]["message_keys"] == 3
    assert RFC3339.match(full["oldest_message_at"]), full
    assert 0 <= full["oldest_message_age_seconds"] < 60
    assert full["oldest_message_at"] >= (rfc3339(before - 1000) or "")

    # The purge's gauges read the size and the oldest message without counting every table.
    service = broker.state.retention
    counted, uncounted = await service.stats(), await service.stats(count_rows=False)
    assert counted.rows["messages"] == 3
    assert uncounted.rows == {}
    assert uncounted.oldest_message_at == counted.oldest_message_at
    assert uncounted.size_bytes == counted.size_bytes


async def test_the_settings_show_in_the_stats(migrated_url: str) -> None:
    async with BrokerApp.start(
        database_url=migrated_url,
        scheduler=False,
        retention_hours=12,
        dead_letter_retention_hours=24,
        retention_hard_limit_hours=36,
    ) as broker:
        assert (await stats(broker))["retention"] == {
            "retention_hours": 12.0,
            "dead_letter_retention_hours": 24.0,
            "hard_limit_hours": 36.0,
            "wait_for_export": True,
        }


async def test_a_dry_run_deletes_nothing_and_says_what_would_go(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    ids = await send(broker, "t", 4)
    run_ahead(broker, 49)

    for body in (None, {}, {"dry_run": True}):  # a dry run unless asked otherwise
        report = await purge(broker, body)
        assert report["dry_run"] is True
        assert report["purged"]["messages"] == 4
        assert report["complete"] is True
        assert report["export_held"] is False

    assert (await stats(broker))["rows"]["messages"] == 4
    assert (await broker.client.get(f"/v1/messages/{ids[0]}")).status_code == 200
    assert await metric(broker, "halfmq_retention_purged_rows_total", table="messages") == 0


async def test_a_purge_deletes_old_messages_and_counts_them(migrated_url: str) -> None:
    # A retention of about a second, and the real clock: the settings as an operator gives them.
    async with BrokerApp.start(
        database_url=migrated_url,
        scheduler=False,
        retention_wait_for_export=False,
        retention_hours=0.0003,
    ) as broker:
        await broker.topic("t", queues=2)
        ids = await send(broker, "t", 5)
        young = await purge(broker, {"dry_run": False})
        assert young["purged"]["messages"] == 0  # not a second old yet
        await asyncio.sleep(1.5)

        report = await purge(broker, {"dry_run": False})
        assert report["dry_run"] is False
        assert report["purged"]["messages"] == 5
        assert report["purged"]["message_keys"] == 5
        assert report["complete"] is True
        assert report["seconds"] >= 0

        after = await stats(broker)
        assert after["rows"]["messages"] == 0
        assert after["rows"]["message_keys"] == 0
        assert after["rows"]["purged_ids"] == 5
        assert after["oldest_message_at"] is None
        gone = await broker.client.get(f"/v1/messages/{ids[0]}")
        assert gone.status_code == 404
        assert gone.json()["error"]["code"] == "MESSAGE_EXPIRED"

        purged = "halfmq_retention_purged_rows_total"
        assert await metric(broker, purged, table="messages") == 5
        assert await metric(broker, purged, table="message_keys") == 5
        rounds = "halfmq_retention_rounds_total"
        assert await metric(broker, rounds, result="purged") == 1
        assert await metric(broker, rounds, result="idle") == 1  # the young round


async def test_a_group_that_has_not_passed_old_messages_keeps_them(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await subscribe(broker, "g", "t")
    await send(broker, "t", 3)
    run_ahead(broker, 49)

    for dry_run in (True, False):
        report = await purge(broker, {"dry_run": dry_run})
        assert report["purged"]["messages"] == 0
        assert report["held"] == [
            {"topic": "t", "queue_id": 0, "group": "g", "client_id": "", "offset": 0}
        ]
        assert report["expired"] == []
    assert (await stats(broker))["rows"]["messages"] == 3


async def test_past_the_hard_limit_messages_expire_on_the_group(migrated_url: str) -> None:
    async with BrokerApp.start(
        database_url=migrated_url,
        scheduler=False,
        retention_wait_for_export=False,
        retention_hard_limit_hours=72,
    ) as broker:
        await broker.topic("t", queues=1)
        await subscribe(broker, "g", "t")
        await send(broker, "t", 3)
        received = await broker.client.post(
            "/v1/consumer-groups/g/receive",
            json={"client_id": "c1", "max_messages": 1, "wait_seconds": 0},
        )
        assert received.status_code == 200, received.text
        assert len(received.json()["messages"]) == 1  # the group has a position, not acked
        run_ahead(broker, 73)

        dry = await purge(broker, {"dry_run": True})
        expiry = {"group": "g", "client_id": "", "topic": "t", "queue_id": 0, "count": 3}
        assert dry["expired"] == [expiry]
        assert dry["purged"]["messages"] == 3
        assert (await stats(broker))["expired"] == {}

        report = await purge(broker, {"dry_run": False})
        assert report["expired"] == [expiry]
        assert report["purged"]["messages"] == 3
        assert (await stats(broker))["expired"] == {"g": 3}
        expired = "halfmq_retention_expired_messages_total"
        assert await metric(broker, expired, group="g") == 3


async def test_another_broker_purging_is_409(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await send(broker, "t", 2)
    run_ahead(broker, 49)
    now = broker.state.retention.clock()  # the lease's times are the purging broker's
    store = broker.state.retention.store
    held = await store.write(lambda tx: tx.hold_lease(LEASE, "another-broker", now, now + HOUR))
    assert held

    refused = await broker.client.post("/v1/store/purge", json={"dry_run": False})
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "PURGE_RUNNING"
    assert error["message"]
    assert isinstance(error["detail"], dict)
    assert await metric(broker, "halfmq_retention_purged_rows_total", table="messages") == 0

    dry = await purge(broker, {"dry_run": True})  # a dry run changes nothing: no lease needed
    assert dry["purged"]["messages"] == 2
    assert (await stats(broker))["rows"]["messages"] == 2


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"dry_run": False, "max_rows": 10}, id="extra-field"),
        pytest.param({"dry_run": "false"}, id="string"),
        pytest.param({"dry_run": 0}, id="number"),
        pytest.param({"dry_run": None}, id="null"),
        pytest.param([], id="not-an-object"),
    ],
)
async def test_a_bad_purge_body_is_422_and_purges_nothing(broker: BrokerApp, body: Any) -> None:
    await broker.topic("t", queues=1)
    await send(broker, "t", 2)
    run_ahead(broker, 49)
    response = await broker.client.post("/v1/store/purge", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "INVALID_REQUEST"
    assert (await stats(broker))["rows"]["messages"] == 2


# -- the ACL ---------------------------------------------------------------------------------------

ACL = """\
globalWhiteRemoteAddresses:
  - 127.0.0.1
accounts:
  - accessKey: operator-key
    secretKey: operator-secret
    admin: true
  - accessKey: bob-bank-key
    secretKey: bob-bank-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""
OPERATOR = Credentials("operator-key", "operator-secret")
BOB = Credentials("bob-bank-key", "bob-bank-secret")


async def test_the_store_routes_are_an_admins(migrated_url: str, tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL)
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, acl_file=acl_file
    ) as broker:
        calls = [("GET", "/v1/store/stats", None), ("POST", "/v1/store/purge", {"dry_run": True})]
        async with signed(broker, OPERATOR) as operator, signed(broker, BOB) as bob:
            for method, path, body in calls:
                unsigned = await broker.client.request(method, path, json=body)
                assert unsigned.status_code == 401, unsigned.text
                assert unsigned.json()["error"]["code"] == "SIGNATURE_MISSING"
                refused = await bob.request(method, path, json=body)
                assert refused.status_code == 403, refused.text
                assert refused.json()["error"]["code"] == "PERMISSION_DENIED"
                allowed = await operator.request(method, path, json=body)
                assert allowed.status_code == 200, allowed.text
