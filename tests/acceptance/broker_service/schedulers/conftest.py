"""Fixtures of the check-back tests that run real processes: brokers started with each module's
``broker_flags`` and stopped by PID, and producer programs killed at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.broker_service.schedulers.helpers import StartBroker
from tests.support import BrokerProcess, Program, free_port


@pytest.fixture
def start_broker(
    migrated_url: str, tmp_path: Path, broker_flags: tuple[str, ...]
) -> Iterator[StartBroker]:
    started: list[BrokerProcess] = []

    def start(*extra: str) -> BrokerProcess:
        log = tmp_path / f"broker-{len(started)}.log"
        process = BrokerProcess(migrated_url, free_port(), log, *broker_flags, *extra)
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def programs() -> Iterator[list[Program]]:
    running: list[Program] = []
    yield running
    for program in running:
        program.kill()
