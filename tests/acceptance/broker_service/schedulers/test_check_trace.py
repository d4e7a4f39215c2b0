"""Every check leaves a CHECKED trace event and a line in the check audit (issue 16): a real broker
process, real producer instances over real sockets, on both stores.

A push check answered (the instance, the answer, the latency, the producer's trace context passed
on as headers), refused, timed out; a round that found no live instance; a pull check answered."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.broker_service.schedulers.helpers import (
    StartBroker,
    create_topic,
    transaction_of,
)
from tests.support import BrokerProcess, Program, free_port, wait_until

pytestmark = pytest.mark.slow

CHECK_TIMEOUT = 1.0
FAST = (
    "--transaction-timeout-seconds", "0.3",
    "--transaction-check-interval-seconds", "0.3",
    "--producer-expiry-seconds", "5",
    "--check-timeout-seconds", str(CHECK_TIMEOUT),
    "--check-unreachable-seconds", "0.5",
)  # fmt: skip
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def broker_flags() -> tuple[str, ...]:
    return FAST


class CheckServer:
    """A producer instance's check endpoint in this process: answers ``state`` after ``delay``
    seconds and keeps the headers of every check it got."""

    def __init__(self, state: str, delay: float) -> None:
        self.headers: list[dict[str, str]] = []
        received = self.headers

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                received.append({k.lower(): v for k, v in self.headers.items()})
                time.sleep(delay)
                body = json.dumps({"state": state}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the broker gave up waiting

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/check"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Beating:
    """Heartbeats of one instance, every half second, until stopped."""

    def __init__(self, broker: BrokerProcess, group: str, client_id: str, url: str | None):
        self.url = f"{broker.url}/v1/producer-groups/{group}/heartbeat"
        self.body = {"client_id": client_id, "callback_url": url, "topics": ["transfers"]}
        httpx.post(self.url, json=self.body, timeout=5).raise_for_status()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(self.url, json=self.body, timeout=5)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture
def instances() -> Iterator[list[CheckServer | Beating]]:
    running: list[CheckServer | Beating] = []
    yield running
    for each in reversed(running):
        each.close()


def _half(broker: BrokerProcess, group: str, properties: dict[str, str] | None = None) -> str:
    body: dict[str, Any] = {"topic": "transfers", "producer_group": group, "body": "x"}
    if properties:
        body["properties"] = properties
    response = httpx.post(f"{broker.url}/v1/transactions", json=body, timeout=10)
    response.raise_for_status()
    return str(response.json()["transaction_id"])


def _trace(broker: BrokerProcess, txid: str) -> list[dict[str, Any]]:
    msg_id = transaction_of(broker, txid)["msg_id"]
    answer = httpx.get(f"{broker.url}/v1/messages/{msg_id}/trace", timeout=5)
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


def _checked(broker: BrokerProcess, txid: str) -> list[dict[str, Any]]:
    return [e for e in _trace(broker, txid) if e["event"] == "CHECKED"]


def _audit(broker: BrokerProcess, txid: str) -> dict[str, Any]:
    answer = httpx.get(f"{broker.url}/v1/transactions/{txid}/checks", timeout=5)
    assert answer.status_code == 200, answer.text
    audit: dict[str, Any] = answer.json()
    return audit


def _check_seconds(broker: BrokerProcess, mode: str, result: str) -> float:
    text = httpx.get(f"{broker.url}/metrics", timeout=5).text
    prefix = f'halfmq_check_seconds_count{{mode="{mode}",result="{result}"}}'
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix)),
                0.0)  # fmt: skip


def test_an_answered_push_check_names_its_instance_answer_and_latency(
    start_broker: StartBroker, instances: list[CheckServer | Beating]
) -> None:
    broker = start_broker()
    create_topic(broker)
    server = CheckServer("COMMIT", delay=0.2)
    instances.append(server)
    instances.append(Beating(broker, "bob", "bob-1", server.url))
    txid = _half(broker, "bob", {"traceparent": TRACEPARENT, "tracestate": "halfmq=1"})

    wait_until(lambda: transaction_of(broker, txid)["state"] == "COMMITTED", 30, "the commit")
    (checked,) = _checked(broker, txid)
    detail = checked["detail"]
    assert checked["by"] == "bob-1"
    assert (detail["mode"], detail["answer"], detail["check_times"]) == ("push", "COMMIT", 1)
    assert 200 <= detail["latency_ms"] < CHECK_TIMEOUT * 1000
    (committed,) = [e for e in _trace(broker, txid) if e["event"] == "COMMITTED"]
    assert committed["by"] == "bob-1", "the instance whose answer committed it"
    assert committed["detail"]["resolved_by"] == "check"

    assert server.headers[0]["traceparent"] == TRACEPARENT
    assert server.headers[0]["tracestate"] == "halfmq=1"

    audit = _audit(broker, txid)
    assert (audit["due"], audit["state"], audit["check_times"]) == ("RESOLVED", "COMMITTED", 1)
    (entry,) = audit["checks"]
    assert (entry["instance"], entry["mode"], entry["answer"]) == ("bob-1", "push", "COMMIT")
    assert entry["latency_ms"] == detail["latency_ms"]
    assert entry["at"].endswith("Z")
    assert _check_seconds(broker, "push", "COMMIT") == 1


def test_refused_timed_out_and_unasked_checks_are_traced_as_failures(
    start_broker: StartBroker, instances: list[CheckServer | Beating]
) -> None:
    broker = start_broker()
    create_topic(broker)
    refused_url = f"http://127.0.0.1:{free_port()}/check"  # nobody listens there
    instances.append(Beating(broker, "refusing", "ref-1", refused_url))
    slow = CheckServer("COMMIT", delay=CHECK_TIMEOUT * 3)
    instances.append(slow)
    instances.append(Beating(broker, "slow", "slow-1", slow.url))
    refused, timed_out, unasked = (
        _half(broker, "refusing"),
        _half(broker, "slow"),
        _half(broker, "gone"),
    )

    def failures(txid: str) -> set[str]:
        return {e["detail"].get("failure") for e in _checked(broker, txid)}

    wait_until(lambda: "refused" in failures(refused), 30, "a refused check")
    wait_until(lambda: "timeout" in failures(timed_out), 30, "a timed-out check")
    wait_until(lambda: "no_live_instance" in failures(unasked), 30, "a round with nobody to ask")

    first = next(e for e in _checked(broker, refused) if e["detail"]["failure"] == "refused")
    assert first["by"] == "ref-1"
    assert first["detail"]["check_times"] == 0, "a check that reached nobody is not counted"
    assert "ConnectError" in first["detail"]["error"]
    late = next(e for e in _checked(broker, timed_out) if e["detail"]["failure"] == "timeout")
    assert late["by"] == "slow-1"
    assert late["detail"]["latency_ms"] >= CHECK_TIMEOUT * 1000 * 0.9
    assert late["detail"]["check_times"] == 1, "it reached the producer: counted"
    nobody = _checked(broker, unasked)[0]
    assert nobody["detail"] == {"transaction_id": unasked, "check_times": 0,
                                "failure": "no_live_instance"}  # fmt: skip

    assert {c["failure"] for c in _audit(broker, refused)["checks"]} >= {"refused"}
    audit = _audit(broker, unasked)
    assert audit["due"] == "NO_LIVE_INSTANCE", audit
    assert "gone" in audit["why"]
    assert _check_seconds(broker, "push", "refused") >= 1
    assert _check_seconds(broker, "push", "timeout") >= 1


def test_a_pull_check_answered_is_traced_with_its_instance(
    start_broker: StartBroker, programs: list[Program], tmp_path: Path
) -> None:
    broker = start_broker()
    create_topic(broker)
    txid = _half(broker, "bob")
    puller = Program("tests.producer_app", "serve", broker.url, "bob", str(tmp_path / "bob.db"),
                     "--mode", "pull", "--answer", "ROLLBACK")  # fmt: skip
    programs.append(puller)
    client_id = puller.first_line()

    wait_until(lambda: transaction_of(broker, txid)["state"] == "ROLLED_BACK", 30, "the answer")
    answered = [e for e in _checked(broker, txid) if e["detail"].get("answer") == "ROLLBACK"]
    (checked,) = answered
    assert checked["by"] == client_id
    assert checked["detail"]["mode"] == "pull"
    assert checked["detail"]["latency_ms"] >= 0
    (rolled,) = [e for e in _trace(broker, txid) if e["event"] == "ROLLED_BACK"]
    assert rolled["by"] == client_id
    assert _check_seconds(broker, "pull", "ROLLBACK") == 1
