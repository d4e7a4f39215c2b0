"""The export's watermark against retention, on both stores (a SQLite file and PostgreSQL): an
export of today moves ``exported_until`` no further than the moment its read began, so a row
stored after it is not purged before an export has read it; a later export moves it on, an older
or a future day's never moves it back or past now.  A transaction exported while PREPARED and
resolved past the watermark keeps its op record (its resolution, as the export reads it) until
an export has read that too.

The real broker runs in process on the store; the purge is a :class:`RetentionService` whose
clock runs 49 hours ahead (retention 48 h), so that everything stored counts as old and only the
watermark holds rows back."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("pyarrow")

import pyarrow.parquet as pq
import sqlalchemy as sa

from broker_service.domain.clock import now_ms
from broker_service.domain.config import RetentionPolicy
from broker_service.domain.retention.model import PurgeReport
from broker_service.domain.retention.service import RetentionService
from spark_reconcile.config import DAY_MS, day_start_ms
from spark_reconcile.export import IN_FLIGHT_MS, WATERMARK, Exported, export_day
from tests.support import BrokerApp

HOUR = 3_600_000
# Rows "stored two minutes ago": before the export's read began, by more than IN_FLIGHT_MS.
EARLIER = 2 * 60_000
POLICY = RetentionPolicy(retention_ms=48 * HOUR, wait_for_export=True, batch=50)


@pytest.fixture(autouse=True)
def _today_began_long_enough_ago() -> None:
    """Each test exports today and backdates rows by ``EARLIER``: run in the first minutes of a
    UTC day, they would land in yesterday.  Wait until they cannot (at most ``EARLIER`` + 10 s,
    in 0.15 % of the day)."""
    since = now_ms() - day_start_ms(today())
    margin = EARLIER + 10_000
    if since < margin:
        time.sleep((margin - since) / 1000)


@pytest.fixture
async def broker(migrated_url: str) -> AsyncIterator[BrokerApp]:
    async with BrokerApp.start(
        database_url=migrated_url, scheduler=False, retention_wait_for_export=True
    ) as app:
        yield app


@pytest.fixture
def engine(migrated_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(migrated_url)
    yield engine
    engine.dispose()


def today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def sql(engine: sa.Engine, query: str, **params: Any) -> list[Any]:
    with engine.begin() as conn:
        result = conn.execute(sa.text(query), params)
        return list(result) if result.returns_rows else []


def watermark(engine: sa.Engine) -> int | None:
    rows = sql(engine, "SELECT exported_until FROM export_watermarks WHERE name = :n", n=WATERMARK)
    return int(rows[0][0]) if rows else None


def export(engine: sa.Engine, out: Path, day: dt.date, **options: Any) -> tuple[Exported, int]:
    """``export_day`` of ``day``, and the time just before it began."""
    before = now_ms()
    done = export_day(engine, out, day, **options)
    return done, before


async def purge(broker: BrokerApp) -> PurgeReport:
    """A purge as it would run 49 hours from now (retention 48 h), waiting for the export."""
    store = broker.state.retention.store
    return await RetentionService(store, POLICY, lambda: now_ms() + 49 * HOUR).purge()


async def send(broker: BrokerApp, topic: str, ids: list[str]) -> None:
    body = {"messages": [{"body": i, "msg_id": i} for i in ids]}
    response = await broker.client.post(f"/v1/topics/{topic}/messages:batch", json=body)
    assert response.status_code == 201, response.text


def stored(engine: sa.Engine, topic: str) -> list[str]:
    rows = sql(engine, "SELECT msg_id FROM messages WHERE topic = :t ORDER BY id", t=topic)
    return [r[0] for r in rows]


def test_an_export_of_today_stops_short_of_its_start_and_never_goes_back(
    engine: sa.Engine, tmp_path: Path
) -> None:
    out = tmp_path / "export"
    done, before = export(engine, out, today())
    after = now_ms()
    mark = watermark(engine)
    assert mark is not None
    assert done.watermark_advanced
    assert done.watermark == mark
    # Not the end of today: the moment the read began, less the writes that may be in flight.
    assert before - IN_FLIGHT_MS <= mark <= after - IN_FLIGHT_MS
    assert mark < day_start_ms(today()) + DAY_MS

    time.sleep(0.01)
    later, before = export(engine, out, today())  # a later export of today moves it on
    moved = watermark(engine)
    assert later.watermark_advanced
    assert moved is not None
    assert mark < moved <= now_ms() - IN_FLIGHT_MS
    assert moved >= before - IN_FLIGHT_MS

    # Tomorrow (not begun) and yesterday (passed) leave it: never into the future, never back.
    for day in (today() + dt.timedelta(days=1), today() - dt.timedelta(days=1)):
        again, _ = export(engine, out, day)
        assert not again.watermark_advanced
        assert again.watermark == moved
        assert watermark(engine) == moved


def test_yesterday_then_today_continues_from_a_mark_within_yesterday(
    engine: sa.Engine, tmp_path: Path
) -> None:
    """The nightly cron: a mark left within a day (that day exported while it was today) is
    continued by the export of the whole day, then by today's."""
    yesterday = today() - dt.timedelta(days=1)
    within = day_start_ms(yesterday) + HOUR
    sql(
        engine,
        "INSERT INTO export_watermarks (name, last_message_id, exported_until, updated_at) "
        "VALUES (:n, 0, :until, 0)",
        n=WATERMARK,
        until=within,
    )
    whole, _ = export(engine, tmp_path / "export", yesterday)
    assert whole.watermark_advanced
    assert watermark(engine) == day_start_ms(today())
    part, before = export(engine, tmp_path / "export", today())
    assert part.watermark_advanced
    mark = watermark(engine)
    assert mark is not None
    assert before - IN_FLIGHT_MS <= mark <= now_ms() - IN_FLIGHT_MS


