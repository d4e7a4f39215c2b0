"""The unmodified RocketMQ 5 Node.js client (``rocketmq-client-nodejs`` from npm, installed by
``make test`` into tests/acceptance/grpc/node/) against a real broker process on its gRPC port."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from broker_service.store import migrate
from framework.signing import HalfmqAuth
from tests.acceptance.grpc.clients import GrpcBroker, client_log, errors, run_client, running_client
from tests.acceptance.grpc.test_acl import start
from tests.support import OPERATOR, wait_until

pytestmark = pytest.mark.slow


def test_commit_and_rollback(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    grpc_broker.topic("orders")
    home = tmp_path / "home"
    committed = run_client(home, grpc_broker.endpoint, "commit", "--topic", "orders",
                           "--body", "c1", node=True)  # fmt: skip
    rolled = run_client(home, grpc_broker.endpoint, "rollback", "--topic", "orders",
                        "--body", "r1", node=True)  # fmt: skip
    assert not errors(committed + rolled), committed + rolled
    (half,) = [e for e in committed if e["event"] == "half"]
    record = grpc_broker.get(f"/v1/transactions/{half['transaction_id']}")
    assert (record["state"], record["resolved_by"]) == ("COMMITTED", "producer")
    stored = grpc_broker.get(f"/v1/messages/{half['message_id']}")
    assert stored["body"] == "c1"
    assert stored["properties"]["origin"] == "rmq-nodejs"
    (half,) = [e for e in rolled if e["event"] == "half"]
    assert grpc_broker.get(f"/v1/transactions/{half['transaction_id']}")["state"] == "ROLLED_BACK"


@pytest.mark.parametrize("answer", ["COMMIT", "ROLLBACK"])
def test_orphan_half_checked_through_telemetry(
    grpc_broker: GrpcBroker, tmp_path: Path, answer: str
) -> None:
    grpc_broker.topic("orders")
    with running_client(
        tmp_path / "home", grpc_broker.endpoint, "orphan",
        "--topic", "orders", "--answer", answer, "--seconds", "60", node=True,
    ) as client:  # fmt: skip
        (half,) = client.wait_for("half")
        (checked,) = client.wait_for("checked", timeout=60)
        assert checked["message_id"] == half["message_id"]
        state = "COMMITTED" if answer == "COMMIT" else "ROLLED_BACK"
        wait_until(
            lambda: grpc_broker.get(f"/v1/transactions/{half['transaction_id']}")["state"] == state,
            30,
            f"the Node.js checker's {answer}",
        )
    record = grpc_broker.get(f"/v1/transactions/{half['transaction_id']}")
    assert (record["resolved_by"], record["check_times"]) == ("check", 1)


def test_simple_consumer_receives_and_acks(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    grpc_broker.topic("orders")
    with running_client(
        tmp_path / "c", grpc_broker.endpoint, "receive", "--topic", "orders", "--group", "node-g",
        "--count", "2", "--ack", "--seconds", "60", node=True,
    ) as consumer:  # fmt: skip
        consumer.wait_for("started")
        wait_until(
            lambda: _subscribed(grpc_broker, "node-g"), 30, "the Node.js consumer's subscription"
        )
        sent = run_client(tmp_path / "p", grpc_broker.endpoint, "send", "--topic", "orders",
                          "--tag", "TagN", "--count", "2", node=True)  # fmt: skip
        consumer.wait_for("acked", count=2)
    assert not errors(sent), sent
    received = consumer.of("received")
    assert sorted(m["body"] for m in received) == ["hello-0", "hello-1"]
    assert all(m["tag"] == "TagN" and m["delivery_attempt"] == 1 for m in received)
    assert all(m["corrupted"] is False for m in received)
    assert grpc_broker.get("/v1/consumer-groups/node-g")["in_flight"] == 0


def _subscribed(broker: GrpcBroker, group: str) -> bool:
    response = httpx.get(f"{broker.url}/v1/consumer-groups/{group}")
    return response.status_code == 200 and bool(response.json()["subscriptions"])


def test_wrong_secret_is_unauthorized_and_missing_pub_forbidden(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The Node.js client signs in UTC; the same ACL answers it as the Python client."""
    broker = start(sqlite_url, tmp_path)
    try:
        good = run_client(
            tmp_path / "bob", broker.endpoint, "commit", "--topic", "transfers",
            "--ak", "bob-bank-key", "--sk", "bob-bank-secret", node=True,
        )  # fmt: skip
        assert not errors(good), good
        wrong = run_client(
            tmp_path / "wrong", broker.endpoint, "send", "--topic", "transfers",
            "--ak", "bob-bank-key", "--sk", "not-bobs", node=True,
        )  # fmt: skip
        assert errors(wrong), wrong
        said = " ".join(e["message"] for e in errors(wrong)) + client_log(tmp_path / "wrong")
        assert "SIGNATURE_INVALID" in said
        smith = run_client(
            tmp_path / "smith", broker.endpoint, "send", "--topic", "transfers",
            "--ak", "smith-bank-key", "--sk", "smith-bank-secret", node=True,
        )  # fmt: skip
        (refused,) = errors(smith)
        assert "PERMISSION_DENIED" in refused["message"]
        stored = broker.get("/v1/messages?topic=transfers", auth=HalfmqAuth(OPERATOR))
        assert len(stored["messages"]) == 1  # Bob's commit only
    finally:
        broker.stop()


def test_after_a_broker_restart_the_check_reaches_the_producer(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The half is sent, the broker restarts before its first check; the Node.js client renews
    its Telemetry stream (and writes its Settings) a second after the old one ends, so the check
    reaches it within two check intervals of the broker being ready again."""
    migrate.upgrade(sqlite_url)
    interval = 5.0
    broker = GrpcBroker(
        sqlite_url, tmp_path / "broker.log",
        "--transaction-timeout-seconds", "3",
        "--transaction-check-interval-seconds", str(interval),
    )  # fmt: skip
    broker.start(timeout=90)
    try:
        broker.topic("orders")
        with running_client(
            tmp_path / "home", broker.endpoint, "orphan", "--topic", "orders",
            "--answer", "COMMIT", "--seconds", "90", node=True,
        ) as client:  # fmt: skip
            (half,) = client.wait_for("half")
            broker.stop()
            assert not client.of("checked")  # the restart came before the first check
            broker.start(timeout=90)
            ready = time.monotonic()
            (checked,) = client.wait_for("checked", timeout=60)
            assert time.monotonic() - ready <= 2 * interval
            assert checked["message_id"] == half["message_id"]
            wait_until(
                lambda: (
                    broker.get(f"/v1/transactions/{half['transaction_id']}")["state"] == "COMMITTED"
                ),
                30,
                "the check's COMMIT after the restart",
            )
    finally:
        broker.stop()
