"""Requests of many items answered one by one: ``POST /v1/transactions:batch``, ``POST
/v1/transactions/decisions:batch``, ``POST /v1/messages:batch``.

Each item goes to the domain exactly as it would alone -- the same service call, so its own unit of
work with its own checks -- and the items are awaited together (``asyncio.gather``): their units
reach the store's writer in one go, its group commit takes them into one transaction, and a unit
that fails is dropped from that transaction on its own (``writer.py``).  So one item's error (an
unknown topic, a message over the limit, a permission the account lacks, a conflict) is that item's
answer, and its neighbours are stored.  An item's answer is its status and what the single route
would answer: ``{"status": 201, "result": {...}}`` or ``{"status": 404, "error": {...}}``.

**The request's nonce** (ACL on) is taken and remembered once, on its own, *before* any item is
sent to the store (:meth:`AclRuntime.remember_nonce`, as the gate does for a request that writes
nothing), and the items then go without it: each hands the service the request's nonce, taken
already, so that its write carries none.  A replayed request is so refused 401 ``NONCE_REPLAYED`` whole, and
none of its items runs again: the request takes effect at most once.  Letting the first item's
write take the nonce instead (as a single route does) would not do: the other items, sent with
it, would run whether or not the nonce had been seen.  It costs a signed batch one group commit
more than an unsigned one -- the nonce's, then the items' -- which the batch's items share.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import Request

from broker_service.api.deps import nonce_of
from broker_service.api.errors import error_item, internal_item
from broker_service.domain.errors import DomainError
from broker_service.domain.ports import nonces

log = logging.getLogger("halfmq.api")

Item = Callable[[], Awaitable[dict[str, Any]]]
"""One item's work: ``{"status", "result"}``, or it raises a :class:`DomainError`."""


async def answer_each(request: Request, items: Sequence[Item]) -> list[dict[str, Any]]:
    """Every item's answer, in order; raises only for the request as a whole (a replay, a store
    that cannot remember the nonce)."""
    nonce = nonces.take(nonce_of(request))  # None without the ACL; taken: no item's write takes it
    if nonce is not None and not await request.app.state.acl.remember_nonce(nonce):
        raise nonces.replayed_error(nonce)
    return list(await asyncio.gather(*(_answer(item) for item in items)))


async def _answer(item: Item) -> dict[str, Any]:
    try:
        return await item()
    except DomainError as error:
        return error_item(error)
    except Exception:
        log.exception("unexpected error in an item of a request answered item by item")
        return internal_item()
