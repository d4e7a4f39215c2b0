"""The REST contract, without I/O: request building, answer parsing, retry and failover decisions.

Both faces (``httpx.Client`` and ``httpx.AsyncClient``) drive the same objects: a :class:`Call`
says what to send and how to read the answer; an :class:`Attempts` says where to send it and, after
a failure, whether and when to try again.  Only :mod:`framework.transport` touches the network.
The decisions made of several calls (a transaction, a check, a consumed message) are flows over
these calls: :mod:`framework.flow`.

A call that may share one request with others of its kind (a half, a decision, a plain send, an
ack) carries a :class:`Share`: its :class:`Lane` -- the route that takes many such items and how
that route's answer splits into one :class:`Answer` per item -- and its item.  Each item's answer
is read by the call's own ``parse`` and error reader, and retried by the call's own
:class:`Attempts`, exactly as its answer alone would be (:mod:`framework.batching`).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import orjson

from framework.config import Retry
from framework.errors import (
    BrokerError,
    BrokerUnavailableError,
    ConfigurationError,
    HalfMQError,
    UnexpectedAnswerError,
    broker_error,
)
from framework.message import Message, SendResult, from_wire, to_wire
from halfmq_wire.errors import read_error
from halfmq_wire.records import AckResult as AckResult  # the contract's records, re-exported
from halfmq_wire.records import HalfReceipt as HalfReceipt

T = TypeVar("T")

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
FAILOVER_STATUSES = frozenset({500, 502, 503, 504})


_UNREAD = object()


@dataclass(frozen=True, slots=True)
class Answer:
    """A broker's answer to one attempt: ``url`` is the request's, ``broker`` the broker's base
    URL, ``reason`` the status line's reason phrase.  One item's answer in a shared request
    carries its JSON already read (``data``), with the shared request's ``url``."""

    status: int
    content: bytes
    url: str = ""
    broker: str = ""
    reason: str = ""
    data: Any = _UNREAD

    def json(self) -> Any:
        if self.data is not _UNREAD:
            return self.data
        return orjson.loads(self.content) if self.content else None


ErrorReader = Callable[[Answer], HalfMQError]


