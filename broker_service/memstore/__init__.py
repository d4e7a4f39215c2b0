"""The in-memory store: every port of :mod:`broker_service.domain.ports` on Python data
structures, for the domain's unit tests (no database, no file) and as a second backend's proof
that the ports are all a store needs to be.  docs/memstore.md says what it is for and what it
does not do.

Its modules, one part of ``MemoryTx`` per role as ``SqlTx`` has:

* ``state``: the tables (one dict per table of the SQL schema) and the undo log;
* ``messages``: topics, queues, appending and reading messages, delayed messages;
* ``transactions``, ``checks``: the halves' index and their decision; check-back claims;
* ``deliveries``, ``consumers``: leases, retry and dead-letter copies, the trace; groups and
  their progress;
* ``retention``: the purge's reads and bounded deletes, purged ids, statistics;
* ``admin``: nonces and ACL versions, the audit log, brokers, clients, break statuses;
* ``tx``: ``MemoryTx``, every role on the state, with an undo log per unit;
* ``store``: ``MemoryStore``, which runs units one at a time; the probe.

Standard library and the domain only: no I/O library, no thread.
"""

from broker_service.memstore.store import MemoryStore
from broker_service.memstore.tx import MemoryTx

__all__ = ["MemoryStore", "MemoryTx"]
