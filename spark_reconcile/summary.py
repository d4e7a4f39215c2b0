"""One run's figures (:class:`Summary`): what the report pages are made of, and its verdict."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from spark_reconcile.anomalies import CRITICAL, KINDS, SEVERITIES, SEVERITY, WARNING

CLEAN, WARNINGS, CRITICALS = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Summary:
    """One run's figures.  ``rows`` holds the anomalies the report lists per kind (every one up
    to the job's cap; ``counts`` has the full numbers); ``console_url`` (None: none configured)
    is where the report links each transaction."""

    day: dt.date
    source: str
    window: dict[str, int]
    counts: dict[str, int]
    rows: dict[str, list[dict[str, Any]]]
    trend: list[tuple[dt.date, dict[str, int]]]
    ledgers: tuple[str, ...]
    console_url: str | None = None

    def total(self, severity: str) -> int:
        return sum(n for kind, n in self.counts.items() if SEVERITY[kind] == severity)

    @property
    def exit_code(self) -> int:
        """Info never raises it: a resolved dead letter leaves a day clean."""
        if self.total(CRITICAL):
            return CRITICALS
        return WARNINGS if self.total(WARNING) else CLEAN

    @property
    def status(self) -> str:
        return {CLEAN: "clean", WARNINGS: "warnings", CRITICALS: "critical"}[self.exit_code]

    def to_json(self) -> dict[str, Any]:
        return {
            "date": self.day.isoformat(),
            "status": self.status,
            "exit_code": self.exit_code,
            "source": self.source,
            "ledgers": list(self.ledgers),
            "window": self.window,
            **{severity: self.total(severity) for severity in SEVERITIES},
            "counts": {k: {"severity": SEVERITY[k], "count": self.counts[k]} for k in KINDS},
            "trend": [{"date": d.isoformat(), "counts": c} for d, c in self.trend],
        }
