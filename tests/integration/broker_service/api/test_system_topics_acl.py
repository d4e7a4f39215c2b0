"""System topics never read as themselves (issue 29, item 1): a half, an op record, a delayed,
retry or dead-letter copy is readable only by an account that may read its real topic (or an
admin), whichever topic, query or page it is reached through.

The attack as it was found: an account with ``defaultTopicPerm: SUB`` and ``othertopic=DENY``
read ``GET /v1/messages?topic=RMQ_SYS_TRANS_HALF_TOPIC`` -- every PREPARED half of the denied
topic, bodies included -- while ``?topic=othertopic`` was 403.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from broker_service.domain import names
from framework.signing import Credentials
from tests.support import BrokerApp, signed

ACL = """\
globalWhiteRemoteAddresses:
  - 127.0.0.1
accounts:
  - accessKey: snoop-key
    secretKey: snoop-secret-0123
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
    topicPerms:
      - othertopic=DENY
  - accessKey: reader-key
    secretKey: reader-secret-0123
    topicPerms:
      - othertopic=SUB
    groupPerms:
      - other-readers=SUB
  - accessKey: producer-key
    secretKey: producer-secret-0123
    topicPerms:
      - othertopic=PUB
    groupPerms:
      - other-producers=PUB
  - accessKey: stranger-key
    secretKey: stranger-secret-0123
  - accessKey: operator-key
    secretKey: operator-secret-0123
    admin: true
