"""What guards the broker's HTTP edge, before any route runs.

* :class:`TrustedHosts`: Starlette's trusted-host check against ``allowed_hosts``, answered in the
  project's envelope (400 ``INVALID_HOST``).  It stops DNS rebinding: a web page on
  ``evil.example`` whose name the attacker re-points at 127.0.0.1 reaches a loopback broker from the
  victim's browser, with ``Host: evil.example``.  A Host that is the very address the request was
  sent to always passes: a request to an address by its address cannot come from a rebound name.
* :class:`HeaderLimits`: at most ``max_headers`` request headers of at most ``max_header_bytes``
  together (431 ``HEADERS_TOO_LARGE``), whatever server runs the app.  Under ``halfmq broker
  serve`` a head far over the bound never reaches it: :mod:`.protocol` refuses it as it arrives.
* :func:`exposure_warning`: the line a broker listening beyond loopback with the ACL off logs.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from broker_service.api.errors import envelope
from broker_service.settings import BrokerSettings

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_ANY_ADDRESS = ("", "0.0.0.0", "::")
_DECIDED_MAX = 256


def allowed_hosts(settings: BrokerSettings) -> list[str]:
    """The ``allowed_hosts`` setting, or loopback plus the name the broker was told to bind."""
    if settings.allowed_hosts is not None:
        return [_bare(host) for host in settings.allowed_hosts]
    hosts = list(LOOPBACK_NAMES)
    bind = _bare(settings.host)
    if bind not in _ANY_ADDRESS and bind not in hosts:
        hosts.append(bind)
    return hosts


def is_loopback(host: str) -> bool:
    host = _bare(host)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def exposure_warning(settings: BrokerSettings) -> str | None:
    """One line for a broker reachable from other machines with nobody checked, else None."""
    if is_loopback(settings.host) or settings.acl_file is not None:
        return None
    return (
        f"listening on {settings.host}:{settings.port} with the ACL off: anyone who can reach "
        "this port owns the broker (sends, commits, deletes topics); turn on the ACL with "
        "--acl FILE, or listen on 127.0.0.1"
    )


def _bare(host: str) -> str:
    """A host name or address as compared: lower case, IPv6 without its brackets."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        return host[1:-1]
    return host


def _host_of(header: str) -> str | None:
    """The host of a Host header (port dropped), or None when it is not one."""
    header = header.strip()
    if header.startswith("["):  # [IPv6] or [IPv6]:port
        end = header.find("]")
        port = header[end + 1 :] if end > 0 else ":?"
        if port and not (port.startswith(":") and port[1:].isdigit()):
            return None
        return _bare(header[: end + 1])
    name, _, port = header.partition(":")
    if not name or (port and not port.isdigit()) or any(c in name for c in " /@\\"):
        return None
    return name.lower()


class TrustedHosts(TrustedHostMiddleware):
    """Starlette's trusted-host middleware (its patterns: names, addresses, ``*.domain``, ``*``)
    answering in the envelope, never redirecting."""

    def __init__(self, app: ASGIApp, allowed_hosts: list[str]) -> None:
        super().__init__(app, allowed_hosts=allowed_hosts, www_redirect=False)
        self._decided: dict[tuple[bytes, tuple[Any, ...] | None], bool] = {}

    def accepts(self, host: str, server: tuple[Any, ...] | None) -> bool:
        if server is not None and host == _bare(str(server[0])):
            return True
        return any(
            host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:]))
            for pattern in self.allowed_hosts
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.allow_any or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = next((value for name, value in scope["headers"] if name == b"host"), None)
        # No Host at all is HTTP/1.0 from a script: no browser sends that.
        if header is None or self._accepted(header, scope.get("server")):
            await self.app(scope, receive, send)
            return
        shown = header[:255].decode("latin-1")
        response = envelope(
            400,
            "INVALID_HOST",
            f"Host {shown!r} is not one this broker answers to (allowed_hosts)",
            host=shown,
        )
        await response(scope, receive, send)

    def _accepted(self, header: bytes, server: Any) -> bool:
        """Decided once per Host value and server address (a broker sees a handful)."""
        key = (header, None if server is None else tuple(server))
        known = self._decided.get(key)
        if known is None:
            host = _host_of(header.decode("latin-1"))
            known = host is not None and self.accepts(host, key[1])
            if len(self._decided) < _DECIDED_MAX and len(header) < 256:
                # (past that, what an attacker varies is decided each time, not remembered)
                self._decided[key] = known
        return known


class HeaderLimits:
    """A pure ASGI middleware: 431 for more than ``max_headers`` headers or more than
    ``max_bytes`` of them (each counted as ``name: value`` and its line break)."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_headers: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_headers = max_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = scope["headers"]
            if len(headers) > self.max_headers:
                await self._refuse(scope, receive, send, f"more than {self.max_headers} headers")
                return
            size = 4 * len(headers)
            for name, value in headers:
                size += len(name) + len(value)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send, f"headers over {self.max_bytes} bytes")
                return
        await self.app(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, what: str) -> None:
        response = envelope(
            431,
            "HEADERS_TOO_LARGE",
            f"request {what} (max_headers, max_header_bytes)",
            max_headers=self.max_headers,
            max_header_bytes=self.max_bytes,
        )
        await response(scope, receive, send)
