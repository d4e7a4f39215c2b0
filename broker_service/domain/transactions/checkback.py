"""Check-back: resolving transactions whose producer went silent (RocketMQ's transaction check).

A *round* claims the due halves -- ``next_check_at`` has passed and no decision arrived -- in the
store, so several brokers on one database never check one half twice, and decides for each:

* its topic is gone, or it was checked ``transaction_check_max`` times: park it as DISCARDED (a copy
  goes to ``RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC``); it stays resolvable by its producer or an operator;
* no instance of its producer group is live: skip it -- the round costs it nothing;
* live instances, but every one is kept aside as unreachable: skip it too, uncounted, noting why;
* otherwise choose one reachable live instance: the one that sent the half (``PROP_SENT_BY``,
  when its transport named it) while it is live and reachable -- RocketMQ's open request, "check
  the original producer first" -- else round-robin, preferring instances that declared the
  topic: a push instance gets an HTTP check now; a pull instance gets the check assigned.  A
  sender that never took its last pull check is passed over for one round.

``check_times`` counts only checks that reached an instance: a push check once the scheduler knows
the producer received it (:meth:`CheckBack.delivered`: an answer, an error status, a time-out after
the request was sent), a pull check when the instance takes it.  A push check that reached nobody
(refused, reset, a connect time-out, a DNS or TLS failure) is :meth:`CheckBack.undelivered`: the
instance is kept aside for ``unreachable_ms`` and the check goes to another reachable instance in
the same round, or the half waits a round, uncounted.  A half whose checks keep failing delivery is
reported after ``undelivered_alert_ms``, never discarded for it.  A broker that dies between claim
and send leaves only the claim, which expires.

What came of a push is applied only while the broker's claim on the half holds (the same broker,
the same claim, not expired): a broker that stalled past its claim (its event loop, its store) may
find the half claimed and checked by another broker since, or due again.  Such a late outcome is
traced, uncounted, and changes nothing else -- no count, no new schedule, no other instance asked;
the half's next round checks it.  The decision an answer carries is still applied, once, as any.

The answer is applied exactly like a producer's own commit or rollback (``ResolvedBy.CHECK``).

Every check leaves a ``CHECKED`` trace event on its half's ``msg_id`` (unless the ``trace`` setting
is off), written in the unit that records what came of it -- no unit of its own: the instance it
went to, the answer and its latency, or the failure (:class:`CheckOutcome`).  A pull check's
answer is a commit or rollback ``from_check`` (``Transactions.resolve`` writes its event); its
silence (UNKNOWN) is found by the next round that claims the half.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from broker_service.domain import names
from broker_service.domain.config import CheckPolicy
from broker_service.domain.errors import Conflict
from broker_service.domain.messages.model import StoredMessage
from broker_service.domain.ports import CheckAssignment, CheckClaim, CheckStore, StoreTx, TraceStore
from broker_service.domain.transactions.halves import unknown_transaction
from broker_service.domain.transactions.model import (
    CHECKED,
    PROP_SENT_BY,
    CheckFailure,
    CheckOutcome,
    ProducerInstance,
    TransactionRecord,
    TransactionState,
)

DISCARD_CHECK_MAX = "CHECK_MAX"
DISCARD_TOPIC_DELETED = "TOPIC_DELETED"
DISCARD_HALF_MISSING = "HALF_MISSING"

_OPEN_STATES = (TransactionState.PREPARED, TransactionState.DISCARDED)
_DECISIONS = ("COMMIT", "ROLLBACK")
_ERROR_MAX = 1000  # characters of a delivery error kept with the half and the instance
RESUMED = "RESUMED"
OPERATOR_CHECK = "OPERATOR_CHECK"


def _client(instance: ProducerInstance) -> str:
    return instance.client_id


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """What a producer is asked: RocketMQ's checkLocalTransaction(msg)."""

    transaction_id: str
    producer_group: str
    msg_id: str
    topic: str
    tags: str | None
    keys: tuple[str, ...]
    body: bytes
    encoding: str
    properties: dict[str, str]
    check_times: int
    sender: str | None = None  # the instance that sent the half: asked first while live


