"""Runs a purge round every ``purge_interval_seconds`` (docs/store.md, "Retention").

Of several brokers on one database, the one holding the ``retention`` lease purges; the others
find it held and wait for the next round.  A round takes about ``purge_share`` of the store
writer's time.  A round that did not finish within the interval (or stopped at ``max_rows``)
means the purge falls behind: the next starts at once with twice the share (up to all of it),
until one finishes in time; then the share is ``purge_share`` again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time

from broker_service.domain.errors import DomainError
from broker_service.domain.retention.model import PurgeReport
from broker_service.domain.retention.service import (
    MOST_PAUSE_SECONDS,
    LeaseHeld,
    Pace,
    RetentionService,
)
from broker_service.metrics import BrokerMetrics
from broker_service.schedulers.loop import SchedulerLoop

log = logging.getLogger("halfmq.retention")

_EXPORT_WARNING_SECONDS = 3600.0  # how often a purge held back by the export says so


class RetentionScheduler(SchedulerLoop):
    task_name = "halfmq-retention"

    def __init__(
        self,
        service: RetentionService,
        metrics: BrokerMetrics,
        *,
        interval_seconds: float,
        pause_seconds: float,
        share: float = 1.0,
        max_rows: int = 1_000_000,
    ) -> None:
        self.service = service
        self.metrics = metrics
        self.interval = interval_seconds
        # A pause longer than the interval would hold the round past its next turn.
        self.base = Pace(
            share=share, pause=pause_seconds, most=min(MOST_PAUSE_SECONDS, interval_seconds)
        )
        self.pace = self.base  # the share rises while the purge is behind
        self.max_rows = max_rows
        self._warned_export_at = -_EXPORT_WARNING_SECONDS

    async def _loop(self) -> None:
        delay = self.interval
        while True:
            await asyncio.sleep(delay)
            report = await self.run_round()
            behind = report is not None and (not report.complete or report.seconds >= self.interval)
            seconds = 0.0 if report is None else report.seconds
            delay = self.base.pause if behind else max(self.base.pause, self.interval - seconds)
            self.adapt(behind)

    def adapt(self, behind: bool) -> None:
        """Twice the share after a round that fell behind; the set share after one in time."""
        share = min(1.0, self.pace.share * 2) if behind else self.base.share
        if share == self.pace.share:
            return
        if behind:
            log.info(
                "the purge falls behind: the next round goes on at once, with %.0f%% of the "
                "store writer's time",
                share * 100,
            )
        else:
            log.info("the purge caught up: back to %.0f%% of the writer's time", share * 100)
        self.pace = dataclasses.replace(self.base, share=share)

    async def run_round(self) -> PurgeReport | None:
        """One round, counted and logged; None when it did not run (lease held, failure)."""
        try:
            report = await self.service.purge(max_rows=self.max_rows, pace=self.pace)
        except LeaseHeld:
            self.metrics.purge_rounds.labels(result="lease_held").inc()
            return None
        except DomainError as error:
            self.metrics.purge_rounds.labels(result="failed").inc()
            log.warning("purge round failed: %s", error.message)
            return None
        except Exception:
            self.metrics.purge_rounds.labels(result="failed").inc()
            log.exception("purge round failed")
            return None
        self.warn_if_held(report)
        with contextlib.suppress(DomainError):
            # The gauges need the size and the oldest message, not a full count of every table.
            stats = await self.service.stats(count_rows=False)
            self.metrics.store_size.set(stats.size_bytes)
            oldest = stats.oldest_message_at
            age = 0.0 if oldest is None else max(0.0, (self.service.clock() - oldest) / 1000)
            self.metrics.oldest_message_age.set(age)
        return report

    def warn_if_held(self, report: PurgeReport) -> None:
        now = time.monotonic()
        if report.export_held and now - self._warned_export_at >= _EXPORT_WARNING_SECONDS:
            self._warned_export_at = now
            log.warning(
                "retention keeps what the reconciliation export has not read: run `halfmq "
                "export` nightly, or set HALFMQ_RETENTION_WAIT_FOR_EXPORT=false if you do not use it"
            )


def count_round(metrics: BrokerMetrics, report: PurgeReport) -> None:
    """A round that ran (scheduled, or asked through the API): its counts, and a log line when
    it purged something."""
    metrics.purge_rounds.labels(result="purged" if report.total else "idle").inc()
    for table, n in report.purged.items():
        if n:
            metrics.purged_rows.labels(table=table).inc(n)
    for expiry in report.expired:
        metrics.expired_messages.labels(group=expiry.group).inc(expiry.count)
    if report.total:
        counts = ", ".join(f"{n} {table}" for table, n in report.purged.items() if n)
        more = "" if report.complete else " (round cut short: the next goes on)"
        log.info("purged %s in %.2fs%s", counts, report.seconds, more)
