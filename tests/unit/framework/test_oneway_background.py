"""The one-way background at shutdown (``framework.oneway``): what has not ended when the producer
closes is counted ``dropped``, on each face, whether it was waiting for a worker thread or already
running in a task.  The jobs are flows that block in a callback, driven by the real clients (no
request is made)."""

from __future__ import annotations

import asyncio
import threading
import time

from framework.flow import Flow, Invoke
from framework.oneway import WORKERS, Job, OneWayCounts, TaskOneWay, ThreadOneWay
from framework.transport import AsyncBrokerClient, BrokerClient

NOWHERE = ["http://127.0.0.1:9"]  # never called


def _blocked(release: threading.Event, counts: OneWayCounts) -> Flow[None]:
    yield Invoke(release.wait, (30,))
    counts.ended(None)


def test_jobs_still_queued_at_close_are_dropped_on_the_thread_face() -> None:
    release, counts = threading.Event(), OneWayCounts()
    client = BrokerClient(NOWHERE)
    background = ThreadOneWay(client, "g")
    try:
        for n in range(WORKERS + 4):  # every worker blocked, four left in the queue
            background.submit(Job(_blocked(release, counts), counts, f"job {n}"))
        background.close(0.2)
        assert (counts.read().sent, counts.read().dropped) == (WORKERS + 4, 4)
        release.set()  # the running ones end once released: none is lost from the counts
        deadline = time.monotonic() + 10
        while counts.read().pending and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (counts.read().stored, counts.read().pending) == (WORKERS, 0)
    finally:
        release.set()
        client.close()


async def test_jobs_running_at_close_are_dropped_on_the_task_face() -> None:
    counts = OneWayCounts()
    client = AsyncBrokerClient(NOWHERE)
    background = TaskOneWay(client)

    async def forever() -> None:
        await asyncio.sleep(3600)

    def blocked() -> Flow[None]:
        yield Invoke(forever, ())
        counts.ended(None)

    for n in range(3):
        background.submit(Job(blocked(), counts, f"job {n}"))
    await asyncio.sleep(0.05)  # each task has started and waits in its callback
    await background.close(0.1)
    await client.aclose()
    stats = counts.read()
    assert (stats.sent, stats.dropped, stats.stored, stats.pending) == (3, 3, 0, 0)
