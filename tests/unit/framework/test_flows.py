"""The decision flows without I/O: each is walked here step by step with scripted answers, the way
the sync and asyncio clients walk them with real ones."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from framework import (
    AckMode,
    BatchAck,
    CheckMode,
    ConsumeResult,
    LocalTransactionState,
    Message,
    NotFoundError,
    PushConsumer,
    TransactionProducer,
)
from framework.flow import Flow, Invoke, Step, Steps
from framework.protocol import AckResult, Call, HalfReceipt

T = TypeVar("T")
State = LocalTransactionState
NOWHERE = ["http://127.0.0.1:9"]  # never called: the flows do no I/O


def walk(flow: Flow[T], answer: Callable[[Call[Any]], Any]) -> tuple[T, list[Step]]:
    """Take every step: a call is answered by ``answer`` (or raises), an Invoke is called."""
    steps, seen = Steps(flow), []
    for step in steps:
        seen.append(step)
        try:
            steps.reply = answer(step) if isinstance(step, Call) else step.fn(*step.args)
        except Exception as exc:
            steps.error = exc
    return steps.result, seen


def a_broker(call: Call[Any]) -> Any:
    """The answers of a broker that stores every half and takes every decision."""
    if call.path == "/v1/transactions":
        return HalfReceipt("tx-1", "m-1")
    if call.path.endswith("/commit"):
        return "COMMITTED"
    if call.path.endswith("/rollback"):
        return "ROLLED_BACK"
    if call.path.endswith("/ack"):
        return AckResult(len(call.body["receipt_handles"]))
    return "RETRY"


@pytest.fixture
def producer() -> Iterator[TransactionProducer]:
    made = TransactionProducer("bank", NOWHERE, check=CheckMode.none())
    yield made
    made.client.close()


@pytest.fixture
def consumer() -> Iterator[PushConsumer]:
    made = PushConsumer("shop", NOWHERE, batch_ack=BatchAck(max_count=2))
    yield made
    made.client.close()


def _paths(seen: list[Step]) -> list[str]:
    return [s.path if isinstance(s, Call) else "invoke" for s in seen]


def test_the_half_comes_first_then_the_local_transaction_then_the_commit(
    producer: TransactionProducer,
) -> None:
    producer.execute_local_transaction("transfers")(lambda m, arg: State.COMMIT_MESSAGE)
    result, seen = walk(producer.send_in_transaction_flow(Message("transfers"), 7), a_broker)
    assert _paths(seen) == ["/v1/transactions", "invoke", "/v1/transactions/tx-1/commit"]
    invoked = seen[1]
    assert isinstance(invoked, Invoke)
    assert invoked.args[0].transaction_id == "tx-1"
    assert invoked.args[1] == 7
    assert (result.local_state, result.resolution, result.error) == (
        State.COMMIT_MESSAGE,
        "COMMITTED",
        None,
    )


def test_a_local_transaction_that_raises_is_unknow_and_ends_nothing(
    producer: TransactionProducer,
) -> None:
    failure = RuntimeError("db down")

    @producer.execute_local_transaction
    def debit(message: Message, arg: Any) -> State:
        raise failure

    result, seen = walk(producer.send_in_transaction_flow(Message("transfers"), None), a_broker)
    assert _paths(seen) == ["/v1/transactions", "invoke"]
    assert (result.local_state, result.resolution, result.error) == (State.UNKNOW, None, failure)


def test_an_end_that_fails_is_reported_not_raised(producer: TransactionProducer) -> None:
    producer.execute_local_transaction(lambda m, arg: State.ROLLBACK_MESSAGE)
    lost = NotFoundError("gone", status=404, code="TRANSACTION_NOT_FOUND")

    def answer(call: Call[Any]) -> Any:
        if call.path.endswith("/rollback"):
            raise lost
        return a_broker(call)

    result, _ = walk(producer.send_in_transaction_flow(Message("transfers"), None), answer)
    assert (result.local_state, result.resolution, result.error) == (
        State.ROLLBACK_MESSAGE,
        None,
        lost,
    )


def test_a_half_that_cannot_be_stored_raises_before_the_local_transaction(
    producer: TransactionProducer,
) -> None:
    ran: list[Message] = []
    producer.execute_local_transaction(lambda m, arg: ran.append(m))
    refused = NotFoundError("no topic", status=404, code="TOPIC_NOT_FOUND")

    def answer(call: Call[Any]) -> Any:
        raise refused

    with pytest.raises(NotFoundError):
        walk(producer.send_in_transaction_flow(Message("transfers"), None), answer)
    assert ran == []


def test_a_check_without_checker_or_with_a_failing_one_is_unknow(
    producer: TransactionProducer,
) -> None:
    check = Message("transfers", transaction_id="tx-1")
    assert walk(producer.check_flow(check), a_broker) == (State.UNKNOW, [])

    @producer.check_local_transaction("transfers")
    def was_debited(message: Message) -> State:
        raise RuntimeError("db down")

    state, seen = walk(producer.check_flow(check), a_broker)
    assert (state, _paths(seen)) == (State.UNKNOW, ["invoke"])


def test_a_pulled_check_is_answered_from_check_unless_unknow(
    producer: TransactionProducer,
) -> None:
    answers = iter([State.ROLLBACK_MESSAGE, State.UNKNOW])
    producer.check_local_transaction(lambda m: next(answers))
    check = Message("transfers", transaction_id="tx-1")
    _, seen = walk(producer.pulled_check_flow(check), a_broker)
    assert _paths(seen) == ["invoke", "/v1/transactions/tx-1/rollback"]
    assert isinstance(seen[1], Call)
    assert seen[1].body == {
        "producer_group": "bank",
        "from_check": True,
        "client_id": producer.client_id,
    }
    _, seen = walk(producer.pulled_check_flow(check), a_broker)
    assert _paths(seen) == ["invoke"]


def _delivered(handle: str) -> Message:
    return Message("orders", receipt_handle=handle)


def test_a_consumed_message_is_acked_or_nacked(consumer: PushConsumer) -> None:
    results = iter([None, ConsumeResult.RECONSUME_LATER])
    consumer.subscribe("orders")(lambda m: next(results))
    _, seen = walk(consumer.consume_flow(_delivered("h-1")), a_broker)
    assert _paths(seen) == ["invoke", "/v1/consumer-groups/shop/ack"]
    _, seen = walk(consumer.consume_flow(_delivered("h-2")), a_broker)
    assert _paths(seen) == ["invoke", "/v1/consumer-groups/shop/nack"]


def test_batched_acks_go_when_the_batch_is_full(consumer: PushConsumer) -> None:
    consumer.subscribe("orders", ack_mode=AckMode.BATCH)(lambda m: None)
    _, first = walk(consumer.consume_flow(_delivered("h-1")), a_broker)
    _, second = walk(consumer.consume_flow(_delivered("h-2")), a_broker)
    assert (_paths(first), _paths(second)) == (
        ["invoke"],
        ["invoke", "/v1/consumer-groups/shop/ack"],
    )
    assert isinstance(second[1], Call)
    assert second[1].body == {"receipt_handles": ["h-1", "h-2"]}


def test_a_message_without_handler_is_given_back(consumer: PushConsumer) -> None:
    consumer.subscribe("orders")(lambda m: None)
    _, seen = walk(consumer.consume_flow(Message("other", receipt_handle="h-1")), a_broker)
    assert _paths(seen) == ["/v1/consumer-groups/shop/change-invisible"]
