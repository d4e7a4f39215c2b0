"""One exception root for everything the client raises.

::

    HalfMQError                      root: catch this to catch everything below
    ├── ConfigurationError           the framework was set up wrongly (no handler, not started, ...)
    ├── BrokerUnavailableError       no broker answered after every retry and failover
    └── BrokerError                  a broker answered with an error envelope (status, code, detail)
        ├── InvalidRequestError      400 / 422
        ├── NotFoundError            404
        ├── ConflictError            409
        ├── MessageTooLargeError     413
        └── BrokerBusyError          429 / 503 (retried first; raised when retries run out)

Every error carries the structured fields a caller needs: ``topic``, ``transaction_id``,
``msg_id`` where they are known, and for broker errors the HTTP ``status``, the broker's ``code``
and ``detail``.  Control flow of consumers (ack/nack from a handler) is not an error: see
:mod:`framework.consumer`.
"""

from __future__ import annotations

from typing import Any


class HalfMQError(Exception):
    """The root of every error the framework raises."""

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        transaction_id: str | None = None,
        msg_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.topic = topic
        self.transaction_id = transaction_id
        self.msg_id = msg_id


class ConfigurationError(HalfMQError):
    """The framework was used in a way it cannot serve (a missing handler, not started...)."""


class BrokerUnavailableError(HalfMQError):
    """Every attempt on every broker failed without an answer (connection refused, time-outs)."""

    def __init__(
        self, message: str, *, urls: tuple[str, ...], attempts: int, **fields: Any
    ) -> None:
        super().__init__(message, **fields)
        self.urls = urls
        self.attempts = attempts


class BrokerError(HalfMQError):
    """A broker answered with ``{"error": {"code", "message", "detail"}}``."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str,
        detail: dict[str, Any] | None = None,
        url: str = "",
        **fields: Any,
    ) -> None:
        super().__init__(message, **fields)
        self.status = status
        self.code = code
        self.detail = detail or {}
        self.url = url

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


class InvalidRequestError(BrokerError):
    """400 or 422: the broker refused what was sent (bad names, values, system topics)."""


class NotFoundError(BrokerError):
    """404: an unknown topic, group, transaction, message or receipt."""


class ConflictError(BrokerError):
    """409: e.g. the opposite decision was already taken, or a ``msg_id`` reused for other content."""


class MessageTooLargeError(BrokerError):
    """413: the body is over the broker's ``max_message_bytes``."""


class BrokerBusyError(BrokerError):
    """429 or 503: the broker shed load or was not ready, and the retries ran out."""


_BY_STATUS: dict[int, type[BrokerError]] = {
    400: InvalidRequestError,
    404: NotFoundError,
    409: ConflictError,
    413: MessageTooLargeError,
    422: InvalidRequestError,
    429: BrokerBusyError,
    503: BrokerBusyError,
}


def broker_error(
    status: int, code: str, message: str, detail: dict[str, Any], url: str
) -> BrokerError:
    """The exception for one error answer, with the ids the broker put in its detail."""
    cls = _BY_STATUS.get(status, BrokerError)
    fields = {
        name: detail[name]
        for name in ("topic", "transaction_id", "msg_id")
        if isinstance(detail.get(name), str)
    }
    return cls(message, status=status, code=code, detail=detail, url=url, **fields)
