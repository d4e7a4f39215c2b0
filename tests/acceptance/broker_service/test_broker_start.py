"""``halfmq broker serve`` as an operator meets it: a busy port is one line before anything is
created; "ready" only once it listens; the log says how it runs, what its checks did and what it
discarded -- and holds no secret."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker_service.schedulers.checkback import RoundLog
from tests.support import BrokerProcess, free_port, wait_until


def test_a_busy_port_is_one_line_before_the_store_is_touched(tmp_path: Path) -> None:
    database = tmp_path / "broker.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable, "-m", "halfmq", "broker", "serve", "--host", "127.0.0.1",
                "--port", str(port), "--database-url", f"sqlite:///{database}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"cannot listen on 127.0.0.1:{port}: the address is already in use "
        "(another broker? choose another --port)"
    ]
    assert not database.exists(), "no store is created (or migrated) for a broker that cannot run"


class _Unknown(BaseHTTPRequestHandler):
    """A producer's check endpoint that never knows: every check is counted, none decides."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        body = json.dumps({"state": "UNKNOWN"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def unknown_endpoint() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Unknown)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_the_log_tells_start_ready_checks_and_discards_without_secrets(
    tmp_path: Path, unknown_endpoint: int
) -> None:
    token, session_secret = f"Tok{uuid.uuid4().hex}", f"Sess{uuid.uuid4().hex}"
    log = tmp_path / "broker.log"
    port = free_port()
    broker = BrokerProcess(
        f"sqlite:///{tmp_path / 'new.db'}",
        port,
        log,
        "--transaction-timeout-seconds", "0",
        "--transaction-check-interval-seconds", "0.3",
        "--transaction-check-max", "1",
        "--console-session-secret", session_secret,
    )  # fmt: skip
    broker.start()
    try:
        with httpx.Client(base_url=broker.url, timeout=10) as client:
            client.post("/v1/topics", json={"name": "t", "queues": 1}).raise_for_status()
            callback = f"http://127.0.0.1:{unknown_endpoint}/checks?token={token}"
            client.post(
                "/v1/producer-groups/bob/heartbeat",
                json={"client_id": "bob-1", "callback_url": callback},
            ).raise_for_status()
            half = client.post(
                "/v1/transactions", json={"topic": "t", "producer_group": "bob", "body": "x"}
            )
            txid = half.json()["transaction_id"]

            def discarded() -> bool:
                state = client.get(f"/v1/transactions/{txid}").json()["state"]
                return bool(state == "DISCARDED")

            wait_until(discarded, 30, "the half to be discarded after its one check")
            wait_until(lambda: "DISCARDED" in log.read_text(), 10, "the discard's log line")
    finally:
        broker.stop()
    lines = log.read_text().splitlines()
    text = "\n".join(lines)

    def line_with(*parts: str) -> int:
        found = [n for n, line in enumerate(lines) if all(p in line for p in parts)]
        assert found, f"no line with {parts} in:\n{text}"
        return found[0]

    start = line_with("INFO", "broker starting: halfmq", f"http://127.0.0.1:{port}")
    line_with("sqlite store sqlite:///", "ACL off", "retention 48 h", "discarded after 1 checks")
    listening = line_with("INFO", "broker ready on sqlite:///", f"listening on {broker.url}")
    assert start < line_with("Application startup complete") < listening
    line_with("INFO", "check round:", "answered UNKNOWN")
    line_with("WARNING", f"transaction {txid} DISCARDED (")
    assert token not in text
    assert session_secret not in text


def test_a_round_of_many_checks_is_a_few_lines(caplog: pytest.LogCaptureFixture) -> None:
    round_log = RoundLog()
    with caplog.at_level(logging.INFO, logger="halfmq.checkback"):
        for n in range(500):
            round_log.check("answered COMMIT", logging.INFO, "check of %s answered COMMIT", n)
        round_log.check("failed", logging.WARNING, "check of %s failed", "late")
        round_log.summary(501)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == RoundLog.DETAILED + 2
    assert lines[-2] == "check of late failed"  # a fault is seen among many answers
    assert lines[-1] == "check round: 501 due halves claimed; 500 answered COMMIT, 1 failed"
