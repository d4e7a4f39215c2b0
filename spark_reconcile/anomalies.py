"""The transform: pure ``DataFrame -> DataFrame`` functions, one per anomaly kind.

Inputs are the frames ``extract`` prepares (columns as in the broker's store, times epoch ms):

* ``transactions``  transaction_id, msg_id, producer_group, topic, state, created_at, resolved_at,
                    discarded_at
* ``messages``      id, topic, msg_id, tags, keys, properties, transaction_id, origin_id, stored_at
                    (the messages that have a transaction id)
* ``dlq``           the same columns, for the dead-letter copies (topics ``%DLQ%{group}``)
* ``scheduled``     the same columns, for delayed messages parked in SCHEDULE_TOPIC_XXXX
* ``subscriptions`` consumer_group, topic, expression, created_at
* ``acks``          consumer_group, msg_id (deliveries in state ACKED)
* ``ledger``        bank, business_id, account_id, amount (>= 0), direction (DEBIT|CREDIT), created_at

``transaction_view`` folds the messages of each transaction of the day into one row; the store's
checks read that row (``store_anomalies`` applies them all in one pass), the ack checks pair it
with subscriptions, the ledger checks read ``ledger_view``.  Every check returns rows of
``ANOMALY_COLUMNS``.
"""

from __future__ import annotations

import dataclasses
import re
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType

from spark_reconcile.config import KeyMapping, Window

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"

CRITICAL = "critical"
WARNING = "warning"

STUCK = "stuck_half"
DISCARDED = "discarded_half"
COMMIT_WITHOUT_REAL = "commit_without_real"
REAL_WITHOUT_COMMIT = "real_without_commit"
ROLLBACK_WITH_REAL = "rollback_with_real"
DUPLICATE_REAL = "duplicate_real"
ACK_LAG = "ack_lag"
DEAD_LETTERED = "dead_lettered"
DEBIT_WITHOUT_CREDIT = "debit_without_credit"
CREDIT_WITHOUT_DEBIT = "credit_without_debit"
AMOUNT_MISMATCH = "amount_mismatch"
CREDIT_FOR_ROLLED_BACK = "credit_for_rolled_back"
DOUBLE_CREDIT = "double_credit"

SEVERITY = {
    STUCK: WARNING,
    DISCARDED: WARNING,
    COMMIT_WITHOUT_REAL: WARNING,
    REAL_WITHOUT_COMMIT: WARNING,
    ROLLBACK_WITH_REAL: CRITICAL,
    DUPLICATE_REAL: CRITICAL,
    ACK_LAG: WARNING,
    DEAD_LETTERED: WARNING,
    DEBIT_WITHOUT_CREDIT: WARNING,
    CREDIT_WITHOUT_DEBIT: CRITICAL,
    AMOUNT_MISMATCH: CRITICAL,
    CREDIT_FOR_ROLLED_BACK: CRITICAL,
    DOUBLE_CREDIT: CRITICAL,
}
KINDS = tuple(SEVERITY)

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


