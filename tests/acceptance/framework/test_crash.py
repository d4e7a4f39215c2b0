"""Automatic check mode under real crashes: a producer process (the framework, automatic check
mode) is killed with SIGKILL around its local commit; a new instance of the group, started
afterwards, answers the broker's check from the log.  Real broker subprocess, real HTTP, the local
database a SQLite file or the real PostgreSQL."""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from framework import CheckMode, Message, TransactionProducer
from framework.consumer import PushConsumer
from tests.integration.framework.conftest import Bank
from tests.integration.framework.conftest import effects as effects_table
from tests.integration.framework.helpers import wait_resolved
from tests.support import BrokerProcess, Program, wait_until

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("die", "expected", "effects"),
    [("after-commit", "COMMITTED", ["t-kill"]), ("before-commit", "ROLLED_BACK", [])],
)
def test_killed_producer_is_resolved_by_a_new_instance_from_the_log(
    sqlite_broker_process: BrokerProcess, bank: Bank, die: str, expected: str, effects: list[str]
) -> None:
    broker = sqlite_broker_process
    group = f"bob-{uuid.uuid4().hex[:8]}"
    admin = TransactionProducer(group, brokers=[broker.url], check=CheckMode.none())
    try:
        admin.create_topic("transfers", queues=2)
        doomed = Program(
            "tests.acceptance.framework.crash_producer",
            *(broker.url, bank.url, "t-kill", "--die", die, "--group", group),
        )
        try:
            txid = doomed.first_line()
        finally:
            doomed.kill()
        assert admin.transaction(txid)["state"] == "PREPARED"
    finally:
        admin.shutdown()

    successor = TransactionProducer(
        group, brokers=[broker.url], check=CheckMode.pull(wait_seconds=0.3)
    )

    @successor.transactional("transfers", session_factory=bank.Session)
    def debit(session: Session, message: Message, arg: object) -> None:
        raise AssertionError("a new instance only answers checks here")

    with successor:
        record = wait_resolved(successor, txid, timeout=20)
    assert (record["state"], record["resolved_by"]) == (expected, "check")
    assert bank.effects() == effects


def test_killed_idempotent_consumer_the_redelivery_has_no_second_effect(
    sqlite_broker_process: BrokerProcess, bank: Bank
) -> None:
    """A consumer commits its effect and its inbox row, then dies (SIGKILL) before its ack: the
    broker delivers the message again to a new member, which finds the inbox row and only acks."""
    broker = sqlite_broker_process
    group = f"smith-{uuid.uuid4().hex[:8]}"
    topic_owner = TransactionProducer(group, brokers=[broker.url], check=CheckMode.none())
    try:
        topic_owner.create_topic(group, queues=2)  # its own topic: no other test's messages
        topic_owner.send(Message(group, body="credit", keys=[f"{group}-t"]))
    finally:
        topic_owner.shutdown()
    with bank.Session.begin() as session:
        session.execute(insert(effects_table).values(key=f"{group}-t", amount=0))
    doomed = Program(
        "tests.acceptance.framework.crash_consumer", broker.url, bank.url, group, "--topic", group
    )
    try:
        assert doomed.first_line() == f"{group}-t"
    finally:
        doomed.kill()

    redelivered: list[Message] = []
    successor = PushConsumer(
        group, brokers=[broker.url], consume_from="FIRST_OFFSET", wait_seconds=0.5
    )

    @successor.subscribe(group, idempotent=bank.Session)
    def credit(session: Session, message: Message) -> None:
        redelivered.append(message)  # never runs: the inbox has the key

    deliveries: list[dict[str, object]] = []

    def observe(response: httpx.Response) -> None:  # what the broker hands to the successor
        if response.request.url.path.endswith("/receive"):
            response.read()
            deliveries.extend(response.json()["messages"])

    successor.client.http.event_hooks["response"].append(observe)
    with successor:
        wait_until(lambda: len(deliveries) >= 1, 15, "the redelivery")
        wait_until(lambda: _group_settled(broker, group), 10, "the ack")
    assert redelivered == []
    with bank.engine.connect() as conn:
        amount = conn.execute(
            select(effects_table.c.amount).where(effects_table.c.key == f"{group}-t")
        ).scalar_one()
    assert amount == 1


def _group_settled(broker: BrokerProcess, group: str) -> bool:
    view = httpx.get(f"{broker.url}/v1/consumer-groups/{group}", timeout=5).json()
    return bool(view["lag"] == 0 and view["in_flight"] == 0)
