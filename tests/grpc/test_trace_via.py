"""The message trace tells what came through the gRPC port from what came over REST: a check
answered by an unmodified RocketMQ Python client (its own process) is a ``CHECKED`` event whose
detail says ``"via": "grpc"``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.grpc.clients import GrpcBroker, running_client
from tests.support import wait_until

pytestmark = pytest.mark.slow


def test_a_check_answered_over_grpc_is_traced_via_grpc(
    grpc_broker: GrpcBroker, tmp_path: Path
) -> None:
    grpc_broker.topic("orders")
    with running_client(
        tmp_path / "home", grpc_broker.endpoint, "orphan",
        "--topic", "orders", "--answer", "COMMIT", "--seconds", "60",
    ) as client:  # fmt: skip
        (started,) = client.wait_for("started")
        (half,) = client.wait_for("half")
        wait_until(
            lambda: (
                grpc_broker.get(f"/v1/transactions/{half['transaction_id']}")["state"]
                == "COMMITTED"
            ),
            60,
            "the check's COMMIT",
        )
    trace = grpc_broker.get(f"/v1/messages/{half['message_id']}/trace")
    (checked,) = [e for e in trace["events"] if e["event"] == "CHECKED"]
    assert checked["by"] == started["client_id"]
    assert checked["detail"]["answer"] == "COMMIT"
    assert checked["detail"]["via"] == "grpc"
