"""A synthetic broker store (and the two banks' ledgers) of N transactions, generated with Spark.

Transaction ``i`` follows the scenario ``SCENARIOS[i % period]`` (``"ok"`` past the end of the
list): a healthy transfer is a half, a commit op record, a real message, an ack by the subscribed
group, Bob's debit and Smith's credit.  The first scenarios plant one anomaly each, one per
registered kind, as the kind's ``plant`` says (``spark_reconcile.scenario.Scenario``); the others
are healthy variations the job must not report (rollbacks, a half still in flight, a commit that
arrived after midnight).  ``expected`` says what a run must find.

Used by the integration tests (written into real SQLite / PostgreSQL stores) and by the benchmark
(written as a Parquet export, or bulk-loaded into PostgreSQL).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_reconcile.anomalies import REGISTRY
from spark_reconcile.anomalies.topics import DLQ_PREFIX, HALF_TOPIC, OP_TOPIC
from spark_reconcile.config import DAY_MS, HOUR_MS, day_start_ms
from spark_reconcile.scenario import Scenario

HEALTHY_PLANS = {
    "rolled_back": Scenario(
        state="ROLLED_BACK", decision="ROLLBACK", reals=0, debit=False, credits=0
    ),
    "rolled_back_by_check": Scenario(
        state="ROLLED_BACK",
        decision="ROLLBACK",
        resolved_by="check",
        check_times=3,
        reals=0,
        debit=False,
        credits=0,
    ),
    "in_flight": Scenario(
        state="PREPARED", decision=None, reals=0, debit=False, credits=0, created_late=True
    ),
    "late_commit": Scenario(created_late=True, resolved_late=True),
}
PLANS = {**{kind.name: kind.plant for kind in REGISTRY}, **HEALTHY_PLANS, "ok": Scenario()}
PLANTED = tuple(kind.name for kind in REGISTRY)
HEALTHY = tuple(HEALTHY_PLANS)
SCENARIOS = (*PLANTED, *HEALTHY)

TOPIC = "transfer"
GROUP = "bank-smith"
PRODUCER_GROUP = "bank-bob"
QUEUES = 4


@dataclasses.dataclass(frozen=True)
class Synthetic:
    """N transactions created on ``day``; one of each planted kind per ``period`` of them."""

    n: int
    day: dt.date
    period: int = 1000

    def __post_init__(self) -> None:
        if self.period < len(SCENARIOS):
            raise ValueError(f"period must be at least {len(SCENARIOS)}")

    @property
    def start(self) -> int:
        return day_start_ms(self.day)

    @property
    def as_of(self) -> int:
        """The time to judge at: half an hour after the day (in-flight halves are young)."""
        return self.start + DAY_MS + HOUR_MS // 2

    def expected(self) -> set[tuple[str, str]]:
        """(kind, transaction_id) of every planted anomaly."""
        return {
            (PLANTED[i % self.period], tx_id(i))
            for i in range(self.n)
            if i % self.period < len(PLANTED)
        }


def tx_id(i: int) -> str:
    return f"tx-{i:010d}"


def _names(test: Callable[[Scenario], bool]) -> list[str]:
    return [name for name, plan in PLANS.items() if test(plan)]


def _where(test: Callable[[Scenario], bool]) -> Column:
    """True where the transaction's scenario passes ``test``."""
    return F.col("scenario").isin(*_names(test))


def _choose(value: Callable[[Scenario], Any], otherwise: Any = None) -> Column:
    """``value`` of the transaction's scenario, or ``otherwise`` (NULL if not given) where that
    is None: a CASE with one branch per value."""
    values = dict.fromkeys(value(plan) for plan in PLANS.values())
    column: Column | None = None
    for v in values:
        if v is None or v == otherwise:
            continue
        test = F.col("scenario").isin(*(n for n, plan in PLANS.items() if value(plan) == v))
        column = F.when(test, v) if column is None else column.when(test, v)
    if column is None:
        return F.lit(otherwise)
    return column if otherwise is None else column.otherwise(otherwise)


