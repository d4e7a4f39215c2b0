"""The transaction producer without I/O: its settings, the decorators that register its handlers,
and its decision flows (:mod:`framework.flow`), written once for both faces:

* :meth:`ProducerBase.send_flow` and :meth:`ProducerBase.send_batch_flow`: a plain send;
* :meth:`ProducerBase.oneway_flow`: a one-way send, in the background, that never raises
  (:mod:`framework.oneway`);
* :meth:`ProducerBase.send_in_transaction_flow`: store the half, run the local transaction, then
  commit, roll back or (UNKNOW) leave it to the check-back;
* :meth:`ProducerBase.check_flow`: the answer to a check -- the checker's, or the
  local-transaction log's in automatic mode (:mod:`framework.txlog`);
* :meth:`ProducerBase.pulled_check_flow`: a pulled check answered with a commit or a rollback.

Each send runs in an OpenTelemetry PRODUCER span whose context the message carries, and each
check in a CONSUMER span parented on the half's (:mod:`framework.otel`); each sent message's cost
goes to the client-side trace (:mod:`framework.client_trace`).

:class:`~framework.producer.TransactionProducer` runs them in threads,
:class:`~framework.aio_producer.AsyncTransactionProducer` on an event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, overload

from framework import oneway, otel, protocol, txlog
from framework.batching import Linger
from framework.client_trace import Timing
from framework.config import CheckMode, Retry, Timeout
from framework.errors import ConfigurationError, HalfMQError
from framework.flow import Flow, Invoke, call
from framework.member import GroupMember
from framework.message import (
    LocalTransactionState,
    Message,
    SendResult,
    SendStatus,
    TransactionSendResult,
)
from framework.registry import ANY_TOPIC, Handlers, P, R, Registered
from framework.signing import CredentialsLike
from framework.transport import TransportT, Verify

log = logging.getLogger("halfmq.producer")

State = LocalTransactionState
Outcome = tuple[State, BaseException | None]

PLAIN, TRANSACTIONAL = "plain", "transactional"


def to_state(value: object, message: Message) -> LocalTransactionState:
    """``None`` (or anything that is not a state) is UNKNOW: the half waits for a check."""
    if isinstance(value, LocalTransactionState):
        return value
    if value is not None:
        log.warning(
            "handler for %s returned %r, not a LocalTransactionState: treated as UNKNOW",
            message.topic,
            value,
        )
    return LocalTransactionState.UNKNOW


class ProducerBase(GroupMember[TransportT]):
    """One producer group member: what both faces share, and the flows they drive."""

    oneway_sender: oneway.ThreadOneWay | oneway.TaskOneWay  # each face's background

    def __init__(
        self,
        group: str,
        brokers: Sequence[str],
        *,
        client_id: str | None = None,
        check: CheckMode | None = None,
        timeout: Timeout | None = None,
        retry: Retry | None = None,
        heartbeat_interval: float = 30.0,
        check_immunity_seconds: float | None = None,
        transport: TransportT | None = None,
        credentials: CredentialsLike = None,
        verify: Verify = True,
        client_trace: bool | None = None,
        batch_linger_ms: float = 2.0,
        max_batch: int = 128,
        max_batch_bytes: int = 1024 * 1024,
        end_oneway: bool = False,
    ) -> None:
        """``batch_linger_ms``: with many transactions (or sends) in flight at once -- threads
        or tasks --, how long a half, a decision or a send waits for others to share its request
        (0: one request per call, as before); ``max_batch`` and ``max_batch_bytes``: a shared
        request is sent once this full (:mod:`framework.batching`).  ``end_oneway``: a
        transaction's commit or rollback is sent one way (:mod:`framework.oneway`):
        ``send_message_in_transaction`` returns once the local transaction has answered, its
        ``resolution`` None; an end lost on the way is resolved by the check-back."""
        super().__init__(
            group,
            "producer group",
            brokers,
            client_id,
            timeout,
            retry,
            credentials,
            client_trace,
            Linger(batch_linger_ms, max_batch, max_batch_bytes),
        )
        self.check_mode = check or CheckMode.pull()
        self.heartbeat_interval = heartbeat_interval
        self.check_immunity_seconds = check_immunity_seconds
        self.callback_url = self.check_mode.callback_url
        self.executors = Handlers("local transaction")
        self.checkers = Handlers("check")
        self.end_oneway = end_oneway
        self.oneway = oneway.OneWayCounts()  # what became of the one-way sends
        self.oneway_ends = oneway.OneWayCounts()  # and of the ends sent one way
        self._connect(transport, verify)

    # -- decorators ------------------------------------------------------------------------------

    @overload
    def execute_local_transaction(self, topic: Callable[P, R], /) -> Registered[P, R]: ...
    @overload
    def execute_local_transaction(
        self, topic: str = ANY_TOPIC, /
    ) -> Callable[[Callable[P, R]], Registered[P, R]]: ...
    def execute_local_transaction(self, topic: Any = ANY_TOPIC, /) -> Any:
        """Register ``fn(message, arg) -> LocalTransactionState`` as the local transaction of
        ``topic`` (all topics when used bare).  Runs only after the half is stored; an exception
        or ``None`` means UNKNOW."""
        return _decorate(self.executors, topic, PLAIN)

    @overload
    def check_local_transaction(self, topic: Callable[P, R], /) -> Registered[P, R]: ...
    @overload
    def check_local_transaction(
        self, topic: str = ANY_TOPIC, /
    ) -> Callable[[Callable[P, R]], Registered[P, R]]: ...
    def check_local_transaction(self, topic: Any = ANY_TOPIC, /) -> Any:
        """Register ``fn(message) -> LocalTransactionState`` to answer the broker's checks."""
        return _decorate(self.checkers, topic, PLAIN)

    def transactional(
        self, topic: str = ANY_TOPIC, *, session_factory: Callable[[], Any]
    ) -> Callable[[Callable[P, R]], Registered[P, R]]:
        """Automatic check mode: ``fn(session, message, arg)`` runs inside a transaction of
        ``session_factory()`` that also writes the framework's log row; checks are answered from
        the log, with no check code.  Return ``ROLLBACK_MESSAGE`` or raise to roll back; the
        transaction commits otherwise."""

        def register(fn: Callable[P, R]) -> Registered[P, R]:
            handler = Registered(fn, topic, TRANSACTIONAL, session_factory)
            self.executors.add(handler)
            self.checkers.add(handler)
            return handler

        return register

    # -- shared rules ----------------------------------------------------------------------------

    def executor_for(self, message: Message) -> Registered[..., Any]:
        handler = self.executors.find(message.topic)
        if handler is None:
            raise ConfigurationError(
                f"no local transaction is registered for topic {message.topic!r}: decorate one "
                "with @producer.execute_local_transaction or @producer.transactional",
                topic=message.topic,
            )
        return handler

    def topics(self) -> list[str]:
        return sorted(set(self.executors.topics()) | set(self.checkers.topics()))

    def require_callback(self) -> None:
        if self.check_mode.kind == "push" and not self.callback_url:
            raise ConfigurationError(
                "push check mode needs a callback_url (CheckMode.push(url)) or the built-in "
                "server (producer.serve_checks()) before start()"
            )

    # -- the calls of one producer ---------------------------------------------------------------

    def end_call(
        self, transaction_id: str, state: LocalTransactionState, *, from_check: bool
    ) -> protocol.Call[str]:
        commit = state is State.COMMIT_MESSAGE
        return protocol.end(
            transaction_id, self.group, commit, from_check=from_check, client_id=self.client_id
        )

    def heartbeat_call(self) -> protocol.Call[None]:
        return protocol.heartbeat(self.group, self.client_id, self.callback_url, self.topics())

    def pull_call(self) -> protocol.Call[list[Message]]:
        mode = self.check_mode
        return protocol.pull_checks(
            self.group, self.client_id, mode.pull_max, mode.pull_wait_seconds
        )

    # -- the flows -------------------------------------------------------------------------------

    def send_flow(self, message: Message) -> Flow[SendResult]:
        """A plain, ordered or delayed send, in its span."""
        with otel.producing(message.topic, self.client_id, self.group, msg_id=message.msg_id):
            message = otel.stamped(message)
            return (yield from self._sent_flow([message], protocol.send(message)))

    def send_batch_flow(self, messages: Sequence[Message]) -> Flow[list[SendResult]]:
        """Messages of one topic in one request, in one span (each carries its context)."""
        topic = batch_topic(messages)
        with otel.producing(topic, self.client_id, self.group, count=len(messages)):
            stamped = [otel.stamped(m) for m in messages]
            return (yield from self._sent_flow(stamped, protocol.send_batch(topic, stamped)))

    def oneway_job(self, message: Message) -> oneway.Job:
        """What ``send_oneway`` hands to the background: refused inside a local transaction,
        stamped with the caller's trace context (the background has none)."""
        oneway.refuse_in_local_transaction(message)
        stamped = otel.stamped(message)
        return oneway.Job(self.oneway_flow(stamped), self.oneway, f"send of {message.msg_id}")

    def oneway_flow(self, message: Message) -> Flow[None]:
        """A one-way send as the background runs it: a plain send whose end is counted (and is
        its PUB record), never raised."""
        timing = Timing.now()
        try:
            yield from call(protocol.send(message))
        except HalfMQError as exc:
            log.debug("one-way send of %s to %s failed: %s", message.msg_id, message.topic, exc)
            self.client_trace.published([message], timing, exc)
            self.oneway.ended(exc)
            return
        self.client_trace.published([message], timing)
        self.oneway.ended(None)

    def _sent_flow(self, messages: Sequence[Message], request: protocol.Call[R]) -> Flow[R]:
        """``request`` sends ``messages``: its round trip is each one's PUB record."""
        timing = Timing.now()
        try:
            result = yield from call(request)
        except Exception as exc:
            self.client_trace.published(messages, timing, exc)
            raise
        self.client_trace.published(messages, timing)
        return result

    def send_in_transaction_flow(self, message: Message, arg: Any) -> Flow[TransactionSendResult]:
        """Half first; the local transaction only once the half is stored; then commit, roll back
        or (UNKNOW) leave it to the check-back.  Raises only when the half could not be stored.
        One span from the half to the end: the half carries its context."""
        executor = self.executor_for(message)
        with otel.producing(
            message.topic, self.client_id, self.group, msg_id=message.msg_id, transactional=True
        ) as span:
            message = otel.stamped(message)
            prepare = protocol.prepare(
                message, self.group, self.check_immunity_seconds, self.client_id
            )
            receipt = yield from self._sent_flow([message], prepare)
            span.set("messaging.halfmq.transaction.id", receipt.transaction_id)
            message = message.evolve(transaction_id=receipt.transaction_id)
            with otel.local_transaction(message) as local:
                state, error = yield from self._local_flow(executor, message, arg)
                local.set("messaging.halfmq.transaction.state", state.value)
                if error is not None:
                    local.failed(error)
            txid, resolution = receipt.transaction_id, None
            if state is State.UNKNOW:
                pass  # nothing to send: the check-back resolves it
            elif self.end_oneway:
                yield self._end_handed_off(txid, message, state)
            else:
                resolution, error = yield from self._end_flow(txid, message, state, error)
            span.set("messaging.halfmq.transaction.resolution", resolution or "UNKNOWN")
        return TransactionSendResult(
            SendStatus.SEND_OK,
            receipt.transaction_id,
            receipt.msg_id,
            state,
            message,
            resolution,
            error,
        )

    def _local_flow(
        self, executor: Registered[..., Any], message: Message, arg: Any
    ) -> Flow[Outcome]:
        """The local transaction's state and exception: an exception (or no state) is UNKNOW; in
        automatic mode, the log decides (:func:`framework.txlog.run_local`)."""
        if executor.role == TRANSACTIONAL:
            step = txlog.local_step(executor.options, executor.fn, message, arg, self.group)
            outcome: Outcome = yield oneway.in_local_transaction(step, message)
            return outcome
        try:
            value = yield oneway.in_local_transaction(Invoke(executor.fn, (message, arg)), message)
        except Exception as exc:
            log.warning("local transaction of %s raised: UNKNOW", message.transaction_id)
            return State.UNKNOW, exc
        return to_state(value, message), None

    def _end_flow(
        self, transaction_id: str, message: Message, state: State, error: BaseException | None
    ) -> Flow[tuple[str | None, BaseException | None]]:
        """Commit or roll back (``state`` is not UNKNOW); an end that fails is reported, not
        raised: the check-back resolves it."""
        with otel.ending(message.topic, transaction_id, state is State.COMMIT_MESSAGE) as span:
            try:
                end = self.end_call(transaction_id, state, from_check=False)
                resolution = yield from call(end)
            except HalfMQError as exc:
                log.warning("end of %s failed: %s", transaction_id, exc)
                span.failed(exc)
                return None, error or exc
        return resolution, error

    def _end_handed_off(self, transaction_id: str, message: Message, state: State) -> Invoke:
        """The step that hands the commit or rollback to the background (``end_oneway``)."""
        ended = self._ended_oneway_flow(transaction_id, message, state)
        job = oneway.Job(ended, self.oneway_ends, f"end of {transaction_id}")
        return self.oneway_sender.handoff(job)

    def _ended_oneway_flow(self, transaction_id: str, message: Message, state: State) -> Flow[None]:
        """An end as the background runs it: counted, never raised."""
        _, error = yield from self._end_flow(transaction_id, message, state, None)
        self.oneway_ends.ended(error)

    def check_flow(self, message: Message) -> Flow[LocalTransactionState]:
        """What this instance answers to a check (never raises: a failure is UNKNOW), in the
        check's span."""
        with otel.checking(message, self.group, self.client_id) as span:
            return (yield from self._decide_flow(message, span))

    def _decide_flow(self, message: Message, span: otel.Span) -> Flow[LocalTransactionState]:
        handler = self.checkers.find(message.topic)
        if handler is None:
            log.warning("no check handler for topic %s: UNKNOW", message.topic)
            span.failed(None, "no check handler for the topic")
            return State.UNKNOW
        try:
            if handler.role == TRANSACTIONAL:
                state: State = yield txlog.check_step(handler.options, message, self.group)
            else:
                state = to_state((yield Invoke(handler.fn, (message,))), message)
        except Exception as exc:
            log.exception("check of %s failed: UNKNOW", message.transaction_id)
            span.failed(exc)
            return State.UNKNOW
        span.set("messaging.halfmq.transaction.state", state.value)
        return state

    def pulled_check_flow(self, check: Message) -> Flow[None]:
        """A pulled check: answered with a commit or rollback ``from_check``; UNKNOW answers
        nothing (the broker asks again after its check interval)."""
        with otel.checking(check, self.group, self.client_id) as span:
            state = yield from self._decide_flow(check, span)
            if state is State.UNKNOW or check.transaction_id is None:
                return
            txid, commit = check.transaction_id, state is State.COMMIT_MESSAGE
            with otel.ending(check.topic, txid, commit) as ending:
                try:
                    yield from call(self.end_call(txid, state, from_check=True))
                except HalfMQError as exc:
                    log.info("answer to the check of %s not applied: %s", txid, exc)
                    ending.failed(exc)


def batch_topic(messages: Sequence[Message]) -> str:
    if not messages:
        raise ConfigurationError("a batch needs at least one message")
    return messages[0].topic


def _decorate(handlers: Handlers, topic: Any, role: str) -> Any:
    if callable(topic):
        handler = Registered(topic, ANY_TOPIC, role)
        handlers.add(handler)
        return handler

    def register(fn: Callable[P, R]) -> Registered[P, R]:
        registered = Registered(fn, topic, role)
        handlers.add(registered)
        return registered

    return register
