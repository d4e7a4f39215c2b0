"""Producer groups and check-back in the REST contract (docs/api.md): heartbeats, the checks a pull
instance takes, and a group's instances."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from broker_service.api.schemas.common import URL_PATTERN, Strict, Text

# -- heartbeats -----------------------------------------------------------------------------------


class HeartbeatIn(Strict):
    client_id: Annotated[Text, Field(min_length=1, max_length=255)]
    callback_url: Annotated[str, Field(max_length=2048, pattern=URL_PATTERN)] | None = Field(
        None, description="Where the broker POSTs check requests (push mode)"
    )
    topics: list[Annotated[Text, Field(max_length=255)]] = Field(
        default_factory=list, max_length=1000, description="Topics this instance produces to"
    )


class HeartbeatOut(BaseModel):
    producer_group: str
    client_id: str
    expires_in_seconds: float


# -- checks ---------------------------------------------------------------------------------------


class CheckOut(BaseModel):
    transaction_id: str
    producer_group: str
    msg_id: str
    topic: str
    tags: str | None = None
    keys: list[str] = Field(default_factory=list)
    body: str
    encoding: str
    properties: dict[str, str] = Field(default_factory=dict)
    check_times: int


class ChecksOut(BaseModel):
    checks: list[CheckOut]


class InstanceOut(BaseModel):
    client_id: str
    callback_url: str | None
    mode: str = Field(description="push (callback_url) or pull")
    topics: list[str]
    last_heartbeat_at: str
    live: bool
    reachable: bool = Field(
        description="False while a check that could not be delivered keeps it aside"
    )
    unreachable_until: str | None = None
    last_error: str | None = Field(None, description="Why a check last failed to reach it")
    last_error_at: str | None = None


class ProducerGroupOut(BaseModel):
    producer_group: str
    instances: list[InstanceOut]
