"""Automatic check mode (``@producer.transactional``) on a real SQLite file and the real
PostgreSQL: the log row rides in the user's transaction, and a check that races an open local
transaction answers what finally happened."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event, insert
from sqlalchemy.orm import Session, sessionmaker

from framework import (
    CheckMode,
    LocalTransactionState,
    Message,
    TransactionProducer,
    TransactionSendResult,
    txlog,
)
from framework.tables import local_transaction_log
from tests.integration.framework.conftest import Bank, effects
from tests.integration.framework.helpers import wait_resolved

State = LocalTransactionState
Make = Callable[..., TransactionProducer]


def _debit(session: Session, message: Message, arg: Any) -> LocalTransactionState | None:
    session.execute(insert(effects).values(key=message.keys[0], amount=arg or 1))
    return None


def test_commit_writes_the_effect_and_the_log_row(bank: Bank, producers: Make) -> None:
    producer = producers()
    producer.transactional("transfers", session_factory=bank.Session)(_debit)
    with producer:
        result = producer.send_message_in_transaction(Message("transfers", keys=["t-1"]), arg=5)
    assert (result.local_state, result.resolution) == (State.COMMIT_MESSAGE, "COMMITTED")
    assert bank.effects() == ["t-1"]
    assert bank.count(local_transaction_log) == 1


@pytest.mark.parametrize("how", ["raise", "return"])
def test_rollback_leaves_nothing(bank: Bank, producers: Make, how: str) -> None:
    producer = producers()

    @producer.transactional("transfers", session_factory=bank.Session)
    def debit(session: Session, message: Message, arg: Any) -> LocalTransactionState:
        _debit(session, message, arg)
        if how == "raise":
            raise ValueError("insufficient funds")
        return State.ROLLBACK_MESSAGE

    with producer:
        result = producer.send_message_in_transaction(Message("transfers", keys=["t-1"]))
    assert (result.local_state, result.resolution) == (State.ROLLBACK_MESSAGE, "ROLLED_BACK")
    assert isinstance(result.error, ValueError) == (how == "raise")
    assert bank.effects() == []
    assert bank.count(local_transaction_log) == 0


def test_check_answers_from_the_log(bank: Bank) -> None:
    committed = Message("transfers", keys=["a"], transaction_id="tx-committed")
    state, _ = txlog.run_local(bank.Session, _debit, committed, None, "bob-bank")
    assert state is State.COMMIT_MESSAGE
    assert txlog.check(bank.Session, committed, "bob-bank") is State.COMMIT_MESSAGE
    never_ran = Message("transfers", keys=["b"], transaction_id="tx-lost")
    assert txlog.check(bank.Session, never_ran, "bob-bank") is State.ROLLBACK_MESSAGE
    assert txlog.check(bank.Session, never_ran, "bob-bank") is State.ROLLBACK_MESSAGE
    # The zombie: a local transaction that starts after the check said ROLLBACK cannot commit.
    state, error = txlog.run_local(bank.Session, _debit, never_ran, None, "bob-bank")
    assert state is State.ROLLBACK_MESSAGE
    assert error is not None
    assert bank.effects() == ["a"]


@pytest.mark.parametrize("final", [State.COMMIT_MESSAGE, State.ROLLBACK_MESSAGE])
def test_a_check_racing_an_open_local_transaction_answers_what_finally_happened(
    bank: Bank, producers: Make, final: LocalTransactionState
) -> None:
    """The local transaction holds its log row open while the broker's check arrives at another
    instance of the group: the check waits for it, then answers its final outcome.  The doer sends
    its own decision only after the broker applied the check's answer, so the check's answer is
    the one that counts (``resolved_by == "check"``)."""
    doer = producers(client_id="doer", check=CheckMode.none())
    checker = producers(client_id="checker")
    release, in_local = threading.Event(), threading.Event()
    doer_sessions = sessionmaker(bank.engine)
    txids: list[str] = []

    @doer.transactional("transfers", session_factory=doer_sessions)
    def slow(session: Session, message: Message, arg: Any) -> LocalTransactionState | None:
        assert message.transaction_id is not None
        session.info["txid"] = message.transaction_id
        txids.append(message.transaction_id)
        _debit(session, message, arg)
        in_local.set()
        assert release.wait(20)
        return final if final is State.ROLLBACK_MESSAGE else None

    checker.transactional("transfers", session_factory=bank.Session)(_debit)

    def hold_until_the_check_decided(session: Session) -> None:
        if "txid" in session.info:
            wait_resolved(checker, session.info.pop("txid"), timeout=20)

    event.listen(doer_sessions, "after_commit", hold_until_the_check_decided)
    event.listen(doer_sessions, "after_rollback", hold_until_the_check_decided)

    outcome: list[TransactionSendResult] = []
    with checker:
        thread = threading.Thread(
            target=lambda: outcome.append(
                doer.send_message_in_transaction(Message("transfers", keys=["t-race"]))
            )
        )
        thread.start()
        assert in_local.wait(10)
        txid = txids[0]
        deadline = time.monotonic() + 10
        while checker.transaction(txid)["check_times"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        record = checker.transaction(txid)
        assert record["check_times"] >= 1  # the check arrived ...
        assert record["state"] == "PREPARED"  # ... and waits on the open local transaction
        release.set()
        thread.join(30)
        record = wait_resolved(checker, txid)
    expected = "COMMITTED" if final is State.COMMIT_MESSAGE else "ROLLED_BACK"
    assert (record["state"], record["resolved_by"]) == (expected, "check")
    assert outcome[0].local_state is final
    assert outcome[0].resolution == expected
    assert bank.effects() == (["t-race"] if final is State.COMMIT_MESSAGE else [])
