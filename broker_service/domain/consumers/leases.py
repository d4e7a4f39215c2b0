"""Leases: the in-flight deliveries behind receipt handles.  An ack ends them (a stale handle acks
nothing), change-invisible renews one under a new handle; and this broker keeps track of when the
next lease of a group falls due, so that a receive skips looking for due ones until then."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from broker_service.domain import names
from broker_service.domain.consumers.groups import Groups, get_group
from broker_service.domain.consumers.model import (
    AckResult,
    ConsumerGroup,
    Delivery,
    DeliveryState,
)
from broker_service.domain.errors import Conflict, NotFound
from broker_service.domain.ids import new_id
from broker_service.domain.ports import DeliveryStore, StoreTx

ProgressKey = tuple[str, str, int, str]
# How long a receive trusts that no delivery falls due without looking again (see lease_ends).
_DUE_RECHECK_MS = 200


class Leases:
    def __init__(self, groups: Groups) -> None:
        self.groups = groups
        # Per group: the time before which none of its open deliveries falls due, as far as this
        # broker knows.  Learnt when a look for due deliveries found none (the store's next due
        # time, at most _DUE_RECHECK_MS ahead), lowered by every lease this broker hands out or
        # moves; until then a receive skips the look (a round trip).  A lease another broker
        # sharing the store hands out is seen at the next look, at most _DUE_RECHECK_MS later.
        self._quiet_until: dict[str, int] = {}

    def lease_ends(self, group: str, at: int) -> None:
        """A delivery of ``group`` falls due at ``at`` (a lease handed out, changed, retried)."""
        if at < self._quiet_until.get(group, at):
            self._quiet_until[group] = at

    def none_due(self, group: str, now: int) -> bool:
        """Whether, as far as this broker knows, no delivery of ``group`` is due at ``now``."""
        quiet = self._quiet_until.get(group, 0)
        return now < quiet <= now + _DUE_RECHECK_MS  # (a clock set back: look)

    def found_none_due(self, group: str, now: int, next_due: int | None) -> None:
        """A look found no delivery of ``group`` due; the store's next due time is ``next_due``."""
        horizon = now + _DUE_RECHECK_MS
        self._quiet_until[group] = horizon if next_due is None else min(next_due, horizon)

    # -- units of work ----------------------------------------------------------------------------

    def ack(self, group_name: str, handles: Sequence[str]) -> Callable[[StoreTx], AckResult]:
        names.check_name(group_name, "consumer group")
        wanted = list(dict.fromkeys(handles))

        def unit(tx: StoreTx) -> AckResult:
            group, _ = self.groups.group_of(tx, group_name)
            now = self.groups.clock()
            done = tx.finish_deliveries(group.name, wanted, DeliveryState.ACKED, now)
            tx.advance_committed([progress_key(group, x) for x in done], now)
            acked = {x.receipt_handle for x in done}
            freed = tuple({x.topic for x in done}) if group.orderly else ()
            return AckResult(len(acked), [h for h in wanted if h not in acked], freed)

        return unit

    def change_invisible(
        self, group_name: str, handle: str, invisible_ms: int
    ) -> Callable[[StoreTx], Delivery]:
        names.check_name(group_name, "consumer group")

        def unit(tx: StoreTx) -> Delivery:
            group = get_group(tx, group_name)
            now = self.groups.clock()
            delivery = live_delivery(tx, group, handle, now)
            until = now + invisible_ms
            self.lease_ends(group.name, until)
            renewed = replace(delivery, receipt_handle=new_id(), invisible_until=until)
            if not tx.set_delivery(delivery, renewed):
                raise stale(handle)
            return renewed

        return unit


def progress_key(group: ConsumerGroup, delivery: Delivery) -> ProgressKey:
    """The progress a delivery holds back: its member's (broadcasting) or the group's."""
    client = delivery.client_id if group.broadcasting else ""
    return (group.name, delivery.topic, delivery.queue_id, client)


def stale(handle: str) -> Conflict:
    return Conflict(
        "the receipt handle is stale: its invisibility ran out (or it was acked, nacked or "
        "renewed); the message comes again",
        code="RECEIPT_HANDLE_EXPIRED",
        receipt_handle=handle,
    )


def live_delivery(tx: DeliveryStore, group: ConsumerGroup, handle: str, now: int) -> Delivery:
    """The in-flight delivery behind a handle, still inside its invisibility."""
    delivery = tx.get_delivery(group.name, handle)
    if delivery is None:
        raise NotFound(
            f"receipt handle {handle!r} is unknown in consumer group {group.name!r}",
            code="RECEIPT_HANDLE_NOT_FOUND",
            receipt_handle=handle,
        )
    if delivery.state is not DeliveryState.INFLIGHT or delivery.invisible_until <= now:
        raise stale(handle)
    return delivery
