"""Rows of the schema to the domain's records and back."""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import Row

from broker_service.domain.model import (
    PendingMessage,
    ProducerInstance,
    ResolvedBy,
    StoredMessage,
    Topic,
    TransactionRecord,
    TransactionState,
)


def _json(value: Any) -> str | None:
    if not value:
        return None
    return orjson.dumps(value).decode()


def message_values(message: PendingMessage) -> dict[str, Any]:
    return {
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "msg_id": message.msg_id,
        "dedup_key": message.dedup_key,
        "content_hash": message.content_hash,
        "body": message.body,
        "encoding": message.encoding,
        "tags": message.tags,
        "keys": _json(list(message.keys)),
        "properties": _json(dict(message.properties)),
        "sharding_key": message.sharding_key,
        "transaction_id": message.transaction_id,
        "producer_group": message.producer_group,
        "born_at": message.born_at,
        "stored_at": message.stored_at,
        "deliver_at": message.deliver_at,
        "reconsume_times": message.reconsume_times,
        "origin_id": message.origin_id,
    }


def stored_message(row: Row[Any]) -> StoredMessage:
    m = row._mapping
    return StoredMessage(
        id=m["id"],
        topic=m["topic"],
        queue_id=m["queue_id"],
        queue_offset=m["queue_offset"],
        msg_id=m["msg_id"],
        body=bytes(m["body"]),
        encoding=m["encoding"],
        tags=m["tags"],
        keys=tuple(orjson.loads(m["keys"])) if m["keys"] else (),
        properties=orjson.loads(m["properties"]) if m["properties"] else {},
        sharding_key=m["sharding_key"],
        transaction_id=m["transaction_id"],
        producer_group=m["producer_group"],
        born_at=m["born_at"],
        stored_at=m["stored_at"],
        deliver_at=m["deliver_at"],
        released_at=m["released_at"],
        reconsume_times=m["reconsume_times"],
        origin_id=m["origin_id"],
        content_hash=m["content_hash"],
        dedup_key=m["dedup_key"],
    )


def topic_record(row: Row[Any]) -> Topic:
    m = row._mapping
    return Topic(
        name=m["name"],
        queues=m["queues"],
        ordered=bool(m["ordered"]),
        perm=m["perm"],
        system=bool(m["system"]),
        created_at=m["created_at"],
    )


def transaction_values(record: TransactionRecord, half_offset: int) -> dict[str, Any]:
    return {
        "transaction_id": record.transaction_id,
        "msg_id": record.msg_id,
        "producer_group": record.producer_group,
        "topic": record.topic,
        "half_offset": half_offset,
        "real_queue_id": record.real_queue_id,
        "state": record.state.value,
        "check_times": record.check_times,
        "check_immunity_ms": record.check_immunity_ms,
        "created_at": record.created_at,
        "next_check_at": record.next_check_at,
        "resolved_at": record.resolved_at,
        "resolved_by": record.resolved_by.value if record.resolved_by else None,
        "discarded_at": record.discarded_at,
    }


def transaction_record(row: Row[Any]) -> TransactionRecord:
    m = row._mapping
    return TransactionRecord(
        transaction_id=m["transaction_id"],
        msg_id=m["msg_id"],
        producer_group=m["producer_group"],
        topic=m["topic"],
        half_offset=m["half_offset"],
        real_queue_id=m["real_queue_id"],
        state=TransactionState(m["state"]),
        check_times=m["check_times"],
        created_at=m["created_at"],
        check_immunity_ms=m["check_immunity_ms"],
        next_check_at=m["next_check_at"],
        resolved_at=m["resolved_at"],
        resolved_by=ResolvedBy(m["resolved_by"]) if m["resolved_by"] else None,
        discarded_at=m["discarded_at"],
        discard_reason=m["discard_reason"],
        check_client_id=m["check_client_id"],
        last_checked_at=m["last_checked_at"],
    )


def producer_instance(row: Row[Any]) -> ProducerInstance:
    m = row._mapping
    return ProducerInstance(
        producer_group=m["producer_group"],
        client_id=m["client_id"],
        callback_url=m["callback_url"],
        topics=tuple(orjson.loads(m["topics"])) if m["topics"] else (),
        last_heartbeat_at=m["last_heartbeat_at"],
    )
