"""The app factory's process-wide switch: a broker process freezes its start-up heap."""

from __future__ import annotations

import gc

from broker_service.api.app import create_app
from broker_service.settings import BrokerSettings


async def test_a_broker_process_freezes_its_start_up_heap_and_a_plain_app_does_not(
    sqlite_url: str,
) -> None:
    gc.unfreeze()
    try:
        plain = create_app(BrokerSettings(database_url=sqlite_url, scheduler=False))
        async with plain.router.lifespan_context(plain):
            assert gc.get_freeze_count() == 0
        served = create_app(
            BrokerSettings(database_url=sqlite_url, scheduler=False), freeze_heap=True
        )
        async with served.router.lifespan_context(served):
            # Everything alive at start-up (modules, routes, models) is out of the collector's
            # reach; what requests make later is collected as before.
            assert gc.get_freeze_count() > 10_000
            garbage: list[object] = []
            garbage.append(garbage)  # a cycle made after start-up
            del garbage
            assert gc.collect() >= 1
    finally:
        gc.unfreeze()
