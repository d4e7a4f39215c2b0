"""The consumers' kinds: real messages a subscribed group has not acked, or gave up on (and
the dead letters it consumed after all, once resent).

Inputs besides the view (columns as in the broker's store):

* ``dlq``           the messages of the dead-letter topics ``%DLQ%{group}``
* ``subscriptions`` consumer_group, topic, expression, created_at
* ``acks``          consumer_group, msg_id (deliveries in state ACKED)

``dead_letters`` pairs the day's real messages with their dead-letter copies and says whether the
group acked the message after all (the ``DEAD_LETTERS`` source, persisted by the job: ``ack_lag``
reads it too); the ``PENDING_ACKS`` source is what a subscribed group should have acked by now
and has not.  ``ack_lag``, ``dead_lettered`` and ``dead_letter_resolved`` apply one kind alone.

A dead letter is resolved when its group acked the message: a group that gave up on a message
only gets it again when an operator resends it from ``%DLQ%{group}`` (the copy goes back through
``%RETRY%{group}`` with the same msg id, and its ack is a ``deliveries`` row in state ACKED).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_reconcile.anomalies.kind import (
    INFO,
    UNTIMED,
    WARNING,
    Check,
    Evidence,
    Kind,
    Limits,
    Source,
)
from spark_reconcile.anomalies.rows import TAG_FILTER, completed, rows_of
from spark_reconcile.anomalies.topics import DLQ_PREFIX
from spark_reconcile.anomalies.view import HALF_ID
from spark_reconcile.config import Thresholds
from spark_reconcile.scenario import Scenario

ACK_LAG = "ack_lag"
DEAD_LETTERED = "dead_lettered"
DEAD_LETTER_RESOLVED = "dead_letter_resolved"


def dead_letters(view: DataFrame, dlq: DataFrame, acks: DataFrame) -> DataFrame:
    """Dead-letter copies of the day's real messages: consumer_group, msg_id and when, matched on
    the msg id or on ``origin_id`` pointing at the real message; ``acked`` when the group acked
    the message (after a resend)."""
    copies = dlq.where(F.col("topic").startswith(DLQ_PREFIX)).select(
        F.expr(f"substring(topic, {len(DLQ_PREFIX) + 1})").alias("consumer_group"),
        F.col("msg_id").alias("dlq_msg_id"),
        "origin_id",
        F.col("stored_at").alias("dlq_at"),
    )
    real = view.where(F.col("real_count") > 0)
    by_msg = real.join(F.broadcast(copies), real["msg_id"] == copies["dlq_msg_id"])
    by_origin = real.join(F.broadcast(copies), real["real_id"] == copies["origin_id"])
    pairs = (
        by_msg.unionByName(by_origin)
        .groupBy("transaction_id", "msg_id", HALF_ID, "created_at", "consumer_group")
        .agg(F.min("dlq_at").alias("dlq_at"))
    )
    # The dead letters are few: the acks are scanned once against them, not joined whole.
    acked = (
        acks.select("consumer_group", "msg_id")
        .join(F.broadcast(pairs.select("consumer_group", "msg_id")), ["consumer_group", "msg_id"])
        .distinct()
        .withColumn("acked", F.lit(True))
    )
    return pairs.join(acked, ["consumer_group", "msg_id"], "left").withColumn(
        "acked", F.coalesce(F.col("acked"), F.lit(False))
    )


def _every_tag(expression: Column) -> Column:
    """RocketMQ's tag expression ``*`` (or empty) takes all; else it lists ``TagA || TagB``
    (``rows.tags_listed``)."""
    return expression.isNull() | (F.trim(expression) == "") | (F.trim(expression) == "*")


def _expected_acks(view: DataFrame, subscriptions: DataFrame, before: int) -> DataFrame:
    """(real message, group) pairs, narrow -- the group, the message's ids and times: each real
    message stored before ``before`` with every group subscribed to its topic when it was
    stored.  A subscription to some tags only leaves its expression in ``TAG_FILTER``: the
    tags are the half's, tested by ``rows.completed`` on the few pairs reported."""
    real = view.where((F.col("real_count") > 0) & (F.col("real_at") < before))
    subs = subscriptions.select(
        F.col("consumer_group"),
        F.col("topic").alias("sub_topic"),
        "expression",
        F.col("created_at").alias("subscribed_at"),
    )
    expression = F.col("expression")
    return (
        real.join(F.broadcast(subs), real["topic"] == subs["sub_topic"])
        .where(F.col("subscribed_at") <= F.col("real_at"))
        .select(
            "consumer_group",
            "msg_id",
            "transaction_id",
            "created_at",
            "real_at",
            HALF_ID,
            F.when(~_every_tag(expression), expression).alias(TAG_FILTER),
        )
    )


