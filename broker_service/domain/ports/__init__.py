"""The one interface between the domain and the store, split by role: a second backend's checklist.

========================  =================================================================
:class:`MessageStore`     topics, queues, appending and reading messages, delayed messages
:class:`TransactionStore` the index of half messages and their one decision
:class:`CheckStore`       producer instances, check-back claims and assignments
:class:`ConsumerStore`    consumer groups, progress per queue, deliveries, the trace
:class:`AdminStore`       the ACL's nonces and published versions
:class:`RetentionStore`   the purge: queue heads, readers' positions, bounded deletes
:class:`AuditStore`       the console's audit log of operator actions
:class:`BrokerStore`      the brokers sharing the store, each seen at its beats
:class:`ClientStore`      the RocketMQ 5 clients' profiles and last settings
========================  =================================================================

A unit of work receives a :class:`StoreTx`, the union of the roles; :class:`Store` runs units
(see :mod:`broker_service.domain.ports.store`).
"""

from broker_service.domain.ports.admin import AdminStore
from broker_service.domain.ports.audit import AuditStore
from broker_service.domain.ports.brokers import BrokerStore
from broker_service.domain.ports.checks import CheckStore
from broker_service.domain.ports.clients import ClientStore
from broker_service.domain.ports.consumers import ConsumerStore
from broker_service.domain.ports.messages import MessageQuery, MessageStore
from broker_service.domain.ports.retention import RetentionStore, StoreUpkeep
from broker_service.domain.ports.store import (
    Readiness,
    SendUnit,
    Store,
    StoreProbe,
    StoreTx,
    TransactionUnit,
    UnitRunner,
    dedup_keys_of,
    transactions_of,
    wrapped_like,
)
from broker_service.domain.ports.transactions import ResolveOutcome, TransactionStore

__all__ = [
    "AdminStore",
    "AuditStore",
    "BrokerStore",
    "CheckStore",
    "ClientStore",
    "ConsumerStore",
    "MessageQuery",
    "MessageStore",
    "Readiness",
    "ResolveOutcome",
    "RetentionStore",
    "SendUnit",
    "Store",
    "StoreProbe",
    "StoreTx",
    "StoreUpkeep",
    "TransactionStore",
    "TransactionUnit",
    "UnitRunner",
    "dedup_keys_of",
    "transactions_of",
    "wrapped_like",
]
