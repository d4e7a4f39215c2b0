"""The clients part of ``SqlTx``: the gRPC clients' profiles, upserted by id, read, forgotten."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select

from broker_service.domain.clients.model import ClientProfile
from broker_service.store.part import SqlPart
from broker_service.store.schema import grpc_clients


class ClientPart(SqlPart):
    def save_client(self, profile: ClientProfile) -> None:
        values = {
            "client_id": profile.client_id,
            "access_key": profile.access_key,
            "language": profile.language,
            "client_version": profile.version,
            "settings": profile.settings,
            "updated_at": profile.updated_at,
        }
        self._upsert(grpc_clients, "client_id", values)

    def get_clients(self, client_ids: Sequence[str]) -> dict[str, ClientProfile]:
        if not client_ids:
            return {}
        query = select(grpc_clients).where(grpc_clients.c.client_id.in_(list(client_ids)))
        return {
            row.client_id: ClientProfile(
                client_id=row.client_id,
                language=row.language,
                version=row.client_version,
                access_key=row.access_key,
                settings=bytes(row.settings),
                updated_at=int(row.updated_at),
            )
            for row in self.conn.execute(query)
        }

    def forget_clients(self, seen_before: int) -> int:
        stmt = delete(grpc_clients).where(grpc_clients.c.updated_at < seen_before)
        return int(self.conn.execute(stmt).rowcount)
