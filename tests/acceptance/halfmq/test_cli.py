"""The client commands of ``halfmq`` against a real broker process, on both stores.

Each test drives ``halfmq.cli.app`` through Click's runner (stdout and stderr apart) and
talks real HTTP to ``broker_process``; one test runs ``python -m halfmq`` as users do.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from halfmq.cli import app
from tests.support import BrokerProcess, free_port

runner = CliRunner()


def halfmq(broker: str, *args: str) -> Result:
    """``halfmq ARGS`` with ``HALFMQ_BROKER=broker`` on a wide terminal (tables stay one line)."""
    result = runner.invoke(app, list(args), env={"HALFMQ_BROKER": broker, "COLUMNS": "250"})
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


def test_topic_create_list_show_delete(broker_process: BrokerProcess) -> None:
    url = broker_process.url
    created = ok_json(url, "topic", "create", "orders", "--queues", "3", "--order")
    assert created["name"] == "orders"
    assert created["queues"] == 3
    assert created["order"] is True
    assert [q["queue_id"] for q in created["queue_offsets"]] == [0, 1, 2]
    assert "created topic plain" in ok(url, "topic", "create", "plain", "--queues", "1")
    assert "exists (same config)" in ok(url, "topic", "create", "plain", "--queues", "1")

    listed = ok_json(url, "topic", "list")
    assert [t["name"] for t in listed["topics"]] == ["orders", "plain"]
    table = ok(url, "topic", "list")
    assert "orders" in table
    assert "plain" in table
    assert "2 shown" in table

    ok(url, "send", "plain", "hello")
    shown = ok_json(url, "topic", "show", "plain")
    assert shown["queue_offsets"] == [{"queue_id": 0, "min_offset": 0, "max_offset": 1}]
    panel = ok(url, "topic", "show", "plain")
    assert "topic plain" in panel
    assert "messages  1" in panel

    assert ok_json(url, "topic", "delete", "plain") == {"topic": "plain", "deleted": True}
    assert "deleted topic orders" in ok(url, "topic", "delete", "orders")
    assert ok_json(url, "topic", "list") == {"topics": []}


def test_topic_errors_print_the_envelope_and_exit_1(broker_process: BrokerProcess) -> None:
    url = broker_process.url
    ok(url, "topic", "create", "orders", "--queues", "3")

    conflict = halfmq(url, "topic", "create", "orders", "--queues", "4")
    assert conflict.exit_code == 1
    assert conflict.stdout == ""
    assert "TOPIC_EXISTS (HTTP 409)" in conflict.stderr
    assert "exists with queues=3" in conflict.stderr

    missing = halfmq(url, "topic", "show", "nope", "--json")
    assert missing.exit_code == 1
    error = json.loads(missing.stderr)["error"]
    assert error["code"] == "TOPIC_NOT_FOUND"
    assert error["detail"] == {"topic": "nope"}

    system = halfmq(url, "topic", "delete", "%RETRY%group")
    assert system.exit_code == 1
    assert "SYSTEM_TOPIC" in system.stderr

    invalid = halfmq(url, "topic", "create", "bad name")
    assert invalid.exit_code == 1, "the broker's validation is the broker's error, not usage"
    assert "INVALID_TOPIC_NAME (HTTP 400)" in invalid.stderr


def test_send_with_every_option(broker_process: BrokerProcess) -> None:
    url = broker_process.url
    ok(url, "topic", "create", "orders", "--queues", "4")
    sent = ok_json(
        url,
        "send",
        "orders",
        "pay [bold]10[/bold]",
        "--tag",
        "TagA",
        "--key",
        "order-1",
        "--key",
        "customer-7",
        "--property",
        "source=cli",
        "--property",
        "note=a=b",
        "--queue-id",
        "2",
        "--msg-id",
        "m-1",
    )
    assert sent == {
        "msg_id": "m-1",
        "topic": "orders",
        "queue_id": 2,
        "queue_offset": 0,
        "status": "SEND_OK",
        "duplicate": False,
        "deliver_at": None,
    }
    stored = ok_json(url, "message", "get", "m-1")
    assert stored["body"] == "pay [bold]10[/bold]"
    assert stored["encoding"] == "utf-8"
    assert stored["tags"] == "TagA"
    assert stored["keys"] == ["order-1", "customer-7"]
    assert stored["properties"] == {"source": "cli", "note": "a=b"}

    again = halfmq(
        url, "send", "orders", "pay [bold]10[/bold]", "--queue-id", "2", "--msg-id", "m-1"
    )
    assert again.exit_code == 1, "other content (no tag, keys, properties) under the same id"
    assert "MESSAGE_ID_CONFLICT" in again.stderr

    first = ok_json(url, "send", "orders", "a", "--sharding-key", "order-9")
    second = ok_json(url, "send", "orders", "b", "--sharding-key", "order-9")
    assert first["queue_id"] == second["queue_id"]

    delayed = ok_json(url, "send", "orders", "later", "--delay-level", "3")
    assert delayed["deliver_at"] is not None
    at_time = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    at = ok_json(
        url, "send", "orders", "at", "--deliver-at", at_time.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    assert at["deliver_at"].startswith(at_time.strftime("%Y-%m-%dT%H:%M:%S"))

    human = ok(url, "send", "orders", "x", "--msg-id", "m-2")
    assert "SEND_OK" in human
    assert "m-2" in human
    assert "duplicate" in ok(url, "send", "orders", "x", "--msg-id", "m-2")


def test_send_a_file_as_base64(broker_process: BrokerProcess, tmp_path: Path) -> None:
    url = broker_process.url
    ok(url, "topic", "create", "blobs", "--queues", "1")
    data = bytes(range(256))
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    sent = ok_json(url, "send", "blobs", "--base64-file", str(path), "--key", "blob-1")
    stored = ok_json(url, "message", "get", sent["msg_id"])
    assert stored["encoding"] == "base64"
    assert base64.b64decode(stored["body"]) == data
    assert "base64" in ok(url, "message", "get", sent["msg_id"])


def test_send_to_a_missing_topic_prints_topic_not_found(broker_process: BrokerProcess) -> None:
    result = halfmq(broker_process.url, "send", "nowhere", "hello")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "TOPIC_NOT_FOUND" in result.stderr
    assert "topic 'nowhere' does not exist" in result.stderr

    as_json = halfmq(broker_process.url, "send", "nowhere", "hello", "--json")
    assert as_json.exit_code == 1
    assert json.loads(as_json.stderr)["error"]["code"] == "TOPIC_NOT_FOUND"


def _half(url: str, group: str, key: str) -> dict[str, Any]:
    message = {"topic": "transfers", "producer_group": group, "body": "pay", "keys": [key]}
    response = httpx.post(f"{url}/v1/transactions", json=message, timeout=10)
    assert response.status_code == 201, response.text
    half: dict[str, Any] = response.json()
    return half


def test_transaction_show_and_list(broker_process: BrokerProcess) -> None:
    url = broker_process.url
    ok(url, "topic", "create", "transfers", "--queues", "2")
    committed = _half(url, "bank", "t-1")
    pending = _half(url, "bank", "t-2")
    other = _half(url, "shop", "t-3")
    decision = httpx.post(
        f"{url}/v1/transactions/{committed['transaction_id']}/commit",
        json={"producer_group": "bank"},
        timeout=10,
    )
    assert decision.status_code == 200, decision.text

    shown = ok_json(url, "transaction", "show", committed["transaction_id"])
    assert shown["state"] == "COMMITTED"
    assert shown["resolved_by"] == "producer"
    assert shown["msg_id"] == committed["msg_id"]
    panel = ok(url, "transaction", "show", pending["transaction_id"])
    assert "PREPARED" in panel
    assert pending["transaction_id"] in panel

    every = ok_json(url, "transaction", "list")["transactions"]
    assert {t["transaction_id"] for t in every} == {
        committed["transaction_id"],
        pending["transaction_id"],
        other["transaction_id"],
    }
    prepared = ok_json(
        url, "transaction", "list", "--state", "prepared", "--producer-group", "bank"
    )
    assert [t["transaction_id"] for t in prepared["transactions"]] == [pending["transaction_id"]]
    assert ok_json(url, "transaction", "list", "--older-than", "1h") == {"transactions": []}
    assert len(ok_json(url, "transaction", "list", "--limit", "1")["transactions"]) == 1
    table = ok(url, "transaction", "list", "--state", "PREPARED")
    assert pending["transaction_id"] in table
    assert other["transaction_id"] in table
    assert "2 shown" in table

    missing = halfmq(url, "transaction", "show", "no-such-id")
    assert missing.exit_code == 1
    assert "TRANSACTION_NOT_FOUND" in missing.stderr


def test_transaction_resolve_and_check_as_an_operator(broker_process: BrokerProcess) -> None:
    url = broker_process.url
    ok(url, "topic", "create", "transfers", "--queues", "1")
    first = _half(url, "bank", "t-1")
    second = _half(url, "bank", "t-2")
    checked = ok_json(url, "transaction", "check", first["transaction_id"])
    assert checked["state"] == "PREPARED"
    rolled = ok_json(url, "transaction", "resolve", first["transaction_id"], "rollback")
    assert rolled["state"] == "ROLLED_BACK"
    panel = ok(url, "transaction", "resolve", second["transaction_id"], "COMMIT")
    assert "COMMITTED" in panel
    assert "operator" in panel
    again = halfmq(url, "transaction", "resolve", first["transaction_id"], "commit")
    assert again.exit_code == 1
    assert "TRANSACTION_ALREADY_RESOLVED" in again.stderr
    late = halfmq(url, "transaction", "check", first["transaction_id"])
    assert late.exit_code == 1
    assert "TRANSACTION_ALREADY_RESOLVED" in late.stderr


def test_message_get_and_find(broker_process: BrokerProcess) -> None:
    url = broker_process.url
    ok(url, "topic", "create", "orders", "--queues", "2")
    ok(url, "topic", "create", "transfers", "--queues", "2")
    sent = ok_json(url, "send", "orders", "first", "--key", "order-1", "--tag", "TagA")
    ok_json(url, "send", "orders", "second", "--key", "order-2")
    ok_json(url, "send", "transfers", "third", "--key", "order-1")
    half = _half(url, "bank", "order-3")

    got = ok_json(url, "message", "get", sent["msg_id"])
    assert got["stage"] == "STORED"
    assert got["topic"] == "orders"
    assert got["copies"][0]["topic"] == "orders"
    panel = ok(url, "message", "get", sent["msg_id"])
    assert "STORED" in panel
    assert "first" in panel
    assert "order-1" in panel

    prepared = ok_json(url, "message", "get", half["msg_id"])
    assert prepared["stage"] == "HALF"
    assert prepared["transaction_state"] == "PREPARED"

    by_key = ok_json(url, "message", "find", "--key", "order-1")["messages"]
    assert sorted(m["body"] for m in by_key) == ["first", "third"]
    in_topic = ok_json(url, "message", "find", "--key", "order-1", "--topic", "orders")
    assert [m["msg_id"] for m in in_topic["messages"]] == [sent["msg_id"]]
    assert (
        len(ok_json(url, "message", "find", "--topic", "orders", "--limit", "1")["messages"]) == 1
    )
    future = ok_json(url, "message", "find", "--topic", "orders", "--begin", "2099-01-01T00:00:00Z")
    assert future == {"messages": []}
    past = ok_json(url, "message", "find", "--topic", "orders", "--end", "946684800000")
    assert past == {"messages": []}
    table = ok(url, "message", "find", "--topic", "orders")
    assert sent["msg_id"] in table
    assert "2 shown" in table

    missing = halfmq(url, "message", "get", "no-such-id", "--json")
    assert missing.exit_code == 1
    assert json.loads(missing.stderr)["error"]["code"] == "MESSAGE_NOT_FOUND"


@pytest.mark.parametrize(
    "args",
    [
        ["topic", "list"],
        ["topic", "create", "t"],
        ["send", "t", "x"],
        ["transaction", "list"],
        ["message", "get", "m"],
    ],
)
def test_an_unreachable_broker_is_one_clear_line(args: list[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = halfmq(url, *args)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert f"cannot reach the broker at {url}" in result.stderr

    as_json = halfmq(url, *args, "--json")
    assert as_json.exit_code == 1
    assert json.loads(as_json.stderr)["error"]["code"] == "BROKER_UNREACHABLE"


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["send", "t"], "give BODY, or --base64-file"),
        (["send", "t", "x", "--base64-file", __file__], "not both"),
        (["send", "t", "x", "--property", "novalue"], "is not K=V"),
        (["send", "t", "x", "--property", "a=1", "--property", "a=2"], "given twice"),
        (["send", "t", "x", "--deliver-at", "tomorrow"], "RFC 3339"),
        (["send", "t", "x", "--queue-id", "-1"], "--queue-id"),
        (["topic", "create", "t", "--queues", "0"], "--queues"),
        (["transaction", "list", "--state", "DONE"], "--state"),
        (["transaction", "list", "--older-than", "soon"], "not a duration"),
        (["message", "find", "--begin", "yesterday"], "RFC 3339"),
        (["message", "find", "--limit", "0"], "--limit"),
        (["topic", "list", "--broker", "ftp://example.org"], "http(s) URL"),
    ],
)
def test_usage_errors_exit_2_before_any_request(args: list[str], complaint: str) -> None:
    unreachable = f"http://127.0.0.1:{free_port()}"
    result = halfmq(unreachable, *args)
    assert result.exit_code == 2, result.output
    assert complaint in " ".join(result.stderr.split()), result.stderr
    assert "cannot reach" not in result.stderr


def test_python_dash_m_is_the_same_cli(broker_process: BrokerProcess) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "halfmq", *args, "--broker", broker_process.url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    created = run("topic", "create", "orders", "--json")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["name"] == "orders"
    missing = run("send", "nowhere", "x")
    assert missing.returncode == 1
    assert "TOPIC_NOT_FOUND" in missing.stderr
    assert "Traceback" not in missing.stderr
