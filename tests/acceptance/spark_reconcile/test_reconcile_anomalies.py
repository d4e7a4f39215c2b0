"""Each anomaly kind on tiny frames built here: what it finds, and the near misses it leaves."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("pyspark")

from pyspark.sql import functions as F
from reconcile_helpers import (
    ACK_DDL,
    LEDGER_DDL,
    MESSAGE_DDL,
    SUBSCRIPTION_DDL,
    TRANSACTION_DDL,
    keys,
    op_properties,
)

from spark_reconcile import anomalies as A
from spark_reconcile.anomalies.rows import INTERNAL, one_pass, rows_of
from spark_reconcile.config import HOUR_MS, KeyMapping, Window
from spark_reconcile.scenario import Scenario

pytestmark = pytest.mark.spark

WINDOW = Window.for_day(dt.date(2026, 11, 20), as_of=0)
START = WINDOW.start
AS_OF = WINDOW.end + 2 * HOUR_MS
WINDOW = Window(WINDOW.start, WINDOW.end, AS_OF, AS_OF)
T = START + HOUR_MS  # when the ordinary transactions of these tests start
LIMITS = A.Limits(AS_OF)


class Store:
    """Rows of a tiny store, numbered like the broker numbers them."""

    def __init__(self) -> None:
        self.transactions: list[tuple[Any, ...]] = []
        self.messages: list[tuple[Any, ...]] = []
        self.next_id = 1

    def _message(self, topic: str, tx: str | None, at: int, **extra: Any) -> int:
        msg_id = extra.get("msg_id", f"m-{tx}")
        row = (
            self.next_id,
            topic,
            msg_id,
            extra.get("tags", "TagA"),
            extra.get("keys", keys(f"biz-{tx}")),
            extra.get("properties"),
            tx,
            extra.get("origin_id"),
            at,
        )
        self.messages.append(row)
        self.next_id += 1
        return row[0]

    def tx(self, tx: str, state: str, *, at: int = T, checks: int = 0) -> int:
        discarded = at + HOUR_MS if state == "DISCARDED" else None
        self.transactions.append(
            (tx, f"m-{tx}", "pg", "transfer", state, checks, at, None, discarded)
        )
        return self._message(A.HALF_TOPIC, tx, at)

    def op(self, tx: str, decision: str, *, at: int = T + 1000) -> int:
        return self._message(A.OP_TOPIC, tx, at, properties=op_properties(decision), tags="d")

    def real(self, tx: str, *, at: int = T + 1000, topic: str = "transfer", **extra: Any) -> int:
        return self._message(topic, tx, at, **extra)

    def committed(self, tx: str, *, at: int = T) -> int:
        self.tx(tx, "COMMITTED", at=at)
        self.op(tx, "COMMIT", at=at + 1000)
        return self.real(tx, at=at + 1000)

    def view(self, frame: Any) -> Any:
        messages = frame(MESSAGE_DDL, self.messages)
        return A.transaction_view(
            frame(TRANSACTION_DDL, self.transactions), messages, messages, WINDOW
        )

    def frame(self, frame: Any) -> Any:
        return frame(MESSAGE_DDL, self.messages)


def found(df: Any, column: str = "transaction_id") -> set[Any]:
    return {row[column] for row in df.collect()}


def test_view_folds_the_messages_of_each_transaction_of_the_day(frame: Any) -> None:
    s = Store()
    s.committed("ok")
    s.tx("before", "COMMITTED", at=START - 1)
    s.tx("after", "COMMITTED", at=WINDOW.end)
    rows = {r["transaction_id"]: r for r in s.view(frame).collect()}
    assert set(rows) == {"ok"}
    ok = rows["ok"]
    assert (ok["commit_ops"], ok["rollback_ops"], ok["real_count"]) == (1, 0, 1)
    assert ok["half_id"] == 1  # the half's message id: its keys and tags stay with it
    assert not {"keys", "tags"} & set(ok.asDict())
    halved = A.with_half(s.view(frame), s.frame(frame)).collect()
    assert [(r["keys"], r["tags"]) for r in halved] == [(keys("biz-ok"), "TagA")]


def test_completed_fetches_the_keys_of_the_rows_found_and_tests_their_tags(frame: Any) -> None:
    """The rows found carry their half's id: ``completed`` gives them its keys, keeps a row
    with a tag filter only if the half's tags pass it, and leaves keys a kind set alone."""
    s = Store()
    s.tx("stuck", "PREPARED")
    s.tx("tagged", "PREPARED")
    s.tx("untagged", "PREPARED")
    s.tx("own_keys", "PREPARED")
    longs = {"created_at", "event_at"}
    columns = [f"{c} {'long' if c in longs else 'string'}" for c in A.ANOMALY_COLUMNS]
    shape = ", ".join([*columns, "half_id long", "tag_filter string"])
    base = dict.fromkeys(A.ANOMALY_COLUMNS)

    def row(tx: str, half_id: int | None, tag_filter: str | None, **extra: Any) -> tuple[Any, ...]:
        values = {**base, "kind": "k", "transaction_id": tx, **extra}
        return (*(values[c] for c in A.ANOMALY_COLUMNS), half_id, tag_filter)

    found_rows = frame(
        shape,
        [
            row("stuck", 1, None),
            row("tagged", 2, "TagB || TagA"),
            row("untagged", 3, "TagB"),
            row("own_keys", None, None, keys="mine"),
            row("no_half", 99, None),
        ],
    )
    done = A.completed(found_rows, s.frame(frame))
    assert done.columns == list(A.ANOMALY_COLUMNS)
    assert {r["transaction_id"]: r["keys"] for r in done.collect()} == {
        "stuck": keys("biz-stuck"),
        "tagged": keys("biz-tagged"),
        "own_keys": "mine",
        "no_half": None,
    }


