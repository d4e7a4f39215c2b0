"""The breaks' parts on tiny frames (a break's id, the carry-forward, amounts, ages and flags) and
the policy file (no Spark)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("pyspark")

from reconcile_helpers import LEDGER_DDL

from spark_reconcile import breaks
from spark_reconcile.anomalies import SEVERITY
from spark_reconcile.config import DAY_MS
from spark_reconcile.policy import CLEAN, CRITICALS, WARNINGS, PolicyError, load_policy

pytestmark = pytest.mark.spark

ANOMALY_DDL = (
    "kind string, severity string, transaction_id string, msg_id string, keys string, "
    "business_id string, consumer_group string, created_at long, event_at long, reason string"
)
DAY = dt.date(2026, 11, 20)


def anomaly(kind: str, tx: str | None, *, group: str | None = None, biz: str | None = None) -> Any:
    return (kind, SEVERITY[kind], tx, "m", "[]", biz, group, 1000, 2000, "planted")


def test_a_break_keeps_its_id_when_its_kind_changes_within_its_family(frame: Any) -> None:
    rows = [
        anomaly("stuck_half", "t1"),
        anomaly("discarded_half", "t1"),  # the same transaction, another day's kind
        anomaly("ack_lag", "t1", group="g1"),
        anomaly("dead_lettered", "t1", group="g1"),
        anomaly("ack_lag", "t1", group="g2"),
        anomaly("debit_without_credit", "t1", biz="b1"),
        anomaly("double_credit", None, biz="b1"),
        anomaly("dead_letter_resolved", "t9", group="g1"),  # info: no break
    ]
    found = frame(ANOMALY_DDL, rows).withColumn("break_id", breaks.break_id()).collect()
    ids = {(r["kind"], r["consumer_group"]): r["break_id"] for r in found}
    assert ids["stuck_half", None] == ids["discarded_half", None]
    assert ids["ack_lag", "g1"] == ids["dead_lettered", "g1"] != ids["ack_lag", "g2"]
    assert ids["debit_without_credit", None] == ids["double_credit", None]
    assert len({ids["stuck_half", None], ids["ack_lag", "g1"], ids["double_credit", None]}) == 3
    assert all(len(i) == 16 for i in ids.values())

    one = breaks.of_anomalies(frame(ANOMALY_DDL, rows)).collect()
    assert sorted(r["kind"] for r in one) == ["ack_lag", "ack_lag", "debit_without_credit",
                                              "stuck_half"]  # fmt: skip


def _open(frame: Any, rows: list[tuple[Any, ...]]) -> Any:
    return frame(breaks.BREAKS_DDL, rows)


def test_carried_breaks_are_still_open_changed_or_resolved_and_new_ones_join(frame: Any) -> None:
    today = breaks.of_anomalies(frame(ANOMALY_DDL, [anomaly("stuck_half", "t3")]))
    again = breaks.of_anomalies(
        frame(ANOMALY_DDL, [anomaly("stuck_half", "t1"), anomaly("discarded_half", "t2")])
    )
    ids = {r["transaction_id"]: r["break_id"] for r in again.collect()}
    gone = "0000000000000000"
    first = DAY - dt.timedelta(days=2)
    previous = _open(frame, [
        (ids["t1"], "stuck_half", "warning", "t1", "m", None, None, 1, 1, "r", first, "new", None, 5),
        (ids["t2"], "stuck_half", "warning", "t2", "m", None, None, 1, 1, "r", first, "new", None, None),
        (gone, "ack_lag", "warning", "t0", "m", None, "g", 1, 1, "r", first, "still_open", None, None),
    ])  # fmt: skip
    every = breaks.today_and_carried(today, breaks.carried(previous, again), DAY).collect()
    state = {r["transaction_id"]: (r["state"], r["kind"], r["first_seen"]) for r in every}
    assert state == {
        "t1": ("still_open", "stuck_half", first),
        "t2": ("changed_kind", "discarded_half", first),
        "t0": ("resolved", "ack_lag", first),
        "t3": ("new", "stuck_half", DAY),
    }
    assert {r["transaction_id"]: r["amount"] for r in every}["t1"] == 5  # kept from before


def test_amounts_ages_buckets_flags_and_statuses(spark: Any, frame: Any) -> None:
    as_of = 10 * DAY_MS
    rows = [
        ("a" * 16, "debit_without_credit", "warning", "t1", "m", "b1", None, as_of - DAY_MS // 2,
         None, "r", DAY, "new", None, None),
        ("b" * 16, "stuck_half", "warning", "t2", "m", None, None, as_of - 2 * DAY_MS, None, "r",
         DAY, "still_open", None, None),
        ("c" * 16, "stuck_half", "warning", "t3", "m", None, None, as_of - 5 * DAY_MS, None, "r",
         DAY, "still_open", None, None),
        ("d" * 16, "double_credit", "critical", "t4", "m", "b2", None, as_of - 8 * DAY_MS, None,
         "r", DAY, "resolved", None, 70),
    ]  # fmt: skip
    ledger = frame(LEDGER_DDL, [
        ("bob", "b1", "acc", 300, "DEBIT", 1), ("bob", "b1", "acc", 200, "DEBIT", 2),
        ("smith", "b1", "acc2", 100, "CREDIT", 3), ("bob", "zz", "acc", 9, "DEBIT", 4),
    ])  # fmt: skip
    with_amounts = breaks.with_amounts(_open(frame, rows), ledger)
    statuses = breaks.statuses_frame(
        spark, {"b" * 16: {"status": "explained", "note": "known", "actor": "op", "updated_at": 1}}
    )
    max_age = {"stuck_half": 3 * DAY_MS, "debit_without_credit": DAY_MS, "double_credit": DAY_MS}
    judged = breaks.judged(with_amounts, statuses, as_of=as_of, max_age_ms=max_age).collect()
    got = {
        r["transaction_id"]: (r["amount"], r["age_bucket"], r["overdue"], r["status"], r["note"])
        for r in judged
    }
    assert got == {
        "t1": (500, "<1d", False, "open", None),  # 500 debited, 100 credited: 500 at stake
        "t2": (None, "1-3d", False, "explained", "known"),
        "t3": (None, "3-7d", True, "open", None),
        "t4": (70, ">7d", False, "closed", None),  # resolved by the data: closed, never overdue
    }
    assert breaks.statuses_frame(spark, {}).count() == 0


def test_the_policy_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(
        "kinds:\n  stuck_half: {max_age: 2d, warn_above: 3, critical_above: 10, "
        "critical_after: 7d}\n  double_credit: {max_age: 6h}\n"
    )
    policy = load_policy(path, SEVERITY)
    assert policy.max_age_ms("stuck_half") == 2 * DAY_MS
    assert policy.max_age_ms("double_credit") == DAY_MS // 4
    assert policy.max_age_ms("ack_lag") == 3 * DAY_MS  # a warning kind's default
    assert policy.max_age_ms("amount_mismatch") == DAY_MS  # a critical kind's default
    stuck = "stuck_half", "warning"
    assert policy.level(*stuck, today=9, unhandled=3, oldest_ms=DAY_MS) == CLEAN
    assert policy.level(*stuck, today=0, unhandled=4, oldest_ms=DAY_MS) == WARNINGS
    assert policy.level(*stuck, today=0, unhandled=11, oldest_ms=DAY_MS) == CRITICALS
    assert policy.level(*stuck, today=0, unhandled=1, oldest_ms=8 * DAY_MS) == CRITICALS
    # a kind with no thresholds keeps the fixed rule: the day's count, its severity
    assert policy.level("double_credit", "critical", 1, 0, 0) == CRITICALS
    assert policy.level("dead_letter_resolved", "info", 3, 0, 0) == CLEAN

    for text, message in (
        ("kinds:\n  no_such_kind: {warn_above: 1}\n", "no such anomaly kind: no_such_kind"),
        ("kinds:\n  stuck_half: {max_age: soon}\n", "kinds.stuck_half.max_age"),
        ("kinds:\n  stuck_half: {warn_above: -1}\n", "kinds.stuck_half.warn_above"),
        ("kinds:\n  stuck_half: {warn_abve: 1}\n", "kinds.stuck_half.warn_abve"),
        ("kinds: [1, 2\n", "cannot read the policy"),
    ):
        path.write_text(text)
        with pytest.raises(PolicyError, match=message):
            load_policy(path, SEVERITY)
