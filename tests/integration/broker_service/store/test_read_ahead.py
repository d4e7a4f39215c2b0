"""Read-ahead: the group-commit writer looks up in one statement the transactions a batch of
commits and rollbacks will resolve.  It must answer exactly as the lookups it replaces."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import httpx
import pytest

from broker_service.domain.ports import ResolveOutcome, TransactionEnd
from broker_service.domain.transactions.model import ResolvedBy, TransactionState
from broker_service.settings import Flush
from broker_service.store import migrate
from broker_service.store.engine import make_engine
from broker_service.store.sqltx import ResolutionRace, SqlTx
from tests.support import BrokerApp


async def _halves(broker: BrokerApp, n: int) -> list[str]:
    await broker.topic("t")
    ids = []
    for i in range(n):
        answer = await broker.client.post(
            "/v1/transactions",
            json={"topic": "t", "producer_group": "g", "body": f"b{i}", "keys": [f"k{i}"]},
        )
        assert answer.status_code == 201
        ids.append(answer.json()["transaction_id"])
    return ids


async def test_read_ahead_answers_like_single_lookups_once_each(
    broker: BrokerApp, migrated_url: str
) -> None:
    ids = await _halves(broker, 3)
    engine = make_engine(migrated_url, flush=Flush.SYNC, writer=False)
    try:
        with engine.connect() as conn:
            single = [SqlTx(conn).transaction_with_half(t) for t in [*ids, "nope"]]
            tx = SqlTx(conn)
            tx.read_ahead([*ids, ids[0], "nope"])
            ahead = [tx.transaction_with_half(t) for t in [*ids, "nope"]]
            assert ahead == single
            assert single[-1] is None
            assert all(s is not None for s in single[:-1])
            # Used once: a second look at the same transaction asks the store again.
            assert not tx._read_ahead
    finally:
        engine.dispose()


async def test_concurrent_commits_and_rollbacks_resolve_each_transaction_once(
    broker: BrokerApp,
) -> None:
    ids = await _halves(broker, 40)
    decisions = ["commit" if i % 2 == 0 else "rollback" for i in range(len(ids))]

    async def resolve(transaction_id: str, decision: str) -> httpx.Response:
        return await broker.client.post(
            f"/v1/transactions/{transaction_id}/{decision}", json={"producer_group": "g"}
        )

    # Every transaction twice (the same decision): batches hold many read-aheads, and repeats.
    calls = [resolve(t, d) for t, d in zip(ids, decisions, strict=True)] * 2
    answers = await asyncio.gather(*calls)
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers[:3]]
    for transaction_id, decision in zip(ids, decisions, strict=True):
        shown = (await broker.client.get(f"/v1/transactions/{transaction_id}")).json()
        assert shown["state"] == ("COMMITTED" if decision == "commit" else "ROLLED_BACK")
    # The opposite decision afterwards is a conflict, not a second resolution.
    late = await resolve(ids[0], "rollback")
    assert late.status_code == 409
    listed = (await broker.client.get("/v1/messages", params={"topic": "t", "limit": 1000})).json()
    real = [m for m in listed["messages"] if m.get("transaction_id")]
    assert sorted(m["transaction_id"] for m in real) == sorted(ids[0::2])


# -- resolutions deferred to the flush (PostgreSQL, a group commit of several units) ------------


async def _pg_halves(pg_url: str, n: int) -> list[str]:
    migrate.upgrade(pg_url)
    async with BrokerApp.start(database_url=pg_url) as pg:
        return await _halves(pg, n)


async def test_deferred_resolutions_are_written_once_and_seen_by_a_later_look(
    pg_url: str,
) -> None:
    """Deferred, a resolution is pending until the flush: a later look at the same transaction
    in the batch writes it first, and a dropped unit's resolution goes with the unit."""
    ids = await _pg_halves(pg_url, 3)
    engine = make_engine(pg_url, flush=Flush.SYNC, writer=True)
    commit = (TransactionState.COMMITTED, 5, ResolvedBy.PRODUCER)
    try:
        with engine.begin() as conn:
            tx = SqlTx(conn, defer_resolutions=True)
            assert (
                tx.resolve_transaction(TransactionEnd(ids[0], *commit)) is ResolveOutcome.DEFERRED
            )
            assert tx._resolutions, "deferred"
            mark = tx.mark()
            assert (
                tx.resolve_transaction(TransactionEnd(ids[1], *commit)) is ResolveOutcome.DEFERRED
            )
            tx.rollback_to(mark)  # the unit that resolved ids[1] failed
            found = tx.transaction_with_half(ids[0])
            assert found is not None
            assert found[0].state is TransactionState.COMMITTED, "the pending update went first"
            assert not tx._resolutions
            tx.flush()
        with engine.connect() as conn:
            records = [SqlTx(conn).get_transaction(t) for t in ids]
        assert [r.state if r else None for r in records] == [
            TransactionState.COMMITTED,
            TransactionState.PREPARED,
            TransactionState.PREPARED,
        ]
    finally:
        engine.dispose()