def is_2xx(status: int) -> bool:
    return 200 <= status < 300


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One REST call: what to send, and how to read the answer: ``parse`` reads a success (by the
    contract, a 2xx), ``read_error`` anything else (by the contract, the error envelope)."""

    method: str
    path: str
    parse: Callable[[Answer], T]
    body: Any = None  # JSON-able, or bytes of JSON
    params: Mapping[str, str | int | float] | None = None
    extra_read: float = 0.0  # a long-poll's wait, added to the read time-out
    fields: Mapping[str, str] = field(default_factory=dict)  # ids for errors (topic, ...)
    success: Callable[[int], bool] = is_2xx
    read_error: ErrorReader | None = None  # None: the envelope (parse_error)
    share: Share | None = None  # how it may share a request with others of its lane

    def content(self) -> bytes | None:
        """The body as sent: encoded as JSON, or as given when it is encoded already (bytes)."""
        if self.body is None or isinstance(self.body, bytes):
            return self.body
        return orjson.dumps(self.body)


class Endpoints:
    """The brokers of a client, sticky on the one that last answered, moving on when it fails."""

    def __init__(self, urls: Sequence[str]) -> None:
        cleaned = tuple(u.rstrip("/") for u in urls)
        if not cleaned:
            raise ConfigurationError("at least one broker URL is needed")
        self.urls = cleaned
        self._current = 0
        self._lock = threading.Lock()

    @property
    def current(self) -> int:
        return self._current

    def failed(self, index: int) -> None:
        with self._lock:
            if self._current == index:
                self._current = (index + 1) % len(self.urls)


class Attempts(Generic[T]):
    """The retry and failover decisions for one call (sans-I/O: the driver sleeps and sends).

    A driver sends to :attr:`url`, hands what came back (an :meth:`answer`, or the transport's
    exception) to :meth:`outcome`, and pauses as long as it says; once it says ``None`` the call's
    value is :attr:`result`."""

    result: T

    def __init__(self, endpoints: Endpoints, retry: Retry, call: Call[T]) -> None:
        self.endpoints = endpoints
        self.retry = retry
        self.call = call
        self._content: object = _UNREAD
        self.failures = 0
        self._aim(endpoints.current)

    @property
    def content(self) -> bytes | None:
        """The body as sent, encoded once (never, for a call whose item went in a shared
        request)."""
        if self._content is _UNREAD:
            self._content = self.call.content()
        return self._content  # type: ignore[return-value]

    def _aim(self, index: int) -> None:
        """The next attempt goes to broker ``index``: its base URL and the call's URL there."""
        self.index = index
        self.broker = self.endpoints.urls[index]
        self.url = self.broker + self.call.path

    def answer(self, status: int, content: bytes, reason: str = "") -> Answer:
        """What the broker of this attempt answered."""
        return Answer(status, content, self.url, self.broker, reason)

    def outcome(self, answer: Answer | Exception) -> float | None:
        """After one attempt (an answer, or no answer: the transport's exception): ``None`` when
        the call is done, else the pause before the next attempt; raises once it has failed."""
        if isinstance(answer, Exception):
            return self.unreachable(answer)
        result, delay = self.answered(answer)
        if delay is None:
            self.result = result
        return delay

    def answered(self, answer: Answer) -> tuple[Any, float | None]:
        """``(result, None)`` on success, ``(None, delay)`` to try again; raises otherwise."""
        if self.call.success(answer.status):
            return self.call.parse(answer), None
        read = self.call.read_error
        error = read(answer) if read is not None else parse_error(answer, self.call.fields)
        if answer.status not in RETRY_STATUSES:
            raise error
        if answer.status in FAILOVER_STATUSES:
            self._move_on()
        return None, self._again(error)

    def unreachable(self, cause: Exception) -> float:
        """No answer: the delay before the next attempt (on the next broker); raises when spent."""
        self._move_on()
        unavailable = BrokerUnavailableError(
            f"no broker answered {self.call.method} {self.call.path} after "
            f"{self.failures + 1} attempts: {cause!r}",
            urls=self.endpoints.urls,
            attempts=self.failures + 1,
            **dict(self.call.fields),
        )
        try:
            return self._again(unavailable)
        except BrokerUnavailableError as exc:
            raise exc from cause

    def _move_on(self) -> None:
        self.endpoints.failed(self.index)
        self._aim(self.endpoints.current)

    def _again(self, error: HalfMQError) -> float:
        self.failures += 1
        if self.failures >= self.retry.attempts:
            raise error
        return self.retry.delay(self.failures)


def read_envelope(answer: Answer) -> tuple[str, str, dict[str, Any]] | None:
    """The contract's ``{"error": {"code", "message", "detail"}}``, or None for any other body."""
    try:
        data = answer.json()
    except ValueError:
        return None
    return read_error(data)


def parse_error(answer: Answer, fields: Mapping[str, str]) -> BrokerError:
    envelope = read_envelope(answer)
    if envelope is None:  # not the contract's (a proxy's page): its first bytes
        envelope = ("HTTP_ERROR", answer.content[:200].decode(errors="replace"), {})
    error = broker_error(answer.status, *envelope, answer.url)
    for name, value in fields.items():
        if getattr(error, name, None) is None:
            setattr(error, name, value)
    return error


def json_object(answer: Answer) -> dict[str, Any]:
    """A 2xx answer as the contract's JSON object; anything else is not a halfmq broker's."""
    try:
        value = answer.json()
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise UnexpectedAnswerError(answer.broker, answer.status)
    return value


# -- calls that share a request -----------------------------------------------------------------

ITEMS_MAX = 1000  # the broker takes 1 to 1000 items (or receipt handles) in one request


class Lane(ABC):
    """Calls of one kind that may go in one request: the route that takes them as items, and how
    its answer is split into one :class:`Answer` per item."""

    key: str  # calls of the same key share requests

    def encode(self, item: Any) -> bytes:
        """The item as it goes into the request's body."""
        return orjson.dumps(item)

    def weight(self, item: Any) -> int:
        """How much of the route's :data:`ITEMS_MAX` the item takes."""
        return 1

    @abstractmethod
    def request(self, items: Sequence[Any], encoded: Sequence[bytes]) -> Call[list[Answer]]:
        """One request for ``items`` (``encoded`` by :meth:`encode`), answering one
        :class:`Answer` per item, in order."""


