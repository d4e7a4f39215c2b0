"""Bob's bank on RocketMQ 5's official Python client (``halfmq demo --clients rocketmq``): the same
``POST /transfers`` as :mod:`demo_bank.bob`, but the half goes through the gRPC port with
``rocketmq.Producer`` (its transactional producer) and a ``TransactionChecker``.

The order is RocketMQ's: send the half, run the local transaction, then commit or roll back.  The
local transaction and the checker use the framework's local-transaction log
(:mod:`framework.txlog`) in Bob's database, as its automatic check mode does: the log row goes in
with the debit, and a check inserts a ROLLBACK marker that waits for an open local transaction
and collides with a committed one -- so a check never answers ROLLBACK for a debit that then
commits.  The row's key is the half's message id: the one id both the sender (its receipt) and
the checker (the half it is asked about) are given by this client."""

from __future__ import annotations

import logging
import os
import signal
from typing import Annotated, Any

from fastapi import FastAPI, Header
from rocketmq import (
    ClientConfiguration,
    Credentials,
    Producer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq import Message as RmqMessage
from sqlalchemy.orm import Session, sessionmaker

from demo_bank.accounts import bank_app, error, started
from demo_bank.bob import (
    TransferAccepted,
    TransferIn,
    TransferOrder,
    accept_order,
    debit,
    rolled_back,
    transfer_body,
)
from demo_bank.db import make_engine
from demo_bank.faults import CRASH_AFTER_COMMIT, DROP_COMMIT, FAULT_HEADER, KINDS
from demo_bank.settings import BOB_GROUP, TOPIC, BankSettings
from framework import LocalTransactionState, Message
from framework.signing import ACCESS_KEY_ENV, SECRET_KEY_ENV
from framework.txlog import check, run_local

State = LocalTransactionState
log = logging.getLogger("demo_bank.rmq_bob")
RESOLUTIONS = {
    State.COMMIT_MESSAGE: TransactionResolution.COMMIT,
    State.ROLLBACK_MESSAGE: TransactionResolution.ROLLBACK,
    State.UNKNOW: TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED,  # asked again
}


def client_configuration(settings: BankSettings) -> ClientConfiguration:
    """The gRPC endpoint, signed with the bank's keys from its environment (the same accounts
    as REST: the broker checks MQv2-HMAC-SHA1 against ``plain_acl.yml``)."""
    credentials = Credentials(
        os.environ.get(ACCESS_KEY_ENV, ""), os.environ.get(SECRET_KEY_ENV, "")
    )
    return ClientConfiguration(settings.grpc_endpoint, credentials, request_timeout=10)


def log_key(message_id: str) -> Message:
    """The log row's identity for one half: its message id stands for the transaction id."""
    return Message(TOPIC, body="", msg_id=message_id, transaction_id=message_id)


class LedgerChecker(TransactionChecker):  # type: ignore[misc]  # the client is untyped
    """Answers the broker's check-back from Bob's local-transaction log; no other check code."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def check(self, message: RmqMessage) -> TransactionResolution:
        try:
            state = check(self.sessions, log_key(message.message_id), BOB_GROUP)
        except Exception:  # the database is busy or gone: asked again next round
            log.exception("check of %s failed; answered UNKNOWN", message.message_id)
            state = State.UNKNOW
        return RESOLUTIONS[state]


def half_message(order: TransferOrder) -> RmqMessage:
    message = RmqMessage()
    message.topic = TOPIC
    message.body = transfer_body(order).encode()
    message.keys = order.transfer_id
    message.tag = "transfer"
    return message


class Bob:
    """The route's work: the half, the local transaction, the end of the transaction."""

    def __init__(self, settings: BankSettings, sessions: sessionmaker[Session]) -> None:
        self.settings = settings
        self.sessions = sessions
        self.producer = Producer(
            client_configuration(settings), (TOPIC,), checker=LedgerChecker(sessions)
        )

    def transfer(self, body: TransferIn, fault: str | None) -> Any:
        order = accept_order(self.sessions, body, fault)
        if not isinstance(order, TransferOrder):
            return order
        transaction = self.producer.begin_transaction()
        try:
            receipt = self.producer.send(half_message(order), transaction)
        except Exception as exc:  # no half stored, or one the check-back rolls back: no debit
            return error(503, "BROKER_UNAVAILABLE", f"the transfer was not sent: {exc}")
        state, failure = run_local(
            self.sessions, self._local, log_key(receipt.message_id), order, BOB_GROUP
        )
        if failure is not None:
            log.warning("transfer %s: local transaction: %r", order.transfer_id, failure)
        if state is State.COMMIT_MESSAGE and order.fault == CRASH_AFTER_COMMIT:
            os.kill(os.getpid(), signal.SIGKILL)  # committed locally; the broker never hears
        return self._end(transaction, order, receipt.transaction_id, state)

    @staticmethod
    def _local(session: Session, message: Message, order: TransferOrder) -> State | None:
        return debit(session, order)

    def _end(self, transaction: Any, order: TransferOrder, tx_id: str, state: State) -> Any:
        if state is State.ROLLBACK_MESSAGE:
            try:
                transaction.rollback()
            except Exception as exc:  # the check-back rolls it back
                log.warning("transfer %s: rollback not sent: %s", order.transfer_id, exc)
            return rolled_back(order, tx_id)
        if state is State.UNKNOW:
            answered = "UNKNOWN"
        elif order.fault == DROP_COMMIT:
            answered = "COMMIT_PENDING"  # the commit never leaves Bob: the check-back commits
        else:
            answered = "COMMITTED" if self._commit(transaction, order) else "COMMIT_PENDING"
        return TransferAccepted(transfer_id=order.transfer_id, transaction_id=tx_id, state=answered)

    @staticmethod
    def _commit(transaction: Any, order: TransferOrder) -> bool:
        try:
            transaction.commit()
        except Exception as exc:  # committed locally: the check-back commits it
            log.warning("transfer %s: commit not sent: %s", order.transfer_id, exc)
            return False
        return True


def create_app(settings: BankSettings) -> FastAPI:
    """Bob's bank with RocketMQ's Python client for a producer."""
    engine = make_engine(settings.database_url)
    sessions = sessionmaker(engine)
    bob = Bob(settings, sessions)
    running = started(bob.producer.startup, bob.producer.shutdown)
    app = bank_app("Bob's bank (RocketMQ client)", engine, sessions, running)

    @app.post("/transfers", status_code=201, response_model=TransferAccepted)
    def create_transfer(
        body: TransferIn,
        x_demo_fault: Annotated[str | None, Header(alias=FAULT_HEADER)] = None,
    ) -> Any:
        fault = x_demo_fault if settings.faults and x_demo_fault in KINDS else None
        return bob.transfer(body, fault)

    return app
