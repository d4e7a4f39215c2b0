"""``halfmq store stats|purge`` against a real broker process, on both stores: the stats follow
what is stored, ``--dry-run`` only reports, ``purge`` deletes what retention lets go."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from broker_service.domain.retention.model import TABLES
from halfmq.cli import app
from tests.support import BrokerProcess, free_port

RETENTION_SECONDS = 0.0003 * 3600  # about a second: what is sent now is old soon
runner = CliRunner()


def halfmq(broker: str, *args: str) -> Result:
    """``halfmq ARGS`` with ``HALFMQ_BROKER=broker`` on a wide terminal (tables stay one line)."""
    env = {"HALFMQ_BROKER": broker, "COLUMNS": "250"}
    result = runner.invoke(app, list(args), env=env)
    assert "Traceback" not in result.output, result.output
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def ok(broker: str, *args: str) -> str:
    result = halfmq(broker, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def ok_json(broker: str, *args: str) -> Any:
    return json.loads(ok(broker, *args, "--json"))


@pytest.fixture
def retention_broker(migrated_url: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(migrated_url, free_port(), tmp_path / "broker.log",
                            "--retention-hours", "0.0003", "--no-retention-wait-for-export",
                            "--no-scheduler")  # fmt: skip
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_store_stats_and_purge(retention_broker: BrokerProcess, migrated_url: str) -> None:
    url = retention_broker.url
    empty = ok_json(url, "store", "stats")
    assert empty["dialect"] == ("sqlite" if migrated_url.startswith("sqlite") else "postgresql")
    assert empty["rows"] == dict.fromkeys(TABLES, 0)
    assert empty["oldest_message_at"] is None
    assert empty["retention"]["retention_hours"] == 0.0003
    assert empty["retention"]["wait_for_export"] is False

    ok(url, "topic", "create", "orders", "--queues", "1")
    for n in range(3):
        ok(url, "send", "orders", f"order {n}", "--key", f"o-{n}")
    sent_at = time.monotonic()
    stored = ok_json(url, "store", "stats")
    assert stored["rows"]["messages"] == 3
    assert stored["rows"]["message_keys"] == 3
    assert stored["oldest_message_at"] is not None
    shown = ok(url, "store", "stats")
    for words in ("size", "free", "oldest message", "export watermark", "never exported",
                  "retention", "0.0003 h", "hard limit", "message_keys"):  # fmt: skip
        assert words in shown, (words, shown)

    time.sleep(max(0.0, RETENTION_SECONDS + 0.4 - (time.monotonic() - sent_at)))
    dry = ok_json(url, "store", "purge", "--dry-run")
    assert dry["dry_run"] is True
    assert dry["purged"]["messages"] == 3
    assert "dry run: nothing deleted" in ok(url, "store", "purge", "--dry-run")
    assert ok_json(url, "store", "stats")["rows"]["messages"] == 3

    purged = ok_json(url, "store", "purge")
    assert purged["dry_run"] is False
    assert purged["purged"]["messages"] == 3
    assert purged["complete"] is True
    after = ok_json(url, "store", "stats")
    assert after["rows"]["messages"] == 0
    assert after["oldest_message_at"] is None

    # Nothing of the messages is left to purge; their purged-id records go once they are older
    # than the retention (1.08 s), which a slow machine may reach between two commands.
    again = ok_json(url, "store", "purge", "--no-dry-run")["purged"]
    again.pop("purged_ids", None)
    assert again["messages"] == 0
    assert set(again.values()) == {0}


def test_a_group_keeps_its_messages_and_the_purge_says_so(
    retention_broker: BrokerProcess,
) -> None:
    url = retention_broker.url
    ok(url, "topic", "create", "orders", "--queues", "1")
    ok(url, "group", "create", "billing", "--topic", "orders", "--consume-from", "FIRST_OFFSET")
    ok(url, "send", "orders", "order 1")
    time.sleep(RETENTION_SECONDS + 0.4)
    shown = ok(url, "store", "purge")
    assert "kept: old messages a consumer group has not passed" in shown
    assert "billing" in shown
    assert ok_json(url, "store", "stats")["rows"]["messages"] == 1


def test_store_errors_are_one_line_and_exit_1() -> None:
    unreachable = halfmq(f"http://127.0.0.1:{free_port()}", "store", "purge", "--timeout", "2")
    assert unreachable.exit_code == 1
    assert unreachable.stdout == ""
    assert "cannot reach the broker" in unreachable.stderr
