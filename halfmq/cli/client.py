"""A small synchronous REST client for the CLI: one method per route the commands use.

It does the I/O and nothing else: answers come back as the contract's JSON (``dict``), failures as
one exception hierarchy the commands render::

    ClientError                 anything that kept a request from getting an answer
    +-- BrokerUnreachable       no connection, or no answer in time (``url``, ``reason``)
    +-- BrokerErrorResponse     a non-2xx answer (``status``, ``code``, ``message``, ``detail``)
    +-- UnexpectedAnswer        a 2xx answer that is not the contract's JSON (not a halfmq broker?)

With credentials every request is signed (``framework.signing.HalfmqAuth``, the framework's own
signer); a broker with the ACL on answers an unsigned or refused request 401 or 403, and a
``TIMESTAMP_SKEWED`` refusal says how far this machine's clock is off.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx

from framework.errors import TIMESTAMP_SKEWED, clock_skew_message
from framework.signing import Credentials, HalfmqAuth

DEFAULT_BROKER = "http://127.0.0.1:9876"
Json = dict[str, Any]


class ClientError(Exception):
    """The root of the CLI client's errors."""

    code = "CLIENT_ERROR"

    def __init__(self, message: str, detail: Json | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or {}

    def envelope(self) -> Json:
        """The error in the broker's own shape, so ``--json`` callers parse one format."""
        return {"error": {"code": self.code, "message": self.message, "detail": self.detail}}


class BrokerUnreachable(ClientError):
    code = "BROKER_UNREACHABLE"

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach the broker at {url}: {reason}", {"url": url})
        self.url = url
        self.reason = reason


class BrokerErrorResponse(ClientError):
    def __init__(self, status: int, code: str, message: str, detail: Json) -> None:
        if status == 401 and code == TIMESTAMP_SKEWED:
            message = clock_skew_message(detail) or message
        super().__init__(message, detail)
        self.status = status
        self.code = code

    @property
    def refused(self) -> bool:
        """The ACL refused the request: unsigned, bad keys, clock skew (401) or not allowed (403)."""
        return self.status in (401, 403)

    @classmethod
    def from_response(cls, response: httpx.Response) -> BrokerErrorResponse:
        """The contract's envelope; anything else (a proxy's HTML page) as ``HTTP_<status>``."""
        try:
            error = response.json()["error"]
            return cls(
                response.status_code,
                str(error["code"]),
                str(error["message"]),
                dict(error.get("detail") or {}),
            )
        except (ValueError, KeyError, TypeError):
            text = response.text.strip()[:200] or response.reason_phrase
            return cls(response.status_code, f"HTTP_{response.status_code}", text, {})


class UnexpectedAnswer(ClientError):
    code = "UNEXPECTED_ANSWER"

    def __init__(self, url: str, status: int) -> None:
        super().__init__(
            f"the answer from {url} is not a halfmq broker's JSON (HTTP {status})",
            {"url": url, "status": status},
        )


def _segment(value: str) -> str:
    """One path segment: names such as ``%RETRY%g`` and ids with ``/`` stay one segment."""
    return quote(value, safe="")


class BrokerClient:
    """``with BrokerClient(url) as client: client.list_topics()``; with ``credentials`` every
    request is signed."""

    def __init__(
        self,
        base_url: str = DEFAULT_BROKER,
        *,
        timeout: float = 10.0,
        credentials: Credentials | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        auth = None if credentials is None else HalfmqAuth(credentials)
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, auth=auth)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- topics ----------------------------------------------------------------------------------

    def create_topic(
        self, name: str, queues: int | None = None, order: bool = False
    ) -> tuple[Json, bool]:
        """The topic, and whether it was created (False: it existed with this config)."""
        body: Json = {"name": name, "order": order}
        if queues is not None:
            body["queues"] = queues
        response = self._request("POST", "/v1/topics", json=body)
        return self._json(response), response.status_code == 201

    def list_topics(self) -> list[Json]:
        return self._list(self._request("GET", "/v1/topics"), "topics")

    def get_topic(self, name: str) -> Json:
        return self._json(self._request("GET", f"/v1/topics/{_segment(name)}"))

    def delete_topic(self, name: str) -> None:
        self._request("DELETE", f"/v1/topics/{_segment(name)}")

    # -- sending ---------------------------------------------------------------------------------

    def send(self, topic: str, message: Json) -> Json:
        path = f"/v1/topics/{_segment(topic)}/messages"
        return self._json(self._request("POST", path, json=message))

    # -- transactions ----------------------------------------------------------------------------

    def get_transaction(self, transaction_id: str) -> Json:
        path = f"/v1/transactions/{_segment(transaction_id)}"
        return self._json(self._request("GET", path))

    def list_transactions(
        self,
        state: str | None = None,
        producer_group: str | None = None,
        older_than_seconds: float | None = None,
        limit: int | None = None,
    ) -> list[Json]:
        params = _params(
            state=state,
            producer_group=producer_group,
            older_than_seconds=older_than_seconds,
            limit=limit,
        )
        return self._list(self._request("GET", "/v1/transactions", params=params), "transactions")

    def resolve_transaction(self, transaction_id: str, decision: str) -> Json:
        """An operator's commit or rollback (no producer group: resolved_by is "operator")."""
        path = f"/v1/transactions/{_segment(transaction_id)}/{decision}"
        return self._json(self._request("POST", path, json={}))

    def check_transaction(self, transaction_id: str) -> Json:
        path = f"/v1/transactions/{_segment(transaction_id)}/check"
        return self._json(self._request("POST", path))

    # -- queries ---------------------------------------------------------------------------------

    def get_message(self, msg_id: str) -> Json:
        return self._json(self._request("GET", f"/v1/messages/{_segment(msg_id)}"))

    def find_messages(
        self,
        topic: str | None = None,
        key: str | None = None,
        begin: str | int | None = None,
        end: str | int | None = None,
        limit: int | None = None,
    ) -> list[Json]:
        params = _params(topic=topic, key=key, begin=begin, end=end, limit=limit)
        return self._list(self._request("GET", "/v1/messages", params=params), "messages")

    # -- the ACL (mqadmin's ACL commands) --------------------------------------------------------

    def acl(self, part: str = "") -> Json:
        return self._json(self._request("GET", f"/v1/acl{part}"))

    def update_account(self, access_key: str, changes: Json) -> Json:
        path = f"/v1/acl/accounts/{_segment(access_key)}"
        return self._json(self._request("PUT", path, json=changes))

    def delete_account(self, access_key: str) -> None:
        self._request("DELETE", f"/v1/acl/accounts/{_segment(access_key)}")

    def update_global_white(self, addresses: list[str]) -> Json:
        return self._json(
            self._request("PUT", "/v1/acl/global-white", json={"addresses": addresses})
        )

    # -- transport -------------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise BrokerUnreachable(self.base_url, "no answer in time") from exc
        except httpx.TransportError as exc:
            raise BrokerUnreachable(self.base_url, str(exc) or type(exc).__name__) from exc
        if response.is_error:
            raise BrokerErrorResponse.from_response(response)
        return response

    def _json(self, response: httpx.Response) -> Json:
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise UnexpectedAnswer(self.base_url, response.status_code)
        return answer

    def _list(self, response: httpx.Response, field: str) -> list[Json]:
        items = self._json(response).get(field)
        if not isinstance(items, list):
            raise UnexpectedAnswer(self.base_url, response.status_code)
        return items


def _params(**values: Any) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}
