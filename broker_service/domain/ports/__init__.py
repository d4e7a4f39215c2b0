"""The one interface between the domain and the store, split by role: a second backend's checklist.

=========================  ================================================================
:class:`MessageStore`      topics, queues, appending and reading messages, delayed messages
:class:`TransactionStore`  the index of half messages and their one decision
:class:`CheckStore`        producer instances, check-back claims and assignments
:class:`GroupStore`        consumer groups, subscriptions, members; every group's backlog rows
:class:`ProgressStore`     a group's progress per queue, reading a queue from an offset
:class:`DeliveryStore`     deliveries behind receipt handles: claims, leases, finishing
:class:`CopyStore`         a group's retry and dead-letter copies
:class:`TraceStore`        the trace of what happened to a message
:class:`AdminStore`        the ACL's nonces and published versions
:class:`RetentionStore`    the purge: queue heads, readers' positions, bounded deletes
:class:`AuditStore`        the console's audit log of operator actions
:class:`BrokerStore`       the brokers sharing the store, each seen at its beats
:class:`ClientStore`       the RocketMQ 5 clients' profiles and last settings
:class:`BreakStatusStore`  an operator's status on each of the reconciliation's breaks
=========================  ================================================================

No role has more than 20 methods (``tests/unit/test_layers.py`` holds it).  A unit of work receives a
:class:`StoreTx`, the union of the roles; a function that needs one role only is typed with it.
:class:`Store` runs units (see :mod:`broker_service.domain.ports.store`); a signed request's
:class:`RequestNonce` rides with its first write (:mod:`broker_service.domain.ports.nonces`).
"""

from broker_service.domain.ports.admin import AdminStore
from broker_service.domain.ports.audit import AuditStore
from broker_service.domain.ports.breaks import BreakStatusStore
from broker_service.domain.ports.brokers import BrokerStore
from broker_service.domain.ports.checks import CheckAssignment, CheckClaim, CheckStore
from broker_service.domain.ports.clients import ClientStore
from broker_service.domain.ports.consumers import (
    CopyStore,
    DeliveryStore,
    GroupStore,
    ProgressStore,
    TraceStore,
)
from broker_service.domain.ports.messages import MessageQuery, MessageStore
from broker_service.domain.ports.nonces import NonceKey, RequestNonce
from broker_service.domain.ports.retention import (
    DelayedPurge,
    DeliveryPurge,
    HeadPurge,
    RetentionStore,
    StoreUpkeep,
)
from broker_service.domain.ports.store import (
    Command,
    Half,
    Readiness,
    Resolve,
    Send,
    Store,
    StoreProbe,
    StoreTx,
    Unit,
    UnitRunner,
    WriteRunner,
    wrapped_like,
)
from broker_service.domain.ports.transactions import (
    ResolveOutcome,
    TransactionEnd,
    TransactionQuery,
    TransactionStore,
)

__all__ = [
    "AdminStore",
    "AuditStore",
    "BreakStatusStore",
    "BrokerStore",
    "CheckAssignment",
    "CheckClaim",
    "CheckStore",
    "ClientStore",
    "Command",
    "CopyStore",
    "DelayedPurge",
    "DeliveryPurge",
    "DeliveryStore",
    "GroupStore",
    "Half",
    "HeadPurge",
    "MessageQuery",
    "MessageStore",
    "NonceKey",
    "ProgressStore",
    "Readiness",
    "RequestNonce",
    "Resolve",
    "ResolveOutcome",
    "RetentionStore",
    "Send",
    "Store",
    "StoreProbe",
    "StoreTx",
    "StoreUpkeep",
    "TraceStore",
    "TransactionEnd",
    "TransactionQuery",
    "TransactionStore",
    "Unit",
    "UnitRunner",
    "WriteRunner",
    "wrapped_like",
]
