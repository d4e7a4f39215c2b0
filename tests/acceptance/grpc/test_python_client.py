"""The unmodified RocketMQ 5 Python client (``rocketmq-python-client``) against a real broker process
on its gRPC port: sends, transactions, check-back through the Telemetry stream, the ACL, and a
SimpleConsumer -- each client its own process."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.acceptance.grpc.clients import (
    FAST_CHECKS,
    GrpcBroker,
    errors,
    run_client,
    running_client,
)
from tests.support import wait_until

pytestmark = pytest.mark.slow


def transaction(broker: GrpcBroker, transaction_id: str) -> dict[str, object]:
    record: dict[str, object] = broker.get(f"/v1/transactions/{transaction_id}")
    return record


def test_send_commit_and_rollback(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    """A NORMAL send is stored with its tag, keys and properties; a transaction the producer
    commits is COMMITTED and its message in the topic, one it rolls back is ROLLED_BACK."""
    grpc_broker.topic("orders")
    home, endpoint = tmp_path / "home", grpc_broker.endpoint

    sent = run_client(home, endpoint, "send", "--topic", "orders", "--tag", "TagA", "--body", "n1")
    assert not errors(sent), sent
    (normal,) = [e for e in sent if e["event"] == "sent"]
    stored = grpc_broker.get(f"/v1/messages/{normal['message_id']}")
    assert stored["topic"] == "orders"
    assert stored["body"] == "n1"
    assert stored["tags"] == "TagA"
    assert stored["keys"] == ["key-n1"]
    assert stored["properties"]["origin"] == "rmq-python"

    committed = run_client(home, endpoint, "commit", "--topic", "orders", "--body", "c1")
    assert not errors(committed), committed
    (half,) = [e for e in committed if e["event"] == "half"]
    record = transaction(grpc_broker, half["transaction_id"])
    assert record["state"] == "COMMITTED"
    assert record["resolved_by"] == "producer"
    assert record["producer_group"] == "orders"  # the proxy's convention: the topic's name
    life = grpc_broker.get(f"/v1/messages/{half['message_id']}")
    assert [c["topic"] for c in life["copies"]] == ["RMQ_SYS_TRANS_HALF_TOPIC", "orders"]

    rolled = run_client(home, endpoint, "rollback", "--topic", "orders", "--body", "r1")
    assert not errors(rolled), rolled
    (half,) = [e for e in rolled if e["event"] == "half"]
    assert transaction(grpc_broker, half["transaction_id"])["state"] == "ROLLED_BACK"
    life = grpc_broker.get(f"/v1/messages/{half['message_id']}")
    assert [c["topic"] for c in life["copies"]] == ["RMQ_SYS_TRANS_HALF_TOPIC"]


def test_unknown_topic_is_refused(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    """Sending to a topic that does not exist (auto_create_topics off by default) fails in the
    client: the route answers TOPIC_NOT_FOUND, nothing is stored."""
    events = run_client(tmp_path / "home", grpc_broker.endpoint, "send", "--topic", "nowhere")
    assert errors(events), events
    assert grpc_broker.get("/v1/messages?topic=nowhere")["messages"] == []


@pytest.mark.parametrize("answer", ["COMMIT", "ROLLBACK"])
def test_orphan_half_is_checked_through_telemetry(
    grpc_broker: GrpcBroker, tmp_path: Path, answer: str
) -> None:
    """A half its producer never ends is checked down the producer's Telemetry stream; the
    checker's answer (a separate EndTransaction from the check) resolves it, counted once."""
    grpc_broker.topic("orders")
    with running_client(
        tmp_path / "home", grpc_broker.endpoint, "orphan",
        "--topic", "orders", "--body", "o1", "--answer", answer, "--seconds", "60",
    ) as client:  # fmt: skip
        (half,) = client.wait_for("half")
        (checked,) = client.wait_for("checked", timeout=60)
        assert checked["message_id"] == half["message_id"]
        assert checked["body"] == "o1"
        state = "COMMITTED" if answer == "COMMIT" else "ROLLED_BACK"
        wait_until(
            lambda: transaction(grpc_broker, half["transaction_id"])["state"] == state,
            30,
            f"the check's answer {answer}",
        )
    record = transaction(grpc_broker, half["transaction_id"])
    assert record["resolved_by"] == "check"
    assert record["check_times"] == 1
    audit = grpc_broker.get(f"/v1/transactions/{half['transaction_id']}/checks")
    answered = [c for c in audit["checks"] if c["answer"] == answer]
    assert answered
    assert answered[0]["mode"] == "pull"
    metrics = httpx.get(f"{grpc_broker.url}/metrics").text
    assert 'halfmq_checks_total{outcome="pulled"} 1.0' in metrics


def test_unknown_until_check_max_then_discarded(migrated_url: str, tmp_path: Path) -> None:
    """A checker that answers UNKNOWN is asked again every round until transaction_check_max,
    then the half is DISCARDED -- and an operator's "check now" resumes it."""
    broker = GrpcBroker(
        migrated_url, tmp_path / "broker.log", *FAST_CHECKS, "--transaction-check-max", "3"
    )
    broker.start(timeout=90)
    try:
        broker.topic("orders")
        with running_client(
            tmp_path / "home", broker.endpoint, "orphan",
            "--topic", "orders", "--answer", "UNKNOWN", "--seconds", "90",
        ) as client:  # fmt: skip
            (half,) = client.wait_for("half")
            wait_until(
                lambda: transaction(broker, half["transaction_id"])["state"] == "DISCARDED",
                60,
                "the half DISCARDED after three UNKNOWN answers",
            )
            assert len(client.of("checked")) == 3
            assert transaction(broker, half["transaction_id"])["check_times"] == 3
            # resumable: an operator's "check now" has it checked again through the stream
            resumed = httpx.post(f"{broker.url}/v1/transactions/{half['transaction_id']}/check")
            assert resumed.status_code == 200, resumed.text
            client.wait_for("checked", count=4, timeout=60)
    finally:
        broker.stop()


def test_checker_that_raises_is_checked_again(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    """A checker that raises sends no answer: the half stays PREPARED and the next round checks
    it again, each check counted."""
    grpc_broker.topic("orders")
    with running_client(
        tmp_path / "home", grpc_broker.endpoint, "orphan",
        "--topic", "orders", "--answer", "RAISE", "--seconds", "60",
    ) as client:  # fmt: skip
        (half,) = client.wait_for("half")
        client.wait_for("checked", count=2, timeout=60)
        record = transaction(grpc_broker, half["transaction_id"])
        assert record["state"] == "PREPARED"
        assert record["check_times"] >= 2
