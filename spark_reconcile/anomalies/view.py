"""The view of the day's transactions: one row per transaction, folded from its messages.

The store kinds read this row (the ``VIEW`` source, found in one pass), the consumer kinds pair it
with the subscriptions and the dead letters, the ledger kinds map its keys to a business id
(``business_id``).  Inputs are the frames ``extract`` prepares (times in epoch ms):

* ``transactions``  transaction_id, msg_id, producer_group, topic, state, created_at, resolved_at,
                    discarded_at
* ``messages``      id, topic, msg_id, tags, keys, properties, transaction_id, origin_id, stored_at
                    (the messages that have a transaction id)
* ``scheduled``     the same columns, for delayed messages parked in SCHEDULE_TOPIC_XXXX
"""

from __future__ import annotations

import re

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType

from spark_reconcile.anomalies.kind import Evidence, Source
from spark_reconcile.anomalies.topics import (
    CHECK_MAX_TOPIC,
    DLQ_PREFIX,
    HALF_TOPIC,
    OP_TOPIC,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
)
from spark_reconcile.config import KeyMapping, Window


def business_id(keys: Column, mapping: KeyMapping) -> Column:
    """The ledger's business id from a message's keys (a JSON array of strings)."""
    parsed = F.from_json(keys, ArrayType(StringType()))
    pattern = mapping.pattern
    if pattern is None:
        return F.get(parsed, mapping.index)
    matching = F.filter(parsed, lambda k: k.rlike(pattern))
    first = F.get(matching, 0)
    if re.compile(pattern).groups:
        return F.regexp_extract(first, pattern, 1)
    return first


def _is_real(topic: Column) -> Column:
    system = topic.isin(HALF_TOPIC, OP_TOPIC, CHECK_MAX_TOPIC, SCHEDULE_TOPIC)
    copies = topic.startswith(RETRY_PREFIX) | topic.startswith(DLQ_PREFIX)
    return ~system & ~copies


def _parked_real(topic: Column) -> Column:
    """A delayed real message waiting in SCHEDULE_TOPIC_XXXX -- not a consumer's retry copy
    parked there (its REAL_TOPIC is ``%RETRY%{group}``), which keeps the transaction id too."""
    target = F.get_json_object("properties", "$.REAL_TOPIC")
    retry = target.startswith(RETRY_PREFIX) | target.startswith(DLQ_PREFIX)
    return (topic == SCHEDULE_TOPIC) & ~F.coalesce(retry, F.lit(False))


# What a message is to its transaction, as a small number: the pass over the messages compares
# the role of each of its rows eight times.
ROLE_HALF, ROLE_COMMIT, ROLE_ROLLBACK, ROLE_REAL, ROLE_PARKED = 1, 2, 3, 4, 5


def _decision() -> Column:
    """COMMIT or ROLLBACK, from an op record's properties.

    Op records are the broker's own, written as compact JSON, where the text
    ``"DECISION":"COMMIT"`` can only be that key with that value (a quote inside a JSON string is
    escaped).  Looking for it costs a fraction of parsing the JSON of every op record; any other
    spelling of the same object is parsed."""
    properties = F.col("properties")
    parsed = F.get_json_object(properties, "$.DECISION")
    return (
        F.when(properties.contains('"DECISION":"COMMIT"'), ROLE_COMMIT)
        .when(properties.contains('"DECISION":"ROLLBACK"'), ROLE_ROLLBACK)
        .when(parsed == "COMMIT", ROLE_COMMIT)
        .when(parsed == "ROLLBACK", ROLE_ROLLBACK)
    )


def _role(topic: Column) -> Column:
    """What a message with a transaction id is to its transaction: ``ROLE_HALF``,
    ``ROLE_COMMIT`` or ``ROLE_ROLLBACK`` (op records), ``ROLE_REAL`` (in the user's topic),
    ``ROLE_PARKED`` (a delayed real message in SCHEDULE_TOPIC_XXXX); NULL for retry, dead-letter
    and discard copies."""
    return (
        F.when(topic == HALF_TOPIC, ROLE_HALF)
        .when(topic == OP_TOPIC, _decision())
        .when(_parked_real(topic), ROLE_PARKED)
        .when(_is_real(topic), ROLE_REAL)
    )