def _pending_acks(evidence: Evidence) -> DataFrame:
    """The expected acks past the ack-lag threshold that no ack answers; dead-lettered pairs
    are left out (reported as such).  The pairs subscribed to some tags only are kept here and
    tested by ``rows.completed``."""
    limits = evidence.limits
    before = limits.as_of - limits.thresholds.ack_lag_ms
    expected = _expected_acks(evidence.view, evidence.subscriptions, before)
    # A shuffled hash join of the narrow pairs: at 10M the acks are too big to broadcast, and a
    # sort-merge join sorted both 10M-row sides only to find the few not acked.
    acked = evidence.acks.select("consumer_group", "msg_id").hint("shuffle_hash")
    return expected.join(acked, ["consumer_group", "msg_id"], "left_anti").join(
        F.broadcast(evidence.dead.select("consumer_group", "msg_id")),
        ["consumer_group", "msg_id"],
        "left_anti",
    )


def _dead(evidence: Evidence) -> DataFrame:
    return evidence.dead


PENDING_ACKS = Source("pending acks", _pending_acks)
DEAD_LETTERS = Source("dead letters", _dead, one_pass=True)  # not acked, or acked after all


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
    """A committed message a group gave up on and has not acked since."""
    reason = F.format_string("dead-lettered by group %s", F.col("consumer_group"))
    return Check(~F.col("acked"), reason, F.col("dlq_at"), consumer_group=F.col("consumer_group"))


def _dead_letter_resolved(limits: Limits) -> Check:
    """A dead letter its group acked after all: resent from the DLQ and consumed."""
    reason = F.format_string(
        "dead-lettered by group %s, then resent and acked by it", F.col("consumer_group")
    )
    return Check(F.col("acked"), reason, F.col("dlq_at"), consumer_group=F.col("consumer_group"))


KINDS = (
    Kind(
        name=ACK_LAG,
        severity=WARNING,
        description=(
            "a real message not acked (a `deliveries` row in state ACKED) by a group subscribed"
            " to its topic (and tag) when it was stored, older than `--lag-after`;"
            " one row per group"
        ),
        action="look at the group in the console: are its consumers up, behind, or failing on this message? It clears once they ack it",
        source=PENDING_ACKS,
        check=_ack_lag,
        plant=Scenario(delivery="EXPIRED"),
    ),
    Kind(
        name=DEAD_LETTERED,
        severity=WARNING,
        description=(
            "a copy of the real message in `%DLQ%{group}` (same msg id, or `origin_id` = the"
            " real message) and no ack of it by the group; not also reported as lag"
        ),
        action=(
            "fix what made the consumer fail (its log), then resend the message from the"
            " group's dead letters in the console"
        ),
        source=DEAD_LETTERS,
        check=_dead_lettered,
        plant=Scenario(delivery="NACKED", dead_letter=True, debit=False, credits=0),
    ),
    Kind(
        name=DEAD_LETTER_RESOLVED,
        severity=INFO,
        description=(
            "a dead letter (as `dead_lettered`) that its group acked after all: an operator"
            " resent it from `%DLQ%{group}` and the group consumed it"
        ),
        action=(
            "nothing: resolved, listed so the day's resends can be traced; check the business"
            " effect happened once if in doubt"
        ),
        source=DEAD_LETTERS,
        check=_dead_letter_resolved,
        plant=Scenario(dead_letter=True),
    ),
)
_BY_NAME = {kind.name: kind for kind in KINDS}


def ack_lag(
    view: DataFrame,
    subscriptions: DataFrame,
    acks: DataFrame,
    dead: DataFrame,
    messages: DataFrame,
    *,
    as_of: int,
    older_than: int,
) -> DataFrame:
    """The ``ack_lag`` rows, completed (``messages`` holds the halves: keys, tags)."""
    limits = Limits(as_of, Thresholds(ack_lag_ms=older_than))
    evidence = Evidence(view, dead, subscriptions, acks, None, limits)
    return completed(rows_of(_pending_acks(evidence), _BY_NAME[ACK_LAG], limits), messages)


def dead_lettered(dead: DataFrame) -> DataFrame:
    return rows_of(dead, _BY_NAME[DEAD_LETTERED], UNTIMED)


def dead_letter_resolved(dead: DataFrame) -> DataFrame:
    return rows_of(dead, _BY_NAME[DEAD_LETTER_RESOLVED], UNTIMED)