def base(spark: SparkSession, spec: Synthetic) -> DataFrame:
    """One row per transaction: index, ids, scenario and the times of its steps."""
    names = F.array(*(F.lit(s) for s in SCENARIOS))
    bucket = F.col("i") % spec.period
    spread = (DAY_MS - 3 * HOUR_MS) // max(spec.n, 1)
    end = spec.start + DAY_MS
    scenario = F.when(bucket < len(SCENARIOS), F.element_at(names, (bucket + 1).cast("int")))
    df = (
        spark.range(spec.n)
        .withColumnRenamed("id", "i")
        .withColumn("scenario", F.coalesce(scenario, F.lit("ok")))
        .withColumn("tx", F.concat(F.lit("tx-"), F.lpad(F.col("i").cast("string"), 10, "0")))
        .withColumn("msg_id", F.concat(F.lit("m-"), F.lpad(F.col("i").cast("string"), 10, "0")))
        .withColumn("transfer", F.concat(F.lit("tr-"), F.col("i").cast("string")))
        .withColumn("qid", (F.col("i") % QUEUES).cast("int"))
        .withColumn("amount", F.lit(100) + F.col("i") % 5000)
    )
    late = _where(lambda s: s.created_late)
    created = F.when(late, F.lit(end - 5 * 60_000)).otherwise(F.col("i") * spread + spec.start)
    resolved_late = _where(lambda s: s.resolved_late)
    resolved = F.when(resolved_late, F.lit(end + 5 * 60_000)).otherwise(F.col("created") + 1000)
    return df.withColumn("created", created).withColumn("resolved", resolved)


def transactions(b: DataFrame) -> DataFrame:
    state = _choose(lambda s: s.state, otherwise="COMMITTED")
    checks = _choose(lambda s: s.check_times, otherwise=0)
    checked = _where(lambda s: s.check_times > 0)
    open_ = _where(lambda s: s.state == "PREPARED")
    resolved = _where(lambda s: s.decision is not None)
    resolved_by = _choose(lambda s: s.resolved_by if s.decision is not None else None)
    null = F.lit(None).cast("long")
    return b.select(
        F.col("tx").alias("transaction_id"),
        "msg_id",
        F.lit(PRODUCER_GROUP).alias("producer_group"),
        F.lit(TOPIC).alias("topic"),
        F.col("i").alias("half_offset"),
        state.alias("state"),
        checks.cast("int").alias("check_times"),
        null.alias("check_immunity_ms"),
        F.col("created").alias("created_at"),
        F.when(open_, F.col("created") + 60_000).alias("next_check_at"),
        F.lit(None).cast("string").alias("claimed_by"),
        null.alias("claimed_until"),
        F.when(checked, F.col("created") + 60_000).alias("last_checked_at"),
        F.when(resolved, F.col("resolved")).alias("resolved_at"),
        resolved_by.alias("resolved_by"),
        F.col("qid").alias("real_queue_id"),
        F.when(_where(lambda s: s.state == "DISCARDED"), F.col("created") + HOUR_MS).alias(
            "discarded_at"
        ),
    )


def _message(
    b: DataFrame,
    *,
    slot: int,
    topic: Column,
    stored_at: Column,
    properties: dict[str, str] | Column,
    queue_id: Column | None = None,
    offset: Column | None = None,
    tags: str = "TagA",
    dedup: bool = False,
    origin_slot: int | None = None,
) -> DataFrame:
    """Row ``slot`` of each transaction's messages.  Without ``queue_id`` and ``offset``, in a
    topic of one queue: queue 0, at the transaction's row number."""
    props = F.lit(json.dumps(properties)) if isinstance(properties, dict) else properties
    queue_id = F.lit(0) if queue_id is None else queue_id
    offset = F.col("i") if offset is None else offset
    null = F.lit(None).cast("long")
    return b.select(
        (F.col("i") * 4 + slot).alias("id"),
        topic.alias("topic"),
        queue_id.cast("int").alias("queue_id"),
        offset.cast("long").alias("queue_offset"),
        "msg_id",
        (F.col("msg_id") if dedup else F.lit(None).cast("string")).alias("dedup_key"),
        F.lit(None).cast("string").alias("content_hash"),
        F.lit("text").alias("encoding"),
        F.lit(tags).alias("tags"),
        F.concat(F.lit('["'), F.col("transfer"), F.lit('"]')).alias("keys"),
        props.alias("properties"),
        F.lit(None).cast("string").alias("sharding_key"),
        F.col("tx").alias("transaction_id"),
        F.lit(PRODUCER_GROUP).alias("producer_group"),
        stored_at.alias("born_at"),
        stored_at.alias("stored_at"),
        null.alias("deliver_at"),
        F.lit(0).alias("reconsume_times"),
        (F.col("i") * 4 + origin_slot if origin_slot is not None else null).alias("origin_id"),
    )


