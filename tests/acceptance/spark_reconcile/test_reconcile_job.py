"""The whole job against real stores: every kind planted into a migrated broker store (SQLite
and PostgreSQL) and real bank databases is found, nothing else is, and a rerun changes nothing."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("pyspark")

import sqlalchemy as sa
import typer
from reconcile_helpers import migrate
from typer.testing import CliRunner

from spark_reconcile import cli, generate, plant
from spark_reconcile.config import DEFAULT_LEDGER, ReconcileConfig
from spark_reconcile.export import WATERMARK
from spark_reconcile.job import run

pytestmark = pytest.mark.spark

DAY = dt.date(2026, 11, 20)
SPEC = generate.Synthetic(n=2 * len(generate.SCENARIOS), day=DAY, period=len(generate.SCENARIOS))


def halfmq() -> typer.Typer:
    """The two commands mounted as the ``halfmq`` app mounts them."""
    app = typer.Typer()
    app.command("reconcile")(cli.reconcile)
    app.command("export")(cli.export)
    return app


def plant_all(spark: Any, store_url: str, bank_urls: dict[str, str]) -> None:
    engine = migrate(store_url)
    plant.insert_store(engine, generate.store(spark, SPEC))
    engine.dispose()
    for bank, frame in generate.ledgers(spark, SPEC).items():
        bank_engine = sa.create_engine(bank_urls[bank])
        plant.insert_ledger(bank_engine, frame)
        bank_engine.dispose()


def config(out: Path, bank_urls: dict[str, str], **source: str) -> ReconcileConfig:
    return ReconcileConfig(
        day=DAY,
        out=str(out),
        ledgers=tuple(DEFAULT_LEDGER.with_url(name, url) for name, url in bank_urls.items()),
        as_of=SPEC.as_of,
        jdbc_partitions=3,
        shuffle_partitions=2,
        **source,
    )


def found(spark: Any, out: Path) -> list[tuple[str, str]]:
    rows = spark.read.parquet(str(out / "anomalies")).where(f"date = '{DAY}'").collect()
    return sorted((r["kind"], r["transaction_id"]) for r in rows)


def partitions(out: Path) -> Counter[Path]:
    """Parquet files per partition directory of the anomalies (file names are random)."""
    return Counter(p.parent.relative_to(out) for p in (out / "anomalies").rglob("*.parquet"))


def check_run(spark: Any, cfg: ReconcileConfig) -> None:
    out = Path(cfg.out)
    summary = run(cfg, spark)
    expected = sorted(SPEC.expected())
    assert found(spark, out) == expected
    assert summary.exit_code == 2
    assert sum(summary.counts.values()) == len(expected)
    report = out / "report" / f"date={DAY.isoformat()}"
    assert json.loads((report / "summary.json").read_text())["status"] == "critical"
    assert "<svg" in (report / "report.html").read_text()
    files = partitions(out)

    again = run(cfg, spark)
    assert again.counts == summary.counts
    assert found(spark, out) == expected
    assert partitions(out) == files
    assert [d for d, _ in again.trend] == [DAY]


def test_sqlite_store_and_banks(spark: Any, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'broker.db'}"
    banks = {b: f"sqlite:///{tmp_path / (b + '.db')}" for b in ("bob", "smith")}
    plant_all(spark, store, banks)
    check_run(spark, config(tmp_path / "out", banks, store_url=store))


@pytest.mark.postgres
def test_postgres_store_and_banks(
    spark: Any, tmp_path: Path, pg_schemas: Callable[[], str]
) -> None:
    store = pg_schemas()
    banks = {"bob": pg_schemas(), "smith": pg_schemas()}
    plant_all(spark, store, banks)
    check_run(spark, config(tmp_path / "out", banks, store_url=store))


# Two exports, then the job three times in the worker's JVM (two by check_run, one by the command):
# 2-4 minutes on a loaded machine.  The suite's five-minute guard against a hang interrupted it once
# mid-call under load, which left the worker's JVM unusable for the tests after it.
@pytest.mark.timeout(600)
def test_parquet_export_of_a_sqlite_store_through_the_commands(spark: Any, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'broker.db'}"
    banks = {b: f"sqlite:///{tmp_path / (b + '.db')}" for b in ("bob", "smith")}
    plant_all(spark, store, banks)
    export = tmp_path / "export"
    for day in (DAY, DAY + dt.timedelta(days=1)):
        args = ["export", "--date", day.isoformat(), "--database-url", store, "--out", str(export)]
        done = CliRunner().invoke(halfmq(), args)
        assert done.exit_code == 0, done.output
        assert "watermark advanced" in " ".join(done.output.split())  # Rich wraps lines
    assert (export / "messages" / f"date={DAY}" / "part-00000.parquet").exists()
    engine = sa.create_engine(store)
    with engine.connect() as conn:
        mark = conn.execute(
            sa.text("SELECT exported_until FROM export_watermarks WHERE name = :n"),
            {"n": WATERMARK},
        ).scalar_one()
    engine.dispose()
    assert mark == SPEC.start + 2 * 86_400_000
    check_run(spark, config(tmp_path / "out", banks, parquet=str(export)))

    args = ["reconcile", "--date", DAY.isoformat(), "--parquet", str(export)]
    args += ["--out", str(tmp_path / "cli-out"), "--as-of", str(SPEC.as_of)]
    args += [f"--ledger={b}={u}" for b, u in banks.items()]
    done = CliRunner().invoke(halfmq(), args)
    assert done.exit_code == 2, done.output
    assert "critical" in done.output
    assert (tmp_path / "cli-out" / "report" / f"date={DAY}" / "summary.md").exists()
