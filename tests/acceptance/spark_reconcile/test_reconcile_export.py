"""``halfmq export`` on its own: the watermark only moves forward over contiguous days."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("pyarrow")

from reconcile_helpers import migrate

from broker_service.store import schema
from spark_reconcile.export import arrow_schema, export_day
from spark_reconcile.extract import EXPORT_READ

DAY = dt.date(2026, 11, 20)


def test_export_of_an_older_day_leaves_the_watermark(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'broker.db'}"
    engine = migrate(store)
    assert export_day(engine, tmp_path / "export", DAY).watermark_advanced
    assert not export_day(
        engine, tmp_path / "export", DAY - dt.timedelta(days=1)
    ).watermark_advanced
    skipped = export_day(engine, tmp_path / "export", DAY + dt.timedelta(days=2))
    engine.dispose()
    assert not skipped.watermark_advanced
    assert skipped.rows["messages"] == 0
    assert (tmp_path / "export" / "transactions" / f"date={DAY + dt.timedelta(days=2)}").exists()


def test_the_job_reads_the_export_with_its_own_types() -> None:
    """The job gives the export's schema to Spark (no job to infer it): each column it reads has
    the type ``halfmq export`` writes, and the export has every column it reads."""
    spark_type = {"string": "string", "int32": "int", "int64": "long", "bool": "boolean"}
    for table, columns in EXPORT_READ.items():
        written = arrow_schema(schema.metadata.tables[table])
        assert {c: spark_type[str(written.field(c).type)] for c in columns} == columns
