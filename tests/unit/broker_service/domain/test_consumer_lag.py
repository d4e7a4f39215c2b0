"""The consumer lag rule, on both stores, without HTTP: the group's view
(``GET /v1/consumer-groups/{group}``) and the backlog (``/metrics``, the console's groups list)
count a queue alike, a missing offset from where a receive would start the group; and the
backlog reads where groups start only for the queues they have no offset in."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import pytest

from broker_service.domain.consumers.backlog import Backlog, backlog
from broker_service.domain.consumers.model import (
    ConsumeFrom,
    ConsumerGroup,
    MessageModel,
    Receiving,
    retry_topic,
)
from broker_service.domain.messages.model import MessageDraft
from broker_service.domain.ports import Store, StoreTx
from tests.unit.broker_service.domain.conftest import Domain

BROADCASTING = MessageModel.BROADCASTING
EXPIRY_MS = 120_000  # ConsumerConfig's consumer_expiry_ms


@pytest.fixture
def store(any_store: Store) -> Store:
    """The domain's services on every store (the domain conftest's are on SQLite and memory)."""
    return any_store


async def _send(domain: Domain, n: int) -> None:
    for i in range(n):  # one by one: round robin over the queues (a batch keeps to one)
        await domain.messages.send("orders", [MessageDraft(f"m{i}".encode())])


async def _group(domain: Domain, group: ConsumerGroup) -> None:
    await domain.consumers.create_group(group)
    await domain.consumers.subscribe(group.name, "orders", "*")


async def _agree(domain: Domain, group: str) -> tuple[int, int]:
    """The group's view and the backlog say the same, per queue and in total: (lag, retry)."""
    view = await domain.consumers.view(group)
    found = await domain.consumers.backlog()
    lags = {(q.topic, q.queue_id): q.messages for q in found.lags if q.group == group}
    by_queue: dict[tuple[str, int], list[int]] = {}
    for q in view.queues:
        if q.topic != retry_topic(group):
            by_queue.setdefault((q.topic, q.queue_id), []).append(q.lag)
    if not view.group.broadcasting or len(view.members) <= 1:
        assert {key: max(rows) for key, rows in by_queue.items()} == lags
    assert view.lag == sum(lags.values())
    assert view.retry_lag == found.retrying[group]
    return view.lag, view.retry_lag


async def test_the_view_and_the_backlog_count_a_missing_offset_alike(domain: Domain) -> None:
    await domain.messages.create_topic("orders", 2, False)
    await _send(domain, 4)  # 2 a queue
    domain.clock.advance(1_000)
    cut = domain.clock.now
    await _send(domain, 2)  # 1 a queue after the cut
    await _group(domain, ConsumerGroup("fan-late", BROADCASTING))
    await _group(domain, ConsumerGroup("fan-early", BROADCASTING, ConsumeFrom.FIRST_OFFSET))
    await _group(domain, ConsumerGroup("fan-since", BROADCASTING, ConsumeFrom.TIMESTAMP, cut))
    await _group(domain, ConsumerGroup("early", consume_from=ConsumeFrom.FIRST_OFFSET))
    assert await _agree(domain, "fan-late") == (0, 0), "would start at the end"
    assert await _agree(domain, "fan-early") == (6, 0)
    assert await _agree(domain, "fan-since") == (2, 0)
    assert await _agree(domain, "early") == (6, 0)

    # A member of fan-early takes everything and acks: it is caught up, a second member that
    # joins later starts at the first message kept, and counts once it has an offset.
    got = await domain.consumers.receive(Receiving("fan-early", "m1", None, 10, 30, 0))
    assert len(got) == 6
    await domain.consumers.ack("fan-early", [d.receipt_handle for d in got])
    assert await _agree(domain, "fan-early") == (0, 0)
    (one,) = await domain.consumers.receive(Receiving("fan-early", "m2", None, 1, 30, 0))
    await domain.consumers.ack("fan-early", [one.receipt_handle])
    assert await _agree(domain, "fan-early") == (5, 0), "the least advanced live member"
    domain.clock.advance(EXPIRY_MS + 1)  # both gone quiet: every recorded member counts
    assert await _agree(domain, "fan-early") == (5, 0)
    got = await domain.consumers.receive(Receiving("fan-early", "m1", None, 10, 30, 0))
    assert got == []  # m1 is live again, m2 is not: m1 counts
    assert await _agree(domain, "fan-early") == (0, 0)


class Counted:
    """A store transaction that counts the calls made on it."""

    def __init__(self, tx: StoreTx) -> None:
        self.tx = tx
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.tx, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return counted


async def _counted_backlog(domain: Domain) -> tuple[Backlog, Counter[str]]:
    unit: Callable[[StoreTx], Backlog] = backlog(domain.clock, EXPIRY_MS)
    seen: list[Counter[str]] = []

    def read(tx: StoreTx) -> Backlog:
        counted = Counted(tx)
        seen.append(counted.calls)
        return unit(cast(StoreTx, counted))

    found = await domain.consumers.store.read(read)
    return found, seen[0]


async def test_the_backlog_reads_where_groups_start_only_where_they_have_no_offset(
    domain: Domain,
) -> None:
    await domain.messages.create_topic("orders", 2, False)
    await _send(domain, 4)
    await _group(domain, ConsumerGroup("settled"))
    await domain.consumers.receive(
        Receiving("settled", "c1", None, 10, 30, 0)
    )  # offsets everywhere now
    found, calls = await _counted_backlog(domain)
    assert dict(calls) == {"all_groups_progress": 1, "dead_letter_counts": 1}
    assert found.retrying == {"settled": 0}

    # Two broadcasting groups, no member yet: per group its record, per topic its queues once
    # for both, per queue of the TIMESTAMP group the first message at its time.
    await _group(domain, ConsumerGroup("fan-late", BROADCASTING))
    await _group(domain, ConsumerGroup("fan-since", BROADCASTING, ConsumeFrom.TIMESTAMP, 0))
    found, calls = await _counted_backlog(domain)
    assert dict(calls) == {
        "all_groups_progress": 1,
        "dead_letter_counts": 1,
        "get_consumer_group": 2,
        "queue_infos": 3,  # orders, and each group's retry topic
        "first_offset_since": 2,
    }
    lags = {(q.group, q.queue_id): q.messages for q in found.lags}
    assert lags == {
        ("settled", 0): 0,
        ("settled", 1): 0,
        ("fan-late", 0): 0,
        ("fan-late", 1): 0,
        ("fan-since", 0): 2,
        ("fan-since", 1): 2,
    }
