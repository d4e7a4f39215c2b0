"""A signed request's nonce, remembered in the same store transaction as the request's effect.

The gate verifies a request's signature, then *binds* its nonce to the request's context
(:func:`bound`).  The first store write the request makes *takes* it (:func:`take`) and inserts
``(access_key, nonce)`` before running its unit, in the same transaction: the primary key refuses
a nonce any broker of the database committed before, and the unit is then answered
:class:`~broker_service.domain.errors.Replayed` without running.  So a write request takes effect
at most once per nonce, on every broker that shares the database, and replay protection costs one
insert inside a commit the request waits for anyway -- not a durable commit of its own.

A request that writes nothing (a read, a refusal before any write) has its nonce remembered by the
gate on its own just before the response starts; a replayed one then gets 401 instead, and one
whose nonce the store cannot remember (an outage) 503 ``STORE_UNAVAILABLE``: no response goes out
whose nonce is not stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass

from broker_service.domain.errors import Unauthenticated

NonceKey = tuple[str, str, int]  # (access_key, nonce, signed_at: the signed timestamp, ms)


@dataclass(slots=True)
class RequestNonce:
    access_key: str
    nonce: str
    signed_at: int
    taken: bool = False

    @property
    def key(self) -> NonceKey:
        return (self.access_key, self.nonce, self.signed_at)


_current: ContextVar[RequestNonce | None] = ContextVar("halfmq_request_nonce", default=None)


def bind(nonce: RequestNonce) -> Token[RequestNonce | None]:
    """From now on, until :func:`unbind`, the request's first store write remembers ``nonce``."""
    return _current.set(nonce)


def unbind(token: Token[RequestNonce | None]) -> None:
    _current.reset(token)


@contextmanager
def bound(nonce: RequestNonce) -> Iterator[RequestNonce]:
    """:func:`bind` for the length of a ``with`` block."""
    token = bind(nonce)
    try:
        yield nonce
    finally:
        unbind(token)


def take() -> NonceKey | None:
    """The current request's nonce, once: the first write to ask gets it, later ones ``None``."""
    nonce = _current.get()
    if nonce is None or nonce.taken:
        return None
    nonce.taken = True
    return nonce.key


def replayed_error(nonce: NonceKey | None) -> Unauthenticated:
    return Unauthenticated(
        "this request's nonce was already used: a replayed request is refused; sign each "
        "request with a new nonce",
        code="NONCE_REPLAYED",
        access_key=nonce[0] if nonce else None,
    )