async def test_a_row_stored_after_the_export_began_is_not_purged(
    broker: BrokerApp, engine: sa.Engine, tmp_path: Path
) -> None:
    await broker.topic("t", queues=1)
    await send(broker, "t", ["before"])
    sql(engine, "UPDATE messages SET stored_at = stored_at - :d WHERE topic = 't'", d=EARLIER)
    done, _ = export(engine, tmp_path / "export", today())
    assert done.rows["messages"] == 1
    await send(broker, "t", ["after"])  # today, after the export's read began: not exported

    report = await purge(broker)
    assert report.purged["messages"] == 1
    assert stored(engine, "t") == ["after"]
    # An export reads it (the same day again, later on): the watermark moves on and it may go.
    await asyncio.sleep(0.01)
    again, _ = export(engine, tmp_path / "export", today(), in_flight_ms=0)
    assert again.watermark_advanced
    assert again.rows["messages"] == 1  # "before" is purged; "after" is exported now
    report = await purge(broker)
    assert report.purged["messages"] == 1
    assert stored(engine, "t") == []


async def test_a_transaction_exported_prepared_waits_for_its_resolution_to_be_exported(
    broker: BrokerApp, engine: sa.Engine, tmp_path: Path
) -> None:
    await broker.topic("t", queues=1)
    response = await broker.client.post(
        "/v1/transactions", json={"topic": "t", "producer_group": "pg", "body": "x"}
    )
    assert response.status_code == 201, response.text
    txid = response.json()["transaction_id"]
    sql(
        engine,
        "UPDATE transactions SET created_at = created_at - :d WHERE transaction_id = :t",
        d=EARLIER,
        t=txid,
    )
    sql(
        engine,
        "UPDATE messages SET stored_at = stored_at - :d WHERE transaction_id = :t",
        d=EARLIER,
        t=txid,
    )
    out = tmp_path / "export"
    export(engine, out, today())
    exported = pq.read_table(out / "transactions" / f"date={today()}").to_pylist()
    assert [(r["transaction_id"], r["state"]) for r in exported] == [(txid, "PREPARED")]

    # Resolved after the export's read began: created before the watermark, resolved past it.
    response = await broker.client.post(
        f"/v1/transactions/{txid}/commit", json={"producer_group": "pg"}
    )
    assert response.status_code == 200, response.text
    report = await purge(broker)
    assert report.purged["transactions"] == 0
    response = await broker.client.get(f"/v1/transactions/{txid}")
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "COMMITTED"
    assert stored(engine, "RMQ_SYS_TRANS_OP_HALF_TOPIC") != []  # its resolution, kept

    # An export that has read the op record lets it go, with its half and op record.
    await asyncio.sleep(0.01)
    again, _ = export(engine, out, today(), in_flight_ms=0)
    ops = pq.read_table(out / "messages" / f"date={today()}").to_pylist()
    assert any(r["topic"] == "RMQ_SYS_TRANS_OP_HALF_TOPIC" for r in ops)
    assert again.watermark_advanced
    report = await purge(broker)
    assert report.purged["transactions"] == 1
    assert stored(engine, "RMQ_SYS_TRANS_OP_HALF_TOPIC") == []
    assert stored(engine, "RMQ_SYS_TRANS_HALF_TOPIC") == []
    response = await broker.client.get(f"/v1/transactions/{txid}")
    assert response.status_code == 404
