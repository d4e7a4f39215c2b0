"""Moves delayed messages into their real topics when their time comes (at most ``poll`` late)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from broker_service.domain.errors import DomainError
from broker_service.domain.messages.service import MessageService

log = logging.getLogger("halfmq.delays")


class DelayScheduler:
    def __init__(
        self, service: MessageService, *, poll_seconds: float = 0.25, batch: int = 1000
    ) -> None:
        self.service = service
        self.poll = poll_seconds
        self.batch = batch
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="halfmq-delays")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            pause = self.poll
            try:
                report = await self.service.release_due(self.batch)
                if report.released >= self.batch:
                    continue  # more are due: go on at once
                if report.next_due is not None:
                    pause = min(
                        self.poll, max(0.0, (report.next_due - self.service.clock()) / 1000)
                    )
            except DomainError as error:
                log.warning("releasing delayed messages failed: %s", error.message)
            except Exception:
                log.exception("releasing delayed messages failed")
            await asyncio.sleep(pause)
