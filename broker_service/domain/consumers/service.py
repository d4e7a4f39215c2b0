"""``ConsumerService``: the consumer use cases, each one unit of work on the store, and the long
poll of ``receive`` (woken by :class:`~broker_service.domain.consumers.wakeup.Arrivals`)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass

from broker_service.domain.clock import now_ms
from broker_service.domain.config import ConsumerConfig
from broker_service.domain.consumers.admin import ConsumerAdmin, OffsetReset
from broker_service.domain.consumers.backlog import Backlog, backlog
from broker_service.domain.consumers.groups import GroupCreated, Groups, Subscribed
from broker_service.domain.consumers.leases import Leases
from broker_service.domain.consumers.model import (
    AckResult,
    ConsumerGroup,
    DeadMessage,
    Delivered,
    Delivery,
    GroupView,
    NackResult,
    Receiving,
)
from broker_service.domain.consumers.receive import Receiver, ReceiveResult
from broker_service.domain.consumers.retry import Retries
from broker_service.domain.consumers.trace import (
    ClientTraceAnswer,
    ClientTraceRecord,
    MayReport,
    TraceEvent,
    record_client_trace,
    trace,
)
from broker_service.domain.consumers.wakeup import Arrivals
from broker_service.domain.errors import InvalidRequest
from broker_service.domain.messages.model import MayRead, topic_of
from broker_service.domain.ports import (
    RequestNonce,
    Store,
    StoreTx,
    UnitRunner,
    WriteRunner,
    nonces,
)

_TOUCH_EVERY_MS = 5_000  # a member's liveness is written at most this often per broker


@dataclass(eq=False)
class ConsumerService:
    store: Store
    config: ConsumerConfig
    arrivals: Arrivals
    _: KW_ONLY
    poll_seconds: float = 0.5
    max_wait_seconds: float = 30.0
    clock: Callable[[], int] = now_ms
    runner: UnitRunner | None = None

    def __post_init__(self) -> None:
        # Consumer units claim side by side where the store can (``runner``), else they are writes.
        self.claims: UnitRunner = WriteRunner(self.store) if self.runner is None else self.runner
        self.groups = Groups(self.config, self.clock)
        self.leases = Leases(self.groups)
        self.receiver = Receiver(self.groups, self.leases)
        self.retries = Retries(self.groups, self.leases)
        self.admin = ConsumerAdmin(self.groups)
        self._touched: dict[tuple[str, str], int] = {}

    # -- groups -----------------------------------------------------------------------------------

    async def create_group(
        self, group: ConsumerGroup, *, nonce: RequestNonce | None = None
    ) -> GroupCreated:
        return await self.store.write(self.groups.create_group(group), nonce=nonces.take(nonce))

    async def subscribe(
        self, group: str, topic: str, expression: str, *, nonce: RequestNonce | None = None
    ) -> Subscribed:
        unit = self.groups.subscribe(group, topic, expression)
        return await self.store.write(unit, nonce=nonces.take(nonce))

    async def view(self, group: str) -> GroupView:
        return await self.store.read(self.admin.view(group))

    async def reset_offset(
        self, group: str, topic: str, timestamp: int, *, nonce: RequestNonce | None = None
    ) -> OffsetReset:
        unit = self.admin.reset_offset(group, topic, timestamp)
        return await self.store.write(unit, nonce=nonces.take(nonce))

    async def backlog(self) -> Backlog:
        """Every group's lag, retry and DLQ depth (the metrics' scrape-time read, and the
        console's groups list)."""
        return await self.store.read(backlog(self.clock, self.config.consumer_expiry_ms))

    # -- receive and acks -------------------------------------------------------------------------

    async def receive(
        self, receiving: Receiving, *, nonce: RequestNonce | None = None
    ) -> list[Delivered]:
        """Messages for this member: at once if any is deliverable, else as soon as one is (up to
        ``receiving.wait_seconds``), else none.  ``nonce``: the signed request's
        (:mod:`broker_service.domain.ports.nonces`), taken by the first of its claims."""
        ask = self._asking(receiving)

        async def claim() -> ReceiveResult:
            return await self.claims.run_lease(ask(), nonce=nonces.take(nonce))

        return await self._long_poll(claim, receiving.max_messages, receiving.wait_seconds)

    async def ack_and_receive(
        self, handles: Sequence[str], receiving: Receiving, *, nonce: RequestNonce | None = None
    ) -> tuple[AckResult, list[Delivered]]:
        """:meth:`ack` (of ``handles``, in ``receiving.group``) then :meth:`receive`, for a member
        that acks what it handled as it asks for more: the ack and the first look for messages
        are one durable unit (one commit: the ack is durable once answered, and an error undoes
        both); the long poll, if it waits, goes on as a receive's does."""
        group, topic = receiving.group, receiving.topic
        ask = self._asking(receiving)
        ack = self.leases.ack(group, handles)
        acked: AckResult | None = None

        async def claim() -> ReceiveResult:
            nonlocal acked
            if acked is not None:
                return await self.claims.run_lease(ask(), nonce=nonces.take(nonce))
            receive = ask()

            def both(tx: StoreTx) -> tuple[AckResult, ReceiveResult]:
                self.receiver.subscriptions_of(tx, group, topic)  # refused before the ack writes
                return ack(tx), receive(tx)

            first, result = await self.claims.run(both, nonce=nonces.take(nonce))
            if first.freed_topics:  # an orderly queue may hand out its next message now
                self.arrivals.announce(first.freed_topics)
            acked = first
            return result

        delivered = await self._long_poll(claim, receiving.max_messages, receiving.wait_seconds)
        assert acked is not None
        return acked, delivered

    def _asking(self, receiving: Receiving) -> Callable[[], Callable[[StoreTx], ReceiveResult]]:
        """The receive units of one request's long poll, one per look (each may touch the
        member's liveness)."""
        if receiving.invisible_seconds <= 0:
            raise InvalidRequest(
                "invisible_seconds must be more than 0", code="INVALID_INVISIBLE_TIME"
            )

        def ask() -> Callable[[StoreTx], ReceiveResult]:
            touch = self._touch(receiving.group, receiving.client_id)
            return self.receiver.receive(receiving, touch)

        return ask

    async def _long_poll(
        self, claim: Callable[[], Awaitable[ReceiveResult]], max_messages: int, wait_seconds: float
    ) -> list[Delivered]:
        """Claim at once; while nothing came and ``wait_seconds`` lasts, claim again as soon as
        something may have arrived (:class:`Arrivals`), or every ``poll_seconds``."""
        deadline = time.monotonic() + min(wait_seconds, self.max_wait_seconds)
        while True:
            version = self.arrivals.version
            result = await claim()
            if len(result.delivered) >= max_messages:  # there may be more: wake another member
                self.arrivals.pass_on(result.topics, result.competitor)
            remaining = deadline - time.monotonic()
            if result.delivered or remaining <= 0:
                return result.delivered
            pause = min(remaining, self.poll_seconds)
            if result.next_due_at is not None:
                pause = min(pause, max(0.0, (result.next_due_at - self.clock()) / 1000) + 0.002)
            await self.arrivals.wait(result.topics, pause, version, result.competitor)

    def _touch(self, group: str, client_id: str) -> bool:
        now = self.clock()
        key = (group, client_id)
        if now - self._touched.get(key, 0) < _TOUCH_EVERY_MS:
            return False
        if len(self._touched) > 100_000:
            self._touched.clear()
        self._touched[key] = now
        return True

    async def ack(
        self, group: str, handles: Sequence[str], *, nonce: RequestNonce | None = None
    ) -> AckResult:
        result = await self.claims.run(self.leases.ack(group, handles), nonce=nonces.take(nonce))
        if result.freed_topics:  # an orderly queue may hand out its next message now
            self.arrivals.announce(result.freed_topics)
        return result

    async def nack(
        self, group: str, handle: str, delay_level: int | None, *, nonce: RequestNonce | None = None
    ) -> NackResult:
        return await self.claims.run(
            self.retries.nack(group, handle, delay_level), nonce=nonces.take(nonce)
        )

    async def change_invisible(
        self,
        group: str,
        handle: str,
        invisible_seconds: float,
        *,
        nonce: RequestNonce | None = None,
    ) -> Delivery:
        if invisible_seconds <= 0:
            raise InvalidRequest(
                "invisible_seconds must be more than 0", code="INVALID_INVISIBLE_TIME"
            )
        unit = self.leases.change_invisible(group, handle, int(invisible_seconds * 1000))
        return await self.claims.run_lease(unit, nonce=nonces.take(nonce))

    # -- dead letters -----------------------------------------------------------------------------

    async def dead_messages(
        self, group: str, limit: int, may_read: MayRead | None = None
    ) -> list[DeadMessage]:
        """The group's dead letters, each only if ``may_read`` the topic it was sent to."""
        dead = await self.store.read(self.retries.dead_messages(group, limit))
        if may_read is None:
            return dead
        return [d for d in dead if (t := topic_of(d.message)) is not None and may_read(t)]

    async def resend(
        self, group: str, msg_id: str, *, nonce: RequestNonce | None = None
    ) -> DeadMessage:
        return await self.store.write(self.retries.resend(group, msg_id), nonce=nonces.take(nonce))

    # -- trace ------------------------------------------------------------------------------------

    async def trace(self, msg_id: str) -> list[TraceEvent]:
        return await self.store.read(trace(msg_id, self.config.broker_id))

    async def record_client_trace(
        self,
        records: Sequence[ClientTraceRecord],
        may_report: MayReport | None = None,
        *,
        nonce: RequestNonce | None = None,
    ) -> ClientTraceAnswer:
        """The framework's reports (``POST /v1/trace``); nothing while ``trace`` is off."""
        enabled = self.config.trace
        return await record_client_trace(
            self.store, records, may_report, enabled=enabled, nonce=nonce
        )