@dataclass(frozen=True, slots=True)
class Share:
    """What a :class:`Call` sends when it shares a request: its item, in its lane."""

    lane: Lane
    item: Any


@dataclass(frozen=True, slots=True, eq=False)
class ItemsLane(Lane):
    """A route answered item by item (``POST /v1/transactions:batch``, ...): the body is
    ``{field: [item, ...]}``; the answer ``{"results": [{"status", "result" | "error"}, ...]}``,
    each result what the item's own route would answer with that status."""

    key: str
    path: str
    field: str

    def request(self, items: Sequence[Any], encoded: Sequence[bytes]) -> Call[list[Answer]]:
        body = b'{"' + self.field.encode() + b'":[' + b",".join(encoded) + b"]}"
        return Call("POST", self.path, lambda a: item_answers(a, len(encoded)), body=body)


def item_answers(answer: Answer, count: int) -> list[Answer]:
    """The answer of a route answered item by item, as each item's own :class:`Answer`."""
    results = json_object(answer).get("results")
    if not isinstance(results, list) or len(results) != count:
        raise UnexpectedAnswerError(answer.broker, answer.status)
    split = []
    for result in results:
        status = result.get("status") if isinstance(result, dict) else None
        if not isinstance(status, int) or isinstance(status, bool):
            raise UnexpectedAnswerError(answer.broker, answer.status)
        data = result["result"] if "result" in result else {"error": result.get("error")}
        split.append(Answer(status, b"", answer.url, answer.broker, data=data))
    return split


@dataclass(frozen=True, slots=True, eq=False)
class AckLane(Lane):
    """Acks of one consumer group in one ack request: its answer's ``stale`` handles are told
    back to the call that acked each one."""

    group: str
    key: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"ack:{self.group}")

    def weight(self, item: Any) -> int:
        return len(item)

    def request(self, items: Sequence[Any], encoded: Sequence[bytes]) -> Call[list[Answer]]:
        handles = [handle for handles in items for handle in handles]

        def split(answer: Answer) -> list[Answer]:
            stale = json_object(answer).get("stale") or []
            gone = set(stale) if isinstance(stale, list) else set()
            answers = []
            for mine in items:
                left = [h for h in mine if h in gone]
                data = {"acked": len(mine) - len(left), "stale": left}
                answers.append(Answer(answer.status, b"", answer.url, answer.broker, data=data))
            return answers

        return Call(
            "POST",
            f"/v1/consumer-groups/{self.group}/ack",
            split,
            body={"receipt_handles": handles},
        )


HALVES = ItemsLane("halves", "/v1/transactions:batch", "halves")
DECISIONS = ItemsLane("decisions", "/v1/transactions/decisions:batch", "decisions")
SENDS = ItemsLane("sends", "/v1/messages:batch", "messages")


# -- the calls ---------------------------------------------------------------------------------


def _send_result(data: Mapping[str, Any]) -> SendResult:
    return SendResult(
        msg_id=data["msg_id"],
        topic=data["topic"],
        queue_id=data["queue_id"],
        queue_offset=data.get("queue_offset"),
        duplicate=bool(data.get("duplicate", False)),
    )


def send(message: Message) -> Call[SendResult]:
    body = to_wire(message)
    return Call(
        "POST",
        f"/v1/topics/{message.topic}/messages",
        lambda a: _send_result(a.json()),
        body=body,
        fields={"topic": message.topic, "msg_id": message.msg_id},
        share=Share(SENDS, {**body, "topic": message.topic}),
    )


def send_batch(topic: str, messages: Sequence[Message]) -> Call[list[SendResult]]:
    for message in messages:
        if message.topic != topic:
            raise ConfigurationError(
                f"a batch goes to one topic: {message.topic!r} is not {topic!r}", topic=topic
            )
    return Call(
        "POST",
        f"/v1/topics/{topic}/messages:batch",
        lambda a: [_send_result(r) for r in a.json()["results"]],
        body={"messages": [to_wire(m) for m in messages]},
        fields={"topic": topic},
    )


