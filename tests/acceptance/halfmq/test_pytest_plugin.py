"""The pytest plugin as a user meets it: installing halfmq is enough for a test file to ask for
``in_process_broker`` (and ``async_in_process_broker``) by name, importing nothing of it."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

USER_TESTS = """
import pytest

from framework import ConsumeResult, Message, PushConsumer, TransactionProducer


def test_a_message_goes_round(in_process_broker):
    broker = in_process_broker
    broker.create_topic("transfers")
    producer = TransactionProducer("bob-bank", brokers=[broker.url], transport=broker.transport)
    got = []
    consumer = PushConsumer(
        "smith-bank", brokers=[broker.url], transport=broker.transport,
        consume_from="FIRST_OFFSET", wait_seconds=1,
    )
    consumer.subscribe("transfers")(lambda m: got.append(m.text) or ConsumeResult.CONSUME_SUCCESS)
    with producer, consumer:
        producer.send(Message("transfers", body="hello"))
        import time
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
    assert got == ["hello"]


@pytest.mark.halfmq_broker(max_reconsume_times=3)
def test_the_marker_sets_the_brokers_settings(in_process_broker):
    assert in_process_broker.settings.max_reconsume_times == 3


@pytest.mark.asyncio
async def test_the_async_face(async_in_process_broker):
    assert await async_in_process_broker.acreate_topic("transfers") == "transfers"
"""


def test_the_plugin_is_registered_by_its_entry_point() -> None:
    plugins = {ep.name: ep.value for ep in metadata.entry_points(group="pytest11")}
    assert plugins.get("halfmq") == "halfmq.pytest_plugin"


def test_a_users_test_file_gets_the_fixtures_by_name(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


def test_the_plugin_imports_no_broker_until_a_test_asks_for_one() -> None:
    """pytest loads the plugin in every session of an environment with halfmq installed: loading
    it must not import the broker (FastAPI, SQLAlchemy and the rest) for tests that never use it."""
    probe = (
        "import sys, halfmq.pytest_plugin; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('broker_service', 'fastapi', 'sqlalchemy')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"
