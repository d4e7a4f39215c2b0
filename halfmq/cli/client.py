"""The CLI's view of the broker: every route a command uses, as a :class:`framework.protocol.Call`
run by the framework's own sync client (:class:`framework.transport.BrokerClient`), so the CLI
signs, times out and fails exactly as the framework does.  One attempt per request (an operator
sees the first failure), on the one ``--broker`` URL.

Answers come back as the contract's JSON (``dict``); failures are the framework's errors, which
:mod:`halfmq.cli.output` prints::

    HalfMQError                  (framework.errors)
    +-- BrokerUnavailableError   no connection, or no answer in time: BROKER_UNREACHABLE
    +-- BrokerError              a non-2xx answer (status, code, message, detail); a body that is
    |                            not the contract's envelope (a proxy's page) is HTTP_<status>
    +-- UnexpectedAnswerError    a 2xx (or redirect) answer that is not the contract's JSON

With credentials every request is signed (``framework.signing.HalfmqAuth``); a broker with the
ACL on answers an unsigned or refused request 401 or 403, and a ``TIMESTAMP_SKEWED`` refusal says
how far this machine's clock is off.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Self, TypeVar
from urllib.parse import quote

from framework.config import Retry, Timeout
from framework.errors import HalfMQError, UnexpectedAnswerError, broker_error
from framework.protocol import Answer, Call, json_object, read_envelope
from framework.signing import Credentials
from framework.transport import BrokerClient

T = TypeVar("T")
DEFAULT_BROKER = "http://127.0.0.1:9876"
Json = dict[str, Any]
ONCE = Retry(attempts=1)


def segment(value: str) -> str:
    """One path segment: names such as ``%RETRY%g`` and ids with ``/`` stay one segment."""
    return quote(value, safe="")


def read_error(answer: Answer) -> HalfMQError:
    """A 4xx or 5xx: the contract's envelope as the framework reads it; any other body (a proxy's
    page) as ``HTTP_<status>`` with its text."""
    text = answer.content.decode(errors="replace").strip()[:200] or answer.reason
    code, message, detail = read_envelope(answer) or (f"HTTP_{answer.status}", text, {})
    return broker_error(answer.status, code, message, detail, answer.url)


def admin_call(
    method: str, path: str, parse: Callable[[Answer], T], body: Json | None = None, **params: Any
) -> Call[T]:
    """A call as the CLI reads answers: any answer below 400 is parsed (a redirect's page is then
    not a broker's JSON), any other is an error (:func:`read_error`).  ``params`` that are None
    are left out of the query."""
    query = {name: value for name, value in params.items() if value is not None}
    content = None if body is None else _encode(body)
    return Call(
        method, path, parse, content, query or None, success=_below_400, read_error=read_error
    )


def _encode(body: Json) -> bytes:
    """JSON as the CLI has always sent it (httpx's encoding: any integer, no NaN)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _below_400(status: int) -> bool:
    return status < 400


def json_call(method: str, path: str, body: Json | None = None, **params: Any) -> Call[Json]:
    """A route that answers a JSON object."""
    return admin_call(method, path, json_object, body, **params)


def list_call(path: str, field: str, **params: Any) -> Call[list[Json]]:
    """A route that answers ``{field: [...]}``: the list."""

    def parse(answer: Answer) -> list[Json]:
        items = json_object(answer).get(field)
        if not isinstance(items, list):
            raise UnexpectedAnswerError(answer.broker, answer.status)
        return items

    return admin_call("GET", path, parse, **params)


def create_call(path: str, body: Json) -> Call[tuple[Json, bool]]:
    """A create route: the object, and whether it was created (201; False: it existed)."""
    return admin_call("POST", path, lambda a: (json_object(a), a.status == 201), body)


def delete_call(path: str) -> Call[None]:
    return admin_call("DELETE", path, lambda a: None)


class AdminClient:
    """``with AdminClient(url) as admin: admin.list_topics()``: the broker's routes for an
    operator, over the framework's :class:`~framework.transport.BrokerClient`; with
    ``credentials`` every request is signed."""

    def __init__(
        self,
        broker: str = DEFAULT_BROKER,
        *,
        timeout: float = 10.0,
        credentials: Credentials | None = None,
    ) -> None:
        every = Timeout(connect=timeout, read=timeout, write=timeout, pool=timeout)
        self.client = BrokerClient([broker], timeout=every, retry=ONCE, credentials=credentials)

    def call(self, call: Call[T]) -> T:
        return self.client.call(call)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- topics ----------------------------------------------------------------------------------

    def create_topic(
        self, name: str, queues: int | None = None, order: bool = False
    ) -> tuple[Json, bool]:
        """The topic, and whether it was created (False: it existed with this config)."""
        body: Json = {"name": name, "order": order}
        if queues is not None:
            body["queues"] = queues
        return self.call(create_call("/v1/topics", body))

    def list_topics(self) -> list[Json]:
        return self.call(list_call("/v1/topics", "topics"))

    def get_topic(self, name: str) -> Json:
        return self.call(json_call("GET", f"/v1/topics/{segment(name)}"))

    def delete_topic(self, name: str) -> None:
        self.call(delete_call(f"/v1/topics/{segment(name)}"))

    def send(self, topic: str, message: Json) -> Json:
        return self.call(json_call("POST", f"/v1/topics/{segment(topic)}/messages", message))

    # -- transactions ----------------------------------------------------------------------------

    def get_transaction(self, transaction_id: str) -> Json:
        return self.call(json_call("GET", _transaction(transaction_id)))

    def list_transactions(
        self,
        state: str | None = None,
        producer_group: str | None = None,
        older_than_seconds: float | None = None,
        limit: int | None = None,
    ) -> list[Json]:
        return self.call(
            list_call(
                "/v1/transactions",
                "transactions",
                state=state,
                producer_group=producer_group,
                older_than_seconds=older_than_seconds,
                limit=limit,
            )
        )

    def resolve_transaction(self, transaction_id: str, decision: str) -> Json:
        """An operator's commit or rollback (no producer group: resolved_by is "operator")."""
        return self.call(json_call("POST", _transaction(transaction_id, decision), {}))

    def check_transaction(self, transaction_id: str) -> Json:
        return self.call(json_call("POST", _transaction(transaction_id, "check")))

    def transaction_checks(self, transaction_id: str) -> Json:
        """The check audit: every check of the transaction, and whether the next round checks it."""
        return self.call(json_call("GET", _transaction(transaction_id, "checks")))

    # -- queries ---------------------------------------------------------------------------------

    def get_message(self, msg_id: str) -> Json:
        return self.call(json_call("GET", f"/v1/messages/{segment(msg_id)}"))

    def find_messages(
        self,
        topic: str | None = None,
        key: str | None = None,
        begin: str | int | None = None,
        end: str | int | None = None,
        limit: int | None = None,
    ) -> list[Json]:
        query = {"topic": topic, "key": key, "begin": begin, "end": end, "limit": limit}
        return self.call(list_call("/v1/messages", "messages", **query))

    # -- consumer groups -------------------------------------------------------------------------

    def create_group(self, body: Json) -> tuple[Json, bool]:
        return self.call(create_call("/v1/consumer-groups", body))

    def subscribe(self, group: str, topic: str, expression: str) -> Json:
        body = {"topic": topic, "expression": expression}
        return self.call(json_call("POST", _group(group, "subscriptions"), body))

    def show_group(self, group: str) -> Json:
        return self.call(json_call("GET", _group(group)))

    def reset_offset(self, group: str, topic: str, timestamp: str | int) -> Json:
        body = {"topic": topic, "timestamp": timestamp}
        return self.call(json_call("POST", _group(group, "reset-offset"), body))

    def receive(self, group: str, body: Json) -> list[Json]:
        answer = self.call(json_call("POST", _group(group, "receive"), body))
        messages: list[Json] = answer["messages"]
        return messages

    def ack(self, group: str, handles: list[str]) -> Json:
        return self.call(json_call("POST", _group(group, "ack"), {"receipt_handles": handles}))

    def dlq(self, group: str, limit: int) -> list[Json]:
        answer = self.call(json_call("GET", _group(group, "dlq"), limit=limit))
        messages: list[Json] = answer["messages"]
        return messages

    def resend(self, group: str, msg_id: str) -> Json:
        return self.call(json_call("POST", _group(group, "dlq", segment(msg_id), "resend")))

    # -- the ACL (mqadmin's ACL commands) --------------------------------------------------------

    def acl(self, part: str = "") -> Json:
        return self.call(json_call("GET", f"/v1/acl{part}"))

    def update_account(self, access_key: str, changes: Json) -> Json:
        return self.call(json_call("PUT", f"/v1/acl/accounts/{segment(access_key)}", changes))

    def delete_account(self, access_key: str) -> None:
        self.call(delete_call(f"/v1/acl/accounts/{segment(access_key)}"))

    def update_global_white(self, addresses: list[str]) -> Json:
        return self.call(json_call("PUT", "/v1/acl/global-white", {"addresses": addresses}))


def _group(group: str, *rest: str) -> str:
    return "/".join(["/v1/consumer-groups", segment(group), *rest])


def _transaction(transaction_id: str, *rest: str) -> str:
    return "/".join(["/v1/transactions", segment(transaction_id), *rest])
