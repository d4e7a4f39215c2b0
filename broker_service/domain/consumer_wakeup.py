"""Long-poll wake-ups: a waiting receive wakes as soon as this broker stores a message in a topic
it consumes -- no polling of the store while nothing arrives.

:class:`ArrivalsStore` wraps the store every unit of work goes through and, once a write unit has
committed, announces the topics it appended to.  That covers sends, commits, delayed releases and
retry copies made by this broker; other brokers' messages are found by the receive's own bounded
re-check (``receive_poll_seconds``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

from broker_service.domain.model import PendingMessage
from broker_service.domain.ports import Store, StoreTx

T = TypeVar("T")


class Arrivals:
    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self.version = 0  # counts announcements: a receive that saw it change looks again

    def announce(self, topics: Iterable[str]) -> None:
        self.version += 1
        for topic in topics:
            for event in self._waiting.get(topic, ()):
                event.set()

    async def wait(self, topics: Sequence[str], seconds: float, since_version: int) -> None:
        """Until a message arrives in one of ``topics`` (or ``seconds`` pass).  Returns at
        once if anything was announced since ``since_version``."""
        if self.version != since_version or seconds <= 0:
            return
        event = asyncio.Event()
        for topic in topics:
            self._waiting.setdefault(topic, set()).add(event)
        try:
            await asyncio.wait_for(event.wait(), seconds)
        except TimeoutError:
            pass
        finally:
            for topic in topics:
                waiters = self._waiting.get(topic)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiting[topic]


class _RecordingTx:
    """A StoreTx that notes the topics appended to (and passes everything on)."""

    __slots__ = ("_tx", "topics")

    def __init__(self, tx: StoreTx) -> None:
        self._tx = tx
        self.topics: set[str] = set()

    def append(self, message: PendingMessage) -> None:
        self.topics.add(message.topic)
        self._tx.append(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)


class ArrivalsStore:
    """The store, announcing the topics of every committed write to :class:`Arrivals`."""

    def __init__(self, inner: Store, arrivals: Arrivals) -> None:
        self.inner = inner
        self.arrivals = arrivals

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def write(self, unit: Callable[[StoreTx], T], *, read_ahead: Sequence[str] = ()) -> T:
        appended: set[str] = set()

        def recording(tx: StoreTx) -> T:
            recorder = _RecordingTx(tx)
            result = unit(cast(StoreTx, recorder))
            appended.clear()
            appended.update(recorder.topics)
            return result

        result = await self.inner.write(recording, read_ahead=read_ahead)
        if appended:
            self.arrivals.announce(appended)
        return result

    async def read(self, unit: Callable[[StoreTx], T]) -> T:
        return await self.inner.read(unit)