VIEW_TRANSACTION_COLUMNS = (
    "transaction_id",
    "msg_id",
    "topic",
    "state",
    "check_times",
    "created_at",
    "discarded_at",
)  # what the checks read: the others are neither read from the source, shuffled nor cached


HALF_ID = "half_id"  # the view's link to its half (a message id): keys and tags stay there


def halves(messages: DataFrame) -> DataFrame:
    """The halves among ``messages``: their id (the view's ``half_id``), keys and tags."""
    return messages.where(F.col("topic") == HALF_TOPIC).select(
        F.col("id").alias(HALF_ID), "keys", "tags"
    )


def _counts(messages: DataFrame, scheduled: DataFrame) -> DataFrame:
    """Per transaction id, in one pass over its messages with numeric aggregates only (so Spark
    keeps a hash aggregation): its half's id, its commit and rollback op records, the first
    one's time, and its real messages -- a parked one counting until a released copy replaces
    it."""
    parked_ids = scheduled.where(_parked_real(F.col("topic"))).select(
        F.col("id").alias("origin_id"), F.lit(True).alias("copies_parked")
    )
    role = F.col("role")
    real, parked = role == ROLE_REAL, role == ROLE_PARKED
    return (
        messages.where(F.col("transaction_id").isNotNull())
        .join(F.broadcast(parked_ids), "origin_id", "left")
        .select(
            "transaction_id",
            "id",
            "stored_at",
            "copies_parked",
            _role(F.col("topic")).alias("role"),
        )
        .groupBy("transaction_id")
        .agg(
            F.min(F.when(role == ROLE_HALF, F.col("id"))).alias(HALF_ID),
            F.count(F.when(role == ROLE_COMMIT, 1)).alias("commit_ops"),
            F.count(F.when(role == ROLE_ROLLBACK, 1)).alias("rollback_ops"),
            F.min(F.when(role.isin(ROLE_COMMIT, ROLE_ROLLBACK), F.col("stored_at"))).alias("op_at"),
            F.count(F.when(real, 1)).alias("in_topic"),
            F.count(F.when(parked, 1)).alias("parked"),
            F.count(F.when(real & F.col("copies_parked"), 1)).alias("released"),
            F.coalesce(F.min(F.when(real, F.col("id"))), F.min(F.when(parked, F.col("id")))).alias(
                "real_id"
            ),
            F.coalesce(
                F.min(F.when(real, F.col("stored_at"))), F.min(F.when(parked, F.col("stored_at")))
            ).alias("real_at"),
        )
        .withColumn(
            "real_count",
            F.col("in_topic") + F.greatest(F.col("parked") - F.col("released"), F.lit(0)),
        )
        .drop("in_topic", "parked", "released")
    )


def transaction_view(
    transactions: DataFrame, messages: DataFrame, scheduled: DataFrame, window: Window
) -> DataFrame:
    """One row per transaction created in the window: its state, its half's id (``half_id``),
    how many commit / rollback op records and real messages it has, and when.

    The counts come from ``_counts``: the messages and the transactions are shuffled once each,
    by transaction id, and joined without sorting (a hash join on the counts).  The half's keys
    and tags are not carried: ``with_half`` joins them to the view when every row needs them
    (the ledgers' books), ``rows.completed`` to the few rows reported.  A delayed real message
    parked in SCHEDULE_TOPIC_XXXX (``scheduled``: those rows, few) counts as the real message
    until a released copy (``origin_id`` = the parked row) replaces it."""
    counts = _counts(messages, scheduled)
    day = transactions.where(
        (F.col("created_at") >= window.start) & (F.col("created_at") < window.end)
    ).select(*VIEW_TRANSACTION_COLUMNS)
    return day.join(counts.hint("shuffle_hash"), "transaction_id", "left").fillna(
        0, ["commit_ops", "rollback_ops", "real_count"]
    )


def with_half(view: DataFrame, messages: DataFrame) -> DataFrame:
    """The view with its half's keys and tags, every row (a join of the whole view)."""
    return view.join(halves(messages), HALF_ID, "left")


def _view(evidence: Evidence) -> DataFrame:
    return evidence.view


# The view is cached and wide: the kinds reading it are found in one scan of it.
VIEW = Source("view", _view, one_pass=True)
