"""OpenTelemetry, when ``opentelemetry-api`` is installed (the ``otel`` extra): one distributed
trace from the producer's request to the consumer's handler.

* Sending stamps the current context into the message's properties (W3C ``traceparent`` and
  ``tracestate``, through the globally configured propagator; :func:`stamped`), so the context
  travels with the message through the broker -- the half's properties become the committed
  message's.
* Every request to a broker carries the same headers (:func:`headers`), so a broker running
  with ``opentelemetry=true`` (FastAPI's native telemetry) makes its request spans children of
  the span that sent them.
* The producer's spans (:func:`producing`, kind PRODUCER, ``send <topic>``) and the consumer's
  and checker's (:func:`processing`, :func:`checking`, kind CONSUMER, parented on the context the
  message carries) follow the messaging semantic conventions (``messaging.system``,
  ``messaging.destination.name``, ``messaging.message.id``, ``messaging.operation.*``).

Without the package every function here is a no-op and nothing of OpenTelemetry is imported;
with it but without a configured SDK, spans do not record and no context is stamped (an invalid
span context is never injected).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from framework.message import Message

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the optional extra is not installed: no spans, no context
    AVAILABLE = False
else:
    AVAILABLE = True
    # what the global provider is until an SDK's is set: tracers whose spans never record
    _SILENT_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)

SYSTEM = "halfmq"
TRACER = "halfmq.framework"
Attributes = dict[str, str | int]


class Span:
    """The part of a span the framework writes after it started: an attribute, or the error that
    failed the operation without raising out of it (a handler's exception is a nack, not a crash).
    Without OpenTelemetry (or outside a recording span) both do nothing."""

    __slots__ = ("_span",)

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def set(self, key: str, value: str | int) -> None:
        if self._span is not None:
            self._span.set_attribute(key, value)

    def failed(self, error: BaseException | None, description: str | None = None) -> None:
        """Mark the operation failed: with ``error`` recorded when there is one."""
        if self._span is None:
            return
        if error is not None:
            self._span.record_exception(error)
        self._span.set_status(Status(StatusCode.ERROR, description or _describe(error)))


def _describe(error: BaseException | None) -> str | None:
    return None if error is None else f"{type(error).__name__}: {error}"


def headers() -> dict[str, str]:
    """The current context as propagation headers (``traceparent``, ``tracestate``...): what a
    request to a broker carries.  Empty without OpenTelemetry or outside any trace."""
    if not AVAILABLE:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def stamped(message: Message) -> Message:
    """``message`` with the current context among its properties (unchanged when there is
    none), so the consumer's span can join the sender's trace.  A retransmit stamped in another
    context is still the same message: the broker leaves the trace context out when it compares
    a retransmit with what it stored (docs/api.md, "Retransmits")."""
    carrier = headers()
    if not carrier:
        return message
    return message.evolve(properties={**message.properties, **carrier})


def _common(operation: str, kind: str, topic: str, client_id: str) -> Attributes:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.name": operation,
        "messaging.operation.type": kind,
        "messaging.destination.name": topic,
        "messaging.client.id": client_id,
    }


@contextmanager
def _span(
    name: str, kind: str, attributes: Attributes, parent: Mapping[str, str] | None = None
) -> Iterator[Span]:
    """A current span of ``kind`` (a ``SpanKind`` name): its children and the requests made
    inside it are parented on it.  With ``parent``, its parent is the context those properties
    carry (none: it starts a trace), not the current one."""
    if not AVAILABLE or (parent is None and _silent()):
        yield Span()
        return
    context = None if parent is None else propagate.extract(parent)
    with _tracer().start_as_current_span(name, context, SpanKind[kind], attributes) as span:
        yield Span(span if span.is_recording() else None)


def _silent() -> bool:
    """No tracer provider is configured (now: one configured later counts).  Its tracer would
    start every span as the current span unchanged, so a span without ``parent`` is skipped
    whole: the same context, the same headers, none of the cost (measured: bench/README.md,
    "Performance step, third session", no span work without a tracer provider).  A span with a
    ``parent`` still starts:
    the context it extracts becomes current even without a provider."""
    return isinstance(trace.get_tracer_provider(), _SILENT_PROVIDERS)


_made: tuple[Any, Any] | None = None  # (a tracer provider, the framework's tracer from it)


def _tracer() -> Any:
    """The framework's tracer from the provider of now (one configured later counts), made once
    per provider: ``trace.get_tracer`` builds a new one on every call, a large part of what a span
    cost when no SDK is configured (bench/README.md, "Request batching", the client)."""
    global _made
    provider = trace.get_tracer_provider()
    made = _made
    if made is None or made[0] is not provider:
        made = _made = (provider, provider.get_tracer(TRACER))
    return made[1]


@contextmanager
def producing(
    topic: str,
    client_id: str,
    group: str,
    *,
    msg_id: str | None = None,
    count: int = 1,
    transactional: bool = False,
) -> Iterator[Span]:
    """The PRODUCER span of one send (``send <topic>``): a plain send, a batch (``count``
    messages, no message id), or a transaction from its half to its commit or rollback."""
    attributes = _common("send", "send", topic, client_id)
    attributes["messaging.halfmq.producer.group"] = group
    attributes["messaging.halfmq.message.type"] = "transaction" if transactional else "normal"
    if msg_id is not None:
        attributes["messaging.message.id"] = msg_id
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    with _span(f"send {topic}", "PRODUCER", attributes) as span:
        yield span


@contextmanager
def local_transaction(message: Message) -> Iterator[Span]:
    """The local transaction, inside its transaction's PRODUCER span (kind INTERNAL)."""
    attributes: Attributes = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": message.topic,
        "messaging.message.id": message.msg_id,
        "messaging.halfmq.transaction.id": message.transaction_id or "",
    }
    with _span(f"local transaction {message.topic}", "INTERNAL", attributes) as span:
        yield span