@dataclass(frozen=True, slots=True)
class PushCheck:
    request: CheckRequest
    instance: ProducerInstance
    until: int  # the end of the claim this broker took for it (``assign_check``)


@dataclass(frozen=True, slots=True)
class Overdue:
    """A half whose checks have failed to reach any instance since ``since``."""

    transaction_id: str
    producer_group: str
    since: int
    error: str


@dataclass(slots=True)
class RoundReport:
    claimed: int = 0
    pushes: list[PushCheck] = field(default_factory=list)
    pull_assigned: Counter[tuple[str, str]] = field(default_factory=Counter)
    skipped_no_producer: list[str] = field(default_factory=list)
    skipped_unreachable: list[str] = field(default_factory=list)
    discarded: list[tuple[str, str]] = field(default_factory=list)
    overdue: list[Overdue] = field(default_factory=list)
    late: list[str] = field(default_factory=list)  # outcomes dropped: the claim had expired


def _pulled_unanswered(record: TransactionRecord, live: Sequence[ProducerInstance]) -> bool:
    """The half's last check went to a live pull instance, which took it (``last_checked_at``)
    and, the half being claimed again, never answered: UNKNOWN, in pull mode's words."""
    if record.check_client_id is None or record.last_checked_at is None:
        return False
    instance = next((i for i in live if i.client_id == record.check_client_id), None)
    return instance is not None and not instance.push


def choose_instance(
    instances: Sequence[ProducerInstance], topic: str, turn: int, sender: str | None = None
) -> ProducerInstance:
    """The half's ``sender`` when it is among ``instances``; else round-robin over them, those
    that declared ``topic`` first."""
    if sender is not None:
        for instance in instances:
            if instance.client_id == sender:
                return instance
    declared = [i for i in instances if topic in i.topics]
    pool = declared or list(instances)
    return pool[turn % len(pool)]


def check_payload(request: CheckRequest) -> dict[str, Any]:
    """The check as producers receive it (docs/api.md, "Push checks" and "Pull checks"): a push
    check's body, an item of a pull answer."""
    if request.encoding == "base64":
        body = base64.b64encode(request.body).decode("ascii")
    else:
        body = request.body.decode("utf-8", errors="surrogateescape")
    return {
        "transaction_id": request.transaction_id,
        "producer_group": request.producer_group,
        "msg_id": request.msg_id,
        "topic": request.topic,
        "tags": request.tags,
        "keys": list(request.keys),
        "body": body,
        "encoding": request.encoding,
        "properties": request.properties,
        "check_times": request.check_times,
    }


def check_request(record: TransactionRecord, half: StoredMessage, check_times: int) -> CheckRequest:
    return CheckRequest(
        transaction_id=record.transaction_id,
        producer_group=record.producer_group,
        msg_id=record.msg_id,
        topic=record.topic,
        tags=half.tags,
        keys=half.keys,
        body=half.body,
        encoding=half.encoding,
        properties=dict(half.properties),
        check_times=check_times,
        sender=half.properties.get(PROP_SENT_BY),
    )


def claim_gone(now: int, until: int) -> str:
    """Why an outcome came too late: its claim ran out, or (before its end) an operator's "check
    now" released it."""
    if now >= until:
        return f"came {now - until} ms after this broker's claim ended"
    return "came after this broker's claim was released (an operator's check now)"


