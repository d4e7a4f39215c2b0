"""Rows of the schema to the domain's records and back."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import orjson
from sqlalchemy import Row

from broker_service.domain.consumers.model import (
    ConsumeFrom,
    ConsumerGroup,
    Delivery,
    DeliveryState,
    MessageModel,
    QueueProgress,
)
from broker_service.domain.messages.model import PendingMessage, PlainBatch, StoredMessage, Topic
from broker_service.domain.transactions.model import (
    ProducerInstance,
    ResolvedBy,
    TransactionRecord,
    TransactionState,
)


def _mapping(row: Row[Any] | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(row, Row):
        return cast(Mapping[str, Any], row._mapping)
    return row


MESSAGE_COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "msg_id",
    "dedup_key",
    "content_hash",
    "body",
    "encoding",
    "tags",
    "keys",
    "properties",
    "sharding_key",
    "transaction_id",
    "producer_group",
    "born_at",
    "stored_at",
    "deliver_at",
    "reconsume_times",
    "origin_id",
)


# The columns every message has.  A plain message (no tags, keys, properties, sharding key, dedup
# key, transaction, delay, copy; never consumed) is inserted with these alone and the others take
# NULL or their default: binding the eleven others, all NULL, was a large share of SQLite's insert
# time (bench/README.md, "Figures, fourth round", plain messages inserted with eight columns).
PLAIN_MESSAGE_COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "msg_id",
    "body",
    "encoding",
    "born_at",
    "stored_at",
)


def is_plain(m: PendingMessage | PlainBatch) -> bool:
    """Whether the message's other columns are all NULL or their default (see above)."""
    if isinstance(m, PlainBatch):
        return True
    return (
        m.tags is None
        and not m.keys
        and not m.properties
        and m.sharding_key is None
        and m.dedup_key is None
        and m.content_hash is None
        and m.transaction_id is None
        and m.producer_group is None
        and m.deliver_at is None
        and not m.reconsume_times
        and m.origin_id is None
    )


def message_runs(
    pending: Sequence[PendingMessage | PlainBatch],
) -> Iterator[tuple[bool, list[tuple[Any, ...]]]]:
    """The messages as rows, cut where they change between plain and not: ``(plain, rows)``,
    plain rows in ``PLAIN_MESSAGE_COLUMNS`` order, the others in ``MESSAGE_COLUMNS`` order.  Runs
    keep the messages' order, so their ids (commit-log positions) follow it."""
    for plain, run in itertools.groupby(pending, key=is_plain):
        if plain:
            plain_rows: list[tuple[Any, ...]] = []
            for m in run:
                if isinstance(m, PlainBatch):
                    plain_rows.extend(batch_rows(m))
                else:
                    plain_rows.append(_plain_row(m))
            yield True, plain_rows
        else:
            yield False, [message_row(cast(PendingMessage, m)) for m in run]


def batch_rows(b: PlainBatch) -> Iterator[tuple[Any, ...]]:
    """A plain batch's rows, in ``PLAIN_MESSAGE_COLUMNS`` order, zipped from its columns."""
    count = len(b.msg_ids)
    return zip(
        itertools.repeat(b.topic, count),
        itertools.repeat(b.queue_id, count),
        range(b.first_offset, b.first_offset + count),
        b.msg_ids,
        b.bodies,
        b.encodings,
        itertools.repeat(b.born_at, count),
        itertools.repeat(b.stored_at, count),
        strict=True,
    )


_plain_row = operator.attrgetter(*PLAIN_MESSAGE_COLUMNS)  # a message's plain row, as a tuple


def message_row(m: PendingMessage) -> tuple[Any, ...]:
    """The message as driver values, in ``MESSAGE_COLUMNS`` order."""
    return (
        m.topic,
        m.queue_id,
        m.queue_offset,
        m.msg_id,
        m.dedup_key,
        m.content_hash,
        m.body,
        m.encoding,
        m.tags,
        orjson.dumps(list(m.keys)).decode() if m.keys else None,
        orjson.dumps(dict(m.properties)).decode() if m.properties else None,
        m.sharding_key,
        m.transaction_id,
        m.producer_group,
        m.born_at,
        m.stored_at,
        m.deliver_at,
        m.reconsume_times,
        m.origin_id,
    )


