"""``PresenceService``: this broker's beat in the store, and the list of the brokers sharing it.

Nothing else records them: brokers on one PostgreSQL share no address book, claims and leases name
a broker only while it holds them.  So each broker upserts its own row when it starts and at every
beat (one statement through the writer), and a reader calls live the ones seen within
:data:`~broker_service.domain.brokers.model.LIVE_BEATS` beats of its own.  A broker that stopped
keeps its row ("last seen N s ago") until no beat has renewed it for ``forget_after_ms``; then the
beats of the others delete it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from broker_service.domain.brokers.model import LIVE_BEATS, BrokerPresence, BrokerSeen
from broker_service.domain.clock import now_ms
from broker_service.domain.ports import BrokerStore, Store

FORGET_AFTER_MS = 86_400_000  # a day


class PresenceService:
    def __init__(
        self,
        store: Store,
        me: BrokerPresence,
        interval_ms: int,
        clock: Callable[[], int] = now_ms,
        *,
        forget_after_ms: int = FORGET_AFTER_MS,
    ) -> None:
        """``me``: this broker's row (its times are set by :meth:`beat`); ``interval_ms``: how
        often it beats, which is also how a reader judges the others."""
        self.store = store
        self.me = me
        self.interval_ms = interval_ms
        self.clock = clock
        self.forget_after_ms = forget_after_ms
        self.started_at: int | None = None  # the first beat's time

    async def beat(self) -> BrokerPresence:
        """Record that this broker is alive now; forget the brokers gone for too long."""
        now = self.clock()
        if self.started_at is None:
            self.started_at = now
        presence = replace(self.me, started_at=self.started_at, last_seen_at=now)
        forget_before = now - self.forget_after_ms

        def unit(tx: BrokerStore) -> None:
            tx.see_broker(presence)
            tx.forget_brokers(forget_before)

        await self.store.write(unit)
        return presence

    async def brokers(self) -> list[BrokerSeen]:
        """Every broker the store knows: the live ones first, then the most recently seen."""
        found = await self.store.read(lambda tx: tx.list_brokers())
        now = self.clock()
        horizon = LIVE_BEATS * self.interval_ms
        seen = [
            BrokerSeen(p, now - p.last_seen_at <= horizon, max(0, now - p.last_seen_at))
            for p in found
        ]
        return sorted(seen, key=lambda b: (not b.live, b.seen_ms_ago, b.presence.broker_id))
