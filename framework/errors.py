"""One exception root for everything the client raises.

::

    HalfMQError                      root: catch this to catch everything below
    ├── ConfigurationError           the framework was set up wrongly (no handler, not started, ...)
    │   └── OneWayInTransactionError send_oneway from inside a local transaction
    ├── BrokerUnavailableError       no broker answered after every retry and failover
    ├── BrokerError                  a broker answered with an error envelope (status, code, detail)
    │   ├── InvalidRequestError      400 / 422
    │   ├── AuthenticationError      401: unsigned, unknown access key, bad signature, replayed nonce
    │   │   └── ClockSkewError       401 TIMESTAMP_SKEWED: this machine's clock is off (skew_seconds)
    │   ├── PermissionDeniedError    403: an address or a permission the ACL does not allow
    │   ├── NotFoundError            404
    │   ├── ConflictError            409
    │   ├── MessageTooLargeError     413
    │   └── BrokerBusyError          429 / 503 (retried first; raised when retries run out)
    ├── UnexpectedAnswerError        an answer that is not the contract's JSON (not a halfmq broker?)
    ├── BodyDecodeError              a message body that is not what its reader expected (JSON, UTF-8)
    └── SignatureRejected            a push check this producer's check server refused (401)

Every error carries the structured fields a caller needs: ``topic``, ``transaction_id``,
``msg_id`` where they are known, and for broker errors the HTTP ``status``, the broker's ``code``
and ``detail``.  401 and 403 are never retried: signing again with the same keys (or the same
clock) would be refused again.  No message ever holds a secret key.  Control flow of consumers
(ack/nack from a handler) is not an error: see :mod:`framework.consumer`.
"""

from __future__ import annotations

from typing import Any

from halfmq_wire.errors import AuthCode, error_body


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


class OneWayInTransactionError(ConfigurationError):
    """``send_oneway`` was called from inside a local transaction: a one-way send may be lost,
    and a transaction's messages must not be (``transaction_id`` names the transaction)."""


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


class AuthenticationError(BrokerError):
    """401: the broker could not tell who sent the request (``code``: ``SIGNATURE_MISSING``,
    ``ACCESS_KEY_UNKNOWN``, ``SIGNATURE_INVALID``, ``NONCE_REPLAYED``; docs/acl.md)."""


class ClockSkewError(AuthenticationError):
    """401 ``TIMESTAMP_SKEWED``: this machine's clock is ``skew_seconds`` off the broker's
    (positive: ahead), beyond the broker's window of ``window_seconds``."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.skew_seconds, self.window_seconds = _skew(self.detail)


class PermissionDeniedError(BrokerError):
    """403: the signature is good, but the ACL refuses this request (``code``:
    ``ADDRESS_NOT_ALLOWED`` or ``PERMISSION_DENIED``; ``detail`` names the resource and need)."""


class NotFoundError(BrokerError):
    """404: an unknown topic, group, transaction, message or receipt."""


class ConflictError(BrokerError):
    """409: e.g. the opposite decision was already taken, or a ``msg_id`` reused for other content."""


class MessageTooLargeError(BrokerError):
    """413: the body is over the broker's ``max_message_bytes``."""


class BrokerBusyError(BrokerError):
    """429 or 503: the broker shed load or was not ready, and the retries ran out."""


class UnexpectedAnswerError(HalfMQError):
    """A broker URL answered, but not with the contract's JSON (a proxy's page, another service):
    ``url`` is the broker's base URL, ``status`` the HTTP status of the answer."""

    def __init__(self, url: str, status: int, **fields: Any) -> None:
        message = f"the answer from {url} is not a halfmq broker's JSON (HTTP {status})"
        super().__init__(message, **fields)
        self.url = url
        self.status = status


class BodyDecodeError(HalfMQError, ValueError):
    """``Message.json()`` or ``Message.text`` met a body that is not JSON or not UTF-8 text: a
    producer sent another format to the topic.  ``expected`` names what the reader wanted; the
    error names the message and shows the body's start.  A ``ValueError``, as the decoders'."""

    def __init__(self, expected: str, body: bytes, reason: str, **fields: Any) -> None:
        start = body[:40].decode("utf-8", "replace") + ("..." if len(body) > 40 else "")
        message = f"the body is not {expected} ({reason}); it starts {start!r}"
        super().__init__(message, **fields)
        self.expected = expected


class SignatureRejected(HalfMQError):
    """A signed request this side refused: a push check whose signature does not verify against
    the producer's own credentials.  ``code`` is one of the contract's 401 codes (``AuthCode``)."""

    status = 401

    def __init__(self, code: str, message: str, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.detail = detail or {}

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"

    def envelope(self) -> dict[str, Any]:
        """The answer's body: the contract's error envelope, as the broker writes it."""
        return error_body(self.code, self.message, self.detail)


TIMESTAMP_SKEWED = AuthCode.TIMESTAMP_SKEWED  # the contract's code, kept under its old name
_BY_STATUS: dict[int, type[BrokerError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
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
    if status == 401 and code == TIMESTAMP_SKEWED:
        cls, message = ClockSkewError, clock_skew_message(detail) or message
    fields = {
        name: detail[name]
        for name in ("topic", "transaction_id", "msg_id")
        if isinstance(detail.get(name), str)
    }
    return cls(message, status=status, code=code, detail=detail, url=url, **fields)


def clock_skew_message(detail: dict[str, Any]) -> str | None:
    """What a ``TIMESTAMP_SKEWED`` refusal means for the user: how far their clock is off."""
    skew, window = _skew(detail)
    if skew is None:
        return None
    direction = "ahead of" if skew > 0 else "behind"
    allowed = "" if window is None else f" (allowed: ±{window:g} s)"
    return (
        f"the local clock is {abs(skew):.1f} s {direction} the broker's{allowed}: "
        "signed requests are refused until this machine's clock is corrected (NTP)"
    )


def _skew(detail: dict[str, Any]) -> tuple[float | None, float | None]:
    """``skew_seconds`` (the request's time minus the broker's) and ``window_seconds``."""

    def number(name: str) -> float | None:
        value = detail.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)

    skew = number("skew_seconds")
    request_ms, broker_ms = number("request_time_ms"), number("broker_time_ms")
    if skew is None and request_ms is not None and broker_ms is not None:
        skew = (request_ms - broker_ms) / 1000
    return skew, number("window_seconds")
