"""The metrics of issue 16 on a real broker (in process, both stores): request latency per route
template, store commit latency, consumer lag per group, topic and queue (absent, never 0, when the
store cannot be read), DLQ depth, the `metrics` setting, and the Grafana dashboard checked against
the families a real broker exports."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text

from broker_service.domain.consumers.backlog import queue_lag
from broker_service.domain.ports.consumers import GroupQueueProgress
from tests.support import BrokerApp

DOCS = Path(__file__).resolve().parents[3] / "docs"
DASHBOARD = DOCS / "grafana" / "halfmq-dashboard.json"
OBSERVABILITY = DOCS / "observability.md"
HISTOGRAMS = {"halfmq_request_seconds", "halfmq_store_commit_seconds", "halfmq_check_seconds"}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(broker: BrokerApp) -> tuple[dict[str, str], Samples]:
    """The families (name -> type) and the samples ((name, labels) -> value) of one scrape."""
    response = await broker.client.get("/metrics")
    assert response.status_code == 200, response.text
    families: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        families[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return families, samples


def series(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return {key: v for (n, key), v in samples.items() if n == name and wanted <= key}


def value(samples: Samples, name: str, **labels: str) -> float:
    found = series(samples, name, **labels)
    assert len(found) == 1, (name, labels, found)
    return next(iter(found.values()))


async def post(broker: BrokerApp, path: str, body: dict[str, Any], status: int = 200) -> Any:
    response = await broker.client.post(path, json=body)
    assert response.status_code in (status, 201), response.text
    return response.json()


async def send(broker: BrokerApp, topic: str, n: int) -> Counter[int]:
    """Send ``n`` messages; how many went to each queue."""
    per_queue: Counter[int] = Counter()
    for i in range(n):
        receipt = await post(broker, f"/v1/topics/{topic}/messages", {"body": f"m{i}"}, 201)
        per_queue[receipt["queue_id"]] += 1
    return per_queue


async def group(broker: BrokerApp, name: str, topic: str, **config: Any) -> None:
    await post(broker, "/v1/consumer-groups", {"name": name, **config}, 201)
    await post(broker, f"/v1/consumer-groups/{name}/subscriptions", {"topic": topic}, 201)


async def receive(broker: BrokerApp, name: str, client_id: str) -> list[dict[str, Any]]:
    answer = await post(
        broker, f"/v1/consumer-groups/{name}/receive", {"client_id": client_id, "max_messages": 100}
    )
    messages: list[dict[str, Any]] = answer["messages"]
    return messages


async def ack(broker: BrokerApp, name: str, messages: list[dict[str, Any]]) -> None:
    handles = [m["receipt_handle"] for m in messages]
    await post(broker, f"/v1/consumer-groups/{name}/ack", {"receipt_handles": handles})


def lags(samples: Samples, name: str, topic: str) -> dict[int, float]:
    return {
        int(dict(key)["queue"]): v
        for key, v in series(
            samples, "halfmq_consumer_lag_messages", group=name, topic=topic
        ).items()
    }


async def test_request_latency_is_labelled_by_route_template(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, max_message_bytes=1000) as broker:
        await broker.topic("orders-7f3a", queues=2)
        await send(broker, "orders-7f3a", 3)
        assert (await broker.client.get("/v1/no/such/path")).status_code == 404
        # Refused by the body limit before the router: still its route's template.
        too_big = await broker.client.post(
            "/v1/topics/orders-7f3a/messages", content=b"x" * 200_000
        )
        assert too_big.status_code == 413
        _, samples = await scrape(broker)
        sends = "/v1/topics/{topic}/messages"
        count = "halfmq_request_seconds_count"
        assert value(samples, count, method="POST", route=sends, status_class="2xx") == 3
        assert value(samples, count, method="POST", route=sends, status_class="4xx") == 1
        assert value(samples, count, route="unmatched", status_class="4xx") == 1
        assert value(samples, count, method="POST", route="/v1/topics", status_class="2xx") == 1
        routes = {dict(key)["route"] for key in series(samples, count)}
        assert not any("orders-7f3a" in route or "no/such" in route for route in routes), routes
        assert value(samples, "halfmq_request_seconds_sum", route=sends, status_class="2xx") > 0


async def test_store_commits_are_timed_and_sized(broker: BrokerApp) -> None:
    await broker.topic("t")
    _, before = await scrape(broker)
    await send(broker, "t", 4)
    _, after = await scrape(broker)
    commits = value(after, "halfmq_store_commit_seconds_count")
    assert commits >= value(before, "halfmq_store_commit_seconds_count") + 4  # one per send here
    assert value(after, "halfmq_store_commit_seconds_sum") > 0
    assert value(after, "halfmq_store_commit_units_sum") >= 4 + value(
        before, "halfmq_store_commit_units_sum"
    )


async def test_lag_per_queue_equals_the_backlog_and_drops_after_ack(broker: BrokerApp) -> None:
    await broker.topic("t", queues=3)
    await group(broker, "g", "t", consume_from="FIRST_OFFSET")
    await group(broker, "idle", "t", consume_from="FIRST_OFFSET")
    per_queue = await send(broker, "t", 7)
    _, samples = await scrape(broker)
    assert value(samples, "halfmq_consumer_lag_readable") == 1
    expected = {q: float(per_queue.get(q, 0)) for q in range(3)}
    assert lags(samples, "g", "t") == expected
    got = await receive(broker, "g", "c1")
    assert len(got) == 7
    _, samples = await scrape(broker)
    assert lags(samples, "g", "t") == expected, "received but not acked: still behind"
    await ack(broker, "g", got)
    _, samples = await scrape(broker)
    assert lags(samples, "g", "t") == {0: 0.0, 1: 0.0, 2: 0.0}
    assert lags(samples, "idle", "t") == expected, "another group's lag is its own"
    assert value(samples, "halfmq_dlq_messages", group="g") == 0
    assert value(samples, "halfmq_retry_messages", group="g") == 0


async def test_broadcasting_lag_is_the_least_advanced_live_member(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await group(broker, "b", "t", consume_from="FIRST_OFFSET", message_model="BROADCASTING")
    await send(broker, "t", 4)
    fast = await receive(broker, "b", "fast")
    slow = await receive(broker, "b", "slow")
    assert len(fast) == len(slow) == 4
    await ack(broker, "b", fast)
    _, samples = await scrape(broker)
    assert lags(samples, "b", "t") == {0: 4.0}
    await ack(broker, "b", slow)
    _, samples = await scrape(broker)
    assert lags(samples, "b", "t") == {0: 0.0}


def row(client: str | None, committed: int | None, seen: int | None) -> GroupQueueProgress:
    return GroupQueueProgress("b", True, "t", 0, 10, client, committed, seen)


def test_broadcasting_lag_ignores_members_no_longer_live() -> None:
    live_since = 1000
    gone, behind, ahead = row("gone", 0, 10), row("behind", 6, 2000), row("ahead", 9, 3000)
    assert queue_lag([gone, behind, ahead], live_since, None) == 4
    assert queue_lag([gone], live_since, None) == 10, "no live member: every recorded one counts"
    no_member = [row(None, None, None)]
    assert queue_lag(no_member, live_since, 7) == 3, "no member yet: from where it would start"
    assert queue_lag(no_member, live_since, None) is None, "nor known where: unknown, never 0"


async def test_message_past_max_reconsume_times_counts_in_the_dlq(broker: BrokerApp) -> None:
    await broker.topic("t", queues=1)
    await group(broker, "g", "t", consume_from="FIRST_OFFSET", max_reconsume_times=0)
    await send(broker, "t", 2)
    got = await receive(broker, "g", "c1")
    nacked = await post(
        broker, "/v1/consumer-groups/g/nack", {"receipt_handle": got[0]["receipt_handle"]}
    )
    assert nacked["outcome"] == "DLQ"
    await ack(broker, "g", got[1:])
    _, samples = await scrape(broker)
    assert value(samples, "halfmq_dlq_messages", group="g") == 1
    assert lags(samples, "g", "t") == {0: 0.0}
    resent = await broker.client.post(f"/v1/consumer-groups/g/dlq/{got[0]['msg_id']}/resend")
    assert resent.status_code == 200, resent.text
    _, samples = await scrape(broker)
    assert value(samples, "halfmq_dlq_messages", group="g") == 0
    assert value(samples, "halfmq_retry_messages", group="g") == 1, "resent: in the retry topic"


async def test_store_closed_leaves_lag_absent_never_zero(broker: BrokerApp) -> None:
    await broker.topic("t", queues=2)
    await group(broker, "g", "t", consume_from="FIRST_OFFSET")
    await send(broker, "t", 3)
    _, samples = await scrape(broker)
    assert sum(lags(samples, "g", "t").values()) == 3
    assert value(samples, "halfmq_ready") == 1
    broker.state.store.close()
    families, samples = await scrape(broker)  # still 200
    assert value(samples, "halfmq_consumer_lag_readable") == 0
    assert value(samples, "halfmq_ready") == 0
    for name in ("halfmq_consumer_lag_messages", "halfmq_dlq_messages", "halfmq_pending_halves"):
        assert name in families  # described, with no series
        assert series(samples, name) == {}, name
    assert series(samples, "halfmq_undelivered_halves") == {}


async def test_a_failed_read_leaves_only_its_own_families_absent(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, scheduler=False) as broker:
        await broker.topic("t", queues=2)
        await group(broker, "g", "t", consume_from="FIRST_OFFSET")
        engine = create_engine(migrated_url)
        with engine.begin() as conn:  # the store stays ready; the backlog's statement fails
            conn.execute(text("DROP TABLE consumer_offsets"))
        engine.dispose()
        _, samples = await scrape(broker)
        assert value(samples, "halfmq_ready") == 1
        assert value(samples, "halfmq_consumer_lag_readable") == 0
        assert series(samples, "halfmq_consumer_lag_messages") == {}
        assert series(samples, "halfmq_dlq_messages") == {}
        assert value(samples, "halfmq_pending_halves", older_than_seconds="0") == 0


async def test_unreachable_postgresql_still_answers_the_scrape() -> None:
    closed = "postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=2"
    async with BrokerApp.start(database_url=closed, scheduler=False) as broker:
        assert (await broker.client.get("/readyz")).status_code == 503
        _, samples = await scrape(broker)
        assert value(samples, "halfmq_consumer_lag_readable") == 0
        assert series(samples, "halfmq_consumer_lag_messages") == {}
        assert series(samples, "halfmq_dlq_messages") == {}


async def test_metrics_off_exports_no_histogram_and_reads_no_store(migrated_url: str) -> None:
    async with BrokerApp.start(database_url=migrated_url, metrics=False) as broker:
        await broker.topic("t")
        await send(broker, "t", 2)
        families, samples = await scrape(broker)
        assert [name for name, kind in families.items() if kind == "histogram"] == []
        assert not {"halfmq_consumer_lag_readable", "halfmq_pending_halves"} & families.keys()
        assert value(samples, "halfmq_messages_sent_total", duplicate="false") == 2
        assert broker.state.store.writer.on_commit is None


def dashboard_names() -> dict[str, set[str]]:
    """Panel title -> the halfmq sample names its queries use."""
    board = json.loads(DASHBOARD.read_text())
    used: dict[str, set[str]] = {}
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        exprs = [target["expr"] for target in panel["targets"]]
        assert exprs, panel["title"]
        used[panel["title"]] = {n for e in exprs for n in re.findall(r"halfmq_[a-z_]+", e)}
    return used


async def test_dashboard_uses_only_metrics_the_broker_exports(broker: BrokerApp) -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["schemaVersion"] >= 39
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    await broker.topic("t")
    await group(broker, "g", "t", consume_from="FIRST_OFFSET")
    await send(broker, "t", 3)
    half = await post(
        broker, "/v1/transactions", {"topic": "t", "producer_group": "p", "body": "x"}, 201
    )
    await post(broker, f"/v1/transactions/{half['transaction_id']}/commit", {"producer_group": "p"})
    families, _ = await scrape(broker)
    exported = {name + suffix for name, kind in families.items() for suffix in SUFFIXES[kind]}
    used = dashboard_names()
    for title, names in used.items():
        assert names, f"panel {title!r} uses no halfmq metric"
        assert names <= exported, f"panel {title!r} uses {sorted(names - exported)}"
    everything = set().union(*used.values())
    for wanted in (
        "halfmq_request_seconds_bucket",
        "halfmq_store_commit_seconds_bucket",
        "halfmq_check_seconds_bucket",
        "halfmq_consumer_lag_messages",
        "halfmq_consumer_lag_readable",
        "halfmq_dlq_messages",
        "halfmq_pending_halves",
        "halfmq_retention_purged_rows_total",
        "halfmq_store_size_bytes",
        "halfmq_audit_actions_total",
    ):
        assert wanted in everything, f"no panel shows {wanted}"
    assert {n for n, kind in families.items() if kind == "histogram"} >= HISTOGRAMS
    for variable in board["templating"]["list"]:
        assert set(re.findall(r"halfmq_[a-z_]+", variable["definition"])) <= exported
    documented = set(re.findall(r"^\| `(halfmq_[a-z_]+)` \|", OBSERVABILITY.read_text(), re.M))
    # (prometheus_client's text format adds a `_created` gauge beside counters and histograms)
    families_made = {name for name in families if not name.endswith("_created")}
    assert families_made <= documented, "docs/observability.md lists every exported family"
