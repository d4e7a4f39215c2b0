"""Smith's bank: consumes ``transfers`` and credits the receiver idempotently -- the framework's
inbox row ``(smith-bank, transfer id)`` and the credit share one local transaction, so a
redelivered transfer (a crash before the ack, an expired lease) is acked without a second credit.

A transfer to an account Smith's bank does not have fails every delivery: after
``max_reconsume_times`` retries it is dead-lettered (``%DLQ%smith-bank``), to be resent by an
operator once the account is opened."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
from fastapi import FastAPI
from sqlalchemy import insert, update
from sqlalchemy.orm import Session, sessionmaker

from demo_bank.accounts import bank_app
from demo_bank.bob import BROKER_RETRY
from demo_bank.db import make_engine
from demo_bank.faults import FlakyCredits
from demo_bank.schema import CREDIT, accounts, now_ms, transfers
from demo_bank.settings import SMITH_GROUP, TOPIC, BankSettings
from framework import AckMode, BatchAck, Message, PushConsumer
from framework.fastapi import halfmq_lifespan


class UnknownAccount(Exception):
    """The receiver has no account here: every delivery fails (the message is dead-lettered)."""


def build_consumer(
    settings: BankSettings,
    sessions: sessionmaker[Session],
    flaky: FlakyCredits,
    transport: httpx.BaseTransport | None = None,
) -> PushConsumer:
    consumer = PushConsumer(
        SMITH_GROUP,
        brokers=[settings.broker],
        transport=transport,
        consume_from="FIRST_OFFSET",
        invisible_seconds=settings.invisible_seconds,
        wait_seconds=1.0,
        max_reconsume_times=settings.max_reconsume_times,
        batch_size=64,
        concurrency=8,
        batch_ack=BatchAck(max_count=32, max_delay=0.3),
        retry=BROKER_RETRY,
        shutdown_timeout=10,
    )

    @consumer.subscribe(TOPIC, idempotent=sessions, ack_mode=AckMode.BATCH)
    def handle(session: Session, message: Message) -> None:
        transfer: dict[str, Any] = orjson.loads(message.body)
        flaky.maybe_fail(transfer["transfer_id"], message.reconsume_times)
        credit(session, transfer)

    return consumer


def credit(session: Session, transfer: dict[str, Any]) -> None:
    """Credit the receiver and write the ``CREDIT`` ledger row; raises :class:`UnknownAccount`
    for an account Smith's bank does not have."""
    moved = session.execute(
        update(accounts)
        .where(accounts.c.account_id == transfer["to"])
        .values(balance=accounts.c.balance + transfer["amount"])
    )
    if moved.rowcount != 1:  # type: ignore[attr-defined]
        raise UnknownAccount(f"transfer {transfer['transfer_id']}: no account {transfer['to']}")
    session.execute(
        insert(transfers).values(
            transfer_id=transfer["transfer_id"],
            account_id=transfer["to"],
            counterparty=transfer["from"],
            amount=transfer["amount"],
            direction=CREDIT,
            created_at=now_ms(),
        )
    )


def create_app(settings: BankSettings, *, transport: httpx.BaseTransport | None = None) -> FastAPI:
    """Smith's bank.  ``transport`` reaches the broker (``halfmq.testing``'s in tests)."""
    engine = make_engine(settings.database_url)
    sessions = sessionmaker(engine)
    flaky = FlakyCredits(settings.flaky_percent if settings.faults else 0.0, settings.seed)
    consumer = build_consumer(settings, sessions, flaky, transport)
    app = bank_app("Smith's bank", engine, sessions, halfmq_lifespan(consumer))
    app.state.consumer = consumer
    return app
