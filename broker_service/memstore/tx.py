"""``MemoryTx``: the domain's :class:`StoreTx` on the in-memory state, one part per role (as
``SqlTx`` is one part per role on a SQL connection)."""

from __future__ import annotations

from broker_service.domain.ports import StoreTx
from broker_service.memstore.admin import (
    AclPart,
    AuditPart,
    BreakStatusPart,
    BrokerPart,
    ClientPart,
)
from broker_service.memstore.checks import CheckPart
from broker_service.memstore.retention import RetentionPart
from broker_service.memstore.state import State, Undo, roll_back


class MemoryTx(
    RetentionPart,
    CheckPart,
    AclPart,
    AuditPart,
    BrokerPart,
    ClientPart,
    BreakStatusPart,
):
    """A unit of work's view of the state: every change it makes is noted in ``undo``, so
    :meth:`rollback` leaves the state as the unit found it."""

    def __init__(self, state: State) -> None:
        self.s = state
        self.undo: Undo = []

    def rollback(self) -> None:
        roll_back(self.undo)

    def commit(self) -> None:
        """Keep every change: forget how to undo them."""
        self.undo.clear()


# mypy holds the class to the port: every method of every role, with its signature.
_: type[StoreTx] = MemoryTx
