"""The error shapes of the contract (docs/api.md, "Errors"), and the codes of a refused signature.

Every non-2xx answer is one envelope::

    {"error": {"code": "TOPIC_NOT_FOUND", "message": "...", "detail": {...}}}

and a request answered item by item (``POST /v1/transactions:batch``, ...) answers each failed
item as ``{"status": <the status it would have alone>, "error": {...}}``.  The broker writes
them with :func:`error_body` and :func:`error_item`; the client reads them with
:func:`read_error`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

INTERNAL = "INTERNAL"  # a 500: the broker's log says why, under the reference the detail gives


class AuthCode(StrEnum):
    """Why a request was refused before it was served (docs/acl.md, "Errors"): 401 when the
    receiver cannot tell who sent it or it is not fresh, 403 when the sender may not do it."""

    SIGNATURE_MISSING = "SIGNATURE_MISSING"
    ACCESS_KEY_UNKNOWN = "ACCESS_KEY_UNKNOWN"
    SIGNATURE_INVALID = "SIGNATURE_INVALID"
    TIMESTAMP_SKEWED = "TIMESTAMP_SKEWED"
    NONCE_REPLAYED = "NONCE_REPLAYED"
    ADDRESS_NOT_ALLOWED = "ADDRESS_NOT_ALLOWED"
    PERMISSION_DENIED = "PERMISSION_DENIED"

    @property
    def status(self) -> int:
        return 403 if self in _FORBIDDEN else 401


_FORBIDDEN = frozenset({AuthCode.ADDRESS_NOT_ALLOWED, AuthCode.PERMISSION_DENIED})


def error_body(code: str, message: str, detail: dict[str, Any] | None = None) -> dict[str, Any]:
    """The envelope of an error answer (the caller makes ``message`` and ``detail`` JSON-safe)."""
    return {"error": {"code": code, "message": message, "detail": detail or {}}}


def error_item(
    status: int, code: str, message: str, detail: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One item's error in an answer item by item: the status it would have alone, and its
    envelope's ``error``."""
    return {"status": status, **error_body(code, message, detail)}


def read_error(data: Any) -> tuple[str, str, dict[str, Any]] | None:
    """``(code, message, detail)`` of an envelope (a parsed JSON value), or None for anything
    that is not one (a proxy's page, another service's JSON).  A detail that is not an object
    comes back as ``{"detail": <it>}``."""
    try:
        error = data["error"]
        code, message = str(error["code"]), str(error["message"])
        detail = error.get("detail") or {}
    except (TypeError, KeyError, IndexError, AttributeError):
        return None
    return code, message, detail if isinstance(detail, dict) else {"detail": detail}
