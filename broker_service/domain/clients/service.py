"""``ClientService``: the gRPC clients' profiles, kept in the store so that every broker sharing
it knows a client that spoke to any of them.

A RocketMQ 5 client writes its Settings once per Telemetry stream and then every few minutes; a
stream that reopens after a broker restart may carry none until then.  Kept by client id, the
last Settings let the broker that holds the new stream register it at once (the gRPC adapter's
:mod:`~broker_service.grpc.telemetry`), and they name the client's language and version for the
console's producer and consumer views and the message trace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from broker_service.domain.clients.model import FORGET_AFTER_MS, ClientProfile
from broker_service.domain.clock import now_ms
from broker_service.domain.ports import ClientStore, Store


class ClientService:
    def __init__(self, store: Store, clock: Callable[[], int] = now_ms) -> None:
        self.store = store
        self.clock = clock

    async def remember(
        self,
        client_id: str,
        access_key: str | None,
        language: str,
        version: str,
        settings: bytes,
    ) -> ClientProfile:
        """Keep what the client said it is and its settings; forget clients gone for a day."""
        now = self.clock()
        profile = ClientProfile(client_id, language, version, access_key, settings, now)

        def unit(tx: ClientStore) -> None:
            tx.save_client(profile)
            tx.forget_clients(now - FORGET_AFTER_MS)

        await self.store.write(unit)
        return profile

    async def introduce(
        self, client_id: str, access_key: str | None, language: str, version: str
    ) -> bool:
        """A client named by a call's metadata before the store knows it: kept with what it says
        it is and no settings, so that what it does (a half, a decision, a receive) is traced
        ``via: grpc`` even when its Settings are stored later than its first act or never (a
        short-lived process).  A client already known is left as it is; True if it was new."""
        profile = ClientProfile(client_id, language, version, access_key, b"", self.clock())

        def unit(tx: ClientStore) -> bool:
            if tx.get_clients([client_id]):
                return False
            tx.save_client(profile)
            return True

        return await self.store.write(unit)

    async def recall(self, client_id: str) -> ClientProfile | None:
        return await self.store.read(lambda tx: tx.get_clients([client_id]).get(client_id))

    async def profiles(self, client_ids: Iterable[str]) -> dict[str, ClientProfile]:
        """The profiles of those of ``client_ids`` that are known gRPC clients."""
        wanted = sorted({c for c in client_ids if c})
        if not wanted:
            return {}
        return await self.store.read(lambda tx: tx.get_clients(wanted))
