"""The ledgers' kinds: the banks' debits and credits of one business id that do not match.

``ledger`` (bank, business_id, account_id, amount (>= 0), direction (DEBIT|CREDIT), created_at)
is every bank's ledger unioned; ``ledger_view`` folds it into the books, one row per business id
in scope (the ``BOOKS`` source, absent when the run has no ledger), which each kind filters.  The
functions named after a kind (``debit_without_credit`` & co.) apply it alone.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_reconcile.anomalies.kind import (
    CRITICAL,
    UNTIMED,
    WARNING,
    Check,
    Evidence,
    Kind,
    Limits,
    Source,
)
from spark_reconcile.anomalies.rows import rows_of
from spark_reconcile.anomalies.view import business_id
from spark_reconcile.config import KeyMapping, Thresholds, Window
from spark_reconcile.scenario import Scenario

DEBIT_WITHOUT_CREDIT = "debit_without_credit"
CREDIT_WITHOUT_DEBIT = "credit_without_debit"
AMOUNT_MISMATCH = "amount_mismatch"
CREDIT_FOR_ROLLED_BACK = "credit_for_rolled_back"
DOUBLE_CREDIT = "double_credit"


def _totals(ledger: DataFrame) -> DataFrame:
    """Per business id: how many debits and credits, their amounts and first times."""
    debit = F.col("direction") == "DEBIT"
    credit = F.col("direction") == "CREDIT"
    return ledger.groupBy("business_id").agg(
        F.count(F.when(debit, 1)).alias("debit_count"),
        F.sum(F.when(debit, F.col("amount"))).alias("debit_amount"),
        F.min(F.when(debit, F.col("created_at"))).alias("debit_at"),
        F.count(F.when(credit, 1)).alias("credit_count"),
        F.min(F.when(credit, F.col("amount"))).alias("credit_min"),
        F.max(F.when(credit, F.col("amount"))).alias("credit_max"),
        F.min(F.when(credit, F.col("created_at"))).alias("credit_at"),
        F.min("created_at").alias("first_at"),
    )


def ledger_view(
    view: DataFrame, ledger: DataFrame, window: Window, mapping: KeyMapping
) -> DataFrame:
    """One row per business id in scope: the debits and credits of the banks' ledgers, with the
    transaction of the day it belongs to (if any) and whether that transaction was rolled back.

    In scope: the business ids of the day's transactions, and those whose first ledger row was
    written that day."""
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
    joined = _totals(ledger).join(txs, "business_id", "left")
    in_day = (F.col("first_at") >= window.start) & (F.col("first_at") < window.end)
    return (
        joined.where(F.col("transaction_id").isNotNull() | in_day)
        .withColumn("created_at", F.coalesce(F.col("tx_created_at"), F.col("first_at")))
        .fillna(False, ["rolled_back"])
    )


def _books_of(evidence: Evidence) -> DataFrame | None:
    return evidence.books


BOOKS = Source("books", _books_of)


def _debit_without_credit(limits: Limits) -> Check:
    """Money left one bank and never arrived at the other (past the threshold)."""
    found = (
        (F.col("debit_count") > 0)
        & (F.col("credit_count") == 0)
        & (F.col("debit_at") < limits.as_of - limits.thresholds.credit_lag_ms)
    )
    reason = F.format_string(
        "debit of %d without a credit%s",
        F.col("debit_amount"),
        F.when(F.col("rolled_back"), " (transfer rolled back)").otherwise(""),
    )
    return Check(found, reason, F.col("debit_at"))


def _credit_without_debit(limits: Limits) -> Check:
    """Money arrived that never left (rolled-back transfers are reported as such instead)."""
    found = (F.col("credit_count") > 0) & (F.col("debit_count") == 0) & ~F.col("rolled_back")
    reason = F.format_string("credit of %d without a debit", F.col("credit_max"))
    return Check(found, reason, F.col("credit_at"))


def _amount_mismatch(limits: Limits) -> Check:
    """A credit whose amount is not the amount debited."""
    found = (
        (F.col("debit_count") > 0)
        & (F.col("credit_count") > 0)
        & (
            (F.col("credit_min") != F.col("debit_amount"))
            | (F.col("credit_max") != F.col("debit_amount"))
        )
    )
    reason = F.format_string("debited %d, credited %d", F.col("debit_amount"), F.col("credit_max"))
    return Check(found, reason, F.col("credit_at"))


def _credit_for_rolled_back(limits: Limits) -> Check:
    """A credit for a transfer whose transaction was rolled back."""
    found = (F.col("credit_count") > 0) & F.col("rolled_back")
    reason = F.format_string("credit of %d for a rolled-back transfer", F.col("credit_max"))
    return Check(found, reason, F.col("credit_at"))


def _double_credit(limits: Limits) -> Check:
    """The same transfer credited more than once: the consumer was not idempotent."""
    found = F.col("credit_count") > 1
    reason = F.format_string("credited %d times", F.col("credit_count"))
    return Check(found, reason, F.col("credit_at"))


KINDS = (
    Kind(
        name=DEBIT_WITHOUT_CREDIT,
        severity=WARNING,
        description=(
            "the ledgers show a debit and no credit for the business id, older than"
            " `--credit-after`"
        ),
        action="the money left one bank and has not reached the other: look for `ack_lag` or `dead_lettered` rows of the same transaction and the consumer's log; credit by hand only once sure it will not arrive",
        source=BOOKS,
        check=_debit_without_credit,
        plant=Scenario(credits=0),
    ),
    Kind(
        name=CREDIT_WITHOUT_DEBIT,
        severity=CRITICAL,
        description=(
            "a credit and no debit (unless the transfer was rolled back: `credit_for_rolled_back`)"
        ),
        action="money credited that nobody debited: hold or reverse the credit and find what wrote it",
        source=BOOKS,
        check=_credit_without_debit,
        plant=Scenario(debit=False),
    ),
    Kind(
        name=AMOUNT_MISMATCH,
        severity=CRITICAL,
        description="a credit whose amount is not the sum debited",
        action="correct the credit to the amount debited and find why the consumer changed it",
        source=BOOKS,
        check=_amount_mismatch,
        plant=Scenario(credit_extra=1),
    ),
    Kind(
        name=CREDIT_FOR_ROLLED_BACK,
        severity=CRITICAL,
        description=(
            "a credit for a transfer whose transaction has a ROLLBACK op or state ROLLED_BACK"
        ),
        action="reverse the credit: the transfer was rolled back, its debit never stood",
        source=BOOKS,
        check=_credit_for_rolled_back,
        plant=Scenario(state="ROLLED_BACK", decision="ROLLBACK", reals=0, debit=False),
    ),
    Kind(
        name=DOUBLE_CREDIT,
        severity=CRITICAL,
        description="more than one credit for one business id",
        action="reverse the extra credits and make the consumer idempotent (dedupe on the business id)",
        source=BOOKS,
        check=_double_credit,
        plant=Scenario(credits=2),
    ),
)
_BY_NAME = {kind.name: kind for kind in KINDS}


def debit_without_credit(books: DataFrame, *, as_of: int, older_than: int) -> DataFrame:
    limits = Limits(as_of, Thresholds(credit_lag_ms=older_than))
    return rows_of(books, _BY_NAME[DEBIT_WITHOUT_CREDIT], limits)


def credit_without_debit(books: DataFrame) -> DataFrame:
    return rows_of(books, _BY_NAME[CREDIT_WITHOUT_DEBIT], UNTIMED)


def amount_mismatch(books: DataFrame) -> DataFrame:
    return rows_of(books, _BY_NAME[AMOUNT_MISMATCH], UNTIMED)


def credit_for_rolled_back(books: DataFrame) -> DataFrame:
    return rows_of(books, _BY_NAME[CREDIT_FOR_ROLLED_BACK], UNTIMED)


def double_credit(books: DataFrame) -> DataFrame:
    return rows_of(books, _BY_NAME[DOUBLE_CREDIT], UNTIMED)
