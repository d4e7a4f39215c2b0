"""The consumer-group part of ``SqlTx``: groups, their subscriptions and members.

The other consumer parts: each queue's progress (``store/progress.py``), the deliveries behind
receipt handles and the trace (``store/deliveries.py``), and the units PostgreSQL runs beside the
writer (``store/concurrent.py``).  Claims live in the database: see ``store/progress.py``.
"""

from __future__ import annotations

from sqlalchemy import and_, bindparam, delete, func, literal, select, union_all

from broker_service.domain.consumers.model import ConsumerGroup, Member, MessageModel, Subscription
from broker_service.domain.names import DLQ_PREFIX, RETRY_PREFIX
from broker_service.domain.ports.consumers import GroupQueueProgress
from broker_service.store import rows
from broker_service.store.part import SqlPart
from broker_service.store.schema import (
    consumer_groups,
    consumer_offsets,
    consumers,
    messages,
    queues,
    subscriptions,
)

g = consumer_groups.c
s = subscriptions.c
o = consumer_offsets.c

_group = select(consumer_groups).where(g.name == bindparam("name"))
_subscriptions = (
    select(subscriptions).where(s.consumer_group == bindparam("group")).order_by(s.topic)
)
_members = (
    select(consumers).where(consumers.c.consumer_group == bindparam("group")).order_by("client_id")
)

# The backlog read at scrape time: each group's topics (its subscriptions and its retry topic),
# their queues, the group's progress rows in them and the members those rows belong to -- one
# statement for every group, its rows (queues x broadcasting members) walked by primary keys.
_read_topics = union_all(
    select(s.consumer_group.label("grp"), s.topic.label("topic")),
    select(g.name.label("grp"), (literal(RETRY_PREFIX) + g.name).label("topic")),
).subquery()
_all_progress = (
    select(
        _read_topics.c.grp,
        g.message_model,
        queues.c.topic,
        queues.c.queue_id,
        queues.c.next_offset,
        o.client_id,
        o.committed_offset,
        consumers.c.last_seen_at,
    )
    .select_from(
        _read_topics.join(consumer_groups, g.name == _read_topics.c.grp)
        .join(queues, queues.c.topic == _read_topics.c.topic)
        .outerjoin(
            consumer_offsets,
            and_(
                o.consumer_group == _read_topics.c.grp,
                o.topic == queues.c.topic,
                o.queue_id == queues.c.queue_id,
            ),
        )
        .outerjoin(
            consumers,
            and_(
                consumers.c.consumer_group == o.consumer_group,
                consumers.c.client_id == o.client_id,
            ),
        )
    )
    .order_by(_read_topics.c.grp, queues.c.topic, queues.c.queue_id)
)
# Dead letters not resent, per group: its DLQ topic's rows, by the (topic, queue, offset) key.
_dead_counts = (
    select(g.name, func.count(messages.c.id))
    .select_from(
        consumer_groups.outerjoin(
            messages,
            and_(
                messages.c.topic == literal(DLQ_PREFIX) + g.name,
                messages.c.released_at.is_(None),
            ),
        )
    )
    .group_by(g.name)
)


class GroupPart(SqlPart):
    @property
    def claims_need_locks(self) -> bool:
        """PostgreSQL may have several brokers writing; SQLite's one writer serializes claims."""
        return self._postgres

    def get_consumer_group(self, name: str) -> ConsumerGroup | None:
        row = self.conn.execute(_group, {"name": name}).first()
        return rows.consumer_group(row._mapping) if row else None

    def create_consumer_group(self, group: ConsumerGroup) -> bool:
        """Insert the group; False if it exists already (another broker created it first)."""
        stmt = (
            self._insert()(consumer_groups)
            .values(
                name=group.name,
                message_model=group.message_model.value,
                consume_from=group.consume_from.value,
                consume_timestamp=group.consume_timestamp,
                max_reconsume_times=group.max_reconsume_times,
                orderly=group.orderly,
                created_at=group.created_at,
            )
            .on_conflict_do_nothing()
        )
        return bool(self.conn.execute(stmt).rowcount == 1)

    def list_subscriptions(self, group: str) -> list[Subscription]:
        result = self.conn.execute(_subscriptions, {"group": group})
        return [Subscription(r.consumer_group, r.topic, r.expression, r.created_at) for r in result]

    def put_subscription(self, subscription: Subscription) -> None:
        stmt = self._insert()(subscriptions).values(
            consumer_group=subscription.consumer_group,
            topic=subscription.topic,
            expression=subscription.expression,
            created_at=subscription.created_at,
        )
        self.conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["consumer_group", "topic"],
                set_={"expression": stmt.excluded.expression},
            )
        )

    def touch_consumer(self, group: str, client_id: str, at: int) -> None:
        stmt = self._insert()(consumers).values(
            consumer_group=group, client_id=client_id, last_seen_at=at
        )
        self.conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["consumer_group", "client_id"],
                set_={"last_seen_at": stmt.excluded.last_seen_at},
            )
        )

    def list_consumers(self, group: str) -> list[Member]:
        result = self.conn.execute(_members, {"group": group})
        return [Member(r.consumer_group, r.client_id, r.last_seen_at) for r in result]

    def all_groups_progress(self) -> list[GroupQueueProgress]:
        broadcasting = MessageModel.BROADCASTING.value
        return [
            GroupQueueProgress(
                r.grp,
                r.message_model == broadcasting,
                r.topic,
                r.queue_id,
                r.next_offset,
                r.client_id,
                r.committed_offset,
                r.last_seen_at,
            )
            for r in self.conn.execute(_all_progress)
        ]

    def dead_letter_counts(self) -> dict[str, int]:
        return {str(name): int(count) for name, count in self.conn.execute(_dead_counts)}

    def delete_consumer_group(self, group: str) -> None:
        for table, column in (
            (subscriptions, s.consumer_group),
            (consumers, consumers.c.consumer_group),
            (consumer_offsets, consumer_offsets.c.consumer_group),
            (consumer_groups, g.name),
        ):
            self.conn.execute(delete(table).where(column == group))
