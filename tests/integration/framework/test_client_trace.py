"""The client-side trace: each send's and each handled message's cost reach the broker's message
trace as CLIENT_PUB and CLIENT_SUB (both faces, against the real broker in process, through the
contract's ``POST /v1/trace``); a full buffer drops and counts instead of blocking, even while the
broker hangs; it is off by default, and ``HALFMQ_CLIENT_TRACE=false`` and ``client_trace=False``
send nothing; a broker without the route gets one request and one WARNING, never an error in user
code.  The tests turn it on for the process (``HALFMQ_CLIENT_TRACE=true``) unless they say."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from framework import (
    AsyncPushConsumer,
    AsyncTransactionProducer,
    BrokerBusyError,
    BrokerUnavailableError,
    CheckMode,
    ConsumeResult,
    LocalTransactionState,
    Message,
    NotFoundError,
    PushConsumer,
    Retry,
    Timeout,
    TransactionProducer,
)
from framework.client_trace import ClientTrace, ThreadReporter, Timing
from framework.transport import BrokerClient
from halfmq.testing import InProcessBroker
from tests.support import wait_until

TRACE = "/v1/trace"


@pytest.fixture(autouse=True)
def _client_trace_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALFMQ_CLIENT_TRACE", "true")


class Recording(httpx.BaseTransport):
    """The in-process broker's transport, remembering each request's path and JSON body.
    ``without_trace_route``: it answers ``POST /v1/trace`` as a broker older than the route does
    (404, the error envelope), and everything else as the real broker."""

    def __init__(self, inner: httpx.BaseTransport, *, without_trace_route: bool = False) -> None:
        self.inner = inner
        self.without_trace_route = without_trace_route
        self.seen: list[tuple[str, Any]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        content = request.read()
        self.seen.append((request.url.path, orjson.loads(content) if content else None))
        if self.without_trace_route and request.url.path == TRACE:
            envelope = {"error": {"code": "NOT_FOUND", "message": "Not Found"}}
            return httpx.Response(404, json=envelope, request=request)
        return self.inner.handle_request(request)

    def reports(self) -> list[dict[str, Any]]:
        return [body for path, body in self.seen if path == TRACE]

    def events(self) -> list[dict[str, Any]]:
        return [event for report in self.reports() for event in report["events"]]


def trace_events(broker: InProcessBroker, msg_id: str) -> list[str]:
    with broker.client() as client:
        response = client.get(f"/v1/messages/{msg_id}/trace")
        response.raise_for_status()
        return [e["event"] for e in response.json()["events"]]


def committed(message: Message, arg: Any) -> LocalTransactionState:
    return LocalTransactionState.COMMIT_MESSAGE


# -- the broker's trace shows the client's costs ------------------------------------------------


def test_sends_and_consumes_show_as_client_pub_and_client_sub(inproc: InProcessBroker) -> None:
    recording = Recording(inproc.transport)
    producer = TransactionProducer(
        "bob-bank", brokers=[inproc.url], transport=recording, check=CheckMode.none()
    )
    consumer = PushConsumer(
        "smith-bank",
        brokers=[inproc.url],
        transport=recording,
        wait_seconds=0.3,
        consume_from="FIRST_OFFSET",
    )
    producer.execute_local_transaction("transfers")(committed)
    handled: list[Message] = []

    @consumer.subscribe("transfers")
    def credit(message: Message) -> ConsumeResult:
        handled.append(message)
        if message.text == "plain" and message.reconsume_times == 0:
            return ConsumeResult.RECONSUME_LATER  # nacked once: a RETRY record, then an OK one
        return ConsumeResult.CONSUME_SUCCESS

    plain = producer.send(Message("transfers", body="plain"))
    batch = producer.send_batch([Message("transfers", body=f"b{n}") for n in range(2)])
    half = producer.send_message_in_transaction(Message("transfers", body="tx"))
    with consumer:
        wait_until(lambda: len(handled) == 5, 20, "four messages, one of them twice")
    producer.shutdown()  # reports what is left

    sent = [plain.msg_id, *(r.msg_id for r in batch), half.msg_id]
    for msg_id in sent:
        events = trace_events(inproc, msg_id)
        assert "CLIENT_PUB" in events, (msg_id, events)
        assert "CLIENT_SUB" in events, (msg_id, events)

    reported = recording.events()
    pubs = {e["msg_id"]: e for e in reported if e["type"] == "PUB"}
    assert set(pubs) == set(sent)
    assert {(e["group"], e["status"], e["topic"]) for e in pubs.values()} == {
        ("bob-bank", "OK", "transfers")
    }
    assert all(e["cost_ms"] >= 0 and e["at"].endswith("Z") for e in reported)
    subs = [(e["msg_id"], e["status"]) for e in reported if e["type"] == "SUB"]
    assert sorted(subs) == sorted([(plain.msg_id, "RETRY"), *((msg_id, "OK") for msg_id in sent)])
    assert {e["client_id"] for e in reported if e["type"] == "SUB"} == {consumer.client_id}


async def test_the_asyncio_faces_report_too(ainproc: InProcessBroker) -> None:
    producer = AsyncTransactionProducer(
        "bob-bank", brokers=[ainproc.url], transport=ainproc.async_transport, check=CheckMode.none()
    )
    consumer = AsyncPushConsumer(
        "smith-bank",
        brokers=[ainproc.url],
        transport=ainproc.async_transport,
        wait_seconds=0.3,
        consume_from="FIRST_OFFSET",
    )
    handled: list[Message] = []
    consumer.subscribe("transfers")(handled.append)
    sent = await producer.send(Message("transfers", body="100"))
    async with consumer:
        deadline = time.monotonic() + 15
        while not handled:
            assert time.monotonic() < deadline, "the message was not handled"
            await asyncio.sleep(0.05)
    await producer.shutdown()

    async with ainproc.async_client() as client:
        response = await client.get(f"/v1/messages/{sent.msg_id}/trace")
    events = [e["event"] for e in response.json()["events"]]
    assert {"CLIENT_PUB", "CLIENT_SUB"} <= set(events), events


# -- turned off ----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["environment", "option"])
def test_turned_off_sends_no_report(
    inproc: InProcessBroker, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    if how == "environment":
        monkeypatch.setenv("HALFMQ_CLIENT_TRACE", "false")
    option = {"client_trace": False} if how == "option" else {}
    recording = Recording(inproc.transport)
    producer = TransactionProducer(
        "bob-bank", brokers=[inproc.url], transport=recording, check=CheckMode.none(), **option
    )
    consumer = PushConsumer(
        "smith-bank",
        brokers=[inproc.url],
        transport=recording,
        wait_seconds=0.3,
        consume_from="FIRST_OFFSET",
        **option,
    )
    handled: list[Message] = []
    consumer.subscribe("transfers")(handled.append)
    for n in range(3):
        producer.send(Message("transfers", body=str(n)))
    with consumer:
        wait_until(lambda: len(handled) == 3, 15, "the messages to be handled")
    producer.shutdown()
    assert recording.reports() == []
    # it did talk to the broker: its acks went alone or rode on its next receive
    assert any(path.endswith(("/ack", "/ack-and-receive")) for path, _ in recording.seen)


def test_off_by_default_and_on_when_asked(
    inproc: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As RocketMQ's enableMsgTrace: a client reports nothing unless it is asked to."""
    monkeypatch.delenv("HALFMQ_CLIENT_TRACE", raising=False)
    recording = Recording(inproc.transport)
    quiet = TransactionProducer(
        "bob-bank", brokers=[inproc.url], transport=recording, check=CheckMode.none()
    )
    quiet.send(Message("transfers", body="0"))
    quiet.shutdown()
    assert recording.reports() == []
    asked = TransactionProducer(
        "bob-bank",
        brokers=[inproc.url],
        transport=recording,
        check=CheckMode.none(),
        client_trace=True,
    )
    sent = asked.send(Message("transfers", body="1"))
    asked.shutdown()
    assert [e["msg_id"] for e in recording.events()] == [sent.msg_id]


