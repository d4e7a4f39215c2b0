"""PostgreSQL: consumer units of work on their own pooled connections, side by side, instead of
queueing behind the group-commit writer (the domain's ``UnitRunner``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

import anyio.to_thread
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from broker_service.domain.errors import DomainError, NotReady
from broker_service.domain.ports.nonces import NonceKey, replayed_error
from broker_service.store.failures import store_unavailable
from broker_service.store.progress import ProgressKey
from broker_service.store.sqltx import SqlTx

T = TypeVar("T")

_RETRIES = 3
# How long settling a committed offset waits for the unit that holds its row: a receive's or an
# ack's holds it for milliseconds; longer means something is wrong, and the offset is left.
_SETTLE_WAIT_MS = 2000

log = logging.getLogger("halfmq.store.claims")


class ConcurrentUnits:
    """Claims are row locks taken with ``SKIP LOCKED`` -- exactly what lets several brokers share one
    database -- so receives, acks and nacks of one broker may run in parallel the same way.  A
    receive or change-invisible commits with ``synchronous_commit = off``: losing its lease in a
    database crash only hands the message out again (at least once).  Acks and nacks commit as the
    ``flush`` setting says, like every other write.  Leases and durable units run on two pools
    (``engine.make_claims_engine``), so that neither needs a ``SET LOCAL`` of its own.
    """

    def __init__(
        self,
        leases: Engine,
        durable: Engine,
        *,
        ready: Callable[[], bool],
        inflight: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> None:
        """``durable``: the pool of acks and nacks (the leases' own under ``flush: async``);
        ``inflight``: held while a unit runs (the store's, so that closing waits for it)."""
        self.leases = leases
        self.durable = durable
        self.ready = ready
        self.inflight = inflight

    async def run(self, unit: Callable[[Any], T], *, nonce: NonceKey | None = None) -> T:
        return await self._run_on(self.durable, unit, nonce)

    async def run_lease(self, unit: Callable[[Any], T], *, nonce: NonceKey | None = None) -> T:
        return await self._run_on(self.leases, unit, nonce)

    async def _run_on(self, engine: Engine, unit: Callable[[Any], T], nonce: NonceKey | None) -> T:
        """``unit`` in a thread, on ``engine`` (durable, or the leases' less durable one)."""
        if not self.ready():
            raise NotReady("the broker is not ready: the store's schema is not current")
        return await anyio.to_thread.run_sync(self._run, unit, engine, nonce)

    def _run(self, unit: Callable[[Any], T], engine: Engine, nonce: NonceKey | None) -> T:
        error: Exception | None = None
        for _ in range(_RETRIES):
            try:
                with self.inflight(), engine.begin() as conn:
                    tx = SqlTx(conn)
                    if nonce is not None and not tx.remember_nonces([nonce])[0]:
                        raise replayed_error(nonce)
                    result = unit(tx)
                    tx.flush()
                if tx.held_progress:
                    self._settle(tx.held_progress)
                return result
            except DomainError:
                raise
            except (IntegrityError, OperationalError) as exc:  # a lost race, a deadlock: again
                error = exc
            except DBAPIError as exc:
                raise store_unavailable(exc) from exc
        assert error is not None
        raise store_unavailable(error) from error

    def _settle(self, held: dict[ProgressKey, int]) -> None:
        """Once a unit has committed, move the committed offsets it found held by another unit
        (``ProgressPart.settle_progress``), on the leases' pool: an offset left behind by a crash
        only redelivers, as a lease does.  Waiting is bounded (``lock_timeout``); a settle that
        fails is logged and leaves the offset to the queue's next ack or receive -- the unit's
        own work is committed either way."""
        try:
            with self.inflight(), self.leases.begin() as conn:
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{_SETTLE_WAIT_MS}ms'")
                SqlTx(conn).settle_progress(held)
        except DBAPIError as exc:
            log.info("committed offsets of %s not settled: %s", sorted(held), exc.orig or exc)