def anomaly(
    df: DataFrame,
    kind: str,
    reason: Column,
    *,
    event_at: Column,
    consumer_group: Column | None = None,
) -> DataFrame:
    """Shape ``df`` (which has transaction_id, msg_id, keys, created_at, and business_id for the
    ledger kinds) as rows of ``ANOMALY_COLUMNS`` of ``kind``."""
    return shaped(
        df,
        kind=F.lit(kind),
        severity=F.lit(SEVERITY[kind]),
        reason=reason,
        event_at=event_at,
        consumer_group=consumer_group,
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
    """``anomaly`` with the kind and severity given as columns."""
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


# --- preparing the view -----------------------------------------------------------------------


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


def transaction_view(
    transactions: DataFrame, messages: DataFrame, scheduled: DataFrame, window: Window
) -> DataFrame:
    """One row per transaction created in the window: its state, its half's keys and tags, how
    many commit / rollback op records and real messages it has, and when.

    The counts come from one pass over the messages with numeric aggregates only (so Spark keeps
    a hash aggregation); the keys and tags from the half, joined.  A delayed real message parked
    in SCHEDULE_TOPIC_XXXX (``scheduled``: those rows, few) counts as the real message until a
    released copy (``origin_id`` = the parked row) replaces it."""
    parked_ids = scheduled.where(_parked_real(F.col("topic"))).select(
        F.col("id").alias("origin_id"), F.lit(True).alias("copies_parked")
    )
    role = F.col("role")
    real, parked = role == ROLE_REAL, role == ROLE_PARKED
    counts = (
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
    halves = messages.where(F.col("topic") == HALF_TOPIC).select("transaction_id", "keys", "tags")
    day = transactions.where(
        (F.col("created_at") >= window.start) & (F.col("created_at") < window.end)
    ).select(*VIEW_TRANSACTION_COLUMNS)
    return (
        day.join(counts, "transaction_id", "left")
        .join(halves, "transaction_id", "left")
        .fillna(0, ["commit_ops", "rollback_ops", "real_count"])
    )


# --- the store: halves, ops and real messages -------------------------------------------------
#
# Each store kind is a ``StoreCheck`` over the view's row: when it is found, the reason and the
# time of the event.  ``stuck_halves`` & co. apply one check (the unit of the tests);
# ``store_anomalies`` applies them all in one pass over the view, each row exploded into the
# kinds it was found by -- the same rows as the union of the single checks.


@dataclasses.dataclass(frozen=True)
class StoreCheck:
    kind: str
    found: Column
    reason: Column
    event_at: Column


def _no_op() -> Column:
    return (F.col("commit_ops") == 0) & (F.col("rollback_ops") == 0)


def _stuck(*, as_of: int, older_than: int) -> StoreCheck:
    """A half with no op record (and no real message: that is ``real_without_commit``), not
    parked as DISCARDED, older than the threshold."""
    found = (
        _no_op()
        & (F.col("real_count") == 0)
        & (F.col("state") != "DISCARDED")
        & (F.col("created_at") < as_of - older_than)
    )
    reason = F.format_string(
        "half in state %s has no op record after %d s (%d checks)",
        F.col("state"),
        ((F.lit(as_of) - F.col("created_at")) / 1000).cast("long"),
        F.col("check_times"),
    )
    return StoreCheck(STUCK, found, reason, F.col("created_at"))


def _discarded() -> StoreCheck:
    """A half parked as DISCARDED after transaction_check_max checks and still unresolved."""
    found = (F.col("state") == "DISCARDED") & _no_op()
    reason = F.format_string(
        "discarded after %d checks: the producer never answered", F.col("check_times")
    )
    return StoreCheck(DISCARDED, found, reason, F.col("discarded_at"))


def _commit_without_real() -> StoreCheck:
    """A commit op record whose real message is missing: consumers never saw the commit."""
    found = (F.col("commit_ops") > 0) & (F.col("real_count") == 0)
    reason = F.lit("commit op record but no real message in the topic")
    return StoreCheck(COMMIT_WITHOUT_REAL, found, reason, F.col("op_at"))


def _real_without_commit() -> StoreCheck:
    """A real message of a transaction that has no op record at all."""
    found = (F.col("real_count") > 0) & _no_op()
    reason = F.format_string("real message in %s without a commit op record", F.col("topic"))
    return StoreCheck(REAL_WITHOUT_COMMIT, found, reason, F.col("real_at"))


def _rollback_with_real() -> StoreCheck:
    """A rolled-back transaction whose message was delivered anyway."""
    found = (F.col("rollback_ops") > 0) & (F.col("real_count") > 0)
    reason = F.format_string(
        "rollback op record and %d real message(s) in %s", F.col("real_count"), F.col("topic")
    )
    return StoreCheck(ROLLBACK_WITH_REAL, found, reason, F.col("real_at"))


def _duplicate_real() -> StoreCheck:
    """More than one real message for one transaction."""
    found = F.col("real_count") > 1
    reason = F.format_string("%d real messages for one transaction", F.col("real_count"))
    return StoreCheck(DUPLICATE_REAL, found, reason, F.col("real_at"))


def _apply(view: DataFrame, check: StoreCheck) -> DataFrame:
    return anomaly(view.where(check.found), check.kind, check.reason, event_at=check.event_at)


def stuck_halves(view: DataFrame, *, as_of: int, older_than: int) -> DataFrame:
    return _apply(view, _stuck(as_of=as_of, older_than=older_than))


def discarded_halves(view: DataFrame) -> DataFrame:
    return _apply(view, _discarded())


def commit_without_real(view: DataFrame) -> DataFrame:
    return _apply(view, _commit_without_real())


def real_without_commit(view: DataFrame) -> DataFrame:
    return _apply(view, _real_without_commit())


def rollback_with_real(view: DataFrame) -> DataFrame:
    return _apply(view, _rollback_with_real())


def duplicate_reals(view: DataFrame) -> DataFrame:
    return _apply(view, _duplicate_real())


def store_anomalies(view: DataFrame, *, as_of: int, stuck_after: int) -> DataFrame:
    """Every store kind in one pass over the view: the rows any check finds (a cheap filter),
    each exploded into one row per kind that found it."""
    checks = [
        _stuck(as_of=as_of, older_than=stuck_after),
        _discarded(),
        _commit_without_real(),
        _real_without_commit(),
        _rollback_with_real(),
        _duplicate_real(),
    ]
    hits = F.array(
        *(
            F.when(
                c.found,
                F.struct(
                    F.lit(c.kind).alias("kind"),
                    c.reason.cast("string").alias("reason"),
                    c.event_at.cast("long").alias("event_at"),
                ),
            )
            for c in checks
        )
    )
    any_found = reduce(Column.__or__, (c.found for c in checks))
    exploded = (
        view.where(any_found)
        .select("*", F.explode(hits).alias("hit"))
        .where(F.col("hit").isNotNull())
    )
    severity = F.create_map(*(F.lit(x) for kind in KINDS for x in (kind, SEVERITY[kind])))
    return shaped(
        exploded,
        kind=F.col("hit.kind"),
        severity=severity[F.col("hit.kind")],
        reason=F.col("hit.reason"),
        event_at=F.col("hit.event_at"),
    )


# --- consumers: acks and dead letters -----------------------------------------------------------


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


def dead_lettered(dead: DataFrame) -> DataFrame:
    """A committed message a group gave up on (``dead_letters`` output)."""
    reason = F.format_string("dead-lettered by group %s", F.col("consumer_group"))
    return anomaly(
        dead,
        DEAD_LETTERED,
        reason,
        event_at=F.col("dlq_at"),
        consumer_group=F.col("consumer_group"),
    )


def _subscribed(expression: Column, tags: Column) -> Column:
    """RocketMQ's tag expression: ``*`` (or empty) takes all, else ``TagA || TagB``."""
    every = expression.isNull() | (F.trim(expression) == "") | (F.trim(expression) == "*")
    listed = F.exists(F.split(expression, r"\|\|"), lambda t: F.trim(t) == tags)
    return every | F.coalesce(listed, F.lit(False))


def ack_lag(
    view: DataFrame,
    subscriptions: DataFrame,
    acks: DataFrame,
    dead: DataFrame,
    *,
    as_of: int,
    older_than: int,
) -> DataFrame:
    """A committed real message that a group subscribed at the time has not acked past the
    threshold (dead-lettered pairs are reported as such, not here)."""
    real = view.where((F.col("real_count") > 0) & (F.col("real_at") < as_of - older_than))
    subs = subscriptions.select(
        F.col("consumer_group"),
        F.col("topic").alias("sub_topic"),
        "expression",
        F.col("created_at").alias("subscribed_at"),
    )
    expected = real.join(F.broadcast(subs), real["topic"] == subs["sub_topic"]).where(
        (F.col("subscribed_at") <= F.col("real_at"))
        & _subscribed(F.col("expression"), F.col("tags"))
    )
    # A shuffled hash join: at 10M the acks are too big to broadcast, and a sort-merge join
    # sorted both 10M-row sides only to find the few not acked.
    acked = acks.select("consumer_group", "msg_id").hint("shuffle_hash")
    pending = expected.join(acked, ["consumer_group", "msg_id"], "left_anti").join(
        F.broadcast(dead.select("consumer_group", "msg_id")),
        ["consumer_group", "msg_id"],
        "left_anti",
    )
    reason = F.format_string(
        "not acked by group %s %d s after commit",
        F.col("consumer_group"),
        ((F.lit(as_of) - F.col("real_at")) / 1000).cast("long"),
    )
    return anomaly(
        pending, ACK_LAG, reason, event_at=F.col("real_at"), consumer_group=F.col("consumer_group")
    )


# --- ledgers -------------------------------------------------------------------------------


def ledger_view(
    view: DataFrame, ledger: DataFrame, window: Window, mapping: KeyMapping
) -> DataFrame:
    """One row per business id in scope: the debits and credits of the banks' ledgers, with the
    transaction of the day it belongs to (if any) and whether that transaction was rolled back.

    In scope: the business ids of the day's transactions, and those whose first ledger row was
    written that day."""
    debit = F.col("direction") == "DEBIT"
    credit = F.col("direction") == "CREDIT"
    books = ledger.groupBy("business_id").agg(
        F.count(F.when(debit, 1)).alias("debit_count"),
        F.sum(F.when(debit, F.col("amount"))).alias("debit_amount"),
        F.min(F.when(debit, F.col("created_at"))).alias("debit_at"),
        F.count(F.when(credit, 1)).alias("credit_count"),
        F.min(F.when(credit, F.col("amount"))).alias("credit_min"),
        F.max(F.when(credit, F.col("amount"))).alias("credit_max"),
        F.min(F.when(credit, F.col("created_at"))).alias("credit_at"),
        F.min("created_at").alias("first_at"),
    )
    rolled_back = (F.col("rollback_ops") > 0) | (F.col("state") == "ROLLED_BACK")
    txs = view.withColumn("business_id", business_id(F.col("keys"), mapping))
    txs = txs.where(F.col("business_id").isNotNull()).select(
        "business_id",
        "transaction_id",
        "msg_id",
        "keys",
        F.col("created_at").alias("tx_created_at"),
        rolled_back.alias("rolled_back"),
    )
    joined = books.join(txs, "business_id", "left")
    in_day = (F.col("first_at") >= window.start) & (F.col("first_at") < window.end)
    return (
        joined.where(F.col("transaction_id").isNotNull() | in_day)
        .withColumn("created_at", F.coalesce(F.col("tx_created_at"), F.col("first_at")))
        .fillna(False, ["rolled_back"])
    )


def debit_without_credit(books: DataFrame, *, as_of: int, older_than: int) -> DataFrame:
    """Money left one bank and never arrived at the other (past the threshold)."""
    found = books.where(
        (F.col("debit_count") > 0)
        & (F.col("credit_count") == 0)
        & (F.col("debit_at") < as_of - older_than)
    )
    reason = F.format_string(
        "debit of %d without a credit%s",
        F.col("debit_amount"),
        F.when(F.col("rolled_back"), " (transfer rolled back)").otherwise(""),
    )
    return anomaly(found, DEBIT_WITHOUT_CREDIT, reason, event_at=F.col("debit_at"))


def credit_without_debit(books: DataFrame) -> DataFrame:
    """Money arrived that never left (rolled-back transfers are reported as such instead)."""
    found = books.where(
        (F.col("credit_count") > 0) & (F.col("debit_count") == 0) & ~F.col("rolled_back")
    )
    reason = F.format_string("credit of %d without a debit", F.col("credit_max"))
    return anomaly(found, CREDIT_WITHOUT_DEBIT, reason, event_at=F.col("credit_at"))


def amount_mismatch(books: DataFrame) -> DataFrame:
    """A credit whose amount is not the amount debited."""
    found = books.where(
        (F.col("debit_count") > 0)
        & (F.col("credit_count") > 0)
        & (
            (F.col("credit_min") != F.col("debit_amount"))
            | (F.col("credit_max") != F.col("debit_amount"))
        )
    )
    reason = F.format_string("debited %d, credited %d", F.col("debit_amount"), F.col("credit_max"))
    return anomaly(found, AMOUNT_MISMATCH, reason, event_at=F.col("credit_at"))


def credit_for_rolled_back(books: DataFrame) -> DataFrame:
    """A credit for a transfer whose transaction was rolled back."""
    found = books.where((F.col("credit_count") > 0) & F.col("rolled_back"))
    reason = F.format_string("credit of %d for a rolled-back transfer", F.col("credit_max"))
    return anomaly(found, CREDIT_FOR_ROLLED_BACK, reason, event_at=F.col("credit_at"))


def double_credit(books: DataFrame) -> DataFrame:
    """The same transfer credited more than once: the consumer was not idempotent."""
    found = books.where(F.col("credit_count") > 1)
    reason = F.format_string("credited %d times", F.col("credit_count"))
    return anomaly(found, DOUBLE_CREDIT, reason, event_at=F.col("credit_at"))
