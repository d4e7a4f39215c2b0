"""How a consumed message is settled, as values without I/O: the ack modes, the batch-ack policy
and buffer, the inbox's dedup keys, a subscription's options, the rules that turn a handler's
outcome (one message's, or a batch's) into acks and nacks, and the ledger of what a ``CLIENT``
consumer has not settled yet."""

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
    commits (a failed commit nacks).  ``CLIENT``: as ``MANUAL``, but ``consumer.ack(message)`` is
    cumulative (ActiveMQ's CLIENT_ACKNOWLEDGE): it settles that message and every earlier one of
    the same queue this consumer handed to a handler and has not settled, in one request.
    """

    AUTO = "AUTO"
    MANUAL = "MANUAL"
    CLIENT = "CLIENT"
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
    batch_max: int | None = None  # a batch handler: fn(messages) with up to this many

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


def queue_of(message: Message) -> tuple[str, int | None, bool]:
    """The queue a delivered message came from: its topic and queue, and whether it is a retry
    copy (a copy is shown under its first topic, with the retry topic's queue id)."""
    return message.topic, message.queue_id, "RETRY_TOPIC" in message.properties


@dataclass(frozen=True, slots=True)
class BatchVerdict:
    """A batch handler's answer: its first ``done`` messages succeeded; the rest did not -- all
    of them failed (``whole``: RECONSUME_LATER, an exception, a failed commit), or only the first
    of them (the handler returned its index: those after it were not consumed)."""

    done: int
    whole: bool = False

    def split(
        self, messages: Sequence[Message]
    ) -> tuple[list[Message], list[Message], list[Message]]:
        """``messages`` as (acked, nacked, released): the failed are nacked (a retry counted, the
        retry schedule); the ones after a returned index were not consumed and are released (they
        come again at once, no retry counted)."""
        done, rest = list(messages[: self.done]), list(messages[self.done :])
        if self.whole or not rest:
            return done, rest, []
        return done, rest[:1], rest[1:]


FAILED = BatchVerdict(0, whole=True)


def batch_verdict(value: object, count: int) -> BatchVerdict:
    """What a batch handler's return value says about its ``count`` messages: CONSUME_SUCCESS or
    None, all succeeded; RECONSUME_LATER, all failed; an int ``i`` (0 <= i <= count), the index of
    the first failed message: the ones before it succeeded.  Anything else is a mistake of the
    handler's: logged, and every message is retried (nothing is acked that may not be done)."""
    if value is None or value is ConsumeResult.CONSUME_SUCCESS:
        return BatchVerdict(count)
    if value is ConsumeResult.RECONSUME_LATER:
        return FAILED
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= count:
        return BatchVerdict(value)
    log.warning(
        "batch handler returned %r for %d messages: not CONSUME_SUCCESS, RECONSUME_LATER, None "
        "or the index of the first failed message (0 to %d); every message is retried",
        value,
        count,
        count,
    )
    return FAILED


class Unsettled:
    """The messages a consumer handed to ``CLIENT``-mode handlers and has not settled, per queue
    in the order they were handed (thread-safe; no I/O: the consumer acks what :meth:`through`
    returns).  An entry older than its invisibility is forgotten: its handle is stale, and the
    message comes again anyway."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._queues: dict[tuple[str, int | None, bool], dict[str, float]] = {}
        self._lock = threading.Lock()

    def handed(self, messages: Sequence[Message], invisible_seconds: float) -> None:
        """``messages`` go to a handler now, in this order."""
        now = self.clock()
        with self._lock:
            for message in messages:
                if message.receipt_handle is not None:
                    handles = self._queues.setdefault(queue_of(message), {})
                    for handle, until in list(handles.items()):  # the oldest first
                        if until > now:
                            break
                        del handles[handle]
                    handles[message.receipt_handle] = now + invisible_seconds

    def through(self, message: Message) -> list[str]:
        """The handles to ack for a cumulative ack of ``message``: every unsettled one of its
        queue handed before it, and its own; all of them leave the ledger."""
        own = message.receipt_handle
        if own is None:
            return []
        now, taken = self.clock(), []
        with self._lock:
            handles = self._queues.get(queue_of(message), {})
            if own in handles:
                for handle in list(handles):
                    until = handles.pop(handle)
                    if until > now or handle == own:
                        taken.append(handle)
                    if handle == own:
                        break
            else:
                taken.append(own)
            if not handles:
                self._queues.pop(queue_of(message), None)
        return taken

    def settled(self, messages: Sequence[Message]) -> None:
        """``messages`` were settled otherwise (nacked, released): out of the ledger."""
        with self._lock:
            for message in messages:
                handles = self._queues.get(queue_of(message))
                if handles is not None and message.receipt_handle is not None:
                    handles.pop(message.receipt_handle, None)
                    if not handles:
                        del self._queues[queue_of(message)]

    def __len__(self) -> int:
        with self._lock:
            return sum(len(handles) for handles in self._queues.values())


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


class AckRiders:
    """Acks that ride on the member's next receive (``POST .../ack-and-receive``: one request
    for the acks of what was handled and the next messages, instead of two).  Thread-safe, no
    I/O.  The receiver opens the door when its receive has answered, and takes what came in as it
    sends the next one, which shuts the door; an ack offered while the door is shut (a receive in
    flight), or one that would pass ``most`` handles, goes in a request of its own, as ever."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.handles: list[str] = []
        self._open = False
        self._lock = threading.Lock()

    def open(self) -> None:
        with self._lock:
            self._open = True

    def offer(self, handles: Sequence[str]) -> bool:
        """Whether ``handles`` ride on the next receive (else: ack them now)."""
        with self._lock:
            rides = self._open and len(self.handles) + len(handles) <= self.most
            if rides:
                self.handles.extend(handles)
            return rides

    @property
    def pending(self) -> bool:
        """Some ack waits for the next receive."""
        with self._lock:
            return bool(self.handles)

    def take(self) -> list[str]:
        """What rides on the receive about to go; the door shuts."""
        with self._lock:
            self._open = False
            handles, self.handles = self.handles, []
            return handles
