"""The store as the domain uses it: units of work, and the transaction they run in.

A *unit of work* is a plain function ``fn(tx: StoreTx) -> T``.  The store runs write units through
:meth:`Store.write` -- many of them share one store commit (group commit), and each caller is answered
only after that commit -- and read units through :meth:`Store.read`.  Inside a unit, what it appended is
visible to later calls of the same batch; offsets of appended messages are filled in before commit.

A write unit must do its checks before its first change: when it raises a :class:`DomainError`,
the store drops what it appended and the batch goes on without it.

What a unit may tell the store ahead is part of its type: a :class:`TransactionUnit` names the
transactions it will look up, a :class:`SendUnit` the client-made ``msg_id`` values whose earlier sends
it will look for (``find_sent``), so that a store may fetch those of many units at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from broker_service.domain.ports.admin import AdminStore
from broker_service.domain.ports.audit import AuditStore
from broker_service.domain.ports.breaks import BreakStatusStore
from broker_service.domain.ports.brokers import BrokerStore
from broker_service.domain.ports.checks import CheckStore
from broker_service.domain.ports.clients import ClientStore
from broker_service.domain.ports.consumers import (
    CopyStore,
    DeliveryStore,
    GroupStore,
    ProgressStore,
    TraceStore,
)
from broker_service.domain.ports.messages import MessageStore
from broker_service.domain.ports.nonces import NonceKey
from broker_service.domain.ports.retention import RetentionStore
from broker_service.domain.ports.transactions import TransactionStore

T = TypeVar("T")


class StoreTx(
    BreakStatusStore,
    MessageStore,
    TransactionStore,
    CheckStore,
    GroupStore,
    ProgressStore,
    DeliveryStore,
    CopyStore,
    TraceStore,
    AdminStore,
    RetentionStore,
    AuditStore,
    BrokerStore,
    ClientStore,
    Protocol,
):
    """One store transaction: every role a unit of work may use (a function that needs only one
    role is typed with that role)."""


@dataclass(frozen=True, slots=True)
class TransactionUnit(Generic[T]):
    """A write unit that names, by id, the transactions it will look up (a commit or rollback)."""

    run: Callable[[StoreTx], T]
    transaction_ids: tuple[str, ...]

    def __call__(self, tx: StoreTx) -> T:
        return self.run(tx)


@dataclass(frozen=True, slots=True)
class SendUnit(Generic[T]):
    """A write unit that names the dedup keys (client-made ``msg_id`` values) it will look for with
    ``find_sent`` (a half, a send that carries ids): the store may read those of a whole group
    commit in one lookup.  What ``find_sent`` answers stays exact either way."""

    run: Callable[[StoreTx], T]
    dedup_keys: tuple[str, ...]

    def __call__(self, tx: StoreTx) -> T:
        return self.run(tx)


def transactions_of(unit: Callable[[Any], object]) -> tuple[str, ...]:
    """The transactions a unit said it will look up: none, unless it is a TransactionUnit."""
    return unit.transaction_ids if isinstance(unit, TransactionUnit) else ()


def dedup_keys_of(unit: Callable[[Any], object]) -> tuple[str, ...]:
    """The dedup keys a unit said it will look for: none, unless it is a SendUnit."""
    return unit.dedup_keys if isinstance(unit, SendUnit) else ()


def wrapped_like(
    unit: Callable[[Any], object], run: Callable[[StoreTx], T]
) -> Callable[[StoreTx], T]:
    """``run`` (which calls ``unit``) saying what ``unit`` said: for a store that wraps units."""
    if isinstance(unit, TransactionUnit):
        return TransactionUnit(run, unit.transaction_ids)
    if isinstance(unit, SendUnit):
        return SendUnit(run, unit.dedup_keys)
    return run


class Store(Protocol):
    async def write(self, unit: Callable[[StoreTx], T], *, nonce: NonceKey | None = None) -> T:
        """Run ``unit`` in a store transaction and commit (in a group commit).

        ``nonce``: a signed request's, which the request's first write takes from its
        :class:`~broker_service.domain.ports.nonces.RequestNonce`: remembered in the same
        transaction before the unit runs; one seen before raises ``Unauthenticated``
        (``NONCE_REPLAYED``) and the unit does not run."""
        ...

    async def read(self, unit: Callable[[StoreTx], T]) -> T: ...


class UnitRunner(Protocol):
    """Runs consumer units of work side by side, instead of through :meth:`Store.write` (a store
    whose claims are row locks, so that several units may take them at once).  ``lease_only``:
    the unit only takes or renews leases, whose loss just redelivers."""

    async def run(
        self,
        unit: Callable[[StoreTx], T],
        *,
        lease_only: bool = False,
        nonce: NonceKey | None = None,
    ) -> T:
        """Run ``unit`` in a transaction of its own and commit; ``nonce`` as for
        :meth:`Store.write`."""
        ...


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reason: str = ""


class StoreProbe(Protocol):
    """What an operator asks of the store: is it ready (reachable, its schema current), and how
    much has its writer done."""

    async def ping(self) -> Readiness: ...
    def stats(self) -> dict[str, Any]: ...
