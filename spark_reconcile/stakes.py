"""What is at stake on the day, beside the anomalies themselves: the day's match rate, the
anomalies per topic, producer group and consumer group, and each source's cut-off (the last row
the run saw and when), so an operator knows what the verdict covers.

DataFrame code; each figure is one small job whose result the driver collects (the job runs
them side by side).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_reconcile.anomalies import INFO
from spark_reconcile.extract import StoreFrames


def _broken(found: DataFrame) -> DataFrame:
    """The day's transactions with at least one anomaly that is not info."""
    return (
        found.where((F.col("severity") != INFO) & F.col("transaction_id").isNotNull())
        .select("transaction_id")
        .distinct()
        .withColumn("broken", F.lit(1))
    )


def match_rates(transactions: DataFrame, found: DataFrame) -> list[dict[str, Any]]:
    """Per (topic, producer group): the day's transactions and those whose half, decision, real
    message, deliveries and ledger rows all agree (no anomaly but info), in one scan of the
    transactions against the broadcast set of the broken ones."""
    rows = (
        transactions.select("transaction_id", "topic", "producer_group", "created_at")
        # The groups are few: one task folds the day's transactions into them as it reads them.
        # Spread over tasks, the session's aggregation without a partial step (``session.py``)
        # would shuffle every transaction to count them.
        .coalesce(1)
        .join(F.broadcast(_broken(found)), "transaction_id", "left")
        .groupBy("topic", "producer_group")
        .agg(
            F.count(F.lit(1)).alias("transactions"),
            F.count("broken").alias("broken"),
            F.max("created_at").alias("last_at"),
        )
        .collect()
    )
    figures = [r.asDict() for r in rows]
    return sorted(figures, key=lambda r: (str(r["topic"]), str(r["producer_group"])))


def per_consumer_group(found: DataFrame) -> list[dict[str, Any]]:
    """The consumer kinds' anomalies (not info) per group and kind."""
    rows = (
        found.where(F.col("consumer_group").isNotNull() & (F.col("severity") != INFO))
        .groupBy("consumer_group", "kind")
        .count()
        .collect()
    )
    return sorted((r.asDict() for r in rows), key=lambda r: (r["consumer_group"], r["kind"]))


def scanned(store: StoreFrames, ledger: DataFrame | None) -> list[dict[str, Any]]:
    """The cut-offs a scan finds: the newest message read (its id and time) and each ledger's
    newest row, with how many rows of each were read.  Needs nothing the checks find, so the job
    runs it beside the detection."""
    found: list[dict[str, Any]] = []
    messages = store.messages.agg(
        F.max("id").alias("last_id"),
        F.max("stored_at").alias("last_at"),
        F.count(F.lit(1)).alias("rows"),
    ).first()
    if messages is not None:
        found.append({"source": "store messages", **messages.asDict()})
    if ledger is not None:
        for row in (
            ledger.groupBy("bank")
            .agg(F.max("created_at").alias("last_at"), F.count(F.lit(1)).alias("rows"))
            .orderBy("bank")
            .collect()
        ):
            found.append(
                {"source": f"ledger {row['bank']}", "last_id": None, "last_at": row["last_at"],
                 "rows": row["rows"]}
            )  # fmt: skip
    return found


def cutoffs(read: list[dict[str, Any]], rates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each source's last row in the run's window: the store's messages and the ledgers as
    ``scanned`` found them, and the newest transaction of the day between them (from ``rates``:
    no second scan)."""
    transactions = {
        "source": "store transactions",
        "last_id": None,
        "last_at": max((r["last_at"] for r in rates if r["last_at"] is not None), default=None),
        "rows": sum(int(r["transactions"]) for r in rates),
    }
    messages = [c for c in read if c["source"] == "store messages"]
    return [*messages, transactions, *(c for c in read if c["source"] != "store messages")]
