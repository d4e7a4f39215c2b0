"""The request signature, one implementation for both sides (docs/acl.md, "Signed requests").

A client signs each request to the broker, and the broker signs each push check to a producer's
check server, with one header::

    Authorization: HALFMQ-HMAC-SHA256 AccessKey=<key>, Timestamp=<ms>, Nonce=<nonce>, Signature=<hex>

the timestamp in Unix epoch milliseconds (decimal), the nonce 8-128 of ``A-Z a-z 0-9 _ -``, and
the signature the lowercase hex HMAC-SHA256 of the canonical request (UTF-8) keyed with the
account's secret key (UTF-8).  The same four values in four headers -- ``X-HalfMQ-AccessKey``,
``X-HalfMQ-Timestamp``, ``X-HalfMQ-Nonce``, ``X-HalfMQ-Signature``, the form before 2026-11-27 --
are accepted too.  The canonical request is these lines joined by ``"\\n"``, with no newline at
the end::

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
(``TIMESTAMP_SKEWED``): a sender learns the receiver's clock only with a valid signature.  It
raises :class:`SignatureError`, which each side turns into its own exception; the nonce is the
receiver's to remember (the broker's store, a check server's memory: ``NONCE_REPLAYED``).  No
message or detail ever holds a secret key or the signature the receiver computed.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, cast
from urllib.parse import quote, unquote_to_bytes

from halfmq_wire.errors import AuthCode

ALGORITHM = "HALFMQ-HMAC-SHA256"
ACCESS_KEY_HEADER = "X-HalfMQ-AccessKey"
TIMESTAMP_HEADER = "X-HalfMQ-Timestamp"
NONCE_HEADER = "X-HalfMQ-Nonce"
SIGNATURE_HEADER = "X-HalfMQ-Signature"
HEADERS = (ACCESS_KEY_HEADER, TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER)
AUTHORIZATION = "Authorization"
# The four values' names in the Authorization header, in the order it must give them.
AUTHORIZATION_FIELDS = ("AccessKey", "Timestamp", "Nonce", "Signature")
WINDOW_MS = 300_000  # a signed request is good for ±5 minutes of the receiver's clock
EMPTY_BODY_SHA256 = hashlib.sha256(b"").hexdigest()

NONCE = re.compile(r"[A-Za-z0-9_-]{8,128}")
_TIMESTAMP = re.compile(r"[0-9]{1,15}")
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
AUTHORIZATION_FORM = (
    f"{ALGORITHM} AccessKey=<access key>, Timestamp=<ms>, Nonce=<nonce>, Signature=<hex>"
)


class SignatureError(Exception):
    """A signed request refused: ``code`` (a 401 :class:`~halfmq_wire.errors.AuthCode`), a
    message for the sender, and the detail of the error envelope."""

    def __init__(self, code: AuthCode, message: str, detail: dict[str, Any]) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail


class SignedFields(NamedTuple):
    """The four values a request was signed with (None where absent), and their names in the
    form the request used, for an error to name what the sender sent."""

    values: Sequence[str | None]
    names: Sequence[str]
    checked: bool = False  # each value present and well formed


class SignedRequest(NamedTuple):
    """Who signed a request that verified, when, and the nonce the receiver must not have seen
    before (a tuple: one is made for every signed request)."""

    access_key: str
    timestamp_ms: int
    nonce: str


# -- signing ------------------------------------------------------------------------------------


def body_sha256(body: bytes) -> str:
    """Lowercase hex SHA-256 of ``body``: a copy of one empty SHA-256 context fed the body costs
    less than a new one (OpenSSL 3 looks the digest up and initialises it each time)."""
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
    """The eight lines that are signed (``path`` percent-encoded, as on the wire)."""
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


def new_nonce() -> str:
    """A fresh nonce: 24 characters of the nonce's alphabet (18 random bytes)."""
    return secrets.token_urlsafe(18)


def authorization(access_key: str, timestamp: str, nonce: str, signature: str) -> str:
    """The ``Authorization`` header's value that carries a signature."""
    return (
        f"{ALGORITHM} AccessKey={access_key}, Timestamp={timestamp}, Nonce={nonce}, "
        f"Signature={signature}"
    )


def sign(
    access_key: str,
    secret_key: str,
    method: str,
    path: str,
    raw_query: str,
    body: bytes,
    now_ms: int,
    nonce: str | None = None,
) -> dict[str, str]:
    """The ``Authorization`` header that signs one request (``path`` percent-encoded, as on the
    wire; ``raw_query`` what follows ``?``); a fresh nonce unless one is given."""
    if nonce is None:
        nonce = new_nonce()
    elif not NONCE.fullmatch(nonce):
        raise ValueError("a nonce is 8-128 characters of A-Z a-z 0-9 _ -")
    timestamp = str(now_ms)
    canonical = canonical_request(
        method, path, raw_query, body_sha256(body), timestamp, nonce, access_key
    )
    signature = signature_of(secret_key, canonical)
    return {AUTHORIZATION: authorization(access_key, timestamp, nonce, signature)}


# -- reading and verifying ----------------------------------------------------------------------


