"""Consumer lag as the console shows it: the groups list from the backlog the metrics read, a
group's page from the group's view (``GET /v1/consumer-groups/{group}``'s) -- both by the domain's
one lag rule (``domain/consumers/backlog.py``).

What is the console's own: a store that cannot be read.  Then a lag is ``None`` -- "unknown" on
the page -- and the page still renders; never a guess, never a 0.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from broker_service.domain.consumers.service import ConsumerService
from broker_service.domain.errors import Busy, NotReady

log = logging.getLogger("halfmq.console")

# What the store says when it cannot answer a read (a failed statement, the store down or busy).
UNREADABLE = (NotReady, Busy)


@dataclass(frozen=True, slots=True)
class GroupBacklog:
    group: str
    lag: int  # its subscribed topics' queues, as halfmq_consumer_lag_messages
    retrying: int  # its retry topic's lag, as halfmq_retry_messages
    dead: int


async def backlogs(consumers: ConsumerService) -> list[GroupBacklog] | None:
    """Every group's lag, retry lag and dead letters (None: the store could not be read)."""
    try:
        found = await consumers.backlog()
    except UNREADABLE as error:
        log.warning("console: the consumer groups' backlog could not be read: %s", error.message)
        return None
    lags: dict[str, int] = {}
    for queue in found.lags:
        lags[queue.group] = lags.get(queue.group, 0) + queue.messages
    known = sorted(set(found.dead) | set(lags) | set(found.retrying))
    return [
        GroupBacklog(g, lags.get(g, 0), found.retrying.get(g, 0), found.dead.get(g, 0))
        for g in known
    ]
