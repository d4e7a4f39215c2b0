"""Calls that share requests, without I/O: many transactions in flight in one producer send their
halves in one request and their decisions in another (Kafka's producer batches the same way, its
``linger.ms``; RocketMQ batches sends).

A call whose :class:`~framework.protocol.Call` carries a :class:`~framework.protocol.Share` (a
half, a commit or rollback, a plain send, an ack) is *gathered* with the other calls of its lane
that are waiting at the same time; the first of them *leads*: it sends the gathering as one
request once

* the gathering is full (``max_batch`` items, ``max_batch_bytes``, or the route's 1000), or
* no other call of the lane is in flight any more (Nagle's rule: nothing to wait for), or
* ``linger_ms`` has passed since it began,

and hands each call its own :class:`~framework.protocol.Answer`.  A call with no other call of its
lane in flight does not wait at all: it goes alone, to its single route, at once -- a producer
sending one transaction at a time pays nothing for batching.  A gathering that holds one call when
it is sent goes alone too.

Each call keeps its own guarantees, because it keeps its own :class:`~framework.protocol.Attempts`:
its answer is read by its own ``parse`` and error reader (so a half is durable before its local
transaction runs, and an error is raised for that call only); an answer that says "try again"
(429, 5xx, no answer at all) is retried by that call, which joins the next gathering with the same
item (the same ``msg_id``, the same decision: the broker answers a retry the same).  A request the
broker refuses whole (413 past its body limit, an older broker without the route) is not the
items' fault: each call then goes alone, to its single route, and gets its own answer there.

:class:`Gatherings` is the state both faces share; :class:`~framework.transport.BrokerClient` waits
on ``threading.Event`` and :class:`~framework.transport.AsyncBrokerClient` on ``asyncio.Event``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeAlias, TypeVar

from framework.config import Retry
from framework.errors import ConfigurationError, HalfMQError
from framework.protocol import (
    ITEMS_MAX,
    RETRY_STATUSES,
    Answer,
    Call,
    Lane,
    Share,
    is_2xx,
    read_envelope,
)

ONE_ATTEMPT = Retry(attempts=1)  # a shared request is tried once: each call retries its own item
_ENVELOPE_BYTES = 64  # the body around the items: {"halves":[ ... ]}


class Signal(Protocol):
    """``threading.Event`` or ``asyncio.Event``, as the core sets and reads them."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


S = TypeVar("S", bound=Signal)


class Alone:
    """The outcome that sends a call to its single route: it was the only one in its gathering,
    or the broker refused the shared request whole."""

    def __repr__(self) -> str:
        return "ALONE"


ALONE = Alone()
Outcome: TypeAlias = Answer | Exception | Alone


@dataclass(frozen=True, slots=True)
class Linger:
    """How a client's calls share requests.  ``ms``: the longest a call waits for others (0: never
    share, one request per call); ``max_items`` and ``max_bytes``: a gathering is sent once it
    holds this many calls, or before its body would pass this many bytes (keep it under the
    broker's request limit: ``max_message_bytes`` x 4/3 + 64 KiB)."""

    ms: float = 2.0
    max_items: int = 128
    max_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        if self.ms < 0 or self.max_items < 1 or self.max_bytes < 1:
            raise ConfigurationError(
                "batch_linger_ms must be 0 or more, max_batch and max_batch_bytes at least 1"
            )

    @property
    def on(self) -> bool:
        return self.ms > 0 and self.max_items > 1

    @property
    def seconds(self) -> float:
        return self.ms / 1000


@dataclass(slots=True, eq=False)
class Pending:
    """One call's item in a gathering, and (once sent) its outcome."""

    share: Share
    encoded: bytes
    outcome: Outcome = ALONE


@dataclass(slots=True, eq=False)
class Gathering(Generic[S]):
    """Calls of one lane waiting to go in one request.  ``ready``: its leader sends it now;
    ``done``: every call has its outcome."""

    lane: Lane
    ready: S
    done: S
    pendings: list[Pending] = field(default_factory=list)
    size: int = _ENVELOPE_BYTES
    weight: int = 0
    sealed: bool = False


@dataclass(slots=True)
class Seat(Generic[S]):
    """Where :meth:`Gatherings.join` put a call: its gathering, its item, whether it leads."""

    gathering: Gathering[S]
    pending: Pending
    leads: bool


