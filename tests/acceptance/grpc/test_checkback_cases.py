"""Check-back through Telemetry streams when producers and brokers come and go: a producer killed
after its half, and a check assigned by one broker reaching a producer whose stream another
broker on the same PostgreSQL holds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker_service.store import migrate
from tests.acceptance.grpc.clients import FAST_CHECKS, GrpcBroker, running_client
from tests.support import wait_until

pytestmark = pytest.mark.slow


def test_producer_killed_after_its_half_the_check_reaches_the_new_instance(
    grpc_broker: GrpcBroker, tmp_path: Path
) -> None:
    """The producer is SIGKILLed right after its half (before any check); a new instance of the
    same group starts and is the one checked: its answer commits the half."""
    grpc_broker.topic("orders")
    endpoint = grpc_broker.endpoint
    with running_client(
        tmp_path / "first", endpoint, "orphan", "--topic", "orders", "--body", "killed",
        "--answer", "ROLLBACK", "--seconds", "60",
    ) as first:  # fmt: skip
        (half,) = first.wait_for("half")
        first.kill()
    assert not first.of("checked")  # it never saw a check
    with running_client(
        tmp_path / "second", endpoint, "orphan", "--topic", "orders", "--count", "0",
        "--answer", "COMMIT", "--seconds", "60",
    ) as second:  # fmt: skip
        (started,) = second.wait_for("started")
        (checked,) = second.wait_for("checked", timeout=60)
        assert checked["message_id"] == half["message_id"]
        wait_until(
            lambda: (
                grpc_broker.get(f"/v1/transactions/{half['transaction_id']}")["state"]
                == "COMMITTED"
            ),
            30,
            "the new instance's COMMIT",
        )
    record = grpc_broker.get(f"/v1/transactions/{half['transaction_id']}")
    assert record["resolved_by"] == "check"
    assert record["resolved_client"] == started["client_id"]
    group = grpc_broker.get("/v1/producer-groups/orders")
    (killed,) = [i for i in group["instances"] if i["client_id"] != started["client_id"]]
    assert "Telemetry stream closed" in (killed["last_error"] or "")


@pytest.mark.postgres
def test_check_reaches_a_producer_whose_stream_another_broker_holds(
    pg_url: str, tmp_path: Path
) -> None:
    """Two brokers on one PostgreSQL: only the first runs check rounds; the producer's stream is
    held by the second, which finds the check the first assigned and writes it down the stream."""
    migrate.upgrade(pg_url)
    checker = GrpcBroker(pg_url, tmp_path / "one.log", *FAST_CHECKS, broker_id="one")
    holder = GrpcBroker(pg_url, tmp_path / "two.log", "--no-scheduler", broker_id="two")
    checker.start(timeout=90)
    try:
        holder.start(timeout=90)
        try:
            holder.topic("orders")
            with running_client(
                tmp_path / "home", holder.endpoint, "orphan", "--topic", "orders",
                "--answer", "COMMIT", "--seconds", "60",
            ) as client:  # fmt: skip
                (half,) = client.wait_for("half")
                before = time.monotonic()
                (checked,) = client.wait_for("checked", timeout=60)
                assert checked["message_id"] == half["message_id"]
                wait_until(
                    lambda: (
                        holder.get(f"/v1/transactions/{half['transaction_id']}")["state"]
                        == "COMMITTED"
                    ),
                    30,
                    "the COMMIT answered through broker two",
                )
            assert time.monotonic() - before < 30
            audit = checker.get(f"/v1/transactions/{half['transaction_id']}/checks")
            answered = [c for c in audit["checks"] if c["answer"] == "COMMIT"]
            assert answered
            assert answered[0]["mode"] == "pull"
        finally:
            holder.stop()
    finally:
        checker.stop()
