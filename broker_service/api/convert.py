"""Domain records to the contract's response models."""

from __future__ import annotations

import base64
from typing import Any

import orjson
from fastapi import Response

from broker_service.api.schemas.brokers import BrokerOut
from broker_service.api.schemas.common import rfc3339
from broker_service.api.schemas.messages import (
    MessageCopyOut,
    MessageLifeOut,
    MessageOut,
    QueueOut,
    TopicOut,
)
from broker_service.api.schemas.trace import CheckAuditOut, CheckEntryOut
from broker_service.api.schemas.transactions import TransactionOut
from broker_service.domain.brokers.model import BrokerSeen
from broker_service.domain.messages.life import MessageLife
from broker_service.domain.messages.model import PlainBatch, StoredMessage
from broker_service.domain.messages.sending import SendReceipt
from broker_service.domain.messages.topics import TopicView
from broker_service.domain.transactions.halves import Resolution
from broker_service.domain.transactions.model import CheckAudit, TransactionRecord


def body_text(message: StoredMessage) -> str:
    if message.encoding == "base64":
        return base64.b64encode(message.body).decode("ascii")
    return message.body.decode("utf-8", errors="replace")  # stored utf-8 bodies are valid


def message_fields(message: StoredMessage) -> dict[str, object]:
    return {
        "msg_id": message.msg_id,
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "body": body_text(message),
        "encoding": message.encoding,
        "tags": message.tags,
        "keys": list(message.keys),
        "properties": dict(message.properties),
        "sharding_key": message.sharding_key,
        "born_at": rfc3339(message.born_at),
        "stored_at": rfc3339(message.stored_at),
        "deliver_at": rfc3339(message.deliver_at),
        "reconsume_times": message.reconsume_times,
        "transaction_id": message.transaction_id,
    }


def message_out(message: StoredMessage) -> MessageOut:
    return MessageOut.model_validate(message_fields(message))


def life_out(life: MessageLife) -> MessageLifeOut:
    fields = message_fields(life.message)
    fields["stage"] = life.stage
    fields["transaction_state"] = life.transaction.state.value if life.transaction else None
    fields["copies"] = [
        MessageCopyOut(
            topic=m.topic,
            queue_id=m.queue_id,
            queue_offset=m.queue_offset,
            stored_at=rfc3339(m.stored_at) or "",
        )
        for m in life.copies
    ]
    return MessageLifeOut.model_validate(fields)


def json_response(content: Any, status_code: int = 200) -> Response:
    """A JSON answer serialized by orjson, for the hot routes: they still declare their
    ``response_model`` (the OpenAPI schema, checked by the fuzz tests), but building a pydantic model
    per message cost more than storing the message."""
    return Response(orjson.dumps(content), status_code=status_code, media_type="application/json")


def _send_result(
    msg_id: str,
    topic: str,
    queue_id: int,
    queue_offset: int | None,
    duplicate: bool = False,
    deliver_at: str | None = None,
) -> dict[str, Any]:
    """``SendResultOut`` as a plain dict (the hot routes answer it through orjson)."""
    return {
        "msg_id": msg_id,
        "topic": topic,
        "queue_id": queue_id,
        "queue_offset": queue_offset,
        "status": "SEND_OK",
        "duplicate": duplicate,
        "deliver_at": deliver_at,
    }


def receipt_dict(receipt: SendReceipt) -> dict[str, Any]:
    """A send's ``SendResultOut``."""
    return _send_result(
        receipt.msg_id,
        receipt.topic,
        receipt.queue_id,
        receipt.queue_offset,
        receipt.duplicate,
        rfc3339(receipt.deliver_at),
    )


def plain_receipt_dicts(batch: PlainBatch) -> list[dict[str, Any]]:
    """``SendResultOut`` for each message of a plain batch: one queue, consecutive offsets."""
    topic, queue_id, first = batch.topic, batch.queue_id, batch.first_offset
    return [
        _send_result(msg_id, topic, queue_id, offset)
        for offset, msg_id in enumerate(batch.msg_ids, first)
    ]


def broker_out(seen: BrokerSeen) -> BrokerOut:
    p = seen.presence
    return BrokerOut(
        broker_id=p.broker_id,
        address=p.address,
        version=p.version,
        store=p.store_kind,
        started_at=rfc3339(p.started_at) or "",
        last_seen_at=rfc3339(p.last_seen_at) or "",
        seen_seconds_ago=seen.seen_ms_ago / 1000,
        live=seen.live,
    )


def topic_out(view: TopicView) -> TopicOut:
    topic = view.topic
    return TopicOut(
        name=topic.name,
        queues=topic.queues,
        order=topic.ordered,
        perm=topic.perm,
        created_at=rfc3339(topic.created_at) or "",
        queue_offsets=[
            QueueOut(queue_id=q.queue_id, min_offset=q.min_offset, max_offset=q.max_offset)
            for q in view.queues
        ],
    )


def transaction_out(record: TransactionRecord) -> TransactionOut:
    return TransactionOut(
        transaction_id=record.transaction_id,
        state=record.state.value,
        producer_group=record.producer_group,
        topic=record.topic,
        msg_id=record.msg_id,
        check_times=record.check_times,
        created_at=rfc3339(record.created_at) or "",
        resolved_at=rfc3339(record.resolved_at),
        resolved_by=record.resolved_by.value if record.resolved_by else None,
        resolved_client=record.resolved_client,
        last_checked_at=rfc3339(record.last_checked_at),
        last_check_error=record.last_check_error,
        last_check_error_at=rfc3339(record.last_check_error_at),
        undelivered_since=rfc3339(record.undelivered_since),
    )


def check_audit_out(audit: CheckAudit) -> CheckAuditOut:
    record = audit.transaction
    return CheckAuditOut(
        transaction_id=record.transaction_id,
        state=record.state.value,
        producer_group=record.producer_group,
        msg_id=record.msg_id,
        check_times=record.check_times,
        next_check_at=rfc3339(audit.next_check_at),
        due=audit.due.value,
        why=audit.reason,
        until=rfc3339(audit.until),
        claimed_by=audit.claimed_by,
        checks=[
            CheckEntryOut(
                at=rfc3339(c.at) or "",
                mode=c.mode,
                instance=c.instance,
                check_times=c.check_times,
                answer=c.answer,
                failure=c.failure,
                latency_ms=c.latency_ms,
                status=c.status,
                error=c.error,
            )
            for c in audit.checks
        ],
    )


def resolution_dict(resolution: Resolution) -> dict[str, Any]:
    """``ResolutionOut`` as a plain dict (the real message's place only for a commit)."""
    committed = resolution.state.value == "COMMITTED"
    return {
        "transaction_id": resolution.transaction_id,
        "state": resolution.state.value,
        "msg_id": resolution.msg_id,
        "topic": resolution.topic if committed else None,
        "queue_id": resolution.queue_id if committed else None,
        "queue_offset": resolution.queue_offset if committed else None,
    }
