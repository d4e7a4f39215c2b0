"""Long-poll wake-ups: a waiting receive wakes as soon as this broker stores a message in a topic
it consumes -- no polling of the store while nothing arrives.

:class:`ArrivalsStore` wraps the store every unit of work goes through and, once a write unit has
committed, announces the topics it appended to.  That covers sends, commits, delayed releases and
retry copies made by this broker; other brokers' messages are found by the receive's own bounded
re-check (``receive_poll_seconds``).

An announcement wakes one waiting receive per consumer group (per member of a broadcasting group,
which each get every message), not every waiting member: the members of a group compete for the
same messages, and waking them all for one send had all but one of them look in the store for
nothing.  A receive that takes as many messages as it asked for passes the wake-up on to the next
member waiting (there may be more); one that takes fewer leaves the others asleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

from broker_service.domain.messages.model import PendingMessage, PlainBatch
from broker_service.domain.ports import NonceKey, Store, StoreTx, wrapped_like

T = TypeVar("T")


class Arrivals:
    def __init__(self) -> None:
        # topic -> who competes for its messages (a group, or a broadcasting member) -> the
        # events of the receives waiting, oldest first
        self._waiting: dict[str, dict[str, list[asyncio.Event]]] = {}
        self.version = 0  # counts announcements
        # The version of each topic's last announcement: a receive that saw one of its topics
        # announced while it looked in the store looks again.
        self._announced: dict[str, int] = {}

    def announce(self, topics: Iterable[str]) -> None:
        """Messages arrived in ``topics``: wake one waiting receive of each competitor."""
        self.version += 1
        for topic in topics:
            self._announced[topic] = self.version
            for waiters in self._waiting.get(topic, {}).values():
                _wake_first(waiters)

    def pass_on(self, topics: Iterable[str], key: str) -> None:
        """The receive of ``key`` took all it could: wake the next one of ``key``, if any."""
        for topic in topics:
            waiters = self._waiting.get(topic, {}).get(key)
            if waiters and _wake_first(waiters):
                return

    async def wait(
        self, topics: Sequence[str], seconds: float, since_version: int, key: str
    ) -> None:
        """Until a message arrives in one of ``topics`` and this receive is the one of ``key``
        woken for it (or ``seconds`` pass).  Returns at once if anything was announced in
        ``topics`` since ``since_version``."""
        announced = self._announced
        if seconds <= 0 or any(announced.get(topic, 0) > since_version for topic in topics):
            return
        event = asyncio.Event()
        for topic in topics:
            self._waiting.setdefault(topic, {}).setdefault(key, []).append(event)
        try:
            async with asyncio.timeout(seconds):
                await event.wait()
        except asyncio.CancelledError:
            if event.is_set():  # woken, then gone before it looked: let another one look
                self._remove(topics, key, event)
                self.pass_on(topics, key)
            raise
        except TimeoutError:
            pass
        finally:
            self._remove(topics, key, event)

    def _remove(self, topics: Sequence[str], key: str, event: asyncio.Event) -> None:
        for topic in topics:
            by_key = self._waiting.get(topic)
            if by_key is None:
                continue
            waiters = by_key.get(key)
            if waiters is not None and event in waiters:
                waiters.remove(event)
                if not waiters:
                    del by_key[key]
                    if not by_key:
                        del self._waiting[topic]


def _wake_first(waiters: list[asyncio.Event]) -> bool:
    """Wake the oldest receive not woken yet; False if all are."""
    for event in waiters:
        if not event.is_set():
            event.set()
            return True
    return False


class _RecordingTx:
    """A StoreTx that notes the topics appended to (and passes everything on)."""

    __slots__ = ("_tx", "topics")

    def __init__(self, tx: StoreTx) -> None:
        self._tx = tx
        self.topics: set[str] = set()

    def append(self, message: PendingMessage) -> None:
        self.topics.add(message.topic)
        self._tx.append(message)

    def append_all(self, messages: Sequence[PendingMessage]) -> None:
        self.topics.update({message.topic for message in messages})
        self._tx.append_all(messages)

    def append_batch(self, batch: PlainBatch) -> None:
        self.topics.add(batch.topic)
        self._tx.append_batch(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)


class ArrivalsStore:
    """The store, announcing the topics of every committed write to :class:`Arrivals`."""

    def __init__(self, inner: Store, arrivals: Arrivals) -> None:
        self.inner = inner
        self.arrivals = arrivals

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def write(self, unit: Callable[[StoreTx], T], *, nonce: NonceKey | None = None) -> T:
        appended: set[str] = set()

        def recording(tx: StoreTx) -> T:
            recorder = _RecordingTx(tx)
            result = unit(cast(StoreTx, recorder))
            appended.clear()
            appended.update(recorder.topics)
            return result

        result = await self.inner.write(wrapped_like(unit, recording), nonce=nonce)
        if appended:
            self.arrivals.announce(appended)
        return result

    async def read(self, unit: Callable[[StoreTx], T]) -> T:
        return await self.inner.read(unit)
