"""How a consumed message is settled, as values without I/O: the ack modes, the batch-ack policy
and buffer, the inbox's dedup keys, a subscription's options, and the rule that turns a handler's
outcome into an ack or a nack."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from framework.message import ConsumeResult, Message

log = logging.getLogger("halfmq.consumer")


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
    """Receipt handles waiting for one batched ack (no I/O: the consumer sends what it returns).
    Thread-safe: the workers add, the flusher takes what is due."""

    def __init__(self, policy: BatchAck, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.clock = clock
        self.handles: list[str] = []
        self.since = 0.0
        self._lock = threading.Lock()

    def add(self, handle: str) -> list[str]:
        """Add a handle; the handles to ack now when the batch is full, else ``[]``."""
        with self._lock:
            if not self.handles:
                self.since = self.clock()
            self.handles.append(handle)
            return self._take() if len(self.handles) >= self.policy.max_count else []

    def due(self) -> list[str]:
        """The handles to ack now because the oldest has waited ``max_delay``."""
        with self._lock:
            late = bool(self.handles) and self.clock() - self.since >= self.policy.max_delay
            return self._take() if late else []

    def take(self) -> list[str]:
        with self._lock:
            return self._take()

    def _take(self) -> list[str]:
        handles, self.handles = self.handles, []
        return handles
