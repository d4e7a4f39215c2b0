"""The store's administration of the REST contract (docs/api.md, "Store"): what the store holds,
and a purge round on request (retention, docs/store.md)."""

from __future__ import annotations

from pydantic import BaseModel, Field, StrictBool

from broker_service.api.schemas.common import Strict


class RetentionOut(BaseModel):
    """The broker's retention settings."""

    retention_hours: float
    dead_letter_retention_hours: float
    hard_limit_hours: float | None = Field(
        description="retention_hard_limit_hours; null: an unconsumed message is kept until consumed"
    )
    wait_for_export: bool


class StoreStatsOut(BaseModel):
    dialect: str = Field(examples=["sqlite", "postgresql"])
    size_bytes: int = Field(description="Tables and indexes (SQLite: the file)")
    free_bytes: int = Field(description="Pages SQLite keeps free for new rows; 0 on PostgreSQL")
    rows: dict[str, int] = Field(description="Rows per table the purge deletes from")
    oldest_message_at: str | None = Field(
        description="When the oldest message still stored in a user, retry or DLQ topic was "
        "stored (RFC 3339); null when there is none"
    )
    oldest_message_age_seconds: float | None
    export_watermark: str | None = Field(
        description="How far the reconciliation export has read (RFC 3339); null: never ran"
    )
    expired: dict[str, int] = Field(
        description="Per consumer group: messages retention purged before the group passed them"
    )
    retention: RetentionOut


class PurgeIn(Strict):
    dry_run: StrictBool = Field(
        True, description="Only report what would go (the default); false purges"
    )


class ExpiryOut(BaseModel):
    """Messages purged (or, dry, to be purged) before a group or member passed them."""

    group: str
    client_id: str = Field(description="A broadcasting member; '' for the group")
    topic: str
    queue_id: int
    count: int


class HeldOut(BaseModel):
    """A queue whose old messages a group keeps: it has not passed ``offset``."""

    topic: str
    queue_id: int
    group: str
    client_id: str = Field(description="A broadcasting member; '' for the group")
    offset: int


class PurgeOut(BaseModel):
    dry_run: bool
    purged: dict[str, int] = Field(description="Rows deleted (dry: that would be), per table")
    expired: list[ExpiryOut]
    held: list[HeldOut] = Field(description="At most 100")
    complete: bool = Field(description="false: the round stopped at its row limit; run it again")
    export_held: bool = Field(
        description="The export watermark held rows back (retention_wait_for_export)"
    )
    seconds: float
