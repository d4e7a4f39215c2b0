"""Where a push check may go: a producer instance names its callback URL in its heartbeat, and the
broker will POST every check of its group there -- so the URL must not point anywhere else.

The host: one the operator lists (``callback_hosts``: addresses in the ACL's forms -- exact,
``192.168.0.*``, ``10.0.0.1-100``, CIDR -- or host names, ``*`` for any), or else only the address
the heartbeat came from (``localhost`` too when that address is loopback): an instance can name
itself and nothing else.  Without this, any client could aim the broker at cloud metadata
addresses, at the database port, or at an attacker's server that answers ROLLBACK (SSRF and
check-back hijack).

The port, whatever the host rule allowed (``*`` included): never one of the broker's own listeners
or its store's (:class:`CallbackLimits`: a producer on the broker's machine could otherwise aim
the broker's signed POSTs at its own ``/v1`` routes or at PostgreSQL), and one of
``callback_ports`` when the operator lists any (:func:`parse_ports`).

The domain does no I/O: whether a host is an address of the broker's machine is asked of the
``is_own`` predicate the HTTP layer hands in with the limits.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from broker_service.domain.errors import Forbidden, InvalidRequest

ANY_OWN_ADDRESS = ""  # a listener's host: every address of the broker's machine
_DEFAULT_PORTS = {"http": 80, "https": 443}


class AddressPattern(Protocol):
    def matches(self, ip: str) -> bool: ...


def _no_patterns(entry: str) -> AddressPattern:
    raise ValueError(f"{entry!r}: no address forms without a parser")


def _not_own(host: str) -> bool:
    return False


def parse_ports(entries: Sequence[str]) -> tuple[range, ...]:
    """``callback_ports`` (``"8080"``, ``"8000-8999"``) as ranges; ``ValueError`` naming the
    entry for anything else (a port is 1-65535, a range low-high)."""
    ports = []
    for entry in entries:
        low, sep, high = entry.strip().partition("-")
        try:
            first, last = int(low), int(high if sep else low)
        except ValueError:
            first, last = 0, -1
        if not (1 <= first <= last <= 65535):
            raise ValueError(
                f"bad callback port {entry!r}: a port 1-65535 or a range such as 8000-8999"
            )
        ports.append(range(first, last + 1))
    return tuple(ports)


@dataclass(frozen=True, slots=True)
class Listener:
    """An address a push check may never go to; ``host`` :data:`ANY_OWN_ADDRESS` for every
    address of the broker's machine."""

    host: str
    port: int
    what: str  # "the broker's own HTTP port", ... (said in the refusal)


@dataclass(frozen=True, slots=True)
class CallbackLimits:
    """The port rules: ``refused`` listeners, and the ``ports`` a callback may use (empty: any
    but the refused).  ``is_own(host)``: is ``host`` (an address or a name) one of the broker's
    machine's?"""

    refused: tuple[Listener, ...] = ()
    ports: tuple[range, ...] = ()
    is_own: Callable[[str], bool] = _not_own


NO_LIMITS = CallbackLimits()


class CallbackPolicy:
    def __init__(
        self,
        allowed: Sequence[str] = (),
        parse_address: Callable[[str], AddressPattern] = _no_patterns,
    ) -> None:
        """``parse_address``: an entry in the ACL's address forms to its pattern, ``ValueError``
        for anything else (``broker_service.acl.parse_address``); the others are host names."""
        self.any = "*" in allowed
        self.names: set[str] = set()
        self.patterns: list[AddressPattern] = []
        for entry in allowed:
            if entry == "*":
                continue
            try:
                self.patterns.append(parse_address(entry))
            except ValueError:
                self.names.add(entry.lower())  # a host name, matched exactly

    def check(
        self, callback_url: str, source: str | None, limits: CallbackLimits = NO_LIMITS
    ) -> None:
        """Raise :class:`Forbidden` unless ``callback_url`` may receive checks."""
        host, port = _parts(callback_url)
        self._check_host(host, source)
        if port is None:
            raise _not_a_url()
        _check_port(host, port, limits)

    def _check_host(self, host: str, source: str | None) -> None:
        if host and (self.any or host in self.names or _is_source(host, source)):
            return
        if _is_ip(host) and any(pattern.matches(host) for pattern in self.patterns):
            return
        raise Forbidden(
            f"callback host {host!r} is not allowed: an instance may name only the address its "
            "heartbeat comes from, or a host the broker's callback_hosts setting lists",
            code="CALLBACK_NOT_ALLOWED",
            host=host,
        )


def _parts(callback_url: str) -> tuple[str, int | None]:
    """The URL's host (lower case, IPv6 without brackets; "" without one) and port (its
    scheme's by default; None when it has none that is valid); 400 ``INVALID_CALLBACK_URL``
    when it does not split as a URL."""
    try:
        url = urlsplit(callback_url)
        host = (url.hostname or "").lower()
    except ValueError:  # a bad IPv6 literal
        raise _not_a_url() from None
    try:
        port = url.port
    except ValueError:  # a port that is no number, or out of range
        return host, None
    if port is None:
        port = _DEFAULT_PORTS.get(url.scheme.lower())
    return host, port or None  # port 0 is no port


def _not_a_url() -> InvalidRequest:
    # (the URL is not echoed: it may hold a password)
    return InvalidRequest(
        "callback_url is not an http:// or https:// URL with a valid port",
        code="INVALID_CALLBACK_URL",
    )


def _check_port(host: str, port: int, limits: CallbackLimits) -> None:
    for listener in limits.refused:
        if listener.port == port and _names(listener.host, host, limits.is_own):
            raise Forbidden(
                f"callback {host}:{port} is {listener.what}: a push check may not go there",
                code="CALLBACK_NOT_ALLOWED",
                host=host,
                port=port,
            )
    if limits.ports and not any(port in allowed for allowed in limits.ports):
        shown = ", ".join(_shown(allowed) for allowed in limits.ports)
        raise Forbidden(
            f"callback port {port} is not one the broker's callback_ports setting allows ({shown})",
            code="CALLBACK_NOT_ALLOWED",
            host=host,
            port=port,
        )


def _names(listener_host: str, host: str, is_own: Callable[[str], bool]) -> bool:
    """Does ``host`` (of a callback URL) name the listener's host?"""
    if listener_host == ANY_OWN_ADDRESS:
        return is_own(host)
    if host == listener_host.lower():
        return True
    if _is_ip(host) and _is_ip(listener_host):
        return _plain(host) == _plain(listener_host)
    return False


def _shown(ports: range) -> str:
    return str(ports.start) if len(ports) == 1 else f"{ports.start}-{ports.stop - 1}"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _plain(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address, an IPv4-mapped IPv6 one as its IPv4 address."""
    address = ipaddress.ip_address(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _is_source(host: str, source: str | None) -> bool:
    if not source or not _is_ip(source):
        return False
    client = _plain(source)
    if host == "localhost":
        return client.is_loopback
    if not _is_ip(host):
        return False
    return _plain(host) == client
