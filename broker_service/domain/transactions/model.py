"""The records of the half-message protocol: a transaction's states and decisions, its row in the
transactions index, and the producer instances check-back asks."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

# The half's property naming the producer instance that sent it (its ``client_id``), set only by
# the broker: check-back asks that instance first while it is live (RocketMQ's open request,
# "check the original producer first").  Dropped from the committed message.
PROP_SENT_BY = "SENT_BY_CLIENT"


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
    resolved_client: str | None = None  # the instance whose commit or rollback named itself


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


# -- checks as the trace and the check audit record them ----------------------------------------

CHECKED = "CHECKED"


class CheckFailure(StrEnum):
    """Why a check brought no answer."""

    TIMEOUT = "timeout"  # no answer in time (sent, or not even connected), or a pull not taken
    REFUSED = "refused"  # the instance's address refused the connection
    ERROR = "error"  # an HTTP error status, an unreadable answer, a broken connection
    NO_LIVE_INSTANCE = "no_live_instance"  # the round found no live instance of the group
    NO_REACHABLE_INSTANCE = "no_reachable_instance"  # live ones, all kept aside as unreachable


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """What came of one check: the instance's answer (``COMMIT``, ``ROLLBACK``, ``UNKNOWN``) and
    how long it took, or the failure.  It is the detail of a ``CHECKED`` trace event."""

    mode: str | None  # "push" or "pull"; None for a check the round could hand to no one
    answer: str | None = None
    failure: CheckFailure | None = None
    latency_ms: int | None = None
    status: int | None = None  # the HTTP status of an ``error``
    error: str | None = None  # the failure as the scheduler saw it

    @property
    def result(self) -> str:
        """The answer, else the failure: the ``result`` label of ``halfmq_check_seconds``."""
        if self.answer is not None:
            return self.answer
        return self.failure.value if self.failure is not None else "UNKNOWN"

    def detail(self, transaction_id: str, check_times: int) -> dict[str, object]:
        described: dict[str, object] = {"transaction_id": transaction_id}
        if self.mode is not None:
            described["mode"] = self.mode
        described["check_times"] = check_times
        if self.answer is not None:
            described["answer"] = self.answer
        if self.failure is not None:
            described["failure"] = self.failure.value
        for name in ("latency_ms", "status", "error"):
            value = getattr(self, name)
            if value is not None:
                described[name] = value
        return described


@dataclass(frozen=True, slots=True)
class CheckEntry:
    """One check in a transaction's check audit, read back from its ``CHECKED`` event."""

    at: int
    mode: str | None
    instance: str
    check_times: int | None
    answer: str | None = None
    failure: str | None = None
    latency_ms: int | None = None
    status: int | None = None
    error: str | None = None


class CheckDue(StrEnum):
    """Whether the next round checks the transaction, and if not, why not."""

    DUE = "DUE"  # the next round claims it
    WAITING = "WAITING"  # checked again at next_check_at
    IMMUNE = "IMMUNE"  # younger than its check immunity (or the transaction timeout)
    CLAIMED = "CLAIMED"  # a check is in flight: a broker holds the claim until claimed_until
    NO_LIVE_INSTANCE = "NO_LIVE_INSTANCE"  # rounds skip it, uncounted, until an instance is live
    DISCARDED = "DISCARDED"  # parked after transaction_check_max checks; an operator resumes it
    RESOLVED = "RESOLVED"  # committed or rolled back: never checked again


@dataclass(frozen=True, slots=True)
class CheckAudit:
    """A transaction's check audit (``TransactionService.checks``): its checks, oldest first, and
    why the next round will or will not check it."""

    transaction: TransactionRecord
    checks: list[CheckEntry]
    due: CheckDue
    reason: str
    next_check_at: int | None
    until: int | None = None  # immune until, claimed until
    claimed_by: str | None = None
