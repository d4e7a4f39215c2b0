"""RocketMQ's clients and halfmq's own on one broker: a transaction sent by the unmodified RocketMQ
Python client reaches a halfmq framework consumer, and one sent by the framework's producer
reaches a RocketMQ SimpleConsumer -- on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from framework import (
    ConsumeResult,
    LocalTransactionState,
    Message,
    PushConsumer,
    TransactionProducer,
)
from tests.acceptance.grpc.clients import GrpcBroker, errors, run_client, running_client
from tests.support import wait_until

pytestmark = pytest.mark.slow


def test_rocketmq_producer_to_framework_consumer(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    """The committed transaction is consumed once, with its tag, keys and properties; the rolled
    back one never is."""
    grpc_broker.topic("orders")
    received: list[Message] = []
    lock = threading.Lock()
    consumer = PushConsumer("framework-g", brokers=[grpc_broker.url], wait_seconds=1)

    @consumer.subscribe("orders", tags="*")
    def collect(message: Message) -> ConsumeResult:
        with lock:
            received.append(message)
        return ConsumeResult.CONSUME_SUCCESS

    consumer.start()
    try:
        home = tmp_path / "home"
        rolled = run_client(home, grpc_broker.endpoint, "rollback", "--topic", "orders",
                            "--body", "never")  # fmt: skip
        committed = run_client(
            home, grpc_broker.endpoint, "commit", "--topic", "orders", "--tag", "TagA",
            "--body", "from-rocketmq",
        )  # fmt: skip
        assert not errors(rolled + committed), rolled + committed
        wait_until(lambda: len(received) >= 1, 30, "the framework consumer's message")
        time.sleep(2)  # a rolled-back or duplicate delivery would come meanwhile
    finally:
        consumer.shutdown()
    (message,) = received
    (half,) = [e for e in committed if e["event"] == "half"]
    assert message.msg_id == half["message_id"]
    assert message.text == "from-rocketmq"
    assert message.tags == "TagA"
    assert message.keys == ("key-from-rocketmq",)
    assert message.properties["origin"] == "rmq-python"
    assert message.transaction_id == half["transaction_id"]
    # the trace names each client's protocol; the console names the RocketMQ client
    (started,) = [e for e in committed if e["event"] == "started"]
    trace = grpc_broker.get(f"/v1/messages/{message.msg_id}/trace")["events"]
    (stored,) = [e for e in trace if e["event"] == "HALF_STORED"]
    assert stored["detail"]["client_id"] == started["client_id"]
    assert stored["detail"]["via"] == "grpc"
    assert stored["detail"]["client"].startswith("PYTHON 5.")
    (decided,) = [e for e in trace if e["event"] == "COMMITTED"]
    assert decided["detail"]["via"] == "grpc"
    delivered = [e for e in trace if e["event"] in ("DELIVERED", "ACKED")]
    assert delivered
    assert {e["detail"]["via"] for e in delivered} == {"rest"}
    page = httpx.get(f"{grpc_broker.url}/console/producer-groups/orders")
    assert page.status_code == 200
    assert "gRPC PYTHON 5." in page.text


def test_framework_producer_to_rocketmq_simple_consumer(
    grpc_broker: GrpcBroker, tmp_path: Path
) -> None:
    grpc_broker.topic("orders")
    with running_client(
        tmp_path / "home", grpc_broker.endpoint, "receive", "--topic", "orders",
        "--group", "rmq-g", "--count", "1", "--ack", "--seconds", "60", "--wait", "2",
    ) as rocketmq:  # fmt: skip
        rocketmq.wait_for("started")
        wait_until(
            lambda: httpx.get(f"{grpc_broker.url}/v1/consumer-groups/rmq-g").status_code == 200,
            30,
            "the RocketMQ consumer's group",
        )
        producer = TransactionProducer("bob-bank", brokers=[grpc_broker.url])

        @producer.execute_local_transaction("orders")
        def debit(message: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.COMMIT_MESSAGE

        with producer:
            sent = producer.send_message_in_transaction(
                Message(
                    "orders",
                    body="from-framework",
                    tags="TagF",
                    keys=["t-42"],
                    properties={"bank": "bob"},
                ),
                arg=None,
            )
        assert sent.resolution == "COMMITTED"
        (received,) = rocketmq.wait_for("received", timeout=60)
        rocketmq.wait_for("acked")
    assert received["message_id"] == sent.msg_id
    assert received["body"] == "from-framework"
    assert received["tag"] == "TagF"
    assert received["keys"] == ["t-42"]
    assert received["properties"] == {"bank": "bob"}
    assert received["delivery_attempt"] == 1
    assert received["corrupted"] is False
    trace = grpc_broker.get(f"/v1/messages/{sent.msg_id}/trace")["events"]
    (stored,) = [e for e in trace if e["event"] == "HALF_STORED"]
    assert stored["detail"]["via"] == "rest"
    finished = [e for e in trace if e["event"] in ("DELIVERED", "ACKED")]
    assert {e["event"] for e in finished} == {"DELIVERED", "ACKED"}
    assert {e["detail"]["via"] for e in finished} == {"grpc"}
    page = httpx.get(f"{grpc_broker.url}/console/consumer-groups/rmq-g")
    assert page.status_code == 200
    assert "gRPC PYTHON 5." in page.text
