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
* :func:`callback_limits`: the ports a push check's callback may not name -- the broker's own
  listeners and its store's, on any address of the broker's machine (:class:`OwnAddresses`) --
  and ``callback_ports``, for the domain's callback rule.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from broker_service.api.errors import envelope
from broker_service.domain.errors import NotReady
from broker_service.domain.transactions.callbacks import (
    ANY_OWN_ADDRESS,
    CallbackLimits,
    Listener,
    parse_ports,
)
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


class OwnAddresses:
    """Is a host one of the broker's machine's?  ``localhost``, this machine's name and the name
    the broker binds; an address: the unspecified ones (a connection to 0.0.0.0 is local), and any
    address a socket can be bound to here (loopback, every interface's).  Another name is not
    resolved: a name in ``callback_hosts`` is the operator's word."""

    def __init__(self, bind_host: str) -> None:
        self.names = {"localhost", _bare(bind_host), socket.gethostname().lower()}

    def __call__(self, host: str) -> bool:
        host = _bare(host)
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return host in self.names
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return address.is_unspecified or address.is_loopback or _bindable(address)


def _bindable(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
    except OSError:  # EADDRNOTAVAIL: not an address of this machine
        return False
    return True


def callback_limits(settings: BrokerSettings, server: tuple[Any, ...] | None) -> CallbackLimits:
    """The domain's port rules for a heartbeat's callback URL: never the broker's HTTP port
    (``port``, and the one ``server`` -- the request's local address -- was reached on), its gRPC
    port or its store's address; one of ``callback_ports`` when any are listed.  A bad
    ``callback_ports`` is 503 ``CALLBACK_PORTS_INVALID``, the operator's to fix."""
    own = OwnAddresses(settings.host)
    http = "the broker's own HTTP port"
    ports = {settings.port: http} if settings.port else {}
    if server is not None and _is_address(str(server[0])) and server[1]:
        ports.setdefault(int(server[1]), http)  # --port 0: the port the system chose
    if settings.grpc_port:
        ports.setdefault(settings.grpc_port, "the broker's own gRPC port")
    refused = [Listener(ANY_OWN_ADDRESS, port, what) for port, what in ports.items()]
    refused += store_listeners(settings.database_url, own)
    try:
        allowed = parse_ports(settings.callback_ports)
    except ValueError as exc:
        raise NotReady(
            f"the broker's callback_ports setting is invalid: {exc}", code="CALLBACK_PORTS_INVALID"
        ) from None
    return CallbackLimits(tuple(refused), allowed, own)


def store_listeners(database_url: str, own: OwnAddresses) -> list[Listener]:
    """Where the store listens, from a PostgreSQL ``database_url`` (its hosts and ports, in the
    URL or its ``host``/``port`` query; 5432 by default; a Unix socket or no host is this
    machine's); none for SQLite."""
    try:
        url = urlsplit(database_url)
    except ValueError:
        return []
    if not url.scheme.lower().startswith("postgres"):
        return []
    query = parse_qs(url.query)
    default_port = _port_of(query.get("port", ["5432"])[0]) or 5432
    hosts = [part for part in url.netloc.rpartition("@")[2].split(",") if part]
    hosts += query.get("host", [])
    what = "the broker's store (database_url)"
    listeners = []
    for entry in hosts or [""]:
        host, port = _split_host_port(entry)
        port = port or default_port
        if not host or host.startswith("/") or own(host):
            host = ANY_OWN_ADDRESS  # a Unix socket, or this machine: any of its addresses
        listeners.append(Listener(host, port, what))
    return listeners


def _split_host_port(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` as (bare host, port or None)."""
    entry = unquote(entry)
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host.lower(), _port_of(rest.removeprefix(":"))
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host.lower(), _port_of(port)
    return entry.lower(), None


def _port_of(text: str) -> int | None:
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(_bare(text))
    except ValueError:
        return False
    return True


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
