"""Signed requests with a broker that runs with an ACL (docs/acl.md, "Signed requests").

::

    credentials = Credentials.from_env()          # HALFMQ_ACCESS_KEY / HALFMQ_SECRET_KEY
    client = httpx.Client(auth=HalfmqAuth(credentials))

Outgoing: :func:`sign_headers` builds the ``Authorization: HALFMQ-HMAC-SHA256 ...`` header;
:class:`HalfmqAuth` adds it to every request of an ``httpx.Client`` or ``httpx.AsyncClient`` (one
generator drives both).

Incoming: the broker signs each push check with the producer's own keys (the ones it heartbeats
with).  :func:`verify_headers` is the pure check of one request's headers (the client-side twin of
the broker's verifier), and a :class:`CheckVerifier` adds what a check server remembers: the
nonces already seen inside the window.  Both raise :class:`~framework.errors.SignatureRejected`
with the broker's own 401 codes.

This is the client's own implementation of the documented canonical form: it shares no code with
the broker, so each side is a check on the other.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import hmac
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import TypeAlias
from urllib.parse import quote, unquote_to_bytes

import httpx

from framework.errors import ConfigurationError, SignatureRejected

ALGORITHM = "HALFMQ-HMAC-SHA256"
ACCESS_KEY_HEADER = "X-HalfMQ-AccessKey"
TIMESTAMP_HEADER = "X-HalfMQ-Timestamp"
NONCE_HEADER = "X-HalfMQ-Nonce"
SIGNATURE_HEADER = "X-HalfMQ-Signature"
ACCESS_KEY_ENV = "HALFMQ_ACCESS_KEY"
SECRET_KEY_ENV = "HALFMQ_SECRET_KEY"
HEADERS = (ACCESS_KEY_HEADER, TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER)
AUTHORIZATION_HEADER = "Authorization"
WINDOW_MS = 300_000  # a signed request is good for ±5 minutes of the receiver's clock

_TIMESTAMP = re.compile(r"[0-9]{1,15}")
_NONCE = re.compile(r"[A-Za-z0-9_-]{8,128}")
_SIGNATURE = re.compile(r"[0-9a-f]{64}")
_AUTHORIZATION = re.compile(
    ALGORITHM + r" AccessKey=([^,]*), ?Timestamp=([^,]*), ?Nonce=([^,]*), ?Signature=([^,]*)"
)


@dataclass(frozen=True)
class Credentials:
    """An ACL account's keys; the secret never shows in ``repr`` or ``str``."""

    access_key: str
    secret_key: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ConfigurationError("credentials need both an access key and a secret key")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Credentials | None:
        """Both variables set: credentials; neither: None; only one: a ConfigurationError."""
        access_key = environ.get(ACCESS_KEY_ENV, "")
        secret_key = environ.get(SECRET_KEY_ENV, "")
        if not access_key and not secret_key:
            return None
        if not access_key or not secret_key:
            given, absent = (
                (SECRET_KEY_ENV, ACCESS_KEY_ENV) if secret_key else (ACCESS_KEY_ENV, SECRET_KEY_ENV)
            )
            raise ConfigurationError(f"{given} is set but {absent} is not: set both or neither")
        return cls(access_key, secret_key)


CredentialsLike: TypeAlias = Credentials | tuple[str, str] | None


def resolve_credentials(credentials: CredentialsLike) -> Credentials | None:
    """What a client signs with: the given keys (a :class:`Credentials` or an ``(access_key,
    secret_key)`` pair), or, when ``None``, ``HALFMQ_ACCESS_KEY`` / ``HALFMQ_SECRET_KEY`` read now
    (neither set: ``None``, the client sends unsigned requests)."""
    if credentials is None:
        return Credentials.from_env()
    if isinstance(credentials, Credentials):
        return credentials
    if (
        isinstance(credentials, tuple)
        and len(credentials) == 2
        and all(isinstance(key, str) for key in credentials)
    ):
        return Credentials(*credentials)
    # never echo the value: it holds a secret
    raise ConfigurationError(
        "credentials are Credentials(access_key, secret_key) or an (access_key, secret_key) "
        f"pair of strings, not a {type(credentials).__name__}"
    )


