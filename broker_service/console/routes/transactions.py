"""Transactions: the list (by state, producer group, age) and a page per transaction with the
operator's Commit, Rollback, Check now and Resume checks, each audited on that page."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Literal, cast

from fastapi import Query, Request, Response

from broker_service.acl.model import Need, Perm
from broker_service.api import permissions as rules
from broker_service.api.params import GroupQuery, IdPath
from broker_service.api.permissions import needs
from broker_service.api.schemas.transactions import TransactionStateName
from broker_service.console import views
from broker_service.console.routes.common import back_to, router
from broker_service.console.web import (
    actor_of,
    can,
    checked_form,
    console_of,
    is_admin,
    render,
    who,
)
from broker_service.domain import names
from broker_service.domain.audit.model import AuditResult
from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.errors import DomainError
from broker_service.domain.messages.model import StoredMessage
from broker_service.domain.ports import Store, StoreTx
from broker_service.domain.transactions.check_audit import _why as why_next_round
from broker_service.domain.transactions.halves import Resolving
from broker_service.domain.transactions.model import (
    CHECKED,
    CheckAudit,
    Decision,
    ResolvedBy,
    TransactionRecord,
    TransactionState,
)
from broker_service.domain.transactions.service import TransactionService
from broker_service.metrics import BrokerMetrics


def _service(request: Request) -> TransactionService:
    service: TransactionService = request.app.state.transactions
    return service


def subject_of(transaction_id: str) -> str:
    return f"transaction:{transaction_id}"


async def checks_recorded(store: Store, msg_id: str) -> int:
    """How many checks the half's trace holds in all: the store reads back only the newest (a
    half no instance answers gets one each round)."""

    def unit(tx: StoreTx) -> int:
        return tx.trace_event_count(msg_id, CHECKED)

    return await store.read(unit)


def _half_of(copies: Sequence[StoredMessage]) -> StoredMessage | None:
    """The half among a transaction's message's copies (the committed copy if retention purged
    the half): keys, tags and body are the same in each."""
    return next((m for m in copies if m.topic == names.HALF_TOPIC), copies[0] if copies else None)


async def messages_of(store: Store, msg_ids: Sequence[str]) -> dict[str, StoredMessage]:
    """The listed transactions' messages, in one read (none for a message retention purged)."""

    def unit(tx: StoreTx) -> dict[str, list[StoredMessage]]:
        return tx.find_messages_of(msg_ids)

    found = await store.read(unit) if msg_ids else {}
    halves = {msg_id: _half_of(copies) for msg_id, copies in found.items()}
    return {msg_id: m for msg_id, m in halves.items() if m is not None}


class _ListRead:
    """What the check audit's rule reads of the store, answered from one read for the whole
    list: the live instances of each group listed, and no claim (the store has no read of the
    halves' claims short of one query per half)."""

    def __init__(self, live: dict[str, bool]) -> None:
        self.live = live

    def check_claim(self, transaction_id: str) -> tuple[str | None, int | None]:
        return None, None

    def live_producers(self, group: str, since: int) -> list[object]:
        return [group] if self.live[group] else []


async def next_rounds(
    service: TransactionService, records: Sequence[TransactionRecord]
) -> dict[str, CheckAudit]:
    """Why the next round will or will not check each listed half, by the rule of its page
    (``check_audit``), from the records the list read and one read of the live instances of the
    producer groups listed (a query per group, none per half). Two things the page reads per half
    are not read here: the claim, so a half whose check is in flight (CLAIMED on its page) shows
    what the rule says next -- WAITING, its next_check_at being the claim's end, when it is checked
    again; NO_LIVE_INSTANCE if its group has none left -- and its CHECKED
    events, so younger-than-immunity is judged from the row alone (as with the trace off)."""
    policy = service.checkback.policy
    timeout_ms = service.transactions.sender.config.transaction_timeout_ms
    now = service.clock()
    since = now - policy.producer_expiry_ms
    # Only an open half gets as far as the instances (a resolved one is never checked again).
    open_states = (TransactionState.PREPARED, TransactionState.DISCARDED)
    groups = sorted({r.producer_group for r in records if r.state in open_states})

    def unit(tx: StoreTx) -> dict[str, bool]:
        return {group: bool(tx.live_producers(group, since)) for group in groups}

    live = await service.store.read(unit) if groups else {}
    read = cast(StoreTx, _ListRead(live))
    return {r.transaction_id: why_next_round(read, r, [], policy, timeout_ms, now) for r in records}


