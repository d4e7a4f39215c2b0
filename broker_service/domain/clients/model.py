"""The record of a client known by its id across brokers and restarts."""

from __future__ import annotations

from dataclasses import dataclass

# A client not heard of for a day is forgotten (its producer and consumer rows have their own
# expiry): the table holds the clients of about a day, not of the store's whole life.
FORGET_AFTER_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class ClientProfile:
    """A RocketMQ 5 client as it last described itself: ``language`` and ``version`` from its
    user agent (``PYTHON`` ``5.1.2``), the access key its stream was signed with (None with the
    ACL off), and ``settings``: the Settings it wrote, in the protocol's own encoding, which the
    domain keeps without reading."""

    client_id: str
    language: str
    version: str
    access_key: str | None
    settings: bytes
    updated_at: int

    @property
    def agent(self) -> str:
        """How the console and the trace name it: ``PYTHON 5.1.2``."""
        return f"{self.language} {self.version}".strip()
