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

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar
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

P = ParamSpec("P")
T = TypeVar("T")


def sign(
    access_key: str, secret_key: str, method: str, url: str, body: bytes, now_ms: int
) -> dict[str, str]:
    """The ``Authorization`` header of a request the broker itself makes (a push check), signed
    with the secret of the producer's own access key, so that its check server can tell it from a
    forgery."""
    parts = urlsplit(url)
    return wire.sign(access_key, secret_key, method, parts.path or "/", parts.query, body, now_ms)


def _refusing(read: Callable[P, T]) -> Callable[P, T]:
    """``read`` of the contract, refusing as the ACL does: a :class:`wire.SignatureError` becomes
    an :class:`AclUnauthenticated` with the same code, message and detail."""

    @functools.wraps(read)
    def refusing(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return read(*args, **kwargs)
        except wire.SignatureError as refused:
            code = AclErrorCode(refused.code)
            raise AclUnauthenticated(code, refused.message, refused.detail) from None

    return refusing


# The four signed values of ASGI's raw headers; a malformed Authorization header is refused.
signed_fields = _refusing(wire.signed_fields)
# The signed request, or AclUnauthenticated with the reason's code: headers by name (verify) or
# ASGI's raw headers (verify_raw, the gate's path for every signed request).
verify = verify_raw = _refusing(wire.verify)