class CheckBack:
    def __init__(self, policy: CheckPolicy, clock: Callable[[], int]) -> None:
        self.policy = policy
        self.clock = clock
        self._turns: Counter[str] = Counter()

    # -- the scheduler's round -----------------------------------------------------------------

    def claim_round(self, limit: int) -> Callable[[StoreTx], RoundReport]:
        def unit(tx: StoreTx) -> RoundReport:
            now = self.clock()
            report = RoundReport()
            due = tx.claim_due_transactions(now, limit)
            report.claimed = len(due)
            live: dict[str, list[ProducerInstance]] = {}
            for record in due:
                self._decide(tx, record, now, live, report)
            return report

        return unit

    def _decide(
        self,
        tx: StoreTx,
        record: TransactionRecord,
        now: int,
        live: dict[str, list[ProducerInstance]],
        report: RoundReport,
    ) -> None:
        policy = self.policy
        half = tx.get_message_at(names.HALF_TOPIC, 0, record.half_offset)
        reason = None
        if half is None:
            reason = DISCARD_HALF_MISSING
        elif record.state is TransactionState.PREPARED:
            if tx.get_topic(record.topic) is None:
                reason = DISCARD_TOPIC_DELETED
            elif record.check_times >= policy.check_max:
                reason = DISCARD_CHECK_MAX
        if reason is not None:
            if self._discard(tx, record, half, reason, now):
                report.discarded.append((record.transaction_id, reason))
            return
        assert half is not None
        group = record.producer_group
        if group not in live:
            since = now - policy.producer_expiry_ms
            live[group] = sorted(tx.live_producers(group, since), key=_client)
        if not live[group]:
            tx.schedule_check(record.transaction_id, now + policy.interval_ms)
            report.skipped_no_producer.append(record.transaction_id)
            no_one = CheckOutcome(None, failure=CheckFailure.NO_LIVE_INSTANCE)
            self._trace_check(tx, record.msg_id, record, policy.broker_id, no_one, now)
            return
        request = check_request(record, half, record.check_times + 1)
        if record.check_pending_pull:  # its last assignment was never taken: it reached nobody
            error = f"{record.check_client_id}: a pull check not taken within an interval"
            self._note_undelivered(tx, request, error, now, report)
            not_taken = CheckOutcome("pull", failure=CheckFailure.TIMEOUT, error=error)
            self._trace_check(tx, record.msg_id, record, record.check_client_id, not_taken, now)
            if record.check_client_id == request.sender:  # the others' turn, this round
                request = replace(request, sender=None)
        elif _pulled_unanswered(record, live[group]):
            silent = CheckOutcome("pull", answer="UNKNOWN", error="no answer within an interval")
            self._trace_check(tx, record.msg_id, record, record.check_client_id, silent, now)
        self._dispatch(tx, request, live[group], now, report)

    def _dispatch(
        self,
        tx: StoreTx,
        request: CheckRequest,
        instances: Sequence[ProducerInstance],
        now: int,
        report: RoundReport,
    ) -> None:
        """Hand the check to a reachable instance; with none, the half waits a round, uncounted."""
        policy, transaction_id, group = self.policy, request.transaction_id, request.producer_group
        reachable = [i for i in instances if i.reachable(now)]
        if not reachable:
            tx.schedule_check(transaction_id, now + policy.interval_ms)
            report.skipped_unreachable.append(transaction_id)
            error = "no reachable instance: " + "; ".join(
                f"{i.client_id}: {i.last_error}" for i in instances
            )
            self._note_undelivered(tx, request, error, now, report)
            aside = CheckOutcome(None, failure=CheckFailure.NO_REACHABLE_INSTANCE, error=error)
            uncounted = replace(request, check_times=request.check_times - 1)
            self._trace_check(tx, request.msg_id, uncounted, policy.broker_id, aside, now)
            return
        instance = choose_instance(reachable, request.topic, self._turns[group], request.sender)
        if instance.client_id != request.sender:
            self._turns[group] += 1
        # a push is in flight until well after it has had its answer; a pull waits an interval
        in_flight = policy.interval_ms
        if instance.push:
            in_flight += 2 * policy.push_timeout_ms
        until = now + in_flight
        claim = CheckClaim(policy.broker_id, until)
        tx.assign_check(
            CheckAssignment(transaction_id, instance.client_id, not instance.push, claim)
        )
        if instance.push:
            report.pushes.append(PushCheck(request, instance, until))
        else:
            report.pull_assigned[(group, instance.client_id)] += 1

    def _note_undelivered(
        self, tx: CheckStore, request: CheckRequest, error: str, now: int, report: RoundReport
    ) -> None:
        since = tx.note_undelivered(request.transaction_id, error[:_ERROR_MAX], now)
        if since is not None and now - since >= self.policy.undelivered_alert_ms:
            report.overdue.append(
                Overdue(request.transaction_id, request.producer_group, since, error)
            )

    def _trace_check(
        self,
        tx: TraceStore,
        msg_id: str,
        counted: TransactionRecord | CheckRequest,
        instance: str | None,
        outcome: CheckOutcome,
        now: int,
    ) -> None:
        """The ``CHECKED`` event of one check, by the instance it went to (the broker when it
        went to no one); ``counted``'s ``check_times`` is the count the detail shows."""
        if not self.policy.trace:
            return
        detail = outcome.detail(counted.transaction_id, counted.check_times)
        by = instance or self.policy.broker_id
        tx.add_trace(msg_id, CHECKED, by, now, orjson.dumps(detail).decode())

    def _discard(
        self,
        tx: StoreTx,
        record: TransactionRecord,
        half: StoredMessage | None,
        reason: str,
        now: int,
    ) -> bool:
        if not tx.discard_transaction(record.transaction_id, now, reason):
            return False
        if half is not None:
            parked = half.copy_to(
                names.CHECK_MAX_TIME_TOPIC,
                0,
                stored_at=now,
                properties={**half.properties, "DISCARD_REASON": reason},
            )
            parked.sharding_key = None  # the parked copy has never carried it
            tx.append(parked)
        return True

    # -- pull mode --------------------------------------------------------------------------------

    def take_pull_checks(
        self, group: str, client_id: str, limit: int
    ) -> Callable[[StoreTx], list[CheckRequest]]:
        names.check_name(group, "producer group")

        def unit(tx: StoreTx) -> list[CheckRequest]:
            now = self.clock()
            requests = []
            for record in tx.pending_pull_checks(group, client_id, limit):
                half = tx.get_message_at(names.HALF_TOPIC, 0, record.half_offset)
                if half is None:
                    continue
                tx.mark_pulled(record.transaction_id, now, now + self.policy.interval_ms)
                requests.append(check_request(record, half, record.check_times + 1))
            return requests

        return unit

    # -- what became of a push ------------------------------------------------------------------

    def delivered(self, check: PushCheck, outcome: CheckOutcome) -> Callable[[StoreTx], bool]:
        """The producer received the check: count it, and trace what it answered (or why it did
        not).  Unless its answer decided the transaction (the caller resolves it next), check
        again an interval later; a DISCARDED half that an operator had checked stays parked.
        Only while this broker's claim holds: a late outcome is traced, uncounted, and nothing
        else changes (the unit answers False)."""
        request = check.request
        transaction_id = request.transaction_id
        error = None if outcome.error is None else outcome.error[:_ERROR_MAX]

        def unit(tx: StoreTx) -> bool:
            now = self.clock()
            if not self._claim_holds(tx, check, now):
                self._trace_late(tx, check, outcome, now)
                return False
            tx.count_check(transaction_id, now, None if outcome.answer else error)
            self._trace_check(tx, request.msg_id, request, check.instance.client_id, outcome, now)
            if outcome.answer not in _DECISIONS:
                tx.finish_check(transaction_id, now + self.policy.interval_ms)
            return True

        return unit

    def _claim_holds(self, tx: CheckStore, check: PushCheck, now: int) -> bool:
        claim = CheckClaim(self.policy.broker_id, check.until)
        return tx.holds_claim(check.request.transaction_id, claim, now)

    def _trace_late(
        self, tx: TraceStore, check: PushCheck, outcome: CheckOutcome, now: int
    ) -> None:
        """The ``CHECKED`` event of an outcome that came after the claim: uncounted, and saying so."""
        request = check.request
        late = f"{claim_gone(now, check.until)}: not counted"
        error = late if outcome.error is None else f"{outcome.error}; {late}"
        uncounted = replace(request, check_times=request.check_times - 1)
        instance, noted = check.instance.client_id, replace(outcome, error=error)
        self._trace_check(tx, request.msg_id, uncounted, instance, noted, now)

    def undelivered(
        self, check: PushCheck, outcome: CheckOutcome, *, set_aside: bool = True
    ) -> Callable[[StoreTx], RoundReport]:
        """The check reached nobody: nothing is counted, the instance is kept aside for a while
        (unless ``set_aside`` is False: it is only busy, it answered other checks just now), and
        the check goes to another reachable live instance of the group now (the report's push or
        pull assignment) or, with none, the half waits a round."""

        error = outcome.error or outcome.result

        def unit(tx: StoreTx) -> RoundReport:
            now, policy = self.clock(), self.policy
            instance, request = check.instance, check.request
            described = f"{instance.client_id}: {error}"[:_ERROR_MAX]
            report = RoundReport()
            if not self._claim_holds(tx, check, now):
                # another broker may hold the half now: not ours to note, reschedule or redirect
                self._trace_late(tx, check, outcome, now)
                report.late.append(request.transaction_id)
                return report
            uncounted = replace(request, check_times=request.check_times - 1)
            self._trace_check(tx, request.msg_id, uncounted, instance.client_id, outcome, now)
            if set_aside:
                tx.mark_unreachable(
                    instance.producer_group,
                    instance.client_id,
                    until=now + policy.unreachable_ms,
                    error=described,
                    now=now,
                )
            record = tx.get_transaction(request.transaction_id)
            if record is None or record.state not in _OPEN_STATES:
                return report  # decided meanwhile: nothing left to check
            self._note_undelivered(tx, request, described, now, report)
            since = now - policy.producer_expiry_ms
            instances = [
                i
                for i in sorted(tx.live_producers(request.producer_group, since), key=_client)
                if i.client_id != instance.client_id
            ]
            if instances:
                self._dispatch(tx, request, instances, now, report)
            else:
                tx.schedule_check(request.transaction_id, now + policy.interval_ms)
                report.skipped_unreachable.append(request.transaction_id)
            return report

        return unit

    # -- operators --------------------------------------------------------------------------------

    def check_now(
        self, transaction_id: str, actor: str | None = None
    ) -> Callable[[StoreTx], TransactionRecord]:
        """An operator's "check again now", also for a DISCARDED half (which it RESUMES).
        ``actor``: the operator's access key with the ACL on.  The operator's action is always
        traced (``OPERATOR_CHECK``, an audit record); ``RESUMED`` only with the ``trace`` setting."""

        def unit(tx: StoreTx) -> TransactionRecord:
            record = tx.get_transaction(transaction_id)
            if record is None:
                raise unknown_transaction(tx, transaction_id)
            if record.state in (TransactionState.COMMITTED, TransactionState.ROLLED_BACK):
                raise Conflict(
                    f"transaction {transaction_id} is already {record.state.value}",
                    code="TRANSACTION_ALREADY_RESOLVED",
                    transaction_id=transaction_id,
                    state=record.state.value,
                )
            now = self.clock()
            tx.force_check(transaction_id, now)
            by = actor or "operator"
            before = {"transaction_id": transaction_id, "state": record.state.value}
            tx.add_trace(record.msg_id, OPERATOR_CHECK, by, now, orjson.dumps(before).decode())
            if record.state is TransactionState.DISCARDED and self.policy.trace:
                resumed = {
                    "transaction_id": transaction_id,
                    "discard_reason": record.discard_reason,
                }
                tx.add_trace(record.msg_id, RESUMED, by, now, orjson.dumps(resumed).decode())
            refreshed = tx.get_transaction(transaction_id)
            assert refreshed is not None
            return refreshed

        return unit
