"""What the in-memory store promises of its own (broker_service/memstore): a write unit that
raises leaves nothing behind, a read keeps nothing, a signed request's nonce is refused a second
time, and a closed store refuses.  The domain's behaviour on it is tests/unit/broker_service/domain's,
which run on it as on SQLite."""

from __future__ import annotations

import pytest

from broker_service.domain.errors import Conflict, NotReady, Unauthenticated
from broker_service.domain.messages.model import PendingMessage, Topic
from broker_service.domain.ports import Readiness, StoreTx, WriteRunner
from broker_service.memstore import MemoryStore


def _message(body: bytes, dedup_key: str | None = None) -> PendingMessage:
    return PendingMessage("t", 0, "m-" + body.decode(), body, "utf-8", 1, 1, dedup_key=dedup_key)


async def test_a_unit_that_raises_leaves_nothing_behind() -> None:
    store = MemoryStore()
    await store.write(lambda tx: tx.create_topic(Topic("t", 1, False, 6, False, 0)))

    def fails(tx: StoreTx) -> None:
        tx.append(_message(b"a", "k-a"))
        tx.create_topic(Topic("u", 2, False, 6, False, 0))
        tx.add_trace("m-a", "SENT", "test", 1)
        raise Conflict("refused after its changes", code="TEST")

    with pytest.raises(Conflict):
        await store.write(fails)

    def seen(tx: StoreTx) -> tuple[object, ...]:
        return (
            tx.queue_infos("t")[0].max_offset,
            tx.find_sent(["k-a"]),
            tx.get_topic("u"),
            tx.queue_infos("u"),
            tx.trace_events_of("m-a"),
        )

    assert await store.read(seen) == (0, {}, None, [], [])
    appended = _message(b"b", "k-b")
    await store.write(lambda tx: tx.append(appended))
    assert appended.queue_offset == 0, "offsets stay dense past a unit that was dropped"
    found = await store.read(lambda tx: tx.find_sent(["k-b"]))
    assert found["k-b"].body == b"b"


async def test_a_read_keeps_nothing_it_changed() -> None:
    store = MemoryStore()
    await store.read(lambda tx: tx.create_topic(Topic("t", 1, False, 6, False, 0)))
    assert await store.read(lambda tx: tx.get_topic("t")) is None


async def test_a_nonce_is_taken_once() -> None:
    store = MemoryStore()
    nonce = ("bob-key", "n-1", 1_700_000_000_000)
    await store.write(lambda tx: tx.create_topic(Topic("t", 1, False, 6, False, 0)), nonce=nonce)
    ran: list[bool] = []
    with pytest.raises(Unauthenticated) as refused:
        await store.write(lambda tx: ran.append(True), nonce=nonce)
    assert refused.value.code == "NONCE_REPLAYED"
    assert ran == [], "a replayed request's unit does not run"
    with pytest.raises(Unauthenticated):
        await WriteRunner(store).run(lambda tx: None, nonce=nonce)

    def refused(tx: StoreTx) -> None:
        raise Conflict("refused", code="TEST")

    other = ("bob-key", "n-2", 1_700_000_000_000)
    with pytest.raises(Conflict):
        await store.write(refused, nonce=other)
    with pytest.raises(Unauthenticated):  # a refused request's nonce is taken all the same
        await store.write(lambda tx: None, nonce=other)
    assert await store.read(lambda tx: tx.purge_nonces(nonce[2] + 1)) == 2


async def test_a_closed_store_refuses_and_says_it_is_not_ready() -> None:
    store = MemoryStore()
    assert await store.ping() == Readiness(True)
    store.close()
    assert not (await store.ping()).ready
    with pytest.raises(NotReady):
        await store.read(lambda tx: tx.list_topics())
