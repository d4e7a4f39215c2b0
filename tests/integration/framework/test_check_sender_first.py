"""Check-back asks the instance that sent the half first, while it is live (issue 30, item 3;
RocketMQ's open request to check the original producer first): a framework producer names its
``client_id`` with each half, on both stores, against the real broker in this process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from framework import CheckMode, LocalTransactionState, Message, TransactionProducer
from halfmq.testing import InProcessBroker
from tests.integration.framework.conftest import FAST

State = LocalTransactionState
PULL = CheckMode.pull(wait_seconds=0.3)


@pytest.fixture
def broker(migrated_url: str) -> Iterator[InProcessBroker]:
    with InProcessBroker(database_url=migrated_url, **FAST) as running:
        running.create_topic("transfers")
        yield running


def _producer(broker: InProcessBroker, client_id: str) -> TransactionProducer:
    return TransactionProducer(
        "bob-bank", brokers=[broker.url], transport=broker.transport, check=PULL,
        client_id=client_id,
    )  # fmt: skip


def test_the_checks_of_a_half_go_to_the_instance_that_sent_it(broker: InProcessBroker) -> None:
    sender, other = _producer(broker, "bob-host:1:a"), _producer(broker, "bob-host:2:b")
    checked: dict[str, list[str]] = {"a": [], "b": []}
    lock = threading.Lock()

    def checker(name: str, answer: State) -> object:
        def check(message: Message) -> State:
            with lock:
                checked[name].append(message.transaction_id or "")
            return answer

        return check

    # the sender does not know yet (UNKNOW), the other would commit if it were asked
    sender.check_local_transaction("transfers")(checker("a", State.UNKNOW))
    other.check_local_transaction("transfers")(checker("b", State.COMMIT_MESSAGE))
    sender.execute_local_transaction("transfers")(lambda message, arg: State.UNKNOW)
    with sender, other:
        halves = [
            sender.send_message_in_transaction(Message("transfers", body=f"debit {n}"))
            for n in range(4)
        ]
        ids = {h.transaction_id for h in halves}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with lock:
                if ids <= set(checked["a"]) and len(checked["a"]) >= 8:
                    break
            time.sleep(0.1)
    with lock:
        assert ids <= set(checked["a"]), checked  # every half was checked with its sender ...
        assert checked["b"] == [], checked  # ... and none with the other instance while it lived
    with broker.client() as client:
        for half in halves:
            state = client.get(f"/v1/transactions/{half.transaction_id}").json()["state"]
            assert state == "PREPARED"  # the sender kept answering UNKNOW: nobody committed
