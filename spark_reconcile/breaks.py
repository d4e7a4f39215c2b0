"""Breaks: the anomalies an operator has to close, carried from one day's run to the next.

A *break* is one thing out of place, named by what it is about rather than by its kind: a
transaction for the store kinds, a (transaction, consumer group) for the consumer kinds, a
business id for the ledger kinds.  Its ``break_id`` is a hash of that family and subject, so the
same break has the same id on every day, whichever kind explains it that day -- a stuck half the
broker later gives up on is the same break, its kind changed to ``discarded_half``.  Info rows
(resolved, nothing to do) are no breaks.

Each run writes ``OUT/breaks/date=D``: the day's new breaks and every break still open after the
latest earlier day, re-evaluated against the data as it stands now -- ``still_open``,
``changed_kind`` or ``resolved`` (the data no longer shows it: the job closes it) -- each with its
first-seen day.  The next run carries forward those not resolved.

DataFrame code only, as the rest of the job: nothing here runs Python on an executor.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_reconcile.anomalies import INFO, consumers, ledgers, store
from spark_reconcile.config import DAY_MS

NEW, STILL_OPEN, CHANGED_KIND, RESOLVED = "new", "still_open", "changed_kind", "resolved"
STATES = (NEW, STILL_OPEN, CHANGED_KIND, RESOLVED)
# An operator's word on a break (the broker's store), and the job's own when the data closed it.
OPEN, ACKNOWLEDGED, EXPLAINED, RESOLVED_BY_HAND = "open", "acknowledged", "explained", "resolved"
CLOSED_BY_JOB = "closed"
UNHANDLED = (OPEN, ACKNOWLEDGED)  # what a policy's thresholds count
BUCKETS = ("<1d", "1-3d", "3-7d", ">7d")

FAMILY = {
    **{k.name: "store" for k in store.KINDS},
    **{k.name: "consumer" for k in consumers.KINDS},
    **{k.name: "ledger" for k in ledgers.KINDS},
}
BREAKS_DDL = (
    "break_id string, kind string, severity string, transaction_id string, msg_id string, "
    "business_id string, consumer_group string, created_at long, event_at long, reason string, "
    "first_seen date, state string, previous_kind string, amount long"
)
STATUS_TABLE = "reconcile_break_statuses"  # the broker's store (migration 0010)
STATUS_SELECT = "break_id, status, note, actor, updated_at"
STATUS_DDL = "break_id string, status string, note string, actor string, updated_at long"
BREAK_COLUMNS = tuple(c.split()[0] for c in BREAKS_DDL.split(", "))
_DAY_DIR = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")


def _text(name: str) -> Column:
    return F.coalesce(F.col(name), F.lit(""))


def break_id() -> Column:
    """A stable id: the family and its subject, hashed (16 hex digits)."""
    family = F.create_map(*(x for k, f in FAMILY.items() for x in (F.lit(k), F.lit(f))))
    fam = family[F.col("kind")]
    subject = (
        F.when(fam == "ledger", F.concat_ws("|", fam, _text("business_id")))
        .when(
            fam == "consumer",
            F.concat_ws("|", fam, _text("transaction_id"), _text("consumer_group")),
        )
        .otherwise(F.concat_ws("|", F.coalesce(fam, F.col("kind")), _text("transaction_id")))
    )
    return F.substring(F.sha2(subject, 256), 1, 16)


def of_anomalies(found: DataFrame) -> DataFrame:
    """The anomalies that are breaks (not info), one row per break id: where several kinds name
    the same subject, the first in the registry's order (the most telling) stands for it."""
    from spark_reconcile.anomalies import KINDS

    rank = F.create_map(*(x for i, k in enumerate(KINDS) for x in (F.lit(k), F.lit(i))))
    rows = found.where(F.col("severity") != INFO).withColumn("break_id", break_id())
    first = rows.groupBy("break_id").agg(
        F.min_by(
            F.struct(*[c for c in rows.columns if c != "break_id"]), rank[F.col("kind")]
        ).alias("row")
    )
    return first.select("break_id", "row.*")


def latest_before(out: str, day: dt.date) -> dt.date | None:
    """The latest day before ``day`` whose run wrote its breaks (``OUT/breaks/date=*``)."""
    root = Path(out) / "breaks"
    days = [
        dt.date.fromisoformat(m[1])
        for p in (root.iterdir() if root.is_dir() else ())
        if (m := _DAY_DIR.match(p.name)) and (p / "_SUCCESS").exists()
    ]
    earlier = [d for d in days if d < day]
    return max(earlier) if earlier else None


def read_open(spark: SparkSession, out: str, day: dt.date) -> DataFrame:
    """The breaks still open after ``day``'s run."""
    path = f"{out.rstrip('/')}/breaks/date={day.isoformat()}"
    return spark.read.schema(BREAKS_DDL).parquet(path).where(F.col("state") != RESOLVED)


