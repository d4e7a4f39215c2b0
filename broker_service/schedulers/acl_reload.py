"""The ACL's hot reload (docs/acl.md): every ``acl_reload_seconds`` the broker looks at its file
and at the versions published in the store (:meth:`AclRuntime.reload
<broker_service.acl.runtime.AclRuntime.reload>`), then forgets the nonces that left the window.
A look that fails (the store down, or not ready yet) leaves the enforced version as it is, is
tried again at the next, and is told as :class:`~.failures.FailedRounds` tells every
scheduler's: when the failures start, a reminder at most once a minute, and when they end."""

from __future__ import annotations

import asyncio
import logging

from broker_service.acl.runtime import AclRuntime
from broker_service.schedulers.failures import FailedRounds
from broker_service.schedulers.loop import SchedulerLoop

log = logging.getLogger("halfmq.acl")


class AclReloadScheduler(SchedulerLoop):
    task_name = "halfmq-acl-reload"

    def __init__(self, acl: AclRuntime) -> None:
        self.acl = acl
        what = "reloading the ACL (the enforced version stays)"
        self.rounds = FailedRounds.every(log, what, acl.reload_seconds)

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
