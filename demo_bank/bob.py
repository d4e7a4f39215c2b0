"""Bob's bank: ``POST /transfers`` debits the sender in a local transaction and publishes the
transfer as a half message in the framework's automatic check mode (``@producer.transactional``).

Insufficient funds (or an unknown account) roll the local transaction back -- no debit row, no log
row -- and the half is rolled back: the transfer is never delivered.  Checks are answered from the
framework's log; Bob has no check code."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
import orjson
from fastapi import FastAPI, Header
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from demo_bank.accounts import bank_app, error
from demo_bank.db import make_engine
from demo_bank.faults import FAULT_HEADER, CommitFaults, DroppingTransport
from demo_bank.schema import DEBIT, accounts, now_ms, transfers
from demo_bank.settings import BOB_GROUP, TOPIC, BankSettings
from framework import (
    CheckMode,
    HalfMQError,
    LocalTransactionState,
    Message,
    Retry,
    TransactionProducer,
)
from framework.fastapi import halfmq_lifespan

State = LocalTransactionState
# Rides through a broker restart (about 6 s of retries) before a transfer is refused with 503.
BROKER_RETRY = Retry(attempts=9, backoff=0.05, multiplier=2.0, max_backoff=1.0)


class TransferIn(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    from_account: str = Field(alias="from", min_length=1, max_length=64)
    to_account: str = Field(alias="to", min_length=1, max_length=64)
    amount: int = Field(gt=0, description="Cents")
    transfer_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]{1,64}$",
        description="The caller's id for the transfer (the demo's runner names each one, so it "
        "can follow those whose answer never came); none: Bob makes one",
    )


class TransferAccepted(BaseModel):
    transfer_id: str
    transaction_id: str
    state: str  # COMMITTED | COMMIT_PENDING (the check-back will commit) | UNKNOWN


@dataclass
class TransferOrder:
    """The local transaction's argument; it tells the route why it rolled back."""

    transfer_id: str
    from_account: str
    to_account: str
    amount: int
    fault: str | None = None
    refusal: str | None = None


def new_transfer_id() -> str:
    return f"t-{time.time_ns() // 1_000_000:x}-{secrets.token_hex(6)}"


def _known(sessions: sessionmaker[Session], transfer_id: str) -> bool:
    with sessions() as session:
        found = session.execute(
            select(transfers.c.transfer_id).where(transfers.c.transfer_id == transfer_id)
        ).first()
    return found is not None


def accept_order(
    sessions: sessionmaker[Session], body: TransferIn, fault: str | None
) -> TransferOrder | JSONResponse:
    """The order a transfer request asks for, or 409 when its id names a transfer already made
    (both of Bob's producers, the framework's and RocketMQ's client's, take requests this way)."""
    if body.transfer_id is not None and _known(sessions, body.transfer_id):
        return error(409, "TRANSFER_EXISTS", f"transfer {body.transfer_id} exists")
    return TransferOrder(
        body.transfer_id or new_transfer_id(),
        body.from_account,
        body.to_account,
        body.amount,
        fault=fault,
    )


def rolled_back(order: TransferOrder, transaction_id: str) -> JSONResponse:
    """The 422 for a transfer whose local transaction rolled back, its code the refusal (both of
    Bob's producers answer this way)."""
    code = order.refusal or "ROLLED_BACK"
    return error(
        422,
        code,
        f"transfer {order.transfer_id} rolled back: {code}",
        transfer_id=order.transfer_id,
        transaction_id=transaction_id,
    )


def transfer_body(order: TransferOrder) -> str:
    return orjson.dumps(
        {
            "transfer_id": order.transfer_id,
            "from": order.from_account,
            "to": order.to_account,
            "amount": order.amount,
        }
    ).decode()


def build_producer(
    settings: BankSettings,
    sessions: sessionmaker[Session],
    faults: CommitFaults,
    transport: httpx.BaseTransport,
) -> TransactionProducer:
    producer = TransactionProducer(
        BOB_GROUP,
        brokers=[settings.broker],
        check=CheckMode.pull(wait_seconds=settings.check_wait_seconds),
        retry=BROKER_RETRY,
        heartbeat_interval=settings.heartbeat_interval,
        transport=transport,
    )

    @producer.transactional(TOPIC, session_factory=sessions)
    def local_transaction(session: Session, message: Message, order: TransferOrder) -> State | None:
        if debit(session, order) is State.ROLLBACK_MESSAGE:
            return State.ROLLBACK_MESSAGE
        faults.arm(session, message.transaction_id, order.fault)
        return None  # commit

    return producer


def debit(session: Session, order: TransferOrder) -> State | None:
    """Bob's local transaction: debit only if the money is there, and the ``DEBIT`` ledger row.
    ``ROLLBACK_MESSAGE`` (with ``order.refusal`` saying why) when it may not; None to commit."""
    moved = session.execute(
        update(accounts)
        .where(accounts.c.account_id == order.from_account)
        .where(accounts.c.balance >= order.amount)
        .values(balance=accounts.c.balance - order.amount)
    )
    if moved.rowcount != 1:  # type: ignore[attr-defined]
        known = session.execute(
            select(accounts.c.account_id).where(accounts.c.account_id == order.from_account)
        ).first()
        order.refusal = "INSUFFICIENT_FUNDS" if known else "ACCOUNT_NOT_FOUND"
        return State.ROLLBACK_MESSAGE
    session.execute(
        insert(transfers).values(
            transfer_id=order.transfer_id,
            account_id=order.from_account,
            counterparty=order.to_account,
            amount=order.amount,
            direction=DEBIT,
            created_at=now_ms(),
        )
    )
    return None


def create_app(settings: BankSettings, *, transport: httpx.BaseTransport | None = None) -> FastAPI:
    """Bob's bank.  ``transport`` reaches the broker (``halfmq.testing``'s in tests)."""
    engine = make_engine(settings.database_url)
    sessions = sessionmaker(engine)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
    dropping = DroppingTransport(transport or httpx.HTTPTransport(limits=limits))
    faults = CommitFaults(settings.faults, dropping)
    faults.install(sessions)
    producer = build_producer(settings, sessions, faults, dropping)
    dropping.credentials = producer.credentials  # a shared request it rewrites is signed again
    app = bank_app("Bob's bank", engine, sessions, halfmq_lifespan(producer))
    app.state.producer = producer

    @app.post("/transfers", status_code=201, response_model=TransferAccepted)
    def create_transfer(
        body: TransferIn,
        x_demo_fault: Annotated[str | None, Header(alias=FAULT_HEADER)] = None,
    ) -> Any:
        order = accept_order(sessions, body, faults.accept(x_demo_fault))
        if not isinstance(order, TransferOrder):
            return order
        message = Message(
            TOPIC, body=transfer_body(order), keys=[order.transfer_id], tags="transfer"
        )
        try:
            result = producer.send_message_in_transaction(message, arg=order)
        except HalfMQError as exc:
            return error(503, "BROKER_UNAVAILABLE", f"the transfer was not sent: {exc}")
        if result.local_state is State.ROLLBACK_MESSAGE:
            return rolled_back(order, result.transaction_id)
        if result.local_state is State.UNKNOW:
            state = "UNKNOWN"
        else:
            state = "COMMITTED" if result.resolution == "COMMITTED" else "COMMIT_PENDING"
        return TransferAccepted(
            transfer_id=order.transfer_id, transaction_id=result.transaction_id, state=state
        )

    return app
