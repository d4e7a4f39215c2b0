"""The ACL's hot reload (docs/acl.md): every ``acl_reload_seconds`` the broker looks at its file
and at the versions published in the store (:meth:`AclRuntime.reload
<broker_service.acl.runtime.AclRuntime.reload>`), then forgets the nonces that left the window.
A look that fails (the store down, or not ready yet) leaves the enforced version as it is, is
tried again at the next, and is told as :class:`~.failures.FailedRounds` tells every
scheduler's: when the failures start, a reminder at most once a minute, and when they end."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from broker_service.acl.runtime import AclRuntime
from broker_service.schedulers.failures import FailedRounds

log = logging.getLogger("halfmq.acl")


class AclReloadScheduler:
    def __init__(self, acl: AclRuntime) -> None:
        self.acl = acl
        self.rounds = FailedRounds(
            log,
            "reloading the ACL (the enforced version stays)",
            base=acl.reload_seconds,
            cap=acl.reload_seconds,
        )
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="halfmq-acl-reload")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.acl.reload_seconds)
            await self.run_round()

    async def run_round(self) -> None:
        """One look at the file and the store, then the nonces' purge."""
        try:
            await self.acl.reload()
            await self.acl.purge_nonces()
        except Exception as error:  # neither an outage nor a bug ends the reloads
            self.rounds.failed(error)
        else:
            self.rounds.succeeded()
