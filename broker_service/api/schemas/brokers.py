"""The brokers sharing the store, in the REST contract (docs/api.md, "Brokers")."""

from __future__ import annotations

from pydantic import BaseModel, Field


class BrokerOut(BaseModel):
    broker_id: str
    address: str = Field(description="host:port the broker listens on")
    version: str
    store: str = Field(examples=["sqlite", "postgresql"])
    started_at: str
    last_seen_at: str
    seen_seconds_ago: float = Field(description="How long ago its last beat was, by this broker")
    live: bool = Field(description="Seen within three beats (broker_beat_seconds)")


class BrokersOut(BaseModel):
    brokers: list[BrokerOut] = Field(description="The live ones first, then the last seen first")
    beat_seconds: float = Field(description="This broker's broker_beat_seconds")
