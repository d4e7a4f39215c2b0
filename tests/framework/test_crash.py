"""Automatic check mode under real crashes: a producer process (the framework, automatic check
mode) is killed with SIGKILL around its local commit; a new instance of the group, started
afterwards, answers the broker's check from the log.  Real broker subprocess, real HTTP, the local
database a SQLite file or the real PostgreSQL."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy.orm import Session

from framework import CheckMode, Message, TransactionProducer
from tests.framework.conftest import Bank
from tests.framework.helpers import wait_resolved
from tests.support import BrokerProcess, Program

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
            "tests.framework.crash_producer",
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