def prepare(
    message: Message,
    group: str,
    check_immunity_seconds: float | None = None,
    client_id: str | None = None,
) -> Call[HalfReceipt]:
    """A half.  ``client_id``: this producer instance, which the broker's check-back asks first
    while it is live."""
    body = {**to_wire(message), "topic": message.topic, "producer_group": group}
    if check_immunity_seconds is not None:
        body["check_immunity_seconds"] = check_immunity_seconds
    if client_id is not None:
        body["client_id"] = client_id

    def parse(answer: Answer) -> HalfReceipt:
        return HalfReceipt.from_json(answer.json())

    return Call(
        "POST",
        "/v1/transactions",
        parse,
        body=body,
        fields={"topic": message.topic, "msg_id": message.msg_id},
        share=Share(HALVES, body),
    )


def end(
    transaction_id: str,
    group: str,
    commit: bool,
    *,
    from_check: bool,
    client_id: str | None = None,
) -> Call[str]:
    """Commit or roll back a half; answers the broker's state (COMMITTED or ROLLED_BACK).
    ``client_id``: the instance that decides, which the message trace then names."""
    verb = "commit" if commit else "rollback"
    body: dict[str, Any] = {"producer_group": group, "from_check": from_check}
    if client_id is not None:
        body["client_id"] = client_id
    decision = {"transaction_id": transaction_id, "decision": verb.upper(), **body}
    return Call(
        "POST",
        f"/v1/transactions/{transaction_id}/{verb}",
        lambda a: str(a.json()["state"]),
        body=body,
        fields={"transaction_id": transaction_id},
        share=Share(DECISIONS, decision),
    )


def get_transaction(transaction_id: str) -> Call[dict[str, Any]]:
    return Call(
        "GET",
        f"/v1/transactions/{transaction_id}",
        lambda a: dict(a.json()),
        fields={"transaction_id": transaction_id},
    )


def heartbeat(
    group: str, client_id: str, callback_url: str | None, topics: Sequence[str]
) -> Call[None]:
    return Call(
        "POST",
        f"/v1/producer-groups/{group}/heartbeat",
        lambda a: None,
        body={"client_id": client_id, "callback_url": callback_url, "topics": list(topics)},
    )


def pull_checks(group: str, client_id: str, max_checks: int, wait: float) -> Call[list[Message]]:
    return Call(
        "GET",
        f"/v1/producer-groups/{group}/checks",
        lambda a: [check_message(c) for c in a.json()["checks"]],
        params={"client_id": client_id, "max": max_checks, "wait_seconds": wait},
        extra_read=wait,
    )


def check_message(data: Mapping[str, Any]) -> Message:
    """A check request (push body or pull item) as the message it asks about."""
    message = from_wire(data)
    return message.evolve(
        properties={**message.properties, "CHECK_TIMES": str(data.get("check_times", 0))}
    )


def create_topic(name: str, queues: int | None = None, order: bool = False) -> Call[None]:
    body: dict[str, Any] = {"name": name, "order": order}
    if queues is not None:
        body["queues"] = queues
    return Call("POST", "/v1/topics", lambda a: None, body=body, fields={"topic": name})


# -- consumer groups ---------------------------------------------------------------------------


def create_group(
    name: str,
    *,
    message_model: str,
    consume_from: str,
    orderly: bool,
    max_reconsume_times: int | None,
) -> Call[None]:
    body: dict[str, Any] = {
        "name": name,
        "message_model": message_model,
        "consume_from": consume_from,
        "orderly": orderly,
    }
    if max_reconsume_times is not None:
        body["max_reconsume_times"] = max_reconsume_times
    return Call("POST", "/v1/consumer-groups", lambda a: None, body=body)


def subscribe(group: str, topic: str, expression: str) -> Call[None]:
    return Call(
        "POST",
        f"/v1/consumer-groups/{group}/subscriptions",
        lambda a: None,
        body={"topic": topic, "expression": expression},
        fields={"topic": topic},
    )


