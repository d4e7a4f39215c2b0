"""``halfmq group show`` prints what retention expired, against a real broker process on both
stores."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from tests.acceptance.halfmq.test_consumers_cli import ok, ok_json
from tests.support import BrokerProcess, free_port


def cells(line: str) -> list[str]:
    """A printed line of a table, as its cells."""
    return [c.strip() for c in re.split("[│┃]", line)[1:-1]]


def test_group_show_prints_the_expired_counts(migrated_url: str, tmp_path: Path) -> None:
    broker = BrokerProcess(migrated_url, free_port(), tmp_path / "broker.log")
    broker.start()
    try:
        url = broker.url
        httpx.post(f"{url}/v1/topics", json={"name": "t", "queues": 2}, timeout=5)
        ok(url, "group", "create", "g", "--topic", "t", "--consume-from", "FIRST_OFFSET")
        for i in range(4):
            httpx.post(f"{url}/v1/topics/t/messages", json={"body": f"b{i}"}, timeout=5)
        ok(url, "consume", "g", "--count", "4", "--wait", "2")  # a position in both queues
        # What a purge past the hard limit leaves on the group's positions (tested with the
        # purge itself in tests/integration/broker_service/store/test_retention*.py).
        engine = create_engine(migrated_url)
        try:
            with engine.begin() as conn:
                conn.execute(
                    text(
                        "UPDATE consumer_offsets SET expired = 1000 + 10 * queue_id "
                        "WHERE consumer_group = 'g' AND topic = 't'"
                    )
                )
        finally:
            engine.dispose()

        shown = ok_json(url, "group", "show", "g")
        by_queue = {q["queue_id"]: q["expired"] for q in shown["queues"] if q["topic"] == "t"}
        assert by_queue == {0: 1000, 1: 1010}

        printed = ok(url, "group", "show", "g")
        # The group's panel: both queues.
        assert ["│", "expired", "2010", "│"] in [line.split() for line in printed.splitlines()]
        lines = [cells(line) for line in printed.splitlines()]
        header = next(line for line in lines if "committed" in line)
        assert header[-1] == "expired"  # the queues' table, its last column
        rows = [line for line in lines if line[:1] == ["t"]]
        assert sorted(row[-1] for row in rows) == ["1000", "1010"]
    finally:
        broker.stop()