def test_op_decision_read_from_compact_and_any_other_json(frame: Any) -> None:
    """The broker writes op records as compact JSON (read without parsing); any other spelling
    is parsed, and a property whose value only quotes the decision is not taken for it."""
    s = Store()
    spellings = {
        "compact-commit": '{"DECISION":"COMMIT","RESOLVED_BY":"producer"}',
        "compact-rollback": '{"RESOLVED_BY":"check","DECISION":"ROLLBACK"}',
        "spaced-commit": '{"RESOLVED_BY": "producer", "DECISION": "COMMIT"}',
        "spaced-rollback": '{ "DECISION" : "ROLLBACK" }',
        "quoted-in-a-value": '{"NOTE":"\\"DECISION\\":\\"COMMIT\\"","DECISION":"ROLLBACK"}',
    }
    for tx, properties in spellings.items():
        s.tx(tx, "COMMITTED")
        s._message(A.OP_TOPIC, tx, T + 1000, properties=properties, tags="d")
    rows = {r["transaction_id"]: r for r in s.view(frame).collect()}
    decisions = {
        tx: (r["commit_ops"], r["rollback_ops"]) for tx, r in rows.items() if tx in spellings
    }
    assert decisions == {
        "compact-commit": (1, 0),
        "compact-rollback": (0, 1),
        "spaced-commit": (1, 0),
        "spaced-rollback": (0, 1),
        "quoted-in-a-value": (0, 1),
    }


def test_business_id_by_index_and_by_pattern(frame: Any) -> None:
    s = Store()
    s.tx("t", "PREPARED")
    s.messages[0] = (*s.messages[0][:4], keys("order:7", "transfer:42"), *s.messages[0][5:])
    view = A.with_half(s.view(frame), s.frame(frame))

    def mapped(mapping: KeyMapping) -> set[Any]:
        return found(view.select(A.business_id(view["keys"], mapping).alias("b")), "b")

    assert mapped(KeyMapping()) == {"order:7"}
    assert mapped(KeyMapping(index=1)) == {"transfer:42"}
    assert mapped(KeyMapping(pattern=r"^transfer:(\d+)$")) == {"42"}
    assert mapped(KeyMapping(pattern="^order:")) == {"order:7"}


