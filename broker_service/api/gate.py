"""The ACL gate: one pure ASGI middleware in front of every route, so no route can forget the ACL.

For each HTTP request, with the ACL on:

1. find the route it goes to and its rule, in the table built at start-up from what each route
   declares (:class:`.permissions.RouteRules`; a route with none needs admin); a public route
   passes untouched;
2. read the body, and verify the signature over the canonical request (401: unsigned, unknown key,
   bad signature, timestamp outside the window);
3. the account's white lists and the route's needs (403; a commit's need on its transaction's
   topic is left to the route, which reads the transaction: :class:`.permissions.TransactionGuard`);
4. the access key's rate (429 with ``Retry-After``);

then the request goes on, its body replayed, with ``request.state.access_key`` set and its nonce
in ``request.state.nonce`` (a :class:`~broker_service.domain.ports.nonces.RequestNonce`): the
route hands it to the service it calls, and the request's first store write remembers it in the
same transaction, refused 401 ``NONCE_REPLAYED`` if any broker of the database saw it.  A request
that wrote nothing has its nonce remembered here just before its response starts, and a replayed
one gets the 401 instead of that response -- or 503 ``STORE_UNAVAILABLE`` when the store cannot
remember it (an outage): never a response whose nonce is not stored.  Without the ACL the gate
passes everything (the embedded default stays zero-config), and ``request.state`` has no nonce.

On ``/console`` paths, and only there, the gate takes the console's signed session cookie instead
of a signature (:class:`SessionCheck`, left in ``app.state.console_sessions`` by the console): no
session is a redirect to the login page (GET) or 401 ``SESSION_MISSING``, before anything is shown
or done; then the same rule of the same table, the same white lists and the same rate.  The
console checks each form's CSRF token itself, against the same session.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from starlette.responses import JSONResponse, RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from broker_service.acl.decide import authorize
from broker_service.acl.errors import AclError
from broker_service.acl.model import AclConfig, Need
from broker_service.acl.runtime import AclRuntime
from broker_service.acl.signature import body_sha256, verify_raw
from broker_service.api.errors import envelope, error_reference, status_of
from broker_service.api.permissions import (
    BY_BODY,
    BY_PATH,
    Ask,
    RouteRules,
    TransactionGuard,
    public,
)
from broker_service.domain.errors import DomainError
from broker_service.domain.ports.nonces import NonceKey, RequestNonce, replayed_error

log = logging.getLogger("halfmq.acl")

_ALLOWED_MAX = 4096  # allowed asks remembered per ACL version, of each kind
CONSOLE = "/console"
CONSOLE_LOGIN = "/console/login"


def is_console(path: str) -> bool:
    return path == CONSOLE or path.startswith(CONSOLE + "/")


class SessionCheck(Protocol):
    """The console's sessions, as the gate asks them (:mod:`broker_service.console.sessions`)."""

    def access_key(self, scope: Scope) -> str | None:
        """The access key of a valid session of a known account; None: not signed in."""
        ...

    async def refused(self, scope: Scope, access_key: str, code: str) -> None:
        """An action the gate refused (written to the audit log)."""
        ...


