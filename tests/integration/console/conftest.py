"""A real broker process with an ACL file on SQLite, data made over signed REST, and Debian's
chromium driven by Playwright (its sync API)."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from framework.signing import Credentials, HalfmqAuth
from tests.support import BrokerProcess, free_port

ACL = """\
globalWhiteRemoteAddresses:
  - 127.0.0.1
  - ::1
accounts:
  - accessKey: operator-key
    secretKey: operator-secret-0123456789
    admin: true
  - accessKey: teller-key
    secretKey: teller-secret-0123456789
    topicPerms:
      - transfers=PUB
    groupPerms:
      - bob-bank=PUB
"""

OPERATOR = Credentials("operator-key", "operator-secret-0123456789")
TELLER = Credentials("teller-key", "teller-secret-0123456789")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@dataclass
class Scene:
    """The broker and what the set-up made in it."""

    broker: BrokerProcess
    halves: list[str]  # PREPARED halves of bob-bank, no producer ever commits them
    dead_msg_id: str  # a dead letter of the consumer group smith-bank
    shots: Path  # where the tests save their screenshots


def _signed(broker: BrokerProcess, who: Credentials) -> httpx.Client:
    return httpx.Client(base_url=broker.url, auth=HalfmqAuth(who), timeout=10)


def _reports(directory: Path) -> None:
    """Two days of the reconciliation job's reports, in its own layout (summary.json and
    report.html per ``date=`` directory), with kinds and severities of the job's registry."""
    for day, critical, warning in (("2026-11-23", 0, 2), ("2026-11-24", 1, 3)):
        folder = directory / f"date={day}"
        folder.mkdir(parents=True)
        summary = {"date": day, "status": "critical" if critical else "warnings",
                   "exit_code": 2 if critical else 1, "critical": critical, "warning": warning,
                   "counts": {"double_credit": {"severity": "critical", "count": critical},
                              "stuck_half": {"severity": "warning", "count": warning}}}  # fmt: skip
        (folder / "summary.json").write_text(json.dumps(summary))
        (folder / "report.html").write_text(f"<html><body><h1>Report {day}</h1></body></html>")


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    root = tmp_path_factory.mktemp("console")
    acl = root / "plain_acl.yml"
    acl.write_text(ACL)
    reports = root / "reports"
    _reports(reports)
    broker = BrokerProcess(
        f"sqlite:///{root / 'broker.db'}", free_port(), root / "broker.log",
        "--acl", str(acl), "--console-reports-dir", str(reports),
        "--console-session-secret", "a-test-session-secret",
        "--transaction-check-interval-seconds", "3600", "--transaction-timeout-seconds", "0",
    )  # fmt: skip
    broker.start()
    try:
        with _signed(broker, OPERATOR) as admin:
            assert admin.post("/v1/topics", json={"name": "transfers", "queues": 2}).is_success
            halves = []
            for n in range(3):
                body = {"topic": "transfers", "producer_group": "bob-bank", "body": f"debit {n}",
                        "keys": [f"transfer-{n}"]}  # fmt: skip
                response = admin.post("/v1/transactions", json=body)
                assert response.status_code == 201, response.text
                halves.append(response.json()["transaction_id"])
            dead = _dead_letter(admin)
        shots = Path(os.environ.get("HALFMQ_CONSOLE_SHOTS", str(root / "screenshots")))
        shots.mkdir(parents=True, exist_ok=True)
        print(f"\nconsole screenshots: {shots}")
        yield Scene(broker, halves, dead, shots)
    finally:
        broker.stop()


def _dead_letter(admin: httpx.Client) -> str:
    """smith-bank gives up on a message at once (max_reconsume_times 0): a dead letter; then four
    more messages wait for it (its lag)."""
    group = {"name": "smith-bank", "consume_from": "FIRST_OFFSET", "max_reconsume_times": 0}
    assert admin.post("/v1/consumer-groups", json=group).is_success
    subscription = {"topic": "transfers"}
    assert admin.post("/v1/consumer-groups/smith-bank/subscriptions", json=subscription).is_success
    sent = admin.post("/v1/topics/transfers/messages", json={"body": "credit 7", "keys": ["k7"]})
    assert sent.is_success, sent.text
    received = admin.post(
        "/v1/consumer-groups/smith-bank/receive",
        json={"client_id": "smith-1", "topic": "transfers", "wait_seconds": 5},
    ).json()["messages"]
    assert received, "the message was not delivered"
    handle = received[0]["receipt_handle"]
    nack = admin.post("/v1/consumer-groups/smith-bank/nack", json={"receipt_handle": handle})
    assert nack.json()["outcome"] == "DLQ", nack.text
    for n in range(8, 12):  # and then some it has not received yet: a lag
        more = {"body": f"credit {n}", "keys": [f"k{n}"]}
        assert admin.post("/v1/topics/transfers/messages", json=more).is_success
    return str(received[0]["msg_id"])


@pytest.fixture(scope="module")
def browser(scene: Scene) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None, "the page has no form with a CSRF token"
    return found.group(1)
