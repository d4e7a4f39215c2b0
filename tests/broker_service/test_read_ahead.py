"""Read-ahead: the group-commit writer looks up in one statement the transactions a batch of
commits and rollbacks will resolve.  It must answer exactly as the lookups it replaces."""

from __future__ import annotations

import asyncio

import httpx

from broker_service.settings import Flush
from broker_service.store.engine import make_engine
from broker_service.store.sqltx import SqlTx
from framework.testing import InProcessBroker


async def _halves(broker: InProcessBroker, n: int) -> list[str]:
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
    broker: InProcessBroker, migrated_url: str
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
    broker: InProcessBroker,
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
