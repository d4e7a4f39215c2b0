"""Check-back asks the instance that sent the half first while it is live (RocketMQ's open request,
"check the original producer first"), then the group's other instances: two unmodified RocketMQ
Python client producers of one group, each its own process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.grpc.clients import GrpcBroker, running_client
from tests.support import wait_until

pytestmark = pytest.mark.slow


def test_the_halfs_own_instance_is_checked_first_while_live(
    grpc_broker: GrpcBroker, tmp_path: Path
) -> None:
    """Producer B (answers COMMIT) is live before producer A sends two halves, whose checker
    raises (no answer, so the halves stay open and are checked round after round): every check
    goes to A, none to B, though round-robin would alternate.  Once A is SIGKILLed (its stream
    closes), the halves' checks go to B, whose COMMIT resolves them."""
    grpc_broker.topic("orders")
    endpoint = grpc_broker.endpoint
    with running_client(
        tmp_path / "other", endpoint, "orphan", "--topic", "orders", "--count", "0",
        "--answer", "COMMIT", "--seconds", "120",
    ) as other:  # fmt: skip
        (other_started,) = other.wait_for("started")
        with running_client(
            tmp_path / "sender", endpoint, "orphan", "--topic", "orders", "--count", "2",
            "--answer", "RAISE", "--seconds", "120",
        ) as sender:  # fmt: skip
            (sender_started,) = sender.wait_for("started")
            halves = sender.wait_for("half", count=2)
            ids = {h["message_id"] for h in halves}
            checked = sender.wait_for("checked", count=4, timeout=60)  # two rounds per half
            assert {c["message_id"] for c in checked} == ids
            assert other.of("checked") == []
            for half in halves:
                record = grpc_broker.get(f"/v1/transactions/{half['transaction_id']}")
                assert record["state"] == "PREPARED"
                audit = grpc_broker.get(f"/v1/transactions/{half['transaction_id']}/checks")
                instances = {c["instance"] for c in audit["checks"] if c["mode"] == "pull"}
                assert instances == {sender_started["client_id"]}
            sender.kill()
        # the sender is gone: the others are asked, as before
        other.wait_for("checked", count=2, timeout=60)
        for half in halves:
            wait_until(
                lambda half=half: (
                    grpc_broker.get(f"/v1/transactions/{half['transaction_id']}")["state"]
                    == "COMMITTED"
                ),
                30,
                "the other instance's COMMIT",
            )
            record = grpc_broker.get(f"/v1/transactions/{half['transaction_id']}")
            assert record["resolved_client"] == other_started["client_id"]
            # the committed message does not carry the broker's note of its sender
            stored = grpc_broker.get(f"/v1/messages/{half['message_id']}")
            assert "SENT_BY_CLIENT" not in stored["properties"]
