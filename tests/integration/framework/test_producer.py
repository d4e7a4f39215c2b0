"""TransactionProducer (sync) against the real broker in process: RocketMQ's transaction
semantics, check-back by pull and push, several instances, and the plain sends."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from framework import (
    CheckMode,
    ConfigurationError,
    ConflictError,
    LocalTransactionState,
    Message,
    NotFoundError,
    Registered,
    TransactionProducer,
)
from framework.fastapi import check_router
from halfmq.testing import InProcessBroker
from tests.integration.framework.helpers import wait_resolved
from tests.support import free_port, wait_until

State = LocalTransactionState
Make = Callable[..., TransactionProducer]


def _message(key: str = "t-42", body: str | bytes = '{"amount": 100}') -> Message:
    return Message(topic="transfers", keys=[key], body=body)


def test_half_first_then_local_transaction_then_commit(producers: Make) -> None:
    producer = producers()
    seen: list[dict[str, Any]] = []

    @producer.execute_local_transaction("transfers")
    def debit(message: Message, arg: Any) -> LocalTransactionState:
        assert message.transaction_id is not None
        seen.append(producer.transaction(message.transaction_id))  # the half is stored already
        return State.COMMIT_MESSAGE

    assert isinstance(debit, Registered)
    with producer:
        result = producer.send_message_in_transaction(_message(), arg="x")
        record = producer.transaction(result.transaction_id)
    assert seen[0]["state"] == "PREPARED"
    assert result.local_state is State.COMMIT_MESSAGE
    assert result.resolution == "COMMITTED"
    assert result.send_status.value == "SEND_OK"
    assert result.msg_id == result.message.msg_id
    assert record["state"] == "COMMITTED"
    assert record["resolved_by"] == "producer"


def test_rollback_message(producers: Make, inproc: InProcessBroker) -> None:
    producer = producers()
    producer.execute_local_transaction("transfers")(lambda m, a: State.ROLLBACK_MESSAGE)
    with producer:
        result = producer.send_message_in_transaction(_message())
        assert producer.transaction(result.transaction_id)["state"] == "ROLLED_BACK"
    assert result.resolution == "ROLLED_BACK"
    with inproc.client() as client:
        life = client.get(f"/v1/messages/{result.msg_id}").json()
    assert life["stage"] == "ROLLED_BACK"


@pytest.mark.parametrize("outcome", ["raise", "none"])
def test_exception_or_none_is_unknow_and_the_check_decides(producers: Make, outcome: str) -> None:
    producer = producers()
    checked: list[Message] = []

    @producer.execute_local_transaction
    def local(message: Message, arg: Any) -> LocalTransactionState | None:
        if outcome == "raise":
            raise RuntimeError("database went away")
        return None

    @producer.check_local_transaction("transfers")
    def check(message: Message) -> LocalTransactionState:
        checked.append(message)
        return State.COMMIT_MESSAGE

    with producer:
        result = producer.send_message_in_transaction(_message(body=b"\x00\xffbinary"))
        assert result.local_state is State.UNKNOW
        assert result.resolution is None
        assert isinstance(result.error, RuntimeError) == (outcome == "raise")
        record = wait_resolved(producer, result.transaction_id)
    assert record["state"] == "COMMITTED"
    assert record["resolved_by"] == "check"
    assert checked[0].transaction_id == result.transaction_id
    assert checked[0].body == b"\x00\xffbinary"
    assert checked[0].keys == ("t-42",)


def test_unknown_check_answer_keeps_asking(producers: Make) -> None:
    producer = producers()
    answers = iter([State.UNKNOW, State.UNKNOW, State.ROLLBACK_MESSAGE])
    producer.execute_local_transaction("transfers")(lambda m, a: State.UNKNOW)
    producer.check_local_transaction("transfers")(lambda m: next(answers))
    with producer:
        result = producer.send_message_in_transaction(_message())
        record = wait_resolved(producer, result.transaction_id)
    assert record["state"] == "ROLLED_BACK"
    assert record["check_times"] == 3


def test_several_instances_of_one_group_each_answer_the_checks_of_their_own_halves(
    producers: Make,
) -> None:
    """The half names its instance (``client_id``), and check-back asks the sender first while
    it is live: the group's checks are shared as its halves are."""
    answered: dict[str, int] = {}
    lock = threading.Lock()
    instances = [producers(client_id=f"bob-{i}") for i in range(2)]
    for producer in instances:

        def check(message: Message, me: str = producer.client_id) -> LocalTransactionState:
            with lock:
                answered[me] = answered.get(me, 0) + 1
            return State.COMMIT_MESSAGE

        producer.execute_local_transaction("transfers")(lambda m, a: None)
        producer.check_local_transaction("transfers")(check)
        producer.start()
    results = [instances[i % 2].send_message_in_transaction(_message(f"t-{i}")) for i in range(8)]
    for result in results:
        assert wait_resolved(instances[0], result.transaction_id)["state"] == "COMMITTED"
    assert answered == {"bob-0": 4, "bob-1": 4}


def test_push_check_with_the_built_in_server(producers: Make) -> None:
    producer = producers(check=CheckMode.push())
    producer.execute_local_transaction("transfers")(lambda m, a: None)
    producer.check_local_transaction("transfers")(lambda m: State.ROLLBACK_MESSAGE)
    url = producer.serve_checks()
    assert url.startswith("http://127.0.0.1:")
    with producer:
        result = producer.send_message_in_transaction(_message())
        record = wait_resolved(producer, result.transaction_id)
    assert (record["state"], record["resolved_by"]) == ("ROLLED_BACK", "check")


