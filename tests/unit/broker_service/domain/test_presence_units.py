"""``PresenceService`` on the real SQL store, on a clock the test moves: a beat upserts one row
per broker (its start kept), a broker is live within three beats, and one not seen for a day is
deleted by another's beat."""

from __future__ import annotations

from broker_service.domain.brokers.model import BrokerPresence
from broker_service.domain.brokers.service import FORGET_AFTER_MS, PresenceService
from broker_service.store.sql_store import SqlStore
from tests.unit.broker_service.domain.conftest import Clock

BEAT_MS = 10_000


def presence(store: SqlStore, clock: Clock, broker_id: str) -> PresenceService:
    me = BrokerPresence(broker_id, f"{broker_id}.example:9876", "0.1.0", "sqlite", 0, 0)
    return PresenceService(store, me, BEAT_MS, clock)


async def test_beats_upsert_one_row_and_keep_the_start(store: SqlStore) -> None:
    clock = Clock()
    first = presence(store, clock, "b1")
    started = clock.now
    await first.beat()
    clock.advance(BEAT_MS)
    await first.beat()
    [seen] = await first.brokers()
    assert seen.presence.broker_id == "b1"
    assert seen.presence.address == "b1.example:9876"
    assert (seen.presence.started_at, seen.presence.last_seen_at) == (started, clock.now)
    assert seen.live
    assert seen.seen_ms_ago == 0


async def test_live_within_three_beats_then_last_seen_then_forgotten(store: SqlStore) -> None:
    clock = Clock()
    gone, staying = presence(store, clock, "gone"), presence(store, clock, "staying")
    await gone.beat()
    await staying.beat()
    clock.advance(3 * BEAT_MS)
    await staying.beat()
    assert [(b.presence.broker_id, b.live) for b in await staying.brokers()] == [
        ("staying", True),
        ("gone", True),  # three beats late: still live
    ]
    clock.advance(1)
    await staying.beat()
    listed = await staying.brokers()
    assert [(b.presence.broker_id, b.live, b.seen_ms_ago) for b in listed] == [
        ("staying", True, 0),
        ("gone", False, 3 * BEAT_MS + 1),  # live ones first, then by when they were seen
    ]
    clock.advance(FORGET_AFTER_MS)
    await staying.beat()  # its beat deletes the row of the broker not seen for a day
    assert [b.presence.broker_id for b in await staying.brokers()] == ["staying"]