def sign_headers(
    credentials: Credentials,
    method: str,
    path: str,
    raw_query: str,
    body: bytes,
    now_ms: int | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """The ``Authorization`` header that signs this request (``path`` percent-encoded, as on the
    wire)."""
    timestamp = str(_now_ms() if now_ms is None else now_ms)
    if nonce is None:
        nonce = secrets.token_urlsafe(18)  # 24 characters of the nonce's alphabet
    elif not _NONCE.fullmatch(nonce):
        raise ValueError("a nonce is 8-128 characters of A-Z a-z 0-9 _ -")
    access_key = credentials.access_key
    canonical = canonical_request(method, path, raw_query, body, timestamp, nonce, access_key)
    signature = _signature(credentials, canonical)
    return {
        AUTHORIZATION_HEADER: f"{ALGORITHM} AccessKey={access_key}, Timestamp={timestamp}, "
        f"Nonce={nonce}, Signature={signature}"
    }


def canonical_request(
    method: str, path: str, raw_query: str, body: bytes, timestamp: str, nonce: str, access_key: str
) -> str:
    """The eight lines that are signed (docs/acl.md, "The canonical request")."""
    lines = (
        ALGORITHM,
        method.upper(),
        path,
        _canonical_query(raw_query),
        hashlib.sha256(body).hexdigest(),
        timestamp,
        nonce,
        access_key,
    )
    return "\n".join(lines)


class HalfmqAuth(httpx.Auth):
    """Signs every request of an ``httpx.Client`` or ``httpx.AsyncClient``."""

    requires_request_body = True

    def __init__(self, credentials: Credentials, clock_ms: Callable[[], int] | None = None) -> None:
        self.credentials = credentials
        self.clock_ms = clock_ms

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        path, _, raw_query = request.url.raw_path.decode("ascii").partition("?")
        now_ms = None if self.clock_ms is None else self.clock_ms()
        request.headers.update(
            sign_headers(self.credentials, request.method, path, raw_query, request.content, now_ms)
        )
        yield request


# -- verifying a signed request (the broker's push checks) ---------------------------------------


@dataclass(frozen=True)
class SignedCheck:
    """A request whose signature verified: who signed it, when, and its nonce."""

    access_key: str
    timestamp_ms: int
    nonce: str


def verify_headers(
    credentials: Credentials,
    headers: Mapping[str, str],
    method: str,
    path: str,
    raw_query: str,
    body: bytes,
    *,
    now_ms: int,
    window_ms: int = WINDOW_MS,
) -> SignedCheck:
    """Check a request signed with ``credentials``, as the broker checks a client's: the
    ``Authorization`` header, or the four ``X-HalfMQ-*`` headers of the earlier form, present
    (``SIGNATURE_MISSING``) and well formed (``SIGNATURE_INVALID``), the access
    key ours (``ACCESS_KEY_UNKNOWN``), the signature (``SIGNATURE_INVALID``, in constant time),
    then the timestamp within ``window_ms`` of ``now_ms`` (``TIMESTAMP_SKEWED``).  ``path`` is as
    received, still percent-encoded; ``raw_query`` what follows ``?``.  The nonce is the caller's
    to remember (:class:`CheckVerifier`).  Raises :class:`~framework.errors.SignatureRejected`."""
    access_key, timestamp, nonce, signature = _read_headers(headers)
    if access_key != credentials.access_key:
        raise SignatureRejected(
            "ACCESS_KEY_UNKNOWN",
            f"access key {access_key!r} is not the one this producer heartbeats with",
            {"access_key": access_key},
        )
    canonical = canonical_request(method, path, raw_query, body, timestamp, nonce, access_key)
    if not hmac.compare_digest(_signature(credentials, canonical), signature):
        raise SignatureRejected(
            "SIGNATURE_INVALID",
            "the signature does not match the request: a forged or altered check, or the "
            "broker holds another secret key for this access key",
            {"access_key": access_key},
        )
    timestamp_ms = int(timestamp)
    skew_ms = timestamp_ms - now_ms
    if abs(skew_ms) > window_ms:
        raise SignatureRejected(
            "TIMESTAMP_SKEWED",
            f"the request's timestamp is {skew_ms / 1000:+.3f} s from this producer's clock "
            f"(allowed: ±{window_ms / 1000:g} s): an old request replayed, or a clock is off",
            {
                "producer_time_ms": now_ms,
                "request_time_ms": timestamp_ms,
                "skew_seconds": skew_ms / 1000,
                "window_seconds": window_ms / 1000,
            },
        )
    return SignedCheck(access_key, timestamp_ms, nonce)


class CheckVerifier:
    """What one check server runs before answering a check: :func:`verify_headers`, then the
    nonce, refused (``NONCE_REPLAYED``) when seen before inside the window.  The nonces live in
    memory (one producer process), each until its timestamp leaves the window, at most
    ``max_nonces`` of them (the soonest to expire goes first).  Safe to share between threads."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        window_ms: int = WINDOW_MS,
        max_nonces: int = 100_000,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.credentials = credentials
        self.window_ms = window_ms
        self.max_nonces = max_nonces
        self.clock_ms = clock_ms or _now_ms
        self._seen: set[str] = set()
        self._expiries: list[tuple[int, str]] = []  # a heap: (expiry ms, nonce)
        self._lock = threading.Lock()

    def verify(
        self, headers: Mapping[str, str], method: str, path: str, raw_query: str, body: bytes
    ) -> SignedCheck:
        now_ms = self.clock_ms()
        signed = verify_headers(
            self.credentials,
            headers,
            method,
            path,
            raw_query,
            body,
            now_ms=now_ms,
            window_ms=self.window_ms,
        )
        if not self._first_use(signed, now_ms):
            raise SignatureRejected(
                "NONCE_REPLAYED",
                "this check's nonce was already used: a replayed check is refused",
                {"access_key": signed.access_key},
            )
        return signed

    def _first_use(self, signed: SignedCheck, now_ms: int) -> bool:
        with self._lock:
            while self._expiries and self._expiries[0][0] < now_ms:  # refused for age anyway
                self._seen.discard(heapq.heappop(self._expiries)[1])
            if signed.nonce in self._seen:
                return False
            while len(self._expiries) >= self.max_nonces:  # room: forget the soonest to expire
                self._seen.discard(heapq.heappop(self._expiries)[1])
            self._seen.add(signed.nonce)
            heapq.heappush(self._expiries, (signed.timestamp_ms + self.window_ms, signed.nonce))
            return True


def check_verifier(credentials: Credentials | None) -> CheckVerifier | None:
    """The verifier of a producer's check server; ``None`` (checks accepted unsigned, as a broker
    without ACL sends them) when the producer has no credentials."""
    return None if credentials is None else CheckVerifier(credentials)


def _read_headers(headers: Mapping[str, str]) -> tuple[str, str, str, str]:
    lowered = {name.lower(): value for name, value in headers.items()}
    names: tuple[str, ...] = HEADERS
    values = [lowered.get(name.lower(), "") for name in HEADERS]
    authorization = lowered.get("authorization", "")
    if authorization.startswith(ALGORITHM):
        found = _AUTHORIZATION.fullmatch(authorization)
        if found is None:
            raise SignatureRejected(
                "SIGNATURE_INVALID",
                f"the Authorization header is malformed: it must be {ALGORITHM} AccessKey=..., "
                "Timestamp=..., Nonce=..., Signature=...",
                {"header": AUTHORIZATION_HEADER},
            )
        names = tuple(f"{AUTHORIZATION_HEADER} {name}" for name in _AUTHORIZATION_FIELDS)
        values = list(found.groups())
    missing = [name for name, value in zip(names, values, strict=True) if not value]
    if not any(values):
        missing = [AUTHORIZATION_HEADER]
    if missing:
        raise SignatureRejected(
            "SIGNATURE_MISSING",
            f"the request is not signed: missing {', '.join(missing)}",
            {"missing": missing},
        )
    access_key, timestamp, nonce, signature = values
    for name, value, pattern, form in (
        (names[1], timestamp, _TIMESTAMP, "Unix epoch milliseconds, in decimal"),
        (names[2], nonce, _NONCE, "8-128 characters of A-Z a-z 0-9 _ -"),
        (names[3], signature, _SIGNATURE, "64 lowercase hexadecimal digits"),
    ):
        if not pattern.fullmatch(value):
            raise SignatureRejected(
                "SIGNATURE_INVALID", f"{name} is malformed: it must be {form}", {"header": name}
            )
    return access_key, timestamp, nonce, signature


_AUTHORIZATION_FIELDS = ("AccessKey", "Timestamp", "Nonce", "Signature")


def _signature(credentials: Credentials, canonical: str) -> str:
    """HMAC-SHA256 (the standard library's ``hmac``), hex, from the HMAC keyed once per secret
    and copied per request."""
    mac = _keyed(credentials.secret_key).copy()
    mac.update(canonical.encode("utf-8"))
    return mac.hexdigest()


@functools.lru_cache(maxsize=64)
def _keyed(secret_key: str) -> hmac.HMAC:
    return hmac.new(secret_key.encode("utf-8"), digestmod=hashlib.sha256)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _canonical_query(raw_query: str) -> str:
    if not raw_query:
        return ""
    pairs = sorted(
        (_encode(key), _encode(value))
        for key, _, value in (piece.partition("=") for piece in raw_query.split("&") if piece)
    )
    return "&".join(f"{key}={value}" for key, value in pairs)


def _encode(component: str) -> str:
    return quote(unquote_to_bytes(component), safe="-_.~")
