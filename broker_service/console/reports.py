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
class Report:
    name: str  # the directory, relative to the reports directory (one segment)
    date: str
    status: str
    critical: int | None
    warning: int | None
    counts: dict[str, int] = field(default_factory=dict)
    has_html: bool = False


def _summary(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
        found.append(
            Report(
                name=folder.name,
                date=str(data.get("date") or folder.name.removeprefix("date=")),
                status=str(data.get("status") or "unknown"),
                critical=_count(data.get("critical")),
                warning=_count(data.get("warning")),
                counts=per_kind,
                has_html=html,
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
