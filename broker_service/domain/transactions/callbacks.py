"""Where a push check may go: a producer instance names its callback URL in its heartbeat, and the
broker will POST every check of its group there -- so the URL must not point anywhere else.

Allowed: a host the operator lists (``callback_hosts``: addresses in the ACL's forms -- exact,
``192.168.0.*``, ``10.0.0.1-100``, CIDR -- or host names, ``*`` for any), or else only the address
the heartbeat came from (``localhost`` too when that address is loopback): an instance can name
itself and nothing else.  Without this, any client could aim the broker at cloud metadata
addresses, at the database port, or at an attacker's server that answers ROLLBACK (SSRF and
check-back hijack).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from typing import Protocol
from urllib.parse import urlsplit

from broker_service.domain.errors import Forbidden, InvalidRequest


class AddressPattern(Protocol):
    def matches(self, ip: str) -> bool: ...


def _no_patterns(entry: str) -> AddressPattern:
    raise ValueError(f"{entry!r}: no address forms without a parser")


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

    def check(self, callback_url: str, source: str | None) -> None:
        """Raise :class:`Forbidden` unless ``callback_url`` may receive checks."""
        try:
            host = (urlsplit(callback_url).hostname or "").lower()
        except ValueError:
            raise InvalidRequest(
                "callback_url is not a URL", code="INVALID_CALLBACK_URL", callback_url=callback_url
            ) from None
        if self.any or host in self.names or _is_source(host, source):
            return
        if _is_ip(host) and any(pattern.matches(host) for pattern in self.patterns):
            return
        raise Forbidden(
            f"callback host {host!r} is not allowed: an instance may name only the address its "
            "heartbeat comes from, or a host the broker's callback_hosts setting lists",
            code="CALLBACK_NOT_ALLOWED",
            host=host,
        )


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_source(host: str, source: str | None) -> bool:
    if not source or not _is_ip(source):
        return False
    client = ipaddress.ip_address(source)
    if isinstance(client, ipaddress.IPv6Address) and client.ipv4_mapped is not None:
        client = client.ipv4_mapped
    if host == "localhost":
        return client.is_loopback
    if not _is_ip(host):
        return False
    return ipaddress.ip_address(host) == client
