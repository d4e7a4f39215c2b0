"""``report.html``: the page an operator acts on.

What it shows, top to bottom: the day's status and its totals per severity; the trend of those
totals over the earlier days (read from their ``summary.json`` next to today's), as an inline
SVG; a legend of every kind -- what it means, what to do, today's count; and every anomaly the
job listed, in one table.  The page is one file with no external asset (it opens from disk, in
a mail, or sandboxed in the broker's console): with scripts on, a little embedded JavaScript
filters the table by kind and severity and pages it; with scripts off (the console serves the
page with scripts disabled) every row is shown.  Transaction ids link to the console when a
console URL is configured.  Everything that comes from data is escaped by Jinja2.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup, escape

from spark_reconcile.anomalies import (
    CRITICAL,
    INFO,
    KINDS,
    REGISTRY,
    SEVERITIES,
    SEVERITY,
    WARNING,
)
from spark_reconcile.policy import default_policy
from spark_reconcile.summary import BUCKETS

if TYPE_CHECKING:
    from spark_reconcile.summary import Summary

TREND_DAYS = 30
PAGE_SIZE = 50
COLORS = {CRITICAL: "#c0392b", WARNING: "#e67e22", INFO: "#2e86c1"}
MEANING = {
    CRITICAL: "money or messages are wrong: exit 2, page someone",
    WARNING: "late or missing, may need a hand: exit 1",
    INFO: "resolved, nothing to do: does not change the status",
}
_DAY_DIR = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")


@dataclasses.dataclass(frozen=True)
class DayTotals:
    """A day of the trend: its totals per severity, or None when it has no report."""

    day: dt.date
    totals: dict[str, int] | None


def severity_history(
    reports_dir: Path, summary: Summary, days: int = TREND_DAYS
) -> list[DayTotals]:
    """The totals per severity of the days up to the summary's (at most ``days``), oldest first,
    from the first day that has a report: earlier days from ``reports_dir/date=D/summary.json``,
    today from the summary.  A day in between without a readable summary has no totals (the job
    did not run, or failed), which the chart shows as a gap."""
    first = summary.day - dt.timedelta(days=days - 1)
    found: dict[dt.date, dict[str, int]] = {}
    for path in reports_dir.glob("date=*/summary.json"):
        match = _DAY_DIR.match(path.parent.name)
        if match is None:
            continue
        day = dt.date.fromisoformat(match[1])
        totals = _totals(path)
        if first <= day < summary.day and totals is not None:
            found[day] = totals
    found[summary.day] = {s: summary.total(s) for s in SEVERITIES}
    start = min(found)
    span = (summary.day - start).days + 1
    return [DayTotals(d, found.get(d)) for d in (start + dt.timedelta(days=i) for i in range(span))]


def _totals(path: Path) -> dict[str, int] | None:
    """Totals per severity of one ``summary.json``, summed from its counts per kind (so a kind
    that changed severity since is counted as it was then); None when it cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        counts = data["counts"]
        totals = dict.fromkeys(SEVERITIES, 0)
        for entry in counts.values():
            totals[str(entry["severity"])] = totals.get(str(entry["severity"]), 0) + int(
                entry["count"]
            )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return totals


def trend_svg(history: list[DayTotals]) -> Markup:
    """Stacked bars per day (critical on top), the y axis up to the busiest day, dates under the
    bars (one a week past ten days); each bar tells its figures on hover; a day without a report
    is a grey dash."""
    width, height, left, bottom, top_pad = 720, 200, 44, 28, 12
    plot_h = height - bottom - top_pad
    slot = (width - left - 8) / max(len(history), 1)
    bar = max(min(slot * 0.7, 28), 2)
    top = max([1, *(sum(d.totals.values()) for d in history if d.totals)])
    parts = [
        f'<svg id="trend" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'role="img" aria-label="anomalies per day by severity">',
        f'<line x1="{left}" y1="{top_pad + plot_h}" x2="{width - 4}" y2="{top_pad + plot_h}" '
        'stroke="#999"/>',
    ]
    for value in sorted({0, top // 2, top}):
        y = top_pad + plot_h - plot_h * value / top
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{width - 4}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="axis">{value}</text>'
        )
    every = 1 if len(history) <= 10 else 7  # a date under each bar, or one a week back from today
    for i, day in enumerate(history):
        x = left + i * slot + (slot - bar) / 2
        label = day.day.isoformat()
        if i == 0 or (len(history) - 1 - i) % every == 0:
            parts.append(
                f'<text x="{x + bar / 2:.1f}" y="{height - 8}" text-anchor="middle" '
                f'class="axis">{label[5:]}</text>'
            )
        if day.totals is None:
            parts.append(
                f'<rect x="{x:.1f}" y="{top_pad + plot_h - 2}" width="{bar:.1f}" height="2" '
                f'fill="#bbb"><title>{label}: no report</title></rect>'
            )
            continue
        y = top_pad + plot_h
        for severity in reversed(SEVERITIES):  # info at the bottom, critical on top
            n = day.totals.get(severity, 0)
            if not n:
                continue
            h = plot_h * n / top
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{COLORS[severity]}" class="bar-{severity}">'
                f"<title>{label}: {n} {severity}</title></rect>"
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def _code(text: str) -> Markup:
    """Escaped prose whose `backticked` words become <code>."""
    pieces = str(escape(text)).split("`")
    return Markup("".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces)))


