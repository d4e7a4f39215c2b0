"""The message trace tells what came through the gRPC port from what came over REST: a check
answered by an unmodified RocketMQ Python client (its own process) is a ``CHECKED`` event whose
detail says ``"via": "grpc"``, and so is the act of a client whose Settings never reached the
store."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as rpc
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from tests.acceptance.grpc.clients import GrpcBroker, running_client
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


def test_a_client_whose_settings_never_came_is_traced_via_grpc(grpc_broker: GrpcBroker) -> None:
    """A short-lived client may send its half and decide it before its Settings are stored, or
    exit before they are: its acts are still traced ``via: grpc``, named by its call's metadata
    (here no Telemetry stream is opened at all)."""
    grpc_broker.topic("orders")
    metadata = (
        ("x-mq-client-id", "host@1@0@quick"),
        ("x-mq-language", "PYTHON"),
        ("x-mq-client-version", "5.1.2"),
    )
    half = pb.Message(
        topic=pb.Resource(name="orders"),
        body=b"x",
        system_properties=pb.SystemProperties(
            message_id="01QUICKCLIENT0001", message_type=pb.MessageType.TRANSACTION
        ),
    )
    with grpc.insecure_channel(grpc_broker.endpoint) as channel:
        stub = MessagingServiceStub(channel)
        sent = stub.SendMessage(
            rpc.SendMessageRequest(messages=[half]), metadata=metadata, timeout=10
        )
        (entry,) = sent.entries
        assert entry.status.code == pb.Code.OK, entry.status.message
        ended = stub.EndTransaction(
            rpc.EndTransactionRequest(
                topic=pb.Resource(name="orders"),
                message_id=entry.message_id,
                transaction_id=entry.transaction_id,
                resolution=pb.TransactionResolution.COMMIT,
            ),
            metadata=metadata,
            timeout=10,
        )
        assert ended.status.code == pb.Code.OK, ended.status.message
    trace = grpc_broker.get(f"/v1/messages/{entry.message_id}/trace")["events"]
    (stored,) = [e for e in trace if e["event"] == "HALF_STORED"]
    assert stored["detail"]["client_id"] == "host@1@0@quick"
    assert stored["detail"]["via"] == "grpc"
    assert stored["detail"]["client"] == "PYTHON 5.1.2"
    (decided,) = [e for e in trace if e["event"] == "COMMITTED"]
    assert decided["detail"]["via"] == "grpc"