# -- an older broker ---------------------------------------------------------------------------


def test_a_broker_without_the_route_gets_one_report_and_one_warning(
    inproc: InProcessBroker, caplog: pytest.LogCaptureFixture
) -> None:
    recording = Recording(inproc.transport, without_trace_route=True)
    producer = TransactionProducer(
        "bob-bank", brokers=[inproc.url], transport=recording, check=CheckMode.none()
    )
    producer.client_trace.interval = 0.05
    with caplog.at_level(logging.WARNING, logger="halfmq.trace"):
        producer.send(Message("transfers", body="first"))
        wait_until(lambda: recording.reports(), 5, "the first report")
        wait_until(lambda: not producer.client_trace.active, 5, "reporting to stop")
        results = [producer.send(Message("transfers", body=str(n))) for n in range(5)]
        time.sleep(0.3)  # several intervals: nothing more is reported
        producer.shutdown()
    assert len(results) == 5  # every send went through
    assert len(recording.reports()) == 1
    warnings = [r for r in caplog.records if r.name == "halfmq.trace"]
    assert len(warnings) == 1
    assert "404" in warnings[0].getMessage()


# -- what a failed send records -------------------------------------------------------------------


def test_a_refused_send_records_nothing_and_one_without_an_answer_records_failed() -> None:
    """A 4xx answer means the broker stored nothing (and would refuse the record of an unknown
    message); no answer, or a 5xx, may have stored it."""
    trace = ClientTrace("bob-bank", "bob-1")
    refused = NotFoundError("no topic", status=404, code="TOPIC_NOT_FOUND")
    busy = BrokerBusyError("busy", status=429, code="BUSY")
    unanswered = BrokerUnavailableError("no broker answered", urls=("http://b",), attempts=4)
    for error in (refused, busy, unanswered, None):
        trace.published([Message("transfers", msg_id=type(error).__name__)], Timing.now(), error)
    assert [(r.msg_id, r.status) for r in trace.take()] == [
        ("BrokerBusyError", "FAILED"),
        ("BrokerUnavailableError", "FAILED"),
        ("NoneType", "OK"),
    ]


# -- a bounded buffer, never blocking ------------------------------------------------------------


@pytest.fixture
def hung_broker() -> Iterator[str]:
    """A TCP port that accepts connections and never answers: a broker that hangs."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_full_buffer_drops_and_counts_and_never_blocks(hung_broker: str) -> None:
    trace = ClientTrace("bob-bank", "bob-1", capacity=100, batch=10, interval=0.01)
    client = BrokerClient(
        [hung_broker], timeout=Timeout(connect=1, read=0.5, write=1, pool=1), retry=Retry(1)
    )
    reporter = ThreadReporter(trace, client)
    message = Message("transfers", body="1")
    started = time.monotonic()
    for _ in range(5000):  # the reporter is stuck on the hung broker meanwhile
        trace.published([message], Timing.now())
    recording_took = time.monotonic() - started
    try:
        assert recording_took < 1.0, f"recording 5000 records took {recording_took:.2f}s"
        assert trace.pending() <= trace.capacity
        # at most one report (up to 1000 records) left the buffer before it filled
        assert trace.dropped + trace.pending() + trace.lost >= 5000 - 1000
        assert trace.dropped >= 5000 - trace.capacity - 1000
    finally:
        reporter.close()
        client.close()
    assert trace.lost > 0  # the hung broker never took a report: lost, counted, not raised
