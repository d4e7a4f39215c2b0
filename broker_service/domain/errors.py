"""The domain's exceptions (the client library's own root is ``framework.errors.BrokerError``).

::

    DomainError                      (code, message, detail)
     +-- InvalidRequest              bad names, bad values             -> 400/422
     |    +-- InvalidName
     |    +-- SystemTopic
     +-- NotFound                    unknown topic, transaction, ...   -> 404
     +-- Conflict                    the request contradicts the store -> 409
     +-- MessageTooLarge                                               -> 413
     +-- Busy                        shedding load                     -> 429
     +-- NotReady                    store unreachable, schema old     -> 503
     +-- Unauthenticated             a replayed signed request         -> 401
     +-- Forbidden                   signed and known, not allowed     -> 403

The HTTP adapter maps each class to its status; the domain never speaks HTTP.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    code = "BROKER_ERROR"

    def __init__(self, message: str, *, code: str | None = None, **detail: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.detail: dict[str, Any] = detail


class InvalidRequest(DomainError):
    code = "INVALID_REQUEST"


class InvalidName(InvalidRequest):
    code = "INVALID_NAME"


class SystemTopic(InvalidRequest):
    code = "SYSTEM_TOPIC"


class NotFound(DomainError):
    code = "NOT_FOUND"


def missing(what: str, value: str, code: str, purged_at: int | None, **detail: Any) -> NotFound:
    """404 for an id the store does not hold: ``{code}_NOT_FOUND`` when it never existed,
    ``{code}_EXPIRED`` when retention purged it (``purged_at``, ms)."""
    if purged_at is None:
        return NotFound(f"{what} {value!r} does not exist", code=f"{code}_NOT_FOUND", **detail)
    return NotFound(
        f"{what} {value!r} expired: retention purged it", code=f"{code}_EXPIRED", **detail
    )


class Conflict(DomainError):
    code = "CONFLICT"


class MessageTooLarge(DomainError):
    code = "MESSAGE_TOO_LARGE"


class Busy(DomainError):
    code = "BUSY"


class NotReady(DomainError):
    code = "NOT_READY"


class Unauthenticated(DomainError):
    """The request cannot be taken as its signer's (a nonce already used: a replay)."""

    code = "UNAUTHENTICATED"


class Forbidden(DomainError):
    """Signed and known, but not allowed (a callback URL on a host the operator does not allow)."""

    code = "FORBIDDEN"
