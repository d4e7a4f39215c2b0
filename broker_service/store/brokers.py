"""The brokers part of ``SqlTx``: each broker's row, upserted at its beats, listed, forgotten."""

from __future__ import annotations

from sqlalchemy import delete, select

from broker_service.domain.brokers.model import BrokerPresence
from broker_service.store.part import SqlPart
from broker_service.store.schema import brokers


class BrokerPart(SqlPart):
    def see_broker(self, presence: BrokerPresence) -> None:
        values = {
            "broker_id": presence.broker_id,
            "address": presence.address,
            "version": presence.version,
            "store_kind": presence.store_kind,
            "started_at": presence.started_at,
            "last_seen_at": presence.last_seen_at,
            "grpc_address": presence.grpc_address,
        }
        stmt = self._insert()(brokers).values(**values)
        changed = {name: stmt.excluded[name] for name in values if name != "broker_id"}
        self.conn.execute(stmt.on_conflict_do_update(index_elements=["broker_id"], set_=changed))

    def forget_brokers(self, seen_before: int) -> int:
        result = self.conn.execute(delete(brokers).where(brokers.c.last_seen_at < seen_before))
        return int(result.rowcount)

    def list_brokers(self) -> list[BrokerPresence]:
        result = self.conn.execute(select(brokers).order_by(brokers.c.broker_id))
        return [
            BrokerPresence(
                broker_id=row.broker_id,
                address=row.address,
                version=row.version,
                store_kind=row.store_kind,
                started_at=int(row.started_at),
                last_seen_at=int(row.last_seen_at),
                grpc_address=row.grpc_address,
            )
            for row in result
        ]
