"""Releasing delayed messages: once its time has come, a message parked in SCHEDULE_TOPIC_XXXX is
copied into its real topic and queue (where it gets its offset) and marked released -- RocketMQ's
ScheduleMessageService.  Claimed in the store, so with several brokers each is released once."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker_service.domain import names
from broker_service.domain.messages.model import (
    PROP_DELIVER_AT,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
)
from broker_service.domain.ports import MessageStore, StoreTx

log = logging.getLogger("halfmq.delays")


@dataclass(frozen=True, slots=True)
class ReleaseReport:
    released: int
    dropped: int
    next_due: int | None


class DelayReleaser:
    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock

    def release_due(self, limit: int) -> Callable[[StoreTx], ReleaseReport]:
        def unit(tx: MessageStore) -> ReleaseReport:
            now = self.clock()
            released = dropped = 0
            for message in tx.claim_due_delayed(names.SCHEDULE_TOPIC, now, limit):
                properties = dict(message.properties)
                topic = properties.pop(PROP_REAL_TOPIC)
                queue_id = int(properties.pop(PROP_REAL_QUEUE_ID))
                properties.pop(PROP_DELIVER_AT, None)
                tx.mark_released(message.id, now)
                if tx.get_topic(topic) is None:
                    log.warning(
                        "delayed message %s dropped: topic %r is gone", message.msg_id, topic
                    )
                    dropped += 1
                    continue
                tx.append(
                    message.copy_to(
                        topic,
                        queue_id,
                        stored_at=now,
                        properties=properties,
                        deliver_at=message.deliver_at,
                    )
                )
                released += 1
            return ReleaseReport(released, dropped, tx.next_delayed_at(names.SCHEDULE_TOPIC))

        return unit
