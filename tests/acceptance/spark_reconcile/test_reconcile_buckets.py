"""The export bucketed by transaction id (``halfmq export --buckets``): its bucket of a value is
Spark's own, each file holds only its bucket's rows, the job finds exactly what it finds in the
plain export, and its view of the day then plans no shuffle."""

from __future__ import annotations

import datetime as dt
import random
import string
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
from reconcile_helpers import migrate

from broker_service.store import schema
from spark_reconcile import buckets, extract, generate, plant
from spark_reconcile.anomalies import ledgers
from spark_reconcile.anomalies.view import transaction_view
from spark_reconcile.config import ReconcileConfig
from spark_reconcile.export import export_day
from spark_reconcile.job import run

pytestmark = pytest.mark.spark

DAY = dt.date(2026, 11, 20)
SPEC = generate.Synthetic(n=2 * len(generate.SCENARIOS), day=DAY, period=len(generate.SCENARIOS))
AUTO_BUCKETED = "spark.sql.sources.bucketing.autoBucketedScan.enabled"


def sparks_buckets(spark: Any, values: list[str | None], n: int) -> list[tuple[int, int]]:
    frame = spark.createDataFrame([(v,) for v in values], "s string")
    return [tuple(r) for r in frame.selectExpr("hash(s)", f"pmod(hash(s), {n})").collect()]


def test_the_hash_and_bucket_of_a_value_are_sparks(spark: Any) -> None:
    rnd = random.Random(3)
    alphabet = string.ascii_letters + "-_:éü€日本\u0080ÿ"
    values: list[str | None] = [None, "", "a", "ab", "abc", "abcd", "abcde"]
    values += ["".join(rnd.choices(alphabet, k=rnd.randint(0, 40))) for _ in range(2000)]
    values += [generate.tx_id(i) for i in range(200)]
    arrow = pa.array(values, pa.string())
    hashes, ids = buckets.spark_hash(arrow).tolist(), buckets.bucket_ids(arrow, 7).tolist()
    mine = list(zip(hashes, ids, strict=True))
    assert mine == sparks_buckets(spark, values, 7)


def planted_store(spark: Any, tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    engine = migrate(url)
    plant.insert_store(engine, generate.store(spark, SPEC))
    with engine.begin() as conn:  # an operator's status, to be read back from the export
        conn.execute(
            schema.reconcile_break_statuses.insert().values(
                break_id="0123456789abcdef", status="acknowledged", updated_at=SPEC.start
            )
        )
    engine.dispose()
    return url


def exported(url: str, out: Path, n: int) -> Path:
    engine = sa.create_engine(url)
    for day in (DAY, DAY + dt.timedelta(days=1)):
        export_day(engine, out, day, buckets=n)
    engine.dispose()
    return out


def anomalies(spark: Any, out: Path) -> list[tuple[Any, ...]]:
    rows = spark.read.parquet(str(out / "anomalies")).where(f"date = '{DAY}'").drop("date")
    return sorted(tuple(r) for r in rows.collect())


def view_plan(spark: Any, root: Path) -> str:
    config = ReconcileConfig(day=DAY, out="/unused", parquet=str(root), as_of=SPEC.as_of)
    store = extract.store_from_parquet(spark, str(root), config.window)
    view = transaction_view(store.transactions, store.messages, store.scheduled, config.window)
    plan = str(view._jdf.queryExecution().executedPlan().toString())
    extract.drop_tables(spark, store.tables)
    return plan


@pytest.mark.timeout(900)  # two whole runs of the job, on a shared machine
def test_a_bucketed_export_gives_the_plain_exports_findings_without_a_shuffle(
    spark: Any, tmp_path: Path
) -> None:
    url = planted_store(spark, tmp_path)
    plain = exported(url, tmp_path / "plain", 0)
    bucketed = exported(url, tmp_path / "bucketed", 3)
    files = sorted(bucketed.glob("*/date=*/part-*_*.parquet"))
    assert {f.parent.parent.name for f in files} == {"messages", "transactions"}
    for file in files:
        ids = pq.read_table(file).column(buckets.COLUMN).to_pylist()
        named = int(file.stem.rsplit("_", 1)[1])
        assert {b for _, b in sparks_buckets(spark, ids, 3)} == {named}

    previous = spark.conf.get(AUTO_BUCKETED)
    spark.conf.set(AUTO_BUCKETED, "false")  # as the job's own session sets it
    try:
        found = {}
        for name, root in (("plain", plain), ("bucketed", bucketed)):
            config = ReconcileConfig(
                day=DAY, out=str(tmp_path / f"out-{name}"), parquet=str(root), as_of=SPEC.as_of
            )
            summary = run(config, spark)
            assert summary.breaks.statuses_from == "the export: 1 status(es)"
            found[name] = (anomalies(spark, tmp_path / f"out-{name}"), summary.counts)
        plans = {name: view_plan(spark, root) for name, root in (("plain", plain), ("b", bucketed))}
    finally:
        spark.conf.set(AUTO_BUCKETED, previous)
    assert found["bucketed"] == found["plain"]
    ledger_kinds = {k.name for k in ledgers.KINDS}
    planted = sorted(x for x in SPEC.expected() if x[0] not in ledger_kinds)
    rows = spark.read.parquet(str(tmp_path / "out-bucketed" / "anomalies"))
    assert sorted(tuple(r) for r in rows.select("kind", "transaction_id").collect()) == planted
    shuffle = "Exchange hashpartitioning("
    assert plans["plain"].count(f"{shuffle}transaction_id") == 2
    assert shuffle not in plans["b"]
    assert "Bucketed: true" in plans["b"]
    assert not list(spark.catalog.listTables())  # the run's tables are dropped
