"""Smith's bank on RocketMQ 5's official Python client (``halfmq demo --clients rocketmq``): a
``rocketmq.SimpleConsumer`` of group ``smith-bank`` on the gRPC port, in a few receive loops.

Each received transfer is credited in one local transaction with the framework's inbox row
``(smith-bank, transfer id)`` (:func:`framework.inbox.consume`), and acked only after that
commit: a redelivery -- a crash before the ack, a lease that ran out -- collides with the inbox
row and is acked without a second credit.  A failed credit is not acked; its invisibility is cut
to a short back-off (as RocketMQ's push consumer does on FAILURE) and it comes again with its
``delivery_attempt`` one higher.  Past the group's ``max_reconsume_times`` the broker
dead-letters it (``%DLQ%smith-bank``).

SimpleConsumer rather than PushConsumer: the ack must follow the inbox's commit, and the retry's
delay is the bank's to choose; a SimpleConsumer does both in plain code."""

from __future__ import annotations

import logging
import threading
from typing import Any

import orjson
from fastapi import FastAPI
from rocketmq import FilterExpression, SimpleConsumer
from rocketmq import Message as RmqMessage
from sqlalchemy.orm import Session, sessionmaker

from demo_bank.accounts import bank_app, started
from demo_bank.db import make_engine
from demo_bank.faults import FlakyCredits
from demo_bank.rmq_bob import client_configuration
from demo_bank.settings import SMITH_GROUP, TOPIC, BankSettings
from demo_bank.smith import credit
from framework import Message
from framework.inbox import consume

log = logging.getLogger("demo_bank.rmq_smith")
RECEIVERS = 4  # receive loops: credits are short, SQLite serializes their commits anyway
BATCH = 16
RETRY_SECONDS = 1  # a failed credit comes again after this (the client takes whole seconds)


def parse_transfer(body: bytes) -> dict[str, Any] | None:
    """The transfer a message carries; None for a body that is not one."""
    try:
        transfer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    fields = ("transfer_id", "from", "to", "amount")
    if not isinstance(transfer, dict) or not all(name in transfer for name in fields):
        return None
    return transfer


class Smith:
    """The receive loops and what they do with each message."""

    def __init__(self, settings: BankSettings, sessions: sessionmaker[Session]) -> None:
        self.settings = settings
        self.sessions = sessions
        self.flaky = FlakyCredits(settings.flaky_percent if settings.faults else 0.0, settings.seed)
        self.consumer = SimpleConsumer(
            client_configuration(settings),
            SMITH_GROUP,
            {TOPIC: FilterExpression("*")},
            await_duration=1,
        )
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.consumer.startup()
        for n in range(RECEIVERS):
            thread = threading.Thread(target=self._loop, name=f"smith-receive-{n}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=10)
        self.consumer.shutdown()

    def _loop(self) -> None:
        invisible = max(1, round(self.settings.invisible_seconds))
        while not self.stopping.is_set():
            try:
                messages = self.consumer.receive(BATCH, invisible)
            except Exception as exc:  # the broker is away: try again shortly
                log.warning("receive failed: %s", exc)
                self.stopping.wait(0.5)
                continue
            for message in messages:
                try:
                    self.handle(message)
                except Exception:  # unacked, it comes again after its lease: the loop goes on
                    log.exception("message %s not handled", message.message_id)

    def handle(self, message: RmqMessage) -> None:
        """Credit once (the inbox), then ack; a failure is retried after a short back-off."""
        transfer = parse_transfer(message.body)
        if transfer is None:
            log.warning("message %s is not a transfer: retried, then dead-lettered",
                        message.message_id)  # fmt: skip
            self.consumer.change_invisible_duration(message, RETRY_SECONDS)
            return
        attempt = message.delivery_attempt or 1

        def apply(session: Session, _: Message) -> None:
            self.flaky.maybe_fail(transfer["transfer_id"], attempt - 1)
            credit(session, transfer)

        inbox_key = Message(TOPIC, body="", msg_id=message.message_id)
        consumed = consume(self.sessions, apply, inbox_key, SMITH_GROUP, transfer["transfer_id"])
        try:
            if consumed.ok:
                self.consumer.ack(message)
            else:
                log.info("transfer %s, attempt %d: %s", transfer["transfer_id"], attempt,
                         consumed.error)  # fmt: skip
                self.consumer.change_invisible_duration(message, RETRY_SECONDS)
        except Exception as exc:  # its lease runs out and it comes again: the inbox has it
            log.warning("transfer %s: ack or retry not sent: %s", transfer["transfer_id"], exc)


def create_app(settings: BankSettings) -> FastAPI:
    """Smith's bank with RocketMQ's Python client for a consumer."""
    engine = make_engine(settings.database_url)
    sessions = sessionmaker(engine)
    smith = Smith(settings, sessions)
    return bank_app(
        "Smith's bank (RocketMQ client)", engine, sessions, started(smith.start, smith.stop)
    )
