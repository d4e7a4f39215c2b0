"""The store as the domain uses it: units of work, and the transaction they run in.

A *unit of work* runs in a store transaction: ``fn(tx: StoreTx) -> T``.  The store runs write
units through :meth:`Store.write` -- many of them share one store commit (group commit), and each
caller is answered only after that commit -- and read units through :meth:`Store.read`.  Inside a
unit, what it appended is visible to later calls of the same batch; offsets of appended messages
are filled in before commit.

A write unit must do its checks before its first change: when it raises a :class:`DomainError`,
the store drops what it appended and the batch goes on without it.

A write is a :class:`Command`, a record the store plans its batch from by reading its fields: the
transactions it will look up (a :class:`Resolve`), the client-made ``msg_id`` values whose earlier
sends it will look for (a :class:`Half`, a :class:`Send`), so that a store may fetch those of many
units at once, and the signed request's ``nonce``.  A bare function is accepted too, as a plain
:class:`Unit` whose nonce is :meth:`Store.write`'s keyword: the many small writes that name nothing
ahead (creating a topic, a consumer's claim) stay functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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
from broker_service.domain.transactions.model import Decision, ResolvedBy

T = TypeVar("T")
U = TypeVar("U")


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
class Command(Generic[T]):
    """A write unit as a record: ``run`` does the work, and the fields say what the group-commit
    writer plans its batch from -- the transactions it will look up (``transaction_ids``), the
    earlier sends it will look for (``dedup_keys``) and the signed request's ``nonce``.  Calling
    the command runs it."""

    run: Callable[[StoreTx], T]
    nonce: NonceKey | None = field(default=None, kw_only=True)

    @property
    def transaction_ids(self) -> tuple[str, ...]:
        """The transactions the unit will look up by id, which a store may read at once."""
        return ()

    @property
    def dedup_keys(self) -> tuple[str, ...]:
        """The client-made ``msg_id`` values whose earlier sends the unit will look for
        (``find_sent``), which a store may read at once; ``find_sent`` stays exact either way."""
        return ()

    def __call__(self, tx: StoreTx) -> T:
        return self.run(tx)

    def wrapped(self, run: Callable[[StoreTx], U]) -> Command[U]:
        """The same command doing ``run`` (which calls this one): for a store that wraps units.
        A command with fields of its own makes its own copy, field by field: this is on the
        path of every send, where ``dataclasses.replace`` is the slower way to copy."""
        return Unit(run, nonce=self.nonce)


@dataclass(frozen=True, slots=True)
class Unit(Command[T]):
    """A write that names nothing ahead (a bare callable is run as one)."""


@dataclass(frozen=True, slots=True)
class Resolve(Command[T]):
    """A commit or rollback of one transaction (``by``: who decides; ``client``: the producer
    instance that asks, if it says)."""

    transaction_id: str
    decision: Decision
    by: ResolvedBy
    client: str | None = None

    @property
    def transaction_ids(self) -> tuple[str, ...]:
        return (self.transaction_id,)

    def wrapped(self, run: Callable[[StoreTx], U]) -> Resolve[U]:
        return Resolve(
            run, self.transaction_id, self.decision, self.by, self.client, nonce=self.nonce
        )


@dataclass(frozen=True, slots=True)
class Half(Command[T]):
    """A half message of a new transaction, and its client-made ``msg_id`` if it has one."""

    topic: str
    msg_id: str | None = None

    @property
    def dedup_keys(self) -> tuple[str, ...]:
        return (self.msg_id,) if self.msg_id else ()

    def wrapped(self, run: Callable[[StoreTx], U]) -> Half[U]:
        return Half(run, self.topic, self.msg_id, nonce=self.nonce)


@dataclass(frozen=True, slots=True)
class Send(Command[T]):
    """A send of messages to ``topic``; ``msg_ids``: their client-made ids, once each (none for
    drafts without: nothing to look for)."""

    topic: str
    msg_ids: tuple[str, ...] = ()

    @property
    def dedup_keys(self) -> tuple[str, ...]:
        return self.msg_ids

    def wrapped(self, run: Callable[[StoreTx], U]) -> Send[U]:
        return Send(run, self.topic, self.msg_ids, nonce=self.nonce)


def wrapped_like(
    unit: Callable[[Any], object], run: Callable[[StoreTx], T]
) -> Callable[[StoreTx], T]:
    """``run`` (which calls ``unit``) saying what ``unit`` said: for a store that wraps units."""
    return unit.wrapped(run) if isinstance(unit, Command) else run


class Store(Protocol):
    async def write(
        self, unit: Command[T] | Callable[[StoreTx], T], *, nonce: NonceKey | None = None
    ) -> T:
        """Run ``unit`` in a store transaction and commit (in a group commit).

        The nonce, a signed request's (the command's field, or ``nonce`` for a bare function),
        which the request's first write takes from its
        :class:`~broker_service.domain.ports.nonces.RequestNonce`: remembered in the same
        transaction before the unit runs; one seen before raises ``Unauthenticated``
        (``NONCE_REPLAYED``) and the unit does not run."""
        ...

    async def read(self, unit: Callable[[StoreTx], T]) -> T: ...


class UnitRunner(Protocol):
    """Runs consumer units of work side by side, instead of through :meth:`Store.write` (a store
    whose claims are row locks, so that several units may take them at once)."""

    async def run(self, unit: Callable[[StoreTx], T], *, nonce: NonceKey | None = None) -> T:
        """Run ``unit`` in a transaction of its own and commit; ``nonce`` as for
        :meth:`Store.write`."""
        ...

    async def run_lease(self, unit: Callable[[StoreTx], T], *, nonce: NonceKey | None = None) -> T:
        """:meth:`run` for a unit that only takes or renews leases, whose loss just redelivers
        (its commit may be less durable)."""
        ...


@dataclass(frozen=True, slots=True)
class WriteRunner:
    """The :class:`UnitRunner` of a store whose units run one at a time anyway: each unit is one
    more :meth:`Store.write`, a lease's as durable as any."""

    store: Store

    async def run(self, unit: Callable[[StoreTx], T], *, nonce: NonceKey | None = None) -> T:
        return await self.store.write(unit, nonce=nonce)

    run_lease = run


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reason: str = ""


class StoreProbe(Protocol):
    """What an operator asks of the store: is it ready (reachable, its schema current), and how
    much has its writer done."""

    async def ping(self) -> Readiness: ...
    def stats(self) -> dict[str, Any]: ...
