"""The broker's side of signed requests: the contract's verifier (``halfmq_wire.signature``,
shared with the client library), refusing with the ACL's own errors.

The canonical request, its HMAC, the header names and how they are read are the wire contract's
(docs/acl.md, "Signed requests"); this module adds only what is the broker's: a refusal is an
:class:`~broker_service.acl.errors.AclUnauthenticated` (the gate answers its envelope), and the
broker signs its push checks to a producer's check server with the producer's own keys.  The
nonce is the caller's to check against the store once :func:`verify_raw` returns
(``NONCE_REPLAYED``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from urllib.parse import urlsplit

from broker_service.acl.errors import AclErrorCode, AclUnauthenticated
from halfmq_wire import signature as wire
from halfmq_wire.signature import (
    EMPTY_BODY_SHA256,
    HEADERS,
    SIGNATURE_HEADER,
    SignedFields,
    SignedRequest,
    body_sha256,
    canonical_query,
    canonical_request,
    signature_of,
)

# What the rest of the broker imports from here: the contract's names, re-exported.
__all__ = [
    "EMPTY_BODY_SHA256",
    "HEADERS",
    "SIGNATURE_HEADER",
    "SignedFields",
    "SignedRequest",
    "body_sha256",
    "canonical_query",
    "canonical_request",
    "sign",
    "signature_of",
    "signed_fields",
    "verify",
    "verify_raw",
]
DEFAULT_WINDOW_MS = wire.WINDOW_MS


def sign(
    access_key: str, secret_key: str, method: str, url: str, body: bytes, now_ms: int
) -> dict[str, str]:
    """The ``Authorization`` header of a request the broker itself makes (a push check), signed
    with the secret of the producer's own access key, so that its check server can tell it from a
    forgery."""
    parts = urlsplit(url)
    return wire.sign(access_key, secret_key, method, parts.path or "/", parts.query, body, now_ms)


def signed_fields(raw_headers: Iterable[tuple[bytes, bytes]]) -> SignedFields:
    """The four signed values of ASGI's raw headers (:func:`halfmq_wire.signature.signed_fields`);
    a malformed ``Authorization`` header is refused."""
    try:
        return wire.signed_fields(raw_headers)
    except wire.SignatureError as refused:
        raise _unauthenticated(refused) from None


def verify(
    headers: Mapping[str, str],
    method: str,
    path: str,
    raw_query: str,
    body_sha256_hex: str,
    now_ms: int,
    secret_for: Callable[[str], str | None],
    window_ms: int = DEFAULT_WINDOW_MS,
) -> SignedRequest:
    """The signed request, or :class:`AclUnauthenticated` with the reason's code."""
    raw = wire.raw_headers(headers)
    return verify_raw(raw, method, path, raw_query, body_sha256_hex, now_ms, secret_for, window_ms)


def verify_raw(
    raw_headers: Iterable[tuple[bytes, bytes]],
    method: str,
    path: str,
    raw_query: str,
    body_sha256_hex: str,
    now_ms: int,
    secret_for: Callable[[str], str | None],
    window_ms: int = DEFAULT_WINDOW_MS,
) -> SignedRequest:
    """:func:`verify` of ASGI's raw headers: the gate's path for every signed request."""
    try:
        fields = wire.signed_fields(raw_headers)
        return wire.verify(
            fields, method, path, raw_query, body_sha256_hex, now_ms, secret_for, window_ms
        )
    except wire.SignatureError as refused:
        raise _unauthenticated(refused) from None


def _unauthenticated(refused: wire.SignatureError) -> AclUnauthenticated:
    return AclUnauthenticated(AclErrorCode(refused.code), refused.message, refused.detail)
