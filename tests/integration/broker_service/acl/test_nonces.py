"""A signed request's nonce is remembered in the same store transaction as the request's effect:
the effect happens at most once per nonce, whichever broker of the database the request reaches."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from broker_service.domain.errors import Unauthenticated
from broker_service.domain.ports import nonces
from broker_service.settings import BrokerSettings
from broker_service.store import migrate
from broker_service.store.concurrent import ConcurrentUnits
from broker_service.store.sql_store import SqlStore
from broker_service.store.sqltx import SqlTx
from tests.support import open_store


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[SqlStore]:
    async with open_store(store_url) as opened:
        yield opened


SIGNED_AT = int(time.time() * 1000)


def _nonce(value: str, key: str = "bob-key", signed_at: int = SIGNED_AT) -> nonces.RequestNonce:
    return nonces.RequestNonce(key, value, signed_at)


async def _signed(
    nonce: nonces.RequestNonce, write: Callable[..., object], ran: list[str]
) -> object:
    """One request: one write, handed the request's nonce, whose unit notes that it ran."""

    def unit(_: SqlTx) -> str:
        ran.append(nonce.nonce)
        return "done"

    try:
        return await write(unit, nonce=nonces.take(nonce))  # type: ignore[misc]
    except Unauthenticated as error:
        return error


async def test_a_nonce_takes_effect_once_even_twice_in_one_group_commit(store: SqlStore) -> None:
    ran: list[str] = []
    results = await asyncio.gather(
        *(_signed(_nonce("n-1"), store.write, ran) for _ in range(4)),
        _signed(_nonce("n-2"), store.write, ran),
        _signed(_nonce("n-1", key="smith-key"), store.write, ran),  # another key's nonce
    )
    refused = [r for r in results if isinstance(r, Unauthenticated)]
    assert len(refused) == 3
    assert {r.code for r in refused} == {"NONCE_REPLAYED"}
    assert sorted(ran) == ["n-1", "n-1", "n-2"]  # the replays' units never ran
    replay = await _signed(_nonce("n-2"), store.write, ran)
    assert isinstance(replay, Unauthenticated)


async def test_a_replay_in_a_group_commit_of_fresh_requests_refuses_it_alone(
    store: SqlStore,
) -> None:
    """A batch's nonces go in one statement that only counts what it inserted; a replay among
    fresh requests makes the batch run again with its nonces told apart: the fresh ones take
    effect once, and their nonces are remembered."""
    ran: list[str] = []
    assert await _signed(_nonce("seen"), store.write, ran) == "done"
    fresh = [f"fresh-{i}" for i in range(6)]
    results = await asyncio.gather(
        *(_signed(_nonce(value), store.write, ran) for value in fresh[:3]),
        _signed(_nonce("seen"), store.write, ran),
        *(_signed(_nonce(value), store.write, ran) for value in fresh[3:]),
    )
    assert [isinstance(r, Unauthenticated) for r in results] == [False] * 3 + [True] + [False] * 3
    assert sorted(ran) == sorted(["seen", *fresh])
    stored = await store.read(
        lambda tx: tx.conn.exec_driver_sql("SELECT nonce FROM acl_nonces").scalars().all()
    )
    assert sorted(stored) == sorted(["seen", *fresh])
    again = await _signed(_nonce("fresh-4"), store.write, ran)
    assert isinstance(again, Unauthenticated)
    assert again.code == "NONCE_REPLAYED"


async def test_only_the_requests_first_write_remembers_it(store: SqlStore) -> None:
    """A request that writes twice is not refused by its own nonce: its first write takes it, the
    second finds it taken; a write handed no nonce remembers nothing."""
    request = _nonce("twice")
    assert await store.write(lambda tx: 1, nonce=nonces.take(request)) == 1
    assert request.taken
    assert await store.write(lambda tx: 2, nonce=nonces.take(request)) == 2
    assert await store.write(lambda tx: 3) == 3
    stored = await store.read(
        lambda tx: tx.conn.exec_driver_sql("SELECT nonce FROM acl_nonces").scalars().all()
    )
    assert list(stored) == ["twice"]


async def test_a_request_is_its_key_nonce_and_signed_time_and_is_forgotten_once_too_old(
    store: SqlStore,
) -> None:
    """What makes a replay is the same signed (timestamp, key, nonce): none can be changed without
    the secret.  The purge forgets requests signed before the window and keeps the rest."""
    ran: list[str] = []
    early, late = SIGNED_AT - 400_000, SIGNED_AT
    assert await _signed(_nonce("p-1", signed_at=early), store.write, ran) == "done"
    assert await _signed(_nonce("p-1", signed_at=late), store.write, ran) == "done"
    assert isinstance(
        await _signed(_nonce("p-1", signed_at=late), store.write, ran), Unauthenticated
    )
    purged = await store.write(lambda tx: tx.purge_nonces(SIGNED_AT - 300_000))
    assert purged == 1
    left = await store.read(
        lambda tx: tx.conn.exec_driver_sql("SELECT signed_at FROM acl_nonces").scalars().all()
    )
    assert list(left) == [late]


async def test_the_claims_pools_remember_it_too(pg_url: str) -> None:
    """PostgreSQL: consumer units (receive, ack) run beside the writer and claim the nonce in their
    own transaction; a replay across the writer and a claims pool is refused either way."""
    migrate.upgrade(pg_url)
    store = SqlStore(BrokerSettings(database_url=pg_url))
    store.open()
    runner = ConcurrentUnits(store.claims_engine(), store.claims_engine(durable=True),
                             ready=lambda: True)  # fmt: skip
    ran: list[str] = []
    try:
        first = await _signed(_nonce("c-1"), runner.run, ran)
        again = await _signed(_nonce("c-1"), runner.run, ran)
        across = await _signed(_nonce("c-1"), store.write, ran)
        assert first == "done"
        assert isinstance(again, Unauthenticated)
        assert isinstance(across, Unauthenticated)
        assert ran == ["c-1"]
    finally:
        store.close()
