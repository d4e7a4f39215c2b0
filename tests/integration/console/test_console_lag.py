"""Consumer lag on both stores: the console's groups list and group page, ``GET
/v1/consumer-groups/{group}`` and /metrics say the same, by the domain's one rule -- a queue where
the group has no offset yet counts from where a receive would start it (an empty retry queue: 0;
a new LAST_OFFSET group: caught up; TIMESTAMP: from its time); "unknown" only on the console, only
when the store could not be read, and then the page still renders."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.errors import NotReady
from broker_service.store.consumers import GroupPart
from broker_service.store.progress import ProgressPart
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
        await _group(
            broker, "since", "transfers", message_model="BROADCASTING",
            consume_from="TIMESTAMP", consume_timestamp=0,
        )  # fmt: skip
        with monkeypatch.context() as patched:
            # Where the TIMESTAMP group would start cannot be read: the lag is one read, so
            # nothing of it is shown rather than a part of it.
            patched.setattr(ProgressPart, "first_offset_since", _store_down)
            listed = await broker.client.get("/console/consumer-groups")
            assert listed.status_code == 200
            assert 'id="unreadable"' in listed.text
            page = await broker.client.get("/console/consumer-groups/since")
            assert page.status_code == 200
            assert 'id="unreadable"' in page.text
            assert await _page_lag(broker, "since") == "unknown"
            assert await _page_lag(broker, "late") == "0"  # its lag needs no such read
            scraped = (await broker.client.get("/metrics")).text
            assert "halfmq_consumer_lag_readable 0.0" in scraped
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
        assert await _page_lag(broker, "since") == "2"
        assert (await _list_lags(broker))["late"] == ("0", "0")
        assert (await _list_lags(broker))["since"] == ("2", "0")


# -- the API, /metrics and the console: one rule ---------------------------------------------------

Lags = dict[tuple[str, int], int]  # (topic, queue) -> lag


async def _api_lags(broker: BrokerApp, group: str) -> tuple[Lags, int]:
    """The group's rows in ``GET /v1/consumer-groups/{group}`` (one per queue: no member has
    received yet) and its total."""
    response = await broker.client.get(f"/v1/consumer-groups/{group}")
    assert response.status_code == 200, response.text
    view = response.json()
    queues = view["queues"]
    assert all(q["client_id"] is None for q in queues), "one row per queue"
    return {(q["topic"], q["queue_id"]): q["lag"] for q in queues}, view["lag"]


async def _metric_series(broker: BrokerApp, group: str) -> tuple[Lags, int]:
    """The group's halfmq_consumer_lag_messages series, and its halfmq_retry_messages."""
    text_ = (await broker.client.get("/metrics")).text
    found: Lags = {}
    retrying = -1
    for family in text_string_to_metric_families(text_):
        for sample in family.samples:
            if sample.labels.get("group") != group:
                continue
            if sample.name == "halfmq_consumer_lag_messages":
                found[(sample.labels["topic"], int(sample.labels["queue"]))] = int(sample.value)
            elif sample.name == "halfmq_retry_messages":
                retrying = int(sample.value)
    return found, retrying


async def _page_rows(broker: BrokerApp, group: str) -> Lags:
    page = (await broker.client.get(f"/console/consumer-groups/{group}")).text
    rows = re.findall(
        r'<tr><td>([^<]+)</td><td class="num">(\d+)</td><td class="mono">[^<]*</td>\s*'
        r'<td class="num">[^<]*</td><td class="num">\d+</td>\s*<td class="num">([^<]*)</td>',
        page,
    )
    return {(topic, int(queue)): int(lag) for topic, queue, lag in rows}


async def _all_agree(broker: BrokerApp, group: str, expected: Lags, retry: int) -> None:
    """Per queue: the API's rows, the /metrics series and the page's rows are ``expected``
    (subscribed topics) and ``retry`` (its retry queue); the totals follow."""
    retry_key = (f"%RETRY%{group}", 0)
    api, api_total = await _api_lags(broker, group)
    assert api == {**expected, retry_key: retry}, ("api", group, api)
    assert api_total == sum(expected.values()), ("api total: the subscribed topics", group)
    metrics, retrying = await _metric_series(broker, group)
    assert metrics == expected, ("metrics", group, metrics)
    assert retrying == retry, ("metrics retry", group, retrying)
    assert await _page_rows(broker, group) == {**expected, retry_key: retry}, ("page", group)
    assert await _page_lag(broker, group) == str(sum(expected.values())), ("page total", group)
    listed = (await _list_lags(broker))[group]
    assert listed == (str(sum(expected.values())), str(retry)), ("list", group, listed)


async def test_the_api_the_metrics_and_the_console_count_a_missing_offset_alike(
    migrated_url: str,
) -> None:
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        await broker.topic("transfers", 2)
        await _send(broker, "transfers", 6)  # 3 a queue, before any group
        await asyncio.sleep(0.02)
        cut = int(time.time() * 1000)
        await asyncio.sleep(0.02)
        await _send(broker, "transfers", 4)  # and 2 a queue after the cut
        # Broadcasting, LAST_OFFSET, before any member receives: would start at the end.
        await _group(broker, "fan-late", "transfers", message_model="BROADCASTING")
        # Clustering, FIRST_OFFSET, with a backlog: offsets from its subscription on.
        await _group(broker, "early", "transfers", consume_from="FIRST_OFFSET")
        # TIMESTAMP, broadcasting (no offset until a member receives) and clustering.
        await _group(
            broker, "fan-since", "transfers", message_model="BROADCASTING",
            consume_from="TIMESTAMP", consume_timestamp=cut,
        )  # fmt: skip
        await _group(broker, "since", "transfers", consume_from="TIMESTAMP", consume_timestamp=cut)
        # A retry queue whose copies retention took (min = max offset): empty, not 4.
        engine = create_engine(migrated_url)
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE queues SET min_offset = 4, next_offset = 4 WHERE topic = :topic"),
                {"topic": "%RETRY%early"},
            )
        engine.dispose()

        caught_up = {("transfers", 0): 0, ("transfers", 1): 0}
        everything = {("transfers", 0): 5, ("transfers", 1): 5}
        since_cut = {("transfers", 0): 2, ("transfers", 1): 2}
        await _all_agree(broker, "fan-late", caught_up, 0)
        await _all_agree(broker, "early", everything, 0)
        await _all_agree(broker, "fan-since", since_cut, 0)
        await _all_agree(broker, "since", since_cut, 0)

        await _send(broker, "transfers", 2)  # one more a queue
        # A group with no offset would still start at the end: caught up whatever comes.
        await _all_agree(broker, "fan-late", caught_up, 0)
        await _all_agree(broker, "early", {k: v + 1 for k, v in everything.items()}, 0)
        await _all_agree(broker, "fan-since", {k: v + 1 for k, v in since_cut.items()}, 0)
        await _all_agree(broker, "since", {k: v + 1 for k, v in since_cut.items()}, 0)
