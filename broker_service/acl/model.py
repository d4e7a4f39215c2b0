"""What an ACL holds: permissions, accounts, the whole configuration, and what a route needs.

The words are RocketMQ's ``plain_acl.yml`` words.  An :class:`Account` keeps its secret key out
of ``repr`` and ``str``; :attr:`AclConfig.version` is a short hash of the normalised content
(order of accounts, perms and addresses does not count), so two brokers can compare theirs.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Flag, StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

from broker_service.acl.addresses import AddressPattern
from broker_service.domain.names import DLQ_PREFIX, RETRY_PREFIX

ACCESS_KEY_PATTERN = re.compile(r"[A-Za-z0-9_.@-]{7,128}")
SECRET_KEY_MIN_LENGTH = 7  # RocketMQ refuses keys of 6 characters or fewer
SECRET_KEY_MAX_LENGTH = 256
RESOURCE_NAME_PATTERN = re.compile(r"[A-Za-z0-9_%-]{1,255}")
VERSION_LENGTH = 16


class Perm(Flag):
    """RocketMQ's permissions: ``DENY`` is no permission at all, said explicitly."""

    DENY = 0
    PUB = 1
    SUB = 2

    # Members (and Flag's combined values) are singletons compared by identity: hashed by it too,
    # in C, rather than by Enum's Python-level __hash__ (a Need is hashed on every request).
    __hash__ = object.__hash__

    @classmethod
    def parse(cls, text: str) -> Perm:
        """``DENY``, ``PUB``, ``SUB``, ``PUB|SUB`` (or ``SUB|PUB``) and ``ANY`` (both)."""
        normal = "|".join(part.strip() for part in text.strip().split("|"))
        try:
            return _PERM_STRINGS[normal]
        except KeyError:
            raise ValueError(
                f"{text!r} is not a permission: write DENY, PUB, SUB, PUB|SUB or ANY"
            ) from None

    @property
    def label(self) -> str:
        """The file's spelling: ``DENY``, ``PUB``, ``SUB`` or ``PUB|SUB``."""
        return _PERM_LABELS[self.value]


_BOTH = Perm.PUB | Perm.SUB
_PERM_STRINGS = {
    "DENY": Perm.DENY,
    "PUB": Perm.PUB,
    "SUB": Perm.SUB,
    "PUB|SUB": _BOTH,
    "SUB|PUB": _BOTH,
    "ANY": _BOTH,
}
_PERM_LABELS = {0: "DENY", 1: "PUB", 2: "SUB", 3: "PUB|SUB"}


class NeedKind(StrEnum):
    PUBLIC = "PUBLIC"
    ADMIN = "ADMIN"
    TOPIC = "TOPIC"
    GROUP = "GROUP"

    __hash__ = str.__hash__  # the string's own hash, in C (as Perm's)


class Need(NamedTuple):
    """One thing a route needs; a route may need several (receive: SUB on topic and group).  A
    tuple: every signed request makes and compares some."""

    kind: NeedKind
    resource: str | None = None
    perm: Perm = Perm.DENY

    @classmethod
    def public(cls) -> Need:
        return cls(NeedKind.PUBLIC)

    @classmethod
    def admin(cls) -> Need:
        return cls(NeedKind.ADMIN)

    @classmethod
    def topic(cls, name: str, perm: Perm) -> Need:
        return cls(NeedKind.TOPIC, name, _needed(perm))

    @classmethod
    def group(cls, name: str, perm: Perm) -> Need:
        return cls(NeedKind.GROUP, name, _needed(perm))

    def __str__(self) -> str:
        if self.resource is None:
            return self.kind.lower()
        return f"{self.perm.label} on {self.kind.lower()} {self.resource!r}"


def _needed(perm: Perm) -> Perm:
    if perm is Perm.DENY:
        raise ValueError("a need asks for PUB, SUB or both, never DENY")
    return perm


@dataclass(frozen=True)
class Account:
    """One ``accounts`` entry.  ``white_remote_address`` None: usable from any allowed address."""

    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: AddressPattern | None = None
    admin: bool = False
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.DENY
    topic_perms: Mapping[str, Perm] = field(default_factory=dict, hash=False)
    group_perms: Mapping[str, Perm] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        check_access_key(self.access_key)
        check_secret_key(self.secret_key)
        for name in (*self.topic_perms, *self.group_perms):
            check_resource_name(name)
        object.__setattr__(self, "topic_perms", MappingProxyType(dict(self.topic_perms)))
        object.__setattr__(self, "group_perms", MappingProxyType(dict(self.group_perms)))

    def perm_on(self, kind: NeedKind, name: str) -> Perm:
        """The named entry if there is one (an explicit DENY included), else the default."""
        if kind is NeedKind.TOPIC:
            return self.topic_perms.get(name, self.default_topic_perm)
        if kind is NeedKind.GROUP:
            return self.group_perms.get(name, self.default_group_perm)
        raise ValueError(f"{kind} is not a resource")


