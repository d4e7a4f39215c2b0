"""``halfmq demo``'s runner at small N with every fault on, on both stores: the broker and both
banks as real processes, SIGKILLs, dropped commits, overdraws, a flaky and a poison credit, a
broker restart.  The invariants are asserted from the two banks' databases (and the broker's store
for what it rolled back), never from the runner's own counters."""

from __future__ import annotations

import os
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from rich.console import Console
from sqlalchemy import create_engine, select, text
from sqlalchemy.exc import OperationalError

from broker_service.store import schema as broker_schema
from demo_bank.plan import BOB_ACCOUNTS, OPENING_BALANCE, make_plan
from demo_bank.runner import DemoConfig, DemoResult, run
from demo_bank.schema import accounts, transfers
from demo_bank.stores import drop_postgresql_stores
from tests.support import PG_BASE_URL

pytestmark = pytest.mark.slow

N = 60
IN_CI = os.environ.get("CI", "").lower() == "true"


def seed_with_every_fault() -> int:
    """A seed whose plan has an overdraw, a dropped commit and the poison transfer at N."""
    for seed in range(100):
        plan = make_plan(N, seed, faults=True)
        if all(plan.count(kind) for kind in ("overdraw", "drop-commit", "poison")):
            return seed
    raise AssertionError("no seed plans every fault")


def _pg_or_skip() -> None:
    try:
        engine = create_engine(PG_BASE_URL)
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except OperationalError as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required in CI and unreachable: {exc}")
        pytest.skip(f"PostgreSQL unreachable: {exc}")


@pytest.fixture(params=["sqlite", "postgresql"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DemoConfig]:
    base = DemoConfig(
        transfers=N,
        seed=seed_with_every_fault(),
        concurrency=8,
        run_dir=tmp_path,
        settle_timeout=60.0,
        reconcile=False,
    )
    if request.param == "sqlite":
        yield base
        return
    _pg_or_skip()
    prefix = f"halfmq_t_{uuid.uuid4().hex[:10]}"
    try:
        yield replace(base, store="postgresql", pg_url=PG_BASE_URL, pg_prefix=prefix)
    finally:
        drop_postgresql_stores(PG_BASE_URL, prefix)


def ledger(url: str) -> tuple[dict[str, int], dict[str, list[tuple[str, int]]]]:
    """Balances and transfer id -> [(direction, amount)], straight from a bank's database."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            balances = dict(conn.execute(select(accounts.c.account_id, accounts.c.balance)).all())
            rows: dict[str, list[tuple[str, int]]] = defaultdict(list)
            query = select(transfers.c.transfer_id, transfers.c.direction, transfers.c.amount)
            for transfer_id, direction, amount in conn.execute(query):
                rows[transfer_id].append((direction, amount))
    finally:
        engine.dispose()
    return balances, dict(rows)


def broker_records(url: str) -> tuple[dict[str, tuple[str, str | None]], Counter[str], int]:
    """transfer id -> (state, resolved_by) of Bob's transactions; Smith's deliveries per state;
    dead letters."""
    m, t, d = broker_schema.messages, broker_schema.transactions, broker_schema.deliveries
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            keys = {
                txid: orjson.loads(k)[0]
                for txid, k in conn.execute(
                    select(m.c.transaction_id, m.c["keys"]).where(
                        m.c.topic == "RMQ_SYS_TRANS_HALF_TOPIC"
                    )
                )
            }
            states = {
                keys[txid]: (state, by)
                for txid, state, by in conn.execute(
                    select(t.c.transaction_id, t.c.state, t.c.resolved_by).where(
                        t.c.producer_group == "bob-bank"
                    )
                )
            }
            deliveries = Counter(
                state
                for (state,) in conn.execute(
                    select(d.c.state).where(d.c.consumer_group == "smith-bank")
                )
            )
            dead = len(conn.execute(select(m.c.id).where(m.c.topic == "%DLQ%smith-bank")).all())
    finally:
        engine.dispose()
    return states, deliveries, dead


def test_demo_with_every_fault_keeps_every_invariant(config: DemoConfig) -> None:
    console = Console(file=open(os.devnull, "w"), width=120)  # noqa: SIM115
    try:
        result: DemoResult = run(config, console)
    finally:
        console.file.close()
    assert result.settled, result.pending

    bob_balances, bob_rows = ledger(result.stores.bob)
    smith_balances, smith_rows = ledger(result.stores.smith)
    states, deliveries, dead = broker_records(result.stores.broker)

    # money is conserved across the two banks
    opening = OPENING_BALANCE * len(BOB_ACCOUNTS)
    assert sum(bob_balances.values()) + sum(smith_balances.values()) == opening
    debits, credits = bob_rows, smith_rows
    assert all(rows[0][0] == "DEBIT" and len(rows) == 1 for rows in debits.values())
    # every committed transfer is credited exactly once, with its amount
    for transfer_id, [(_, amount)] in debits.items():
        assert credits.get(transfer_id) == [("CREDIT", amount)], transfer_id
    # no credit without a debit
    assert credits.keys() <= debits.keys()
    # no rolled-back transfer is credited (nor left debited)
    rolled_back = {t for t, (state, _) in states.items() if state == "ROLLED_BACK"}
    assert rolled_back
    assert not rolled_back & credits.keys()
    assert not rolled_back & debits.keys()
    # the broker committed exactly what Bob debited; nothing is left open
    committed = {t for t, (state, _) in states.items() if state == "COMMITTED"}
    assert committed == debits.keys()
    assert set(states) == committed | rolled_back

    # the faults really happened
    assert any(by == "check" for state, by in states.values() if state == "COMMITTED")
    assert deliveries["NACKED"] >= 1  # the flaky and the poison credits were retried
    assert dead >= 1  # the poison transfer went to the DLQ (and was resent)
    assert len(debits) >= N * 0.8
    assert result.exit_code == 0