def signed_fields(raw_headers: Iterable[tuple[bytes, bytes]]) -> SignedFields:
    """The four signed values from raw headers whose names are in lower case (ASGI's), in one
    pass that builds nothing for the other headers: from ``Authorization: HALFMQ-HMAC-SHA256
    ...`` when there is one, else from the four ``X-HalfMQ-*`` headers.  An Authorization header
    of this scheme that is not in its form is ``SIGNATURE_INVALID``."""
    values: list[str | None] = [None, None, None, None]
    for name, value in raw_headers:
        if name == b"authorization":
            text = value.decode("latin-1")
            found = _AUTHORIZATION_WELL_FORMED.fullmatch(text)
            if found is not None:
                return SignedFields(found.groups(), _AUTHORIZATION_NAMES, True)
            found = _AUTHORIZATION.fullmatch(text)
            if found is not None:  # a value is malformed: checked() says which
                return SignedFields(found.groups(), _AUTHORIZATION_NAMES)
            if text.startswith(ALGORITHM):
                raise SignatureError(
                    AuthCode.SIGNATURE_INVALID,
                    f"the Authorization header is malformed: it must be {AUTHORIZATION_FORM}",
                    {"header": AUTHORIZATION},
                )
            continue  # another scheme: not a signature of ours
        index = _INDEX.get(name)
        if index is not None:
            values[index] = value.decode("latin-1")
    return SignedFields(values, HEADERS)


def raw_headers(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    """Headers by name (any case) as :func:`signed_fields` reads them (a character HTTP cannot
    carry becomes ``?``: a value with one is malformed, not a crash)."""
    return [
        (name.lower().encode("latin-1", "replace"), value.encode("latin-1", "replace"))
        for name, value in headers.items()
    ]


def checked(fields: SignedFields) -> tuple[str, str, str, str]:
    """The four values, each present (``SIGNATURE_MISSING``) and well formed
    (``SIGNATURE_INVALID``)."""
    if fields.checked:  # the well-formed header's groups: a tuple of four strings already
        return cast(tuple[str, str, str, str], fields.values)
    access_key, timestamp, nonce, signature = fields.values
    if not (access_key and timestamp and nonce and signature):
        raise _missing(fields)
    _, timestamp_name, nonce_name, signature_name = fields.names
    for name, value, pattern, form in (
        (timestamp_name, timestamp, _TIMESTAMP, "Unix epoch milliseconds, in decimal"),
        (nonce_name, nonce, NONCE, "8-128 characters of A-Z a-z 0-9 _ -"),
        (signature_name, signature, _SIGNATURE, "64 lowercase hexadecimal digits"),
    ):
        if not pattern.fullmatch(value):
            raise SignatureError(
                AuthCode.SIGNATURE_INVALID,
                f"{name} is malformed: it must be {form}",
                {"header": name},
            )
    return access_key, timestamp, nonce, signature


Headers = Iterable[tuple[bytes, bytes]] | Mapping[str, str]  # raw (ASGI's), or by name


def verify(
    headers: Headers,
    method: str,
    path: str,
    raw_query: str,
    body_sha256_hex: str,
    now_ms: int,
    secret_for: Callable[[str], str | None],
    window_ms: int = WINDOW_MS,
    receiver: str = "broker",
) -> SignedRequest:
    """The signed request, or :class:`SignatureError` with the reason's code.  ``headers``: ASGI's
    raw headers (names in lower case), or a mapping by name in any case; ``secret_for`` is the
    receiver's lookup of an access key's secret (None: unknown); ``receiver`` names it in
    messages and in the skew's detail (``<receiver>_time_ms``)."""
    raw = raw_headers(headers) if isinstance(headers, Mapping) else headers
    access_key, timestamp, nonce, signature = checked(signed_fields(raw))
    secret = secret_for(access_key)
    if secret is None:
        raise SignatureError(
            AuthCode.ACCESS_KEY_UNKNOWN,
            f"access key {access_key!r} is unknown to this {receiver}",
            {"access_key": access_key},
        )
    canonical = canonical_request(
        method, path, raw_query, body_sha256_hex, timestamp, nonce, access_key
    )
    if not hmac.compare_digest(signature_of(secret, canonical), signature):
        raise SignatureError(
            AuthCode.SIGNATURE_INVALID,
            "the signature does not match the request: check the secret key and the canonical"
            " form (docs/acl.md)",
            {"access_key": access_key},
        )
    timestamp_ms = int(timestamp)
    skew_ms = timestamp_ms - now_ms
    if abs(skew_ms) > window_ms:
        raise _skewed(receiver, now_ms, timestamp_ms, window_ms)
    return SignedRequest(access_key, timestamp_ms, nonce)


_AUTHORIZATION_NAMES = tuple(f"{AUTHORIZATION} {name}" for name in AUTHORIZATION_FIELDS)
_INDEX = {name.lower().encode("latin-1"): index for index, name in enumerate(HEADERS)}


def _missing(fields: SignedFields) -> SignatureError:
    """``SIGNATURE_MISSING``: nothing signed (told the header to send), or the values absent."""
    if not any(fields.values):
        return SignatureError(
            AuthCode.SIGNATURE_MISSING,
            f"the request is not signed: send the header Authorization: {AUTHORIZATION_FORM}"
            " (docs/acl.md)",
            {"missing": [AUTHORIZATION]},
        )
    missing = [name for name, value in zip(fields.names, fields.values, strict=True) if not value]
    return SignatureError(
        AuthCode.SIGNATURE_MISSING,
        f"the request is not signed: missing {', '.join(missing)}",
        {"missing": missing},
    )


def _skewed(receiver: str, now_ms: int, timestamp_ms: int, window_ms: int) -> SignatureError:
    skew_ms = timestamp_ms - now_ms
    return SignatureError(
        AuthCode.TIMESTAMP_SKEWED,
        f"the request's timestamp is {skew_ms / 1000:+.3f} s from the {receiver}'s clock"
        f" (allowed: ±{window_ms / 1000:g} s)",
        {
            f"{receiver}_time_ms": now_ms,
            "request_time_ms": timestamp_ms,
            "skew_seconds": skew_ms / 1000,
            "window_seconds": window_ms / 1000,
        },
    )


def _reencode(text: str) -> str:
    return quote(unquote_to_bytes(text), safe=_UNRESERVED)
