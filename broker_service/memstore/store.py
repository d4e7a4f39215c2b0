"""``MemoryStore``: the domain's :class:`Store` and :class:`StoreProbe` on Python data
structures, in this process (its units run one at a time: consumer units too go through
:meth:`~MemoryStore.write`, as :class:`~broker_service.domain.ports.store.WriteRunner` runs them).

Units of work run one at a time under an asyncio lock, each on a :class:`MemoryTx` that notes
how to undo its changes: a write unit that raises leaves nothing behind (the port's terms, "the
store drops what it appended", taken whole: its every change), one that returns is kept and seen
by every later unit.  A read unit's changes, if it made any, are undone too, as a SQL read's
uncommitted transaction would be.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from broker_service.domain.errors import NotReady
from broker_service.domain.ports import (
    Command,
    Readiness,
    Store,
    StoreProbe,
    StoreTx,
)
from broker_service.domain.ports.nonces import NonceKey, replayed_error
from broker_service.domain.ports.retention import StoreUpkeep
from broker_service.memstore.state import State
from broker_service.memstore.tx import MemoryTx

T = TypeVar("T")


class MemoryStore:
    def __init__(self) -> None:
        self.state = State()
        self._lock = asyncio.Lock()
        self.closed = False
        self.batches = 0  # write units committed (each is a batch of its own)
        self.units = 0

    async def write(
        self, unit: Command[T] | Callable[[StoreTx], T], *, nonce: NonceKey | None = None
    ) -> T:
        """Run ``unit`` and keep what it did, or, when it raises, nothing of it.  Its nonce (the
        command's ``nonce``, or ``nonce`` for a bare function): a signed request's, remembered
        before the unit runs, and kept whatever the unit does (as the SQL store's group commit
        keeps it when a unit is refused); one seen before raises ``Unauthenticated``
        (``NONCE_REPLAYED``) and the unit does not run.  Nothing else of a command is read
        ahead: its units run one at a time, each looking up what it needs."""
        if nonce is None and isinstance(unit, Command):
            nonce = unit.nonce
        async with self._lock:
            self._guard()
            if nonce is not None:
                self._remember(nonce)
            tx = MemoryTx(self.state)
            try:
                result = unit(tx)
            except BaseException:
                tx.rollback()
                raise
            tx.commit()
            self.batches += 1
            self.units += 1
            return result

    def _remember(self, nonce: NonceKey) -> None:
        tx = MemoryTx(self.state)
        if not tx.remember_nonces([nonce])[0]:
            raise replayed_error(nonce)
        tx.commit()

    async def read(self, unit: Callable[[StoreTx], T]) -> T:
        async with self._lock:
            self._guard()
            tx = MemoryTx(self.state)
            try:
                return unit(tx)
            finally:
                tx.rollback()

    def close(self) -> None:
        """Refuse every unit from now on (``NotReady``), as a closed SQL store does."""
        self.closed = True

    def _guard(self) -> None:
        if self.closed:
            raise NotReady("the broker is not ready: the broker is shutting down")

    async def ping(self) -> Readiness:
        if self.closed:
            return Readiness(False, "the broker is shutting down")
        return Readiness(True)

    def stats(self) -> dict[str, Any]:
        return {"batches": self.batches, "units": self.units}

    async def reclaim(self, purged: Mapping[str, int]) -> list[str]:
        """Deleted rows are gone from memory at once: nothing to reclaim."""
        return []


# mypy holds the store to the ports it stands for.
_store: type[Store] = MemoryStore
_probe: type[StoreProbe] = MemoryStore
_upkeep: type[StoreUpkeep] = MemoryStore
