"""An end sent one way that never arrives (issue 33): the broker process is killed while the local
transaction runs, so the commit sent from the background finds no broker.  Nothing is lost: the
half was durable before the local transaction ran, and once a broker is back on the same store the
check-back asks the group, whose automatic mode answers from its log row.  Real processes, real
HTTP, the broker killed and restarted by PID."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session

from framework import CheckMode, LocalTransactionState, Message, Retry, TransactionProducer
from tests.integration.framework.conftest import FAST_FLAGS, PULL, Bank, effects
from tests.integration.framework.helpers import wait_resolved
from tests.support import BrokerProcess, free_port, wait_until

QUICK = Retry(attempts=2, backoff=0.01)  # a dead broker fails fast


def test_a_lost_oneway_end_is_resolved_by_the_check_back(bank: Bank, tmp_path: Path) -> None:
    from broker_service.store import migrate

    store = f"sqlite:///{tmp_path / 'broker.db'}"
    migrate.upgrade(store)
    port = free_port()
    broker = BrokerProcess(store, port, tmp_path / "broker.log", *FAST_FLAGS)
    broker.start()
    doer = TransactionProducer(
        "bob-bank", brokers=[broker.url], check=CheckMode.none(), retry=QUICK, end_oneway=True
    )
    checker: TransactionProducer | None = None
    try:
        with TransactionProducer("admin", brokers=[broker.url], check=CheckMode.none()) as admin:
            admin.create_topic("transfers")

        @doer.transactional("transfers", session_factory=bank.Session)
        def debit(session: Session, message: Message, arg: Any) -> None:
            session.execute(insert(effects).values(key=message.keys[0], amount=1))
            broker.kill()  # the half is stored; the end will find no broker

        with doer:
            result = doer.send_message_in_transaction(Message("transfers", keys=["t-lost"]))
            assert (result.local_state, result.resolution) == (
                LocalTransactionState.COMMIT_MESSAGE,
                None,
            )
            wait_until(lambda: doer.oneway_ends.read().failed == 1, 30, "the end to fail")
        assert bank.effects() == ["t-lost"]

        broker = BrokerProcess(store, port, tmp_path / "broker-again.log", *FAST_FLAGS)
        broker.start()
        checker = TransactionProducer("bob-bank", brokers=[broker.url], check=PULL)
        checker.transactional("transfers", session_factory=bank.Session)(debit)
        began = time.monotonic()
        with checker:
            record = wait_resolved(checker, result.transaction_id, timeout=60)
        assert (record["state"], record["resolved_by"]) == ("COMMITTED", "check"), (
            f"after {time.monotonic() - began:.1f} s: {record}"
        )
        assert bank.effects() == ["t-lost"]  # the check read the log; the debit ran once
    finally:
        broker.stop()