def _utc(ms: Any) -> str:
    if ms is None:
        return ""
    return dt.datetime.fromtimestamp(int(ms) / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def transaction_link(console_url: str | None, transaction_id: str | None) -> str | None:
    """``{console}/console/transactions/{id}`` (the id quoted as a path segment), or None."""
    if not console_url or not transaction_id:
        return None
    return f"{console_url.rstrip('/')}/console/transactions/{quote(transaction_id, safe='')}"


def _table_rows(summary: Summary) -> list[dict[str, Any]]:
    """Every listed anomaly, most urgent severity first, then in the registry's order of kinds
    and by creation time."""
    rank = {kind: i for i, kind in enumerate(KINDS)}
    urgency = {severity: i for i, severity in enumerate(SEVERITIES)}
    rows = [row for kind in KINDS for row in summary.rows.get(kind, [])]
    rows.sort(
        key=lambda r: (
            urgency.get(str(r["severity"]), len(urgency)),
            rank.get(str(r["kind"]), len(rank)),
            r.get("created_at") or 0,
            str(r.get("transaction_id") or ""),
        )
    )
    return [
        {
            **row,
            "href": transaction_link(summary.console_url, row.get("transaction_id")),
            "created": _utc(row.get("created_at")),
            "event": _utc(row.get("event_at")),
        }
        for row in rows
    ]


@cache
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("spark_reconcile", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["code"] = _code
    return env


def _age(ms: int | None) -> str:
    if ms is None:
        return "none"
    return (
        f"{ms / 86_400_000:g}d"
        if ms % 3_600_000 == 0 and ms >= 86_400_000
        else f"{ms / 3_600_000:g}h"
    )


def policy_line(summary: Summary) -> str:
    """How the exit code was decided: the team's policy file, or the fixed rule."""
    policy = summary.policy
    if policy is None or policy.from_file is None:
        return "the fixed rule (critical 2, warning 1); no --policy file"
    return f"the thresholds of {policy.from_file}"


def _break_rows(summary: Summary) -> list[dict[str, Any]]:
    rows = summary.breaks.rows if summary.breaks is not None else []
    return [
        {**row, "href": transaction_link(summary.console_url, row.get("transaction_id"))}
        for row in rows
    ]


def html_report(summary: Summary, history: list[DayTotals]) -> str:
    listed = {kind: len(summary.rows.get(kind, [])) for kind in KINDS}
    policy = summary.policy or default_policy(SEVERITY)
    return (
        _templates()
        .get_template("report.html")
        .render(
            summary=summary,
            severities=SEVERITIES,
            colors=COLORS,
            meaning=MEANING,
            totals={s: summary.total(s) for s in SEVERITIES},
            kinds=REGISTRY,
            rows=_table_rows(summary),
            cut=[(k, listed[k], summary.counts[k]) for k in KINDS if summary.counts[k] > listed[k]],
            trend=trend_svg(history),
            days=len(history),
            window={k: _utc(v) for k, v in summary.window.items()},
            page_size=PAGE_SIZE,
            breaks=summary.breaks.to_json() if summary.breaks is not None else None,
            break_rows=_break_rows(summary),
            buckets=BUCKETS,
            levels=summary.levels(),
            ages={k: _age(policy.max_age_ms(k)) for k in KINDS},
            policy_line=policy_line(summary),
            stakes=summary.stakes.to_json() if summary.stakes is not None else None,
            stakes_rates=summary.stakes.rates if summary.stakes is not None else [],
            cutoffs=[
                {**c, "at": _utc(c.get("last_at"))}
                for c in (summary.stakes.cutoffs if summary.stakes is not None else [])
            ],
        )
    )
