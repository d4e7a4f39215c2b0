"""Writing generated frames where the job reads them: a Parquet export laid out like
``halfmq export`` writes it, or rows of a real store / bank database through SQLAlchemy.

``TRANSFERS`` is the default ledger shape (the demo banks' ``transfers`` table)."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from broker_service.store import schema
from spark_reconcile import buckets as bucketing
from spark_reconcile.export import BY_DAY

ledger_metadata = sa.MetaData()
TRANSFERS = sa.Table(
    "transfers",
    ledger_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("transfer_id", sa.Text, nullable=False),
    sa.Column("account_id", sa.Text, nullable=False),
    sa.Column("amount", sa.BigInteger, nullable=False),  # integer cents
    sa.Column("direction", sa.String(8), nullable=False),  # DEBIT | CREDIT
    sa.Column("created_at", sa.BigInteger, nullable=False),  # epoch ms
)
CHUNK = 5_000


def write_export(tables: dict[str, DataFrame], root: str, day: dt.date, buckets: int = 0) -> None:
    """Day-partitioned tables by their time column, snapshots under ``day``; overwrites only the
    partitions present in the frames.  With ``buckets``, the messages and the transactions are
    laid out as ``halfmq export --buckets`` writes them (``spark_reconcile.buckets``)."""
    for name, frame in tables.items():
        if name in BY_DAY:
            dated = frame.withColumn("date", F.to_date(F.timestamp_millis(F.col(BY_DAY[name]))))
        else:
            dated = frame.withColumn("date", F.lit(day))
        if buckets and name in bucketing.BUCKETED:
            _write_bucketed(dated, Path(root) / name, buckets)
            continue
        (
            dated.write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy("date")
            .parquet(f"{root.rstrip('/')}/{name}")
        )


def _write_bucketed(dated: DataFrame, table: Path, buckets: int) -> None:
    """Each day of ``dated`` in one file per bucket of its transaction id (Spark's own hash:
    ``pmod(hash(id), N)``, the partition id of its bucketing), written through a staging
    folder and renamed as ``halfmq export`` names them, with the day's marker."""
    staging = table / ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    bucket = F.pmod(F.hash(bucketing.COLUMN), F.lit(buckets))
    (
        dated.withColumn("bucket", bucket)
        .repartition("date", "bucket")
        .write.partitionBy("date", "bucket")
        .parquet(str(staging))
    )
    for day in sorted(staging.glob("date=*")):
        target = table / day.name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for folder in day.glob("bucket=*"):
            number = int(folder.name.removeprefix("bucket="))
            for part, file in enumerate(sorted(folder.glob("part-*.parquet"))):
                file.rename(target / bucketing.file_name(number, part))
        bucketing.write_marker(target, buckets)
    shutil.rmtree(staging)


def insert(engine: sa.Engine, table: sa.Table, frame: DataFrame) -> int:
    """Collects ``frame`` (small!) and inserts its rows into ``table``."""
    extra: dict[str, Any] = {"body": b"{}"} if table.name == "messages" else {}
    rows = [{**row.asDict(), **extra} for row in frame.collect()]
    with engine.begin() as conn:
        for i in range(0, len(rows), CHUNK):
            conn.execute(table.insert(), rows[i : i + CHUNK])
    return len(rows)


def insert_store(engine: sa.Engine, tables: dict[str, DataFrame]) -> dict[str, int]:
    """The generated broker tables into a migrated store."""
    return {name: insert(engine, schema.metadata.tables[name], f) for name, f in tables.items()}


def insert_ledger(engine: sa.Engine, frame: DataFrame) -> int:
    """A bank's ``transfers`` table (created when missing) with the generated rows."""
    ledger_metadata.create_all(engine)
    return insert(engine, TRANSFERS, frame)
