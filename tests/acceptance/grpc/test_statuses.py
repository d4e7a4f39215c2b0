"""Bad input on the gRPC port gets RocketMQ's status for it, never an internal error: requests a
client library would not send, made with the protocol's generated stub against a real broker
process."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as rpc
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from broker_service.store import migrate
from tests.acceptance.grpc.clients import GrpcBroker

pytestmark = pytest.mark.slow
Code = pb.Code


def message(topic: str, message_type: int, **system: object) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=b"x",
        system_properties=pb.SystemProperties(
            message_id="01ABCDEF", message_type=message_type, **system
        ),
    )


def test_each_fault_gets_its_status(sqlite_url: str, tmp_path: Path) -> None:
    migrate.upgrade(sqlite_url)
    broker = GrpcBroker(sqlite_url, tmp_path / "broker.log")
    broker.start(timeout=90)
    try:
        broker.topic("orders")
        with grpc.insecure_channel(broker.endpoint) as channel:
            stub = MessagingServiceStub(channel)

            def send(msg: pb.Message) -> int:
                answer = stub.SendMessage(rpc.SendMessageRequest(messages=[msg]), timeout=10)
                return int(answer.entries[0].status.code)

            assert send(message("orders", pb.MessageType.NORMAL)) == Code.OK
            assert send(message("nowhere", pb.MessageType.NORMAL)) == Code.TOPIC_NOT_FOUND
            assert send(message("bad topic!", pb.MessageType.NORMAL)) == Code.ILLEGAL_TOPIC
            assert send(message("orders", pb.MessageType.FIFO)) == Code.ILLEGAL_MESSAGE_GROUP
            assert send(message("orders", pb.MessageType.DELAY)) == Code.ILLEGAL_DELIVERY_TIME
            assert send(message("orders", pb.MessageType.LITE)) == Code.UNSUPPORTED
            assert send(message("orders", pb.MessageType.NORMAL, tag="a b")) == (
                Code.ILLEGAL_MESSAGE_TAG
            )
            reserved = message("orders", pb.MessageType.NORMAL)
            reserved.user_properties["TRAN_MSG"] = "true"
            assert send(reserved) == Code.ILLEGAL_MESSAGE_PROPERTY_KEY
            other = message("orders", pb.MessageType.NORMAL)
            other.body = b"another body under the same message id"
            assert send(other) == Code.ILLEGAL_MESSAGE_ID

            ended = stub.EndTransaction(
                rpc.EndTransactionRequest(
                    topic=pb.Resource(name="orders"),
                    transaction_id="no-such-transaction",
                    resolution=pb.TransactionResolution.COMMIT,
                ),
                timeout=10,
            )
            assert ended.status.code == Code.INVALID_TRANSACTION_ID
            acked = stub.AckMessage(
                rpc.AckMessageRequest(
                    group=pb.Resource(name="g"),
                    topic=pb.Resource(name="orders"),
                    entries=[rpc.AckMessageEntry(message_id="m", receipt_handle="nonsense")],
                ),
                timeout=10,
            )
            assert acked.status.code == Code.CONSUMER_GROUP_NOT_FOUND
            offset = stub.QueryOffset(rpc.QueryOffsetRequest(), timeout=10)
            assert offset.status.code == Code.NOT_IMPLEMENTED
            assert "docs/rocketmq.md" in offset.status.message
        assert "Traceback" not in broker.log_path.read_text()
    finally:
        broker.stop()
