"""``/v1/transactions``: half messages, commit, rollback, their state, and their check audit."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status

from broker_service.api import convert
from broker_service.api import permissions as rules
from broker_service.api.deps import TransactionsDep, metrics_of, nonce_of, transactions_of
from broker_service.api.errors import ERROR_RESPONSES
from broker_service.api.params import GroupQuery, IdPath
from broker_service.api.permissions import TransactionGuard, needs, transaction_guard
from broker_service.api.schemas.trace import CheckAuditOut
from broker_service.api.schemas.transactions import (
    DecisionIn,
    ResolutionOut,
    TransactionIn,
    TransactionListOut,
    TransactionOut,
    TransactionStateName,
)
from broker_service.domain.transactions.halves import Resolving
from broker_service.domain.transactions.model import Decision, ResolvedBy, TransactionState
from halfmq_wire.records import HalfReceipt

router = APIRouter(prefix="/v1/transactions", tags=["transactions"], responses=ERROR_RESPONSES)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=HalfReceipt)
@needs(rules.send_half)
async def send_half(body: TransactionIn, request: Request) -> Response:
    """Store a half message in RMQ_SYS_TRANS_HALF_TOPIC, invisible to consumers."""
    half = await store_half(request, body)
    return convert.json_response(half, status.HTTP_201_CREATED)


async def store_half(request: Request, body: TransactionIn) -> dict[str, Any]:
    """One half stored, answered as the contract's ``HalfReceipt``: this route's work, and each
    item's of ``POST /v1/transactions:batch``."""
    receipt = await transactions_of(request).prepare(
        body.topic,
        body.to_draft(),
        body.producer_group,
        body.check_immunity_seconds,
        body.client_id,
        nonce=nonce_of(request),
    )
    if not receipt.duplicate:
        metrics_of(request).halves.inc()
    return HalfReceipt(receipt.transaction_id, receipt.msg_id, receipt.duplicate).to_json()


async def _resolve(
    transaction_id: str, decision: Decision, body: DecisionIn | None, request: Request
) -> Response:
    guard = transaction_guard(request.state)  # the ACL's need on the transaction's topic
    resolution = await resolve(request, transaction_id, decision, body or DecisionIn(), guard)
    return convert.json_response(resolution)


async def resolve(
    request: Request,
    transaction_id: str,
    decision: Decision,
    body: DecisionIn,
    guard: TransactionGuard | None,
) -> dict[str, Any]:
    """One commit or rollback, answered as ``ResolutionOut``: the two routes' work, and each
    item's of ``POST /v1/transactions/decisions:batch``.  ``guard``: the ACL's needs on the
    transaction's own topic and group, checked by the resolving unit."""
    by = ResolvedBy.CHECK if body.from_check else ResolvedBy.PRODUCER
    if body.producer_group is None and not body.from_check:
        by = ResolvedBy.OPERATOR
    service = transactions_of(request)
    resolving = Resolving(
        transaction_id,
        decision,
        body.producer_group,
        by,
        guard,
        actor=getattr(request.state, "access_key", None),  # an operator's, with the ACL on
        client_id=body.client_id,
        pull_answer=body.from_check,
    )
    resolution = await service.resolve(resolving, nonce=nonce_of(request))
    metrics_of(request).count_resolution(
        resolution.state.value, by.value, decision.value, resolution.check_latency_ms
    )
    return convert.resolution_dict(resolution)


@router.post("/{transaction_id}/commit", response_model=ResolutionOut)
@needs(rules.end_transaction)
async def commit(
    transaction_id: IdPath, request: Request, body: DecisionIn | None = None
) -> Response:
    """Append the op record and put the message into its real topic, atomically."""
    return await _resolve(transaction_id, Decision.COMMIT, body, request)


@router.post("/{transaction_id}/rollback", response_model=ResolutionOut)
@needs(rules.end_transaction)
async def rollback(
    transaction_id: IdPath, request: Request, body: DecisionIn | None = None
) -> Response:
    """Append the op record only: the message is never delivered."""
    return await _resolve(transaction_id, Decision.ROLLBACK, body, request)


@router.get("/{transaction_id}", response_model=TransactionOut)
@needs(rules.read_transaction)
async def get_transaction(transaction_id: IdPath, service: TransactionsDep) -> TransactionOut:
    return convert.transaction_out(await service.get_transaction(transaction_id))


@router.get("/{transaction_id}/checks", response_model=CheckAuditOut)
@needs(rules.read_transaction)
async def check_audit(transaction_id: IdPath, service: TransactionsDep) -> CheckAuditOut:
    """The check audit: every check of the transaction, oldest first (instance, answer or
    failure, latency), and whether the next round checks it, or why not."""
    return convert.check_audit_out(await service.checks(transaction_id))


@router.get("", response_model=TransactionListOut)
@needs(rules.list_transactions)
async def list_transactions(
    service: TransactionsDep,
    state: TransactionStateName | None = None,
    producer_group: GroupQuery = None,
    older_than_seconds: Annotated[float | None, Query(ge=0, le=10**9)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> TransactionListOut:
    records = await service.list_transactions(
        TransactionState(state) if state else None, producer_group, older_than_seconds, limit
    )
    return TransactionListOut(transactions=[convert.transaction_out(r) for r in records])
