"""The unmodified RocketMQ 5 Python client's SimpleConsumer on the gRPC port: long-polling
receive, change of invisibility, ack, redelivery, FIFO per message group, delay, TAG filters, a
SQL92 filter refused."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.grpc.clients import GrpcBroker, RmqClient, errors, run_client, running_client
from tests.support import wait_until

pytestmark = pytest.mark.slow


def receiver(broker: GrpcBroker, home: Path, group: str, topic: str, *args: str) -> Any:
    """A SimpleConsumer that runs up to 60 s; the test waits until it has subscribed."""
    client = running_client(
        home, broker.endpoint, "receive", "--topic", topic, "--group", group,
        "--seconds", "60", "--wait", "2", *args,
    )  # fmt: skip
    return client


def started(client: RmqClient, broker: GrpcBroker, group: str) -> None:
    client.wait_for("started")
    # subscribed (its Settings wrote the subscription) before anything is sent
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        response = httpx.get(f"{broker.url}/v1/consumer-groups/{group}")
        if response.status_code == 200 and response.json()["subscriptions"]:
            return
        time.sleep(0.2)
    raise AssertionError(f"group {group} never subscribed")


def send(broker: GrpcBroker, home: Path, topic: str, *args: str) -> list[dict[str, Any]]:
    events = run_client(home, broker.endpoint, "send", "--topic", topic, *args)
    assert not errors(events), events
    return [e for e in events if e["event"] == "sent"]


def test_receive_change_invisibility_and_ack(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    """Received with their tag, keys, properties, an intact body digest and attempt 1; each
    one's invisibility changed (a new handle) and acked with it: nothing in flight afterwards."""
    grpc_broker.topic("orders")
    with receiver(
        grpc_broker, tmp_path / "c", "g1", "orders",
        "--count", "3", "--ack", "--change-invisible", "20",
    ) as consumer:  # fmt: skip
        started(consumer, grpc_broker, "g1")
        sent = send(grpc_broker, tmp_path / "p", "orders", "--tag", "TagA", "--count", "3")
        consumer.wait_for("acked", count=3)
    received = consumer.of("received")
    assert not errors(consumer.events), consumer.events  # empty long polls are no errors
    assert sorted(m["message_id"] for m in received) == sorted(m["message_id"] for m in sent)
    for message in received:
        assert message["tag"] == "TagA"
        assert message["keys"] == [f"key-{message['body']}"]
        assert message["properties"] == {"origin": "rmq-python"}
        assert message["delivery_attempt"] == 1
        assert message["corrupted"] is False
    assert len(consumer.of("changed")) == 3
    group = grpc_broker.get("/v1/consumer-groups/g1")
    assert group["in_flight"] == 0
    assert group["lag"] == 0


def test_unacked_message_comes_again_with_attempt_two(
    grpc_broker: GrpcBroker, tmp_path: Path
) -> None:
    grpc_broker.topic("orders")
    with receiver(
        grpc_broker, tmp_path / "c", "g2", "orders", "--count", "2", "--invisible", "2"
    ) as consumer:  # fmt: skip
        started(consumer, grpc_broker, "g2")
        (sent,) = send(grpc_broker, tmp_path / "p", "orders", "--body", "again")
        first, second = consumer.wait_for("received", count=2, timeout=60)
    assert first["message_id"] == second["message_id"] == sent["message_id"]
    assert (first["delivery_attempt"], second["delivery_attempt"]) == (1, 2)
    assert second["received_at"] - first["received_at"] >= 1.5  # its invisibility ran out


def test_past_the_maximum_attempts_to_the_dead_letter_queue(
    grpc_broker: GrpcBroker, tmp_path: Path
) -> None:
    """A group that allows one reconsume: a message never acked is delivered twice (attempts 1
    and 2), then it is in the group's DLQ and comes no more."""
    grpc_broker.topic("orders")
    created = httpx.post(
        f"{grpc_broker.url}/v1/consumer-groups", json={"name": "dlq-g", "max_reconsume_times": 1}
    )
    assert created.status_code == 201, created.text
    with receiver(
        grpc_broker, tmp_path / "c", "dlq-g", "orders", "--count", "3", "--invisible", "1"
    ) as consumer:  # fmt: skip
        started(consumer, grpc_broker, "dlq-g")
        (sent,) = send(grpc_broker, tmp_path / "p", "orders", "--body", "poison")
        consumer.wait_for("received", count=2, timeout=60)
        wait_until(
            lambda: bool(grpc_broker.get("/v1/consumer-groups/dlq-g/dlq")["messages"]),
            60,
            "the message in %DLQ%dlq-g",
        )
        time.sleep(3)  # past its invisibility again: it must not come a third time
    attempts = [m["delivery_attempt"] for m in consumer.of("received")]
    assert attempts == [1, 2]
    (dead,) = grpc_broker.get("/v1/consumer-groups/dlq-g/dlq")["messages"]
    assert dead["msg_id"] == sent["message_id"]
    assert dead["original_topic"] == "orders"


