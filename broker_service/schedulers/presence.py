"""This broker's beat: its row in the store renewed every ``broker_beat_seconds``, the first at
once (:class:`~broker_service.domain.brokers.service.PresenceService`), so that the brokers
sharing the store can be listed.  A failed beat is retried at the next; the failure is logged
when it starts and when it ends, not at every beat."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from broker_service.domain.brokers.service import PresenceService
from broker_service.domain.errors import DomainError
from broker_service.logs import redact

log = logging.getLogger("halfmq.presence")


class PresenceScheduler:
    def __init__(self, service: PresenceService, *, interval_seconds: float) -> None:
        self.service = service
        self.interval = interval_seconds
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="halfmq-presence")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(self.interval)

    async def beat(self) -> None:
        try:
            await self.service.beat()
        except DomainError as error:  # not ready (schema, store down): said by the store too
            self._failed(error.message)
            return
        except Exception as error:
            self._failed(repr(error))
            return
        if self._failing:
            self._failing = False
            log.info("this broker's presence is recorded in the store again")

    def _failed(self, reason: str) -> None:
        if not self._failing:
            self._failing = True
            log.warning("recording this broker's presence in the store failed: %s", redact(reason))