async def test_a_deferred_resolution_that_lost_its_race_fails_the_flush(pg_url: str) -> None:
    """Another broker resolves the transaction between the unit's look and the flush: the flush
    raises, and the writer runs the units again one by one (the next test)."""
    (tid,) = await _pg_halves(pg_url, 1)
    engine = make_engine(pg_url, flush=Flush.SYNC, writer=True)
    other = make_engine(pg_url, flush=Flush.SYNC, writer=False)
    try:
        with engine.connect() as conn:
            trans = conn.begin()
            tx = SqlTx(conn, defer_resolutions=True)
            assert tx.transaction_with_half(tid) is not None
            deferred = tx.resolve_transaction(
                TransactionEnd(tid, TransactionState.COMMITTED, 5, ResolvedBy.PRODUCER)
            )
            assert deferred is ResolveOutcome.DEFERRED
            with other.begin() as rival:  # the other broker wins
                won = SqlTx(rival).resolve_transaction(
                    TransactionEnd(tid, TransactionState.ROLLED_BACK, 6, ResolvedBy.PRODUCER)
                )
                assert won is ResolveOutcome.RESOLVED
            with pytest.raises(ResolutionRace):
                tx.flush()
            trans.rollback()
        with engine.connect() as conn:
            record = SqlTx(conn).get_transaction(tid)
        assert record is not None
        assert record.state is TransactionState.ROLLED_BACK
    finally:
        engine.dispose()
        other.dispose()


async def test_a_group_commit_whose_deferred_resolution_lost_runs_again_undeferred(
    pg_url: str,
) -> None:
    """Through the writer: six commits held to share one group commit (a unit keeps the writer
    busy while they queue), one of whose transactions another broker rolls back right after the
    batch's read-ahead.  The batch runs again, each resolution checked as it is made: that commit
    answers 409 and writes nothing, the others commit once."""
    migrate.upgrade(pg_url)
    async with BrokerApp.start(database_url=pg_url) as pg:
        rival = make_engine(pg_url, flush=Flush.SYNC, writer=False)
        original = SqlTx.read_ahead
        target: list[str] = []
        raced: list[ResolveOutcome] = []

        def read_ahead_then_lose(self: SqlTx, transaction_ids: Sequence[str]) -> None:
            original(self, transaction_ids)
            if target and target[0] in transaction_ids and not raced:
                with rival.begin() as conn:
                    raced.append(
                        SqlTx(conn).resolve_transaction(
                            TransactionEnd(
                                target[0], TransactionState.ROLLED_BACK, 6, ResolvedBy.PRODUCER
                            )
                        )
                    )

        ids = await _halves(pg, 6)
        target.append(ids[0])
        writer = pg.state.store.writer
        running, gate = threading.Event(), threading.Event()

        def hold(_tx: SqlTx) -> None:  # keeps the writer busy while the commits queue up
            running.set()
            gate.wait(10)

        SqlTx.read_ahead = read_ahead_then_lose  # type: ignore[method-assign]
        try:
            held = writer.submit(hold)
            assert await asyncio.to_thread(running.wait, 10)
            commits = [
                asyncio.ensure_future(
                    pg.client.post(f"/v1/transactions/{t}/commit", json={"producer_group": "g"})
                )
                for t in ids
            ]
            for _ in range(1000):  # bounded: until all six wait for the writer together
                if writer._queue.qsize() == len(ids):
                    break
                await asyncio.sleep(0.01)
            assert writer._queue.qsize() == len(ids)
            gate.set()
            await held
            answers = await asyncio.gather(*commits)
        finally:
            gate.set()
            SqlTx.read_ahead = original  # type: ignore[method-assign]
            rival.dispose()
        assert raced == [ResolveOutcome.RESOLVED], "the rival's rollback took, after the read-ahead"
        statuses = [a.status_code for a in answers]
        states = [(await pg.client.get(f"/v1/transactions/{t}")).json()["state"] for t in ids]
        assert statuses == [409] + [200] * 5, [a.text for a in answers]
        assert answers[0].json()["error"]["code"] == "TRANSACTION_ALREADY_RESOLVED"
        assert states == ["ROLLED_BACK"] + ["COMMITTED"] * 5
        real = await pg.client.get("/v1/messages", params={"topic": "t", "limit": 1000})
        real_ids = [m["transaction_id"] for m in real.json()["messages"]]
        assert sorted(t for t in real_ids if t in ids) == sorted(ids[1:]), "one each, none lost"
