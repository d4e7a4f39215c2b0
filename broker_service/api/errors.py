"""Every non-2xx answer is ``{"error": {"code", "message", "detail"}}`` -- never a stack trace.

The envelope's shape is the wire contract's (:mod:`halfmq_wire.errors`, which the client reads
with); this module maps the domain's errors and the web framework's to it, and keeps what it
echoes JSON-safe and free of secrets."""

from __future__ import annotations

import logging
import math
import secrets
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from broker_service.api.schemas.common import ErrorEnvelope
from broker_service.domain.errors import (
    Busy,
    Conflict,
    DomainError,
    Forbidden,
    InvalidName,
    InvalidRequest,
    MessageTooLarge,
    NotFound,
    NotReady,
    SystemTopic,
    Unauthenticated,
)
from broker_service.logs import redact
from halfmq_wire.errors import INTERNAL, error_body
from halfmq_wire.errors import error_item as wire_error_item

log = logging.getLogger("halfmq.api")

# Most specific first.
_STATUS: list[tuple[type[DomainError], int]] = [
    (InvalidName, 400),
    (SystemTopic, 400),
    (InvalidRequest, 422),
    (NotFound, 404),
    (Unauthenticated, 401),
    (Forbidden, 403),
    (Conflict, 409),
    (MessageTooLarge, 413),
    (Busy, 429),
    (NotReady, 503),
]

_HTTP_CODES = {
    400: "INVALID_JSON",  # FastAPI's only 400: a body it cannot parse (e.g. nested too deep)
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "MESSAGE_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
}


def envelope(status: int, code: str, message: str, **detail: Any) -> JSONResponse:
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return JSONResponse(
        error_body(code, _text(message), _plain(detail)),
        status_code=status,
        headers=headers,
    )


def status_of(error: DomainError) -> int:
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 500


def error_item(error: DomainError) -> dict[str, Any]:
    """A domain error as one item's answer in a request answered item by item (``POST
    /v1/transactions:batch``, ...): the status it would have alone, beside its envelope."""
    return wire_error_item(status_of(error), error.code, _text(error.message), _plain(error.detail))


def internal_item() -> dict[str, Any]:
    """An item that failed the way a request fails with 500: no stack trace, only a pointer."""
    return wire_error_item(500, INTERNAL, "the broker failed to handle this item; see its log")


def _plain(value: Any) -> Any:
    """Validation details may hold exceptions and bytes; keep them JSON-safe."""
    if isinstance(value, dict):
        return {_text(str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    return _text(str(value))


def _text(value: str) -> str:
    """Echoed input may hold lone surrogates, which UTF-8 cannot carry: replace them; a password
    or token (a store error naming its URL) is masked."""
    return redact(value.encode("utf-8", errors="replace").decode("utf-8"))


async def _broker_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DomainError)
    return envelope(status_of(exc), exc.code, exc.message, **exc.detail)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": _plain(list(e.get("loc", ()))), "msg": str(e.get("msg", "")), "type": e.get("type")}
        for e in exc.errors()
    ]
    if any(e["type"] == "json_invalid" for e in errors):
        return envelope(400, "INVALID_JSON", "the request body is not valid JSON", errors=errors)
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(p) for p in first["loc"] if p != "body")
    return envelope(422, "INVALID_REQUEST", f"{where or 'request'}: {first['msg']}", errors=errors)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "HTTP_ERROR")
    response = envelope(exc.status_code, code, str(exc.detail))
    if exc.headers:
        response.headers.update(exc.headers)
    if exc.status_code == 405:
        response.headers["Allow"] = allowed_methods(request) or response.headers.get("Allow", "")
    return response


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> str:
    """Every method the path answers, across its routes (Starlette's 405 names only the first
    route's, and ``GET /v1/topics`` and ``POST /v1/topics`` are two routes): each method is
    tried against the router as the request with that method."""
    routes = request.app.router.routes
    return ", ".join(
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    )


def error_reference() -> str:
    """A reference for one failure: the client is answered it, the log says the detail under it."""
    return secrets.token_hex(6)


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    reference = error_reference()
    log.error("unexpected error, reference %s", reference, exc_info=exc)
    return envelope(500, INTERNAL, "the broker failed to handle the request; its log says "
                    f"why under reference {reference}", reference=reference)  # fmt: skip


def install(app: FastAPI) -> None:
    app.add_exception_handler(DomainError, _broker_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorEnvelope, "description": description}
    for status, description in {
        400: "Malformed JSON, a bad name, or a Host the broker does not answer to (INVALID_HOST)",
        401: "ACL on: unsigned (SIGNATURE_MISSING), unknown key (ACCESS_KEY_UNKNOWN), bad signature "
        "(SIGNATURE_INVALID), timestamp outside the window (TIMESTAMP_SKEWED) or a replayed "
        "nonce (NONCE_REPLAYED)",
        403: "ACL on: address not white-listed (ADDRESS_NOT_ALLOWED) or permission missing "
        "(PERMISSION_DENIED); a callback host the broker does not allow (CALLBACK_NOT_ALLOWED)",
        404: "Unknown topic, transaction or message",
        409: "Conflict with what is stored",
        413: "Body over max_message_bytes",
        422: "Wrong types or bad values",
        429: "The broker sheds load",
        431: "Over max_headers headers or max_header_bytes of them (HEADERS_TOO_LARGE)",
        503: "Not ready",
    }.items()
}