def test_stuck_is_an_old_half_without_op_and_not_discarded(frame: Any) -> None:
    s = Store()
    s.tx("stuck", "PREPARED", checks=3)
    s.tx("young", "PREPARED", at=WINDOW.end - 1)  # old enough? as_of - 1h < created: no
    s.tx("parked", "DISCARDED")
    s.tx("orphan", "PREPARED")
    s.real("orphan")
    s.committed("done")
    s.tx("rolled", "ROLLED_BACK")
    s.op("rolled", "ROLLBACK")
    view = s.view(frame)
    stuck = A.stuck_halves(view, as_of=AS_OF, older_than=3 * HOUR_MS)
    assert found(stuck) == {"stuck"}
    row = stuck.collect()[0]
    assert row["kind"] == A.STUCK
    assert row["severity"] == A.WARNING
    assert "3 checks" in row["reason"]
    assert found(A.stuck_halves(view, as_of=AS_OF, older_than=HOUR_MS)) == {"stuck", "young"}


def test_discarded_is_a_parked_half_still_without_op(frame: Any) -> None:
    s = Store()
    s.tx("parked", "DISCARDED", checks=15)
    s.tx("resolved_later", "DISCARDED")
    s.op("resolved_later", "ROLLBACK")
    s.tx("stuck", "PREPARED")
    assert found(A.discarded_halves(s.view(frame))) == {"parked"}


def test_commit_without_real(frame: Any) -> None:
    s = Store()
    s.tx("lost", "COMMITTED")
    s.op("lost", "COMMIT")
    s.committed("ok")
    assert found(A.commit_without_real(s.view(frame))) == {"lost"}


def test_real_without_commit(frame: Any) -> None:
    s = Store()
    s.tx("orphan", "PREPARED")
    s.real("orphan")
    s.committed("ok")
    s.tx("rolled", "ROLLED_BACK")
    s.op("rolled", "ROLLBACK")
    s.real("rolled")
    assert found(A.real_without_commit(s.view(frame))) == {"orphan"}


def test_rollback_with_real_is_critical(frame: Any) -> None:
    s = Store()
    s.tx("bad", "ROLLED_BACK")
    s.op("bad", "ROLLBACK")
    s.real("bad")
    s.tx("fine", "ROLLED_BACK")
    s.op("fine", "ROLLBACK")
    rows = A.rollback_with_real(s.view(frame)).collect()
    assert [(r["transaction_id"], r["severity"]) for r in rows] == [("bad", A.CRITICAL)]


def test_duplicate_reals_is_critical(frame: Any) -> None:
    s = Store()
    s.committed("twice")
    s.real("twice", at=T + 5000)
    s.committed("once")
    rows = A.duplicate_reals(s.view(frame)).collect()
    assert [(r["transaction_id"], r["severity"]) for r in rows] == [("twice", A.CRITICAL)]
    assert rows[0]["reason"].startswith("2 real messages")


def test_store_kinds_in_one_pass_are_the_single_checks(frame: Any) -> None:
    s = Store()
    s.tx("stuck", "PREPARED", checks=3)
    s.tx("parked", "DISCARDED", checks=15)
    s.tx("lost", "COMMITTED")
    s.op("lost", "COMMIT")
    s.tx("orphan", "PREPARED")
    s.real("orphan")
    s.tx("bad", "ROLLED_BACK")  # rolled back and delivered twice: found by two kinds
    s.op("bad", "ROLLBACK")
    s.real("bad")
    s.real("bad", at=T + 5000)
    s.committed("ok")
    view = s.view(frame)
    singles = [
        A.stuck_halves(view, as_of=AS_OF, older_than=HOUR_MS),
        A.discarded_halves(view),
        A.commit_without_real(view),
        A.real_without_commit(view),
        A.rollback_with_real(view),
        A.duplicate_reals(view),
    ]
    expected = sorted(tuple(r) for df in singles for r in df.collect())
    one_pass = A.store_anomalies(view, as_of=AS_OF, stuck_after=HOUR_MS)
    assert one_pass.columns == [*A.ANOMALY_COLUMNS, *INTERNAL]
    assert sorted(tuple(r) for r in one_pass.collect()) == expected
    assert {(k, t) for k, _, t, *_ in expected} == {
        (A.STUCK, "stuck"),
        (A.DISCARDED, "parked"),
        (A.COMMIT_WITHOUT_REAL, "lost"),
        (A.REAL_WITHOUT_COMMIT, "orphan"),
        (A.ROLLBACK_WITH_REAL, "bad"),
        (A.DUPLICATE_REAL, "bad"),
    }


