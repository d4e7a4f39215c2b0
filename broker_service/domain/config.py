"""What the domain needs to know of the settings (built from them by the app factory)."""

from __future__ import annotations

from dataclasses import dataclass

from broker_service.settings import (
    DEFAULT_DELAY_LEVELS,
    DEFAULT_MAX_DELAY_SECONDS,
    parse_delay_levels,
)


@dataclass(frozen=True, slots=True)
class DomainConfig:
    auto_create_topics: bool = False
    default_topic_queues: int = 4
    max_message_bytes: int = 4 * 1024 * 1024
    delay_levels_ms: tuple[int, ...] = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    max_topic_queues: int = 1024
    transaction_timeout_ms: int = 6000
    max_delay_ms: int = DEFAULT_MAX_DELAY_SECONDS * 1000
