"""A signed request's nonce, remembered in the same store transaction as the request's effect.

The nonce is a value handed down, never a global.  The adapter that verified the request's
signature (the REST API's ACL gate) builds one :class:`RequestNonce` for the request and leaves it
on the request (``request.state.nonce``); the route hands it to the domain service it calls
(``nonce=``); the service hands each of its store writes what :func:`take` answers, which is the
nonce's key for the request's first write and ``None`` after: a command's ``nonce`` field
(``Send``, ``Half``, ``Resolve``, taken once their checks have passed), a bare function's
``Store.write(unit, nonce=nonces.take(nonce))`` (``UnitRunner.run`` alike)::

    gate: RequestNonce(access_key, nonce, signed_at)       the request's record, not yet taken
      -> route: service.send(topic, drafts, nonce=request's)
        -> service: store.write(unit, nonce=nonces.take(nonce))   the first write takes the key
          -> store: the key inserted, then the unit, in one transaction

The store inserts ``(access_key, nonce, signed_at)`` before running the unit, in the same
transaction: the primary key refuses a nonce any broker of the database committed before, and the
unit is then answered :func:`replayed_error` (401 ``NONCE_REPLAYED``) without running.  A later
write of the same request gets ``None`` and carries nothing.  So a write request takes effect at
most once per nonce, on every broker that shares the database, and replay protection costs one
insert inside a commit the request waits for anyway -- not a durable commit of its own.  The store
knows nothing of the ACL: it is handed a key to remember.

A request that writes nothing (a read, a refusal before any write) leaves it untaken; the gate
then remembers it on its own just before the response starts, and a replayed one gets 401 instead,
one whose nonce the store cannot remember (an outage) 503 ``STORE_UNAVAILABLE``: no response goes
out whose nonce is not stored.  A request of many items takes it before any item runs and
remembers it on its own (``api/items.py``), so that no item's write carries it.

Without the ACL, or for a caller that signs no request (the schedulers, the console's session,
the gRPC adapter, whose signature has no nonce), the nonce is ``None`` and nothing is remembered.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_service.domain.errors import Unauthenticated

NonceKey = tuple[str, str, int]  # (access_key, nonce, signed_at: the signed timestamp, ms)


@dataclass(slots=True)
class RequestNonce:
    """One signed request's nonce, and whether a write (or the gate) has taken it yet."""

    access_key: str
    nonce: str
    signed_at: int
    taken: bool = False

    @property
    def key(self) -> NonceKey:
        return (self.access_key, self.nonce, self.signed_at)

    def take(self) -> NonceKey | None:
        """The key, once: the first to ask gets it, to remember; later ones ``None``."""
        if self.taken:
            return None
        self.taken = True
        return self.key


def take(nonce: RequestNonce | None) -> NonceKey | None:
    """What a store write remembers with its unit: ``nonce``'s key unless it is taken (or none)."""
    return None if nonce is None else nonce.take()


def replayed_error(nonce: NonceKey | None) -> Unauthenticated:
    return Unauthenticated(
        "this request's nonce was already used: a replayed request is refused; sign each "
        "request with a new nonce",
        code="NONCE_REPLAYED",
        access_key=nonce[0] if nonce else None,
    )