def test_delayed_real_message_counts_once_parked_or_released(frame: Any) -> None:
    s = Store()
    s.tx("parked", "COMMITTED")
    s.op("parked", "COMMIT")
    s.real("parked", topic=A.SCHEDULE_TOPIC)
    s.tx("released", "COMMITTED")
    s.op("released", "COMMIT")
    scheduled = s.real("released", topic=A.SCHEDULE_TOPIC)
    s.real("released", origin_id=scheduled)
    s.real("released", topic="%RETRY%g1")
    view = s.view(frame)
    assert {r["transaction_id"]: r["real_count"] for r in view.collect()} == {
        "parked": 1,
        "released": 1,
    }
    assert found(A.commit_without_real(view)) == set()
    assert found(A.duplicate_reals(view)) == set()


def test_retry_copies_parked_or_released_are_not_real_messages(frame: Any) -> None:
    s = Store()
    real_id = s.committed("retried")
    retry = '{"REAL_TOPIC": "%RETRY%g1", "RETRY_TOPIC": "transfer"}'
    parked = s.real("retried", topic=A.SCHEDULE_TOPIC, properties=retry, origin_id=real_id)
    s.real("retried", topic="%RETRY%g1", properties=retry, origin_id=parked)
    s.real("retried", topic=A.SCHEDULE_TOPIC, properties=retry, origin_id=real_id)
    view = s.view(frame)
    assert [r["real_count"] for r in view.collect()] == [1]
    assert found(A.duplicate_reals(view)) == set()


def _consumers(frame: Any, subs: list[tuple[Any, ...]], acks: list[tuple[str, str]]) -> Any:
    return frame(SUBSCRIPTION_DDL, subs), frame(ACK_DDL, acks)


def test_ack_lag_per_subscribed_group(frame: Any) -> None:
    s = Store()
    for tx in ("acked", "lagging", "dead"):
        s.committed(tx)
    s.tx("young", "COMMITTED", at=WINDOW.end - 60_000)  # resolved late, 10 minutes ago
    s.op("young", "COMMIT", at=AS_OF - 600_000)
    s.real("young", at=AS_OF - 600_000)
    s._message("%DLQ%g1", None, T + 9000, msg_id="m-dead")
    subs, acks = _consumers(
        frame,
        [
            ("g1", "transfer", "*", 0),
            ("tag_b_only", "transfer", "TagB || TagC", 0),
            ("tag_a", "transfer", "TagC||TagA", 0),
            ("late_joiner", "transfer", "*", AS_OF),
            ("other_topic", "orders", "*", 0),
        ],
        [("g1", "m-acked"), ("tag_a", "m-acked"), ("tag_a", "m-lagging")],
    )
    view = s.view(frame)
    dead = A.dead_letters(view, s.frame(frame), acks)
    lag = A.ack_lag(view, subs, acks, dead, s.frame(frame), as_of=AS_OF, older_than=HOUR_MS)
    pairs = {(r["transaction_id"], r["consumer_group"]) for r in lag.collect()}
    assert pairs == {("lagging", "g1"), ("dead", "tag_a")}


def test_dead_lettered_by_msg_id_or_origin(frame: Any) -> None:
    s = Store()
    s.committed("by_msg")
    real_id = s.committed("by_origin")
    s.committed("fine")
    s._message("%DLQ%g1", None, T + 9000, msg_id="m-by_msg")
    s._message("%DLQ%g2", None, T + 9000, msg_id="copy-1", origin_id=real_id)
    s._message("%RETRY%g1", None, T + 9000, msg_id="m-fine")
    view = s.view(frame)
    _, acks = _consumers(frame, [], [])
    dead = A.dead_lettered(A.dead_letters(view, s.frame(frame), acks))
    assert {(r["transaction_id"], r["consumer_group"]) for r in dead.collect()} == {
        ("by_msg", "g1"),
        ("by_origin", "g2"),
    }


