"""OpenTelemetry end to end, against the real broker in process, with the SDK's in-memory
exporter: the consumer's span continues the producer's send span (plain sends and transactions,
on both faces), the broker's request spans join the producer's trace when it runs with
``opentelemetry=true``, a check (pushed over real HTTP, or pulled) runs in a span parented on the
half's context -- and without ``opentelemetry`` installed the framework neither imports it nor
stamps anything (a client process with the package blocked, against a broker process)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind
from opentelemetry.util._once import Once

from framework import (
    AsyncPushConsumer,
    AsyncTransactionProducer,
    CheckMode,
    LocalTransactionState,
    Message,
    PushConsumer,
    TransactionProducer,
)
from halfmq.testing import InProcessBroker
from tests.integration.framework.conftest import FAST, PULL
from tests.integration.framework.helpers import await_resolved, wait_resolved
from tests.support import BrokerProcess, wait_until

State = LocalTransactionState
tracer = trace.get_tracer("tests.integration.framework.test_otel")


def _reset_trace_globals() -> None:
    """Forget the global tracer provider (it can be set once per process), as OpenTelemetry's own
    test utilities do (``opentelemetry.test.globals_test.reset_trace_globals``)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    trace._PROXY_TRACER_PROVIDER = trace.ProxyTracerProvider()


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """An SDK provider exporting to memory, the global one for this module's tests only: later
    tests in this process see no provider (their messages carry no context)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_trace_globals()
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    _reset_trace_globals()


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    exporter.clear()
    return exporter


def finished(spans: InMemorySpanExporter, name: str, kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name and s.kind is kind]


def one(spans: InMemorySpanExporter, name: str, kind: SpanKind) -> ReadableSpan:
    found = finished(spans, name, kind)
    assert len(found) == 1, f"{name} ({kind}): {[s.name for s in spans.get_finished_spans()]}"
    return found[0]


def context_of(span: ReadableSpan) -> SpanContext:
    assert span.context is not None
    return span.context


def assert_child(child: ReadableSpan, parent: ReadableSpan) -> None:
    """``child`` is in ``parent``'s trace, and ``parent`` is its parent."""
    assert child.parent is not None, f"{child.name} has no parent"
    assert child.parent.trace_id == context_of(parent).trace_id
    assert child.parent.span_id == context_of(parent).span_id


