"""The human report of a run: ``report.html`` (counts per kind as a bar chart, the trend over
earlier days as lines, samples of each kind), ``summary.md`` and ``summary.json``.  Pure Python:
it is given the numbers and writes files."""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import itertools
import json
from pathlib import Path
from typing import Any

from spark_reconcile.anomalies import CRITICAL, KINDS, SEVERITY, WARNING

CLEAN, WARNINGS, CRITICALS = 0, 1, 2
COLORS = {CRITICAL: "#c0392b", WARNING: "#e67e22"}
PALETTE = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
]


@dataclasses.dataclass(frozen=True)
class Summary:
    day: dt.date
    source: str
    window: dict[str, int]
    counts: dict[str, int]
    samples: dict[str, list[dict[str, Any]]]
    trend: list[tuple[dt.date, dict[str, int]]]
    ledgers: tuple[str, ...]

    def total(self, severity: str) -> int:
        return sum(n for kind, n in self.counts.items() if SEVERITY[kind] == severity)

    @property
    def exit_code(self) -> int:
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
            "critical": self.total(CRITICAL),
            "warning": self.total(WARNING),
            "counts": {k: {"severity": SEVERITY[k], "count": self.counts[k]} for k in KINDS},
            "trend": [{"date": d.isoformat(), "counts": c} for d, c in self.trend],
        }


def write_report(summary: Summary, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "summary.json": json.dumps(summary.to_json(), indent=2) + "\n",
        "summary.md": markdown(summary),
        "report.html": html_report(summary),
    }
    written = []
    for name, text in files.items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def markdown(summary: Summary) -> str:
    lines = [
        f"# halfmq reconciliation {summary.day.isoformat()}: {summary.status}",
        "",
        f"{summary.total(CRITICAL)} critical, {summary.total(WARNING)} warnings "
        f"(source: {summary.source}; ledgers: {', '.join(summary.ledgers) or 'none'}).",
        "",
        "| kind | severity | count |",
        "|---|---|---:|",
    ]
    lines += [f"| {k} | {SEVERITY[k]} | {summary.counts[k]} |" for k in KINDS]
    return "\n".join(lines) + "\n"


def _bars(counts: dict[str, int]) -> str:
    width, row, label = 640, 22, 190
    top = max([*counts.values(), 1])
    parts = [f'<svg width="{width}" height="{row * len(KINDS) + 10}" role="img">']
    for i, kind in enumerate(KINDS):
        n = counts[kind]
        bar = int((width - label - 60) * n / top)
        y = i * row + 4
        parts.append(
            f'<text x="{label - 6}" y="{y + 14}" text-anchor="end">{kind}</text>'
            f'<rect x="{label}" y="{y}" width="{bar}" height="{row - 6}" '
            f'fill="{COLORS[SEVERITY[kind]]}"/>'
            f'<text x="{label + bar + 4}" y="{y + 14}">{n}</text>'
        )
    return "".join(parts) + "</svg>"


def _trend(trend: list[tuple[dt.date, dict[str, int]]]) -> str:
    if len(trend) < 2:
        return "<p>No earlier days yet.</p>"
    width, height, pad = 640, 240, 40
    top = max([max(c.values(), default=0) for _, c in trend] + [1])
    step = (width - 2 * pad) / (len(trend) - 1)

    def point(i: int, n: int) -> str:
        return f"{pad + i * step:.1f},{height - pad - (height - 2 * pad) * n / top:.1f}"

    parts = [f'<svg width="{width}" height="{height}" role="img">']
    parts.append(
        f'<text x="{pad}" y="{height - 10}">{trend[0][0].isoformat()}</text>'
        f'<text x="{width - pad}" y="{height - 10}" text-anchor="end">'
        f'{trend[-1][0].isoformat()}</text><text x="4" y="{pad}">{top}</text>'
    )
    shown = [k for k in KINDS if any(c.get(k, 0) for _, c in trend)]
    colored = list(zip(itertools.cycle(PALETTE), shown, strict=False))  # more kinds: colors again
    for color, kind in colored:
        points = " ".join(point(i, c.get(kind, 0)) for i, (_, c) in enumerate(trend))
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}">'
            f"<title>{kind}</title></polyline>"
        )
    parts.append("</svg>")
    legend = "".join(f'<span style="color:{c}">&#9632; {k}</span> ' for c, k in colored)
    return "".join(parts) + f"<p>{legend}</p>"


def _samples(summary: Summary) -> str:
    columns = ("transaction_id", "msg_id", "keys", "business_id", "consumer_group", "reason")
    parts = []
    for kind in KINDS:
        rows = summary.samples.get(kind, [])
        if not rows:
            continue
        head = "".join(f"<th>{c}</th>" for c in columns)
        body = "".join(
            "<tr>"
            + "".join(f"<td>{html.escape(str(r.get(c) or ''))}</td>" for c in columns)
            + "</tr>"
            for r in rows
        )
        parts.append(
            f"<h3>{kind} ({SEVERITY[kind]}, {summary.counts[kind]})</h3>"
            f"<table><tr>{head}</tr>{body}</table>"
        )
    return "".join(parts) or "<p>Nothing to show: every transaction is where it should be.</p>"


def html_report(summary: Summary) -> str:
    title = f"halfmq reconciliation {summary.day.isoformat()}"
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:90%}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{style}</style></head><body><h1>{title}: {summary.status}</h1>"
        f"<p>{summary.total(CRITICAL)} critical, {summary.total(WARNING)} warnings. "
        f"Source: {html.escape(summary.source)}. "
        f"Ledgers: {html.escape(', '.join(summary.ledgers) or 'none')}.</p>"
        f"<h2>Anomalies per kind</h2>{_bars(summary.counts)}"
        f"<h2>Trend</h2>{_trend(summary.trend)}"
        f"<h2>Samples</h2>{_samples(summary)}</body></html>\n"
    )
