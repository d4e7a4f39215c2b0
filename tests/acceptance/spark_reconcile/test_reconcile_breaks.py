"""Breaks carried across three consecutive days on a real SQLite store, with the real broker's
console (a process, its ACL on) setting an operator's status in between:

* day 1: four halves left without a decision (``stuck_half``) -- a, b, c, d -- and a healthy one;
* the operator acknowledges c in the console;
* day 2: a is committed (resolved), d is given up by the broker (DISCARDED: its kind changes),
  e is a new stuck half; b and c stay open;
* day 3: nothing new; b and c are now past stuck_half's allowed age of two days, which the team's
  policy makes critical; an operator explains b and resolves c by hand, and the rerun of day 3 is
  warnings again.

Each run's report, summary.json and Parquet carry the breaks' states, first-seen days, ages,
flags and statuses; a rerun of the same day keeps them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") != "true":
    pytest.importorskip("pyspark")

import httpx
import sqlalchemy as sa
from reconcile_helpers import migrate

from broker_service.store import schema
from spark_reconcile.anomalies import HALF_TOPIC, OP_TOPIC, SEVERITY
from spark_reconcile.config import DAY_MS, HOUR_MS, ReconcileConfig, day_start_ms
from spark_reconcile.job import run
from spark_reconcile.policy import load_policy
from tests.support import BrokerProcess, free_port

pytestmark = pytest.mark.spark

DAY1 = dt.date(2026, 11, 20)
DAYS = [DAY1 + dt.timedelta(days=i) for i in range(3)]
TOPIC = "transfers"
ACL = """\
globalWhiteRemoteAddresses:
  - 127.0.0.1
accounts:
  - accessKey: operator-key
    secretKey: operator-secret-0123456789
    admin: true
  - accessKey: teller-key
    secretKey: teller-secret-0123456789
    groupPerms:
      - bob-bank=PUB
"""
POLICY = """\
kinds:
  stuck_half: {max_age: 2d, warn_above: 0, critical_after: 2d}
  discarded_half: {warn_above: 5}
"""


def at(day: dt.date, hour: float) -> int:
    return day_start_ms(day) + int(hour * HOUR_MS)


class Store:
    """Rows written as the broker writes them: halves, op records, real messages."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.offset = 0

    def _message(self, conn: sa.Connection, topic: str, tx: str, when: int, props: dict) -> None:
        self.offset += 1
        conn.execute(
            schema.messages.insert().values(
                topic=topic, queue_id=0, queue_offset=self.offset, msg_id=f"m-{tx}", body=b"{}",
                encoding="text", tags="TagA", keys=json.dumps([f"transfer-{tx}"]),
                properties=json.dumps(props), transaction_id=tx, producer_group="bob-bank",
                born_at=when, stored_at=when, reconsume_times=0,
            )
        )  # fmt: skip

    def half(self, tx: str, when: int) -> None:
        with self.engine.begin() as conn:
            self._message(conn, HALF_TOPIC, tx, when, {"REAL_TOPIC": TOPIC, "TRAN_MSG": "true"})
            conn.execute(
                schema.transactions.insert().values(
                    transaction_id=tx, msg_id=f"m-{tx}", producer_group="bob-bank", topic=TOPIC,
                    half_offset=self.offset, state="PREPARED", check_times=0, created_at=when,
                    real_queue_id=0,
                )
            )  # fmt: skip

    def commit(self, tx: str, when: int) -> None:
        with self.engine.begin() as conn:
            self._message(conn, OP_TOPIC, tx, when, {"DECISION": "COMMIT"})
            self._message(conn, TOPIC, tx, when, {"TRAN_MSG": "true"})
            conn.execute(
                schema.transactions.update()
                .where(schema.transactions.c.transaction_id == tx)
                .values(state="COMMITTED", resolved_at=when, resolved_by="producer")
            )

    def discard(self, tx: str, when: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                schema.transactions.update()
                .where(schema.transactions.c.transaction_id == tx)
                .values(state="DISCARDED", check_times=15, discarded_at=when)
            )