class Handled:
    """What a handler saw: the messages and the span current while it ran."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.current: list[SpanContext] = []

    def __call__(self, message: Message) -> None:
        self.messages.append(message)
        self.current.append(trace.get_current_span().get_span_context())


def committed(message: Message, arg: Any) -> State:
    return State.COMMIT_MESSAGE


# -- the consumer's span continues the producer's ----------------------------------------------


def test_sync_consumer_span_continues_a_plain_send(
    spans: InMemorySpanExporter,
    producers: Callable[..., TransactionProducer],
    consumers: Callable[..., PushConsumer],
) -> None:
    producer, consumer, handled = producers(check=CheckMode.none()), consumers(), Handled()
    consumer.subscribe("transfers")(handled)
    with tracer.start_as_current_span("bob's request"):
        sent = producer.send(Message("transfers", body="100", keys=["t-1"]))
    consumer.start()
    wait_until(lambda: finished(spans, "process transfers", SpanKind.CONSUMER), 15, "the handling")

    request = one(spans, "bob's request", SpanKind.INTERNAL)
    send = one(spans, "send transfers", SpanKind.PRODUCER)
    process = one(spans, "process transfers", SpanKind.CONSUMER)
    assert_child(send, request)
    assert_child(process, send)
    assert handled.current == [context_of(process)]  # the handler runs inside it
    assert "traceparent" in handled.messages[0].properties
    assert send.attributes is not None
    assert process.attributes is not None
    assert {
        k: send.attributes[k]
        for k in ("messaging.system", "messaging.destination.name", "messaging.message.id")
    } == {
        "messaging.system": "halfmq",
        "messaging.destination.name": "transfers",
        "messaging.message.id": sent.msg_id,
    }
    assert process.attributes["messaging.operation.type"] == "process"
    assert process.attributes["messaging.message.id"] == sent.msg_id
    assert process.attributes["messaging.consumer.group.name"] == "smith-bank"


def test_sync_consumer_span_continues_a_transaction(
    spans: InMemorySpanExporter,
    producers: Callable[..., TransactionProducer],
    consumers: Callable[..., PushConsumer],
) -> None:
    producer, consumer, handled = producers(check=CheckMode.none()), consumers(), Handled()
    producer.execute_local_transaction("transfers")(committed)
    consumer.subscribe("transfers")(handled)
    with tracer.start_as_current_span("bob's request"):
        result = producer.send_message_in_transaction(Message("transfers", body="100"))
    assert result.resolution == "COMMITTED"
    consumer.start()
    wait_until(lambda: finished(spans, "process transfers", SpanKind.CONSUMER), 15, "the handling")

    send = one(spans, "send transfers", SpanKind.PRODUCER)
    assert_child(send, one(spans, "bob's request", SpanKind.INTERNAL))
    assert_child(one(spans, "local transaction transfers", SpanKind.INTERNAL), send)
    assert_child(one(spans, "commit transfers", SpanKind.CLIENT), send)
    process = one(spans, "process transfers", SpanKind.CONSUMER)
    assert_child(process, send)
    assert handled.current == [context_of(process)]
    assert send.attributes is not None
    assert send.attributes["messaging.halfmq.transaction.id"] == result.transaction_id
    assert send.attributes["messaging.halfmq.transaction.resolution"] == "COMMITTED"


async def _wait_for(predicate: Callable[[], Any], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {within}s waiting for {what}"
        await asyncio.sleep(0.05)


async def test_async_consumer_span_continues_a_plain_send_and_a_transaction(
    spans: InMemorySpanExporter,
    aproducers: Callable[..., AsyncTransactionProducer],
    aconsumers: Callable[..., AsyncPushConsumer],
) -> None:
    producer, consumer, handled = aproducers(check=CheckMode.none()), aconsumers(), Handled()
    producer.execute_local_transaction("transfers")(committed)

    @consumer.subscribe("transfers")
    async def credit(message: Message) -> None:
        handled(message)

    with tracer.start_as_current_span("bob's request"):
        plain = await producer.send(Message("transfers", body="plain"))
        result = await producer.send_message_in_transaction(Message("transfers", body="tx"))
    await consumer.start()
    processed = lambda: finished(spans, "process transfers", SpanKind.CONSUMER)  # noqa: E731
    await _wait_for(lambda: len(processed()) == 2, 15, "both handlings")

    sends = {
        s.attributes["messaging.message.id"]: s
        for s in finished(spans, "send transfers", SpanKind.PRODUCER)
        if s.attributes is not None
    }
    for process in processed():
        assert process.attributes is not None
        assert_child(process, sends[process.attributes["messaging.message.id"]])
    assert set(sends) == {plain.msg_id, result.msg_id}
    assert sorted(handled.current, key=str) == sorted(map(context_of, processed()), key=str)


# -- the broker joins -------------------------------------------------------------------------


def test_the_brokers_request_spans_join_the_producers_trace(spans: InMemorySpanExporter) -> None:
    with InProcessBroker(**FAST, opentelemetry=True) as broker:
        broker.create_topic("transfers")
        producer = TransactionProducer(
            "bob-bank",
            brokers=[broker.url],
            transport=broker.transport,
            check=CheckMode.none(),
            client_trace=False,
        )
        producer.execute_local_transaction("transfers")(committed)
        with producer, tracer.start_as_current_span("bob's request"):
            producer.send_message_in_transaction(Message("transfers", body="100"))

    send = one(spans, "send transfers", SpanKind.PRODUCER)
    commit = one(spans, "commit transfers", SpanKind.CLIENT)
    served = {
        s.attributes["url.path"]: s
        for s in spans.get_finished_spans()
        if s.kind is SpanKind.SERVER and s.attributes is not None
    }
    assert_child(served["/v1/transactions"], send)  # the half
    committed_path = next(p for p in served if p.endswith("/commit"))
    assert_child(served[committed_path], commit)


# -- checks run in a span parented on the half's context -----------------------------------------


def test_a_pushed_check_runs_in_the_halfs_trace(
    spans: InMemorySpanExporter, producers: Callable[..., TransactionProducer]
) -> None:
    producer, checked = producers(check=CheckMode.push()), Handled()
    producer.execute_local_transaction("transfers")(lambda m, a: None)  # UNKNOW: checked

    @producer.check_local_transaction("transfers")
    def check(message: Message) -> State:
        checked(message)
        return State.COMMIT_MESSAGE

    producer.serve_checks()  # the built-in server: the broker POSTs over real HTTP
    with producer:
        with tracer.start_as_current_span("bob's request"):
            result = producer.send_message_in_transaction(Message("transfers", body="100"))
        record = wait_resolved(producer, result.transaction_id)
    assert (record["state"], record["resolved_by"]) == ("COMMITTED", "check")

    send = one(spans, "send transfers", SpanKind.PRODUCER)
    check_span = finished(spans, "check transfers", SpanKind.CONSUMER)[0]
    assert_child(check_span, send)
    assert checked.current[0] == context_of(check_span)
    assert check_span.attributes is not None
    assert check_span.attributes["messaging.halfmq.transaction.id"] == result.transaction_id


async def test_a_pulled_check_runs_in_the_halfs_trace_and_so_does_its_answer(
    spans: InMemorySpanExporter, aproducers: Callable[..., AsyncTransactionProducer]
) -> None:
    producer, checked = aproducers(check=PULL), Handled()
    producer.execute_local_transaction("transfers")(lambda m, a: None)

    @producer.check_local_transaction("transfers")
    async def check(message: Message) -> State:
        checked(message)
        return State.ROLLBACK_MESSAGE

    async with producer:
        with tracer.start_as_current_span("bob's request"):
            result = await producer.send_message_in_transaction(Message("transfers", body="1"))
        record = await await_resolved(producer, result.transaction_id)
        rollbacks = lambda: finished(spans, "rollback transfers", SpanKind.CLIENT)  # noqa: E731
        await _wait_for(rollbacks, 5, "the check's answer to end")
    assert (record["state"], record["resolved_by"]) == ("ROLLED_BACK", "check")

    send = one(spans, "send transfers", SpanKind.PRODUCER)
    check_span = finished(spans, "check transfers", SpanKind.CONSUMER)[0]
    assert_child(check_span, send)
    assert checked.current[0] == context_of(check_span)
    assert_child(rollbacks()[0], check_span)


# -- a retransmit keeps its first context -----------------------------------------------------


def test_a_retransmit_keeps_the_context_of_its_first_send(
    spans: InMemorySpanExporter, producers: Callable[..., TransactionProducer]
) -> None:
    """The broker leaves the trace context out when it compares a retransmit with what it
    stored: the same message sent again in another span is a duplicate, not a 409."""
    producer = producers(check=CheckMode.none())
    message = Message("transfers", body="100")
    with tracer.start_as_current_span("first"):
        first = producer.send(message)
    with tracer.start_as_current_span("again"):
        again = producer.send(message)
    assert (first.duplicate, again.duplicate) == (False, True)


# -- without the package ----------------------------------------------------------------------

_WITHOUT_OTEL = textwrap.dedent(
    """
    import json, sys
    sys.modules["opentelemetry"] = None  # the optional extra is not installed
    from framework import ConsumeResult, Message, PushConsumer, TransactionProducer, CheckMode

    url = sys.argv[1]
    producer = TransactionProducer("plain-bank", brokers=[url], check=CheckMode.none())
    producer.create_topic("no-otel")
    sent = producer.send(Message("no-otel", body="100", properties={"source": "web"}))
    got = []
    consumer = PushConsumer(
        "no-otel-readers", brokers=[url], wait_seconds=0.3, consume_from="FIRST_OFFSET"
    )
    consumer.subscribe("no-otel")(lambda m: got.append(m) or ConsumeResult.CONSUME_SUCCESS)
    consumer.start()
    import time
    deadline = time.monotonic() + 15
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    consumer.shutdown()
    producer.shutdown()
    print(json.dumps({
        "sent": sent.msg_id,
        "got": [(m.msg_id, m.properties) for m in got],
        "imported": sorted(
            name for name, module in sys.modules.items()
            if name.startswith("opentelemetry") and module is not None
        ),
    }))
    """
)


def test_without_opentelemetry_nothing_is_imported_and_nothing_changes(
    sqlite_broker_process: BrokerProcess,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL, sqlite_broker_process.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["imported"] == []
    [(msg_id, properties)] = outcome["got"]
    assert msg_id == outcome["sent"]
    assert properties["source"] == "web"
    assert not {"traceparent", "tracestate"} & set(properties)
