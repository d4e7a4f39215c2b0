"""Signed requests with a broker that runs with an ACL (docs/acl.md, "Signed requests").

::

    credentials = Credentials.from_env()          # HALFMQ_ACCESS_KEY / HALFMQ_SECRET_KEY
    client = httpx.Client(auth=HalfmqAuth(credentials))

Outgoing: :func:`sign_headers` builds the ``Authorization: HALFMQ-HMAC-SHA256 ...`` header;
:class:`HalfmqAuth` adds it to every request of an ``httpx.Client`` or ``httpx.AsyncClient`` (one
generator drives both).

Incoming: the broker signs each push check with the producer's own keys (the ones it heartbeats
with).  :func:`verify_headers` is the pure check of one request's headers, and a
:class:`CheckVerifier` adds what a check server remembers: the nonces already seen inside the
window.  Both raise :class:`~framework.errors.SignatureRejected` with the broker's own 401 codes.

The canonical request, its HMAC (the standard library's ``hmac``), the header names and how they
are read are the wire contract's (:mod:`halfmq_wire.signature`), which the broker's verifier uses
too; docs/acl.md's worked examples (tests/unit/framework/test_signing.py) check it from outside.
"""

from __future__ import annotations

import heapq
import os
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

import httpx

from framework.errors import ConfigurationError, SignatureRejected
from halfmq_wire import signature as wire
from halfmq_wire.signature import (
    ACCESS_KEY_HEADER,
    ALGORITHM,
    HEADERS,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WINDOW_MS,
    SignedRequest,
    body_sha256,
)

__all__ = [
    "ACCESS_KEY_ENV",
    "ACCESS_KEY_HEADER",
    "ALGORITHM",
    "AUTHORIZATION_HEADER",
    "HEADERS",
    "NONCE_HEADER",
    "SECRET_KEY_ENV",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "WINDOW_MS",
    "CheckVerifier",
    "Credentials",
    "CredentialsLike",
    "HalfmqAuth",
    "SignedCheck",
    "canonical_request",
    "check_verifier",
    "resolve_credentials",
    "sign_headers",
    "verify_headers",
]
ACCESS_KEY_ENV = "HALFMQ_ACCESS_KEY"
SECRET_KEY_ENV = "HALFMQ_SECRET_KEY"
AUTHORIZATION_HEADER = wire.AUTHORIZATION
SignedCheck = SignedRequest  # a check whose signature verified: who signed it, when, its nonce


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
    wire); a nonce that is not 8-128 of ``A-Z a-z 0-9 _ -`` is a ``ValueError``."""
    return wire.sign(
        credentials.access_key,
        credentials.secret_key,
        method,
        path,
        raw_query,
        body,
        _now_ms() if now_ms is None else now_ms,
        nonce,
    )


def canonical_request(
    method: str, path: str, raw_query: str, body: bytes, timestamp: str, nonce: str, access_key: str
) -> str:
    """The eight lines that are signed (docs/acl.md, "The canonical request"), of a body."""
    return wire.canonical_request(
        method, path, raw_query, body_sha256(body), timestamp, nonce, access_key
    )


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

    def secret_for(access_key: str) -> str | None:
        return credentials.secret_key if access_key == credentials.access_key else None

    try:
        return wire.verify(
            headers,
            method,
            path,
            raw_query,
            body_sha256(body),
            now_ms,
            secret_for,
            window_ms,
            receiver="producer",
        )
    except wire.SignatureError as refused:
        raise SignatureRejected(refused.code.value, refused.message, refused.detail) from None


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


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
