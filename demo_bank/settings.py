"""A bank service's settings (environment ``DEMO_BANK_<NAME>``, or ``python -m demo_bank`` flags)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

TOPIC = "transfers"
BOB_GROUP, SMITH_GROUP = "bob-bank", "smith-bank"


class BankSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DEMO_BANK_", extra="forbid")

    database_url: str = "sqlite:///./bank.db"
    broker: str = "http://127.0.0.1:9876"
    clients: Literal["halfmq", "rocketmq"] = Field(
        "halfmq", description="halfmq's framework (REST) or RocketMQ 5's Python client (gRPC)"
    )
    grpc_endpoint: str = Field(
        "127.0.0.1:8081", description="The broker's gRPC port (--clients rocketmq)"
    )
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    faults: bool = Field(False, description="Honour the demo's fault hooks (never in production)")
    flaky_percent: float = Field(0.0, ge=0, le=100, description="Smith: first deliveries failed")
    seed: int = 0
    heartbeat_interval: float = Field(1.0, gt=0)
    check_wait_seconds: float = Field(1.0, gt=0, description="Bob's long poll for checks")
    invisible_seconds: float = Field(3.0, gt=0, description="Smith's lease on a received message")
    max_reconsume_times: int = Field(3, ge=0, description="Smith's retries before the DLQ")