def messages(b: DataFrame, spec: Synthetic) -> DataFrame:
    half_props = {"REAL_TOPIC": TOPIC, "PGROUP": PRODUCER_GROUP, "TRAN_MSG": "true"}
    decision = _choose(lambda s: s.decision, otherwise="COMMIT")
    op_props = F.to_json(
        F.create_map(F.lit("DECISION"), decision, F.lit("RESOLVED_BY"), F.lit("producer"))
    )
    half = _message(
        b,
        slot=1,
        topic=F.lit(HALF_TOPIC),
        stored_at=F.col("created"),
        properties=half_props,
        dedup=True,
    )
    op = _message(
        b.where(_where(lambda s: s.decision is not None)),
        slot=2,
        topic=F.lit(OP_TOPIC),
        stored_at=F.col("resolved"),
        properties=op_props,
        tags="d",
    )
    real_props = {"TRAN_MSG": "true", "PGROUP": PRODUCER_GROUP}
    real = _message(
        b.where(_where(lambda s: s.reals > 0)),
        slot=3,
        topic=F.lit(TOPIC),
        queue_id=F.col("qid"),
        offset=F.floor(F.col("i") / QUEUES),
        stored_at=F.col("resolved"),
        properties=real_props,
        origin_slot=1,
    )
    twin = _message(
        b.where(_where(lambda s: s.reals > 1)),
        slot=4,
        topic=F.lit(TOPIC),
        queue_id=F.col("qid"),
        offset=F.col("i") + spec.n,
        stored_at=F.col("resolved") + 2000,
        properties=real_props,
        origin_slot=1,
    )
    dead = _message(
        b.where(_where(lambda s: s.dead_letter)),
        slot=4,
        topic=F.lit(f"{DLQ_PREFIX}{GROUP}"),
        stored_at=F.col("resolved") + 60_000,
        properties=real_props,
        origin_slot=3,
    )
    return half.unionByName(op).unionByName(real).unionByName(twin).unionByName(dead)


def deliveries(b: DataFrame) -> DataFrame:
    """One delivery of each real message to the group, in its scenario's state (acked, expired
    or nacked)."""
    state = _choose(lambda s: s.delivery, otherwise="ACKED")
    at = F.col("resolved") + 100
    return b.where(_where(lambda s: s.reals > 0)).select(
        (F.col("i") + 1).alias("id"),
        F.lit(GROUP).alias("consumer_group"),
        F.lit("smith-1").alias("client_id"),
        F.lit(TOPIC).alias("topic"),
        F.col("qid").alias("queue_id"),
        F.floor(F.col("i") / QUEUES).cast("long").alias("queue_offset"),
        "msg_id",
        F.concat(F.lit("rh-"), F.col("i").cast("string")).alias("receipt_handle"),
        state.alias("state"),
        F.lit(0).alias("reconsume_times"),
        at.alias("delivered_at"),
        (at + 30_000).alias("invisible_until"),
        (at + 50).alias("finished_at"),
    )


def subscriptions(spark: SparkSession, spec: Synthetic) -> DataFrame:
    return spark.createDataFrame(
        [(GROUP, TOPIC, "*", spec.start - DAY_MS)],
        "consumer_group string, topic string, expression string, created_at long",
    )


def consumer_groups(spark: SparkSession, spec: Synthetic) -> DataFrame:
    return spark.createDataFrame(
        [(GROUP, "CLUSTERING", "LAST_OFFSET", None, 16, False, spec.start - DAY_MS)],
        "name string, message_model string, consume_from string, consume_timestamp long, "
        "max_reconsume_times int, orderly boolean, created_at long",
    )


def ledger(b: DataFrame, side: str) -> DataFrame:
    """Bob's debits (``side='DEBIT'``) or Smith's credits, in the demo's ``transfers`` shape."""
    if side == "DEBIT":
        rows = b.where(_where(lambda s: s.debit)).withColumn("at", F.col("created"))
        account = "bob"
    else:
        rows = b.where(_where(lambda s: s.credits > 0)).withColumn("at", F.col("resolved") + 150)
        account = "smith"
        twice = rows.where(_where(lambda s: s.credits > 1)).withColumn("at", F.col("at") + 10_000)
        rows = rows.unionByName(twice)
        bumped = F.col("amount") + _choose(lambda s: s.credit_extra, otherwise=0)
        rows = rows.withColumn("amount", bumped)
    return rows.select(
        F.col("transfer").alias("transfer_id"),
        F.concat(F.lit(f"{account}-"), (F.col("i") % 1000).cast("string")).alias("account_id"),
        F.col("amount").cast("long"),
        F.lit(side).alias("direction"),
        F.col("at").alias("created_at"),
    )


def store(spark: SparkSession, spec: Synthetic) -> dict[str, DataFrame]:
    """The broker's tables of the synthetic store, columns as in the schema (bodies left out)."""
    b = base(spark, spec)
    return {
        "transactions": transactions(b),
        "messages": messages(b, spec),
        "deliveries": deliveries(b),
        "subscriptions": subscriptions(spark, spec),
        "consumer_groups": consumer_groups(spark, spec),
    }


def ledgers(spark: SparkSession, spec: Synthetic) -> dict[str, DataFrame]:
    """The ``transfers`` table of each bank: ``bob`` (debits) and ``smith`` (credits)."""
    b = base(spark, spec)
    return {"bob": ledger(b, "DEBIT"), "smith": ledger(b, "CREDIT")}
