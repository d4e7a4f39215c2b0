"""Retry and dead-letter copies, made the RocketMQ way.

A nacked message is copied into ``SCHEDULE_TOPIC_XXXX`` with ``REAL_TOPIC = %RETRY%{group}``: the
delay scheduler moves it into the group's retry topic when its delay -- level ``3 +
reconsume_times`` of ``message_delay_level`` -- has passed.  Past ``max_reconsume_times`` the copy
goes to ``%DLQ%{group}`` instead.  Copies keep the ``msg_id``, tags, keys and body; ``RETRY_TOPIC``
remembers the topic the message was first sent to.
"""

from __future__ import annotations

import orjson

from broker_service.domain import names
from broker_service.domain.consumers.model import (
    PROP_DLQ_ORIGIN_GROUP,
    PROP_ORIGIN_OFFSET,
    PROP_ORIGIN_QUEUE_ID,
    PROP_RETRY_TOPIC,
    ConsumerGroup,
    dlq_topic,
    retry_topic,
)
from broker_service.domain.messages.model import (
    PROP_DELIVER_AT,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PendingMessage,
    StoredMessage,
)
from broker_service.domain.ports import StoreTx

RETRY_FIRST_LEVEL = 3  # RocketMQ: retry k waits delay level 3 + k


def retry_level(reconsume_times: int, levels: int) -> int:
    return min(RETRY_FIRST_LEVEL + reconsume_times, levels)


def _copy(
    message: StoredMessage, topic: str, queue_id: int, reconsume_times: int, now: int
) -> PendingMessage:
    properties = dict(message.properties)
    properties.setdefault(PROP_RETRY_TOPIC, message.topic)
    properties.setdefault(PROP_ORIGIN_QUEUE_ID, str(message.queue_id))
    properties.setdefault(PROP_ORIGIN_OFFSET, str(message.queue_offset))
    return message.copy_to(
        topic, queue_id, stored_at=now, properties=properties, reconsume_times=reconsume_times
    )


def schedule_retry(
    tx: StoreTx,
    group: ConsumerGroup,
    message: StoredMessage,
    reconsume_times: int,
    level: int,
    deliver_at: int,
    now: int,
) -> None:
    """The copy that comes back to the group through %RETRY%{group} at ``deliver_at``."""
    copy = _copy(message, names.SCHEDULE_TOPIC, level - 1, reconsume_times, now)
    properties = dict(copy.properties)
    properties[PROP_REAL_TOPIC] = retry_topic(group.name)
    properties[PROP_REAL_QUEUE_ID] = "0"
    properties[PROP_DELIVER_AT] = str(deliver_at)
    copy.properties = properties
    copy.deliver_at = deliver_at
    tx.append(copy)
    detail = {"group": group.name, "reconsume_times": reconsume_times, "deliver_at": deliver_at}
    tx.add_trace(message.msg_id, "RETRIED", group.name, now, orjson.dumps(detail).decode())


def dead_letter(
    tx: StoreTx,
    group: ConsumerGroup,
    message: StoredMessage,
    reconsume_times: int,
    now: int,
    actor: str,
) -> None:
    """Park the message in %DLQ%{group}: kept, listed, resendable."""
    copy = _copy(message, dlq_topic(group.name), 0, reconsume_times, now)
    properties = dict(copy.properties)
    properties[PROP_DLQ_ORIGIN_GROUP] = group.name
    copy.properties = properties
    tx.append(copy)
    detail = {"group": group.name, "reconsume_times": reconsume_times}
    tx.add_trace(message.msg_id, "DEAD", actor, now, orjson.dumps(detail).decode())


def resend_copy(message: StoredMessage, group: ConsumerGroup, now: int) -> PendingMessage:
    """A dead message back to its group: into %RETRY%{group}, deliverable now, count reset."""
    copy = _copy(message, retry_topic(group.name), 0, 0, now)
    properties = dict(copy.properties)
    properties.pop(PROP_DLQ_ORIGIN_GROUP, None)
    copy.properties = properties
    return copy