class RateLimits:
    """A token bucket per access key: ``rate`` requests a second, bursts of twice that."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = max(1.0, 2 * rate)
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def wait_for(self, access_key: str) -> float:
        """0 when the request may go now; else the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        tokens, at = self._buckets.get(access_key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens >= 1:
            self._buckets[access_key] = (tokens - 1, now)
            return 0.0
        self._buckets[access_key] = (tokens, now)
        return (1 - tokens) / self.rate


@dataclass(frozen=True, slots=True)
class _Decided:
    """What one version of the ACL allowed, remembered by the gate."""

    config: AclConfig
    asks: set[tuple[Any, ...]]  # (access key, address, *needs)
    paths: set[tuple[str, ...]]  # (method, path, access key, address) of path-only rules
    # (rule, access key, address, *body fields) of BY_BODY rules: the commit's guard, or None
    bodies: dict[tuple[Any, ...], TransactionGuard | None]


class AclGate:
    def __init__(
        self,
        app: ASGIApp,
        acl: AclRuntime | None,
        *,
        routes: RouteRules,
        rate_per_second: float,
    ) -> None:
        self.app = app
        self.acl = acl
        self.routes = routes  # what each route declared, built once at start-up
        self.rates = RateLimits(rate_per_second)
        self._decided: _Decided | None = None  # what the enforced ACL allowed
        self._rules: dict[tuple[str, str], tuple[Any, dict[str, str]]] = {}  # (method, path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.acl is None:
            await self.app(scope, receive, send)
            return
        rule, params = self._rule_for(scope["method"], scope["path"])
        if rule is public:
            await self.app(scope, receive, send)
            return
        if is_console(scope["path"]):
            await self._console(scope, receive, send, rule, params)
            return
        body = await _read_body(receive)
        try:
            access_key, nonce = self._admit(scope, body)
            if not self._allowed_before(scope, access_key, rule):
                await self._authorize(scope, body, access_key, rule, params)
        except AclError as error:
            await _refuse(scope, receive, send, error)
            return
        if await self._over_rate(access_key, scope, receive, send):
            return
        state = scope.setdefault("state", {})
        state["access_key"] = access_key
        state["nonce"] = nonce  # handed down by the route; its first write takes it
        await self.app(scope, _replay(body, receive), self._remembering(nonce, scope, send))

    async def _console(
        self, scope: Scope, receive: Receive, send: Send, rule: Any, params: dict[str, Any]
    ) -> None:
        """A console request: a session instead of a signature, then the route's rule."""
        sessions: SessionCheck | None = getattr(scope["app"].state, "console_sessions", None)
        access_key = None if sessions is None else sessions.access_key(scope)
        if access_key is None:
            if scope["method"] in ("GET", "HEAD"):
                back = quote(scope["path"], safe="/")
                redirect = RedirectResponse(f"{CONSOLE_LOGIN}?next={back}", status_code=303)
                await redirect(scope, receive, send)
            else:
                response = envelope(401, "SESSION_MISSING", "sign in to the console first")
                await response(scope, receive, send)
            return
        body = await _read_body(receive)
        try:
            await self._authorize(scope, body, access_key, rule, params)
        except AclError as error:
            if sessions is not None and scope["method"] not in ("GET", "HEAD"):
                await sessions.refused(scope, access_key, str(error.code))
            await _refuse(scope, receive, send, error)
            return
        if await self._over_rate(access_key, scope, receive, send):
            return
        scope.setdefault("state", {})["access_key"] = access_key
        await self.app(scope, _replay(body, receive), send)

    def _rule_for(self, method: str, path: str) -> tuple[Any, dict[str, str]]:
        """The table's rule, remembered per (method, path): a producer sends to a few paths all
        day long, and matching a path against the table's patterns is most of the lookup."""
        found = self._rules.get((method, path))
        if found is None:
            found = self.routes.rule_for(method, path)
            _remember_entry(self._rules, (method, path), found)
        return found

    async def _over_rate(self, access_key: str, scope: Scope, receive: Receive, send: Send) -> bool:
        """Whether the access key is over its rate: then answered 429 with ``Retry-After``."""
        wait = self.rates.wait_for(access_key)
        if wait <= 0:
            return False
        response = envelope(429, "RATE_LIMITED", f"access key {access_key!r} is over its rate "
                            f"of {self.rates.rate:g} requests a second",
                            retry_after_seconds=math.ceil(wait))  # fmt: skip
        response.headers["Retry-After"] = str(math.ceil(wait))
        await response(scope, receive, send)
        return True

    def _remembering(self, nonce: RequestNonce, scope: Scope, send: Send) -> Send:
        """``send``, which first remembers the nonce of a request that wrote nothing (none of its
        writes took it): a replayed one is answered 401 instead of its response."""
        acl = self.acl
        assert acl is not None
        refused = False

        async def send_after_nonce(message: Message) -> None:
            nonlocal refused
            key = nonce.take() if message["type"] == "http.response.start" else None
            if key is not None:
                instead = await _remembered(acl, key)
                if instead is not None:  # the response never starts: this one goes instead
                    refused = True
                    await instead(scope, _no_body, send)
            if not refused:
                await send(message)

        return send_after_nonce

    def _allowed(self, config: AclConfig, access_key: str, address: str, needs: list[Need]) -> None:
        """:func:`authorize`, remembering what it allowed while ``config`` is enforced (a
        producer sends to the same topic from the same address all day long).  Also called by
        the writer thread, for a commit's :class:`TransactionGuard`."""
        allowed = self._decided_by(config).asks
        ask = (access_key, address, *needs)
        if ask in allowed:
            return
        authorize(config, access_key, address, needs)
        _remember(allowed, ask)

    def _decided_by(self, config: AclConfig) -> _Decided:
        """What ``config`` allowed so far: a new, empty memory when another version was enforced.
        One attribute, replaced whole: a thread that decided under one version never adds to
        the memory of another (set lookups and adds are each atomic)."""
        decided = self._decided
        if decided is None or decided.config is not config:
            decided = self._decided = _Decided(config, set(), set(), {})
        return decided

    def _admit(self, scope: Scope, body: bytes) -> tuple[str, RequestNonce]:
        acl = self.acl
        assert acl is not None
        raw_path = scope.get("raw_path") or scope["path"].encode()
        signed = verify_raw(
            scope["headers"],
            scope["method"],
            raw_path.decode("latin-1"),
            scope.get("query_string", b"").decode("latin-1"),
            body_sha256(body),
            time.time_ns() // 1_000_000,
            acl.config.secret_for,
            acl.window_ms,
        )
        nonce = RequestNonce(signed.access_key, signed.nonce, signed.timestamp_ms)
        return signed.access_key, nonce

    def _allowed_before(self, scope: Scope, access_key: str, rule: Any) -> bool:
        """Whether the enforced ACL allowed this account the same path-only rule's request to
        this path from this address before (:data:`BY_PATH`): nothing more to decide."""
        acl = self.acl
        assert acl is not None
        if rule not in BY_PATH:
            return False
        paths = self._decided_by(acl.config).paths
        return (scope["method"], scope["path"], access_key, _address(scope)) in paths

    async def _authorize(
        self, scope: Scope, body: bytes, access_key: str, rule: Any, params: dict[str, Any]
    ) -> None:
        acl = self.acl
        assert acl is not None
        config = acl.config
        address = _address(scope)
        if rule in BY_PATH:  # the same needs for every request to this path
            needs = await rule(Ask(params, "", b"", scope["app"].state.transactions))
            authorize(config, access_key, address, needs)
            paths = self._decided_by(config).paths
            _remember(paths, (scope["method"], scope["path"], access_key, address))
            return
        raw_query = scope.get("query_string", b"").decode("latin-1")
        ask = Ask(params, raw_query, body, scope["app"].state.transactions)
        fields = BY_BODY.get(rule)
        if fields is None:
            guard = await self._decide(config, access_key, address, rule, ask)
        else:  # a half or a commit: the same few body fields request after request
            bodies = self._decided_by(config).bodies
            key = (rule, access_key, address, *map(ask.field_key, fields))
            guard = bodies.get(key, _UNDECIDED)
            if guard is _UNDECIDED:
                guard = await self._decide(config, access_key, address, rule, ask)
                _remember_entry(bodies, key, guard)
        if guard is not None:
            scope.setdefault("state", {})["transaction_guard"] = guard

    async def _decide(
        self, config: AclConfig, access_key: str, address: str, rule: Any, ask: Ask
    ) -> TransactionGuard | None:
        """The rule's needs allowed (else :class:`AclError`), and the guard a commit's unit is to
        check its transaction with."""
        self._allowed(config, access_key, address, await rule(ask))
        if ask.transaction_topic is None:
            return None
        return TransactionGuard(config, access_key, address, ask.transaction_topic,
                                ask.json_field("producer_group"), self._allowed)  # fmt: skip


async def _remembered(acl: AclRuntime, key: NonceKey) -> JSONResponse | None:
    """Remember a request's nonce before its response starts: None when it was new and is
    stored; else the answer that goes instead -- 401 ``NONCE_REPLAYED`` for a replay, 503
    ``STORE_UNAVAILABLE`` when the store cannot remember it (an outage): a response that could
    be replayed is never sent.  Raising here instead would reach the app in the middle of
    sending its response, which then can only drop the connection."""
    try:
        fresh = await acl.remember_nonce(key)
    except DomainError as error:
        return envelope(status_of(error), error.code, error.message, **error.detail)
    except Exception as exc:  # a bug, not an outage: logged whole, answered without it
        reference = error_reference()
        log.error("remembering a request's nonce failed, reference %s", reference, exc_info=exc)
        return envelope(500, "INTERNAL", "the broker failed to handle the request; its log says "
                        f"why under reference {reference}", reference=reference)  # fmt: skip
    if fresh:
        return None
    replayed = replayed_error(key)
    return envelope(401, replayed.code, replayed.message, **replayed.detail)


def _address(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else ""


_UNDECIDED: Any = object()


def _remember_entry(memory: dict[Any, Any], key: Any, value: Any) -> None:
    if len(memory) >= _ALLOWED_MAX:
        memory.clear()
    memory[key] = value


def _remember(allowed: set[Any], ask: Any) -> None:
    if len(allowed) >= _ALLOWED_MAX:
        allowed.clear()
    allowed.add(ask)


async def _no_body() -> Message:
    return {"type": "http.disconnect"}


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(scope: Scope, receive: Receive, send: Send, error: AclError) -> None:
    client = scope.get("client")
    log.info("refused %s %s from %s: %s", scope["method"], scope["path"],
             client[0] if client else "?", error.code)  # fmt: skip
    response = envelope(error.status, str(error.code), error.message, **error.detail)
    await response(scope, receive, send)
