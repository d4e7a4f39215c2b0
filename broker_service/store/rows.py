"""Rows of the schema to the domain's records and back."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields, is_dataclass
from typing import Any, TypeVar, cast

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

R = TypeVar("R")


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


def _json_tuple(text: str | None) -> tuple[Any, ...]:
    return tuple(orjson.loads(text)) if text else ()


def _json_dict(text: str | None) -> dict[str, Any]:
    return orjson.loads(text) if text else {}


def _optional(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: kind(value) if value else None


def _field_names(record: Any) -> list[str]:
    """A dataclass's or a named tuple's fields, in the order its constructor takes them."""
    if is_dataclass(record):
        return [f.name for f in fields(record)]
    return list(record._fields)


def _reader(
    record: Callable[..., R], convert: Mapping[str, Callable[[Any], Any]], prefix: str = ""
) -> Callable[[Any], R]:
    """Reads a ``record`` (a dataclass or named tuple) from a row whose columns are named as its
    fields (``prefix`` + field, as in a join): each column's value as the driver gives it, or
    through ``convert``'s function for it (an enum from its value, bytes, JSON, a bool)."""
    names = _field_names(record)
    values = operator.itemgetter(*(prefix + name for name in names))
    steps = [(i, convert[name]) for i, name in enumerate(names) if name in convert]

    def read(row: Any) -> R:
        got = list(values(_mapping(row)))
        for i, fn in steps:
            got[i] = fn(got[i])
        return record(*got)

    return read


_MESSAGE: dict[str, Callable[[Any], Any]] = {
    "body": bytes,
    "keys": _json_tuple,
    "properties": _json_dict,
}
_message_readers = {prefix: _reader(StoredMessage, _MESSAGE, prefix) for prefix in ("", "m_")}


def stored_message(row: Row[Any] | Mapping[str, Any], prefix: str = "") -> StoredMessage:
    """A ``messages`` row (its columns named ``prefix`` + column, as in a join) as a record."""
    return _message_readers[prefix](row)


topic_record = _reader(Topic, {"ordered": bool, "system": bool})


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


transaction_record = _reader(
    TransactionRecord,
    {
        "state": TransactionState,
        "resolved_by": _optional(ResolvedBy),
        "check_pending_pull": bool,
    },
)
producer_instance = _reader(ProducerInstance, {"topics": _json_tuple})


def heartbeat_row(instance: ProducerInstance) -> dict[str, Any]:
    """The columns of ``producers`` an instance's heartbeat writes (not its delivery errors)."""
    return {
        "producer_group": instance.producer_group,
        "client_id": instance.client_id,
        "callback_url": instance.callback_url,
        "topics": orjson.dumps(list(instance.topics)).decode(),
        "last_heartbeat_at": instance.last_heartbeat_at,
        "access_key": instance.access_key,
    }


consumer_group = _reader(
    ConsumerGroup,
    {"message_model": MessageModel, "consume_from": ConsumeFrom, "orderly": bool},
)
queue_progress = _reader(QueueProgress, {})
delivery = _reader(Delivery, {"state": DeliveryState})
