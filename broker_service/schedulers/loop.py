"""The background task every scheduler runs: one loop, started with the broker and cancelled
when it stops."""

from __future__ import annotations

import asyncio
import contextlib
from typing import ClassVar


class SchedulerLoop:
    """:meth:`start` runs the scheduler's ``_loop`` as a task named ``task_name``; :meth:`stop`
    cancels it and waits for it to end."""

    task_name: ClassVar[str]
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self.task_name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        raise NotImplementedError
