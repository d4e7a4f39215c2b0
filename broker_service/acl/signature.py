"""The broker's side of signed requests: the canonical form and its verifier.

A client signs a request with one header::

    Authorization: HALFMQ-HMAC-SHA256 AccessKey=<key>, Timestamp=<ms>, Nonce=<nonce>, Signature=<hex>

the timestamp in Unix epoch milliseconds (decimal), the nonce 8-128 of ``A-Z a-z 0-9 _ -``, and
the signature the lowercase hex HMAC-SHA256 of the canonical request (UTF-8) keyed with the
account's secret key (UTF-8).  The same four values in four headers -- ``X-HalfMQ-AccessKey``,
``X-HalfMQ-Timestamp``, ``X-HalfMQ-Nonce``, ``X-HalfMQ-Signature``, the form before 2026-11-27 --
are accepted too.  The canonical request is these lines joined by ``"\\n"``, with no newline at
the end (docs/acl.md spells it out for clients in other languages)::

    HALFMQ-HMAC-SHA256
    <METHOD, upper case>
    <the path as sent on the wire, percent-encoded, without the query>
    <the canonical query>
    <lowercase hex SHA-256 of the raw body bytes>
    <the timestamp, as sent>
    <the nonce>
    <the access key>

:func:`verify` checks, in this order: the four values present (``SIGNATURE_MISSING``), each one
well formed (``SIGNATURE_INVALID``), the access key known (``ACCESS_KEY_UNKNOWN``), the signature
(``SIGNATURE_INVALID``, compared in constant time), and last the timestamp within the window
(``TIMESTAMP_SKEWED``): a client learns the broker's clock only with a valid signature.  The
nonce is the caller's to check against the store once this returns (``NONCE_REPLAYED``).
No message or detail ever holds a secret key or the signature the broker computed.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple, cast
from urllib.parse import quote, unquote_to_bytes, urlsplit

from broker_service.acl.errors import AclErrorCode, AclUnauthenticated

ALGORITHM = "HALFMQ-HMAC-SHA256"
ACCESS_KEY_HEADER = "X-HalfMQ-AccessKey"
TIMESTAMP_HEADER = "X-HalfMQ-Timestamp"
NONCE_HEADER = "X-HalfMQ-Nonce"
SIGNATURE_HEADER = "X-HalfMQ-Signature"
HEADERS = (ACCESS_KEY_HEADER, TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER)
AUTHORIZATION = "Authorization"
# The four values' names in the Authorization header, in the order it must give them.
AUTHORIZATION_FIELDS = ("AccessKey", "Timestamp", "Nonce", "Signature")
DEFAULT_WINDOW_MS = 300_000
EMPTY_BODY_SHA256 = hashlib.sha256(b"").hexdigest()

_TIMESTAMP = re.compile(r"[0-9]{1,15}")
_NONCE = re.compile(r"[A-Za-z0-9_-]{8,128}")
_SIGNATURE = re.compile(r"[0-9a-f]{64}")
_UNRESERVED = "-_.~"
# The Authorization header's value: the four fields in this order, each up to the next comma; each
# value's own form is checked afterwards, as the four headers' are.
_AUTHORIZATION = re.compile(
    ALGORITHM + r" AccessKey=([^,]*), ?Timestamp=([^,]*), ?Nonce=([^,]*), ?Signature=([^,]*)"
)
# ... and the same with each value's form, matched first: a well-formed header, the common case,
# is read and checked in one step.
_AUTHORIZATION_WELL_FORMED = re.compile(
    ALGORITHM + r" AccessKey=([A-Za-z0-9_.@-]{1,128}), ?Timestamp=([0-9]{1,15}), "
    r"?Nonce=([A-Za-z0-9_-]{8,128}), ?Signature=([0-9a-f]{64})"
)
_AUTHORIZATION_FORM = (
    f"{ALGORITHM} AccessKey=<access key>, Timestamp=<ms>, Nonce=<nonce>, Signature=<hex>"
)


class SignedFields(NamedTuple):
    """The four values a request was signed with (None where absent), and their names in the
    form the request used, for an error to name what the client sent."""

    values: Sequence[str | None]
    names: Sequence[str]
    checked: bool = False  # each value present and well formed


class SignedRequest(NamedTuple):
    """Who signed a request that verified, and the nonce the store must not have seen (a tuple:
    one is made for every signed request)."""

    access_key: str
    timestamp_ms: int
    nonce: str


def body_sha256(body: bytes) -> str:
    """Lowercase hex SHA-256 of ``body``: a copy of one empty SHA-256 context fed the body costs
    half of a new one (OpenSSL 3 looks the digest up and initialises it each time)."""
    digest = _SHA256.copy()
    digest.update(body)
    return digest.hexdigest()


_SHA256 = hashlib.sha256()


def canonical_query(raw_query: str) -> str:
    """``key=value`` pairs percent-decoded to bytes, re-encoded, sorted, joined with ``&``."""
    if not raw_query:
        return ""
    pairs = []
    for piece in raw_query.split("&"):
        if not piece:
            continue
        key, _, value = piece.partition("=")
        pairs.append((_reencode(key), _reencode(value)))
    return "&".join(f"{key}={value}" for key, value in sorted(pairs))


def canonical_request(
    method: str,
    path: str,
    raw_query: str,
    body_sha256_hex: str,
    timestamp: str,
    nonce: str,
    access_key: str,
) -> str:
    lines = (
        ALGORITHM,
        method.upper(),
        path,
        canonical_query(raw_query),
        body_sha256_hex,
        timestamp,
        nonce,
        access_key,
    )
    return "\n".join(lines)


def signature_of(secret_key: str, canonical: str) -> str:
    """HMAC-SHA256 (the standard library's ``hmac``), hex.  The HMAC keyed with a secret is made
    once per secret and copied per request (``HMAC.copy``: the key is not hashed again)."""
    mac = _keyed(secret_key).copy()
    mac.update(canonical.encode())
    return mac.hexdigest()


@functools.lru_cache(maxsize=1024)
def _keyed(secret_key: str) -> hmac.HMAC:
    return hmac.new(secret_key.encode(), digestmod=hashlib.sha256)


def sign(
    access_key: str, secret_key: str, method: str, url: str, body: bytes, now_ms: int
) -> dict[str, str]:
    """The ``Authorization`` header of a request the broker itself makes (a push check), signed
    with the secret of the producer's own access key, so that its check server can tell it from a
    forgery."""
    parts = urlsplit(url)
    nonce = secrets.token_urlsafe(18)
    timestamp = str(now_ms)
    canonical = canonical_request(
        method, parts.path or "/", parts.query, body_sha256(body), timestamp, nonce, access_key
    )
    signature = signature_of(secret_key, canonical)
    return {AUTHORIZATION: authorization(access_key, timestamp, nonce, signature)}


def authorization(access_key: str, timestamp: str, nonce: str, signature: str) -> str:
    """The ``Authorization`` header's value that carries a signature."""
    return (
        f"{ALGORITHM} AccessKey={access_key}, Timestamp={timestamp}, Nonce={nonce}, "
        f"Signature={signature}"
    )


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
    raw = [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()
    ]
    return verify_raw(raw, method, path, raw_query, body_sha256_hex, now_ms, secret_for, window_ms)


def signed_fields(raw_headers: Iterable[tuple[bytes, bytes]]) -> SignedFields:
    """The four signed values from ASGI's raw headers (whose names are in lower case), in one
    pass that builds nothing for the other headers: from ``Authorization: HALFMQ-HMAC-SHA256
    ...`` when there is one, else from the four ``X-HalfMQ-*`` headers."""
    values: list[str | None] = [None, None, None, None]
    for name, value in raw_headers:
        if name == b"authorization":
            text = value.decode("latin-1")
            found = _AUTHORIZATION_WELL_FORMED.fullmatch(text)
            if found is not None:
                return SignedFields(found.groups(), _AUTHORIZATION_NAMES, True)
            found = _AUTHORIZATION.fullmatch(text)
            if found is not None:  # a value is malformed: _checked says which
                return SignedFields(found.groups(), _AUTHORIZATION_NAMES)
            if text.startswith(ALGORITHM):
                raise AclUnauthenticated(
                    AclErrorCode.SIGNATURE_INVALID,
                    f"the Authorization header is malformed: it must be {_AUTHORIZATION_FORM}",
                    {"header": AUTHORIZATION},
                )
            continue  # another scheme: not a signature of ours
        index = _INDEX.get(name)
        if index is not None:
            values[index] = value.decode("latin-1")
    return SignedFields(values, HEADERS)


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
    fields = signed_fields(raw_headers)
    if fields.checked:
        access_key, timestamp, nonce, signature = cast(Sequence[str], fields.values)
    else:
        access_key, timestamp, nonce, signature = _checked(fields)
    secret = secret_for(access_key)
    if secret is None:
        raise AclUnauthenticated(
            AclErrorCode.ACCESS_KEY_UNKNOWN,
            f"access key {access_key!r} is unknown to this broker",
            {"access_key": access_key},
        )
    canonical = canonical_request(
        method, path, raw_query, body_sha256_hex, timestamp, nonce, access_key
    )
    if not hmac.compare_digest(signature_of(secret, canonical), signature):
        raise AclUnauthenticated(
            AclErrorCode.SIGNATURE_INVALID,
            "the signature does not match the request: check the secret key and the canonical"
            " form (docs/acl.md)",
            {"access_key": access_key},
        )
    timestamp_ms = int(timestamp)
    skew_ms = timestamp_ms - now_ms
    if abs(skew_ms) > window_ms:
        raise AclUnauthenticated(
            AclErrorCode.TIMESTAMP_SKEWED,
            f"the request's timestamp is {skew_ms / 1000:+.3f} s from the broker's clock"
            f" (allowed: ±{window_ms / 1000:g} s)",
            {
                "broker_time_ms": now_ms,
                "request_time_ms": timestamp_ms,
                "skew_seconds": skew_ms / 1000,
                "window_seconds": window_ms / 1000,
            },
        )
    return SignedRequest(access_key, timestamp_ms, nonce)


_LOWER = tuple(name.lower() for name in HEADERS)
_AUTHORIZATION_NAMES = tuple(f"{AUTHORIZATION} {name}" for name in AUTHORIZATION_FIELDS)
_INDEX = {low.encode("latin-1"): index for index, low in enumerate(_LOWER)}


def _checked(fields: SignedFields) -> tuple[str, str, str, str]:
    """The four values, each present (``SIGNATURE_MISSING``) and well formed
    (``SIGNATURE_INVALID``)."""
    access_key, timestamp, nonce, signature = fields.values
    if not (access_key and timestamp and nonce and signature):
        if not any(fields.values):
            raise AclUnauthenticated(
                AclErrorCode.SIGNATURE_MISSING,
                f"the request is not signed: send the header Authorization: {_AUTHORIZATION_FORM}"
                " (docs/acl.md)",
                {"missing": [AUTHORIZATION]},
            )
        missing = [
            name for name, value in zip(fields.names, fields.values, strict=True) if not value
        ]
        raise AclUnauthenticated(
            AclErrorCode.SIGNATURE_MISSING,
            f"the request is not signed: missing {', '.join(missing)}",
            {"missing": missing},
        )
    _, timestamp_name, nonce_name, signature_name = fields.names
    for name, value, pattern, form in (
        (timestamp_name, timestamp, _TIMESTAMP, "Unix epoch milliseconds, in decimal"),
        (nonce_name, nonce, _NONCE, "8-128 characters of A-Z a-z 0-9 _ -"),
        (signature_name, signature, _SIGNATURE, "64 lowercase hexadecimal digits"),
    ):
        if not pattern.fullmatch(value):
            raise AclUnauthenticated(
                AclErrorCode.SIGNATURE_INVALID,
                f"{name} is malformed: it must be {form}",
                {"header": name},
            )
    return access_key, timestamp, nonce, signature


def _reencode(text: str) -> str:
    return quote(unquote_to_bytes(text), safe=_UNRESERVED)
