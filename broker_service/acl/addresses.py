"""White-list address patterns, written as RocketMQ's ``plain_acl.yml`` writes them.

===========================  ===============================================================
``*``, ``*.*.*.*``,          every address
``*:*:*:*:*:*:*:*``
``192.168.0.1``, ``::1``     exactly this address (IPv4 or IPv6)
``192.168.0.*``              any value in that segment and every later one; ``192.168.*``,
``192.168.*.*``,             ``192.168.*.`` and ``192.168.*.*`` are the same pattern
``192.168.*.``
``192.168.1.1-100``          a range in one segment (the first one excepted, as RocketMQ);
``192.168.1-10.*``           the segments after a range must be ``*``
``192.168.0.{1,2,3}``        a list in the last segment (``1050::5:{1,2}`` for IPv6)
``10.0.0.1,10.0.0.2``        a comma-separated list of any of the forms above but braces
``10.0.0.0/8``, ``fd00::/8`` a CIDR network (not in RocketMQ 4.x; host bits must be zero)
===========================  ===============================================================

IPv6 wildcards and ranges work on the eight hexadecimal groups (``fe80::*``,
``1050:0:0:0:5:600:300c:1-ff``).  An IPv4-mapped IPv6 client address (``::ffff:10.0.0.1``, as
a dual-stack server reports it) is judged as the IPv4 address.  :func:`parse_address` raises
:class:`ValueError` with the reason for a pattern it cannot read; :meth:`AddressPattern.matches`
is simply false for a client address that is not an IP address.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ANY_FORMS = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})
_EVERYWHERE: tuple[IPNetwork, ...] = (
    ipaddress.IPv4Network("0.0.0.0/0"),
    ipaddress.IPv6Network("::/0"),
)
_DECIMAL = re.compile(r"[0-9]{1,3}")
_HEX = re.compile(r"[0-9A-Fa-f]{1,4}")


@dataclass(frozen=True)
class _Segments:
    """Per-segment inclusive bounds: 4 octets (IPv4) or 8 groups (IPv6)."""

    version: int
    bounds: tuple[tuple[int, int], ...]

    def __contains__(self, address: IPAddress) -> bool:
        if address.version != self.version:
            return False
        return all(
            low <= value <= high
            for value, (low, high) in zip(_segments_of(address), self.bounds, strict=True)
        )


_Rule = IPNetwork | _Segments


@dataclass(frozen=True)
class AddressPattern:
    """One white-list entry: ``text`` as written in the file, and what it matches."""

    text: str
    rules: tuple[_Rule, ...] = field(repr=False)

    def matches(self, ip: str) -> bool:
        address = parse_client_address(ip)
        return address is not None and any(address in rule for rule in self.rules)

    def __str__(self) -> str:
        return self.text


def parse_address(pattern: str) -> AddressPattern:
    """Read one RocketMQ address pattern; :class:`ValueError` names what is wrong with it."""
    text = pattern.strip()
    if not text:
        raise ValueError("an address pattern cannot be empty")
    return AddressPattern(text, _rules(text))


def matches_any(patterns: Iterable[AddressPattern], ip: str) -> bool:
    return any(pattern.matches(ip) for pattern in patterns)


def parse_client_address(ip: str) -> IPAddress | None:
    """The client's address as the server reports it (``[::1]`` and zones tolerated), or None."""
    text = ip.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return _unmapped(ipaddress.ip_address(text))
    except ValueError:
        return None


def _rules(text: str) -> tuple[_Rule, ...]:
    if text in ANY_FORMS:
        return _EVERYWHERE
    if text.endswith("}"):
        return _braces(text)
    if "," in text:
        return tuple(rule for part in text.split(",") for rule in _single(part.strip(), text))
    return _single(text, text)


def _single(text: str, whole: str) -> tuple[_Rule, ...]:
    if not text:
        raise ValueError(f"{whole!r} has an empty entry between commas")
    if text in ANY_FORMS:
        return _EVERYWHERE
    if "{" in text or "}" in text:
        raise ValueError(f"{whole!r}: braces are only allowed as the last segment of the pattern")
    if "/" in text:
        return (_cidr(text),)
    if "*" in text or "-" in text:
        return (_wildcard(text),)
    return (_exact(text),)