def receive(
    group: str,
    client_id: str,
    max_messages: int,
    invisible_seconds: float,
    wait: float,
    max_per_queue: int = 1,
) -> Call[list[Message]]:
    """``max_per_queue``: an orderly group's most consecutive messages of one queue (a batch
    handler's ``batch_max``); the broker's default, 1, is left out of the body."""
    return Call(
        "POST",
        f"/v1/consumer-groups/{group}/receive",
        lambda a: [from_wire(m) for m in a.json()["messages"]],
        body=_receive_body(client_id, max_messages, invisible_seconds, wait, max_per_queue),
        extra_read=wait,
    )


def ack_and_receive(
    group: str,
    handles: Sequence[str],
    client_id: str,
    max_messages: int,
    invisible_seconds: float,
    wait: float,
    max_per_queue: int = 1,
) -> Call[tuple[AckResult, list[Message]]]:
    """An ack of ``handles`` (at most :data:`ITEMS_MAX`) and a receive in one request: what the
    ack did and the messages received."""

    def parse(answer: Answer) -> tuple[AckResult, list[Message]]:
        data = answer.json()
        return AckResult.from_json(data), [from_wire(m) for m in data["messages"]]

    body = _receive_body(client_id, max_messages, invisible_seconds, wait, max_per_queue)
    body["receipt_handles"] = list(handles)
    return Call(
        "POST",
        f"/v1/consumer-groups/{group}/ack-and-receive",
        parse,
        body=body,
        extra_read=wait,
    )


def _receive_body(
    client_id: str, max_messages: int, invisible_seconds: float, wait: float, max_per_queue: int
) -> dict[str, object]:
    body: dict[str, object] = {
        "client_id": client_id,
        "topic": None,
        "max_messages": max_messages,
        "invisible_seconds": invisible_seconds,
        "wait_seconds": wait,
    }
    if max_per_queue > 1:
        body["max_per_queue"] = max_per_queue
    return body


def ack(group: str, handles: Sequence[str]) -> Call[AckResult]:
    def parse(answer: Answer) -> AckResult:
        return AckResult.from_json(answer.json())

    return Call(
        "POST",
        f"/v1/consumer-groups/{group}/ack",
        parse,
        body={"receipt_handles": list(handles)},
        share=Share(AckLane(group), list(handles)) if len(handles) <= ITEMS_MAX else None,
    )


def nack(group: str, handle: str, delay_level: int | None = None) -> Call[str]:
    """RECONSUME_LATER; answers the broker's outcome (RETRY, RETRY_IN_PLACE or DLQ)."""
    return Call(
        "POST",
        f"/v1/consumer-groups/{group}/nack",
        lambda a: str(a.json()["outcome"]),
        body={"receipt_handle": handle, "delay_level": delay_level},
    )


def change_invisible(group: str, handle: str, invisible_seconds: float) -> Call[str]:
    """Answers the new receipt handle (the old one is stale)."""
    return Call(
        "POST",
        f"/v1/consumer-groups/{group}/change-invisible",
        lambda a: str(a.json()["receipt_handle"]),
        body={"receipt_handle": handle, "invisible_seconds": invisible_seconds},
    )


def get_group(group: str) -> Call[dict[str, Any]]:
    return Call("GET", f"/v1/consumer-groups/{group}", lambda a: dict(a.json()))


# -- the client-side trace ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceReport:
    """How many of a report's events the broker recorded, and the index of each it refused with
    the error's code."""

    recorded: int
    refused: tuple[tuple[int, str], ...] = ()


def report_trace(events: Sequence[Mapping[str, Any]]) -> Call[TraceReport]:
    """Send and consume costs (``framework.client_trace``): 1 to 1000 events."""

    def parse(answer: Answer) -> TraceReport:
        data = json_object(answer)
        try:
            refused = tuple(
                (int(r["index"]), str(r["error"]["code"])) for r in data.get("refused") or ()
            )
            return TraceReport(int(data["recorded"]), refused)
        except (KeyError, TypeError, ValueError):
            raise UnexpectedAnswerError(answer.broker, answer.status) from None

    return Call("POST", "/v1/trace", parse, body={"events": list(events)})
