"""The check-back scheduler: rounds every ``transaction_check_interval_seconds``, push checks over
HTTP, and the hub that wakes pull long-polls when checks are assigned.

The decisions are the domain's (:mod:`broker_service.domain.checkback`); this module only drives
them: it claims a round, POSTs push checks with a bounded time-out, and applies the answers as
``from_check`` commits and rollbacks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections import defaultdict
from typing import Any

import httpx

from broker_service.api.metrics import BrokerMetrics
from broker_service.domain.checkback import CheckBack, CheckRequest, PushCheck
from broker_service.domain.errors import BrokerError
from broker_service.domain.model import Decision, ResolvedBy
from broker_service.domain.service import BrokerService

log = logging.getLogger("halfmq.checkback")

_ANSWERS = {"COMMIT": Decision.COMMIT, "ROLLBACK": Decision.ROLLBACK}
_PUSH_CONCURRENCY = 32


def check_payload(request: CheckRequest) -> dict[str, Any]:
    """The check as api.md shapes it (push body, and each item of a pull answer)."""
    if request.encoding == "base64":
        body = base64.b64encode(request.body).decode("ascii")
    else:
        body = request.body.decode("utf-8", errors="surrogateescape")
    return {
        "transaction_id": request.transaction_id,
        "producer_group": request.producer_group,
        "msg_id": request.msg_id,
        "topic": request.topic,
        "tags": request.tags,
        "keys": list(request.keys),
        "body": body,
        "encoding": request.encoding,
        "properties": request.properties,
        "check_times": request.check_times,
    }


class PullHub:
    """Wakes the long-polls of pull instances on this broker when checks are assigned to them.
    (Long-polls on other brokers find their checks in the database on their next look.)"""

    def __init__(self) -> None:
        self._events: dict[tuple[str, str], asyncio.Event] = defaultdict(asyncio.Event)

    def event(self, group: str, client_id: str) -> asyncio.Event:
        return self._events[(group, client_id)]

    def notify(self, group: str, client_id: str) -> None:
        event = self._events.get((group, client_id))
        if event is not None:
            event.set()

    def release(self, group: str, client_id: str) -> None:
        self._events.pop((group, client_id), None)


class CheckBackScheduler:
    def __init__(
        self,
        service: BrokerService,
        checkback: CheckBack,
        metrics: BrokerMetrics,
        hub: PullHub,
        *,
        interval_seconds: float,
        push_timeout_seconds: float,
        round_max: int,
    ) -> None:
        self.service = service
        self.checkback = checkback
        self.metrics = metrics
        self.hub = hub
        self.interval = interval_seconds
        self.push_timeout = push_timeout_seconds
        self.round_max = round_max
        self._task: asyncio.Task[None] | None = None
        self._http: httpx.AsyncClient | None = None
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Run the next round now (an operator asked for a check)."""
        self._wake.set()

    def start(self) -> None:
        self._http = httpx.AsyncClient(timeout=self.push_timeout)
        self._task = asyncio.create_task(self._loop(), name="halfmq-checkback")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_round()
            except BrokerError as error:
                log.warning("check round failed: %s", error.message)
            except Exception:
                log.exception("check round failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.interval)
            self._wake.clear()

    async def run_round(self) -> int:
        """Claim and check every due half (in slices of ``round_max``); return how many."""
        total = 0
        # Claimed in slices that are pushed at once, so that every push of a slice happens well
        # inside the claim's time-out (a slice waits at most one push time-out).
        while total < self.round_max:
            size = min(_PUSH_CONCURRENCY, self.round_max - total)
            report = await self.service.store.write(self.checkback.claim_round(size))
            total += report.claimed
            self._observe(report.skipped_no_producer, report.discarded)
            for (group, client_id), count in report.pull_assigned.items():
                self.metrics.checks.labels(outcome="assigned_pull").inc(count)
                self.hub.notify(group, client_id)
            await self._push_all(report.pushes)
            if report.claimed < size:
                break
        return total

    def _observe(self, skipped: list[str], discarded: list[tuple[str, str]]) -> None:
        if skipped:
            self.metrics.checks.labels(outcome="skipped_no_producer").inc(len(skipped))
            log.info("no live producer for %d due halves (not counted as checks)", len(skipped))
        for transaction_id, reason in discarded:
            self.metrics.discards.labels(reason=reason).inc()
            log.warning("transaction %s DISCARDED (%s)", transaction_id, reason)

    async def _push_all(self, pushes: list[PushCheck]) -> None:
        if not pushes:
            return
        limit = asyncio.Semaphore(_PUSH_CONCURRENCY)

        async def one(check: PushCheck) -> None:
            async with limit:
                await self.push(check)

        await asyncio.gather(*(one(check) for check in pushes))

    async def push(self, check: PushCheck) -> None:
        request, instance = check.request, check.instance
        assert self._http is not None
        assert instance.callback_url is not None
        self.metrics.checks.labels(outcome="sent").inc()
        try:
            response = await self._http.post(instance.callback_url, json=check_payload(request))
            response.raise_for_status()
            state = str(response.json().get("state", "")).upper()
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            self.metrics.checks.labels(outcome="failed").inc()
            log.warning(
                "check of %s at %s failed: %s", request.transaction_id, instance.client_id, exc
            )
            await self.service.store.write(self.checkback.record_unknown(request.transaction_id))
            return
        self.metrics.checks.labels(outcome="answered").inc()
        log.info(
            "check of %s answered %s by %s (check %d)",
            request.transaction_id,
            state or "nothing",
            instance.client_id,
            request.check_times,
        )
        decision = _ANSWERS.get(state)
        if decision is None:
            await self.service.store.write(self.checkback.record_unknown(request.transaction_id))
            return
        try:
            await self.service.resolve(
                request.transaction_id, decision, request.producer_group, ResolvedBy.CHECK
            )
        except BrokerError as error:
            # The producer (or an operator) decided first: the first decision stands.
            log.info("check answer for %s not applied: %s", request.transaction_id, error.message)
