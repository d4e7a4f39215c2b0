"""RECONSUME_LATER and dead letters: nack, the DLQ list, and resend from the DLQ.

* Clustering: a nacked message is copied to ``%RETRY%{group}`` through ``SCHEDULE_TOPIC_XXXX`` and
  comes back after the delay of level ``3 + reconsume_times`` (or the level the consumer asked
  for); its delivery ends, so the queue's committed offset moves on.
* Orderly: the message stays at the head of its queue (``RETRYING``) and is handed out again after
  the delay; nothing newer of its queue goes out meanwhile.
* Past the group's ``max_reconsume_times`` the message goes to ``%DLQ%{group}``; an operator lists
  and resends it (back to the group through its retry topic, reconsume count reset).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import orjson

from broker_service.domain import names
from broker_service.domain.consumers.copies import (
    dead_letter,
    resend_copy,
    retry_level,
    schedule_retry,
)
from broker_service.domain.consumers.groups import Groups, get_group
from broker_service.domain.consumers.leases import Leases, live_delivery, progress_key, stale
from broker_service.domain.consumers.model import (
    PROP_RETRY_TOPIC,
    DeadMessage,
    DeliveryState,
    NackResult,
    dlq_topic,
)
from broker_service.domain.errors import Conflict, InvalidRequest, NotFound
from broker_service.domain.ports import StoreTx


@dataclass(eq=False)
class Retries:
    groups: Groups
    leases: Leases

    @property
    def levels(self) -> tuple[int, ...]:
        return self.groups.config.delay_levels_ms

    def nack(
        self, group_name: str, handle: str, delay_level: int | None
    ) -> Callable[[StoreTx], NackResult]:
        names.check_name(group_name, "consumer group")
        if delay_level is not None and not 0 <= delay_level <= len(self.levels):
            raise InvalidRequest(
                f"delay_level must be 1-{len(self.levels)} (0 or null: the retry schedule)",
                code="INVALID_DELAY_LEVEL",
            )

        def unit(tx: StoreTx) -> NackResult:
            group = get_group(tx, group_name)
            now = self.groups.clock()
            delivery = live_delivery(tx, group, handle, now)
            message = tx.get_message_at(delivery.topic, delivery.queue_id, delivery.queue_offset)
            if message is None:
                raise NotFound(
                    f"message {delivery.msg_id!r} is gone (purged)",
                    code="MESSAGE_NOT_FOUND",
                    msg_id=delivery.msg_id,
                )
            times = delivery.reconsume_times + 1
            key = progress_key(group, delivery)
            if times > self.groups.max_reconsume_times(group):
                if not tx.set_delivery(delivery, delivery.ended(DeliveryState.DEAD, now)):
                    raise stale(handle)
                dead_letter(tx, group, message, times, now, delivery.client_id)
                tx.advance_committed([key], now)
                return NackResult(handle, message.msg_id, times, "DLQ", None)
            level = delay_level or retry_level(delivery.reconsume_times, len(self.levels))
            deliver_at = now + self.levels[level - 1]
            if group.orderly:
                # Stays at the head of its queue; handed out again (times + 1) when due.
                self.leases.lease_ends(group.name, deliver_at)
                retrying = replace(
                    delivery, state=DeliveryState.RETRYING, invisible_until=deliver_at
                )
                if not tx.set_delivery(delivery, retrying):
                    raise stale(handle)
                detail = {"group": group.name, "reconsume_times": times, "deliver_at": deliver_at}
                tx.add_trace(
                    message.msg_id, "NACKED", group.name, now, orjson.dumps(detail).decode()
                )
                return NackResult(handle, message.msg_id, times, "RETRY_IN_PLACE", deliver_at)
            if not tx.set_delivery(delivery, delivery.ended(DeliveryState.NACKED, now)):
                raise stale(handle)
            schedule_retry(tx, group, message, times, level, deliver_at, now)
            tx.advance_committed([key], now)
            return NackResult(handle, message.msg_id, times, "RETRY", deliver_at)

        return unit

    def dead_messages(self, group_name: str, limit: int) -> Callable[[StoreTx], list[DeadMessage]]:
        names.check_name(group_name, "consumer group")

        def unit(tx: StoreTx) -> list[DeadMessage]:
            group = get_group(tx, group_name)
            return [
                DeadMessage(m, m.properties.get(PROP_RETRY_TOPIC), m.released_at)
                for m in tx.topic_messages(dlq_topic(group.name), limit)
            ]

        return unit

    def resend(self, group_name: str, msg_id: str) -> Callable[[StoreTx], DeadMessage]:
        names.check_name(group_name, "consumer group")

        def unit(tx: StoreTx) -> DeadMessage:
            group = get_group(tx, group_name)
            found = tx.find_in_topic(dlq_topic(group.name), msg_id)
            waiting = [m for m in found if m.released_at is None]
            if not waiting:
                if found:
                    raise Conflict(
                        f"dead message {msg_id!r} was already resent",
                        code="MESSAGE_ALREADY_RESENT",
                        msg_id=msg_id,
                    )
                if tx.purged_at("m", [msg_id]) is not None:
                    raise NotFound(
                        f"dead message {msg_id!r} expired: retention purged it",
                        code="MESSAGE_EXPIRED",
                        msg_id=msg_id,
                    )
                raise NotFound(
                    f"no dead message {msg_id!r} in consumer group {group.name!r}",
                    code="DEAD_MESSAGE_NOT_FOUND",
                    msg_id=msg_id,
                )
            now = self.groups.clock()
            for dead in waiting:
                tx.mark_released(dead.id, now)
                tx.append(resend_copy(dead, group, now))
                tx.add_trace(dead.msg_id, "RESENT", "operator", now, None)
            last = waiting[-1]
            return DeadMessage(last, last.properties.get(PROP_RETRY_TOPIC), now)

        return unit