class Console:
    """An operator signed in to the broker's console (a real process)."""

    def __init__(self, broker: BrokerProcess, key: str, secret: str) -> None:
        self.client = httpx.Client(base_url=broker.url, timeout=10)
        token = _csrf(self.client.get("/console/login").text)
        form = {"csrf_token": token, "access_key": key, "secret_key": secret}
        assert self.client.post("/console/login", data=form).status_code == 303

    def __enter__(self) -> Console:
        return self

    def __exit__(self, *_: object) -> None:
        self.client.close()

    def set_status(self, day: dt.date, break_id: str, status: str, note: str = "") -> int:
        page = self.client.get(f"/console/reconciliation/date={day}")
        form = {"csrf_token": _csrf(page.text), "status": status, "note": note}
        path = f"/console/reconciliation/date={day}/breaks/{break_id}/status"
        return self.client.post(path, data=form).status_code


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[tuple[Store, BrokerProcess, Path]]:
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    engine = migrate(url)
    out = tmp_path / "out"
    (out / "report").mkdir(parents=True)
    acl = tmp_path / "acl.yml"
    acl.write_text(ACL)
    broker = BrokerProcess(
        url, free_port(), tmp_path / "broker.log",
        "--acl", str(acl), "--console-reports-dir", str(out / "report"),
        "--console-session-secret", "a-test-session-secret",
        "--transaction-check-interval-seconds", "3600",
    )  # fmt: skip
    broker.start()
    try:
        yield Store(engine), broker, out
    finally:
        broker.stop()
        engine.dispose()


def reconcile(spark: Any, url: str, out: Path, day: dt.date, policy: Path) -> Any:
    config = ReconcileConfig(
        day=day,
        out=str(out),
        store_url=url,
        as_of=day_start_ms(day) + DAY_MS + HOUR_MS // 2,
        jdbc_partitions=2,
        shuffle_partitions=2,
        policy=load_policy(policy, SEVERITY),
    )
    began = time.monotonic()
    summary = run(config, spark)
    print(f"reconcile {day}: {time.monotonic() - began:.1f} s")
    return summary


def breaks_of(out: Path, day: dt.date) -> dict[str, dict[str, Any]]:
    """summary.json's breaks by transaction id."""
    data = json.loads((out / "report" / f"date={day}" / "summary.json").read_text())
    return {row["transaction_id"]: row for row in data["breaks"]["rows"]}


