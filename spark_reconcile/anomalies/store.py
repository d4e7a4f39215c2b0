"""The store's kinds: halves, op records and real messages, each a check on the view's row.

All read the ``VIEW`` source, so the job finds them in one scan of it (``store_anomalies``); the
functions named after a kind (``stuck_halves`` & co.) apply one check alone, the unit of the
tests, and give the same rows.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_reconcile.anomalies.kind import CRITICAL, UNTIMED, WARNING, Check, Kind, Limits
from spark_reconcile.anomalies.rows import one_pass, rows_of
from spark_reconcile.anomalies.view import VIEW
from spark_reconcile.config import Thresholds
from spark_reconcile.scenario import Scenario

STUCK = "stuck_half"
DISCARDED = "discarded_half"
COMMIT_WITHOUT_REAL = "commit_without_real"
REAL_WITHOUT_COMMIT = "real_without_commit"
ROLLBACK_WITH_REAL = "rollback_with_real"
DUPLICATE_REAL = "duplicate_real"


def _no_op() -> Column:
    return (F.col("commit_ops") == 0) & (F.col("rollback_ops") == 0)


def _stuck(limits: Limits) -> Check:
    """A half with no op record (and no real message: that is ``real_without_commit``), not
    parked as DISCARDED, older than the threshold."""
    as_of = limits.as_of
    found = (
        _no_op()
        & (F.col("real_count") == 0)
        & (F.col("state") != "DISCARDED")
        & (F.col("created_at") < as_of - limits.thresholds.stuck_ms)
    )
    reason = F.format_string(
        "half in state %s has no op record after %d s (%d checks)",
        F.col("state"),
        ((F.lit(as_of) - F.col("created_at")) / 1000).cast("long"),
        F.col("check_times"),
    )
    return Check(found, reason, F.col("created_at"))


def _discarded(limits: Limits) -> Check:
    """A half parked as DISCARDED after transaction_check_max checks and still unresolved."""
    found = (F.col("state") == "DISCARDED") & _no_op()
    reason = F.format_string(
        "discarded after %d checks: the producer never answered", F.col("check_times")
    )
    return Check(found, reason, F.col("discarded_at"))


def _commit_without_real(limits: Limits) -> Check:
    """A commit op record whose real message is missing: consumers never saw the commit."""
    found = (F.col("commit_ops") > 0) & (F.col("real_count") == 0)
    reason = F.lit("commit op record but no real message in the topic")
    return Check(found, reason, F.col("op_at"))


def _real_without_commit(limits: Limits) -> Check:
    """A real message of a transaction that has no op record at all."""
    found = (F.col("real_count") > 0) & _no_op()
    reason = F.format_string("real message in %s without a commit op record", F.col("topic"))
    return Check(found, reason, F.col("real_at"))


def _rollback_with_real(limits: Limits) -> Check:
    """A rolled-back transaction whose message was delivered anyway."""
    found = (F.col("rollback_ops") > 0) & (F.col("real_count") > 0)
    reason = F.format_string(
        "rollback op record and %d real message(s) in %s", F.col("real_count"), F.col("topic")
    )
    return Check(found, reason, F.col("real_at"))


def _duplicate_real(limits: Limits) -> Check:
    """More than one real message for one transaction."""
    found = F.col("real_count") > 1
    reason = F.format_string("%d real messages for one transaction", F.col("real_count"))
    return Check(found, reason, F.col("real_at"))


KINDS = (
    Kind(
        name=STUCK,
        severity=WARNING,
        description="a half with no op record and no real message, not DISCARDED, older than `--stuck-after`",
        action="open it in the console: bring the producer back (the broker checks again), or commit or roll back by hand once its database says whether the local transaction happened",
        source=VIEW,
        check=_stuck,
        plant=Scenario(
            state="PREPARED", decision=None, check_times=3, reals=0, debit=False, credits=0
        ),
    ),
    Kind(
        name=DISCARDED,
        severity=WARNING,
        description="state DISCARDED (checked `transaction_check_max` times) and still no op record",
        action="the broker stopped checking: ask the producer's database whether the local transaction committed, then commit or roll back the half in the console (a discarded half stays resolvable)",
        source=VIEW,
        check=_discarded,
        plant=Scenario(
            state="DISCARDED", decision=None, check_times=15, reals=0, debit=False, credits=0
        ),
    ),
    Kind(
        name=COMMIT_WITHOUT_REAL,
        severity=WARNING,
        description="a COMMIT op record but no real message in the topic",
        action="the consumers never got the committed message (a store fault): read the transaction's trace and the broker's log, and carry out its business effect by hand",
        source=VIEW,
        check=_commit_without_real,
        plant=Scenario(reals=0, debit=False, credits=0),
    ),
    Kind(
        name=REAL_WITHOUT_COMMIT,
        severity=WARNING,
        description="a real message of a transaction that has no op record at all",
        action="a message went out with no decision recorded (a store fault or a write outside the broker): read the trace, check whether the consumer acted on it",
        source=VIEW,
        check=_real_without_commit,
        plant=Scenario(state="PREPARED", decision=None, debit=False, credits=0),
    ),
    Kind(
        name=ROLLBACK_WITH_REAL,
        severity=CRITICAL,
        description="a ROLLBACK op record and a real message",
        action="consumers got a rolled-back message: reverse what they did with it (see `credit_for_rolled_back`) and report a broker bug",
        source=VIEW,
        check=_rollback_with_real,
        plant=Scenario(state="ROLLED_BACK", decision="ROLLBACK", debit=False, credits=0),
    ),
    Kind(
        name=DUPLICATE_REAL,
        severity=CRITICAL,
        description="more than one real message for one transaction",
        action="consumers may have acted twice: check their effects (see `double_credit`) and report a broker bug",
        source=VIEW,
        check=_duplicate_real,
        plant=Scenario(reals=2),
    ),
)
_BY_NAME = {kind.name: kind for kind in KINDS}


def store_anomalies(view: DataFrame, *, as_of: int, stuck_after: int) -> DataFrame:
    """Every store kind in one pass over the view."""
    return one_pass(view, KINDS, Limits(as_of, Thresholds(stuck_ms=stuck_after)))


def stuck_halves(view: DataFrame, *, as_of: int, older_than: int) -> DataFrame:
    return rows_of(view, _BY_NAME[STUCK], Limits(as_of, Thresholds(stuck_ms=older_than)))


def discarded_halves(view: DataFrame) -> DataFrame:
    return rows_of(view, _BY_NAME[DISCARDED], UNTIMED)


def commit_without_real(view: DataFrame) -> DataFrame:
    return rows_of(view, _BY_NAME[COMMIT_WITHOUT_REAL], UNTIMED)


def real_without_commit(view: DataFrame) -> DataFrame:
    return rows_of(view, _BY_NAME[REAL_WITHOUT_COMMIT], UNTIMED)


def rollback_with_real(view: DataFrame) -> DataFrame:
    return rows_of(view, _BY_NAME[ROLLBACK_WITH_REAL], UNTIMED)


def duplicate_reals(view: DataFrame) -> DataFrame:
    return rows_of(view, _BY_NAME[DUPLICATE_REAL], UNTIMED)
