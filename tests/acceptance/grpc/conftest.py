"""The gRPC tests' broker: a real broker process with its gRPC port, on each store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.grpc.clients import FAST_CHECKS, GrpcBroker


@pytest.fixture
def grpc_broker(migrated_url: str, tmp_path: Path) -> Iterator[GrpcBroker]:
    broker = GrpcBroker(migrated_url, tmp_path / "broker.log", *FAST_CHECKS)
    broker.start(timeout=90)  # a loaded machine starts Python slowly
    try:
        yield broker
    finally:
        broker.stop()
