"""The push consumer without I/O: its settings, the subscriptions registered by decorators, and
its flows (:mod:`framework.flow`), written once for both faces:

* :meth:`ConsumerBase.register_flow`: create the group and its subscriptions;
* :meth:`ConsumerBase.consume_flow`: the answer to one received message -- run the handler (in
  its inbox transaction when idempotent or transacted), then ack, batch the ack, or nack;
* :meth:`ConsumerBase.consume_batch_flow`: the same for a batch handler (``batch_max``): up to
  that many messages of one queue in one call, answered for the list -- all acked, all retried,
  or (an index returned) those before the first failed one acked and the rest retried;
* :meth:`ConsumerBase.acks_flow` and :meth:`ConsumerBase.give_back_flow`: send acks, release a
  message that will not be consumed here.

Each handled message runs in an OpenTelemetry CONSUMER span parented on the context it carries
(:mod:`framework.otel`), and its handler's duration goes to the client-side trace
(:mod:`framework.client_trace`).

:class:`~framework.consumer.PushConsumer` runs them on threads,
:class:`~framework.aio_consumer.AsyncPushConsumer` on tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from framework import inbox, otel, protocol
from framework.acks import (
    FAILED,
    AckBuffer,
    AckMode,
    AckRiders,
    BatchAck,
    BatchVerdict,
    DedupKey,
    SubscriptionOptions,
    Unsettled,
    batch_verdict,
    queue_of,
    succeeded,
    tag_expression,
)
from framework.batching import Linger
from framework.client_trace import Timing
from framework.config import Retry, Timeout
from framework.errors import BodyDecodeError, BrokerError, ConfigurationError, HalfMQError
from framework.flow import Flow, Invoke, call
from framework.member import GroupMember, check_name
from framework.message import Message
from framework.protocol import ITEMS_MAX
from framework.registry import Handlers, P, R, Registered
from framework.signing import CredentialsLike
from framework.transport import TransportT, Verify

log = logging.getLogger("halfmq.consumer")

RELEASE_SECONDS = 0.001


def by_queue(messages: Sequence[Message]) -> list[list[Message]]:
    """``messages`` per queue (:func:`~framework.acks.queue_of`), each in the order received."""
    queues: dict[tuple[str, int | None, bool], list[Message]] = {}
    for message in messages:
        queues.setdefault(queue_of(message), []).append(message)
    return list(queues.values())


def chunks(messages: list[Message], size: int) -> list[list[Message]]:
    return [messages[n : n + size] for n in range(0, len(messages), size)]


def handle_of(message: Message) -> str:
    if message.receipt_handle is None:
        raise HalfMQError("only a delivered message can be acked", msg_id=message.msg_id)
    return message.receipt_handle


class ConsumerBase(GroupMember[TransportT]):
    """One consumer group member: what both faces share, and the flows they drive."""

    def __init__(
        self,
        group: str,
        brokers: Sequence[str],
        *,
        client_id: str | None = None,
        ack_mode: AckMode = AckMode.AUTO,
        batch_size: int = 32,
        concurrency: int = 8,
        orderly: bool = False,
        broadcasting: bool = False,
        consume_from: str = "LAST_OFFSET",
        max_reconsume_times: int | None = None,
        invisible_seconds: float = 30.0,
        wait_seconds: float = 5.0,
        batch_ack: BatchAck | None = None,
        shutdown_timeout: float = 30.0,
        timeout: Timeout | None = None,
        retry: Retry | None = None,
        credentials: CredentialsLike = None,
        transport: TransportT | None = None,
        verify: Verify = True,
        client_trace: bool | None = None,
        batch_linger_ms: float = 2.0,
        max_batch: int = 128,
    ) -> None:
        """``batch_linger_ms``: how long a worker's ack waits for the other workers' to share its
        request, while others are in flight (0: one ack request per message, as before);
        ``max_batch``: a shared ack is sent once it holds this many (:mod:`framework.batching`).
        ``AckMode.BATCH`` is another thing: it acks later, by itself."""
        super().__init__(
            group,
            "consumer group",
            brokers,
            client_id,
            timeout,
            retry,
            credentials,
            client_trace,
            Linger(batch_linger_ms, max_batch),
        )
        self.ack_mode = ack_mode
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.orderly = orderly
        self.message_model = "BROADCASTING" if broadcasting else "CLUSTERING"
        self.consume_from = consume_from
        self.max_reconsume_times = max_reconsume_times
        self.invisible_seconds = invisible_seconds
        self.wait_seconds = wait_seconds
        self.batch_ack = batch_ack or BatchAck()
        self.shutdown_timeout = shutdown_timeout
        self.handlers = Handlers("consumer")
        self.acks = AckBuffer(self.batch_ack)
        self.unsettled = Unsettled()  # what CLIENT-mode handlers got and did not settle yet
        self.riders = AckRiders(ITEMS_MAX)  # acks waiting for the next receive
        self._ack_and_receive = True  # False once the broker is found not to have the route
        self._undecodable_topics: set[str] = set()
        self._connect(transport, verify)

    @property
    def low_water(self) -> int:
        """Receive again once at most this many messages are held: the prefetch (``batch_size``)
        is refilled in large receives, never one message at a time."""
        return (self.batch_size - 1) // 2

    def subscribe(
        self,
        topic: str,
        /,
        tags: str | Sequence[str] = "*",
        *,
        ack_mode: AckMode | None = None,
        session_factory: Any = None,
        idempotent: Any = None,
        dedup: DedupKey | Callable[[Message], str] = DedupKey.FIRST_KEY,
        batch_max: int | None = None,
    ) -> Callable[[Callable[P, R]], Registered[P, R]]:
        """Register ``fn(message) -> ConsumeResult`` for ``topic`` and a tag expression (``"*"``,
        ``"TagA || TagB"`` or a list of tags).

        With ``session_factory`` (``ack_mode=TRANSACTED``) or ``idempotent=SessionLocal`` the
        handler is ``fn(session, message)`` and runs in one transaction of that factory, acked
        after the commit; ``idempotent`` also records (group, dedup key) in the inbox table in that
        transaction, so a redelivered message has no second effect.

        With ``batch_max=N`` the handler is ``fn(messages)`` (``fn(session, messages)``) and gets
        up to N messages of one queue at a time, in the queue's order; it answers for the list:
        CONSUME_SUCCESS or None acks them all, RECONSUME_LATER or an exception retries them all,
        and the index of the first failed message acks those before it and retries the rest."""
        if callable(topic):
            raise ConfigurationError("subscribe needs a topic: @consumer.subscribe('transfers')")
        if batch_max is not None and (
            isinstance(batch_max, bool) or not isinstance(batch_max, int) or batch_max < 1
        ):
            raise ConfigurationError(
                f"batch_max must be a whole number of messages, 1 or more (got {batch_max!r})",
                topic=topic,
            )
        factory = idempotent if idempotent is not None else session_factory
        mode = ack_mode or (AckMode.TRANSACTED if factory is not None else self.ack_mode)
        if mode is AckMode.TRANSACTED and factory is None:
            raise ConfigurationError("TRANSACTED needs session_factory= (or idempotent=)")
        options = SubscriptionOptions(
            tag_expression(tags), mode, factory, idempotent is not None, dedup, batch_max
        )

        def register(fn: Callable[P, R]) -> Registered[P, R]:
            handler = Registered(fn, check_name(topic, "topic"), "consumer", options)
            self.handlers.add(handler)
            return handler

        return register

    def handler_for(self, message: Message) -> Registered[..., Any] | None:
        return self.handlers.find(message.topic)

    def batch_max_of(self, message: Message) -> int | None:
        """The most messages its handler takes at once; None: one message at a time."""
        handler = self.handler_for(message)
        return None if handler is None else handler.options.batch_max

    # -- units of work ---------------------------------------------------------------------------

    def lanes(self, messages: Sequence[Message]) -> list[list[Message]]:
        """What one receive brought, as lanes a worker takes whole: each queue's messages in
        order (orderly); else each message alone, or (a batch handler's) up to its
        ``batch_max`` messages of one queue."""
        if self.orderly:
            return by_queue(messages)
        lanes: list[list[Message]] = []
        for queue in by_queue(messages):
            size = self.batch_max_of(queue[0])
            lanes.extend(chunks(queue, size) if size else [[m] for m in queue])
        return lanes

    def units(self, lane: list[Message]) -> list[list[Message]]:
        """A lane as the handler calls it takes, one after the other: a batch handler's
        messages in chunks of up to ``batch_max``, any other message alone."""
        size = self.batch_max_of(lane[0])
        return chunks(lane, size) if size else [[m] for m in lane]

    def unit_flow(self, unit: list[Message]) -> Flow[None]:
        """One call of a handler: :meth:`consume_batch_flow` for a batch handler's messages,
        else :meth:`consume_flow`."""
        if self.batch_max_of(unit[0]) is None and len(unit) == 1:
            return self.consume_flow(unit[0])
        return self.consume_batch_flow(unit)

    def ack_handles(self, message: Message) -> list[str]:
        """What ``consumer.ack(message)`` acks: in CLIENT mode, every unsettled message of its
        queue this consumer handed to a handler before it, and it; else the message alone."""
        own = handle_of(message)
        handler = self.handler_for(message)
        if handler is not None and handler.options.ack_mode is AckMode.CLIENT:
            return self.unsettled.through(message)
        return [own]

    def _handing(self, mode: AckMode, messages: Sequence[Message]) -> None:
        if mode is AckMode.CLIENT:
            self.unsettled.handed(messages, self.invisible_seconds)

    def subscriptions(self) -> list[tuple[str, str]]:
        return [(h.topic, h.options.expression) for h in self.handlers]

    def require_subscriptions(self) -> None:
        if not self.subscriptions():
            raise ConfigurationError(f"consumer {self.group} has no subscription")

    @property
    def batching(self) -> bool:
        """Some subscription acks in batches (the face then flushes them in the background)."""
        return any(h.options.ack_mode is AckMode.BATCH for h in self.handlers)

    @property
    def riding(self) -> bool:
        """Whether the acks of what was handled ride on the next receive: when calls share
        requests (``batch_linger_ms`` > 0) and the broker has ``.../ack-and-receive``."""
        return self.linger.on and self._ack_and_receive

    def riders_failed(self, error: HalfMQError) -> None:
        """An ack-and-receive failed (its acks are then sent alone): a broker that predates the
        route answers 404 or 405 of its router, and acks no longer ride."""
        no_route = ("NOT_FOUND", "METHOD_NOT_ALLOWED")
        if isinstance(error, BrokerError) and error.status in (404, 405) and error.code in no_route:
            self._ack_and_receive = False

    # -- the calls of one consumer ---------------------------------------------------------------

    def receive_call(self, free: int) -> protocol.Call[list[Message]]:
        return protocol.receive(
            self.group,
            self.client_id,
            free,
            self.invisible_seconds,
            self.wait_seconds,
            self._per_queue(free),
        )

    def ack_and_receive_call(
        self, handles: list[str], free: int
    ) -> protocol.Call[tuple[protocol.AckResult, list[Message]]]:
        """The receive of :meth:`receive_call`, carrying the acks of ``handles``."""
        return protocol.ack_and_receive(
            self.group,
            handles,
            self.client_id,
            free,
            self.invisible_seconds,
            self.wait_seconds,
            self._per_queue(free),
        )

    def _per_queue(self, free: int) -> int:
        """An orderly group's batch handlers get their batches from one receive: the broker
        hands out up to the largest ``batch_max`` consecutive messages of a queue (within the
        prefetch room ``free``)."""
        per_queue = 1
        if self.orderly:
            per_queue = max((h.options.batch_max or 1 for h in self.handlers), default=1)
        return min(per_queue, free)

    def nack_call(self, message: Message, delay_level: int | None = None) -> protocol.Call[str]:
        return protocol.nack(self.group, handle_of(message), delay_level)

    def release_call(self, message: Message) -> protocol.Call[str]:
        return protocol.change_invisible(self.group, handle_of(message), RELEASE_SECONDS)

    # -- the flows -------------------------------------------------------------------------------

    def register_flow(self) -> Flow[None]:
        """Create the group and its subscriptions (the same config again is fine)."""
        self.require_subscriptions()
        yield from call(
            protocol.create_group(
                self.group,
                message_model=self.message_model,
                consume_from=self.consume_from,
                orderly=self.orderly,
                max_reconsume_times=self.max_reconsume_times,
            )
        )
        for topic, expression in self.subscriptions():
            yield from call(protocol.subscribe(self.group, topic, expression))

    def consume_flow(self, message: Message) -> Flow[None]:
        """One received message: its handler, then its ack or nack (no handler: given back), in
        the span the message's context is the parent of; the handler's duration is the message's
        SUB record."""
        handler = self.handler_for(message)
        if handler is None:
            yield from self.give_back_flow(message)
            return
        self._handing(handler.options.ack_mode, [message])
        with otel.processing(message, self.group, self.client_id) as span:
            timing = Timing.now()
            ok, error = yield from self._handler_flow(handler, message)
            self.client_trace.consumed(message, timing, ok)
            if isinstance(error, BodyDecodeError):
                self._undecodable(message, error)
            elif error is not None:
                log.warning("consuming %s failed: %r", message.msg_id, error)
            if not ok:
                span.failed(error, None if error else "RECONSUME_LATER")
            yield from self._settle_flow(handler.options.ack_mode, message, ok)

    def _undecodable(self, message: Message, error: BodyDecodeError) -> None:
        """A body the handler cannot read fails like any handler error (retried, then the DLQ);
        it is said once per topic at WARNING -- one producer sending another format would
        otherwise fill the log -- and at DEBUG after that."""
        level = logging.DEBUG if message.topic in self._undecodable_topics else logging.WARNING
        self._undecodable_topics.add(message.topic)
        log.log(
            level,
            "consumer group %s cannot read message %s of topic %s: its handler expected %s, "
            "but %s. It is retried and then dead-lettered like any failure; further such bodies "
            "in this topic are logged at DEBUG",
            self.group,
            message.msg_id,
            message.topic,
            error.expected,
            error.message,
        )

    def _handler_flow(
        self, handler: Registered[..., Any], message: Message
    ) -> Flow[tuple[bool, BaseException | None]]:
        options = handler.options
        try:
            if options.session_factory is None:
                return succeeded((yield Invoke(handler.fn, (message,)))), None
            key = options.dedup_key(message) if options.idempotent else None
            step = inbox.consume_step(options.session_factory, handler.fn, message, self.group, key)
            consumed: inbox.Consumed = yield step
            return consumed.ok, consumed.error
        except Exception as exc:
            return False, exc

    def _settle_flow(self, mode: AckMode, message: Message, ok: bool) -> Flow[None]:
        try:
            if not ok:
                self.unsettled.settled([message])
                yield from call(self.nack_call(message))
            elif mode is AckMode.BATCH:
                yield from self.acks_flow(self.acks.add(handle_of(message)))
            elif mode not in (AckMode.MANUAL, AckMode.CLIENT):
                yield from self.settled_flow([handle_of(message)])
        except HalfMQError as exc:  # the message comes again after its invisibility
            log.info("settling %s failed: %s", message.msg_id, exc)

    def consume_batch_flow(self, messages: list[Message]) -> Flow[None]:
        """A batch handler's call for ``messages`` (one queue's, in order), then their acks (one
        request), nacks and releases as its verdict says (:class:`~framework.acks.BatchVerdict`),
        in one span; each message's SUB record is the call's duration."""
        handler = self.handler_for(messages[0])
        if handler is None:
            for message in messages:
                yield from self.give_back_flow(message)
            return
        options = handler.options
        self._handing(options.ack_mode, messages)
        with otel.processing_batch(messages, self.group, self.client_id) as span:
            timing = Timing.now()
            acked, retried, error = yield from self._batch_handler_flow(handler, messages)
            for message in messages:
                self.client_trace.consumed(message, timing, message in acked)
            if isinstance(error, BodyDecodeError):
                self._undecodable(messages[0], error)
            elif error is not None:
                log.warning("consuming a batch of %d failed: %r", len(messages), error)
            if retried[0] or retried[1]:
                span.failed(error, None if error else "RECONSUME_LATER")
            yield from self._settle_batch_flow(options.ack_mode, acked, *retried)

    def _batch_handler_flow(
        self, handler: Registered[..., Any], messages: list[Message]
    ) -> Flow[tuple[list[Message], tuple[list[Message], list[Message]], BaseException | None]]:
        """(acked, (nacked, released), the error): the handler's verdict on ``messages``; the
        inbox's duplicates are acked without it."""
        options = handler.options
        duplicates: tuple[Message, ...] = ()
        fresh, error = messages, None
        try:
            if options.session_factory is None:
                verdict = batch_verdict((yield Invoke(handler.fn, (list(messages),))), len(fresh))
            else:
                keys = [options.dedup_key(m) for m in messages] if options.idempotent else None
                step = inbox.consume_batch_step(
                    options.session_factory, handler.fn, messages, self.group, keys
                )
                consumed: inbox.BatchConsumed = yield step
                duplicates, fresh = consumed.duplicates, list(consumed.fresh)
                verdict, error = consumed.verdict, consumed.error
        except Exception as exc:
            verdict, error = FAILED, exc
        if not fresh:
            verdict = BatchVerdict(0)
        acked, nacked, released = verdict.split(fresh)
        return [*duplicates, *acked], (nacked, released), error

    def _settle_batch_flow(
        self, mode: AckMode, acked: list[Message], nacked: list[Message], released: list[Message]
    ) -> Flow[None]:
        """Ack ``acked`` as ``mode`` says (one request), nack ``nacked``, release ``released``."""
        self.unsettled.settled([*nacked, *released])
        try:
            if mode is AckMode.BATCH:
                for message in acked:
                    yield from self.acks_flow(self.acks.add(handle_of(message)))
            elif mode not in (AckMode.MANUAL, AckMode.CLIENT):
                yield from self.settled_flow([handle_of(m) for m in acked])
        except HalfMQError as exc:
            log.info("acking a batch failed: %s", exc)
        for message in nacked:
            try:
                yield from call(self.nack_call(message))
            except HalfMQError as exc:  # it comes again after its invisibility
                log.info("nack of %s failed: %s", message.msg_id, exc)
        for message in released:
            yield from self.give_back_flow(message)

    def settled_flow(self, handles: list[str]) -> Flow[None]:
        """Ack what a handler consumed (``AUTO``, ``TRANSACTED``): riding on the receive about to
        go when the receiver waits for it (:class:`~framework.acks.AckRiders`), else now."""
        if handles and self.riders.offer(handles):
            return
        yield from self.acks_flow(handles)

    def acks_flow(self, handles: list[str]) -> Flow[None]:
        """Ack ``handles`` (none: nothing) in one request (per 1000, the route's most); a failed
        ack is logged: those messages come again."""
        for n in range(0, len(handles), ITEMS_MAX):
            part = handles[n : n + ITEMS_MAX]
            try:
                result = yield from call(protocol.ack(self.group, part))
            except HalfMQError as exc:
                log.warning("ack of %d messages failed (they come again): %s", len(part), exc)
                continue
            if result.stale:
                log.info("%d stale acks: those messages come again", len(result.stale))

    def give_back_flow(self, message: Message) -> Flow[None]:
        """Release ``message`` at once (no reconsume counted) so another member gets it."""
        self.unsettled.settled([message])
        try:
            yield from call(self.release_call(message))
        except HalfMQError as exc:
            log.info("release of %s failed (it comes back later): %s", message.msg_id, exc)
