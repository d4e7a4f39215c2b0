"""The load: the day's anomalies as partitioned Parquet (``<out>/anomalies/date=D/kind=K``), the
day's counts (``<out>/summary/date=D``) and the trend read back from earlier days.  A rerun of a
day replaces that day's partitions and nothing else."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from spark_reconcile.anomalies import KINDS, SEVERITY


def day_path(out: str, name: str, day: dt.date) -> str:
    return f"{out.rstrip('/')}/{name}/date={day.isoformat()}"


def write_anomalies(found: DataFrame, out: str, day: dt.date) -> None:
    found.write.mode("overwrite").partitionBy("kind").parquet(day_path(out, "anomalies", day))


def counts_and_samples(
    found: DataFrame, per_kind: int
) -> tuple[dict[str, int], dict[str, list[dict[str, Any]]]]:
    """The count of every kind (zeros included) and its first ``per_kind`` rows, in one job: each
    picked row carries its kind's total, so the counts need no scan of their own."""
    by_kind = Window.partitionBy("kind")
    order = by_kind.orderBy("created_at", "transaction_id", "consumer_group")
    rows = (
        found.withColumn("n", F.row_number().over(order))
        .withColumn("total", F.count(F.lit(1)).over(by_kind))
        .where(F.col("n") <= per_kind)
    )
    counted: dict[str, int] = {}
    picked: dict[str, list[dict[str, Any]]] = {}
    for row in rows.drop("n").collect():
        record = row.asDict()
        counted[record["kind"]] = int(record.pop("total"))
        picked.setdefault(record["kind"], []).append(record)
    return {kind: counted.get(kind, 0) for kind in KINDS}, picked


def write_counts(spark: SparkSession, counts: dict[str, int], out: str, day: dt.date) -> None:
    frame = counts_frame(spark, counts).coalesce(1)
    frame.write.mode("overwrite").parquet(day_path(out, "summary", day))


def counts_frame(spark: SparkSession, counts: dict[str, int]) -> DataFrame:
    """kind, severity, count of every kind, built from literals in the JVM: ``createDataFrame``
    of Python rows has an executor start a Python worker to unpickle them (classic mode), the only
    Python the job would run there -- without it a cluster's workers need no Python at all."""
    rows = [
        F.struct(
            F.lit(kind).alias("kind"),
            F.lit(SEVERITY[kind]).alias("severity"),
            F.lit(counts.get(kind, 0)).cast("long").alias("count"),
        )
        for kind in KINDS
    ]
    return spark.range(1).select(F.inline(F.array(*rows)))


def read_trend(
    spark: SparkSession, out: str, day: dt.date, days: int
) -> list[tuple[dt.date, dict[str, int]]]:
    """Counts per kind of the ``days`` days up to ``day`` that have a summary, oldest first."""
    first = day - dt.timedelta(days=days - 1)
    rows = (
        spark.read.parquet(f"{out.rstrip('/')}/summary")
        .where(F.col("date").between(F.lit(first), F.lit(day)))
        .collect()
    )
    trend: dict[dt.date, dict[str, int]] = {}
    for row in rows:
        trend.setdefault(row["date"], {})[row["kind"]] = int(row["count"])
    return sorted(trend.items())


_STATE_ORDER = ("changed_kind", "still_open", "new", "resolved")  # carried first, then new


def break_groups(judged: DataFrame) -> list[dict[str, Any]]:
    """The breaks counted by (kind, severity, state, status, age bucket, overdue) -- with the
    amount at stake and the oldest age of each group."""
    groups = (
        judged.groupBy("kind", "severity", "state", "status", "age_bucket", "overdue")
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.sum("amount").alias("amount"),
            F.max("age_ms").alias("oldest_ms"),
        )
        .collect()
    )
    return [g.asDict() for g in groups]


def break_rows(judged: DataFrame, per_kind: int) -> list[dict[str, Any]]:
    """The first ``per_kind`` breaks of each kind (the carried ones first, oldest first) for the
    report."""
    rank = F.create_map(*(x for i, s in enumerate(_STATE_ORDER) for x in (F.lit(s), F.lit(i))))
    order = Window.partitionBy("kind").orderBy(
        rank[F.col("state")], "first_seen", "created_at", "break_id"
    )
    rows = (
        judged.withColumn("n", F.row_number().over(order))
        .where(F.col("n") <= per_kind)
        .drop("n")
        .collect()
    )
    return [r.asDict() for r in rows]
