"""``RetentionService``: a purge round, in bounded units of work (docs/store.md, "Retention").

A round goes through every queue with something old (users', retry and dead-letter topics lose a
prefix, :mod:`broker_service.domain.retention.plan`; delayed messages already released go from
the head of the schedule queues), then resolved transactions with their half, op record and
parked copy, finished deliveries, trace events, and the purged-id records past their time; then
the store gives free space back.  Each unit deletes at most ``policy.batch`` rows (or one queue
prefix of at most that many) and renews the ``retention`` lease in its own transaction, so that
of several brokers on one database one purges at a time, and one that lost the lease changes
nothing.  A dry run reads the same plan and deletes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import TypeVar

from broker_service.domain import names
from broker_service.domain.clock import now_ms
from broker_service.domain.config import RetentionPolicy
from broker_service.domain.errors import Conflict
from broker_service.domain.ports import (
    DelayedPurge,
    DeliveryPurge,
    HeadPurge,
    RequestNonce,
    RetentionStore,
    Store,
    StoreTx,
    StoreUpkeep,
    nonces,
)
from broker_service.domain.retention.model import (
    LEASE,
    Expiry,
    PurgeReport,
    QueueHead,
    StoreStats,
)
from broker_service.domain.retention.plan import QueuePlan, cuts_for, is_prefix_queue, plan_queue

log = logging.getLogger("halfmq.retention")
_T = TypeVar("_T")

# A dry run reads this many rows of a queue at a time, and gives up counting past this many.
_DRY_CHUNK = 10_000
_DRY_MAX = 1_000_000
_COMPACT_STEPS = 64  # a round gives back at most this many steps of free pages (SQLite)
_DELAYED_RANGE = 5_000  # offsets of a schedule queue one unit looks through for released messages
# A round that deletes holds the store's purge lease this long past its last unit of work.
LEASE_MS = 60_000
MOST_PAUSE_SECONDS = 10.0  # the longest pause after one unit of work (:class:`Pace`)


class LeaseHeld(Conflict):
    code = "PURGE_RUNNING"


@dataclass(frozen=True, slots=True)
class Pace:
    """How a round leaves the store to the sends: after a unit of work that held the store's
    writer for ``t`` seconds it waits ``t * (1 - share) / share`` (so the purge takes about
    ``share`` of the writer's time), never less than ``pause`` and never more than ``most``.

    ``most`` bounds what a unit's time says of the writer's load: a unit that waited through a
    store outage (a failover, a reconnection) did not keep the writer busy, and at a share of
    5 % ten seconds of it would otherwise put the round, and its lease, to sleep for minutes."""

    share: float = 1.0
    pause: float = 0.0
    most: float = MOST_PAUSE_SECONDS

    def after(self, took: float) -> float:
        return min(self.most, max(self.pause, took * (1 - self.share) / self.share))


@dataclass(slots=True)
class _Round:
    report: PurgeReport
    exported: int | None
    budget: int
    pace: Pace
    started: int  # ms: a purged-id record this round writes is younger, and outlives the round
    nonce: RequestNonce | None  # the signed request's, taken by the round's first write


@dataclass(eq=False)
class RetentionService:
    """Purge rounds on ``store`` by ``policy``, each holding the store's purge lease
    ``lease_ms`` past its last unit of work.  ``on_round``: told of every round that purged (not
    of dry runs), whoever asked for it -- the scheduler or an operator -- to count it."""

    store: Store
    policy: RetentionPolicy
    clock: Callable[[], int] = now_ms
    _: KW_ONLY
    lease_ms: int = LEASE_MS
    on_round: Callable[[PurgeReport], None] | None = None
    upkeep: StoreUpkeep | None = None
    # one round at a time in this broker
    _running: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    async def purge(
        self,
        *,
        dry_run: bool = False,
        max_rows: int = 1_000_000,
        pace: Pace = Pace(),
        nonce: RequestNonce | None = None,
    ) -> PurgeReport:
        """One round: at most ``max_rows`` rows, its units of work paced by ``pace``; ``nonce``:
        the operator's signed request's (:mod:`broker_service.domain.ports.nonces`).

        Raises :class:`LeaseHeld` when another round runs (here, or on another broker) before
        this one deleted anything; a round that loses the lease midway answers what it did,
        ``complete`` false."""
        if dry_run:
            return await self._round(True, max_rows, pace, nonce=nonce)
        if self._running.locked():
            raise LeaseHeld("a purge round is running in this broker", lease=LEASE)
        async with self._running:
            report = PurgeReport()
            try:
                report = await self._round(False, max_rows, pace, report, nonce=nonce)
            except LeaseHeld:
                if not report.total and not report.expired:
                    raise
                report.complete = False
            if self.on_round is not None:
                self.on_round(report)
            return report

    async def _round(
        self,
        dry_run: bool,
        max_rows: int,
        pace: Pace,
        report: PurgeReport | None = None,
        *,
        nonce: RequestNonce | None = None,
    ) -> PurgeReport:
        """The round, filling ``report`` as it goes (so that a lost lease leaves what was done)."""
        started = time.monotonic()
        policy = self.policy
        exported = None
        if policy.wait_for_export:
            exported = await self.store.read(
                lambda tx: tx.export_watermark(policy.export_watermark)
            )
        report = PurgeReport(dry_run=dry_run) if report is None else report
        report.export_held = policy.wait_for_export and (
            exported is None or exported < self.clock() - policy.retention_ms
        )
        state = _Round(report, exported, max_rows, pace, self.clock(), nonce)
        for head in await self.store.read(lambda tx: tx.queue_heads()):
            if state.budget <= 0:
                break
            if is_prefix_queue(head.topic):
                await self._queue(head, state, dry_run)
            elif head.topic == names.SCHEDULE_TOPIC:
                await self._delayed(head, state, dry_run)
        await self._transactions(state, dry_run)
        await self._finished_rows(state, dry_run)
        if not dry_run and report.total:
            for _ in range(_COMPACT_STEPS):
                if not await self._step(state, lambda tx: tx.compact(), False):
                    break
        if not dry_run and self.upkeep is not None:
            # Every round, one that purged nothing too: rows left dead by the nonces' expiry and
            # by updates (a delivery acked, a half resolved) wait for it as well.
            report.reclaimed = await self.upkeep.reclaim(report.purged)
        report.complete = state.budget > 0
        report.seconds = time.monotonic() - started
        return report

    # -- units ----------------------------------------------------------------------------------

    async def _step(self, state: _Round, unit: Callable[[StoreTx], _T], dry_run: bool) -> _T:
        """One unit of work (a write; a read for a dry run), then the pause its pace asks for.

        The pace counts the whole wait for the unit -- its turn at the writer, its statements,
        and the commit of the batch it went in, which writes (and later checkpoints) the pages
        it changed -- so that a busy writer makes the purge slower, not the sends."""
        started = time.perf_counter()
        if dry_run:
            result = await self.store.read(unit)
        else:
            result = await self.store.write(unit, nonce=nonces.take(state.nonce))
        await asyncio.sleep(state.pace.after(time.perf_counter() - started))
        return result

    def _fence(self, tx: RetentionStore) -> int:
        """Renew the lease in the unit's transaction: raises when another broker holds it."""
        now = self.clock()
        if not tx.hold_lease(LEASE, self.policy.broker_id, now, now + self.lease_ms):
            raise LeaseHeld(
                "another broker is purging this store", code="PURGE_RUNNING", lease=LEASE
            )
        return now

    async def _queue(self, head: QueueHead, state: _Round, dry_run: bool) -> None:
        cuts = cuts_for(self.policy, head.topic, self.clock(), state.exported)
        if head.oldest_stored_at is not None and head.oldest_stored_at >= cuts.age:
            return  # nothing old enough
        topic, queue_id, batch = head.topic, head.queue_id, self.policy.batch
        start = head.min_offset  # a dry run moves it in memory

        def unit(tx: StoreTx) -> tuple[QueuePlan, int]:
            """The plan for the queue's head from ``start`` (a dry run) or from its stored
            ``min_offset``, carried out unless dry; and where the head was."""
            now = self.clock()
            if dry_run:
                current = head._replace(min_offset=start)
                rows = tx.queue_head_rows(topic, queue_id, start, _DRY_CHUNK)
                full = len(rows) == _DRY_CHUNK
                plan = plan_queue(current, rows, tx.readers_of(topic), cuts, full=full)
                if plan.end > start:
                    state.report.add(
                        tx.purge_queue_head(
                            HeadPurge(topic, queue_id, start, plan.end, now, dry_run=True)
                        )
                    )
                return plan, start
            now = self._fence(tx)
            info = next((q for q in tx.queue_infos(topic) if q.queue_id == queue_id), None)
            if info is None:  # the topic was deleted meanwhile
                return QueuePlan(end=head.min_offset), head.min_offset
            current = head._replace(min_offset=info.min_offset, max_offset=info.max_offset)
            limit = min(batch, state.budget)
            rows = tx.queue_head_rows(topic, queue_id, info.min_offset, limit)
            plan = plan_queue(current, rows, tx.readers_of(topic), cuts, full=len(rows) == limit)
            if plan.end > info.min_offset:
                # What each position actually moved past: an ack (another broker's) that landed
                # since the positions were read has passed some of it, or all.
                expired: list[Expiry] = []
                for e in plan.expiries:
                    n = tx.expire_position(e.group, e.client_id, topic, queue_id, plan.end, now)
                    if n:
                        expired.append(replace(e, from_offset=plan.end - n))
                plan.expiries = expired
                state.report.add(
                    tx.purge_queue_head(HeadPurge(topic, queue_id, info.min_offset, plan.end, now))
                )
            return plan, info.min_offset

        scanned = 0
        while state.budget > 0:
            plan, was = await self._step(state, unit, dry_run)
            moved = max(0, plan.end - was)
            scanned += moved
            state.budget -= moved
            self._note(state.report, plan, dry_run)
            if not plan.more or moved == 0 or (dry_run and scanned >= _DRY_MAX):
                return
            start = plan.end

    def _note(self, report: PurgeReport, plan: QueuePlan, dry_run: bool) -> None:
        for held in plan.held:
            if held not in report.held and len(report.held) < 100:
                report.held.append(held)
        report.expired.extend(plan.expiries)
        if not dry_run:
            for expiry in plan.expiries:
                _log_expiry(expiry, self.policy)

    async def _delayed(self, head: QueueHead, state: _Round, dry_run: bool) -> None:
        """Released delayed messages of a schedule queue, ``_DELAYED_RANGE`` offsets at a time
        from its head to the end it had when the round began: the messages of an explicit
        ``deliver_at`` are not released in offset order, and however many still wait at the
        head (``min_offset`` stays at the oldest), those released behind them go."""
        now = self.clock()
        cuts = cuts_for(self.policy, head.topic, now, state.exported)
        released_before = now - self.policy.retention_ms
        purge = DelayedPurge(head.topic, head.queue_id, released_before, cuts.age, dry_run=dry_run)
        if dry_run:

            def count(tx: RetentionStore) -> dict[str, int]:
                return tx.purge_released_delayed(purge)

            state.report.add(await self._step(state, count, True))
            return
        cursor = head.min_offset

        def unit(tx: RetentionStore) -> tuple[int, int] | None:
            """The next range's start and the messages purged in it; None past the last old
            message."""
            self._fence(tx)
            first = tx.queue_head_rows(head.topic, head.queue_id, cursor, 1)
            if not first or first[0].queue_offset >= head.max_offset:
                return None
            if first[0].stored_at >= cuts.age:
                return None  # stored in offset order: none behind it is old enough either
            start = first[0].queue_offset  # past a hole left by the ranges before
            limit = min(self.policy.batch, state.budget)
            ranged = replace(purge, limit=limit, start=start, end=start + _DELAYED_RANGE)
            counts = tx.purge_released_delayed(ranged)
            return start, counts["messages"]

        while state.budget > 0:
            step = await self._step(state, unit, False)
            if step is None:
                return
            start, n = step
            state.report.add({"messages": n})
            state.budget -= n
            # A full batch: the range may hold more; otherwise it is done.
            cursor = start if n >= self.policy.batch else start + _DELAYED_RANGE

    async def _transactions(self, state: _Round, dry_run: bool) -> None:
        # Resolved before the cut, and so created before it: a transaction's op record is stored
        # when it is resolved, and must have been exported too (the watermark passed it).
        cut = cuts_for(self.policy, names.HALF_TOPIC, self.clock(), state.exported).age

        def unit(tx: RetentionStore) -> dict[str, int]:
            at = self.clock() if dry_run else self._fence(tx)
            limit = None if dry_run else min(self.policy.batch, state.budget)
            return tx.purge_transactions(cut, limit, at, dry_run=dry_run)

        await self._repeat(unit, state, dry_run)

    async def _finished_rows(self, state: _Round, dry_run: bool) -> None:
        """Finished deliveries (exported ones), trace events, and purged-id records."""
        now = self.clock()
        before = now - self.policy.retention_ms
        delivered_before = cuts_for(self.policy, "", now, state.exported).age

        def deliveries(tx: RetentionStore) -> dict[str, int]:
            if not dry_run:
                self._fence(tx)
            limit = None if dry_run else min(self.policy.batch, state.budget)
            purge = DeliveryPurge(before, delivered_before, limit, dry_run)
            return {"deliveries": tx.purge_deliveries(purge)}

        def trace(tx: RetentionStore) -> dict[str, int]:
            if not dry_run:
                self._fence(tx)
            limit = None if dry_run else min(self.policy.batch, state.budget)
            return {"trace_events": tx.purge_trace(before, limit, dry_run=dry_run)}

        # A purged id is answered EXPIRED for a retention after its purge: cut from the round's
        # start, so the records the round itself wrote stay however long its steps took.
        ids_before = min(before, state.started - self.policy.retention_ms)

        def purged_ids(tx: RetentionStore) -> dict[str, int]:
            if not dry_run:
                self._fence(tx)
            limit = None if dry_run else min(self.policy.batch, state.budget)
            return {"purged_ids": tx.purge_purged_ids(ids_before, limit, dry_run=dry_run)}

        for unit in (deliveries, trace, purged_ids):
            await self._repeat(unit, state, dry_run)

    async def _repeat(
        self,
        unit: Callable[[StoreTx], dict[str, int]],
        state: _Round,
        dry_run: bool,
    ) -> None:
        """Run ``unit`` until it purges less than a batch (a dry run counts once)."""
        while state.budget > 0:
            counts = await self._step(state, unit, dry_run)
            state.report.add(counts)
            done = sum(counts.values())
            state.budget -= done
            if dry_run or done < self.policy.batch:
                return

    async def stats(self, *, count_rows: bool = True) -> StoreStats:
        """``count_rows``: count every table's rows (a full scan of each on PostgreSQL)."""
        watermark = self.policy.export_watermark
        return await self.store.read(lambda tx: tx.store_stats(watermark, count_rows=count_rows))

    # -- lookups --------------------------------------------------------------------------------

    async def purged_at(self, kind: str, *ids: str) -> int | None:
        """When one of ``ids`` was purged (``kind``: 'm' msg_id, 't' transaction id)."""
        return await self.store.read(lambda tx: tx.purged_at(kind, ids))


def _log_expiry(expiry: Expiry, policy: RetentionPolicy) -> None:
    who = expiry.group if not expiry.client_id else f"{expiry.group} member {expiry.client_id}"
    if expiry.idle_member:
        why = "the member was not seen for the whole retention"
    else:
        hours = (policy.hard_limit_ms or 0) / 3_600_000
        why = f"older than the hard limit of {hours:g} h"
    log.warning(
        "retention expired %d messages of %s in %s queue %d (offsets %d-%d, %s)",
        expiry.count,
        who,
        expiry.topic,
        expiry.queue_id,
        expiry.from_offset,
        expiry.to_offset - 1,
        why,
    )