def test_fifo_order_per_message_group(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    """An ordered topic and an orderly group: each message group's messages come in the order
    they were sent, with their message_group."""
    grpc_broker.topic("ledger", order=True)
    created = httpx.post(
        f"{grpc_broker.url}/v1/consumer-groups", json={"name": "fifo", "orderly": True}
    )
    assert created.status_code == 201, created.text
    with receiver(
        grpc_broker, tmp_path / "c", "fifo", "ledger", "--count", "8", "--ack"
    ) as consumer:  # fmt: skip
        started(consumer, grpc_broker, "fifo")
        for group in ("A", "B"):
            send(
                grpc_broker, tmp_path / "p", "ledger",
                "--message-group", group, "--body", group, "--count", "4",
            )  # fmt: skip
        consumer.wait_for("acked", count=8)
    received = consumer.of("received")
    for group in ("A", "B"):
        bodies = [m["body"] for m in received if m["message_group"] == group]
        assert bodies == [f"{group}-{i}" for i in range(4)]


def test_delayed_message_comes_at_its_delivery_time(
    grpc_broker: GrpcBroker, tmp_path: Path
) -> None:
    grpc_broker.topic("orders")
    with receiver(grpc_broker, tmp_path / "c", "g3", "orders", "--count", "1", "--ack") as consumer:
        started(consumer, grpc_broker, "g3")
        before = time.time()
        (sent,) = send(grpc_broker, tmp_path / "p", "orders", "--delay-seconds", "4")
        (received,) = consumer.wait_for("received", timeout=60)
    assert received["message_id"] == sent["message_id"]
    # delivery_timestamp is whole seconds: at least 3 s after the send began
    assert received["received_at"] - before >= 3.0


def test_tag_expression_filters_and_sql92_is_refused(
    grpc_broker: GrpcBroker, tmp_path: Path
) -> None:
    grpc_broker.topic("orders")
    with receiver(
        grpc_broker, tmp_path / "c", "g4", "orders", "--count", "1", "--ack",
        "--expression", "TagB || TagC",
    ) as consumer:  # fmt: skip
        started(consumer, grpc_broker, "g4")
        send(grpc_broker, tmp_path / "p", "orders", "--tag", "TagA", "--body", "not-me")
        send(grpc_broker, tmp_path / "p", "orders", "--tag", "TagB", "--body", "me")
        (received,) = consumer.wait_for("received", timeout=60)
        consumer.wait_for("stopped")
    assert received["body"] == "me"
    assert [m["body"] for m in consumer.of("received")] == ["me"]

    events = run_client(
        tmp_path / "sql", grpc_broker.endpoint, "receive", "--topic", "orders",
        "--group", "g5", "--sql", "--expression", "amount > 10", "--seconds", "3",
    )  # fmt: skip
    refusals = errors(events)
    assert refusals, events
    assert refusals[0]["message"].startswith("40010, ")  # Code.ILLEGAL_FILTER_EXPRESSION
    assert "SQL92" in refusals[0]["message"]


def test_push_consumer_consumes_and_gets_a_failed_message_again(
    grpc_broker: GrpcBroker, tmp_path: Path
) -> None:
    """The Python client's PushConsumer (QueryAssignment, ReceiveMessage, AckMessage,
    ChangeInvisibleDuration for its retries): a message its listener consumes comes once, one
    it fails comes again with the next delivery attempt."""
    grpc_broker.topic("orders")
    with running_client(
        tmp_path / "c", grpc_broker.endpoint, "push", "--topic", "orders", "--group", "push-g",
        "--count", "3", "--seconds", "150",
    ) as consumer:  # fmt: skip
        started(consumer, grpc_broker, "push-g")
        send(grpc_broker, tmp_path / "p", "orders", "--body", "ok")
        send(grpc_broker, tmp_path / "p", "orders", "--body", "fail")
        # ~10 s alone; a loaded machine once took longer than 60 s for the retry
        consumer.wait_for("received", count=3, timeout=140)
    received = consumer.of("received")
    assert [m["delivery_attempt"] for m in received if m["body"] == "ok"] == [1]
    failed = [m["delivery_attempt"] for m in received if m["body"] == "fail"]
    assert failed[:2] == [1, 2]
    assert all(m["corrupted"] is False for m in received)
