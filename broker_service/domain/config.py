"""What the domain needs to know of the settings: plain values, which ``BrokerSettings`` turns its
fields into (``domain_config()``, ``check_policy()``, ``consumer_config()``)."""

from __future__ import annotations

from dataclasses import dataclass

# The delay levels' one default, the contract's (halfmq_wire/delays.py): delayed sends and the
# consumers' retries wait the same schedule.
from halfmq_wire.delays import DEFAULT_DELAY_LEVELS as DEFAULT_DELAY_LEVELS

# RocketMQ 5's timerMaxDelaySec: a timer (deliver_at) message is at most 3 days away.
DEFAULT_MAX_DELAY_SECONDS = 3 * 24 * 3600

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


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


DEFAULT_DELAY_LEVELS_MS = parse_delay_levels(DEFAULT_DELAY_LEVELS)


@dataclass(frozen=True, slots=True)
class DomainConfig:
    """Topics, sending and half messages."""

    auto_create_topics: bool = False
    default_topic_queues: int = 4
    max_message_bytes: int = 4 * 1024 * 1024
    delay_levels_ms: tuple[int, ...] = DEFAULT_DELAY_LEVELS_MS
    max_topic_queues: int = 1024
    transaction_timeout_ms: int = 6000
    max_delay_ms: int = DEFAULT_MAX_DELAY_SECONDS * 1000


@dataclass(frozen=True, slots=True)
class CheckPolicy:
    """Check-back: how often, how many times, and how long a producer instance counts as live."""

    check_max: int = 15
    interval_ms: int = 30_000
    producer_expiry_ms: int = 120_000
    push_timeout_ms: int = 3_000
    broker_id: str = "broker"
    unreachable_ms: int = 30_000
    undelivered_alert_ms: int = 3_600_000
    trace: bool = True  # write CHECKED and RESUMED trace events


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """Consumer groups: creation, retries and dead letters, and member liveness."""

    auto_create_groups: bool = True
    max_reconsume_times: int = 16
    delay_levels_ms: tuple[int, ...] = DEFAULT_DELAY_LEVELS_MS  # the schedule sends wait too
    consumer_expiry_ms: int = 120_000
    broker_id: str = "broker"
    trace: bool = True  # record the clients' trace reports (CLIENT_PUB, CLIENT_SUB)


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What the purge keeps (docs/store.md, "Retention").

    ``retention_ms``: messages, deliveries, resolved halves, trace events and purged-id records
    older than this go, unless something still needs them.  ``dead_letter_retention_ms``: the
    same for %DLQ% topics (their own retention).  ``hard_limit_ms``: a message a consumer group
    has not yet passed is kept until it is this old, then expired (counted, logged); None: kept
    until consumed.  ``wait_for_export``: nothing the reconciliation export (``export_watermark``)
    has not read goes."""

    retention_ms: int = 48 * 3_600_000
    dead_letter_retention_ms: int = 7 * 24 * 3_600_000
    hard_limit_ms: int | None = None
    wait_for_export: bool = True
    export_watermark: str = "reconcile-export"
    batch: int = 1000
    broker_id: str = "broker"