@dataclass(frozen=True)
class AclConfig:
    """The global white list and the accounts by access key, with a content ``version``."""

    accounts: Mapping[str, Account] = field(default_factory=dict, hash=False)
    global_white_remote_addresses: tuple[AddressPattern, ...] = ()
    version: str = field(init=False)

    def __post_init__(self) -> None:
        for key, account in self.accounts.items():
            if key != account.access_key:
                raise ValueError(f"account {account.access_key!r} is filed under {key!r}")
        object.__setattr__(self, "accounts", MappingProxyType(dict(self.accounts)))
        object.__setattr__(
            self, "global_white_remote_addresses", tuple(self.global_white_remote_addresses)
        )
        object.__setattr__(self, "version", _version(self))

    @classmethod
    def of(
        cls,
        accounts: Iterable[Account],
        global_white_remote_addresses: Iterable[AddressPattern] = (),
    ) -> AclConfig:
        by_key: dict[str, Account] = {}
        for account in accounts:
            if account.access_key in by_key:
                raise ValueError(f"accessKey {account.access_key!r} is defined twice")
            by_key[account.access_key] = account
        return cls(by_key, tuple(global_white_remote_addresses))

    def account(self, access_key: str) -> Account | None:
        return self.accounts.get(access_key)

    def secret_for(self, access_key: str) -> str | None:
        """The lookup :func:`broker_service.acl.signature.verify` takes."""
        account = self.accounts.get(access_key)
        return None if account is None else account.secret_key

    def with_account(self, account: Account) -> AclConfig:
        """Adds the account, or replaces the one with its access key (keeping its place)."""
        return replace(self, accounts={**self.accounts, account.access_key: account})

    def without_account(self, access_key: str) -> AclConfig:
        if access_key not in self.accounts:
            raise KeyError(access_key)
        kept = {key: account for key, account in self.accounts.items() if key != access_key}
        return replace(self, accounts=kept)

    def with_global_white(self, patterns: Iterable[AddressPattern]) -> AclConfig:
        return replace(self, global_white_remote_addresses=tuple(patterns))


def check_access_key(access_key: str) -> str:
    if not ACCESS_KEY_PATTERN.fullmatch(access_key):
        raise ValueError(
            f"accessKey {access_key!r} must be 7-128 characters of A-Z a-z 0-9 _ . @ -"
        )
    return access_key


def check_secret_key(secret_key: str) -> str:
    """Refuses a short or overlong secret without ever quoting it."""
    if not SECRET_KEY_MIN_LENGTH <= len(secret_key) <= SECRET_KEY_MAX_LENGTH:
        raise ValueError(
            f"secretKey must be {SECRET_KEY_MIN_LENGTH}-{SECRET_KEY_MAX_LENGTH} characters"
        )
    return secret_key


def check_resource_name(name: str) -> str:
    if not RESOURCE_NAME_PATTERN.fullmatch(name):
        raise ValueError(f"{name!r} is not a topic or group name (1-255 of A-Z a-z 0-9 _ % -)")
    if name.startswith((RETRY_PREFIX, DLQ_PREFIX)):
        raise ValueError(
            f"{name!r}: retry and DLQ topics are judged by their group's permission;"
            " list the group in groupPerms instead"
        )
    return name


def _version(config: AclConfig) -> str:
    content = {
        "globalWhiteRemoteAddresses": sorted(p.text for p in config.global_white_remote_addresses),
        "accounts": [_normalised(config.accounts[key]) for key in sorted(config.accounts)],
    }
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:VERSION_LENGTH]


def _normalised(account: Account) -> dict[str, Any]:
    white = account.white_remote_address
    return {
        "accessKey": account.access_key,
        "secretKey": account.secret_key,
        "whiteRemoteAddress": None if white is None else white.text,
        "admin": account.admin,
        "defaultTopicPerm": account.default_topic_perm.label,
        "defaultGroupPerm": account.default_group_perm.label,
        "topicPerms": sorted(f"{n}={p.label}" for n, p in account.topic_perms.items()),
        "groupPerms": sorted(f"{n}={p.label}" for n, p in account.group_perms.items()),
    }
