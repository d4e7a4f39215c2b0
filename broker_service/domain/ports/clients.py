"""The store's clients role: the RocketMQ 5 clients' profiles (:mod:`broker_service.domain.clients`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from broker_service.domain.clients.model import ClientProfile


class ClientStore(Protocol):
    def save_client(self, profile: ClientProfile) -> None:
        """Insert or replace the profile of ``profile.client_id`` (one statement)."""
        ...

    def get_clients(self, client_ids: Sequence[str]) -> dict[str, ClientProfile]:
        """The profiles of those ids that are known, by id."""
        ...

    def forget_clients(self, seen_before: int) -> int:
        """Delete the profiles last updated before ``seen_before``; how many."""
        ...
