"""The human report of a run: ``report.html`` (the page an operator acts on: see
``report_page.py``), ``summary.md`` and ``summary.json``.  Pure Python: it is given the numbers
and the rows, and writes files.

``summary.json`` is what other tools read (the broker's console, the demo, the next days' trend):
``status``, ``exit_code``, the totals per severity and the counts per kind.
"""

from __future__ import annotations

import json
from pathlib import Path

from spark_reconcile.anomalies import INFO, KINDS, SEVERITIES, SEVERITY
from spark_reconcile.report_page import html_report, severity_history
from spark_reconcile.summary import Summary


def write_report(summary: Summary, directory: Path) -> list[Path]:
    """The three files in ``directory`` (``<out>/report/date=D``); the page's trend reads the
    earlier days' ``summary.json`` next to it."""
    directory.mkdir(parents=True, exist_ok=True)
    history = severity_history(directory.parent, summary)
    files = {
        "summary.json": json.dumps(summary.to_json(), indent=2) + "\n",
        "summary.md": markdown(summary),
        "report.html": html_report(summary, history),
    }
    written = []
    for name, text in files.items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def totals_line(summary: Summary) -> str:
    """``2 critical, 1 warning, 1 info`` -- the severities in the order of urgency."""
    return ", ".join(f"{summary.total(s)} {s}" for s in SEVERITIES)


def markdown(summary: Summary) -> str:
    lines = [
        f"# halfmq reconciliation {summary.day.isoformat()}: {summary.status}",
        "",
        f"{totals_line(summary)} (source: {summary.source}; "
        f"ledgers: {', '.join(summary.ledgers) or 'none'}).",
        "",
        "| kind | severity | count |",
        "|---|---|---:|",
    ]
    lines += [f"| {k} | {SEVERITY[k]} | {summary.counts[k]} |" for k in KINDS]
    if summary.total(INFO):
        lines += ["", f"{INFO}: resolved, nothing to do; it does not change the status."]
    if summary.breaks is not None:
        lines += _breaks_markdown(summary)
    return "\n".join(lines) + "\n"


def _breaks_markdown(summary: Summary) -> list[str]:
    assert summary.breaks is not None
    data = summary.breaks.to_json()
    buckets = ", ".join(f"{b} {n}" for b, n in data["age_buckets"].items())
    lines = [
        "",
        f"Open breaks: {data['open']} ({data['new']} new, {data['carried']} carried), "
        f"{data['resolved']} closed by the data, {data['overdue']} overdue; ages: {buckets}.",
    ]
    if data["per_kind"]:
        lines += [
            "",
            "| kind | open | carried | overdue | not explained | amount |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {k} | {v['open']} | {v['carried']} | {v['overdue']} | {v['unhandled']} | "
            f"{v['amount']} |"
            for k, v in data["per_kind"].items()
        ]
    return lines
