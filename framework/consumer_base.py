"""What the sync and async push consumers share: configuration values, subscriptions registered
by decorators, the rules that turn a handler's outcome into an ack or a nack, and the batch-ack
buffer -- all without I/O."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, ParamSpec, TypeVar, overload

from framework.config import Retry, Timeout
from framework.errors import ConfigurationError
from framework.message import ConsumeResult, Message
from framework.producer_base import check_name, default_client_id
from framework.registry import Handlers, Registered
from framework.signing import CredentialsLike, resolve_credentials

log = logging.getLogger("halfmq.consumer")

P = ParamSpec("P")
R = TypeVar("R")


class AckMode(Enum):
    """When a consumed message is acknowledged (ActiveMQ's acknowledgement modes).

    ``AUTO``: after the handler returns (CONSUME_SUCCESS or None).  ``MANUAL``: the handler calls
    ``consumer.ack(message)`` itself (an unacked message comes again after its invisibility).
    ``BATCH``: successes are gathered and acked together, every ``BatchAck.max_count`` messages or
    ``max_delay`` seconds (ActiveMQ's optimizeAcknowledge / DUPS_OK: a crash redelivers the batch).
    ``TRANSACTED``: the handler gets a SQLAlchemy session; the ack is sent after its transaction
    commits (a failed commit nacks).
    """

    AUTO = "AUTO"
    MANUAL = "MANUAL"
    BATCH = "BATCH"
    TRANSACTED = "TRANSACTED"


@dataclass(frozen=True, slots=True)
class BatchAck:
    max_count: int = 32
    max_delay: float = 0.1


class DedupKey(Enum):
    """What identifies a message for the inbox: its first key (the business id; its msg_id when
    it has no key) or its msg_id."""

    FIRST_KEY = "FIRST_KEY"
    MSG_ID = "MSG_ID"


@dataclass(frozen=True, slots=True)
class SubscriptionOptions:
    expression: str
    ack_mode: AckMode
    session_factory: Any = None
    idempotent: bool = False
    dedup: DedupKey | Callable[[Message], str] = DedupKey.FIRST_KEY

    def dedup_key(self, message: Message) -> str:
        if callable(self.dedup):
            return self.dedup(message)
        if self.dedup is DedupKey.FIRST_KEY and message.keys:
            return message.keys[0]
        return message.msg_id


def tag_expression(tags: str | Sequence[str]) -> str:
    return tags if isinstance(tags, str) else " || ".join(tags)


def succeeded(value: object) -> bool:
    """CONSUME_SUCCESS or None acks; RECONSUME_LATER nacks."""
    if value is ConsumeResult.RECONSUME_LATER:
        return False
    if value is not None and value is not ConsumeResult.CONSUME_SUCCESS:
        log.warning("consumer handler returned %r: treated as CONSUME_SUCCESS", value)
    return True


class AckBuffer:
    """Receipt handles waiting for one batched ack (no I/O: the consumer sends what it returns)."""

    def __init__(self, policy: BatchAck, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.clock = clock
        self.handles: list[str] = []
        self.since = 0.0

    def add(self, handle: str) -> list[str]:
        """Add a handle; the handles to ack now when the batch is full, else ``[]``."""
        if not self.handles:
            self.since = self.clock()
        self.handles.append(handle)
        return self.take() if len(self.handles) >= self.policy.max_count else []

    def due(self) -> list[str]:
        """The handles to ack now because the oldest has waited ``max_delay``."""
        if self.handles and self.clock() - self.since >= self.policy.max_delay:
            return self.take()
        return []

    def take(self) -> list[str]:
        handles, self.handles = self.handles, []
        return handles


class ConsumerBase:
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
    ) -> None:
        self.group = check_name(group, "consumer group")
        # None: HALFMQ_ACCESS_KEY / HALFMQ_SECRET_KEY, read here (neither set: unsigned, no ACL)
        self.credentials = resolve_credentials(credentials)
        self.brokers = tuple(brokers)
        self.client_id = client_id or default_client_id()
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
        self.timeout = timeout or Timeout()
        self.retry = retry or Retry()
        self.handlers = Handlers("consumer")
        self.started = False

    @property
    def low_water(self) -> int:
        """Receive again once at most this many messages are held: the prefetch (``batch_size``)
        is refilled in large receives, never one message at a time."""
        return (self.batch_size - 1) // 2

    @overload
    def subscribe(self, topic: Callable[P, R], /) -> Registered[P, R]: ...
    @overload
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
    ) -> Callable[[Callable[P, R]], Registered[P, R]]: ...
    def subscribe(
        self,
        topic: Any,
        /,
        tags: str | Sequence[str] = "*",
        *,
        ack_mode: AckMode | None = None,
        session_factory: Any = None,
        idempotent: Any = None,
        dedup: DedupKey | Callable[[Message], str] = DedupKey.FIRST_KEY,
    ) -> Any:
        """Register ``fn(message) -> ConsumeResult`` for ``topic`` and a tag expression (``"*"``,
        ``"TagA || TagB"`` or a list of tags).

        With ``session_factory`` (``ack_mode=TRANSACTED``) or ``idempotent=SessionLocal`` the
        handler is ``fn(session, message)`` and runs in one transaction of that factory, acked
        after the commit; ``idempotent`` also records (group, dedup key) in the inbox table in that
        transaction, so a redelivered message has no second effect."""
        if callable(topic):
            raise ConfigurationError("subscribe needs a topic: @consumer.subscribe('transfers')")
        factory = idempotent if idempotent is not None else session_factory
        mode = ack_mode or (AckMode.TRANSACTED if factory is not None else self.ack_mode)
        if mode is AckMode.TRANSACTED and factory is None:
            raise ConfigurationError("TRANSACTED needs session_factory= (or idempotent=)")
        options = SubscriptionOptions(
            tag_expression(tags), mode, factory, idempotent is not None, dedup
        )

        def register(fn: Callable[P, R]) -> Registered[P, R]:
            handler = Registered(fn, check_name(topic, "topic"), "consumer", options)
            self.handlers.add(handler)
            return handler

        return register

    def handler_for(self, message: Message) -> Registered[..., Any] | None:
        return self.handlers.find(message.topic)

    def subscriptions(self) -> list[tuple[str, str]]:
        return [(h.topic, h.options.expression) for h in self.handlers]

    def require_subscriptions(self) -> None:
        if not self.subscriptions():
            raise ConfigurationError(f"consumer {self.group} has no subscription")
