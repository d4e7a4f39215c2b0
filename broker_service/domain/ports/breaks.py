"""The store's role for the reconciliation's breaks: an operator's status on each break the
nightly job reports, set in the console and read back by the job's next runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# What an operator may say of a break; the job itself closes a break the data resolves.
BREAK_STATUSES = ("open", "acknowledged", "explained", "resolved")


@dataclass(frozen=True, slots=True)
class BreakStatus:
    break_id: str
    status: str  # one of BREAK_STATUSES
    note: str | None
    kind: str | None  # the break's kind when the status was set
    report: str | None  # the report it was set from
    actor: str | None  # the access key (None with the ACL off)
    updated_at: int


class BreakStatusStore(Protocol):
    def set_break_status(self, status: BreakStatus) -> None:
        """Insert or replace the status of ``status.break_id``."""
        ...

    def break_statuses(self, break_ids: Sequence[str]) -> dict[str, BreakStatus]:
        """The statuses of those breaks that have one, by break id."""
        ...
