"""The brokers part of ``SqlTx``: each broker's row, upserted at its beats, listed, forgotten."""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy import delete, select

from broker_service.domain.brokers.model import BrokerPresence
from broker_service.store.part import SqlPart
from broker_service.store.schema import brokers


class BrokerPart(SqlPart):
    # A broker's row has the record's fields for columns.

    def see_broker(self, presence: BrokerPresence) -> None:
        self._upsert(brokers, "broker_id", asdict(presence))

    def forget_brokers(self, seen_before: int) -> int:
        result = self.conn.execute(delete(brokers).where(brokers.c.last_seen_at < seen_before))
        return int(result.rowcount)

    def list_brokers(self) -> list[BrokerPresence]:
        result = self.conn.execute(select(brokers).order_by(brokers.c.broker_id))
        return [BrokerPresence(**row._mapping) for row in result]
