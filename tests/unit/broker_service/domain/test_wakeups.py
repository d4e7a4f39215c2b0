"""Long-poll wake-ups (domain/consumers/wakeup.py): one waiting receive per competitor is woken by
an arrival, the wake-up is passed on when there may be more, and none is lost."""

from __future__ import annotations

import asyncio

from broker_service.domain.consumers.wakeup import Arrivals


async def _waiters(
    arrivals: Arrivals, keys: list[str], topic: str = "t"
) -> list[asyncio.Task[None]]:
    version = arrivals.version
    tasks = [asyncio.create_task(arrivals.wait([topic], 5, version, key)) for key in keys]
    await asyncio.sleep(0.01)  # all of them waiting
    return tasks


async def _woken(tasks: list[asyncio.Task[None]]) -> list[int]:
    await asyncio.sleep(0.01)
    return [n for n, task in enumerate(tasks) if task.done()]


async def test_an_arrival_wakes_one_receive_of_each_group_oldest_first() -> None:
    arrivals = Arrivals()
    tasks = await _waiters(arrivals, ["g1", "g1", "g1", "g2", "g2"])
    arrivals.announce(["t"])
    assert await _woken(tasks) == [0, 3]
    arrivals.announce(["other"])
    assert await _woken(tasks) == [0, 3]
    arrivals.pass_on(["t"], "g1")  # the first took a full batch: there may be more
    assert await _woken(tasks) == [0, 1, 3]
    arrivals.announce(["t"])
    assert await _woken(tasks) == [0, 1, 2, 3, 4]
    arrivals.pass_on(["t"], "g1")  # nobody left waiting: nothing to do
    await asyncio.gather(*tasks)


async def test_members_of_a_broadcasting_group_are_each_woken() -> None:
    arrivals = Arrivals()
    tasks = await _waiters(arrivals, ["b\x00c1", "b\x00c2", "b\x00c3"])
    arrivals.announce(["t"])
    assert await _woken(tasks) == [0, 1, 2]


async def test_a_woken_receive_that_goes_away_passes_the_wake_up_on() -> None:
    arrivals = Arrivals()
    tasks = await _waiters(arrivals, ["g", "g"])
    arrivals.announce(["t"])
    tasks[0].cancel()  # woken, then its client went away before it looked
    await asyncio.sleep(0.01)
    assert tasks[0].cancelled()
    assert tasks[1].done(), "the arrival would otherwise wait for the next poll"


async def test_an_arrival_while_a_receive_looked_returns_at_once_for_its_topics_only() -> None:
    arrivals = Arrivals()
    seen = arrivals.version  # taken before looking in the store
    arrivals.announce(["elsewhere"])
    waiting = asyncio.create_task(arrivals.wait(["t"], 5, seen, "g"))
    await asyncio.sleep(0.01)
    assert not waiting.done(), "an arrival in another topic is not a reason to look again"
    arrivals.announce(["t"])
    await asyncio.sleep(0.01)
    assert waiting.done()
    arrivals.announce(["t"])
    await arrivals.wait(["t"], 5, seen, "g")  # announced since `seen`: returns at once
