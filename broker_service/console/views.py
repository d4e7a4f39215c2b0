"""View models: the domain's records as a page shows them (RFC 3339 times, ages, figures that
may be unknown), and the rates the overview and the topics page compute from samples taken as
they are read (the metrics' counters, the topics' offsets)."""

from __future__ import annotations

import base64
import datetime as dt
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from broker_service.domain.messages.topics import TopicView
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


def due(ms: int | None, now_ms: int | None = None) -> str:
    """When something is next due (a half's next check): "in 4s" ahead, "due now" once its time
    has come, "overdue by 17s" from a second past it -- never "17s ago" for what has not
    happened yet."""
    if ms is None:
        return "-"
    now = int(time.time() * 1000) if now_ms is None else now_ms
    late = (now - ms) // 1000
    if late < 0:
        return f"in {_span(-late)}"
    return "due now" if late == 0 else f"overdue by {_span(late)}"


def duration(seconds: int) -> str:
    """A round span in the largest unit that divides it: 1 day, 2 days, 1 h, 10 min, 45 s."""
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}" + ("s" if unit == "day" and n > 1 else "")
    return f"{seconds} s"


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


BODY_PREVIEW = 512  # characters of a body a transaction's page shows before "show all"


@dataclass(frozen=True, slots=True)
class Body:
    """A message's body as a page shows it (escaped by the template, as every value): the text,
    its first ``BODY_PREVIEW`` characters when longer (the page then offers all of it), or for a
    binary (base64) body its size and its base64 text."""

    size: int  # bytes
    text: str
    preview: str | None  # None: short enough to show whole
    binary: bool


def body_of(raw: bytes, encoding: str) -> Body:
    binary = encoding == "base64"
    if binary:
        text = base64.b64encode(raw).decode("ascii")
    else:
        text = raw.decode("utf-8", errors="replace")
    preview = text[:BODY_PREVIEW] if len(text) > BODY_PREVIEW else None
    return Body(len(raw), text, preview, binary)


def known(value: int | None) -> str | int:
    """A figure the store may not have answered: "unknown", never a guessed 0."""
    return UNKNOWN if value is None else value


FILTERS: dict[str, Callable[..., Any]] = {
    "rfc3339": rfc3339,
    "age": age,
    "due": due,
    "duration": duration,
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


class Window:
    """Running totals sampled each time a page is read, and their rates per second: the newest
    sample against the oldest of the last ``seconds`` (None -- "measuring..." -- until two are
    ``min_span`` seconds apart). It keeps at most ``max_samples``: past that the second oldest
    goes, so the oldest still spans the minute however often the page is read. A total that went
    down (a topic deleted and made again) starts the window afresh rather than show a negative
    rate."""

    def __init__(self, seconds: float = 60, min_span: float = 1, max_samples: int = 64) -> None:
        self.seconds = seconds
        self.min_span = min_span
        self.max_samples = max(2, max_samples)
        self._samples: deque[tuple[float, tuple[float, ...]]] = deque()

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, at: float, values: Sequence[float]) -> list[float | None]:
        sample = tuple(values)
        samples = self._samples
        while samples and samples[0][0] < at - self.seconds:
            samples.popleft()
        if samples and any(
            now < before for now, before in zip(sample, samples[-1][1], strict=True)
        ):
            samples.clear()
        if len(samples) >= self.max_samples:
            del samples[1]
        samples.append((at, sample))
        first_at, first = samples[0]
        span = at - first_at
        if span < self.min_span:
            return [None] * len(sample)
        return [(now - before) / span for now, before in zip(sample, first, strict=True)]


class Rates:
    """Per-second rates of the broker's counters, from samples taken when the overview is shown
    (a :class:`Window`: the newest against the oldest of the last minute)."""

    def __init__(self, metrics: BrokerMetrics, clock: Callable[[], float] = time.monotonic):
        self.metrics = metrics
        self.clock = clock
        self._window = Window()

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
        values = self._read()
        rates = self._window.add(self.clock(), values)
        return [
            Rate(label, value, per_second)
            for (label, _, _), value, per_second in zip(_RATE_SERIES, values, rates, strict=True)
        ]


class TopicRates:
    """Messages per second into each topic over the last minute, from the store's offsets: a
    :class:`Window` per topic of the sum of its queues' max offsets, sampled each time the topics
    page or the overview reads the topics. The offsets are the store's, so the figure counts what
    every broker sharing it stored. A topic no longer listed (deleted) loses its window."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._windows: dict[str, Window] = {}

    def observe(self, topics: Iterable[TopicView]) -> dict[str, float | None]:
        at = self.clock()
        windows: dict[str, Window] = {}
        rates: dict[str, float | None] = {}
        for view in topics:
            name = view.topic.name
            window = windows[name] = self._windows.get(name) or Window()
            (rates[name],) = window.add(at, [sum(q.max_offset for q in view.queues)])
        self._windows = windows
        return rates
