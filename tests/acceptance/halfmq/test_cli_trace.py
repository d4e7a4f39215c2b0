"""``halfmq message trace`` and ``halfmq transaction checks`` against a real broker process with the
ACL on, on both stores: a timeline with the broker's CHECKED events, the check audit, ``--json``,
and the requests signed like every other command."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from framework.signing import Credentials, HalfmqAuth
from halfmq.cli import app
from tests.support import BrokerProcess, free_port, wait_until

ACL = """\
globalWhiteRemoteAddresses:
  - 127.0.0.1
accounts:
  - accessKey: operator-key
    secretKey: operator-secret
    admin: true
"""
OPERATOR = Credentials("operator-key", "operator-secret")
KEYS = ["--access-key", OPERATOR.access_key, "--secret-key", OPERATOR.secret_key]
runner = CliRunner()


@pytest.fixture
def broker(migrated_url: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL)
    process = BrokerProcess(migrated_url, free_port(), tmp_path / "broker.log",
                            "--acl", str(acl_file),
                            "--transaction-timeout-seconds", "0.2",
                            "--transaction-check-interval-seconds", "0.2")  # fmt: skip
    process.start()
    try:
        yield process
    finally:
        process.stop()


def halfmq(broker: BrokerProcess, *args: str) -> Result:
    env = {"HALFMQ_BROKER": broker.url, "COLUMNS": "250",
           "HALFMQ_ACCESS_KEY": None, "HALFMQ_SECRET_KEY": None}  # fmt: skip
    result = runner.invoke(app, list(args), env=env)
    assert "Traceback" not in result.output, result.output
    return result


def _unasked_half(broker: BrokerProcess) -> tuple[str, str]:
    """A half of a producer group nobody runs: every round traces that it found no one."""
    with httpx.Client(base_url=broker.url, auth=HalfmqAuth(OPERATOR), timeout=10) as client:
        client.post("/v1/topics", json={"name": "transfers", "queues": 1}).raise_for_status()
        half = client.post("/v1/transactions",
                           json={"topic": "transfers", "producer_group": "gone", "body": "x"})  # fmt: skip
        half.raise_for_status()
        return half.json()["transaction_id"], half.json()["msg_id"]


def test_the_trace_and_the_check_audit_print_the_checks(broker: BrokerProcess) -> None:
    txid, msg_id = _unasked_half(broker)

    def traced() -> list[str]:
        result = halfmq(broker, "message", "trace", msg_id, "--json", *KEYS)
        assert result.exit_code == 0, result.output
        return [e["event"] for e in json.loads(result.stdout)["events"]]

    wait_until(lambda: "CHECKED" in traced(), 30, "a CHECKED event")
    assert traced()[0] == "HALF_STORED"

    table = halfmq(broker, "message", "trace", msg_id, *KEYS)
    assert table.exit_code == 0, table.output
    assert f"trace of {msg_id}" in table.stdout
    for column in ("time", "event", "by", "detail"):
        assert column in table.stdout
    assert "HALF_STORED" in table.stdout
    assert "CHECKED" in table.stdout
    assert "failure=no_live_instance" in table.stdout

    audit = json.loads(halfmq(broker, "transaction", "checks", txid, "--json", *KEYS).stdout)
    assert audit["due"] == "NO_LIVE_INSTANCE"
    assert audit["checks"][0]["failure"] == "no_live_instance"
    panel = halfmq(broker, "transaction", "checks", txid, *KEYS)
    assert panel.exit_code == 0, panel.output
    assert "NO_LIVE_INSTANCE" in panel.stdout
    assert "no_live_instance" in panel.stdout

    unsigned = halfmq(broker, "message", "trace", msg_id)
    assert unsigned.exit_code == 1
    assert "SIGNATURE_MISSING" in unsigned.stderr
    missing = halfmq(broker, "transaction", "checks", "no-such-tx", *KEYS)
    assert missing.exit_code == 1
    assert "TRANSACTION_NOT_FOUND" in missing.stderr