@pytest.fixture
def service(request: pytest.FixtureRequest) -> Iterator[Callable[[FastAPI], str]]:
    """Serve a FastAPI app with uvicorn on a free port (a thread); stopped afterwards."""
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def serve(app: FastAPI) -> str:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        wait_until(lambda: server.started, 10, "uvicorn to start")
        servers.append((server, thread))
        return f"http://127.0.0.1:{port}"

    yield serve
    for server, thread in servers:
        server.should_exit = True
        thread.join(10)


def test_push_check_through_the_fastapi_router(
    producers: Make, service: Callable[[FastAPI], str]
) -> None:
    app = FastAPI()
    port_holder: dict[str, str] = {}
    producer = producers(check=CheckMode.push("http://placeholder"))
    app.include_router(check_router(producer))
    port_holder["base"] = service(app)
    producer.callback_url = port_holder["base"] + "/halfmq/check"
    producer.execute_local_transaction("transfers")(lambda m, a: None)
    producer.check_local_transaction("transfers")(lambda m: State.COMMIT_MESSAGE)
    with producer:
        result = producer.send_message_in_transaction(_message())
        record = wait_resolved(producer, result.transaction_id)
    assert (record["state"], record["resolved_by"]) == ("COMMITTED", "check")


def test_push_mode_without_a_url_is_a_configuration_error(producers: Make) -> None:
    producer = producers(check=CheckMode.push())
    with pytest.raises(ConfigurationError):
        producer.start()


def test_no_local_transaction_registered(producers: Make) -> None:
    producer = producers()
    with producer, pytest.raises(ConfigurationError) as info:
        producer.send_message_in_transaction(_message())
    assert info.value.topic == "transfers"


def test_one_handler_per_topic(producers: Make) -> None:
    producer = producers()
    producer.check_local_transaction("transfers")(lambda m: None)
    with pytest.raises(ConfigurationError):
        producer.check_local_transaction("transfers")(lambda m: None)


# -- plain sends ------------------------------------------------------------------------------


def test_plain_send_and_retransmit_is_deduplicated(producers: Make) -> None:
    producer = producers()
    message = _message("order-1")
    first = producer.send(message)
    again = producer.send(message)
    assert (first.duplicate, again.duplicate) == (False, True)
    assert again.queue_offset == first.queue_offset
    assert first.msg_id == message.msg_id


def test_same_msg_id_other_content_is_a_conflict(producers: Make) -> None:
    producer = producers()
    message = _message("order-1")
    producer.send(message)
    with pytest.raises(ConflictError) as info:
        producer.send(message.evolve(body="other"))
    assert info.value.status == 409
    assert info.value.code == "MESSAGE_ID_CONFLICT"


def test_ordered_messages_share_a_queue(producers: Make) -> None:
    producer = producers()
    queues = {
        producer.send(Message("transfers", body=str(i), sharding_key="acct-7")).queue_id
        for i in range(6)
    }
    assert len(queues) == 1


def test_delayed_message_waits(producers: Make) -> None:
    producer = producers()
    result = producer.send(Message("transfers", body="later", delay_level=3))
    assert result.queue_offset is None


def test_batch_send_in_order(producers: Make) -> None:
    producer = producers()
    messages = [Message("transfers", body=str(i), queue_id=1) for i in range(5)]
    results = producer.send_batch(messages)
    assert [r.msg_id for r in results] == [m.msg_id for m in messages]
    offsets = [r.queue_offset or 0 for r in results]
    assert offsets == sorted(offsets)
    with pytest.raises(ConfigurationError):
        producer.send_batch([*messages, Message("other", body="x")])


def test_unknown_topic_is_not_found_with_the_topic(producers: Make) -> None:
    producer = producers()
    with pytest.raises(NotFoundError) as info:
        producer.send(Message("nowhere", body="x"))
    assert info.value.topic == "nowhere"
    assert info.value.code == "TOPIC_NOT_FOUND"


def test_the_test_broker_answers_raw_http(inproc: InProcessBroker) -> None:
    with inproc.client() as client:
        assert client.get("/healthz").status_code == 200
        assert isinstance(client.get("/v1/topics").json()["topics"], list)
    assert isinstance(inproc.transport, httpx.BaseTransport)


def test_heartbeats_register_the_instance_and_its_mode(
    producers: Make, inproc: InProcessBroker
) -> None:
    pull = producers(client_id="bob-pull")
    pull.check_local_transaction("transfers")(lambda m: None)
    push = producers(
        client_id="bob-push", check=CheckMode.push("http://127.0.0.1:8000/halfmq/check")
    )
    with pull, push, inproc.client() as client:
        group = client.get("/v1/producer-groups/bob-bank").json()
    instances = {i["client_id"]: i for i in group["instances"]}
    assert instances["bob-pull"]["mode"] == "pull"
    assert instances["bob-pull"]["topics"] == ["transfers"]
    assert instances["bob-push"]["mode"] == "push"
    assert instances["bob-push"]["callback_url"] == "http://127.0.0.1:8000/halfmq/check"
    assert all(i["live"] for i in instances.values())


def test_an_empty_batch_is_refused(producers: Make) -> None:
    with pytest.raises(ConfigurationError):
        producers().send_batch([])


def test_a_stopped_test_broker_fails_fast_not_forever() -> None:
    from framework import BrokerUnavailableError, Retry

    with InProcessBroker() as broker:
        broker.create_topic("transfers")
        producer = TransactionProducer(
            "bob-bank",
            brokers=[broker.url],
            transport=broker.transport,
            retry=Retry(attempts=2, backoff=0.01),
        )
        assert producer.send(_message()).queue_offset == 0
    with pytest.raises(BrokerUnavailableError):
        producer.send(_message())
    producer.shutdown()
