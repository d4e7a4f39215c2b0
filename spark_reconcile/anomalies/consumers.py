"""The consumers' kinds: real messages a subscribed group has not acked, or gave up on.

Inputs besides the view (columns as in the broker's store):

* ``dlq``           the messages of the dead-letter topics ``%DLQ%{group}``
* ``subscriptions`` consumer_group, topic, expression, created_at
* ``acks``          consumer_group, msg_id (deliveries in state ACKED)

``dead_letters`` pairs the day's real messages with their dead-letter copies (the ``DEAD_LETTERS``
source, persisted by the job: ``ack_lag`` reads it too); the ``PENDING_ACKS`` source is what a
subscribed group should have acked by now and has not.  ``ack_lag`` and ``dead_lettered`` apply
one kind alone.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_reconcile.anomalies.kind import UNTIMED, WARNING, Check, Evidence, Kind, Limits, Source
from spark_reconcile.anomalies.rows import rows_of
from spark_reconcile.anomalies.topics import DLQ_PREFIX
from spark_reconcile.config import Thresholds
from spark_reconcile.scenario import Scenario

ACK_LAG = "ack_lag"
DEAD_LETTERED = "dead_lettered"


def dead_letters(view: DataFrame, dlq: DataFrame) -> DataFrame:
    """Dead-letter copies of the day's real messages: consumer_group, msg_id and when, matched on
    the msg id or on ``origin_id`` pointing at the real message."""
    copies = dlq.where(F.col("topic").startswith(DLQ_PREFIX)).select(
        F.expr(f"substring(topic, {len(DLQ_PREFIX) + 1})").alias("consumer_group"),
        F.col("msg_id").alias("dlq_msg_id"),
        "origin_id",
        F.col("stored_at").alias("dlq_at"),
    )
    real = view.where(F.col("real_count") > 0)
    by_msg = real.join(F.broadcast(copies), real["msg_id"] == copies["dlq_msg_id"])
    by_origin = real.join(F.broadcast(copies), real["real_id"] == copies["origin_id"])
    return (
        by_msg.unionByName(by_origin)
        .groupBy("transaction_id", "msg_id", "keys", "created_at", "consumer_group")
        .agg(F.min("dlq_at").alias("dlq_at"))
    )


def _subscribed(expression: Column, tags: Column) -> Column:
    """RocketMQ's tag expression: ``*`` (or empty) takes all, else ``TagA || TagB``."""
    every = expression.isNull() | (F.trim(expression) == "") | (F.trim(expression) == "*")
    listed = F.exists(F.split(expression, r"\|\|"), lambda t: F.trim(t) == tags)
    return every | F.coalesce(listed, F.lit(False))


def _expected_acks(view: DataFrame, subscriptions: DataFrame, before: int) -> DataFrame:
    """(real message, group) pairs: each real message stored before ``before`` with every group
    subscribed to its topic (and tag) when it was stored."""
    real = view.where((F.col("real_count") > 0) & (F.col("real_at") < before))
    subs = subscriptions.select(
        F.col("consumer_group"),
        F.col("topic").alias("sub_topic"),
        "expression",
        F.col("created_at").alias("subscribed_at"),
    )
    return real.join(F.broadcast(subs), real["topic"] == subs["sub_topic"]).where(
        (F.col("subscribed_at") <= F.col("real_at"))
        & _subscribed(F.col("expression"), F.col("tags"))
    )


def _pending_acks(evidence: Evidence) -> DataFrame:
    """The expected acks past the ack-lag threshold that no ack answers; dead-lettered pairs
    are left out (reported as such)."""
    limits = evidence.limits
    before = limits.as_of - limits.thresholds.ack_lag_ms
    expected = _expected_acks(evidence.view, evidence.subscriptions, before)
    # A shuffled hash join: at 10M the acks are too big to broadcast, and a sort-merge join
    # sorted both 10M-row sides only to find the few not acked.
    acked = evidence.acks.select("consumer_group", "msg_id").hint("shuffle_hash")
    return expected.join(acked, ["consumer_group", "msg_id"], "left_anti").join(
        F.broadcast(evidence.dead.select("consumer_group", "msg_id")),
        ["consumer_group", "msg_id"],
        "left_anti",
    )


def _dead(evidence: Evidence) -> DataFrame:
    return evidence.dead


PENDING_ACKS = Source("pending acks", _pending_acks)
DEAD_LETTERS = Source("dead letters", _dead)


def _ack_lag(limits: Limits) -> Check:
    """A committed real message that a group subscribed at the time has not acked past the
    threshold (every row of ``PENDING_ACKS``)."""
    reason = F.format_string(
        "not acked by group %s %d s after commit",
        F.col("consumer_group"),
        ((F.lit(limits.as_of) - F.col("real_at")) / 1000).cast("long"),
    )
    return Check(None, reason, F.col("real_at"), consumer_group=F.col("consumer_group"))


def _dead_lettered(limits: Limits) -> Check:
    """A committed message a group gave up on (every row of ``DEAD_LETTERS``)."""
    reason = F.format_string("dead-lettered by group %s", F.col("consumer_group"))
    return Check(None, reason, F.col("dlq_at"), consumer_group=F.col("consumer_group"))


KINDS = (
    Kind(
        name=ACK_LAG,
        severity=WARNING,
        description=(
            "a real message not acked (a `deliveries` row in state ACKED) by a group subscribed"
            " to its topic (and tag) when it was stored, older than `--lag-after`;"
            " one row per group"
        ),
        source=PENDING_ACKS,
        check=_ack_lag,
        plant=Scenario(delivery="EXPIRED"),
    ),
    Kind(
        name=DEAD_LETTERED,
        severity=WARNING,
        description=(
            "a copy of the real message in `%DLQ%{group}` (same msg id, or `origin_id` = the"
            " real message); not also reported as lag"
        ),
        source=DEAD_LETTERS,
        check=_dead_lettered,
        plant=Scenario(delivery="NACKED", dead_letter=True, debit=False, credits=0),
    ),
)
_BY_NAME = {kind.name: kind for kind in KINDS}


def ack_lag(
    view: DataFrame,
    subscriptions: DataFrame,
    acks: DataFrame,
    dead: DataFrame,
    *,
    as_of: int,
    older_than: int,
) -> DataFrame:
    limits = Limits(as_of, Thresholds(ack_lag_ms=older_than))
    evidence = Evidence(view, dead, subscriptions, acks, None, limits)
    return rows_of(_pending_acks(evidence), _BY_NAME[ACK_LAG], limits)


def dead_lettered(dead: DataFrame) -> DataFrame:
    return rows_of(dead, _BY_NAME[DEAD_LETTERED], UNTIMED)