"""

SNOOP = Credentials("snoop-key", "snoop-secret-0123")  # SUB by default, othertopic denied
READER = Credentials("reader-key", "reader-secret-0123")  # SUB on othertopic and its group
PRODUCER = Credentials("producer-key", "producer-secret-0123")  # PUB on othertopic only
STRANGER = Credentials("stranger-key", "stranger-secret-0123")  # nothing at all
OPERATOR = Credentials("operator-key", "operator-secret-0123")  # admin

# What each account kind may read of othertopic, wherever its messages are copied.
MAY_READ_OTHERTOPIC = {"snoop": False, "reader": True, "producer": False, "stranger": False}
ACCOUNTS = {"snoop": SNOOP, "reader": READER, "producer": PRODUCER, "stranger": STRANGER}

GROUP = "other-readers"
SYSTEM_TOPICS = [
    names.HALF_TOPIC,
    names.OP_HALF_TOPIC,
    names.CHECK_MAX_TIME_TOPIC,
    names.SCHEDULE_TOPIC,
    f"{names.RETRY_PREFIX}{GROUP}",
    f"{names.DLQ_PREFIX}{GROUP}",
]
SECRET = "the-secret-amount-4711"  # in every body of othertopic


@dataclass
class Scene:
    broker: BrokerApp
    stored: dict[str, int]  # system topic -> how many messages it holds (read as the operator)
    ids: dict[str, set[str]]  # system topic -> the ids of its messages


@pytest.fixture
async def scene(migrated_url: str, tmp_path: Path) -> AsyncIterator[Scene]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    async with BrokerApp.start(
        database_url=migrated_url,
        acl_file=acl,
        message_delay_level="1s 2s 3s",
        transaction_check_interval_seconds=3600,
    ) as broker:
        async with signed(broker, OPERATOR) as admin:
            await _fill(admin)
            stored, ids = {}, {}
            for topic in SYSTEM_TOPICS:
                found = await admin.get("/v1/messages", params={"topic": topic, "limit": 1000})
                assert found.status_code == 200, found.text
                stored[topic] = len(found.json()["messages"])
                ids[topic] = {m["msg_id"] for m in found.json()["messages"]}
        # every kind of copy is there to leak (a parked half needs fifteen check rounds: none)
        assert all(stored[t] > 0 for t in SYSTEM_TOPICS if t != names.CHECK_MAX_TIME_TOPIC), stored
        yield Scene(broker, stored, ids)


async def _fill(admin: httpx.AsyncClient) -> None:
    """othertopic's messages in every system topic: PREPARED and rolled-back halves (op records),
    a committed delayed message still waiting, a retry copy waiting and one released into
    %RETRY%, a dead letter."""
    assert (await admin.post("/v1/topics", json={"name": "othertopic", "queues": 1})).is_success
    half = {"topic": "othertopic", "producer_group": "other-producers"}
    for n in range(3):
        sent = await admin.post("/v1/transactions", json={**half, "body": f"{SECRET} {n}"})
        assert sent.status_code == 201, sent.text
    rolled = (await admin.post("/v1/transactions", json={**half, "body": SECRET})).json()
    end = {"producer_group": "other-producers"}
    tid = rolled["transaction_id"]
    assert (await admin.post(f"/v1/transactions/{tid}/rollback", json=end)).is_success
    delayed = {**half, "body": f"{SECRET} later", "delay_level": 3}
    later = (await admin.post("/v1/transactions", json=delayed)).json()
    tid = later["transaction_id"]
    assert (await admin.post(f"/v1/transactions/{tid}/commit", json=end)).is_success
    group = {"name": GROUP, "consume_from": "FIRST_OFFSET", "max_reconsume_times": 1}
    assert (await admin.post("/v1/consumer-groups", json=group)).is_success
    subscription = {"topic": "othertopic"}
    assert await admin.post(f"/v1/consumer-groups/{GROUP}/subscriptions", json=subscription)
    for n in range(2):
        body = {"body": f"{SECRET} plain {n}"}
        assert (await admin.post("/v1/topics/othertopic/messages", json=body)).is_success
    receive = {"client_id": "c-1", "topic": "othertopic", "wait_seconds": 2, "max_messages": 2}
    got = (await admin.post(f"/v1/consumer-groups/{GROUP}/receive", json=receive)).json()
    assert len(got["messages"]) == 2, got
    first, second = (m["receipt_handle"] for m in got["messages"])
    # the first: retried at once (level 1), released into %RETRY% and failed again -> DLQ
    nack = {"receipt_handle": first, "delay_level": 1}
    assert (await admin.post(f"/v1/consumer-groups/{GROUP}/nack", json=nack)).is_success
    # the second: a retry copy waiting in SCHEDULE_TOPIC_XXXX (level 3)
    nack = {"receipt_handle": second, "delay_level": 3}
    assert (await admin.post(f"/v1/consumer-groups/{GROUP}/nack", json=nack)).is_success
    deadline = time.monotonic() + 20
    retry = {"client_id": "c-1", "wait_seconds": 1, "max_messages": 1}
    while time.monotonic() < deadline:
        again = (await admin.post(f"/v1/consumer-groups/{GROUP}/receive", json=retry)).json()
        if again["messages"]:
            handle = again["messages"][0]["receipt_handle"]
            nack = {"receipt_handle": handle}
            out = (await admin.post(f"/v1/consumer-groups/{GROUP}/nack", json=nack)).json()
            assert out["outcome"] == "DLQ", out
            return
    raise AssertionError("the retried message never came back through %RETRY%")


def _leaks(response: httpx.Response) -> list[str]:
    """Every othertopic body an answer shows."""
    return re.findall(re.escape(SECRET), response.text)


@pytest.mark.parametrize("kind", sorted(ACCOUNTS))
async def test_every_system_topic_reads_as_its_real_topic(scene: Scene, kind: str) -> None:
    async with signed(scene.broker, ACCOUNTS[kind]) as client:
        direct = await client.get("/v1/messages", params={"topic": "othertopic", "limit": 1000})
        assert (direct.status_code == 200) is MAY_READ_OTHERTOPIC[kind], direct.text
        for topic in SYSTEM_TOPICS:
            found = await client.get("/v1/messages", params={"topic": topic, "limit": 1000})
            assert found.status_code in (200, 403), (topic, found.text)
            if found.status_code == 403:
                assert found.json()["error"]["code"] == "PERMISSION_DENIED"
                continue
            messages = found.json()["messages"]
            if not MAY_READ_OTHERTOPIC[kind]:
                assert messages == [], (kind, topic, messages)
                assert _leaks(found) == [], (kind, topic)
            elif topic == names.OP_HALF_TOPIC:
                assert messages == [], "an op record names no topic: an admin's to read"
            else:
                assert len(messages) == scene.stored[topic], (kind, topic)
        dlq = await client.get(f"/v1/consumer-groups/{GROUP}/dlq")
        if dlq.status_code == 200:
            assert (len(dlq.json()["messages"]) == 1) is MAY_READ_OTHERTOPIC[kind], dlq.text
        else:
            assert dlq.status_code == 403, dlq.text
        by_key = await client.get("/v1/messages", params={"key": "x"})
        assert by_key.status_code == 403  # a query by key alone is an operator's


async def test_the_snoop_was_let_in_at_the_gate_and_read_nothing(scene: Scene) -> None:
    """The account's default SUB still opens the system topics at the gate (it is how RocketMQ
    judges a topic it does not name): what closes them is the per-message filter."""
    async with signed(scene.broker, SNOOP) as snoop:
        found = await snoop.get("/v1/messages", params={"topic": names.HALF_TOPIC, "limit": 1000})
        assert found.status_code == 200
        assert found.json()["messages"] == []
        assert scene.stored[names.HALF_TOPIC] >= 4  # the operator sees the halves it hides
        dlq = await snoop.get(f"/v1/consumer-groups/{GROUP}/dlq")
        assert dlq.status_code == 200
        assert dlq.json()["messages"] == []


async def _console(broker: BrokerApp, who: Credentials) -> httpx.AsyncClient:
    client = httpx.AsyncClient(transport=broker.client._transport, base_url="http://broker")
    page = await client.get("/console/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    form = {
        "csrf_token": token.group(1),
        "access_key": who.access_key,
        "secret_key": who.secret_key,
    }
    assert (await client.post("/console/login", data=form)).status_code == 303
    return client


async def test_the_consoles_search_and_dead_letters_hide_what_the_account_may_not_read(
    scene: Scene,
) -> None:
    for who, may in ((SNOOP, False), (READER, True), (OPERATOR, True)):
        client = await _console(scene.broker, who)
        try:
            for topic in SYSTEM_TOPICS:
                page = await client.get("/console/messages", params={"topic": topic})
                if page.status_code == 403:
                    assert who is not OPERATOR
                    continue
                assert page.status_code == 200, (who.access_key, topic, page.text[:300])
                shown = {i for i in scene.ids[topic] if i in page.text}
                if not may:
                    assert shown == set(), (who.access_key, topic)
                    assert _leaks(page) == [], (who.access_key, topic)
                elif topic != names.OP_HALF_TOPIC or who is OPERATOR:
                    assert shown == scene.ids[topic], (who.access_key, topic)
            dead = await client.get(f"/console/consumer-groups/{GROUP}/dlq")
            assert dead.status_code == 200, dead.text  # SUB on the group: snoop's by default
            (dead_id,) = scene.ids[f"{names.DLQ_PREFIX}{GROUP}"]
            assert (dead_id in dead.text) is may, who.access_key
        finally:
            await client.aclose()
