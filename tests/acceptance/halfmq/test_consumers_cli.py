"""``halfmq group|dlq|consume`` against a real broker process, on both stores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner, Result

from halfmq.cli import app
from tests.support import BrokerProcess, free_port

runner = CliRunner()


def halfmq(broker: str, *args: str) -> Result:
    result = runner.invoke(app, list(args), env={"HALFMQ_BROKER": broker, "COLUMNS": "250"})
    assert "Traceback" not in result.output, result.output
    return result


def ok(broker: str, *args: str) -> str:
    result = halfmq(broker, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def ok_json(broker: str, *args: str) -> Any:
    return json.loads(ok(broker, *args, "--json"))


def test_group_dlq_and_consume_commands(migrated_url: str, tmp_path: Path) -> None:
    broker = BrokerProcess(
        migrated_url, free_port(), tmp_path / "broker.log", "--message-delay-level", "100ms"
    )
    broker.start()
    try:
        url = broker.url
        httpx.post(f"{url}/v1/topics", json={"name": "t", "queues": 2}, timeout=5)
        created = ok_json(
            url, "group", "create", "g", "--topic", "t", "--consume-from", "FIRST_OFFSET",
            "--max-reconsume-times", "0",
        )  # fmt: skip
        assert created["name"] == "g"
        assert [s["topic"] for s in created["subscriptions"]] == ["t"]
        same = ("--consume-from", "FIRST_OFFSET", "--max-reconsume-times", "0")
        assert "consumer group g exists" in ok(url, "group", "create", "g", *same)
        other = halfmq(url, "group", "create", "g")
        assert other.exit_code == 1
        assert "CONSUMER_GROUP_EXISTS" in other.stderr
        for i in range(3):
            httpx.post(f"{url}/v1/topics/t/messages", json={"body": f"b{i}", "msg_id": f"m{i}"})

        printed = ok(url, "consume", "g", "--count", "2", "--wait", "2")
        lines = [json.loads(line) for line in printed.splitlines()]
        assert len(lines) == 2
        assert all(m["topic"] == "t" for m in lines)
        shown = ok_json(url, "group", "show", "g")
        assert shown["lag"] == 1
        assert "committed" in ok(url, "group", "show", "g")

        # The last one is nacked with no retries left: dead.
        got = httpx.post(
            f"{url}/v1/consumer-groups/g/receive", json={"client_id": "x"}, timeout=5
        ).json()["messages"]
        assert len(got) == 1
        nack = httpx.post(
            f"{url}/v1/consumer-groups/g/nack",
            json={"receipt_handle": got[0]["receipt_handle"]},
            timeout=5,
        )
        assert nack.json()["outcome"] == "DLQ"
        dead = ok_json(url, "dlq", "list", "g")["messages"]
        assert [m["msg_id"] for m in dead] == [got[0]["msg_id"]]
        assert got[0]["msg_id"] in ok(url, "dlq", "list", "g")
        assert "resent" in ok(url, "dlq", "resend", "g", got[0]["msg_id"])
        again = halfmq(url, "dlq", "resend", "g", got[0]["msg_id"])
        assert again.exit_code == 1
        assert "MESSAGE_ALREADY_RESENT" in again.stderr
        back = [json.loads(x) for x in ok(url, "consume", "g", "--wait", "2").splitlines()]
        assert [m["msg_id"] for m in back] == [got[0]["msg_id"]]

        reset = ok_json(url, "group", "reset-offset", "g", "--topic", "t", "--timestamp", "0")
        assert sorted(q["offset"] for q in reset["queues"]) == [0, 0]
        assert len(ok(url, "consume", "g", "--wait", "2").splitlines()) == 3
        missing = halfmq(url, "group", "show", "nope")
        assert missing.exit_code == 1
        assert "CONSUMER_GROUP_NOT_FOUND" in missing.stderr
    finally:
        broker.stop()
