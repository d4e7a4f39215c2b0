"""This broker's beat: its row in the store renewed every ``broker_beat_seconds``, the first at
once (:class:`~broker_service.domain.brokers.service.PresenceService`), so that the brokers
sharing the store can be listed.  A failed beat is retried at the next; the failures are told as
:class:`~.failures.FailedRounds` tells every scheduler's: when they start, a reminder at most once
a minute, and when they end.

The beat also makes a broker that is not ready (it started while its store could not be reached:
a PostgreSQL with no primary) ready again by itself: a beat refused ``NOT_READY`` has the store
looked at again (``probe``, the readiness probe ``/readyz`` runs), and beats at once if it is
ready now.  Without it only a request to ``/readyz`` or ``/metrics`` would, so a broker that
nothing probes would refuse every request, however long its store had been back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass

from broker_service.domain.brokers.service import PresenceService
from broker_service.domain.errors import NotReady
from broker_service.domain.ports import Readiness
from broker_service.schedulers.failures import FailedRounds
from broker_service.schedulers.loop import SchedulerLoop

log = logging.getLogger("halfmq.presence")


@dataclass(eq=False)
class PresenceScheduler(SchedulerLoop):
    task_name = "halfmq-presence"

    service: PresenceService
    _: KW_ONLY
    interval_seconds: float
    probe: Callable[[], Awaitable[Readiness]] | None = None

    def __post_init__(self) -> None:
        # a beat is this broker's sign of life: never further apart than the interval
        what = "recording this broker's presence in the store"
        self.beats = FailedRounds.every(log, what, self.interval_seconds)

    async def _loop(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(self.interval_seconds)

    async def beat(self) -> None:
        try:
            try:
                await self.service.beat()
            except NotReady:
                if self.probe is None or not (await self.probe()).ready:
                    raise
                log.info("the store is ready again: this broker serves")
                await self.service.beat()
        except Exception as error:  # not ready (schema, store down): said by the store too
            self.beats.failed(error)
        else:
            self.beats.succeeded()