def test_a_dead_letter_resent_and_acked_is_resolved_not_dead_lettered(frame: Any) -> None:
    """The group acked its dead letter after a resend: ``dead_letter_resolved`` (info); one not
    resent, or acked only by another group, stays ``dead_lettered`` (warning)."""
    s = Store()
    for tx in ("resent", "forgotten", "other_group"):
        s.committed(tx)
        s._message("%DLQ%g1", None, T + 9000, msg_id=f"m-{tx}")
    s._message("%RETRY%g1", None, T + 20_000, msg_id="m-resent")  # the resend's copy
    subs, acks = _consumers(
        frame, [("g1", "transfer", "*", 0)], [("g1", "m-resent"), ("g2", "m-other_group")]
    )
    view = s.view(frame)
    dead = A.dead_letters(view, s.frame(frame), acks)
    resolved = A.dead_letter_resolved(dead).collect()
    assert [(r["transaction_id"], r["consumer_group"], r["severity"]) for r in resolved] == [
        ("resent", "g1", A.INFO)
    ]
    assert resolved[0]["reason"] == "dead-lettered by group g1, then resent and acked by it"
    assert found(A.dead_lettered(dead)) == {"forgotten", "other_group"}
    lag = A.ack_lag(view, subs, acks, dead, s.frame(frame), as_of=AS_OF, older_than=HOUR_MS)
    assert found(lag) == set()  # dead-lettered or acked: none of them is also lagging
    evidence = A.Evidence(view, dead, subs, acks, None, LIMITS)
    every = {(r["kind"], r["transaction_id"]) for df in A.find_all(evidence) for r in df.collect()}
    assert every == {
        (A.DEAD_LETTER_RESOLVED, "resent"),
        (A.DEAD_LETTERED, "forgotten"),
        (A.DEAD_LETTERED, "other_group"),
    }


def _books(frame: Any, s: Store, ledger: list[tuple[Any, ...]]) -> Any:
    view = A.with_half(s.view(frame), s.frame(frame))
    return A.ledger_view(view, frame(LEDGER_DDL, ledger), WINDOW, KeyMapping())


def debit(tx: str, amount: int = 100, at: int = T) -> tuple[Any, ...]:
    return ("bob", f"biz-{tx}", "bob-1", amount, "DEBIT", at)


def credit(tx: str, amount: int = 100, at: int = T + 5000) -> tuple[Any, ...]:
    return ("smith", f"biz-{tx}", "smith-1", amount, "CREDIT", at)


def test_debit_without_credit_past_threshold(frame: Any) -> None:
    s = Store()
    for tx in ("paid", "unpaid", "recent"):
        s.committed(tx)
    ledger = [debit("paid"), credit("paid"), debit("unpaid"), debit("recent", at=AS_OF - 60_000)]
    books = _books(frame, s, ledger)
    got = A.debit_without_credit(books, as_of=AS_OF, older_than=HOUR_MS)
    assert found(got) == {"unpaid"}
    assert found(got, "business_id") == {"biz-unpaid"}


def test_credit_without_debit_even_without_a_transaction(frame: Any) -> None:
    s = Store()
    s.committed("paid")
    s.committed("nodebit")
    s.tx("rolled", "ROLLED_BACK")
    s.op("rolled", "ROLLBACK")
    ledger = [debit("paid"), credit("paid"), credit("nodebit"), credit("stray"), credit("rolled")]
    ledger.append(credit("yesterday", at=START - 5))
    got = A.credit_without_debit(_books(frame, s, ledger)).collect()
    assert {(r["transaction_id"], r["business_id"]) for r in got} == {
        ("nodebit", "biz-nodebit"),
        (None, "biz-stray"),
    }


