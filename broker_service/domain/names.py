"""Names of topics, groups, tags and keys, and the broker's own (system) topics."""

from __future__ import annotations

import re
from collections.abc import Sequence

from broker_service.domain.errors import InvalidName, InvalidRequest, SystemTopic

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_PREFIXES = ("RMQ_SYS_", RETRY_PREFIX, DLQ_PREFIX, "SCHEDULE_TOPIC_")

MAX_KEYS = 32
MAX_KEY_LENGTH = 128
MAX_TAG_LENGTH = 128

_NAME = re.compile(r"[A-Za-z0-9_-]{1,127}")  # fullmatch: "$" would let a final "\n" in
_WHITESPACE = re.compile(r"\s")


def is_system_topic(name: str) -> bool:
    return name.startswith(SYSTEM_PREFIXES)


def check_name(name: str, what: str = "topic") -> str:
    """A topic or group name: ``^[A-Za-z0-9_-]{1,127}$``."""
    if not _NAME.fullmatch(name):
        raise InvalidName(
            f"{what} name {name!r} must be 1-127 characters of A-Z a-z 0-9 _ -",
            code=f"INVALID_{what.upper().replace(' ', '_')}_NAME",
            name=name,
        )
    return name


def check_user_topic(name: str) -> str:
    """A topic a user may create, send to or delete: a valid name that is not a system topic."""
    if is_system_topic(name):
        raise SystemTopic(
            f"topic {name!r} is reserved for the broker (system topics start with "
            + ", ".join(SYSTEM_PREFIXES)
            + ")",
            topic=name,
        )
    return check_name(name, "topic")


def check_tag(tag: str) -> str:
    if not 1 <= len(tag) <= MAX_TAG_LENGTH or "|" in tag or _WHITESPACE.search(tag):
        raise InvalidRequest(
            f"tag {tag!r} must be 1-{MAX_TAG_LENGTH} characters without '|' or whitespace",
            code="INVALID_TAG",
        )
    return tag


def check_keys(keys: Sequence[str]) -> list[str]:
    if len(keys) > MAX_KEYS:
        raise InvalidRequest(f"at most {MAX_KEYS} keys per message", code="INVALID_KEYS")
    for key in keys:
        if not 1 <= len(key) <= MAX_KEY_LENGTH:
            raise InvalidRequest(
                f"each key must be 1-{MAX_KEY_LENGTH} characters", code="INVALID_KEYS"
            )
    return list(keys)
