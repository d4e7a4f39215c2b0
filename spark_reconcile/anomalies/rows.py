"""The row every kind reports (``ANOMALY_COLUMNS``) and the two ways of finding kinds in a source:
``rows_of`` applies one kind's check, ``one_pass`` applies several in a single scan.

The view does not carry its half's keys and tags (strings: a second scan of the messages and a
join of every transaction to fetch them).  The rows found carry the half's id instead
(``HALF_ID``), and a kind whose check reads the tags (``ack_lag``: a subscription's tag
expression) leaves that test to ``completed`` in ``TAG_FILTER``; ``completed`` fetches the
keys and tags of the rows found only, applies the tag test and gives ``ANOMALY_COLUMNS``."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_reconcile.anomalies.kind import Check, Kind, Limits
from spark_reconcile.anomalies.view import HALF_ID, halves

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
TAG_FILTER = "tag_filter"  # a row kept only if its half's tags pass this tag expression
INTERNAL = (HALF_ID, TAG_FILTER)  # carried by the rows found until ``completed``


def _column(df: DataFrame, name: str, kind: str) -> Column:
    return (F.col(name) if name in df.columns else F.lit(None)).cast(kind).alias(name)


def shaped(
    df: DataFrame,
    *,
    kind: Column,
    severity: Column,
    reason: Column,
    event_at: Column,
    consumer_group: Column | None = None,
) -> DataFrame:
    """Rows of ``ANOMALY_COLUMNS`` and ``INTERNAL`` from ``df`` (which has transaction_id,
    msg_id, created_at, and keys or ``half_id``, business_id for the ledger kinds), the kind and
    severity given as columns."""
    return df.select(
        kind.cast("string").alias("kind"),
        severity.cast("string").alias("severity"),
        F.col("transaction_id").cast("string"),
        F.col("msg_id").cast("string"),
        _column(df, "keys", "string"),
        _column(df, "business_id", "string"),
        (consumer_group if consumer_group is not None else F.lit(None))
        .cast("string")
        .alias("consumer_group"),
        F.col("created_at").cast("long"),
        event_at.cast("long").alias("event_at"),
        reason.cast("string").alias("reason"),
        _column(df, HALF_ID, "long"),
        _column(df, TAG_FILTER, "string"),
    )


def tags_listed(expression: Column, tags: Column) -> Column:
    """Whether ``tags`` is one of the tags of a RocketMQ tag expression ``TagA || TagB``."""
    listed = F.exists(F.split(expression, r"\|\|"), lambda t: F.trim(t) == tags)
    return F.coalesce(listed, F.lit(False))


def completed(found: DataFrame, messages: DataFrame) -> DataFrame:
    """``found`` (rows of ``shaped``) as ``ANOMALY_COLUMNS``: the keys of each row's half, and
    only the rows whose half's tags pass their ``TAG_FILTER``.  The halves are scanned once
    against the set of the ids the rows need (numbers, broadcast): only those halves go on to
    the join, which is as big as ``found``."""
    ids = found.where(F.col(HALF_ID).isNotNull()).select(HALF_ID).distinct()
    needed = (
        halves(messages)
        .join(F.broadcast(ids), HALF_ID)
        .select(HALF_ID, F.col("keys").alias("half_keys"), F.col("tags").alias("half_tags"))
    )
    rows = found.join(needed, HALF_ID, "left")
    tag_filter = F.col(TAG_FILTER)
    passes = tag_filter.isNull() | tags_listed(tag_filter, F.col("half_tags"))
    return rows.where(passes).select(
        *(
            F.coalesce(F.col("keys"), F.col("half_keys")).alias("keys") if c == "keys" else c
            for c in ANOMALY_COLUMNS
        )
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
