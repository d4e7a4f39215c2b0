"""The brokers a route names, and a Telemetry stream reopened without Settings.

Driven with the protocol's own stubs (the ones the official client's wheel ships) where the
official clients cannot be made to show the case in reasonable time: RocketMQ's Python client
5.1.2 rebuilds a broken stream without writing its Settings until its next 300-s sync.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as rpc
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from broker_service.store import migrate
from tests.acceptance.grpc.clients import GrpcBroker
from tests.support import wait_until

pytestmark = pytest.mark.slow


def _metadata(client_id: str) -> list[tuple[str, str]]:
    return [
        ("x-mq-client-id", client_id),
        ("x-mq-language", "PYTHON"),
        ("x-mq-client-version", "5.1.2"),
    ]


def _producer_settings(topic: str) -> pb.Settings:
    return pb.Settings(
        client_type=pb.ClientType.PRODUCER,
        publishing=pb.Publishing(topics=[pb.Resource(name=topic)]),
        user_agent=pb.UA(language=pb.Language.PYTHON, version="5.1.2"),
    )


class Stream:
    """One Telemetry stream: what is written to it, and what the broker wrote back."""

    def __init__(self, stub: MessagingServiceStub, client_id: str) -> None:
        self._out: queue.Queue[rpc.TelemetryCommand | None] = queue.Queue()
        self.received: queue.Queue[rpc.TelemetryCommand] = queue.Queue()
        self.call = stub.Telemetry(iter(self._out.get, None), metadata=_metadata(client_id))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for command in self.call:
                self.received.put(command)
        except grpc.RpcError:
            pass  # cancelled by the test, or the broker stopped

    def write(self, command: rpc.TelemetryCommand) -> None:
        self._out.put(command)

    def next(self, timeout: float) -> rpc.TelemetryCommand:
        return self.received.get(timeout=timeout)

    def close(self) -> None:
        self._out.put(None)
        self.call.cancel()
        self._reader.join(timeout=10)


@contextmanager
def stub_of(endpoint: str) -> Iterator[MessagingServiceStub]:
    with grpc.insecure_channel(endpoint) as channel:
        yield MessagingServiceStub(channel)


def _send_half(stub: MessagingServiceStub, client_id: str, topic: str) -> Any:
    message = pb.Message(
        topic=pb.Resource(name=topic),
        body=b"reopened",
        system_properties=pb.SystemProperties(
            message_id=uuid.uuid4().hex.upper(),
            message_type=pb.MessageType.TRANSACTION,
            body_encoding=pb.Encoding.IDENTITY,
        ),
    )
    answer = stub.SendMessage(
        rpc.SendMessageRequest(messages=[message]), metadata=_metadata(client_id), timeout=30
    )
    assert answer.status.code == pb.Code.OK, answer.status
    return answer.entries[0]


def test_a_stream_reopened_without_settings_is_checked_at_once(
    grpc_broker: GrpcBroker,
) -> None:
    """A producer's stream closes and reopens under the same client id without writing its
    Settings (as the Python client does after a broker restart): the broker registers it with
    the Settings the store kept, clears the mark its closed stream left, and the next half of
    its group is checked down the new stream."""
    grpc_broker.topic("orders")
    client_id = f"reopen-{uuid.uuid4().hex[:8]}"
    with stub_of(grpc_broker.endpoint) as stub:
        first = Stream(stub, client_id)
        first.write(rpc.TelemetryCommand(settings=_producer_settings("orders")))
        reply = first.next(timeout=30)
        assert reply.status.code == pb.Code.OK
        first.close()  # the broker sets the instance aside: its stream closed
        wait_until(
            lambda: any(
                i["client_id"] == client_id and "Telemetry stream closed" in (i["last_error"] or "")
                for i in grpc_broker.get("/v1/producer-groups/orders")["instances"]
            ),
            30,
            "the closed stream's instance set aside",
        )
        second = Stream(stub, client_id)  # no Settings written on it
        try:
            entry = _send_half(stub, client_id, "orders")
            command = second.next(timeout=30)  # the first check comes 2 s after the half
            assert command.HasField("recover_orphaned_transaction_command")
            check = command.recover_orphaned_transaction_command
            assert check.transaction_id == entry.transaction_id
            ended = stub.EndTransaction(
                rpc.EndTransactionRequest(
                    topic=pb.Resource(name="orders"),
                    message_id=entry.message_id,
                    transaction_id=entry.transaction_id,
                    resolution=pb.TransactionResolution.COMMIT,
                    source=pb.TransactionSource.SOURCE_SERVER_CHECK,
                ),
                metadata=_metadata(client_id),
                timeout=30,
            )
            assert ended.status.code == pb.Code.OK
            metrics = httpx.get(f"{grpc_broker.url}/metrics").text
            # the reopened stream counts as a producer's (the closed one no longer counts)
            assert 'halfmq_grpc_streams{client_type="PRODUCER"} 1.0' in metrics
            assert 'halfmq_grpc_seconds_count{code="OK",rpc="SendMessage"} 1.0' in metrics
            assert 'halfmq_grpc_seconds_count{code="OK",rpc="EndTransaction"} 1.0' in metrics
        finally:
            second.close()
    record = grpc_broker.get(f"/v1/transactions/{entry.transaction_id}")
    assert record["state"] == "COMMITTED"
    assert record["resolved_by"] == "check"
    assert record["resolved_client"] == client_id


@pytest.mark.postgres
def test_a_route_names_every_live_broker_with_a_grpc_port(pg_url: str, tmp_path: Path) -> None:
    """Two brokers on one PostgreSQL: each answers a route that deals the topic's queues to both,
    by their gRPC ports, in the same order; a broker that stops leaves the route once it is no
    longer live."""
    migrate.upgrade(pg_url)
    beats = {"HALFMQ_BROKER_BEAT_SECONDS": "1"}  # live while seen within 3 s
    one = GrpcBroker(pg_url, tmp_path / "one.log", env=beats, broker_id="route-one")
    two = GrpcBroker(pg_url, tmp_path / "two.log", env=beats, broker_id="route-two")
    one.start(timeout=90)
    try:
        two.start(timeout=90)
        try:
            one.topic("routed", queues=4)

            def ports(broker: GrpcBroker) -> list[int]:
                with stub_of(broker.endpoint) as stub:
                    answer = stub.QueryRoute(
                        rpc.QueryRouteRequest(topic=pb.Resource(name="routed")), timeout=30
                    )
                assert answer.status.code == pb.Code.OK, answer.status
                return [q.broker.endpoints.addresses[0].port for q in answer.message_queues]

            wait_until(lambda: len(set(ports(one))) == 2, 30, "both brokers in the route")
            expected = {one.grpc_port, two.grpc_port}
            assert set(ports(one)) == expected
            assert ports(one) == ports(two)  # every broker answers the same route
            assert sorted(ports(one)) == sorted(
                [one.grpc_port, one.grpc_port, *[two.grpc_port] * 2]
            )
        finally:
            two.stop()
        started = time.monotonic()
        wait_until(lambda: set(ports(one)) == {one.grpc_port}, 60, "the stopped broker gone")
        assert time.monotonic() - started < 60
    finally:
        one.stop()
