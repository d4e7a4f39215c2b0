"""Consumer lag on the console, on both stores: the groups list, a group's page and /metrics say
the same; a queue where the group has no offset yet counts from where a receive would start it
(an empty retry queue: 0; a new LAST_OFFSET group: caught up); "unknown" only when the store
could not be read, and then the page still renders."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.exc import OperationalError

from broker_service.console import lags
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.errors import NotReady
from broker_service.store.consumers import GroupPart
from tests.support import BrokerApp


async def _post(broker: BrokerApp, path: str, body: dict[str, Any]) -> Any:
    response = await broker.client.post(path, json=body)
    assert response.status_code in (200, 201), response.text
    return response.json()


async def _send(broker: BrokerApp, topic: str, n: int) -> None:
    for i in range(n):
        await _post(broker, f"/v1/topics/{topic}/messages", {"body": f"m{i}"})


async def _group(broker: BrokerApp, name: str, topic: str, **config: Any) -> None:
    await _post(broker, "/v1/consumer-groups", {"name": name, **config})
    await _post(broker, f"/v1/consumer-groups/{name}/subscriptions", {"topic": topic})


async def _page_lag(broker: BrokerApp, group: str) -> str:
    page = await broker.client.get(f"/console/consumer-groups/{group}")
    assert page.status_code == 200, page.text[:300]
    found = re.search(r'id="total-lag">([^<]*)<', page.text)
    assert found is not None
    return found.group(1)


async def _list_lags(broker: BrokerApp) -> dict[str, tuple[str, str]]:
    """Group -> (lag, retrying) as the groups list shows them."""
    page = await broker.client.get("/console/consumer-groups")
    assert page.status_code == 200, page.text[:300]
    rows = re.findall(
        r'<tr><td><a href="/console/consumer-groups/[^"]+">([^<]+)</a></td>\s*'
        r'<td class="num">([^<]*)</td><td class="num">([^<]*)</td>',
        page.text,
    )
    return {group: (lag, retrying) for group, lag, retrying in rows}


async def _metric_lags(broker: BrokerApp) -> dict[str, int]:
    """Group -> the sum of its halfmq_consumer_lag_messages series."""
    text = (await broker.client.get("/metrics")).text
    found: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "halfmq_consumer_lag_messages":
                group = sample.labels["group"]
                found[group] = found.get(group, 0) + int(sample.value)
    return found


async def _agree(broker: BrokerApp, expected: dict[str, int]) -> None:
    listed = await _list_lags(broker)
    metrics = await _metric_lags(broker)
    for group, lag in expected.items():
        assert await _page_lag(broker, group) == str(lag), group
        assert listed[group][0] == str(lag), (group, listed)
        assert metrics[group] == lag, (group, metrics)


async def test_both_pages_and_the_metrics_agree_and_a_new_group_is_caught_up(
    migrated_url: str,
) -> None:
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        await broker.topic("transfers", 2)
        await _send(broker, "transfers", 3)  # before any group
        await _group(broker, "late", "transfers")  # LAST_OFFSET: starts after these
        await _group(broker, "early", "transfers", consume_from="FIRST_OFFSET")
        # Neither has received: their retry queues have no offset, and are empty -- lag 0.
        page = (await broker.client.get("/console/consumer-groups/late")).text
        assert "unknown" not in page
        retry_row = re.search(r"<tr><td>%RETRY%late</td>.*?</tr>", page, re.S)
        assert retry_row is not None
        assert '<td class="num">-</td>' in retry_row.group(0)  # no committed offset yet
        assert '<td class="num">0</td><td class="num">0</td>' in retry_row.group(0)  # max, lag
        assert (await _list_lags(broker))["late"] == ("0", "0")
        await _agree(broker, {"late": 0, "early": 3})

        await _send(broker, "transfers", 2)
        await _agree(broker, {"late": 2, "early": 5})
        got = await _post(
            broker,
            "/v1/consumer-groups/early/receive",
            {"client_id": "c1", "max_messages": 100, "wait_seconds": 0},
        )
        handles = [m["receipt_handle"] for m in got["messages"]]
        assert len(handles) == 5
        await _agree(broker, {"late": 2, "early": 5})  # received, not acked: still to consume
        await _post(broker, "/v1/consumer-groups/early/ack", {"receipt_handles": handles})
        await _agree(broker, {"late": 2, "early": 0})


async def test_where_a_group_has_no_offset_the_lag_counts_from_where_it_would_start(
    migrated_url: str,
) -> None:
    """A broadcasting group has no offset before a member receives: LAST_OFFSET would start at
    the end (0), FIRST_OFFSET at the first message kept (all of them)."""
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        await broker.topic("transfers", 2)
        await _send(broker, "transfers", 4)
        await _group(broker, "fan-late", "transfers", message_model="BROADCASTING")
        await _group(
            broker, "fan-early", "transfers", message_model="BROADCASTING",
            consume_from="FIRST_OFFSET",
        )  # fmt: skip
        for group, lag in (("fan-late", "0"), ("fan-early", "4")):
            assert await _page_lag(broker, group) == lag
            assert (await _list_lags(broker))[group] == (lag, "0")
        # A member receives two and acks them: from then on its offsets count.
        got = await _post(
            broker,
            "/v1/consumer-groups/fan-early/receive",
            {"client_id": "m1", "max_messages": 2, "wait_seconds": 0},
        )
        handles = [m["receipt_handle"] for m in got["messages"]]
        await _post(broker, "/v1/consumer-groups/fan-early/ack", {"receipt_handles": handles})
        assert await _page_lag(broker, "fan-early") == "2"
        assert (await _list_lags(broker))["fan-early"] == ("2", "0")
        assert (await _metric_lags(broker))["fan-early"] == 2


def _store_down(*_: Any, **__: Any) -> Any:
    raise OperationalError("SELECT ...", {}, Exception("the store is down"))


async def test_a_store_that_cannot_answer_is_unknown_never_a_500(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        await broker.topic("transfers", 2)
        await _send(broker, "transfers", 2)
        await _group(broker, "late", "transfers")
        with monkeypatch.context() as patched:
            # Where the group would start in its retry queue cannot be read.
            patched.setattr(lags, "start_offset", _store_down)
            page = await broker.client.get("/console/consumer-groups/late")
            assert page.status_code == 200
            retry_row = re.search(r"<tr><td>%RETRY%late</td>.*?</tr>", page.text, re.S)
            assert retry_row is not None
            assert ">unknown<" in retry_row.group(0)
            assert await _page_lag(broker, "late") == "0"  # its topic's offsets were read
            assert (await _list_lags(broker))["late"] == ("0", "unknown")
        with monkeypatch.context() as patched:
            # Nothing of the groups can be read.
            patched.setattr(GroupPart, "all_groups_progress", _store_down)
            listed = await broker.client.get("/console/consumer-groups")
            assert listed.status_code == 200
            assert 'id="unreadable"' in listed.text
            assert "unknown" in listed.text

            async def view_down(*_: Any) -> Any:
                raise NotReady("the store failed: down", code="STORE_UNAVAILABLE")

            patched.setattr(ConsumerService, "view", view_down)
            page = await broker.client.get("/console/consumer-groups/late")
            assert page.status_code == 200
            assert 'id="unreadable"' in page.text
            assert await _page_lag(broker, "late") == "unknown"
        assert await _page_lag(broker, "late") == "0"  # and back once it answers
        assert (await _list_lags(broker))["late"] == ("0", "0")


async def test_the_group_page_shows_what_retention_expired_before_the_group_passed_it(
    migrated_url: str,
) -> None:
    async with BrokerApp.start(
        database_url=migrated_url,
        scheduler=False,
        retention_wait_for_export=False,
        retention_hard_limit_hours=72,
    ) as broker:
        await broker.topic("transfers", 1)
        await _group(broker, "slow", "transfers", consume_from="FIRST_OFFSET")
        await _send(broker, "transfers", 3)
        got = await _post(
            broker,
            "/v1/consumer-groups/slow/receive",
            {"client_id": "c1", "max_messages": 1, "wait_seconds": 0},
        )
        assert len(got["messages"]) == 1  # a position, nothing acked
        page = (await broker.client.get("/console/consumer-groups/slow")).text
        assert 'id="expired">0<' in page
        ahead = 73 * 3_600_000
        clock = broker.state.retention.clock
        broker.state.retention.clock = lambda: clock() + ahead
        purged = await _post(broker, "/v1/store/purge", {"dry_run": False})
        assert purged["expired"][0]["count"] == 3
        api = (await broker.client.get("/v1/consumer-groups/slow")).json()
        expired = sum(q["expired"] for q in api["queues"])
        assert expired == 3
        page = (await broker.client.get("/console/consumer-groups/slow")).text
        assert f'id="expired">{expired}<' in page
        row = re.search(r"<tr><td>transfers</td>.*?</tr>", page, re.S)
        assert row is not None
        assert row.group(0).endswith('<td class="num">3</td></tr>')  # the queue's own column
