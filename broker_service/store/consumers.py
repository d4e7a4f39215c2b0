"""The consumer-group part of ``SqlTx``: groups, their subscriptions and members.

The other consumer parts: each queue's progress (``store/progress.py``), the deliveries behind
receipt handles and the trace (``store/deliveries.py``), and the units PostgreSQL runs beside the
writer (``store/concurrent.py``).  Claims live in the database: see ``store/progress.py``.
"""

from __future__ import annotations

from sqlalchemy import bindparam, delete, select

from broker_service.domain.consumers.model import ConsumerGroup, Member, Subscription
from broker_service.store import rows
from broker_service.store.part import SqlPart
from broker_service.store.schema import consumer_groups, consumer_offsets, consumers, subscriptions

g = consumer_groups.c
s = subscriptions.c

_group = select(consumer_groups).where(g.name == bindparam("name"))
_subscriptions = (
    select(subscriptions).where(s.consumer_group == bindparam("group")).order_by(s.topic)
)
_members = (
    select(consumers).where(consumers.c.consumer_group == bindparam("group")).order_by("client_id")
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

    def delete_consumer_group(self, group: str) -> None:
        for table, column in (
            (subscriptions, s.consumer_group),
            (consumers, consumers.c.consumer_group),
            (consumer_offsets, consumer_offsets.c.consumer_group),
            (consumer_groups, g.name),
        ):
            self.conn.execute(delete(table).where(column == group))
