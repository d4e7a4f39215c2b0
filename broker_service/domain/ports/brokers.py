"""The store's brokers role: one row per broker sharing the store
(:mod:`broker_service.domain.brokers`)."""

from __future__ import annotations

from typing import Protocol

from broker_service.domain.brokers.model import BrokerPresence


class BrokerStore(Protocol):
    def see_broker(self, presence: BrokerPresence) -> None:
        """Insert or replace the row of ``presence.broker_id`` (one statement)."""
        ...

    def forget_brokers(self, seen_before: int) -> int:
        """Delete the rows of brokers last seen before ``seen_before``; how many."""
        ...

    def list_brokers(self) -> list[BrokerPresence]: ...