@pytest.mark.timeout(1200)
def test_breaks_carried_across_three_days_with_statuses_ages_and_the_policy(
    spark: Any, scene: tuple[Store, BrokerProcess, Path], tmp_path: Path
) -> None:
    store, broker, out = scene
    url = str(store.engine.url)
    policy = tmp_path / "policy.yml"
    policy.write_text(POLICY)
    for n, tx in enumerate("abcd"):
        store.half(tx, at(DAYS[0], 10 + n))
    store.half("ok1", at(DAYS[0], 15))
    store.commit("ok1", at(DAYS[0], 15.1))

    day1 = reconcile(spark, url, out, DAYS[0], policy)
    rows = breaks_of(out, DAYS[0])
    assert sorted(rows) == ["a", "b", "c", "d"]
    assert {r["state"] for r in rows.values()} == {"new"}
    assert {r["first_seen"] for r in rows.values()} == {DAYS[0].isoformat()}
    assert {r["age_bucket"] for r in rows.values()} == {"<1d"}
    assert not any(r["overdue"] for r in rows.values())
    assert day1.exit_code == 1  # four unhandled stuck halves, above warn_above 0
    stakes = json.loads((out / "report" / f"date={DAYS[0]}" / "summary.json").read_text())["stakes"]
    assert (stakes["transactions"], stakes["broken"]) == (5, 4)
    assert stakes["match_rate"] == pytest.approx(0.2)
    assert [(g["topic"], g["transactions"]) for g in stakes["by_topic"]] == [(TOPIC, 5)]
    cut = {c["source"]: c for c in stakes["cutoffs"]}
    assert cut["store transactions"]["last_at"] == at(DAYS[0], 15)
    assert (cut["store messages"]["last_at"], cut["store messages"]["rows"]) == (
        at(DAYS[0], 15.1),
        7,
    )

    with Console(broker, "operator-key", "operator-secret-0123456789") as operator:
        assert operator.set_status(DAYS[0], rows["c"]["break_id"], "acknowledged") == 303

        store.commit("a", at(DAYS[1], 8))
        store.discard("d", at(DAYS[1], 9))
        store.half("e", at(DAYS[1], 10))
        for attempt in range(2):  # the run, and a rerun of the same day
            day2 = reconcile(spark, url, out, DAYS[1], policy)
            rows = breaks_of(out, DAYS[1])
            assert {tx: r["state"] for tx, r in rows.items()} == {
                "a": "resolved",
                "b": "still_open",
                "c": "still_open",
                "d": "changed_kind",
                "e": "new",
            }, attempt
            assert rows["a"]["status"] == "closed"
            assert rows["c"]["status"] == "acknowledged"
            assert (rows["d"]["kind"], rows["d"]["previous_kind"]) == (
                "discarded_half",
                "stuck_half",
            )
            assert rows["b"]["first_seen"] == DAYS[0].isoformat()
            assert rows["e"]["first_seen"] == DAYS[1].isoformat()
            assert (rows["b"]["age_bucket"], rows["e"]["age_bucket"]) == ("1-3d", "<1d")
            # b, c, e unhandled and younger than two days: warnings; one discarded half is under
            # the policy's warn_above 5, where the fixed rule would have counted it
            assert day2.exit_code == 1
            assert day2.levels()["discarded_half"] == 0

        day3 = reconcile(spark, url, out, DAYS[2], policy)
        rows = breaks_of(out, DAYS[2])
        assert {tx: r["state"] for tx, r in rows.items()} == {
            "b": "still_open",
            "c": "still_open",
            "d": "still_open",
            "e": "still_open",
        }
        assert (rows["b"]["overdue"], rows["c"]["overdue"], rows["e"]["overdue"]) == (
            True,
            True,
            False,
        )
        assert rows["c"]["status"] == "acknowledged"
        assert day3.counts["stuck_half"] == 0  # nothing new on day 3: today's counts stay the day's
        assert day3.exit_code == 2  # b and c are unhandled past critical_after 2d
        summary = json.loads((out / "report" / f"date={DAYS[2]}" / "summary.json").read_text())
        assert summary["exit_code"] == 2
        assert summary["levels"] == {"stuck_half": 2}
        assert summary["breaks"]["carried"] == 4
        assert summary["breaks"]["overdue"] == 2

        assert (
            operator.set_status(DAYS[2], rows["b"]["break_id"], "explained", "bank holiday") == 303
        )
        assert operator.set_status(DAYS[2], rows["c"]["break_id"], "resolved") == 303
        again = reconcile(spark, url, out, DAYS[2], policy)
        rows = breaks_of(out, DAYS[2])
        assert (rows["b"]["status"], rows["b"]["note"]) == ("explained", "bank holiday")
        assert rows["c"]["status"] == "resolved"
        assert again.exit_code == 1  # e alone is unhandled, younger than two days
        html = (out / "report" / f"date={DAYS[2]}" / "report.html").read_text()
        assert "bank holiday" in html
        assert 'id="breaks-per-kind"' in html

        parquet = spark.read.parquet(str(out / "breaks" / f"date={DAYS[2]}"))
        assert sorted(r["transaction_id"] for r in parquet.collect()) == ["b", "c", "d", "e"]
