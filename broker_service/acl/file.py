"""The ACL file: RocketMQ's ``plain_acl.yml`` keys, read strictly, written back in the same words.

:func:`parse_acl` refuses a malformed file with :class:`AclFileError` naming the source, the line
(1-based) and the reason: YAML syntax, unknown or repeated keys (a typo is never ignored), wrong
types, a bad permission, address or resource name, a short secret, an access key defined twice.
The YAML is composed into nodes (not just loaded) so that every value keeps its line.

Scalars are taken as written: ``secretKey: 12345678`` (RocketMQ's sample) is the text
``"12345678"``, not a number.  RocketMQ's own ``dataVersion`` key is accepted and ignored.
:func:`dump_acl` writes the file back (secrets included: it is the file) in a stable order.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from broker_service.acl.addresses import AddressPattern, parse_address
from broker_service.acl.errors import AclFileError
from broker_service.acl.model import (
    Account,
    AclConfig,
    Perm,
    check_access_key,
    check_resource_name,
    check_secret_key,
)

TOP_KEYS = ("globalWhiteRemoteAddresses", "accounts", "dataVersion")
ACCOUNT_KEYS = (
    "accessKey",
    "secretKey",
    "whiteRemoteAddress",
    "admin",
    "defaultTopicPerm",
    "defaultGroupPerm",
    "topicPerms",
    "groupPerms",
)
_NULL_TAG = "tag:yaml.org,2002:null"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_HEADER = (
    "# halfmq ACL, in RocketMQ's plain_acl.yml keys (docs/acl.md).\n"
    "# Written by `halfmq acl`: comments are not kept.\n"
)

T = TypeVar("T")


def load_acl(path: str | os.PathLike[str]) -> AclConfig:
    """Reads and parses the file at ``path`` (the only I/O of the ACL core)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise AclFileError(source, None, "the file is not UTF-8 text") from None
    except OSError as exc:
        raise AclFileError(source, None, f"cannot read the file: {exc.strerror}") from None
    return parse_acl(text, source)


def parse_acl(text: str, source: str = "<acl>") -> AclConfig:
    # ``from None`` throughout: YAML's own messages quote the offending line, which may hold a
    # secret key, and a chained exception would carry it into every traceback.
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise AclFileError(source, None if mark is None else mark.line + 1, _syntax(exc)) from None
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        raise AclFileError(source, line, f"character not allowed in YAML ({exc.reason})") from None
    if root is None:
        raise AclFileError(source, None, "the file is empty: expected a mapping with 'accounts'")
    return _Reader(source).config(root)


def dump_acl(config: AclConfig) -> str:
    """The file's text: global white list, then accounts in their order, every key spelled out."""
    document = {
        "globalWhiteRemoteAddresses": [p.text for p in config.global_white_remote_addresses],
        "accounts": [_account_document(account) for account in config.accounts.values()],
    }
    body = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=10_000)
    return _HEADER + body


def _account_document(account: Account) -> dict[str, object]:
    document: dict[str, object] = {
        "accessKey": account.access_key,
        "secretKey": account.secret_key,
    }
    if account.white_remote_address is not None:
        document["whiteRemoteAddress"] = account.white_remote_address.text
    document |= {
        "admin": account.admin,
        "defaultTopicPerm": account.default_topic_perm.label,
        "defaultGroupPerm": account.default_group_perm.label,
        "topicPerms": [f"{name}={perm.label}" for name, perm in account.topic_perms.items()],
        "groupPerms": [f"{name}={perm.label}" for name, perm in account.group_perms.items()],
    }
    return document