def stored_message(row: Row[Any] | Mapping[str, Any], prefix: str = "") -> StoredMessage:
    """A ``messages`` row (its columns named ``prefix`` + column, as in a join) as a record."""
    m = _mapping(row)
    p = prefix
    keys, properties = m[p + "keys"], m[p + "properties"]
    return StoredMessage(
        id=m[p + "id"],
        topic=m[p + "topic"],
        queue_id=m[p + "queue_id"],
        queue_offset=m[p + "queue_offset"],
        msg_id=m[p + "msg_id"],
        body=bytes(m[p + "body"]),
        encoding=m[p + "encoding"],
        tags=m[p + "tags"],
        keys=tuple(orjson.loads(keys)) if keys else (),
        properties=orjson.loads(properties) if properties else {},
        sharding_key=m[p + "sharding_key"],
        transaction_id=m[p + "transaction_id"],
        producer_group=m[p + "producer_group"],
        born_at=m[p + "born_at"],
        stored_at=m[p + "stored_at"],
        deliver_at=m[p + "deliver_at"],
        released_at=m[p + "released_at"],
        reconsume_times=m[p + "reconsume_times"],
        origin_id=m[p + "origin_id"],
        content_hash=m[p + "content_hash"],
        dedup_key=m[p + "dedup_key"],
    )


def topic_record(row: Row[Any] | Mapping[str, Any]) -> Topic:
    m = _mapping(row)
    return Topic(
        name=m["name"],
        queues=m["queues"],
        ordered=bool(m["ordered"]),
        perm=m["perm"],
        system=bool(m["system"]),
        created_at=m["created_at"],
    )


TRANSACTION_COLUMNS = (
    "transaction_id",
    "msg_id",
    "producer_group",
    "topic",
    "half_offset",
    "real_queue_id",
    "state",
    "check_times",
    "check_immunity_ms",
    "created_at",
    "next_check_at",
)


def transaction_row(record: TransactionRecord, half_offset: int) -> tuple[Any, ...]:
    """A new (PREPARED) transaction as driver values, in ``TRANSACTION_COLUMNS`` order."""
    return (
        record.transaction_id,
        record.msg_id,
        record.producer_group,
        record.topic,
        half_offset,
        record.real_queue_id,
        record.state.value,
        record.check_times,
        record.check_immunity_ms,
        record.created_at,
        record.next_check_at,
    )


def transaction_record(row: Row[Any] | Mapping[str, Any]) -> TransactionRecord:
    m = _mapping(row)
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
        last_check_error=m["last_check_error"],
        last_check_error_at=m["last_check_error_at"],
        undelivered_since=m["undelivered_since"],
        check_pending_pull=bool(m["check_pending_pull"]),
        resolved_client=m["resolved_client"],
    )


def producer_instance(row: Row[Any]) -> ProducerInstance:
    m = row._mapping
    return ProducerInstance(
        producer_group=m["producer_group"],
        client_id=m["client_id"],
        callback_url=m["callback_url"],
        topics=tuple(orjson.loads(m["topics"])) if m["topics"] else (),
        last_heartbeat_at=m["last_heartbeat_at"],
        unreachable_until=m["unreachable_until"],
        last_error=m["last_error"],
        last_error_at=m["last_error_at"],
        access_key=m["access_key"],
    )


def consumer_group(r: Any) -> ConsumerGroup:
    return ConsumerGroup(
        name=r["name"],
        message_model=MessageModel(r["message_model"]),
        consume_from=ConsumeFrom(r["consume_from"]),
        consume_timestamp=r["consume_timestamp"],
        max_reconsume_times=r["max_reconsume_times"],
        orderly=bool(r["orderly"]),
        created_at=r["created_at"],
    )


def queue_progress(r: Any) -> QueueProgress:
    return QueueProgress(
        consumer_group=r["consumer_group"],
        topic=r["topic"],
        queue_id=r["queue_id"],
        client_id=r["client_id"],
        committed_offset=r["committed_offset"],
        pulled_offset=r["pulled_offset"],
        expired=r.get("expired", 0),
    )


def delivery(r: Any) -> Delivery:
    return Delivery(
        id=r["id"],
        consumer_group=r["consumer_group"],
        client_id=r["client_id"],
        topic=r["topic"],
        queue_id=r["queue_id"],
        queue_offset=r["queue_offset"],
        msg_id=r["msg_id"],
        receipt_handle=r["receipt_handle"],
        state=DeliveryState(r["state"]),
        reconsume_times=r["reconsume_times"],
        delivered_at=r["delivered_at"],
        invisible_until=r["invisible_until"],
        finished_at=r["finished_at"],
    )
