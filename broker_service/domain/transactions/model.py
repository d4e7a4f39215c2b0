"""The records of the half-message protocol: a transaction's states and decisions, its row in the
transactions index, and the producer instances check-back asks."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple


class TransactionState(StrEnum):
    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"
    DISCARDED = "DISCARDED"


class Decision(StrEnum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"

    @property
    def final_state(self) -> TransactionState:
        if self is Decision.COMMIT:
            return TransactionState.COMMITTED
        return TransactionState.ROLLED_BACK


class ResolvedBy(StrEnum):
    PRODUCER = "producer"
    CHECK = "check"
    OPERATOR = "operator"


class TransactionRecord(NamedTuple):
    transaction_id: str
    msg_id: str
    producer_group: str
    topic: str
    half_offset: int
    real_queue_id: int
    state: TransactionState
    check_times: int
    created_at: int
    check_immunity_ms: int | None = None
    next_check_at: int | None = None
    resolved_at: int | None = None
    resolved_by: ResolvedBy | None = None
    discarded_at: int | None = None
    discard_reason: str | None = None
    check_client_id: str | None = None
    last_checked_at: int | None = None
    last_check_error: str | None = None
    last_check_error_at: int | None = None
    undelivered_since: int | None = None
    check_pending_pull: bool = False


@dataclass(frozen=True, slots=True)
class ProducerInstance:
    """A live member of a producer group, as its last heartbeat described it."""

    producer_group: str
    client_id: str
    callback_url: str | None
    topics: tuple[str, ...]
    last_heartbeat_at: int
    unreachable_until: int | None = None
    last_error: str | None = None
    last_error_at: int | None = None
    access_key: str | None = None

    @property
    def push(self) -> bool:
        """Checks are pushed to a callback URL; without one, the instance pulls them."""
        return self.callback_url is not None

    def reachable(self, now: int) -> bool:
        """False while a check that could not be delivered to it keeps it aside."""
        return self.unreachable_until is None or self.unreachable_until <= now