class _Reader:
    """Turns composed YAML nodes into an :class:`AclConfig`, failing at the node's line."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: Node, reason: str) -> NoReturn:
        raise AclFileError(self.source, node.start_mark.line + 1, reason)

    def config(self, root: Node) -> AclConfig:
        fields = self.mapping(root, "the file", TOP_KEYS)
        if "accounts" not in fields:
            self.fail(root, "the file has no 'accounts' list")
        white = fields.get("globalWhiteRemoteAddresses")
        nodes = [] if white is None else self.sequence(white, "globalWhiteRemoteAddresses")
        patterns = tuple(self.address(node) for node in nodes)
        accounts: dict[str, Account] = {}
        lines: dict[str, int] = {}
        for node in self.sequence(fields["accounts"], "accounts"):
            account = self.account(node)
            key = account.access_key
            if key in accounts:
                self.fail(node, f"accessKey {key!r} is defined twice (first at line {lines[key]})")
            accounts[key], lines[key] = account, node.start_mark.line + 1
        return AclConfig(accounts, patterns)

    def account(self, node: Node) -> Account:
        fields = self.mapping(node, "an account", ACCOUNT_KEYS)
        for required in ("accessKey", "secretKey"):
            if required not in fields or self.is_null(fields[required]):
                self.fail(node, f"the account has no {required}")
        access_key = self.checked(fields["accessKey"], check_access_key, "accessKey")
        secret_key = self.checked(fields["secretKey"], check_secret_key, "secretKey")
        white = fields.get("whiteRemoteAddress")
        return Account(
            access_key=access_key,
            secret_key=secret_key,
            white_remote_address=self.optional_address(white),
            admin=self.boolean(fields.get("admin"), "admin"),
            default_topic_perm=self.perm(fields.get("defaultTopicPerm"), "defaultTopicPerm"),
            default_group_perm=self.perm(fields.get("defaultGroupPerm"), "defaultGroupPerm"),
            topic_perms=self.resource_perms(fields.get("topicPerms"), "topicPerms"),
            group_perms=self.resource_perms(fields.get("groupPerms"), "groupPerms"),
        )

    def resource_perms(self, node: Node | None, key: str) -> dict[str, Perm]:
        perms: dict[str, Perm] = {}
        for item in [] if node is None else self.sequence(node, key):
            entry = self.text(item, f"an entry of {key}")
            name, equals, perm_text = (part.strip() for part in entry.partition("="))
            if not equals or "=" in perm_text:
                self.fail(item, f"{key} entry {entry!r} must be written name=PERM")
            name = self.guarded(item, check_resource_name, name)
            if name in perms:
                self.fail(item, f"{name!r} is listed twice in {key}")
            perms[name] = self.guarded(item, Perm.parse, perm_text)
        return perms

    def perm(self, node: Node | None, key: str) -> Perm:
        if node is None or self.is_null(node):
            return Perm.DENY  # RocketMQ's default when the key is absent
        return self.guarded(node, Perm.parse, self.text(node, key))

    def address(self, node: Node) -> AddressPattern:
        return self.guarded(node, parse_address, self.text(node, "an address"))

    def optional_address(self, node: Node | None) -> AddressPattern | None:
        if node is None or self.is_null(node):
            return None
        if isinstance(node, ScalarNode) and not node.value.strip():
            return None  # blank, as RocketMQ may write it: no limit beyond the signature
        return self.address(node)

    def checked(self, node: Node, check: Callable[[str], str], key: str) -> str:
        return self.guarded(node, check, self.text(node, key))

    def guarded(self, node: Node, parse: Callable[[str], T], text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            self.fail(node, str(exc))

    def mapping(self, node: Node, what: str, allowed: tuple[str, ...]) -> dict[str, Node]:
        if not isinstance(node, MappingNode):
            self.fail(node, f"{what} must be a mapping of keys to values")
        fields: dict[str, Node] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                self.fail(key_node, f"the keys of {what} must be words, not {_kind(key_node)}")
            key = str(key_node.value)
            if key not in allowed:
                self.fail(key_node, f"unknown key {key!r} in {what}{_did_you_mean(key, allowed)}")
            if key in fields:
                self.fail(key_node, f"{key!r} appears twice in {what}")
            fields[key] = value_node
        return fields

    def sequence(self, node: Node, what: str) -> list[Node]:
        if self.is_null(node):
            return []
        if not isinstance(node, SequenceNode):
            self.fail(node, f"{what} must be a list")
        return list(node.value)

    def text(self, node: Node, what: str) -> str:
        if not isinstance(node, ScalarNode) or self.is_null(node):
            self.fail(node, f"{what} must be a text, not {_kind(node)}")
        return str(node.value)

    def boolean(self, node: Node | None, what: str) -> bool:
        if node is None or self.is_null(node):
            return False
        if not isinstance(node, ScalarNode) or node.tag != _BOOL_TAG:
            self.fail(node, f"{what} must be true or false")
        return bool(yaml.constructor.SafeConstructor.bool_values[node.value.lower()])

    @staticmethod
    def is_null(node: Node | None) -> bool:
        return isinstance(node, ScalarNode) and node.tag == _NULL_TAG


def _syntax(exc: yaml.MarkedYAMLError) -> str:
    reason = f"YAML syntax: {exc.problem or 'not valid YAML'}"
    if exc.context and exc.context_mark is not None:
        reason += f" ({exc.context} at line {exc.context_mark.line + 1})"
    return reason


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return "empty"


def _did_you_mean(key: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    known = ", ".join(allowed)
    return f" (did you mean {close[0]!r}?)" if close else f" (known keys: {known})"
