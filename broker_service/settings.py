"""Broker settings: one pydantic-settings model.

Each setting can be given as an environment variable ``HALFMQ_<NAME>``, a key of a config file (YAML,
TOML or JSON, ``--config``) or a ``halfmq broker serve --<name>`` flag; the flag wins over the file and
the file over the environment.  Nothing here is read at import time: entry points build the object.
"""

from __future__ import annotations

import json
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class Flush(StrEnum):
    """RocketMQ's flushDiskType: SYNC_FLUSH answers after the commit is on disk."""

    SYNC = "sync"
    ASYNC = "async"


def parse_delay_levels(spec: str) -> tuple[int, ...]:
    """Parse RocketMQ's ``messageDelayLevel`` string (``"1s 5s 10s ..."``) into milliseconds."""
    levels: list[int] = []
    for item in spec.split():
        for unit in ("ms", "s", "m", "h", "d"):
            number = item.removesuffix(unit)
            if number != item and number.replace(".", "", 1).isdigit():
                levels.append(int(float(number) * _UNITS_MS[unit]))
                break
        else:
            raise ValueError(f"bad delay level {item!r}: expected a number with ms, s, m, h or d")
    if not levels:
        raise ValueError("message_delay_level needs at least one level")
    return tuple(levels)


class BrokerSettings(BaseSettings):
    """Everything a broker process can be told."""

    model_config = SettingsConfigDict(env_prefix="HALFMQ_", extra="forbid")

    database_url: str = Field(
        "sqlite:///./halfmq.db",
        description="SQLAlchemy URL: sqlite:///path.db or postgresql+psycopg://user@host/db",
    )
    host: str = "127.0.0.1"
    port: int = Field(9876, ge=0, le=65535)
    broker_id: str = Field("", description="Name of this broker in logs, claims and traces")
    auto_create_topics: bool = False
    default_topic_queues: int = Field(4, ge=1, le=1024)
    max_message_bytes: int = Field(4 * 1024 * 1024, ge=1)
    flush: Flush = Flush.SYNC
    retention_hours: float = Field(48, gt=0)
    transaction_timeout_seconds: float = Field(6, ge=0)
    transaction_check_interval_seconds: float = Field(30, gt=0)
    transaction_check_max: int = Field(15, ge=1)
    producer_expiry_seconds: float = Field(120, gt=0)
    check_timeout_seconds: float = Field(
        3, gt=0, description="How long a push check waits for the producer's answer"
    )
    check_round_max: int = Field(
        10_000, ge=1, description="Most due halves one check round handles (the rest wait a round)"
    )
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    max_reconsume_times: int = Field(16, ge=0)
    scheduler: bool = Field(True, description="Run the background schedulers in this process")
    write_batch_max: int = Field(512, ge=1, description="Most requests one store commit carries")
    write_queue_max: int = Field(
        20_000, ge=1, description="Requests waiting for a store commit beyond which sends get 429"
    )
    pool_size: int = Field(8, ge=1, description="Store connections for reads")
    log_level: str = "info"
    opentelemetry: bool = Field(
        False,
        description="FastAPI's native OpenTelemetry spans and metrics for every request, to the "
        "globally configured providers (off: not even checked per request)",
    )
    auto_create_groups: bool = Field(
        True,
        description="Create a consumer group on its first subscription (RocketMQ's "
        "autoCreateSubscriptionGroup)",
    )
    receive_max_wait_seconds: float = Field(
        30, ge=0, description="Longest long poll of a receive (a longer wait_seconds is cut)"
    )
    receive_poll_seconds: float = Field(
        0.5,
        gt=0,
        description="How often a waiting receive looks at the store for other brokers' messages",
    )
    consumer_expiry_seconds: float = Field(
        120, gt=0, description="A consumer member is live while it received this recently"
    )

    @field_validator("database_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if value.strip() in ("sqlite://", "sqlite:///:memory:", "sqlite:///"):
            raise ValueError(
                "a private in-memory SQLite database cannot be shared by the broker's reader and "
                "writer connections: use a file (sqlite:///path.db) or a shared-cache URI "
                "(sqlite:///file:NAME?mode=memory&cache=shared&uri=true)"
            )
        return value

    @field_validator("message_delay_level")
    @classmethod
    def _check_levels(cls, value: str) -> str:
        parse_delay_levels(value)
        return value

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.message_delay_level)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def read_config_file(path: Path) -> dict[str, Any]:
    """Load a config file of settings keys (``.yaml``/``.yml``, ``.toml`` or ``.json``)."""
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    data: Any
    if suffix in (".yaml", ".yml"):
        data = yaml.safe_load(text) or {}
    elif suffix == ".toml":
        data = tomllib.loads(text)
        data = data.get("halfmq", data)
    elif suffix == ".json":
        data = json.loads(text)
    else:
        raise ValueError(f"config file {path} must end in .yaml, .yml, .toml or .json")
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of settings")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def load_settings(
    config_file: Path | None = None, overrides: dict[str, Any] | None = None
) -> BrokerSettings:
    """Environment, then the config file, then explicit overrides (flags) -- later wins."""
    values: dict[str, Any] = {}
    if config_file is not None:
        values.update(read_config_file(config_file))
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return BrokerSettings(**values)
