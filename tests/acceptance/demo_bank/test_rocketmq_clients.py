"""``halfmq demo --clients rocketmq`` end to end on SQLite: the broker with its gRPC port and both
banks on RocketMQ 5's unmodified Python client -- Bob's transactional ``Producer`` with a checker
that answers from his local-transaction log, Smith's ``SimpleConsumer`` with the inbox -- as real
processes, with the faults that apply to that client and the ACL on.  The invariants are asserted
from the banks' databases and the broker's store, never from the demo's own report; the
reconciliation must come out clean; and the checks must really have been answered over gRPC."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, select

from broker_service.store import migrate
from broker_service.store import schema as broker_schema
from demo_bank.processes import bank_service, free_port, stop_all
from tests.acceptance.demo_bank.test_runner import (
    N,
    assert_no_secret_leaked,
    broker_records,
    ledger,
    seed_with_every_fault,
)
from tests.acceptance.grpc.clients import GrpcBroker, errors, run_client
from tests.support import wait_until

pytestmark = pytest.mark.slow

DEMO_TIMEOUT = 600


def run_demo(run_dir: Path) -> tuple[int, str]:
    argv = [sys.executable, "-m", "halfmq", "demo", "--clients", "rocketmq"]
    argv += ["--transfers", str(N), "--seed", str(seed_with_every_fault())]
    argv += ["--concurrency", "8", "--settle-timeout", "60", "--dir", str(run_dir)]
    env = {**os.environ, "COLUMNS": "250"}
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=DEMO_TIMEOUT, check=False
    )
    return done.returncode, done.stdout + done.stderr


def checks_answered(url: str) -> list[dict[str, object]]:
    """The detail of every check an instance answered (``CHECKED`` events with an answer)."""
    e = broker_schema.trace_events
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(e.c.detail).where(e.c.event == "CHECKED")).scalars()
            details = [json.loads(row or "{}") for row in rows]
    finally:
        engine.dispose()
    return [d for d in details if d.get("answer") in ("COMMIT", "ROLLBACK")]


def test_demo_on_rocketmq_clients_keeps_every_invariant_and_reconciles(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code, output = run_demo(run_dir)
    assert code == 0, output
    assert "clients: RocketMQ's Python client (gRPC)" in output, output
    assert output.count("PASS") == 6, output
    assert "FAIL" not in output, output
    assert "every invariant holds · reconciliation clean" in output, output

    stores = {name: f"sqlite:///{run_dir / f'{name}.db'}" for name in ("broker", "bob", "smith")}
    bob_balances, debits = ledger(stores["bob"])
    smith_balances, credits = ledger(stores["smith"])
    states, deliveries, dead = broker_records(stores["broker"])
    # money is conserved; every debit credited exactly once with its amount; no credit without
    # a debit; nothing rolled back is credited or left debited; the broker committed exactly
    # what Bob debited, and nothing is left open
    assert sum(bob_balances.values()) + sum(smith_balances.values()) == 4 * 10_000_000
    for transfer_id, [(direction, amount)] in debits.items():
        assert direction == "DEBIT"
        assert credits.get(transfer_id) == [("CREDIT", amount)], transfer_id
    assert credits.keys() <= debits.keys()
    rolled_back = {t for t, (state, _) in states.items() if state == "ROLLED_BACK"}
    committed = {t for t, (state, _) in states.items() if state == "COMMITTED"}
    assert rolled_back
    assert not rolled_back & (credits.keys() | debits.keys())
    assert committed == debits.keys()
    assert set(states) == committed | rolled_back
    # Most transfers are debited: the faults cost only the overdrawn ones, those in flight when
    # Bob is killed (up to the concurrency, 8) and, on a loaded machine, those whose answer
    # timed out (in doubt, then rolled back by check): 47 of 60 seen under a parallel suite.
    assert len(debits) >= N * 0.7

    # the faults happened: Bob's checker committed by check-back (the dropped commit and the
    # crash transfer) over gRPC; Smith's failed credits came again (lease cut short, or run out
    # when Smith was killed) and the poison transfer was dead-lettered, resent and credited once
    assert any(by == "check" for state, by in states.values() if state == "COMMITTED")
    answered = checks_answered(stores["broker"])
    assert answered
    assert all(d.get("via") == "grpc" for d in answered), answered
    assert deliveries["EXPIRED"] >= 1
    assert dead >= 1
    assert "Bob (pid" in output, output
    assert "Smith (pid" in output, output
    assert "broker (pid" not in output, output  # no broker restart with this client

    summary_path = next((run_dir / "reconcile" / "report").glob("date=*/summary.json"))
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "clean"
    assert summary["counts"]["dead_letter_resolved"] == {"severity": "info", "count": 1}

    # the client wrote its logs under the HOME the demo gave it, with no secret in them
    for bank in ("bob", "smith"):
        logs = list((run_dir / "rocketmq-home" / bank / "logs").rglob("*.log"))
        assert any(p.stat().st_size for p in logs), bank
    assert_no_secret_leaked(run_dir, output)


def smith_deliveries(url: str) -> list[tuple[str, str, int]]:
    """Smith's group's deliveries: (msg_id, state, reconsume_times), in order."""
    d = broker_schema.deliveries
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = (
                select(d.c.msg_id, d.c.state, d.c.reconsume_times)
                .where(d.c.consumer_group == "smith-bank")
                .order_by(d.c.id)
            )
            return [(m, s, int(r)) for m, s, r in conn.execute(query)]
    finally:
        engine.dispose()


def test_smith_on_a_simple_consumer_retries_a_failure_and_credits_a_transfer_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Smith's bank on RocketMQ's SimpleConsumer (its own process), every first delivery failing
    (flaky 100 %): the transfer's first delivery fails and comes again (attempt 2) within
    seconds, which credits it; the same transfer published a second time -- a duplicate, as
    at-least-once delivery allows -- is acked without a second credit (the inbox); a body that is
    not a transfer is retried and dead-lettered, and the receive loops go on."""
    migrate.upgrade(sqlite_url)
    broker = GrpcBroker(sqlite_url, tmp_path / "broker.log")
    broker.start(timeout=90)
    smith = bank_service(
        "smith", free_port(), tmp_path / "smith.log",
        {
            "DEMO_BANK_CLIENTS": "rocketmq",
            "DEMO_BANK_GRPC_ENDPOINT": broker.endpoint,
            "DEMO_BANK_DATABASE_URL": f"sqlite:///{tmp_path / 'smith.db'}",
            "DEMO_BANK_FAULTS": "true",
            "DEMO_BANK_FLAKY_PERCENT": "100",
            "HOME": str(tmp_path / "smith-home"),
        },
    )  # fmt: skip
    try:
        broker.topic("transfers", queues=2)
        group = {"name": "smith-bank", "consume_from": "FIRST_OFFSET", "max_reconsume_times": 3}
        assert httpx.post(f"{broker.url}/v1/consumer-groups", json=group).status_code == 201
        smith.start(timeout=90)
        opened = httpx.post(f"{smith.url}/accounts", json={"account_id": "smith-1", "balance": 0})
        assert opened.status_code == 201, opened.text
        body = json.dumps({"transfer_id": "t-dup", "from": "bob-1", "to": "smith-1", "amount": 500})

        def send(name: str, text: str, key: str) -> str:
            events = run_client(
                tmp_path / name, broker.endpoint, "send",
                "--topic", "transfers", "--body", text, "--key", key,
            )  # fmt: skip
            assert not errors(events), events
            (message_id,) = [e["message_id"] for e in events if e["event"] == "sent"]
            return message_id

        first = send("producer-1", body, "t-dup")
        wait_until(
            lambda: httpx.get(f"{smith.url}/transfers/t-dup").status_code == 200, 60, "the credit"
        )
        junk = send("producer-junk", "not a transfer", "junk")
        second = send("producer-2", body, "t-dup")

        def settled() -> bool:
            view = broker.get("/v1/consumer-groups/smith-bank")
            dead = broker.get("/v1/consumer-groups/smith-bank/dlq")["messages"]
            done = [s for _, s, _ in smith_deliveries(sqlite_url) if s == "ACKED"]
            busy = view["lag"] or view["in_flight"] or view["retrying"]
            return len(done) == 2 and len(dead) == 1 and not busy

        wait_until(settled, 90, "both transfers acked, the junk dead-lettered")
        ledger_rows = httpx.get(f"{smith.url}/transfers/t-dup").json()["entries"]
        balance = httpx.get(f"{smith.url}/accounts/smith-1").json()
        (dead,) = broker.get("/v1/consumer-groups/smith-bank/dlq")["messages"]
    finally:
        stop_all([smith])
        broker.stop()
    deliveries = smith_deliveries(sqlite_url)
    assert [d for d in deliveries if d[0] != junk] == [
        (first, "EXPIRED", 0),  # failed, its lease cut to 1 s
        (first, "ACKED", 1),  # attempt 2: credited
        (second, "ACKED", 0),  # the duplicate: acked, not credited
    ]
    # a body that is not a transfer: retried (3 times, the group's maximum), then dead-lettered
    assert [d for d in deliveries if d[0] == junk] == [
        (junk, "EXPIRED", 0), (junk, "EXPIRED", 1), (junk, "EXPIRED", 2), (junk, "DEAD", 3),
    ]  # fmt: skip
    assert dead["msg_id"] == junk
    assert [(r["direction"], r["amount"]) for r in ledger_rows] == [("CREDIT", 500)]
    assert balance["balance"] == 500
