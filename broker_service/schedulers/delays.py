"""Moves delayed messages into their real topics when their time comes (at most ``poll`` late).

A round that fails (the store is down) is retried after a pause that doubles, from ``poll`` up to
``max_pause``, and is told as :class:`~.failures.FailedRounds` tells every scheduler's: one line
when the failures start, a reminder with their count at most once a minute, one when a round
works again."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import KW_ONLY, dataclass

from broker_service.domain.messages.service import MessageService
from broker_service.schedulers.failures import REMIND_SECONDS, FailedRounds
from broker_service.schedulers.loop import SchedulerLoop

log = logging.getLogger("halfmq.delays")

MAX_PAUSE_SECONDS = 5.0  # between failed rounds, at most: the releases resume this soon after


@dataclass(eq=False)
class DelayScheduler(SchedulerLoop):
    task_name = "halfmq-delays"

    service: MessageService
    _: KW_ONLY
    poll_seconds: float = 0.25
    batch: int = 1000
    max_pause_seconds: float = MAX_PAUSE_SECONDS
    remind_seconds: float = REMIND_SECONDS

    def __post_init__(self) -> None:
        self.rounds = FailedRounds(
            log,
            "releasing delayed messages",
            base=self.poll_seconds,
            cap=self.max_pause_seconds,
            remind_seconds=self.remind_seconds,
        )

    async def _loop(self) -> None:
        while True:
            pause = await self.run_round()
            await asyncio.sleep(pause)

    async def run_round(self) -> float:
        """Release what is due (up to ``batch``); return the pause before the next round: none
        when more are due, until the next due (at most ``poll``), longer after failures."""
        try:
            report = await self.service.release_due(self.batch)
        except Exception as error:
            return self.rounds.failed(error)
        self.rounds.succeeded()
        if report.released >= self.batch:
            return 0.0  # more are due: go on at once
        if report.next_due is None:
            return self.poll_seconds
        return min(self.poll_seconds, max(0.0, (report.next_due - self.service.clock()) / 1000))
