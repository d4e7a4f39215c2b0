"""The row every kind reports (``ANOMALY_COLUMNS``) and the two ways of finding kinds in a source:
``rows_of`` applies one kind's check, ``one_pass`` applies several in a single scan."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_reconcile.anomalies.kind import Check, Kind, Limits

ANOMALY_COLUMNS = (
    "kind",
    "severity",
    "transaction_id",
    "msg_id",
    "keys",
    "business_id",
    "consumer_group",
    "created_at",
    "event_at",
    "reason",
)


def shaped(
    df: DataFrame,
    *,
    kind: Column,
    severity: Column,
    reason: Column,
    event_at: Column,
    consumer_group: Column | None = None,
) -> DataFrame:
    """Rows of ``ANOMALY_COLUMNS`` from ``df`` (which has transaction_id, msg_id, keys,
    created_at, and business_id for the ledger kinds), the kind and severity given as columns."""
    business = F.col("business_id") if "business_id" in df.columns else F.lit(None)
    return df.select(
        kind.cast("string").alias("kind"),
        severity.cast("string").alias("severity"),
        F.col("transaction_id").cast("string"),
        F.col("msg_id").cast("string"),
        F.col("keys").cast("string"),
        business.cast("string").alias("business_id"),
        (consumer_group if consumer_group is not None else F.lit(None))
        .cast("string")
        .alias("consumer_group"),
        F.col("created_at").cast("long"),
        event_at.cast("long").alias("event_at"),
        reason.cast("string").alias("reason"),
    )


def rows_of(frame: DataFrame, kind: Kind, limits: Limits) -> DataFrame:
    """The anomalies of ``kind`` among the rows of ``frame`` (its source)."""
    check = kind.check(limits)
    found = frame if check.found is None else frame.where(check.found)
    return shaped(
        found,
        kind=F.lit(kind.name),
        severity=F.lit(kind.severity),
        reason=check.reason,
        event_at=check.event_at,
        consumer_group=check.consumer_group,
    )


def _found(check: Check) -> Column:
    return F.lit(True) if check.found is None else check.found


def _hit(kind: Kind, check: Check, grouped: bool) -> Column:
    """What the kind says about a row it found, as a struct."""
    fields = [
        F.lit(kind.name).alias("kind"),
        check.reason.cast("string").alias("reason"),
        check.event_at.cast("long").alias("event_at"),
    ]
    if grouped:
        group = check.consumer_group if check.consumer_group is not None else F.lit(None)
        fields.append(group.cast("string").alias("consumer_group"))
    return F.when(_found(check), F.struct(*fields))


def one_pass(frame: DataFrame, kinds: Sequence[Kind], limits: Limits) -> DataFrame:
    """Every kind of ``kinds`` in one scan of ``frame``: the rows any of them finds (a cheap
    filter), each exploded into one row per kind that found it -- the same rows as ``rows_of``
    of each kind, unioned."""
    checks = [(kind, kind.check(limits)) for kind in kinds]
    grouped = any(check.consumer_group is not None for _, check in checks)
    hits = F.array(*(_hit(kind, check, grouped) for kind, check in checks))
    any_found = reduce(Column.__or__, (_found(check) for _, check in checks))
    exploded = (
        frame.where(any_found)
        .select("*", F.explode(hits).alias("hit"))
        .where(F.col("hit").isNotNull())
    )
    severity = F.create_map(*(F.lit(x) for kind in kinds for x in (kind.name, kind.severity)))
    return shaped(
        exploded,
        kind=F.col("hit.kind"),
        severity=severity[F.col("hit.kind")],
        reason=F.col("hit.reason"),
        event_at=F.col("hit.event_at"),
        consumer_group=F.col("hit.consumer_group") if grouped else None,
    )
