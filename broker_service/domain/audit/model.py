"""The audit log's record: one operator action (or its refusal), as the console wrote it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

ANONYMOUS = "anonymous"  # who acted when the ACL is off: nobody signed in


class AuditResult(StrEnum):
    OK = "ok"
    REFUSED = "refused"  # the ACL or the CSRF check said no: nothing was done
    FAILED = "failed"  # tried, and the broker answered an error (an unknown id, a conflict)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """``subject``: what the action was on (``transaction:<id>``, ``topic:<name>``, ...), so
    that a page can show the entries about the thing it shows."""

    at: int
    access_key: str
    action: str
    subject: str
    result: AuditResult
    detail: dict[str, Any] = field(default_factory=dict)
    id: int | None = None  # given by the store