def test_amount_mismatch(frame: Any) -> None:
    s = Store()
    s.committed("short")
    s.committed("exact")
    ledger = [debit("short", 100), credit("short", 90), debit("exact", 7), credit("exact", 7)]
    got = A.amount_mismatch(_books(frame, s, ledger)).collect()
    assert [(r["transaction_id"], r["reason"]) for r in got] == [
        ("short", "debited 100, credited 90")
    ]


def test_credit_for_rolled_back(frame: Any) -> None:
    s = Store()
    s.tx("rolled", "ROLLED_BACK")
    s.op("rolled", "ROLLBACK")
    s.tx("rolled_by_state", "ROLLED_BACK")
    s.tx("quiet_rollback", "ROLLED_BACK")
    s.op("quiet_rollback", "ROLLBACK")
    s.committed("ok")
    ledger = [credit("rolled"), credit("rolled_by_state"), debit("ok"), credit("ok")]
    books = _books(frame, s, ledger)
    assert found(A.credit_for_rolled_back(books)) == {"rolled", "rolled_by_state"}


def test_double_credit(frame: Any) -> None:
    s = Store()
    s.committed("twice")
    s.committed("once")
    ledger = [debit("twice"), credit("twice"), credit("twice", at=T + 9000)]
    ledger += [debit("once"), credit("once")]
    books = _books(frame, s, ledger)
    assert found(A.double_credit(books)) == {"twice"}
    assert found(A.amount_mismatch(books)) == set()


def _registered(name: str) -> A.Kind:
    return next(kind for kind in A.REGISTRY if kind.name == name)


def test_a_kind_declared_once_is_found_alone_or_in_one_pass_with_its_group(frame: Any) -> None:
    """A new kind is one ``Kind``: here one that reads the dead letters too, found in one pass
    with ``dead_lettered`` (each row keeping its consumer group) as by each alone."""
    s = Store()
    s.committed("early")
    s.committed("late")
    s._message("%DLQ%g1", None, T + 9000, msg_id="m-early")
    s._message("%DLQ%g2", None, AS_OF - 60_000, msg_id="m-late")
    _, acks = _consumers(frame, [], [])
    dead = A.dead_letters(s.view(frame), s.frame(frame), acks)

    def late_check(limits: A.Limits) -> A.Check:
        found = F.col("dlq_at") > limits.as_of - HOUR_MS
        return A.Check(found, F.lit("dead-lettered lately"), F.col("dlq_at"))

    late = A.Kind(
        name="late_dead_letter",
        severity=A.CRITICAL,
        description="a dead letter of the last hour",
        action="look at it",
        source=_registered(A.DEAD_LETTERED).source,
        check=late_check,
        plant=Scenario(),
    )
    kinds = [_registered(A.DEAD_LETTERED), late]
    both = one_pass(dead, kinds, LIMITS)
    singles = [r for kind in kinds for r in rows_of(dead, kind, LIMITS).collect()]
    assert both.columns == [*A.ANOMALY_COLUMNS, *INTERNAL]
    assert sorted(both.collect()) == sorted(singles)
    assert {(r["kind"], r["transaction_id"], r["consumer_group"]) for r in singles} == {
        (A.DEAD_LETTERED, "early", "g1"),
        (A.DEAD_LETTERED, "late", "g2"),
        ("late_dead_letter", "late", None),
    }


def test_find_all_skips_the_ledger_kinds_without_books(frame: Any) -> None:
    s = Store()
    s.tx("stuck", "PREPARED")
    s.committed("nodebit")
    view = s.view(frame)
    subs, acks = _consumers(frame, [], [])
    books = _books(frame, s, [credit("nodebit")])

    def kinds_found(books: Any) -> set[tuple[str, str]]:
        dead = A.dead_letters(view, s.frame(frame), acks)
        evidence = A.Evidence(view, dead, subs, acks, books, LIMITS)
        found = [r for df in A.find_all(evidence) for r in df.collect()]
        return {(r["kind"], r["transaction_id"]) for r in found}

    assert kinds_found(books) == {(A.STUCK, "stuck"), (A.CREDIT_WITHOUT_DEBIT, "nodebit")}
    assert kinds_found(None) == {(A.STUCK, "stuck")}