def carried(previous: DataFrame, again: DataFrame) -> DataFrame:
    """The earlier open breaks judged on today's data: found again (with the same kind or
    another) or resolved (kept as they were, their state ``resolved``)."""
    before = previous.select(
        "break_id", "first_seen", F.col("kind").alias("previous_kind"), F.col("amount")
    )
    found = again.join(before, "break_id").withColumn(
        "state",
        F.when(F.col("kind") == F.col("previous_kind"), F.lit(STILL_OPEN)).otherwise(
            F.lit(CHANGED_KIND)
        ),
    )
    gone = (
        previous.join(again.select("break_id"), "break_id", "left_anti")
        .withColumn("previous_kind", F.col("kind"))
        .withColumn("state", F.lit(RESOLVED))
    )
    return found.select(*BREAK_COLUMNS).unionByName(gone.select(*BREAK_COLUMNS))


def today_and_carried(today: DataFrame, carried_rows: DataFrame | None, day: dt.date) -> DataFrame:
    """The run's breaks: the carried ones, then the day's not already among them (new)."""
    new = (
        today.withColumn("first_seen", F.lit(day))
        .withColumn("state", F.lit(NEW))
        .withColumn("previous_kind", F.lit(None).cast("string"))
        .withColumn("amount", F.lit(None).cast("long"))
    )
    if carried_rows is None:
        return new.select(*BREAK_COLUMNS)
    fresh = new.join(carried_rows.select("break_id"), "break_id", "left_anti")
    return carried_rows.unionByName(fresh.select(*BREAK_COLUMNS))


def with_amounts(breaks: DataFrame, ledger: DataFrame | None) -> DataFrame:
    """Each break's amount at stake, in the ledgers' unit: the larger of what was debited and
    what was credited under its business id (a break without ledger rows keeps the amount it
    had, or none).  Only the ledger rows of the breaks' business ids are aggregated."""
    if ledger is None:
        return breaks
    ids = breaks.where(F.col("business_id").isNotNull()).select("business_id").distinct()
    sums = (
        ledger.join(F.broadcast(ids), "business_id", "left_semi")
        .groupBy("business_id")
        .agg(
            F.sum(F.when(F.col("direction") == "DEBIT", F.col("amount"))).alias("debited"),
            F.sum(F.when(F.col("direction") == "CREDIT", F.col("amount"))).alias("credited"),
        )
        .select(
            "business_id",
            F.greatest(F.coalesce("debited", F.lit(0)), F.coalesce("credited", F.lit(0)))
            .cast("long")
            .alias("ledger_amount"),
        )
    )
    return (
        breaks.join(F.broadcast(sums), "business_id", "left")
        .withColumn("amount", F.coalesce(F.col("ledger_amount"), F.col("amount")))
        .drop("ledger_amount")
    )


def statuses_frame(spark: SparkSession, statuses: Mapping[str, dict[str, object]]) -> DataFrame:
    """The operators' statuses as a frame of literals (no Python worker on an executor)."""
    if not statuses:
        return spark.range(0).select(
            *(F.lit(None).cast(t).alias(n) for n, t in (c.split() for c in STATUS_DDL.split(", ")))
        )
    rows = [
        F.struct(
            F.lit(bid).alias("break_id"),
            F.lit(str(s.get("status") or OPEN)).alias("status"),
            F.lit(s.get("note")).cast("string").alias("note"),
            F.lit(s.get("actor")).cast("string").alias("actor"),
            F.lit(s.get("updated_at")).cast("long").alias("updated_at"),
        )
        for bid, s in statuses.items()
    ]
    return spark.range(1).select(F.inline(F.array(*rows)))


def judged(
    breaks: DataFrame,
    statuses: DataFrame,
    *,
    as_of: int,
    max_age_ms: Mapping[str, int | None],
) -> DataFrame:
    """Each break with its operator's status (``closed`` when the data resolved it), its age at
    ``as_of`` (from its transaction's creation, else its event, else its first day), the age's
    bucket and whether it is past its kind's allowed age (``overdue``)."""
    since = F.coalesce(
        F.col("created_at"),
        F.col("event_at"),
        F.unix_millis(F.to_timestamp(F.col("first_seen"))),
    )
    age = F.lit(as_of) - since
    limits = F.create_map(
        *(x for k, ms in max_age_ms.items() if ms is not None for x in (F.lit(k), F.lit(ms)))
    )
    bucket = (
        F.when(F.col("age_ms") < DAY_MS, BUCKETS[0])
        .when(F.col("age_ms") < 3 * DAY_MS, BUCKETS[1])
        .when(F.col("age_ms") < 7 * DAY_MS, BUCKETS[2])
        .otherwise(BUCKETS[3])
    )
    status = F.when(F.col("state") == RESOLVED, F.lit(CLOSED_BY_JOB)).otherwise(
        F.coalesce(F.col("status"), F.lit(OPEN))
    )
    return (
        breaks.join(F.broadcast(statuses), "break_id", "left")
        .withColumn("status", status)
        .withColumn("age_ms", age)
        .withColumn("age_bucket", bucket)
        .withColumn(
            "overdue",
            (F.col("state") != RESOLVED)
            & F.coalesce(F.col("age_ms") > limits[F.col("kind")], F.lit(False)),
        )
    )
