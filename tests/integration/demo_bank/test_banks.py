"""The banks' handlers against the real broker code in this process (``halfmq.testing``):
Bob's transfer route (commit, rollback on insufficient funds, a dropped commit resolved by the
check-back) and Smith's idempotent credit (a duplicate delivery, a poison transfer dead-lettered).
Real SQLite files, migrated by the banks' own Alembic environment."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from sqlalchemy import create_engine, func, select

from demo_bank import bob, db, smith
from demo_bank.faults import DROP_COMMIT, FAULT_HEADER
from demo_bank.schema import accounts, transfers
from demo_bank.settings import SMITH_GROUP, TOPIC, BankSettings
from framework import CheckMode, Message, TransactionProducer
from framework.tables import inbox, local_transaction_log
from halfmq.testing import InProcessBroker

LEVELS = " ".join(f"{100 * n}ms" for n in range(1, 19))


@pytest.fixture
def broker() -> Iterator[InProcessBroker]:
    with InProcessBroker(message_delay_level=LEVELS) as running:
        running.create_topic(TOPIC)
        yield running


def bank_url(tmp_path: Path, name: str) -> str:
    url = f"sqlite:///{tmp_path / f'{name}.db'}"
    db.upgrade(url)
    return url


@asynccontextmanager
async def serve(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with LifespanManager(app, startup_timeout=30, shutdown_timeout=30) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bank") as client:
            yield client


def count(url: str, table: Any, *where: Any) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = select(func.count()).select_from(table).where(*where)
            return int(conn.execute(query).scalar_one())
    finally:
        engine.dispose()


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def broker_state(broker: InProcessBroker, transaction_id: str) -> dict[str, Any]:
    with broker.client() as client:
        return dict(client.get(f"/v1/transactions/{transaction_id}").json())


async def test_bob_debits_and_the_broker_commits(broker: InProcessBroker, tmp_path: Path) -> None:
    url = bank_url(tmp_path, "bob")
    app = bob.create_app(
        BankSettings(database_url=url, broker=broker.url), transport=broker.transport
    )
    async with serve(app) as client:
        opened = await client.post("/accounts", json={"account_id": "bob-1", "balance": 1000})
        assert opened.status_code == 201
        answer = await client.post(
            "/transfers", json={"from": "bob-1", "to": "smith-1", "amount": 300}
        )
        assert answer.status_code == 201, answer.text
        accepted = answer.json()
        assert accepted["state"] == "COMMITTED"
        assert (await client.get("/accounts/bob-1")).json()["balance"] == 700
        ledger = (await client.get(f"/transfers/{accepted['transfer_id']}")).json()
    assert [(e["direction"], e["amount"], e["counterparty"]) for e in ledger["entries"]] == [
        ("DEBIT", 300, "smith-1")
    ]
    record = broker_state(broker, accepted["transaction_id"])
    assert (record["state"], record["resolved_by"]) == ("COMMITTED", "producer")


async def test_bob_insufficient_funds_rolls_back_without_a_debit(
    broker: InProcessBroker, tmp_path: Path
) -> None:
    url = bank_url(tmp_path, "bob")
    app = bob.create_app(
        BankSettings(database_url=url, broker=broker.url), transport=broker.transport
    )
    async with serve(app) as client:
        await client.post("/accounts", json={"account_id": "bob-1", "balance": 100})
        answer = await client.post(
            "/transfers", json={"from": "bob-1", "to": "smith-1", "amount": 101}
        )
        assert answer.status_code == 422
        error = answer.json()["error"]
        assert error["code"] == "INSUFFICIENT_FUNDS"
        assert (await client.get("/accounts/bob-1")).json()["balance"] == 100
        missing = await client.get(f"/transfers/{error['detail']['transfer_id']}")
        assert missing.status_code == 404
    assert count(url, transfers) == 0
    assert count(url, local_transaction_log) == 0  # rolled back with the debit
    assert broker_state(broker, error["detail"]["transaction_id"])["state"] == "ROLLED_BACK"


async def test_bob_dropped_commit_is_committed_by_the_check_back(
    broker: InProcessBroker, tmp_path: Path
) -> None:
    url = bank_url(tmp_path, "bob")
    settings = BankSettings(
        database_url=url, broker=broker.url, faults=True, check_wait_seconds=0.3
    )
    app = bob.create_app(settings, transport=broker.transport)
    async with serve(app) as client:
        await client.post("/accounts", json={"account_id": "bob-1", "balance": 1000})
        answer = await client.post(
            "/transfers",
            json={"from": "bob-1", "to": "smith-1", "amount": 5},
            headers={FAULT_HEADER: DROP_COMMIT},
        )
        assert answer.status_code == 201, answer.text
        accepted = answer.json()
        assert accepted["state"] == "COMMIT_PENDING"
        txid = accepted["transaction_id"]
        wait_for(lambda: broker_state(broker, txid)["state"] == "COMMITTED", 20, "the check-back")
    assert broker_state(broker, txid)["resolved_by"] == "check"


async def test_bob_ignores_fault_headers_unless_faults_are_on(
    broker: InProcessBroker, tmp_path: Path
) -> None:
    url = bank_url(tmp_path, "bob")
    app = bob.create_app(
        BankSettings(database_url=url, broker=broker.url), transport=broker.transport
    )
    async with serve(app) as client:
        await client.post("/accounts", json={"account_id": "bob-1", "balance": 1000})
        answer = await client.post(
            "/transfers",
            json={"from": "bob-1", "to": "smith-1", "amount": 5},
            headers={FAULT_HEADER: DROP_COMMIT},
        )
    assert answer.json()["state"] == "COMMITTED"


def transfer_message(transfer_id: str, to: str, amount: int) -> Message:
    body = {"transfer_id": transfer_id, "from": "bob-1", "to": to, "amount": amount}
    return Message(TOPIC, body=orjson.dumps(body).decode(), keys=[transfer_id])


async def test_smith_credits_once_when_a_transfer_is_delivered_twice(
    broker: InProcessBroker, tmp_path: Path
) -> None:
    url = bank_url(tmp_path, "smith")
    app = smith.create_app(
        BankSettings(database_url=url, broker=broker.url), transport=broker.transport
    )
    sender = TransactionProducer(
        "bob-bank", brokers=[broker.url], transport=broker.transport, check=CheckMode.none()
    )
    async with serve(app) as client:
        await client.post("/accounts", json={"account_id": "smith-1", "balance": 0})
        sender.send(transfer_message("t-1", "smith-1", 40))
        sender.send(transfer_message("t-1", "smith-1", 40))  # a duplicate: another msg id
        sender.send(transfer_message("t-2", "smith-1", 2))
        wait_for(lambda: count(url, inbox) == 2 and _group_idle(broker), 20, "both credits")
        assert (await client.get("/accounts/smith-1")).json()["balance"] == 42
        ledger = (await client.get("/transfers/t-1")).json()["entries"]
    sender.shutdown()
    assert [(e["direction"], e["amount"]) for e in ledger] == [("CREDIT", 40)]
    assert count(url, transfers) == 2


async def test_smith_dead_letters_a_transfer_to_an_unknown_account(
    broker: InProcessBroker, tmp_path: Path
) -> None:
    url = bank_url(tmp_path, "smith")
    settings = BankSettings(database_url=url, broker=broker.url, max_reconsume_times=1)
    app = smith.create_app(settings, transport=broker.transport)
    sender = TransactionProducer(
        "bob-bank", brokers=[broker.url], transport=broker.transport, check=CheckMode.none()
    )
    async with serve(app):
        sender.send(transfer_message("t-9", "smith-nobody", 7))
        wait_for(lambda: len(_dead(broker)) == 1, 30, "the dead letter")
    sender.shutdown()
    assert count(url, transfers) == 0
    assert count(url, accounts) == 0
    assert count(url, inbox) == 0


def _group_idle(broker: InProcessBroker) -> bool:
    with broker.client() as client:
        view = client.get(f"/v1/consumer-groups/{SMITH_GROUP}").json()
    return bool(view.get("lag") == 0 and view.get("in_flight") == 0)


def _dead(broker: InProcessBroker) -> list[dict[str, Any]]:
    with broker.client() as client:
        return list(client.get(f"/v1/consumer-groups/{SMITH_GROUP}/dlq").json()["messages"])
