"""Pull-mode check-back: the long-polls of pull instances on this broker, woken when checks are
assigned to them.  (Long-polls on other brokers find their checks in the store on their next look.)"""

from __future__ import annotations

import asyncio
from collections import defaultdict


class PullHub:
    def __init__(self) -> None:
        self._events: dict[tuple[str, str], asyncio.Event] = defaultdict(asyncio.Event)

    def event(self, group: str, client_id: str) -> asyncio.Event:
        return self._events[(group, client_id)]

    def notify(self, group: str, client_id: str) -> None:
        event = self._events.get((group, client_id))
        if event is not None:
            event.set()

    def release(self, group: str, client_id: str) -> None:
        self._events.pop((group, client_id), None)
