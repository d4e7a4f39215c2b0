"""The reconciliation job's reports, read from a directory: the broker never imports the job.

``spark_reconcile`` writes, per day, ``<out>/report/date=YYYY-MM-DD/`` with ``summary.json``
(date, status, critical and warning totals, counts per kind) and ``report.html``.  The console
is pointed at ``<out>/report`` (``console_reports_dir``) and finds every ``summary.json`` up to two
levels down; a directory without one but with an HTML report is listed without figures.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_NAME = re.compile(r"^[A-Za-z0-9._=-]{1,128}$")  # a report's directory name, as a URL segment
MAX_REPORTS = 365


@dataclass(frozen=True, slots=True)
class Break:
    """One break the job listed (``summary.json``'s ``breaks.rows``), as the console shows it."""

    break_id: str
    kind: str
    severity: str
    state: str  # new | still_open | changed_kind | resolved (closed by the job)
    status: str  # the operator's status when the job ran (closed: the data resolved it)
    first_seen: str
    age_bucket: str
    overdue: bool
    transaction_id: str
    business_id: str
    consumer_group: str
    amount: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class Report:
    name: str  # the directory, relative to the reports directory (one segment)
    date: str
    status: str
    critical: int | None
    warning: int | None
    counts: dict[str, int] = field(default_factory=dict)
    has_html: bool = False
    breaks: tuple[Break, ...] = ()
    open_breaks: int | None = None
    overdue: int | None = None


def _summary(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_BREAK_ID = re.compile(r"^[0-9a-f]{16}$")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _breaks(rows: Any) -> tuple[Break, ...]:
    """The listed breaks of a ``summary.json``; a row without a well-formed id is left out."""
    if not isinstance(rows, list):
        return ()
    found = []
    for row in rows:
        if not isinstance(row, dict) or not _BREAK_ID.match(_text(row.get("break_id"))):
            continue
        found.append(
            Break(
                break_id=_text(row["break_id"]),
                kind=_text(row.get("kind")),
                severity=_text(row.get("severity")),
                state=_text(row.get("state")),
                status=_text(row.get("status")) or "open",
                first_seen=_text(row.get("first_seen")),
                age_bucket=_text(row.get("age_bucket")),
                overdue=row.get("overdue") is True,
                transaction_id=_text(row.get("transaction_id")),
                business_id=_text(row.get("business_id")),
                consumer_group=_text(row.get("consumer_group")),
                amount=_count(row.get("amount")),
                reason=_text(row.get("reason")),
            )
        )
    return tuple(found)


def read_report(directory: Path, name: str) -> Report | None:
    """The report of one directory, by its plain name."""
    if not _NAME.match(name) or name in (".", ".."):
        return None
    return next((r for r in read_reports(directory) if r.name == name), None)


def read_reports(directory: Path) -> list[Report]:
    """The reports, newest first (by their date, else their directory's name)."""
    if not directory.is_dir():
        return []
    found: list[Report] = []
    for folder in sorted(p for p in directory.iterdir() if p.is_dir() and _NAME.match(p.name)):
        summary_path = folder / "summary.json"
        html = (folder / "report.html").is_file()
        if not summary_path.is_file() and not html:
            continue
        data = _summary(summary_path)
        counts = data.get("counts") if isinstance(data.get("counts"), dict) else {}
        per_kind = {
            str(kind): n
            for kind, entry in (counts or {}).items()
            if (n := _count(entry.get("count") if isinstance(entry, dict) else entry)) is not None
        }
        figures = data.get("breaks") if isinstance(data.get("breaks"), dict) else {}
        found.append(
            Report(
                name=folder.name,
                date=str(data.get("date") or folder.name.removeprefix("date=")),
                status=str(data.get("status") or "unknown"),
                critical=_count(data.get("critical")),
                warning=_count(data.get("warning")),
                counts=per_kind,
                has_html=html,
                breaks=_breaks((figures or {}).get("rows")),
                open_breaks=_count((figures or {}).get("open")),
                overdue=_count((figures or {}).get("overdue")),
            )
        )
    found.sort(key=lambda r: (r.date, r.name), reverse=True)
    return found[:MAX_REPORTS]


def report_html(directory: Path, name: str) -> str | None:
    """The HTML report of one report directory (a plain name: nothing else can be read)."""
    if not _NAME.match(name) or name in (".", ".."):
        return None
    path = directory / name / "report.html"
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
