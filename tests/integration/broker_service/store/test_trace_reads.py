"""Reading a message's trace back on both stores: every event, but of its CHECKED events (one
per check round while no instance answers) only the newest ``CHECKED_READ_MAX``, oldest first;
and how many there are in all."""

from __future__ import annotations

import orjson

from broker_service.store.deliveries import CHECKED_READ_MAX
from broker_service.store.sqltx import SqlTx
from tests.support import open_store


async def test_the_newest_checks_are_read_and_all_are_counted(store_url: str) -> None:
    extra = 50
    async with open_store(store_url) as store:
        events: list[tuple[str, str, str, int, str | None]] = [
            ("half-1", "HALF_STORED", "bob-bank", 0, None)
        ]
        for n in range(CHECKED_READ_MAX + extra):
            detail = orjson.dumps({"transaction_id": "t1", "n": n}).decode()
            events.append(("half-1", "CHECKED", "broker-1", 1000 + n, detail))
            if n == 10:
                events.append(("half-1", "OPERATOR_CHECK", "operator", 1000 + n, None))
        events.append(("half-2", "CHECKED", "broker-1", 5, None))  # another message's

        def write(tx: SqlTx) -> None:
            tx.add_traces(events)

        await store.write(write)
        read = await store.read(lambda tx: tx.trace_events_of("half-1"))
        checks = [e for e in read if e[1] == "CHECKED"]
        assert len(checks) == CHECKED_READ_MAX
        assert [orjson.loads(e[3] or "{}")["n"] for e in checks] == list(
            range(extra, CHECKED_READ_MAX + extra)
        )  # the newest, oldest first
        assert [e[1] for e in read if e[1] != "CHECKED"] == ["HALF_STORED", "OPERATOR_CHECK"]
        assert [e[0] for e in read] == sorted(e[0] for e in read)
        assert await store.read(lambda tx: tx.trace_event_count("half-1", "CHECKED")) == 250
        assert await store.read(lambda tx: tx.trace_event_count("half-2", "CHECKED")) == 1
        assert await store.read(lambda tx: tx.trace_event_count("none", "CHECKED")) == 0
