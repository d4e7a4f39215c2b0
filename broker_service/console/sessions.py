"""Console sessions: a signed cookie, a CSRF token bound to it, and the login's checks.

The cookie holds the access key, a random session id, its expiry and a binding to the account's
secret (an HMAC of it, so a new secret ends the account's sessions) -- never the secret.  It is
signed with a key derived from ``console_session_secret`` (a random one per process when unset),
which is never logged.  Without the ACL the console hands out an anonymous session (no access
key) only to bind CSRF tokens to: a cross-site form can then post nothing.

:class:`ConsoleSessions` is what the ACL gate asks on ``/console`` paths
(:class:`broker_service.api.gate.SessionCheck`): who is signed in, and to note a refused action.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any

import orjson

from broker_service.acl.runtime import AclRuntime

COOKIE = "halfmq_console"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
_DERIVE = b"halfmq console session key v1"


def session_key(secret: str | None) -> bytes:
    """The signing key: derived from the configured secret, or random for this process."""
    if secret is None:
        return secrets.token_bytes(32)
    return hmac.new(secret.encode(), _DERIVE, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class Session:
    """``access_key`` "" : anonymous (not signed in; the ACL is off, or the login page)."""

    access_key: str
    session_id: str
    expires_ms: int
    binding: str = ""


class SessionSigner:
    def __init__(self, key: bytes, lifetime_seconds: float) -> None:
        self._key = key
        self.lifetime_seconds = lifetime_seconds

    def _mac(self, *parts: str) -> str:
        return hmac.new(self._key, "|".join(parts).encode(), hashlib.sha256).hexdigest()

    def binding(self, secret_key: str) -> str:
        return self._mac("bind", secret_key)[:32]

    def new(self, access_key: str = "", secret_key: str | None = None) -> Session:
        expires = int((time.time() + self.lifetime_seconds) * 1000)
        binding = "" if secret_key is None else self.binding(secret_key)
        return Session(access_key, secrets.token_hex(16), expires, binding)

    def dump(self, session: Session) -> str:
        payload = _b64(
            orjson.dumps(
                {
                    "k": session.access_key,
                    "s": session.session_id,
                    "x": session.expires_ms,
                    "b": session.binding,
                }
            )
        )
        return f"{payload}.{self._mac('session', payload)}"

    def load(self, value: str | None) -> Session | None:
        """The session a cookie value holds; None when it is malformed, forged or expired."""
        if not value or value.count(".") != 1:
            return None
        payload, mac = value.split(".")
        if not hmac.compare_digest(mac, self._mac("session", payload)):
            return None
        try:
            data = orjson.loads(_unb64(payload))
            session = Session(str(data["k"]), str(data["s"]), int(data["x"]), str(data["b"]))
        except (ValueError, KeyError, TypeError):
            return None
        return session if session.expires_ms > time.time() * 1000 else None

    def csrf_token(self, session: Session) -> str:
        return self._mac("csrf", session.session_id)[:40]

    def csrf_ok(self, session: Session | None, token: str | None) -> bool:
        if session is None or not token:
            return False
        return hmac.compare_digest(token, self.csrf_token(session))


def cookie_of(headers: Any) -> str | None:
    """The session cookie's value from an ASGI scope's headers (a list of byte pairs)."""
    for name, value in headers:
        if name == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed Cookie header is no session
                return None
            morsel = jar.get(COOKIE)
            if morsel is not None:
                return morsel.value
    return None


class _Failures:
    """Failed sign-ins per key (an address, an access key) in a sliding window: past ``limit``
    in ``window_seconds`` the key waits until the oldest of them leaves the window."""

    def __init__(self, limit: int, window_seconds: float, clock: Callable[[], float]) -> None:
        self.limit = limit
        self.window_seconds = window_seconds
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}

    def wait_for(self, key: str) -> float:
        """0 when ``key`` may try now; else the seconds until it may."""
        failures = self._failures.get(key)
        if not failures:
            return 0.0
        now = self._clock()
        while failures and failures[0] <= now - self.window_seconds:
            failures.popleft()
        if len(failures) < self.limit:
            return 0.0
        return failures[0] + self.window_seconds - now

    def failed(self, key: str) -> bool:
        """Count a failure; True when it is the one that reaches the limit."""
        if len(self._failures) >= _FAILURES_MAX:
            self._forget_old()
        failures = self._failures.setdefault(key, deque())
        failures.append(self._clock())
        return len(failures) == self.limit

    def clear(self, key: str) -> None:
        self._failures.pop(key, None)

    def _forget_old(self) -> None:
        """Drop the keys whose failures have all left the window (all of them, if none has:
        the table stays bounded whatever an attacker varies)."""
        horizon = self._clock() - self.window_seconds
        old = [key for key, failures in self._failures.items() if failures[-1] <= horizon]
        for key in old:
            del self._failures[key]
        if len(self._failures) >= _FAILURES_MAX:
            self._failures.clear()


_FAILURES_MAX = 10_000
_ACCESS_KEY_CHARS = 256  # of the access key as typed, as it is counted (no account's is longer)


class LoginThrottle:
    """Failed sign-ins, counted per client address and per access key: after ``limit`` from one
    address, or ``account_limit`` for one access key from any addresses (an attacker with many
    addresses), in ``window_seconds``, that address or that access key is refused until the
    oldest of its failures leaves the window; each failure also waits ``delay``.  An access key
    is counted whether or not an account has it: a refusal tells nobody which keys exist."""

    def __init__(
        self,
        limit: int = 5,
        window_seconds: float = 300,
        delay: float = 0.25,
        account_limit: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.delay = delay
        self.window_seconds = window_seconds
        self._addresses = _Failures(limit, window_seconds, clock)
        self._accounts = _Failures(account_limit, window_seconds, clock)

    @property
    def limit(self) -> int:
        return self._addresses.limit

    @property
    def account_limit(self) -> int:
        return self._accounts.limit

    def wait_for(self, address: str) -> float:
        """0 when the address may try now; else the seconds until it may."""
        return self._addresses.wait_for(address)

    def wait_for_account(self, access_key: str) -> float:
        """0 when the access key may be tried now; else the seconds until it may."""
        return self._accounts.wait_for(access_key[:_ACCESS_KEY_CHARS])

    def failed(self, address: str, access_key: str) -> tuple[bool, bool]:
        """Count a failed sign-in; whether it made (the address, the access key) reach its
        limit."""
        return (
            self._addresses.failed(address),
            self._accounts.failed(access_key[:_ACCESS_KEY_CHARS]),
        )

    def succeeded(self, address: str, access_key: str) -> None:
        self._addresses.clear(address)
        self._accounts.clear(access_key[:_ACCESS_KEY_CHARS])


# What the console's audit log hears of a refusal the gate made: (scope, access key, code).
RefusalNote = Callable[[dict[str, Any], str, str], Awaitable[None]]


class ConsoleSessions:
    """What the gate asks on ``/console`` paths (with the ACL on)."""

    def __init__(self, signer: SessionSigner, acl: AclRuntime | None, on_refused: RefusalNote):
        self.signer = signer
        self.acl = acl
        self._on_refused = on_refused

    def session_of(self, scope: Any) -> Session | None:
        return self.signer.load(cookie_of(scope.get("headers", ())))

    def access_key(self, scope: Any) -> str | None:
        """The signed-in access key: a valid session of an account the ACL still has, with the
        secret it had at the login; None otherwise."""
        session = self.session_of(scope)
        if session is None or not session.access_key or self.acl is None:
            return None
        secret = self.acl.config.secret_for(session.access_key)
        if secret is None or not hmac.compare_digest(session.binding, self.signer.binding(secret)):
            return None
        return session.access_key

    async def refused(self, scope: Any, access_key: str, code: str) -> None:
        await self._on_refused(scope, access_key, code)