@router.get("/transactions")
@needs(rules.list_transactions)
async def transactions(
    request: Request,
    state: TransactionStateName | Literal[""] | None = "PREPARED",
    producer_group: GroupQuery = None,
    older_than_seconds: Annotated[float | None, Query(ge=0, le=10**9)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    records = await _service(request).list_transactions(
        TransactionState(state) if state else None,
        producer_group or None,
        older_than_seconds,
        limit,
    )
    filters = {
        "state": state or "",
        "producer_group": producer_group or "",
        "older_than_seconds": older_than_seconds,
        "limit": limit,
    }
    rounds = await next_rounds(_service(request), records)
    found = await messages_of(_service(request).store, [r.msg_id for r in records])
    keys = {msg_id: m.keys for msg_id, m in found.items()}
    return render(
        request, "transactions.html", records=records, rounds=rounds, keys=keys, filters=filters
    )


@router.get("/transactions/{transaction_id}")
@needs(rules.read_transaction)
async def transaction(transaction_id: IdPath, request: Request) -> Response:
    service = _service(request)
    record = await service.get_transaction(transaction_id)
    trace = None  # the message's trace is an admin's to read, as GET /v1/messages/{id}/trace
    if is_admin(request):
        consumers: ConsumerService = request.app.state.consumers
        try:
            trace = await consumers.trace(record.msg_id)
        except DomainError:
            trace = []
    audit = await console_of(request).auditor.entries(subject_of(transaction_id))
    message = None
    # The page itself needs PUB on the producer group; the message (keys, tags, body) is shown
    # only to an account that may also write or read its topic, as everywhere (docs/acl.md).
    may_read = can(request, Need.topic(record.topic, Perm.PUB)) or can(
        request, Need.topic(record.topic, Perm.SUB)
    )
    if may_read:
        message = (await messages_of(service.store, [record.msg_id])).get(record.msg_id)
    return render(
        request,
        "transaction.html",
        t=record,
        message=message,
        may_read=may_read,
        body=None if message is None else views.body_of(message.body, message.encoding),
        trace=trace,
        checks=await service.checks(transaction_id),
        checks_total=await checks_recorded(service.store, record.msg_id),
        audit=audit,
        actions=_actions(record) if is_admin(request) else [],
    )


def _actions(record: TransactionRecord) -> list[tuple[str, str, str]]:
    """The buttons an admin sees: (path segment, label, what the confirmation asks)."""
    if record.state is TransactionState.PREPARED:
        return [
            ("commit", "Commit", "Commit this transaction? Its message goes to consumers."),
            ("rollback", "Rollback", "Roll this transaction back? Its message is never sent."),
            ("check", "Check now", "Ask a producer instance about this transaction now?"),
        ]
    if record.state is TransactionState.DISCARDED:
        return [
            ("check", "Resume checks", "Resume checks of this discarded half?"),
            ("commit", "Commit", "Commit this discarded half? Its message goes to consumers."),
            ("rollback", "Rollback", "Roll this discarded half back?"),
        ]
    return []


async def _resolve(request: Request, transaction_id: str, decision: Decision) -> Response:
    await checked_form(request)
    action = decision.value.lower()
    auditor = console_of(request).auditor
    subject = subject_of(transaction_id)
    try:
        resolving = Resolving(
            transaction_id, decision, None, ResolvedBy.OPERATOR, actor=actor_of(request)
        )
        resolution = await _service(request).resolve(resolving)
    except DomainError as error:
        detail = {"code": error.code, "message": error.message}
        await auditor.record(who(request), action, subject, AuditResult.FAILED, detail)
        return back_to(f"/console/transactions/{transaction_id}")
    metrics: BrokerMetrics = request.app.state.metrics
    metrics.count_resolution(
        resolution.state.value, ResolvedBy.OPERATOR.value, decision.value, None
    )
    detail = {"state": resolution.state.value}
    await auditor.record(who(request), action, subject, AuditResult.OK, detail)
    return back_to(f"/console/transactions/{transaction_id}")


@router.post("/transactions/{transaction_id}/commit")
@needs(rules.admin)
async def commit(transaction_id: IdPath, request: Request) -> Response:
    return await _resolve(request, transaction_id, Decision.COMMIT)


@router.post("/transactions/{transaction_id}/rollback")
@needs(rules.admin)
async def rollback(transaction_id: IdPath, request: Request) -> Response:
    return await _resolve(request, transaction_id, Decision.ROLLBACK)


@router.post("/transactions/{transaction_id}/check")
@needs(rules.admin)
async def check(transaction_id: IdPath, request: Request) -> Response:
    """Check now; for a DISCARDED half the same call resumes its checks (audited as such)."""
    await checked_form(request)
    service = _service(request)
    auditor = console_of(request).auditor
    subject = subject_of(transaction_id)
    action = "check_now"
    try:
        before = await service.get_transaction(transaction_id)
        if before.state is TransactionState.DISCARDED:
            action = "resume_checks"
        after = await service.check_now(transaction_id, actor_of(request))
    except DomainError as error:
        failed = {"code": error.code, "message": error.message}
        await auditor.record(who(request), action, subject, AuditResult.FAILED, failed)
        return back_to(f"/console/transactions/{transaction_id}")
    wake: Callable[[], None] | None = request.app.state.wake_checks
    if wake is not None:
        wake()
    detail = {"state": after.state.value, "next_check_at": views.rfc3339(after.next_check_at)}
    await auditor.record(who(request), action, subject, AuditResult.OK, detail)
    return back_to(f"/console/transactions/{transaction_id}")