class Gatherings(Generic[S]):
    """The open gatherings of one client, per lane, and how many calls of each lane are in flight
    (thread-safe: the sync face's callers are threads)."""

    def __init__(self, linger: Linger, signal: Callable[[], S]) -> None:
        self.linger = linger
        self._signal = signal
        self._lock = threading.Lock()
        self._open: dict[str, Gathering[S]] = {}
        self._calls: dict[str, int] = {}  # calls of the lane between enter() and leave()
        self._live: set[Gathering[S]] = set()  # opened, not yet answered
        self._unsupported: set[str] = set()  # lanes whose route the broker does not have
        self.closing = False

    # -- a call's life ---------------------------------------------------------------------

    def enter(self, lane: Lane) -> None:
        """A call of ``lane`` begins (it stays counted through its retries, until :meth:`leave`)."""
        with self._lock:
            self._calls[lane.key] = self._calls.get(lane.key, 0) + 1

    def leave(self, lane: Lane) -> None:
        """A call of ``lane`` is done: if the calls of the open gathering are all that is left of
        the lane, its leader need not wait for anyone (Nagle's rule)."""
        with self._lock:
            left = self._calls[lane.key] = self._calls[lane.key] - 1
            gathering = self._open.get(lane.key)
            if gathering is not None and left <= len(gathering.pendings):
                gathering.ready.set()

    def join(self, share: Share) -> Seat[S] | None:
        """Seat a call in its lane's gathering (opening one it leads), or None: go alone now --
        no other call of the lane is in flight, the item is too big to share, or the client is
        closing."""
        lane = share.lane
        encoded = lane.encode(share.item)
        weight = lane.weight(share.item)
        size = len(encoded) + 1
        with self._lock:
            if self.closing or lane.key in self._unsupported:
                return None
            if size + _ENVELOPE_BYTES > self.linger.max_bytes or weight > ITEMS_MAX:
                return None
            gathering = self._open.get(lane.key)
            if gathering is not None and not self._fits(gathering, size, weight):
                self._seal(gathering)  # full: its leader sends it now, this call opens the next
                gathering = None
            leads = gathering is None
            if gathering is None:
                if self._calls.get(lane.key, 0) <= 1:
                    return None  # nothing else in flight: no one to wait for
                gathering = Gathering(lane, self._signal(), self._signal())
                self._open[lane.key] = gathering
                self._live.add(gathering)
            pending = Pending(share, encoded)
            gathering.pendings.append(pending)
            gathering.size += size
            gathering.weight += weight
            if len(gathering.pendings) >= self.linger.max_items or gathering.weight >= ITEMS_MAX:
                self._seal(gathering)
            return Seat(gathering, pending, leads)

    def seal(self, gathering: Gathering[S]) -> list[Pending]:
        """The leader takes its gathering to send: no call joins it any more."""
        with self._lock:
            self._seal(gathering)
            return list(gathering.pendings)

    def finish(self, gathering: Gathering[S], outcomes: Sequence[Outcome]) -> None:
        """Each call of a sent gathering gets its outcome (ALONE for any not given one)."""
        for n, pending in enumerate(gathering.pendings):
            pending.outcome = outcomes[n] if n < len(outcomes) else ALONE
        with self._lock:
            self._live.discard(gathering)
        gathering.done.set()

    # -- the shared request --------------------------------------------------------------------

    def request(self, pendings: Sequence[Pending]) -> Call[list[Answer]] | None:
        """The one request for a sealed gathering's calls; None when it holds one call (it goes
        alone)."""
        if len(pendings) < 2:
            return None
        lane = pendings[0].share.lane
        return lane.request([p.share.item for p in pendings], [p.encoded for p in pendings])

    def outcomes(
        self, lane: Lane, request: Call[list[Answer]], answer: Answer | Exception, count: int
    ) -> list[Outcome]:
        """Each call's outcome from the shared request's one attempt: its own answer; the whole
        answer when the broker shed the request (429, 5xx: each call retries as it would alone);
        the transport's exception when no answer came; ALONE when the broker refused it whole."""
        if isinstance(answer, Exception):
            return [answer] * count
        if is_2xx(answer.status):
            try:
                return list(request.parse(answer))
            except HalfMQError:
                return [ALONE] * count  # not the contract's answer: each call asks alone
        if answer.status in RETRY_STATUSES:
            return [answer] * count
        if _no_such_route(answer):
            with self._lock:
                self._unsupported.add(lane.key)  # an older broker: this lane goes alone from now
        return [ALONE] * count

    def gathered(self, lane: Lane) -> int:
        """How many calls wait in the lane's open gathering (0: none is open)."""
        with self._lock:
            gathering = self._open.get(lane.key)
            return 0 if gathering is None else len(gathering.pendings)

    # -- shutting down -------------------------------------------------------------------------

    def close(self) -> list[Gathering[S]]:
        """From now on every call goes alone; the open gatherings are sent at once.  Answers the
        gatherings still to be sent or answered (the face waits for their ``done``)."""
        with self._lock:
            self.closing = True
            for gathering in list(self._open.values()):
                self._seal(gathering)
            return list(self._live)

    # -- inside the lock -----------------------------------------------------------------------

    def _fits(self, gathering: Gathering[S], size: int, weight: int) -> bool:
        return (
            gathering.size + size <= self.linger.max_bytes
            and gathering.weight + weight <= ITEMS_MAX
        )

    def _seal(self, gathering: Gathering[S]) -> None:
        if not gathering.sealed:
            gathering.sealed = True
            if self._open.get(gathering.lane.key) is gathering:
                del self._open[gathering.lane.key]
            gathering.ready.set()


def _no_such_route(answer: Answer) -> bool:
    """A 404 or 405 of the router, not of a route: the broker predates the shared route."""
    if answer.status not in (404, 405):
        return False
    envelope = read_envelope(answer)
    return envelope is None or envelope[0] in ("NOT_FOUND", "METHOD_NOT_ALLOWED")
