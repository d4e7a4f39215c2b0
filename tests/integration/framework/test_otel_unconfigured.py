"""OpenTelemetry installed but no tracer provider configured: the framework skips its own spans
(``otel._silent``), and that changes nothing a caller can see -- the message carries the caller's
context exactly as a no-op span would have left it -- while a provider configured later, in the
same process, records the spans of the next transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.util._once import Once

from framework import CheckMode, LocalTransactionState, Message, PushConsumer, TransactionProducer
from tests.support import wait_until

TRACE_ID, SPAN_ID = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
REMOTE = SpanContext(TRACE_ID, SPAN_ID, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
TRACEPARENT = f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01"


def _reset_trace_globals() -> None:
    """No global tracer provider, as at a process's start (see test_otel.py)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    trace._PROXY_TRACER_PROVIDER = trace.ProxyTracerProvider()


@pytest.fixture
def unconfigured() -> Iterator[None]:
    _reset_trace_globals()
    yield
    _reset_trace_globals()


def committed(message: Message, arg: Any) -> LocalTransactionState:
    return LocalTransactionState.COMMIT_MESSAGE


def test_without_a_provider_a_transaction_carries_the_callers_context_unchanged(
    unconfigured: None,
    producers: Callable[..., TransactionProducer],
    consumers: Callable[..., PushConsumer],
) -> None:
    producer, consumer = producers(check=CheckMode.none()), consumers()
    seen: list[tuple[Message, SpanContext]] = []
    consumer.subscribe("transfers")(
        lambda m: seen.append((m, trace.get_current_span().get_span_context()))
    )
    current: list[SpanContext] = []

    def local(message: Message, arg: Any) -> LocalTransactionState:
        current.append(trace.get_current_span().get_span_context())
        return LocalTransactionState.COMMIT_MESSAGE

    producer.execute_local_transaction("transfers")(local)
    with trace.use_span(NonRecordingSpan(REMOTE)):  # a context received, no SDK to record it
        result = producer.send_message_in_transaction(Message("transfers", body="100"))
        bare = producer.send_message_in_transaction(Message("transfers", body="200"))
    outside = producer.send_message_in_transaction(Message("transfers", body="300"))
    assert {result.resolution, bare.resolution, outside.resolution} == {"COMMITTED"}
    assert current[:2] == [REMOTE, REMOTE]  # the local transaction ran in the caller's context
    consumer.start()
    wait_until(lambda: len(seen) == 3, 15, "the three deliveries")

    by_body = {m.body: (m, span) for m, span in seen}
    for body in ("100", "200"):
        message, span = by_body[body]
        assert message.properties["traceparent"] == TRACEPARENT
        assert span == REMOTE  # the handler's span: the message's context, as a no-op span gives
    assert "traceparent" not in by_body["300"][0].properties  # no context: nothing stamped


def test_a_provider_configured_later_records_the_next_transaction(
    unconfigured: None, producers: Callable[..., TransactionProducer]
) -> None:
    producer = producers(check=CheckMode.none())
    producer.execute_local_transaction("transfers")(committed)
    assert producer.send_message_in_transaction(Message("transfers", body="1")).resolution
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        result = producer.send_message_in_transaction(Message("transfers", body="2"))
        names = {(s.name, s.kind) for s in exporter.get_finished_spans()}
        assert ("send transfers", SpanKind.PRODUCER) in names
        assert ("local transaction transfers", SpanKind.INTERNAL) in names
        assert ("commit transfers", SpanKind.CLIENT) in names
        send = next(s for s in exporter.get_finished_spans() if s.name == "send transfers")
        assert send.attributes is not None
        assert send.attributes["messaging.halfmq.transaction.id"] == result.transaction_id
    finally:
        provider.shutdown()