def _exact(text: str) -> IPNetwork:
    try:
        address = _unmapped(ipaddress.ip_address(text))
    except ValueError:
        raise ValueError(f"{text!r} is not an IPv4 or IPv6 address") from None
    return ipaddress.ip_network(address)


def _cidr(text: str) -> IPNetwork:
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a CIDR network ({exc})") from None


def _braces(text: str) -> tuple[_Rule, ...]:
    opening = text.find("{")
    prefix, inner = text[:opening], text[opening + 1 : -1]
    if opening < 0 or "{" in inner or "}" in inner or "," in prefix:
        raise ValueError(f"{text!r}: write one list in braces, as in 192.168.0.{{1,2,3}}")
    is_v6 = ":" in prefix
    if is_v6 and not prefix.endswith(":"):
        raise ValueError(f"{text!r}: the braces must hold the last group of the address")
    if not is_v6 and (not prefix.endswith(".") or prefix.count(".") != 3):
        raise ValueError(f"{text!r}: the braces must hold the fourth segment of the address")
    items = [item.strip() for item in inner.split(",")]
    if not all(items):
        raise ValueError(f"{text!r} has an empty entry in its braces")
    return tuple(_exact(prefix + item) for item in items)


def _wildcard(text: str) -> _Segments:
    """``*`` and ``a-b`` segments; the first segment exact, every one after a wildcard ``*``."""
    is_v6 = ":" in text
    parts = _v6_groups(text) if is_v6 else _v4_segments(text)
    width, maximum, number = (8, 0xFFFF, _HEX) if is_v6 else (4, 255, _DECIMAL)
    if len(parts) < width and parts[-1] == "*":
        parts = parts + ["*"] * (width - len(parts))
    if len(parts) != width:
        raise ValueError(f"{text!r} does not have {width} segments")
    bounds = [_bounds(part, text, number, 16 if is_v6 else 10, maximum) for part in parts]
    if bounds[0][0] != bounds[0][1]:
        raise ValueError(f"{text!r}: the first segment must be a number, not a wildcard or range")
    wild = [index for index, (low, high) in enumerate(bounds) if low != high]
    if wild and any(parts[index] != "*" for index in range(wild[0] + 1, width)):
        raise ValueError(f"{text!r}: every segment after a '*' or a range must be '*'")
    return _Segments(6 if is_v6 else 4, tuple(bounds))


def _v4_segments(text: str) -> list[str]:
    parts = text.split(".")
    if len(parts) > 1 and parts[-1] == "" and parts[-2] == "*":
        parts = parts[:-1]  # RocketMQ's "192.168.*." form
    return parts


def _v6_groups(text: str) -> list[str]:
    if text.count("::") > 1:
        raise ValueError(f"{text!r} has more than one '::'")
    if "::" not in text:
        return text.split(":")
    head, tail = (side.split(":") if side else [] for side in text.split("::"))
    missing = 8 - len(head) - len(tail)
    if missing < 1:
        raise ValueError(f"{text!r} has too many groups around '::'")
    return [*head, *(["0"] * missing), *tail]


def _bounds(
    part: str, text: str, number: re.Pattern[str], base: int, maximum: int
) -> tuple[int, int]:
    if part == "*":
        return (0, maximum)
    low_text, dash, high_text = part.partition("-")
    values = [low_text, high_text] if dash else [low_text]
    if not all(number.fullmatch(value) for value in values):
        raise ValueError(f"{text!r}: segment {part!r} is not a number, '*' or a range 'a-b'")
    low, high = (int(value, base) for value in (values if dash else values * 2))
    if high > maximum or low > high:
        raise ValueError(f"{text!r}: segment {part!r} is out of range")
    return (low, high)


def _segments_of(address: IPAddress) -> list[int]:
    packed = address.packed
    if address.version == 4:
        return list(packed)
    return [int.from_bytes(packed[index : index + 2], "big") for index in range(0, 16, 2)]


def _unmapped(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
