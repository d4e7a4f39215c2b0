"""The record of a broker sharing the store: who it is, where it listens, when it was last seen."""

from __future__ import annotations

from dataclasses import dataclass

# A broker is live while it was seen within this many of its beats: one late beat (a long
# collection, a slow commit) does not make it look gone.
LIVE_BEATS = 3


@dataclass(frozen=True, slots=True)
class BrokerPresence:
    """One broker's row: ``address`` is the ``host:port`` it listens on, ``store_kind`` the
    store's dialect (``sqlite`` or ``postgresql``), times in ms since the epoch;
    ``grpc_address`` the ``host:port`` of its RocketMQ 5 gRPC port, if it has one."""

    broker_id: str
    address: str
    version: str
    store_kind: str
    started_at: int
    last_seen_at: int
    grpc_address: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerSeen:
    """A broker as a reader sees it now: live, or how long ago it was last seen."""

    presence: BrokerPresence
    live: bool
    seen_ms_ago: int