@contextmanager
def ending(topic: str, transaction_id: str, commit: bool) -> Iterator[Span]:
    """A commit or rollback request (kind CLIENT): inside the transaction's span when it ends
    the producer's own transaction, inside the check's span when it answers a pulled check."""
    verb = "commit" if commit else "rollback"
    attributes: Attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": verb,
        "messaging.destination.name": topic,
        "messaging.halfmq.transaction.id": transaction_id,
    }
    with _span(f"{verb} {topic}", "CLIENT", attributes) as span:
        yield span


@contextmanager
def processing(message: Message, group: str, client_id: str) -> Iterator[Span]:
    """The CONSUMER span of one delivered message (``process <topic>``), from its handler to its
    ack or nack, parented on the context the message carries."""
    attributes = _common("process", "process", message.topic, client_id)
    attributes["messaging.message.id"] = message.msg_id
    attributes["messaging.consumer.group.name"] = group
    attributes["messaging.halfmq.message.reconsume_times"] = message.reconsume_times
    if message.tags:
        attributes["messaging.halfmq.message.tag"] = message.tags
    parent = message.properties
    with _span(f"process {message.topic}", "CONSUMER", attributes, parent) as span:
        yield span


@contextmanager
def processing_batch(messages: Sequence[Message], group: str, client_id: str) -> Iterator[Span]:
    """The CONSUMER span of a batch handler's call (``process <topic>``), from the handler to
    the batch's acks and nacks, parented on the context its first message carries."""
    first = messages[0]
    attributes = _common("process", "process", first.topic, client_id)
    attributes["messaging.batch.message_count"] = len(messages)
    attributes["messaging.consumer.group.name"] = group
    with _span(f"process {first.topic}", "CONSUMER", attributes, first.properties) as span:
        yield span


@contextmanager
def checking(check: Message, group: str, client_id: str) -> Iterator[Span]:
    """The CONSUMER span of one check of a half (``check <topic>``), pushed or pulled, parented
    on the context the half carries: the check joins the trace of the transaction it asks
    about."""
    attributes = _common("check", "process", check.topic, client_id)
    attributes["messaging.message.id"] = check.msg_id
    attributes["messaging.halfmq.producer.group"] = group
    attributes["messaging.halfmq.transaction.id"] = check.transaction_id or ""
    check_times = check.properties.get("CHECK_TIMES", "")
    if check_times.isdigit():
        attributes["messaging.halfmq.check_times"] = int(check_times)
    with _span(f"check {check.topic}", "CONSUMER", attributes, check.properties) as span:
        yield span
