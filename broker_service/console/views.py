"""View models: the domain's records as a page shows them (RFC 3339 times, ages, figures that
may be unknown), and the rates the overview computes from the metrics' counters."""

from __future__ import annotations

import datetime as dt
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker_service.metrics import BrokerMetrics

UNKNOWN = "unknown"


def rfc3339(ms: int | None) -> str:
    if ms is None:
        return "-"
    at = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def age(ms: int | None, now_ms: int | None = None) -> str:
    """How long ago (or, ahead, "in ..."), coarsely: 4s, 3m 20s, 2h 5m, 3d 4h."""
    if ms is None:
        return "-"
    now = int(time.time() * 1000) if now_ms is None else now_ms
    delta = (now - ms) // 1000
    text = _span(abs(delta))
    return f"{text} ago" if delta >= 0 else f"in {text}"


def _span(seconds: int) -> str:
    for unit, size, smaller, small_size in (
        ("d", 86400, "h", 3600),
        ("h", 3600, "m", 60),
        ("m", 60, "s", 1),
    ):
        if seconds >= size:
            rest = (seconds % size) // small_size
            return f"{seconds // size}{unit}" + (f" {rest}{smaller}" if rest else "")
    return f"{seconds}s"


def size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def known(value: int | None) -> str | int:
    """A figure the store may not have answered: "unknown", never a guessed 0."""
    return UNKNOWN if value is None else value


FILTERS: dict[str, Callable[..., Any]] = {
    "rfc3339": rfc3339,
    "age": age,
    "size": size,
    "known": known,
}


# The counters the overview turns into rates: (label on the page, metric sample, its labels).
_RATE_SERIES: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("messages sent", "halfmq_messages_sent_total", {"duplicate": "false"}),
    ("halves stored", "halfmq_half_messages_total", {}),
    ("committed", "halfmq_transactions_resolved_total", {"state": "COMMITTED"}),
    ("rolled back", "halfmq_transactions_resolved_total", {"state": "ROLLED_BACK"}),
    ("delivered", "halfmq_consumer_messages_total", {"outcome": "delivered"}),
    ("acked", "halfmq_consumer_messages_total", {"outcome": "acked"}),
)


@dataclass(frozen=True, slots=True)
class Rate:
    name: str
    total: float
    per_second: float | None  # None until two samples are far enough apart


class Rates:
    """Per-second rates of the broker's counters, from samples taken when the overview is shown
    (the newest against the oldest of the last minute)."""

    def __init__(self, metrics: BrokerMetrics, clock: Callable[[], float] = time.monotonic):
        self.metrics = metrics
        self.clock = clock
        self._samples: deque[tuple[float, list[float]]] = deque()

    def _read(self) -> list[float]:
        samples = [s for metric in self.metrics.registry.collect() for s in metric.samples]
        return [
            sum(
                s.value
                for s in samples
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
            )
            for _, name, labels in _RATE_SERIES
        ]

    def now(self) -> list[Rate]:
        at, values = self.clock(), self._read()
        while self._samples and self._samples[0][0] < at - 60:
            self._samples.popleft()
        self._samples.append((at, values))
        first_at, first = self._samples[0]
        span = at - first_at
        return [
            Rate(label, value, (value - before) / span if span >= 1 else None)
            for (label, _, _), value, before in zip(_RATE_SERIES, values, first, strict=True)
        ]
